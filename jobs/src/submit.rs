//! The procedures a front-end calls that change builds: submit (MG-7,
//! `PUT /deployments/{id}`), delete (DL-1) and cancel. The api only adapts
//! them to HTTP; `slipway-worker run` calls [`submit`] too.
//!
//! Submit order (MG-7): migrate → validate (all errors) → take the secret
//! values out (in memory; refused when no OpenBao is configured) → names
//! eval (EV-1, on the `nix` queue, on the configuration without secrets;
//! skipped when every nix slot is busy) → write the secrets to OpenBao
//! ([`crate::secrets`]) → store → enqueue. A refusal at any step before the
//! OpenBao writes writes nothing anywhere; the deployment row, the build row
//! and the build's job commit in one transaction. The build pins the
//! OpenBao versions it reads ([`crate::secrets::SecretPins`]), so versions
//! written by a submit that then fails to commit are never deployed. A
//! submit's deploy supersedes the deployment's queued deploys that have not
//! started.

use crate::id::{new_build_id, DeploymentId};
use crate::nix::Names;
use crate::openbao::{OpenBao, OpenBaoError};
use crate::precondition::Precondition;
use crate::provenance::{PlanInputs, Provenance, RequestedBy, Trigger};
use crate::secrets::{plan_secrets_without_store, take_back, SecretPins, Written};
use crate::source::policy::{NamesEval, Sources};
use crate::source::SourceError;
use crate::state::{BuildKind, BuildStatus, DeploymentState};
use crate::store::builds::{self, BuildRow};
use crate::store::{deployments, events, now_ms, Conn, Db, StoreError};
use crate::validate::Listing;
use serde::Serialize;
use serde_json::Value;

/// Why a submit was refused. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The configuration fails migration, validation or the secret rules; every problem is listed.
    #[error("the configuration is not valid for its module source ({} problems)", .0.total())]
    InvalidConfiguration(Listing),
    /// The module source is malformed or not allowed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// This caller serves only one module source, not this one (a local run
    /// serves the source it was given).
    #[error("module source {0} is not served here")]
    NotServed(String),
    /// The source's outputs or its names eval could not be had: which output
    /// and why (MS-6), or the module refused the configuration (EV-1).
    #[error("{0}")]
    SourceOutputs(crate::nix::NixFailure),
    /// Every fleet-wide nix slot is busy (MS-7): a cold source cannot be
    /// built now, and a preview cannot be evaluated.
    #[error("every nix slot is busy building or evaluating module sources; try again shortly")]
    NixBusy,
    /// No live worker serves the `nix` queue, or none started the source's
    /// schema build within 10 s: the source's outputs cannot be had now.
    #[error("no live worker of the nix queue builds module sources now (none serves the queue, or none started the build within 10 s); start a worker that serves the nix queue, or try again")]
    NixUnserved,
    /// A preview's names eval could not run (EV-2: a preview without the
    /// eval has no result); why.
    #[error("the names eval cannot run now: {0}")]
    NamesUnavailable(String),
    /// `limit` builds already wait for a worker. Checked inside the
    /// submit's transaction, serialised fleet-wide, so concurrent submits
    /// through several apis never overshoot the bound.
    #[error("{queued} {} waiting for a worker (QUEUE_SIZE {limit}); try again later", if *queued == 1 { "build is" } else { "builds are" })]
    QueueFull {
        /// Builds waiting when the submit was refused.
        queued: i64,
        /// `QUEUE_SIZE`.
        limit: u32,
    },
    /// FS-1: the submit's tenant already has `limit` builds waiting
    /// (`TENANT_QUEUE_SIZE`), checked before the body is read.
    #[error("{queued} of this tenant's builds are waiting for a worker (TENANT_QUEUE_SIZE {limit}); try again later")]
    TenantQueueFull {
        /// The tenant's builds waiting when the submit was refused.
        queued: i64,
        /// `TENANT_QUEUE_SIZE`.
        limit: u32,
    },
    /// A dry run compares with what is deployed: this deployment was never
    /// submitted (a preview checks a new one).
    #[error("deployment {0} was never submitted, so a dry run has nothing to compare with; preview it instead (POST /deployments/{0}/preview)")]
    DryRunUnknown(String),
    /// No OpenBao is configured here, but the deployment's earlier builds
    /// keep operator secrets in one: a submit here would drop them from its
    /// nodes (an api replica configured unlike the others).
    #[error("this api has no OpenBao (OPENBAO_ADDR is not set), but deployment {0}'s operator secrets are kept in OpenBao: a submit here would take them from its nodes; give every api the same OPENBAO_* settings")]
    SecretStoreMissing(String),
    /// OpenBao refused a read or a write of the submit's operator secrets,
    /// is sealed or cannot be reached (§8): nothing was stored or queued.
    #[error("the operator secrets cannot be stored now: {0}")]
    SecretStore(OpenBaoError),
    /// The request's `If-Match` or `If-None-Match` does not hold for the
    /// deployment as it is now ([`crate::precondition`]): nothing was stored
    /// or queued.
    #[error("deployment {0} is not in the version the request's If-Match or If-None-Match names (it changed since it was read, was created, or does not exist); read it again (GET /deployments/{0} answers its ETag) and decide what to send")]
    PreconditionFailed(String),
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

/// A submit or delete that was accepted: its build and the state it implies.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Accepted {
    /// The deployment.
    pub deployment_id: String,
    /// The build that will carry it out.
    pub build_id: String,
    /// The deployment's state now (ST-1).
    pub state: DeploymentState,
    /// EV-1: the nodes, their DNS names and the disabled applications, when
    /// the names eval ran (absent for a delete).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub names: Option<Names>,
    /// EV-1: why the submit stored without the names eval.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub names_skipped: Option<String>,
    /// What the submit did that its sender may not expect (a secret an
    /// earlier submit set that OpenBao no longer has, …); absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// A dry run (§11): its build changes nothing; `state` is the
    /// deployment's, unchanged. Absent for a real submit.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// Deprecation notices: each rename the migration applied to the
    /// configuration sent (MG-7), which used a name the module source has
    /// renamed; each is also a sentence of `warnings`. Absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deprecations: Vec<Deprecation>,
}

/// A rename the migration applied to a submitted configuration: the sender
/// used an old name, which still works but is deprecated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Deprecation {
    /// Where the value was sent, as a JSON Pointer (`/applications/mastodon/domain`).
    pub from: String,
    /// Where the source's schema has it now, and where it was stored, as a JSON Pointer.
    pub to: String,
    /// The module source whose renames table moved it (the pinned source
    /// the configuration was checked with; `null` for the built-in source
    /// when it has no pin).
    #[schema(required = true)]
    pub module_source: Option<String>,
}

impl Deprecation {
    /// The deprecation notices of `renamed`, for a configuration checked
    /// with `module_source`.
    pub fn of(renamed: &[crate::renames::Applied], module_source: Option<&str>) -> Vec<Self> {
        renamed
            .iter()
            .map(|a| Deprecation {
                from: crate::validate::pointer_of(&a.from),
                to: crate::validate::pointer_of(&a.to),
                module_source: module_source.map(str::to_owned),
            })
            .collect()
    }

    /// The notice as a sentence of `warnings`.
    pub fn sentence(&self) -> String {
        let source = self.module_source.as_deref().unwrap_or("the built-in module source");
        format!(
            "deprecated: {} was renamed to {} by {source}; the configuration was migrated and stored under the new \
             name, send {} from now on",
            self.from, self.to, self.to
        )
    }
}

/// A submit: a deployment's configuration, the module source it asks for
/// (`None`: the built-in one), and what to queue.
#[derive(Debug, Clone)]
pub struct SubmitRequest {
    /// The deployment (ID-1).
    pub deployment: DeploymentId,
    /// The configuration as sent (an old shape is migrated).
    pub configuration: Value,
    /// The module source requested, as sent.
    pub module_source: Option<String>,
    /// The build to queue and the Q-3 bound.
    pub queueing: Queueing,
    /// A dry run (§11): evaluate and build, change nothing (a deploy only).
    pub dry_run: bool,
    /// Who asks (the token's `sub` and `iss`, the `Origin`), recorded on
    /// the build; the submit adds the names eval, the domain and, for a
    /// plan, its inputs.
    pub requested_by: Option<RequestedBy>,
    /// How long a plan (a dry run) can be applied (`PLAN_TTL`).
    pub plan_ttl: std::time::Duration,
    /// The health gate the deploy waits for, if any.
    pub health_gate: Option<crate::provenance::HealthGate>,
}

/// What a submit and a preview refuse a secret value with when no OpenBao
/// is configured (§8: `400 invalid_configuration`, naming the field).
pub const NO_SECRET_STORE: &str = "this Slipway keeps no operator secrets: OpenBao is not configured \
                                   (OPENBAO_ADDR is not set); leave the field empty, or configure OpenBao";

/// Checks a submit's configuration against its module source, moves its
/// secret values to `secrets` (§8; `None`: no OpenBao is configured, and a
/// secret value is refused), stores it and queues its build (MG-7), unless
/// `queueing.limit` builds already wait. Nothing is stored when it is
/// refused; OpenBao is written only once every check has passed.
pub async fn submit(
    db: &Db,
    sources: &dyn Sources,
    secrets: Option<&OpenBao>,
    request: SubmitRequest,
) -> Result<Accepted, SubmitError> {
    submit_if(db, sources, secrets, request, None).await
}

/// [`submit`] only if `precondition` holds for the deployment when its
/// transaction writes (checked in the same statement as the write, under
/// the deployment's lock): [`SubmitError::PreconditionFailed`] otherwise,
/// with nothing stored or queued.
pub async fn submit_if(
    db: &Db,
    sources: &dyn Sources,
    secrets: Option<&OpenBao>,
    request: SubmitRequest,
    precondition: Option<&Precondition>,
) -> Result<Accepted, SubmitError> {
    let (checker, stored_source) = sources.checker_for(request.module_source.as_deref()).await?;
    let mut checked = match checker.check(request.configuration, secrets.is_none().then_some(NO_SECRET_STORE)) {
        Ok(checked) => checked,
        Err(listing) => {
            // A secret value refused for want of OpenBao is this api's fault,
            // not the body's, when the deployment's secrets are kept in one
            // (a replica configured unlike the others): `503`, as for the
            // same submit without the value. One read, on this refusal only.
            let for_want_of_openbao =
                listing.problems.iter().any(|p| p.kind == "secret" && p.message == NO_SECRET_STORE);
            if secrets.is_none() && for_want_of_openbao {
                let pins = builds::latest_secret_pins(&mut db.acquire().await?, request.deployment.as_str()).await?;
                if pins.is_some_and(|p| p.keeps_values()) {
                    return Err(SubmitError::SecretStoreMissing(request.deployment.to_string()));
                }
            }
            return Err(SubmitError::InvalidConfiguration(listing));
        }
    };
    let names = sources.names(stored_source.as_deref(), &checked.configuration).await?;
    let (names, names_skipped) = match names {
        NamesEval::Evaluated(names) => (Some(names), None),
        NamesEval::Busy(why) | NamesEval::Skipped(why) => (None, Some(why)),
    };
    let names_value = names.as_ref().map(|n| serde_json::to_value(n).expect("names serialise"));
    let deprecations = Deprecation::of(&checked.renamed, stored_source.as_deref());
    let (id, kind) = (&request.deployment, request.queueing.kind);
    let dry_run = request.dry_run && kind == BuildKind::Deploy;
    // The versions this submit writes: taken back if it is refused after.
    let mut written = Vec::new();
    let mut provenance = Provenance {
        requested_by: request.requested_by,
        names: names_value.clone(),
        domain: checked.domain.clone(),
        health_gate: request.health_gate,
        ..Provenance::default()
    };
    let (pins, warnings) = match secrets {
        _ if dry_run => {
            // Nothing is written anywhere; the secrets a real run would set
            // are the earlier build's and the ones given now.
            let mut conn = db.acquire().await?;
            let Some(deployment) = deployments::get(&mut conn, id.as_str()).await? else {
                return Err(SubmitError::DryRunUnknown(id.to_string()));
            };
            let previous = builds::latest_secret_pins(&mut conn, id.as_str()).await?.unwrap_or_default();
            let active = builds::newest(&mut conn, id.as_str(), builds::Newest::SucceededDeploy).await?;
            let mut inputs = plan_inputs(&deployment, active.as_ref(), &previous, &checked, request.plan_ttl);
            inputs.source_supports_plans = checker.outputs().meta.supports_plans();
            provenance.plan = Some(inputs);
            plan_secrets_without_store(&previous, &mut checked);
            (SecretPins::default(), Vec::new())
        }
        Some(bao) => match place_secrets(db, bao, &checker, id, &mut checked, &mut written).await {
            Ok(placed) => placed,
            Err(e) => {
                take_back(bao, id, &written).await;
                return Err(e);
            }
        },
        None => (SecretPins::default(), Vec::new()),
    };
    // Between the OpenBao writes and the commit: what a crash here leaves
    // is tested (a version no build pins).
    crate::failpoint::hit("secrets_written");
    let stored = store_and_queue(
        db,
        id,
        &checked,
        stored_source.as_deref(),
        names_value.as_ref(),
        &pins,
        &provenance,
        dry_run,
        secrets.is_none(),
        kind,
        request.queueing.limit,
        precondition,
    )
    .await;
    let build_id = match stored {
        Ok(build_id) => build_id,
        Err(e) => {
            if let Some(bao) = secrets {
                take_back(bao, id, &written).await;
            }
            return Err(e);
        }
    };
    crate::failpoint::hit("submit_committed");
    let state = DeploymentState::derive(Some((kind, BuildStatus::Queued)));
    let state = if dry_run {
        let mut conn = db.acquire().await?;
        let deciding = builds::deciding(&mut conn, id.as_str()).await?;
        DeploymentState::derive(deciding.map(|b| (b.kind, b.status)))
    } else {
        state
    };
    Ok(Accepted {
        deployment_id: id.to_string(),
        build_id,
        state,
        names,
        names_skipped,
        warnings: deprecations.iter().map(Deprecation::sentence).chain(warnings).collect(),
        dry_run,
        deprecations,
    })
}

/// What a plan is made from (a dry run's [`PlanInputs`]): the
/// deployment's version and active build now, the secret versions a real
/// run would read, the fields given new values (which a plan never
/// stores), the configuration's SHA-256, and when the plan expires.
fn plan_inputs(
    deployment: &deployments::DeploymentRow,
    active: Option<&BuildRow>,
    pins: &SecretPins,
    checked: &crate::validate::Checked,
    ttl: std::time::Duration,
) -> PlanInputs {
    use sha2::{Digest, Sha256};
    let secret_versions = pins.set.iter().map(|p| (format!("{}.{}", p.application, p.field), p.version)).collect();
    let secret_values_given = checked
        .secrets
        .iter()
        .flat_map(|app| app.given.iter().map(move |(field, _)| format!("{}.{field}", app.application)))
        .collect();
    PlanInputs {
        deployment_version: deployment.version,
        active_build: active.map(|b| b.id.clone()),
        secret_versions,
        secret_values_given,
        configuration_sha256: hex::encode(Sha256::digest(checked.configuration.to_string().as_bytes())),
        expires_at: now_ms() + i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2),
        source_supports_plans: false,
    }
}

/// The store-and-queue step of [`submit`]: the transaction, run again under
/// the exclusive admission lock near the Q-3 bound; the build's id.
#[allow(clippy::too_many_arguments)]
async fn store_and_queue(
    db: &Db,
    id: &DeploymentId,
    checked: &crate::validate::Checked,
    module_source: Option<&str>,
    names: Option<&Value>,
    pins: &SecretPins,
    provenance: &Provenance,
    dry_run: bool,
    without_store: bool,
    kind: BuildKind,
    limit: Option<u32>,
    precondition: Option<&Precondition>,
) -> Result<String, SubmitError> {
    let mut admission = Admission::Shared;
    loop {
        let stored = Stored {
            checked,
            module_source,
            names,
            operator_secrets: Some(pins),
            provenance,
            dry_run,
            // Without OpenBao here, a deployment whose earlier builds pin
            // secrets that OpenBao keeps is refused (an api replica
            // configured unlike the others), inside the transaction.
            refuse_kept_secrets: without_store && !checked.secrets.is_empty(),
            precondition,
        };
        match store(db, id, stored, kind, limit, admission).await? {
            Some(build_id) => return Ok(build_id),
            // Near the bound: the exact count needs the exclusive lock.
            None => admission = Admission::Exclusive,
        }
    }
}

/// What a preview answers (EV-2): the configuration as it would be stored
/// (migrated), the source it would be stored with, and its names eval.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Preview {
    /// The deployment.
    pub deployment_id: String,
    /// The module source a submit would store (pinned), if any.
    #[schema(required = true)]
    pub module_source: Option<String>,
    /// The migrated configuration.
    pub configuration: Value,
    /// The nodes with their DNS names.
    pub nodes: Vec<crate::nix::NamedNode>,
    /// The applications the configuration disables.
    pub disabled_applications: Vec<String>,
}

/// EV-2: the checks and the names eval of a submit, storing nothing and
/// queuing no build. Every nix slot busy is [`SubmitError::NixBusy`], an
/// eval that cannot run for another reason [`SubmitError::NamesUnavailable`]:
/// a preview without the eval has no result. It neither reads nor writes
/// OpenBao (§8): its `secretsSet` holds only the fields the body sets;
/// `secrets_configured` says whether a submit could keep them (without, a
/// secret value is refused as a submit would refuse it).
pub async fn preview(
    sources: &dyn Sources,
    secrets_configured: bool,
    request: SubmitRequest,
) -> Result<Preview, SubmitError> {
    let (checker, stored_source) = sources.checker_for(request.module_source.as_deref()).await?;
    let checked = checker
        .check(request.configuration, (!secrets_configured).then_some(NO_SECRET_STORE))
        .map_err(SubmitError::InvalidConfiguration)?;
    match sources.names(stored_source.as_deref(), &checked.configuration).await? {
        NamesEval::Evaluated(names) => Ok(Preview {
            deployment_id: request.deployment.to_string(),
            module_source: stored_source,
            configuration: checked.configuration,
            nodes: names.nodes,
            disabled_applications: names.disabled_applications,
        }),
        NamesEval::Busy(_) => Err(SubmitError::NixBusy),
        NamesEval::Skipped(why) => Err(SubmitError::NamesUnavailable(why)),
    }
}

/// Q-3 before a submit's body is read: `QueueFull` when `limit` builds
/// already wait for a worker. A snapshot: [`submit`] counts again, exactly,
/// in its own transaction.
pub async fn admit(db: &Db, limit: u32) -> Result<(), SubmitError> {
    let queued = crate::store::submit::admission_count(&mut db.acquire().await?, i64::from(limit)).await?;
    if queued >= i64::from(limit) {
        return Err(SubmitError::QueueFull { queued, limit });
    }
    Ok(())
}

/// FS-1 before a submit's body is read: `TenantQueueFull` when `tenant`
/// already has `limit` builds waiting (`TENANT_QUEUE_SIZE`). One statement,
/// a snapshot: submits of one tenant racing past the bound at once may
/// overshoot it by as many as race.
pub async fn admit_tenant(db: &Db, tenant: &str, limit: u32) -> Result<(), SubmitError> {
    let queued = crate::store::fair::queued(&mut db.acquire().await?, tenant, i64::from(limit)).await?;
    if queued >= i64::from(limit) {
        return Err(SubmitError::TenantQueueFull { queued, limit });
    }
    Ok(())
}

/// How a submit's transaction takes [`crate::store::submit::ADMISSION_LOCK`].
///
/// A submit commits under the shared lock when the queued builds it sees,
/// plus every transaction that could be writing unseen beside it (one per
/// database connection), stay within
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

/// What a submit stores about its deployment besides its id.
#[derive(Clone, Copy)]
struct Stored<'a> {
    checked: &'a crate::validate::Checked,
    module_source: Option<&'a str>,
    names: Option<&'a Value>,
    operator_secrets: Option<&'a SecretPins>,
    /// Who asked and what the build records besides (the names eval and
    /// domain, a plan's inputs).
    provenance: &'a Provenance,
    dry_run: bool,
    /// Roll back with [`SubmitError::SecretStoreMissing`] when the
    /// deployment's latest earlier build pins secrets OpenBao keeps.
    refuse_kept_secrets: bool,
    /// What the deployment must be for the write to go ahead.
    precondition: Option<&'a Precondition>,
}

/// [`crate::secrets::place_secrets`] with what it reads from the store, only
/// when the submit has secret fields: the versions the deployment's latest
/// build pinned and its stored configuration. Store errors are
/// [`SubmitError::Store`], OpenBao's [`SubmitError::SecretStore`].
async fn place_secrets(
    db: &Db,
    bao: &OpenBao,
    checker: &crate::validate::Checker,
    id: &DeploymentId,
    checked: &mut crate::validate::Checked,
    written: &mut Vec<Written>,
) -> Result<(SecretPins, Vec<String>), SubmitError> {
    if checked.secrets.is_empty() {
        return Ok((SecretPins::default(), Vec::new()));
    }
    let (previous, stored) = {
        let mut conn = db.acquire().await?;
        let previous = builds::latest_secret_pins(&mut conn, id.as_str()).await?.unwrap_or_default();
        let stored = deployments::get(&mut conn, id.as_str()).await?.map(|d| d.configuration);
        (previous, stored)
    };
    crate::secrets::place_secrets(bao, checker, id, &previous, stored, checked, written)
        .await
        .map_err(SubmitError::SecretStore)
}

/// One submit transaction (MG-7, Q-1): the deployment row, the build row and
/// its job, committed together, within the Q-3 bound `limit`. `Ok(None)`:
/// rolled back, to be run again under [`Admission::Exclusive`];
/// [`SubmitError::SecretStoreMissing`] (rolled back) when
/// `stored.refuse_kept_secrets` and an earlier build pins secrets OpenBao
/// keeps. Four round trips on PostgreSQL (`BEGIN`, two statements,
/// `COMMIT`; see [`crate::store::submit`]).
async fn store(
    db: &Db,
    id: &DeploymentId,
    stored: Stored<'_>,
    kind: BuildKind,
    limit: Option<u32>,
    admission: Admission,
) -> Result<Option<String>, SubmitError> {
    use crate::store::submit::{lock_and_upsert, write_build, AdmissionLock, WriteBuild};
    let Stored {
        checked,
        module_source,
        names,
        operator_secrets,
        provenance,
        dry_run,
        refuse_kept_secrets,
        precondition,
    } = stored;
    let mut tx = db.begin_write().await?;
    let snapshot = deployments::Snapshot {
        id: id.as_str(),
        configuration: &checked.configuration,
        module_source,
        domain: checked.domain.as_deref(),
        instances: &checked.instances,
        names,
    };
    let lock = match (limit, admission) {
        (None, _) => AdmissionLock::None,
        (Some(_), Admission::Shared) => AdmissionLock::Shared,
        (Some(_), Admission::Exclusive) => AdmissionLock::Exclusive,
    };
    // The first submits of a new deployment have no row to lock yet: they
    // wait for each other here, on its key. A dry run changes nothing of it.
    if !lock_and_upsert(&mut tx, id.as_str(), (!dry_run).then_some(snapshot), lock, precondition, now_ms()).await? {
        tx.rollback().await?;
        return Err(SubmitError::PreconditionFailed(id.to_string()));
    }
    // The time is read holding the deployment's lock, so a deployment's
    // builds are in the same order by submit (`seq`), id and `queued_at`.
    let now = now_ms();
    let build_id = new_build_id(id, crate::clock::now());
    let new = builds::NewBuild {
        id: &build_id,
        deployment_id: id.as_str(),
        kind,
        configuration: &checked.configuration,
        module_source,
        instances: &checked.instances,
        operator_secrets,
        readiness: Some(&checked.readiness),
        dry_run,
        trigger: if dry_run { Trigger::DryRun } else { Trigger::Submit },
        provenance: Some(provenance),
    };
    // A real submit's build decides the deployment's state from now on (ST-1,
    // DL-3); a dry run never counts.
    let event = (!dry_run).then(|| DeploymentState::derive(Some((kind, BuildStatus::Queued))));
    let supersede = kind == BuildKind::Deploy && !dry_run;
    // Other queued builds are counted up to the bound: this one makes one more.
    let cap = limit.map_or(0, i64::from);
    let how = WriteBuild { supersede, event, cap, check_kept_secrets: refuse_kept_secrets };
    let written = write_build(&mut tx, new, how, now).await?;
    if written.secrets_kept {
        tx.rollback().await?;
        return Err(SubmitError::SecretStoreMissing(id.to_string()));
    }
    if let Some(limit) = limit {
        let queued = written.queued;
        let unseen = if admission == Admission::Exclusive { 0 } else { written.unseen };
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

/// A delete's reconcile push (DL-2): a callback URL already checked
/// against the allowlist, and the front-end's token for it.
pub struct Callback {
    /// The URL, as the delete gave it (checked by [`crate::callback::check_url`]).
    pub url: String,
    /// The bearer token the push carries; stored only until the push.
    pub token: secrecy::SecretString,
}

impl std::fmt::Debug for Callback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Callback").field("url", &self.url).finish_non_exhaustive()
    }
}

/// What a delete did.
#[derive(Debug, Clone)]
pub struct Deleted {
    /// The destroy build and the state now.
    pub accepted: Accepted,
    /// Whether the callback given was stored for a push; `false` also when
    /// none was given.
    pub callback_stored: bool,
    /// Whether this delete queued the destroy (`false`: a repeat, whose
    /// destroy was already queued, running or done).
    pub queued: bool,
}

/// Queues a destroy (DL-1) and stores `callback` on it (DL-2). `None`: the
/// deployment is unknown (a front-end counts that as done). Repeating a
/// delete is harmless: while a destroy is queued or running, or after one
/// succeeded, the same build is answered; a callback given with a repeat
/// replaces the earlier one while the destroy has not ended, and is not
/// stored once it reached idle.
pub async fn delete(
    db: &Db,
    id: &DeploymentId,
    callback: Option<&Callback>,
    requested_by: Option<&RequestedBy>,
) -> Result<Option<Deleted>, StoreError> {
    match delete_if(db, id, callback, requested_by, None).await {
        Ok(deleted) => Ok(deleted),
        Err(SubmitError::Store(e)) => Err(e),
        Err(e) => Err(StoreError::Queue(format!("a delete without a precondition was refused: {e}"))),
    }
}

/// [`delete`] only if `precondition` holds for the deployment, read under
/// its lock in the delete's transaction: [`SubmitError::PreconditionFailed`]
/// otherwise (also for an unknown deployment, RFC 9110 §13.1.1), with
/// nothing queued. Storage errors are [`SubmitError::Store`].
pub async fn delete_if(
    db: &Db,
    id: &DeploymentId,
    callback: Option<&Callback>,
    requested_by: Option<&RequestedBy>,
    precondition: Option<&Precondition>,
) -> Result<Option<Deleted>, SubmitError> {
    use secrecy::ExposeSecret as _;
    let mut tx = db.begin_write().await?;
    tx.lock_deployment(id.as_str()).await?;
    let deployment = deployments::get(&mut tx, id.as_str()).await?;
    if precondition.is_some_and(|p| !p.holds(deployment.as_ref().map(|d| d.version))) {
        tx.rollback().await?;
        return Err(SubmitError::PreconditionFailed(id.to_string()));
    }
    let Some(deployment) = deployment else {
        return Ok(None);
    };
    let now = now_ms();
    let (build_id, state, queued) = match builds::latest(&mut tx, id.as_str()).await? {
        Some(latest)
            if latest.kind == BuildKind::Destroy
                && matches!(latest.status, BuildStatus::Queued | BuildStatus::Running | BuildStatus::Succeeded) =>
        {
            (latest.id, DeploymentState::derive(Some((latest.kind, latest.status))), false)
        }
        _ => {
            let build_id = new_build_id(id, crate::clock::now());
            let provenance = Provenance { requested_by: requested_by.cloned(), ..Provenance::default() };
            let new = builds::NewBuild {
                id: &build_id,
                deployment_id: id.as_str(),
                kind: BuildKind::Destroy,
                configuration: &deployment.configuration,
                module_source: deployment.module_source.as_deref(),
                instances: &[],
                operator_secrets: None,
                readiness: None,
                dry_run: false,
                trigger: Trigger::Delete,
                provenance: Some(&provenance),
            };
            builds::insert(&mut tx, new, now).await?;
            builds::dispatch_next(&mut tx, id.as_str()).await?;
            events::record(&mut tx, id.as_str(), now).await?;
            (build_id, DeploymentState::Destroying, true)
        }
    };
    let callback_stored = match callback {
        Some(c) => builds::set_callback(&mut tx, &build_id, &c.url, c.token.expose_secret(), now).await?,
        None => false,
    };
    tx.commit().await?;
    let accepted = Accepted {
        deployment_id: id.to_string(),
        build_id,
        state,
        names: None,
        names_skipped: None,
        warnings: Vec::new(),
        dry_run: false,
        deprecations: Vec::new(),
    };
    Ok(Some(Deleted { accepted, callback_stored, queued }))
}

/// What a cancel request did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancel {
    /// No such build.
    NotFound,
    /// The build had already finished with this status; nothing changed.
    AlreadyFinished(BuildStatus),
    /// The build was waiting: it is `cancelled` now and will never run.
    Cancelled,
    /// The build runs: its worker kills its effect and marks it `cancelled`
    /// (a build whose worker died is cancelled when another worker takes it
    /// over).
    Requested,
}

/// Cancels a queued build at once, or asks the worker of a running one to
/// stop it. In one transaction holding the deployment's lock; a cancelled
/// queued build hands its turn to the deployment's next build (ST-2).
pub async fn cancel(db: &Db, id: &str) -> Result<Cancel, StoreError> {
    for _ in 0..5 {
        let Some(build) = builds::get(&mut db.acquire().await?, id).await? else { return Ok(Cancel::NotFound) };
        if build.status.is_terminal() {
            return Ok(Cancel::AlreadyFinished(build.status));
        }
        let mut tx = db.begin_write().await?;
        tx.lock_deployment(&build.deployment_id).await?;
        if let Some(result) = cancel_as_read(&mut tx, &build).await? {
            tx.commit().await?;
            return Ok(result);
        }
        tx.rollback().await?;
    }
    Err(StoreError::Conflict("build"))
}

/// [`cancel`] on the build as read; `None` when it changed since.
async fn cancel_as_read(tx: &mut Conn, build: &BuildRow) -> Result<Option<Cancel>, StoreError> {
    Ok(match build.status {
        BuildStatus::Queued if builds::cancel_queued(tx, build, now_ms()).await? => {
            let now = now_ms();
            builds::settle_callback(tx, &build.id, false, "cancelled", now).await?;
            builds::dispatch_next(tx, &build.deployment_id).await?;
            events::record(tx, &build.deployment_id, now).await?;
            Some(Cancel::Cancelled)
        }
        BuildStatus::Running if builds::request_cancel(tx, build).await? => Some(Cancel::Requested),
        _ => None,
    })
}
