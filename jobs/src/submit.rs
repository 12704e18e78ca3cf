//! The two procedures that queue builds: submit (MG-7, PUT /deployments/{id})
//! and delete (DL-1). The api only adapts these to HTTP.
//!
//! Submit order (MG-7): migrate → validate (all errors) → take secret values
//! out → store → enqueue. A refusal at any step writes nothing; the
//! deployment row, the build row and the build's job commit in one
//! transaction. A submit's deploy supersedes the deployment's queued
//! deploys that have not started.

use crate::id::{new_build_id, DeploymentId};
use crate::source::{ModuleSource, SourceError};
use crate::state::{BuildKind, BuildStatus, DeploymentState};
use crate::store::{builds, deployments, now_ms, Db, StoreError};
use crate::validate::{Checker, Listing, SecretValues};
use serde::Serialize;
use serde_json::Value;

/// Where module sources may come from (MS-1, MS-6, MS-8).
#[derive(Debug, Clone, Default)]
pub struct SourcePolicy {
    /// Trusted URL prefixes; empty allows every git source.
    pub trusted: Vec<String>,
    /// Accept `path:` sources (local runs and tests only).
    pub allow_path: bool,
    /// The self-pin stored for a submit without a source (MS-8).
    pub self_source: Option<String>,
}

impl SourcePolicy {
    /// MS-8: a well-formed git self-pin, or `None` (a malformed pin counts as none).
    pub fn self_pin(&self) -> Option<String> {
        let pin = self.self_source.as_deref()?;
        match ModuleSource::parse(pin) {
            Ok(ModuleSource::Git { .. }) => Some(pin.to_owned()),
            _ => None,
        }
    }
}

/// Why a submit was refused. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The configuration fails migration, validation or the secret rules; every problem is listed.
    #[error("the configuration is not valid for its module source ({} problems)", .0.total())]
    InvalidConfiguration(Listing),
    /// The module source is malformed or not allowed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The module source is allowed but validating against it needs its own
    /// schema build (MS-6), which this release does not run.
    #[error("module source {0}: validating against an explicit module source needs its schema build (MS-6), which this release does not run yet; omit module_source to use the built-in source")]
    ExplicitSourceUnsupported(String),
    /// `limit` builds already wait for a worker. Checked inside the
    /// submit's transaction, serialised fleet-wide, so concurrent submits
    /// through several apis never overshoot the bound.
    #[error("{queued} builds are waiting for a worker (QUEUE_SIZE {limit}); try again later")]
    QueueFull {
        /// Builds waiting when the submit was refused.
        queued: i64,
        /// `QUEUE_SIZE`.
        limit: u32,
    },
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a checked configuration is queued as, and under which bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queueing {
    /// The build kind to queue.
    pub kind: BuildKind,
    /// Q-3 `QUEUE_SIZE`: refuse when this many builds already wait; `None`
    /// for a local run, which has no shared queue to protect.
    pub limit: Option<u32>,
}

/// The advisory lock that serialises the Q-3 count of queued builds with
/// the commit of the build it admits.
const ADMISSION_LOCK: &str = "slipway.admission";

/// A submit or delete that was accepted: its build and the state it implies.
#[derive(Debug, Clone, Serialize)]
pub struct Accepted {
    /// The deployment.
    pub deployment_id: String,
    /// The build that will carry it out.
    pub build_id: String,
    /// The deployment's state now (ST-1).
    pub state: DeploymentState,
}

/// What the operator's secret store can do (§8). This release has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretStore {
    /// `OPENBAO_ADDR` is unset: a secret value is `invalid_configuration`.
    NotConfigured,
    /// `OPENBAO_ADDR` is set, but this release does not write to it yet.
    Unsupported,
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
    pub fn resolve(&self, requested: Option<&str>) -> Result<Resolved, SubmitError> {
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

/// Checks a configuration with `checker` (the schema of `module_source`, or
/// of the built-in source when it is `None` or the self-pin), stores it and
/// queues its deploy (MG-7), unless `queue_size` builds already wait.
pub async fn submit(
    db: &Db,
    checker: &Checker,
    secret_store: SecretStore,
    id: &DeploymentId,
    configuration: Value,
    module_source: Option<&str>,
    queue_size: u32,
) -> Result<Accepted, SubmitError> {
    let queueing = Queueing { kind: BuildKind::Deploy, limit: Some(queue_size) };
    check_and_queue(db, checker, secret_store, id, configuration, module_source, queueing).await
}

/// [`submit`] for either kind of build: a local `run destroy` (§11) checks
/// and records its configuration the same way before it queues the destroy.
pub async fn check_and_queue(
    db: &Db,
    checker: &Checker,
    secret_store: SecretStore,
    id: &DeploymentId,
    configuration: Value,
    module_source: Option<&str>,
    queueing: Queueing,
) -> Result<Accepted, SubmitError> {
    let kind = queueing.kind;
    let stored_source = module_source.map(str::to_owned);
    let secret_values = match secret_store {
        SecretStore::NotConfigured => SecretValues::Refuse(
            "operator secrets are kept in OpenBao, and this service has none configured (OPENBAO_ADDR); leave the field empty",
        ),
        SecretStore::Unsupported => {
            SecretValues::Refuse("this release does not store operator secrets yet; leave the field empty")
        }
    };
    let checked = checker.check(configuration, secret_values).map_err(SubmitError::InvalidConfiguration)?;
    let mut admission = Admission::Shared;
    loop {
        let stored = store(db, id, &checked, stored_source.as_deref(), kind, queueing.limit, admission).await?;
        match stored {
            Some(build_id) => {
                crate::failpoint::hit("submit_committed");
                let state = DeploymentState::derive(Some((kind, BuildStatus::Queued)));
                return Ok(Accepted { deployment_id: id.to_string(), build_id, state });
            }
            // Near the bound: the exact count needs the exclusive lock.
            None => admission = Admission::Exclusive,
        }
    }
}

/// How a submit's transaction takes [`ADMISSION_LOCK`].
///
/// A submit commits under the shared lock when the queued builds it sees,
/// plus every transaction that could be writing unseen beside it (one per
/// database connection, [`builds::queued_up_to_and_unseen`]), stay within
/// `QUEUE_SIZE`: far from the bound, submits do not wait for each other.
/// Otherwise it runs again under the exclusive lock, which waits for every
/// shared holder to commit, so its count is complete. The bound is exact
/// either way: of the submits that commit, the one that counted last saw
/// every other build either committed or (on the shared path only) among
/// those it allowed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    Shared,
    Exclusive,
}

/// One submit transaction (MG-7, Q-1): the deployment row, the build row and
/// its job, committed together, within the Q-3 bound `limit`. `Ok(None)`:
/// rolled back, to be run again under [`Admission::Exclusive`].
async fn store(
    db: &Db,
    id: &DeploymentId,
    checked: &crate::validate::Checked,
    module_source: Option<&str>,
    kind: BuildKind,
    limit: Option<u32>,
    admission: Admission,
) -> Result<Option<String>, SubmitError> {
    let mut tx = db.begin_write().await?;
    tx.lock_deployment(id.as_str()).await?;
    let snapshot = deployments::Snapshot {
        id: id.as_str(),
        configuration: &checked.configuration,
        module_source,
        domain: checked.domain.as_deref(),
        instances: &checked.instances,
    };
    // The first submits of a new deployment have no row to lock yet: they
    // wait for each other here, on its key.
    deployments::upsert(&mut tx, snapshot, now_ms()).await?;
    // The time is read holding the deployment's lock, so a deployment's
    // builds are in the same order by submit (`seq`), id and `queued_at`.
    let now = now_ms();
    let build_id = new_build_id(id, time::OffsetDateTime::now_utc());
    let new = builds::NewBuild {
        id: &build_id,
        deployment_id: id.as_str(),
        kind,
        configuration: &checked.configuration,
        module_source,
        instances: &checked.instances,
    };
    if kind == BuildKind::Deploy {
        builds::supersede_queued_deploys(&mut tx, id.as_str(), &build_id, now).await?;
    }
    builds::insert(&mut tx, new, now).await?;
    if let Some(limit) = limit {
        // The count includes this build; the api also checked before it
        // read the body.
        let cap = i64::from(limit) + 1;
        let (queued, unseen) = match admission {
            Admission::Shared => {
                tx.lock_name_shared(ADMISSION_LOCK).await?;
                builds::queued_up_to_and_unseen(&mut tx, cap).await?
            }
            Admission::Exclusive => {
                tx.lock_name(ADMISSION_LOCK).await?;
                (builds::queued_up_to(&mut tx, cap).await?, 0)
            }
        };
        if queued > i64::from(limit) {
            tx.rollback().await?;
            return Err(SubmitError::QueueFull { queued: queued - 1, limit });
        }
        if queued + unseen > i64::from(limit) {
            tx.rollback().await?;
            return Ok(None);
        }
    }
    tx.commit().await?;
    Ok(Some(build_id))
}

/// Queues a destroy (DL-1). `None`: the deployment is unknown (a front-end
/// counts that as done). Repeating a delete is harmless: while a destroy is
/// queued or running, or after one succeeded, the same build is answered.
pub async fn delete(db: &Db, id: &DeploymentId) -> Result<Option<Accepted>, StoreError> {
    let mut tx = db.begin_write().await?;
    tx.lock_deployment(id.as_str()).await?;
    let Some(deployment) = deployments::get(&mut tx, id.as_str()).await? else {
        return Ok(None);
    };
    if let Some(latest) = builds::latest(&mut tx, id.as_str()).await? {
        let repeat = latest.kind == BuildKind::Destroy
            && matches!(latest.status, BuildStatus::Queued | BuildStatus::Running | BuildStatus::Succeeded);
        if repeat {
            let state = DeploymentState::derive(Some((latest.kind, latest.status)));
            return Ok(Some(Accepted { deployment_id: id.to_string(), build_id: latest.id, state }));
        }
    }
    let build_id = new_build_id(id, time::OffsetDateTime::now_utc());
    let new = builds::NewBuild {
        id: &build_id,
        deployment_id: id.as_str(),
        kind: BuildKind::Destroy,
        configuration: &deployment.configuration,
        module_source: deployment.module_source.as_deref(),
        instances: &[],
    };
    builds::insert(&mut tx, new, now_ms()).await?;
    tx.commit().await?;
    Ok(Some(Accepted { deployment_id: id.to_string(), build_id, state: DeploymentState::Destroying }))
}
