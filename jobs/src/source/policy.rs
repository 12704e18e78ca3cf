//! Which module source a submit is checked against, and where its outputs
//! come from: the policy of allowed sources, a requested source resolved
//! against it, and the [`Sources`] a submit asks for a checker and a names
//! eval ([`super::fleet::FleetSources`] in the api, [`OneSource`] in a
//! local run) (MS-6).

use super::{ModuleSource, SourceError};
use crate::nix::Names;
use crate::submit::SubmitError;
use crate::validate::Checker;
use futures::future::BoxFuture;
use serde_json::Value;
use std::sync::Arc;

/// Where module sources may come from (MS-1, MS-6, MS-8).
#[derive(Debug, Clone, Default)]
pub struct SourcePolicy {
    /// Trusted URL prefixes; empty allows every git source.
    pub trusted: Vec<String>,
    /// Accept `path:` sources and `file://` repositories (local runs and tests only).
    pub allow_path: bool,
    /// The self-pin stored for a submit without a source (MS-8).
    pub self_source: Option<String>,
}

impl SourcePolicy {
    /// The policy `SLIPWAY_TRUSTED_SOURCES`, `SLIPWAY_ALLOW_PATH_SOURCES` and
    /// `SLIPWAY_SELF_SOURCE` set.
    pub fn of(sources: &crate::config::SourcesConfig) -> Self {
        Self {
            trusted: sources.trusted_sources.clone(),
            allow_path: sources.allow_path_sources,
            self_source: sources.self_source.clone(),
        }
    }

    /// MS-8: a well-formed git self-pin, or `None` (a malformed pin counts as none).
    pub fn self_pin(&self) -> Option<String> {
        let pin = self.self_source.as_deref()?;
        match ModuleSource::parse(pin) {
            Ok(ModuleSource::Git { .. }) => Some(pin.to_owned()),
            _ => None,
        }
    }
}

/// A submit's module source after MS-1/MS-6/MS-8 checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// No source was given: validate with the built-in source and store the
    /// self-pin, if any (MS-8).
    BuiltIn {
        /// The self-pin to store; `None` floats.
        pin: Option<String>,
    },
    /// An explicit, allowed source: validate with its own schema (no fallback).
    Explicit(String),
}

impl SourcePolicy {
    /// Parses and allowlists a requested source (MS-1, MS-6), or resolves an
    /// absent one to the self-pin (MS-8). Nothing is fetched.
    pub fn resolve(&self, requested: Option<&str>) -> Result<Resolved, SourceError> {
        match requested {
            None => Ok(Resolved::BuiltIn { pin: self.self_pin() }),
            Some(s) if self.self_pin().as_deref() == Some(s) => Ok(Resolved::BuiltIn { pin: Some(s.to_owned()) }),
            Some(s) => {
                ModuleSource::parse(s)?.check_allowed(&self.trusted, self.allow_path)?;
                Ok(Resolved::Explicit(s.to_owned()))
            }
        }
    }
}

/// The module sources a submit can be checked against: for a requested
/// source (or none), the checker of its schema and the source to store; and
/// the names eval of a checked configuration (EV-1). The api's are
/// [`crate::source::fleet::FleetSources`].
pub trait Sources: Send + Sync {
    /// The checker and the stored source for `requested` (MS-1, MS-6,
    /// MS-8), or why the submit cannot use it. The stored source of a git
    /// source is pinned to the revision its outputs were built from.
    fn checker_for<'a>(&'a self, requested: Option<&'a str>) -> BoxFuture<'a, Result<CheckerFor, SubmitError>>;

    /// EV-1: the names eval of `configuration` (checked, without secret
    /// values) on `stored_source`, or why it was skipped.
    fn names<'a>(
        &'a self,
        stored_source: Option<&'a str>,
        configuration: &'a Value,
    ) -> BoxFuture<'a, Result<NamesEval, SubmitError>>;
}

/// The checker of a source's outputs and the module source to store with
/// the submit (pinned), as [`Sources::checker_for`] answers.
pub type CheckerFor = (Arc<Checker>, Option<String>);

/// A names eval at submit (EV-1): done, or skipped and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamesEval {
    /// The nodes, their DNS names and the disabled applications.
    Evaluated(Names),
    /// Not run because every nix slot is busy (MS-7): the deploy evaluates
    /// the configuration itself.
    Busy(String),
    /// Not run for another reason (no live worker of the `nix` queue, a
    /// failure on the worker's side, a local run): the deploy evaluates the
    /// configuration itself.
    Skipped(String),
}

/// One source its caller built itself (`slipway-worker run` builds the
/// outputs of the source it was given): only that reference is served.
#[derive(Debug)]
pub struct OneSource {
    /// The source's reference, as stored with the build (`path:<dir>`).
    pub reference: String,
    /// Its outputs, schema compiled.
    pub checker: Arc<Checker>,
}

impl Sources for OneSource {
    fn checker_for<'a>(&'a self, requested: Option<&'a str>) -> BoxFuture<'a, Result<CheckerFor, SubmitError>> {
        Box::pin(async move {
            match requested {
                Some(r) if r == self.reference => Ok((Arc::clone(&self.checker), Some(r.to_owned()))),
                other => Err(SubmitError::NotServed(other.unwrap_or("the built-in source").to_owned())),
            }
        })
    }

    fn names<'a>(&'a self, _: Option<&'a str>, _: &'a Value) -> BoxFuture<'a, Result<NamesEval, SubmitError>> {
        Box::pin(async { Ok(NamesEval::Skipped("a local run: the deploy evaluates the configuration itself".into())) })
    }
}
