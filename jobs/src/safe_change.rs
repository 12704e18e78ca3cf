//! Apply a plan, roll back (PRODUCT.md §13 "Safe change").
//!
//! Both queue an ordinary deploy made from a stored build instead of a
//! submitted configuration: an apply from a plan (a dry run), a rollback
//! from an earlier successful deploy. The new build takes that build's
//! pinned module source revision, its configuration snapshot, its
//! instances and its operator secrets' KV versions, and must activate the
//! same system store paths (`expected_systems`, which the effect checks
//! before it activates anything). The deployment's stored snapshot becomes
//! that build's, its version grows (ST-3), its queued deploys are
//! superseded, and the channel records the new build (DL-3), all in
//! one transaction that holds the deployment's lock, as a submit's does.
//!
//! A plan applies only while nothing it was made from moved: the
//! deployment's version (every submit, apply and rollback raises it), its
//! active build, and the secret versions a real run would read; and only
//! within `PLAN_TTL`. A rollback's target must be a successful deploy of
//! the deployment whose secret versions no later build cleared.

use crate::id::{new_build_id, DeploymentId};
use crate::provenance::{HealthGate, Provenance, RequestedBy, Trigger};
use crate::secrets::{Pin, SecretPins};
use crate::state::{BuildKind, BuildStatus, DeploymentState};
use crate::store::builds::{self, BuildRow, Newest};
use crate::store::submit::{lock_and_upsert, write_build, AdmissionLock, WriteBuild};
use crate::store::{deployments, now_ms, Conn, Db, StoreError};
use crate::submit::Accepted;
use std::collections::BTreeMap;

/// Why an apply or a rollback is refused. Nothing is written then.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// `404`: no such deployment.
    #[error("no deployment {0}")]
    UnknownDeployment(String),
    /// `404`: the build named is not a plan of the deployment (apply), or
    /// not a build of it (rollback).
    #[error("{0}")]
    NotFound(String),
    /// `409 plan_stale`: what moved since the plan was made, one sentence each.
    #[error("the plan is stale: {}; make a new plan", .0.join("; "))]
    PlanStale(Vec<String>),
    /// `410 plan_expired`: the plan's `PLAN_TTL` has passed.
    #[error("plan {plan} expired at {} (PLAN_TTL); make a new plan", rfc3339(*.expired_at_ms))]
    PlanExpired {
        /// The plan.
        plan: String,
        /// When it expired, Unix ms.
        expired_at_ms: i64,
    },
    /// `409 plan_not_appliable`: a plan that did not succeed, or that can
    /// never be applied exactly (it gave secret values, which a plan does
    /// not store).
    #[error("{0}")]
    PlanNotAppliable(String),
    /// `409 invalid_rollback_target`: the target is not a successful deploy
    /// of the deployment, or there is none to roll back to.
    #[error("{0}")]
    InvalidTarget(String),
    /// `409 secret_gone`: a secret version the target read was deleted by a
    /// later clear (names the field, never a value).
    #[error(
        "build {target} read operator secret {field}, which build {cleared_by} cleared since (every version was \
         deleted); roll back to a later build, or submit the configuration with a new value"
    )]
    SecretGone {
        /// The target build.
        target: String,
        /// `<application>.<field>`.
        field: String,
        /// The build that cleared it.
        cleared_by: String,
    },
    /// `409 deployment_destroyed`: the deployment is being destroyed, or was.
    #[error("deployment {0} is being destroyed or was destroyed; submit it again instead")]
    Destroyed(String),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `ms` (Unix ms) as RFC 3339 in UTC, for messages.
fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| format!("{ms} ms since the epoch"))
}

/// What a rollback asks for.
#[derive(Debug, Clone)]
pub struct RollbackRequest {
    /// The deployment.
    pub deployment: DeploymentId,
    /// The build to return to; `None`: the last successful deploy before
    /// the active one (or, when the deployment's latest build failed, the
    /// last successful deploy).
    pub to: Option<String>,
    /// Who asks.
    pub requested_by: Option<RequestedBy>,
    /// `rollback`, or `auto_rollback` for a failed health gate's.
    pub trigger: Trigger,
}

/// Queues a rollback of `request.deployment` (see the module doc) and
/// answers as a submit does: the new build and the state it implies.
pub async fn rollback(db: &Db, request: RollbackRequest) -> Result<Accepted, ChangeError> {
    let mut tx = db.begin_write().await?;
    let id = request.deployment.as_str();
    let accepted = rollback_in(&mut tx, &request).await?;
    tx.commit().await?;
    tracing::info!(deployment.id = %id, build.id = %accepted.build_id, trigger = %request.trigger, "rollback queued");
    Ok(accepted)
}

/// [`rollback`] inside the caller's write transaction (a failed health
/// gate queues its rollback in the transaction that records the failure).
pub async fn rollback_in(tx: &mut Conn, request: &RollbackRequest) -> Result<Accepted, ChangeError> {
    let id = request.deployment.as_str();
    if !tx.lock_deployment(id).await? {
        return Err(ChangeError::UnknownDeployment(id.to_owned()));
    }
    let deciding = builds::deciding(tx, id).await?;
    if deciding.as_ref().is_some_and(|b| b.kind == BuildKind::Destroy) {
        return Err(ChangeError::Destroyed(id.to_owned()));
    }
    let target = match &request.to {
        Some(to) => {
            // Another deployment's build is answered as unknown: a token
            // scoped to this deployment learns nothing of the others.
            let missing = || ChangeError::NotFound(format!("no build {} of deployment {id}", crate::id::quoted(to)));
            let target = builds::get(tx, to).await?.filter(|t| t.deployment_id == id).ok_or_else(missing)?;
            let is_deploy = target.kind == BuildKind::Deploy && !target.dry_run;
            if !is_deploy || target.status != BuildStatus::Succeeded {
                return Err(ChangeError::InvalidTarget(format!(
                    "build {to} is not a successful deploy of deployment {id} (a {} {}); roll back to one of its \
                     successful deploys",
                    target.status.as_str(),
                    if target.dry_run { "plan" } else { target.kind.as_str() },
                )));
            }
            target
        }
        None => default_target(tx, id, deciding.as_ref()).await?,
    };
    if let Some(pins) = &target.operator_secrets {
        let cleared = builds::cleared_after_by(tx, id, target.seq).await?;
        for pin in &pins.set {
            if let Some((_, _, by)) = cleared.iter().find(|(a, f, _)| *a == pin.application && *f == pin.field) {
                return Err(ChangeError::SecretGone {
                    target: target.id.clone(),
                    field: format!("{}.{}", pin.application, pin.field),
                    cleared_by: by.clone(),
                });
            }
        }
    }
    let pins = SecretPins {
        set: target.operator_secrets.as_ref().map(|p| p.set.clone()).unwrap_or_default(),
        clear: Vec::new(),
    };
    let provenance = Provenance {
        requested_by: request.requested_by.clone(),
        based_on: Some(target.id.clone()),
        expected_systems: systems_of(&target, "deployed"),
        // An automatic rollback is verified, but never rolled back in turn.
        health_gate: match request.trigger {
            Trigger::AutoRollback => target.provenance.health_gate.map(|g| HealthGate { rollback: false, ..g }),
            _ => target.provenance.health_gate,
        },
        names: target.provenance.names.clone(),
        domain: target.provenance.domain.clone(),
        ..Provenance::default()
    };
    queue_from(tx, &request.deployment, &target, &pins, request.trigger, &provenance).await
}

/// The default target (see [`RollbackRequest::to`]).
async fn default_target(tx: &mut Conn, id: &str, deciding: Option<&BuildRow>) -> Result<BuildRow, ChangeError> {
    let before = match deciding {
        Some(b) if b.kind == BuildKind::Deploy && b.status == BuildStatus::Succeeded => b.seq,
        _ => i64::MAX,
    };
    builds::newest_before(tx, id, Newest::SucceededDeploy, before).await?.ok_or_else(|| {
        ChangeError::InvalidTarget(format!(
            "deployment {id} has no successful deploy {} to roll back to",
            if before == i64::MAX { "yet" } else { "before its active build" }
        ))
    })
}

/// What an apply asks for.
#[derive(Debug, Clone)]
pub struct ApplyRequest {
    /// The deployment.
    pub deployment: DeploymentId,
    /// The plan: a dry run of the deployment.
    pub plan: String,
    /// Who asks.
    pub requested_by: Option<RequestedBy>,
}

/// Queues a deploy that activates exactly plan `request.plan`'s systems,
/// unless anything the plan was made from moved (see the module doc).
pub async fn apply(db: &Db, request: ApplyRequest) -> Result<Accepted, ChangeError> {
    let mut tx = db.begin_write().await?;
    let id = request.deployment.as_str();
    if !tx.lock_deployment(id).await? {
        return Err(ChangeError::UnknownDeployment(id.to_owned()));
    }
    let not_a_plan = || {
        ChangeError::NotFound(format!("build {} is not a plan of deployment {id}", crate::id::quoted(&request.plan)))
    };
    let plan = builds::get(&mut tx, &request.plan).await?.ok_or_else(not_a_plan)?;
    let inputs = match (&plan.provenance.plan, plan.dry_run && plan.deployment_id == id) {
        (Some(inputs), true) => inputs.clone(),
        _ => return Err(not_a_plan()),
    };
    match plan.status {
        BuildStatus::Succeeded => {}
        BuildStatus::Queued | BuildStatus::Running => {
            return Err(ChangeError::PlanNotAppliable(format!(
                "plan {} is still {}: apply it once it has succeeded",
                plan.id,
                plan.status.as_str()
            )))
        }
        other => {
            return Err(ChangeError::PlanNotAppliable(format!(
                "plan {} {}: only a plan that succeeded can be applied",
                plan.id,
                other.as_str()
            )))
        }
    }
    if now_ms() > inputs.expires_at {
        return Err(ChangeError::PlanExpired { plan: plan.id.clone(), expired_at_ms: inputs.expires_at });
    }
    if !inputs.source_supports_plans {
        return Err(ChangeError::PlanNotAppliable(format!(
            "plan {}'s module source does not declare the plan capability (meta.json capabilities), so its deploy \
             could not be held to the planned systems: submit the configuration instead",
            plan.id
        )));
    }
    if !inputs.secret_values_given.is_empty() {
        return Err(ChangeError::PlanNotAppliable(format!(
            "plan {} was made with new values for operator secrets {}, and a plan never stores a value: submit the \
             configuration instead",
            plan.id,
            inputs.secret_values_given.join(", ")
        )));
    }
    let deciding = builds::deciding(&mut tx, id).await?;
    if deciding.as_ref().is_some_and(|b| b.kind == BuildKind::Destroy) {
        return Err(ChangeError::Destroyed(id.to_owned()));
    }
    let moved = moved_since(&mut tx, id, &inputs).await?;
    if !moved.is_empty() {
        return Err(ChangeError::PlanStale(moved));
    }
    let set = inputs
        .secret_versions
        .iter()
        .filter_map(|(name, version)| {
            let (application, field) = name.split_once('.')?;
            Some(Pin { application: application.to_owned(), field: field.to_owned(), version: *version })
        })
        .collect();
    let provenance = Provenance {
        requested_by: request.requested_by.clone(),
        based_on: Some(plan.id.clone()),
        expected_systems: systems_of(&plan, "planned"),
        health_gate: plan.provenance.health_gate,
        names: plan.provenance.names.clone(),
        domain: plan.provenance.domain.clone(),
        ..Provenance::default()
    };
    let pins = SecretPins { set, clear: Vec::new() };
    let accepted = queue_from(&mut tx, &request.deployment, &plan, &pins, Trigger::Apply, &provenance).await?;
    tx.commit().await?;
    tracing::info!(deployment.id = %id, build.id = %accepted.build_id, plan = %plan.id, "plan applied: deploy queued");
    Ok(accepted)
}

/// What moved since a plan was made, one sentence each (empty: nothing).
async fn moved_since(
    tx: &mut Conn,
    id: &str,
    inputs: &crate::provenance::PlanInputs,
) -> Result<Vec<String>, StoreError> {
    let mut moved = Vec::new();
    let deployment = deployments::get(tx, id).await?;
    let version = deployment.map_or(0, |d| d.version);
    if version != inputs.deployment_version {
        moved.push(format!(
            "deployment {id} was submitted, applied or rolled back since (version {} then, {version} now)",
            inputs.deployment_version
        ));
    }
    let active = builds::newest(tx, id, Newest::SucceededDeploy).await?.map(|b| b.id);
    if active != inputs.active_build {
        moved.push(format!(
            "the active build is {} (the plan was made on {})",
            active.as_deref().unwrap_or("none"),
            inputs.active_build.as_deref().unwrap_or("none")
        ));
    }
    let now: BTreeMap<String, u64> = builds::latest_secret_pins(tx, id)
        .await?
        .map(|p| p.set.into_iter().map(|p| (format!("{}.{}", p.application, p.field), p.version)).collect())
        .unwrap_or_default();
    for (field, version) in &now {
        match inputs.secret_versions.get(field) {
            Some(then) if then == version => {}
            Some(then) => moved.push(format!("operator secret {field} is at version {version} (the plan read {then})")),
            None => moved.push(format!("operator secret {field} was set since (version {version})")),
        }
    }
    for field in inputs.secret_versions.keys().filter(|f| !now.contains_key(*f)) {
        moved.push(format!("operator secret {field} was cleared since"));
    }
    Ok(moved)
}

/// Node → system store path of `build`'s report nodes whose outcome is
/// `outcome` (`deployed`, or `planned` for a plan, leaving out the nodes a
/// plan removes); `None` when the report names no system.
fn systems_of(build: &BuildRow, outcome: &str) -> Option<BTreeMap<String, String>> {
    let nodes = build.report.as_ref()?.get("nodes")?.as_array()?;
    let systems: BTreeMap<String, String> = nodes
        .iter()
        .filter(|n| n["outcome"] == outcome && n["change"]["action"] != "remove")
        .filter_map(|n| Some((n["name"].as_str()?.to_owned(), n["system"].as_str()?.to_owned())))
        .collect();
    (!systems.is_empty()).then_some(systems)
}

/// Queues the deploy made from `from` (a plan or a rollback's target) in
/// `tx`, which holds the deployment's lock: the deployment's snapshot
/// becomes `from`'s, its queued deploys are superseded, the build is
/// inserted and dispatched when its turn has come, and the channel records it.
async fn queue_from(
    tx: &mut Conn,
    id: &DeploymentId,
    from: &BuildRow,
    pins: &SecretPins,
    trigger: Trigger,
    provenance: &Provenance,
) -> Result<Accepted, ChangeError> {
    let snapshot = deployments::Snapshot {
        id: id.as_str(),
        configuration: &from.configuration,
        module_source: from.module_source.as_deref(),
        domain: provenance.domain.as_deref(),
        instances: &from.instances,
        names: provenance.names.as_ref(),
    };
    lock_and_upsert(tx, id.as_str(), Some(snapshot), AdmissionLock::None, None, now_ms()).await?;
    let now = now_ms();
    let build_id = new_build_id(id, crate::clock::now());
    let new = builds::NewBuild {
        id: &build_id,
        deployment_id: id.as_str(),
        kind: BuildKind::Deploy,
        configuration: &from.configuration,
        module_source: from.module_source.as_deref(),
        instances: &from.instances,
        operator_secrets: Some(pins),
        readiness: from.readiness.as_ref(),
        dry_run: false,
        trigger,
        provenance: Some(provenance),
    };
    let building = DeploymentState::derive(Some((BuildKind::Deploy, BuildStatus::Queued)));
    let how = WriteBuild { supersede: true, event: Some(building), cap: 0, check_kept_secrets: false };
    write_build(tx, new, how, now).await?;
    Ok(Accepted {
        deployment_id: id.to_string(),
        build_id,
        state: building,
        names: None,
        names_skipped: None,
        warnings: Vec::new(),
        dry_run: false,
        deprecations: Vec::new(),
    })
}
