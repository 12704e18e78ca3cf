//! Building a module source's outputs and evaluating its `names` with Nix
//! (MS-2, MS-7): every `nix-instantiate` and `nix-build` runs contained like
//! an effect ([`crate::effect::run_tool`]), under one deadline. Used by the
//! `nix` queue's jobs and by `slipway-worker run`. Only workers run Nix.

use crate::effect::{run_tool, EffectOutcome};
use crate::source::SourceOutputs;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The document outputs of MS-2: attribute and the file its out path holds.
pub const DOCUMENTS: [(&str, &str); 4] = [
    ("schema", "schema.json"),
    ("applicationSchemas", "applications.json"),
    ("renames", "renames.json"),
    ("meta", "meta.json"),
];

/// Why a `nix`-queue job, or one output of it, has no result (MS-6). The
/// code is stable (`GET`-able by front-ends); the message says which output
/// and why, never the build log, which stays on the job for operators.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct NixFailure {
    /// `output_missing`, `source_too_old`, `build_failed`, `fetch_failed`,
    /// `timeout`, `out_of_memory`, `output_too_large`, `source_too_large`
    /// or `source_unsafe`.
    pub code: FailureCode,
    /// The output concerned (`schema`, `names`, …), when one is.
    pub output: Option<String>,
    /// What went wrong, for the front-end.
    pub message: String,
}

/// The stable codes of [`NixFailure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCode {
    /// The source's `core` has no such output at all (it has no `schema`).
    OutputMissing,
    /// The source's `core` has a `schema` but is older than this output.
    SourceTooOld,
    /// Nix could not evaluate or build the output.
    BuildFailed,
    /// The source could not be fetched.
    FetchFailed,
    /// The fetch and build ran past `NIX_TIMEOUT` and were killed.
    Timeout,
    /// A Nix or git process of the job reached `NIX_MEMORY_LIMIT` (SEC-3).
    OutOfMemory,
    /// A document output (or a `names` output's node count) is larger than
    /// `SLIPWAY_OUTPUT_LIMIT` (`SLIPWAY_NODE_LIMIT`); it was not read.
    OutputTooLarge,
    /// The fetched source is larger than `SLIPWAY_SOURCE_LIMIT`; it was not kept.
    SourceTooLarge,
    /// The source's tree holds something a source may not, such as a
    /// symbolic link leaving the tree; the message names the path.
    SourceUnsafe,
}

impl FailureCode {
    /// The code as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OutputMissing => "output_missing",
            Self::SourceTooOld => "source_too_old",
            Self::BuildFailed => "build_failed",
            Self::FetchFailed => "fetch_failed",
            Self::Timeout => "timeout",
            Self::OutOfMemory => "out_of_memory",
            Self::OutputTooLarge => "output_too_large",
            Self::SourceTooLarge => "source_too_large",
            Self::SourceUnsafe => "source_unsafe",
        }
    }
}

impl NixFailure {
    fn new(code: FailureCode, output: Option<&str>, message: impl Into<String>) -> Self {
        Self { code, output: output.map(str::to_owned), message: message.into() }
    }

    /// A fetch that failed, timed out, or was refused by SEC-3's checks of
    /// its tree (`source_unsafe`, `source_too_large`).
    pub fn from_fetch(e: &crate::fetch::FetchError) -> Self {
        use crate::fetch::FetchError;
        let code = match e {
            FetchError::Timeout { .. } => FailureCode::Timeout,
            FetchError::Unsafe { .. } => FailureCode::SourceUnsafe,
            FetchError::TooLarge { .. } => FailureCode::SourceTooLarge,
            _ => FailureCode::FetchFailed,
        };
        Self::new(code, None, e.to_string())
    }
}

/// What a `schema_build` made of one (revision, provider): each document
/// output of MS-2 that built, and why each other one did not, plus whether
/// the `names` function is there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuiltSchema {
    /// The source as fetched: `git+<url>?rev=<commit>` or `path:<dir>`.
    pub pinned: String,
    /// The commit built, for a git source.
    pub revision: Option<String>,
    /// Each built document by attribute (`schema`, `applicationSchemas`, `renames`, `meta`).
    pub documents: BTreeMap<String, Value>,
    /// Each output that has no result (documents and `names`), and why.
    pub failures: BTreeMap<String, NixFailure>,
    /// Milliseconds each step took (`fetch`, `eval`, `build`).
    pub timings_ms: BTreeMap<String, u64>,
}

impl BuiltSchema {
    /// One document, or why it is not there.
    pub fn document(&self, attribute: &str) -> Result<&Value, NixFailure> {
        match (self.documents.get(attribute), self.failures.get(attribute)) {
            (Some(doc), _) => Ok(doc),
            (None, Some(why)) => Err(why.clone()),
            (None, None) => Err(NixFailure::new(
                FailureCode::OutputMissing,
                Some(attribute),
                format!("{}: no {attribute} output was built", self.pinned),
            )),
        }
    }

    /// The outputs a submit validates with (MS-2): `schema` and `meta` are
    /// needed; a missing `renames` migrates nothing (MG-5) and missing
    /// `applicationSchemas` serve no application schema.
    pub fn outputs(&self) -> Result<SourceOutputs, NixFailure> {
        let optional = |attribute: &str| self.documents.contains_key(attribute);
        Ok(SourceOutputs {
            schema: self.document("schema")?.clone(),
            meta: self.parsed("meta")?,
            renames: if optional("renames") { self.parsed("renames")? } else { Vec::new() },
            applications: if optional("applicationSchemas") {
                self.parsed("applicationSchemas")?
            } else {
                BTreeMap::new()
            },
        })
    }

    /// One document read as `T` (`renames` as `Vec<Rename>`, `meta` as
    /// [`crate::source::Meta`], …), or why it cannot be: not built, or not
    /// of its documented shape (`build_failed`).
    pub fn parsed<T: serde::de::DeserializeOwned>(&self, attribute: &str) -> Result<T, NixFailure> {
        serde_json::from_value(self.document(attribute)?.clone()).map_err(|e| {
            NixFailure::new(
                FailureCode::BuildFailed,
                Some(attribute),
                format!("{}: {attribute} is not of its documented shape: {e}", self.pinned),
            )
        })
    }
}

/// A provider name as it may go into a Nix string (letters, digits, `-`, `_`, `.`).
pub fn check_provider(name: &str) -> Result<(), String> {
    if !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
        Ok(())
    } else {
        Err(format!("provider {name:?} is not a name of letters, digits, '-', '_' and '.'"))
    }
}

/// The expression every build of a source goes through: `core/default.nix`
/// of `dir`, called with the provider when it takes one (an older `core`
/// may not).
/// It also lists the attribute names (`-A __slipwayAttributeNames`).
const CORE_EXPR: &str = r#"{ dir, providerName }:
let
  f = import (dir + "/core/default.nix");
  core = if builtins.isFunction f
    then (if (builtins.functionArgs f) ? provider then f { provider = { name = providerName; }; } else f { })
    else f;
in core // { __slipwayAttributeNames = builtins.attrNames core; }"#;

/// A build in progress: the source folder, the provider, and the deadline
/// shared by every Nix run of one job.
#[derive(Debug, Clone)]
pub struct NixRun<'a> {
    /// The fetched source.
    pub dir: &'a Path,
    /// The provider's name (`SLIPWAY_PROVIDER`), checked by [`check_provider`].
    pub provider: &'a str,
    /// A folder of this job's own (out links, configuration file); the caller removes it.
    pub work: &'a Path,
    /// When the job's `NIX_TIMEOUT` ends.
    pub until: Instant,
    /// Marks the job's processes (`SLIPWAY_EFFECT`).
    pub marker: &'a str,
    /// The sandbox every Nix run of the job runs in (SEC-3).
    pub policy: &'a crate::sandbox::Policy,
}

/// Output of a failed Nix run, for the operator's log.
pub type NixLog = String;

impl NixRun<'_> {
    fn left(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }

    fn timeout(&self, what: &str) -> NixFailure {
        NixFailure::new(
            FailureCode::Timeout,
            None,
            format!("{what} ran past NIX_TIMEOUT and was stopped; every process it started was killed"),
        )
    }

    /// Runs a Nix tool on [`CORE_EXPR`] with `args`; its output, or the failure and the log.
    async fn nix(&self, program: &str, args: &[&str], log: &mut NixLog) -> Result<Option<String>, NixFailure> {
        if self.left().is_zero() {
            return Err(self.timeout("the build"));
        }
        let dir = self.dir.display().to_string();
        // Restricted evaluation (SEC-3): the source and this job's folder
        // are the only paths outside the store the evaluation may read.
        let mut argv: Vec<String> = self.policy.nix_options();
        argv.extend(["-I".into(), format!("source={dir}"), "-I".into(), format!("work={}", self.work.display())]);
        argv.extend(["-E".into(), CORE_EXPR.into()]);
        argv.extend(["--argstr", "dir", &dir, "--argstr", "providerName", self.provider].map(String::from));
        argv.extend(args.iter().map(|a| a.to_string()));
        let view = crate::sandbox::View {
            read: vec![self.dir.to_path_buf()],
            write: vec![self.work.to_path_buf()],
            network: !self.policy.allowed_uris.is_empty(),
        };
        self.policy.give(self.work).map_err(|e| {
            NixFailure::new(FailureCode::BuildFailed, None, format!("cannot prepare the work folder: {e}"))
        })?;
        let sandbox = crate::sandbox::Sandbox { policy: self.policy.clone(), view };
        let run = run_tool(sandbox, self.work, program, &argv, &[], self.marker, self.left())
            .await
            .map_err(|e| NixFailure::new(FailureCode::BuildFailed, None, e.to_string()))?;
        log.push_str(&run.output);
        match run.outcome {
            EffectOutcome::Exited(0) => Ok(Some(run.output)),
            EffectOutcome::TimedOut => Err(self.timeout("the build")),
            _ => Ok(None),
        }
    }

    /// The attribute names of the source's `core`.
    async fn attributes(&self, log: &mut NixLog) -> Result<Vec<String>, NixFailure> {
        let run =
            self.nix("nix-instantiate", &["--eval", "--json", "--strict", "-A", "__slipwayAttributeNames"], log).await;
        let failed = || {
            NixFailure::new(
                FailureCode::BuildFailed,
                None,
                "core/default.nix of this source does not evaluate".to_owned(),
            )
        };
        let text = run?.ok_or_else(failed)?;
        // The JSON is the last line (warnings may come first).
        let line = text.lines().rev().find(|l| l.starts_with('[')).ok_or_else(failed)?;
        serde_json::from_str(line).map_err(|_| failed())
    }

    /// Builds every document output of MS-2 the source has, and checks it
    /// has `names` (a `schema_build`).
    pub async fn build_schema(
        &self,
        pinned: &str,
        revision: Option<&str>,
        log: &mut NixLog,
    ) -> Result<BuiltSchema, NixFailure> {
        let mut built = BuiltSchema {
            pinned: pinned.to_owned(),
            revision: revision.map(str::to_owned),
            documents: BTreeMap::new(),
            failures: BTreeMap::new(),
            timings_ms: BTreeMap::new(),
        };
        let started = Instant::now();
        let attributes = self.attributes(log).await?;
        built.timings_ms.insert("eval".into(), started.elapsed().as_millis() as u64);
        let has_schema = attributes.iter().any(|a| a == "schema");
        let absent = |attribute: &str| {
            if has_schema {
                NixFailure::new(
                    FailureCode::SourceTooOld,
                    Some(attribute),
                    format!("{pinned}: this source's core is older than the {attribute} output; use a newer revision"),
                )
            } else {
                NixFailure::new(
                    FailureCode::OutputMissing,
                    Some(attribute),
                    format!(
                        "{pinned}: core/default.nix has no {attribute} output, so it is not a Slipway module source"
                    ),
                )
            }
        };
        let wanted: Vec<&str> =
            DOCUMENTS.iter().map(|(a, _)| *a).filter(|a| attributes.iter().any(|x| x == a)).collect();
        for (attribute, _) in DOCUMENTS.iter().filter(|(a, _)| !wanted.contains(a)) {
            built.failures.insert(attribute.to_string(), absent(attribute));
        }
        if !attributes.iter().any(|a| a == "names") {
            built.failures.insert("names".into(), absent("names"));
        }
        let started = Instant::now();
        // One nix-build for all; when it fails, one each, to say which failed.
        let all = self.build_attributes(&wanted, "outputs", log).await?;
        let results: Vec<(&str, Option<PathBuf>)> = match all {
            Some(links) => wanted.iter().copied().zip(links.into_iter().map(Some)).collect(),
            None => {
                let mut each = Vec::new();
                for (i, attribute) in wanted.iter().enumerate() {
                    let link = self.build_attributes(&[attribute], &format!("output-{i}"), log).await?;
                    each.push((*attribute, link.and_then(|mut l| l.pop())));
                }
                each
            }
        };
        built.timings_ms.insert("build".into(), started.elapsed().as_millis() as u64);
        for (attribute, link) in results {
            let file = DOCUMENTS.iter().find(|(a, _)| *a == attribute).map(|(_, f)| *f).expect("a document");
            let document = link
                .ok_or_else(|| format!("nix-build -A {attribute} failed"))
                .and_then(|dir| std::fs::read_to_string(dir.join(file)).map_err(|e| format!("{file}: {e}")))
                .and_then(|text| serde_json::from_str::<Value>(&text).map_err(|e| format!("{file} is not JSON: {e}")));
            match document {
                Ok(doc) => {
                    built.documents.insert(attribute.to_owned(), doc);
                }
                Err(why) => {
                    let message = format!("{pinned}: the {attribute} output did not build ({why})");
                    built.failures.insert(
                        attribute.to_owned(),
                        NixFailure::new(FailureCode::BuildFailed, Some(attribute), message),
                    );
                }
            }
        }
        Ok(built)
    }

    /// `nix-build -A a -A b …` with out links `<work>/<name>`, `<name>-2`, …:
    /// the out path of each attribute, in order, or `None` when the build failed.
    async fn build_attributes(
        &self,
        attributes: &[&str],
        name: &str,
        log: &mut NixLog,
    ) -> Result<Option<Vec<PathBuf>>, NixFailure> {
        if attributes.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let link = self.work.join(name).display().to_string();
        let mut args: Vec<&str> = vec!["-o", &link];
        for attribute in attributes {
            args.extend(["-A", attribute]);
        }
        if self.nix("nix-build", &args, log).await?.is_none() {
            return Ok(None);
        }
        let links = (0..attributes.len())
            .map(|i| if i == 0 { PathBuf::from(&link) } else { PathBuf::from(format!("{link}-{}", i + 1)) })
            .collect();
        Ok(Some(links))
    }

    /// Evaluates `names` on `configuration` (a `names_eval`, EV-1): the
    /// nodes with their DNS names and the applications it disables, as
    /// `nodes.json`. The configuration must hold no secret value: it is read
    /// by Nix.
    pub async fn eval_names(&self, configuration: &Value, log: &mut NixLog) -> Result<Names, NixFailure> {
        let attributes = self.attributes(log).await?;
        if !attributes.iter().any(|a| a == "names") {
            let (code, why) = if attributes.iter().any(|a| a == "schema") {
                (FailureCode::SourceTooOld, "this source's core is older than the names output")
            } else {
                (FailureCode::OutputMissing, "core/default.nix has no names output")
            };
            return Err(NixFailure::new(code, Some("names"), why));
        }
        let file = self.work.join("configuration.json");
        std::fs::write(&file, serde_json::to_vec(configuration).expect("a configuration serialises")).map_err(|e| {
            NixFailure::new(FailureCode::BuildFailed, Some("names"), format!("cannot write the configuration: {e}"))
        })?;
        let link = self.work.join("names").display().to_string();
        let file = file.display().to_string();
        let built = self.nix("nix-build", &["-o", &link, "-A", "names", "--argstr", "configFile", &file], log).await?;
        let failed = |why: String| NixFailure::new(FailureCode::BuildFailed, Some("names"), why);
        if built.is_none() {
            let reason = log
                .lines()
                .rev()
                .find(|l| l.contains("error:"))
                .map(|l| l.trim().trim_start_matches("error:").trim().to_owned())
                .unwrap_or_else(|| "nix-build -A names failed".into());
            return Err(failed(format!("the names eval refused this configuration: {reason}")));
        }
        let text = std::fs::read_to_string(Path::new(&link).join("nodes.json"))
            .map_err(|e| failed(format!("nodes.json: {e}")))?;
        serde_json::from_str(&text).map_err(|e| failed(format!("nodes.json is not of its documented shape: {e}")))
    }
}

/// What the `names` output says of a configuration (`nodes.json`, EV-1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Names {
    /// The nodes a deploy stands up.
    pub nodes: Vec<NamedNode>,
    /// The applications the configuration disables.
    #[serde(default)]
    pub disabled_applications: Vec<String>,
}

/// One node of [`Names`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamedNode {
    /// The node's name.
    pub name: String,
    /// The DNS names it publishes.
    #[serde(default)]
    #[schema(required = true)]
    pub dns_names: Vec<String>,
    /// The store path of its `configuration.nix`, when the eval gives it.
    #[serde(default)]
    #[schema(required = true)]
    pub configuration: Option<String>,
}
