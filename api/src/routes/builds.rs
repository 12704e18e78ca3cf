//! `GET /builds/{id}`: status, timings, log so far, report, and the run
//! history's fields (who asked, why, what changed, why it waits);
//! `GET /builds/{id}/diff`; `POST /builds/{id}/cancel`.

use super::rfc3339;
use crate::auth::Auth;
use crate::error::ApiError;
use crate::extract::{BuildIdPath, Json, NoQuery, StrictQuery};
use crate::state::AppState;
use axum::extract::State;
use serde::Serialize;
use serde_json::Value;
use slipway_jobs::history::{self, BuildDiff, WaitingFor};
use slipway_jobs::provenance::{PlanInputs, RequestedBy, Trigger};
use slipway_jobs::source::outputs::Instance;
use slipway_jobs::state::{BuildKind, BuildStatus};
use slipway_jobs::store::builds::{self, BuildRow};
use slipway_jobs::store::Conn;

/// A build with its log.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BuildView {
    id: String,
    deployment_id: String,
    kind: BuildKind,
    status: BuildStatus,
    /// Why it failed or ended without running; `null` while it runs or when it succeeded.
    #[schema(required = true, value_type = Option<slipway_jobs::jobs::report::Reason>)]
    reason: Option<String>,
    #[schema(required = true)]
    error: Option<String>,
    attempts: i64,
    #[schema(required = true)]
    worker: Option<String>,
    #[schema(required = true)]
    module_source: Option<String>,
    instances: Vec<Instance>,
    queued_at: String,
    #[schema(required = true)]
    started_at: Option<String>,
    #[schema(required = true)]
    finished_at: Option<String>,
    /// Milliseconds from the latest start to the end (or now, while running).
    #[schema(required = true)]
    duration_ms: Option<i64>,
    /// What the build's effect reported (per node; a dry run says what a
    /// real run would change); `null` until it reports.
    #[schema(required = true, value_type = Option<Object>)]
    report: Option<Value>,
    /// A destroy's reconcile push (DL-2), when its delete gave an accepted
    /// callback: `{url, state, message, at, status?, error?, address?}`;
    /// `state` is `waiting`, `queued`, `sending`, `delivered`, `failed` or
    /// `not_sent`. Never the token.
    #[schema(required = true, value_type = Option<CallbackView>)]
    callback: Option<Value>,
    /// Where a running build is beyond its effect: `verifying` while its
    /// health gate waits for its instances to be ready; `null` otherwise.
    #[schema(required = true)]
    phase: Option<String>,
    /// The health gate it waits for (`timeout_ms`, `rollback`), if any.
    #[schema(required = true)]
    health_gate: Option<slipway_jobs::provenance::HealthGate>,
    /// Why it was queued.
    trigger: Trigger,
    /// Who asked: the token's `sub` and `iss`, the browser's `Origin`;
    /// `null` for a build made before this was recorded.
    #[schema(required = true)]
    requested_by: Option<RequestedBy>,
    /// The plan an apply activates, or the build a rollback returns to.
    #[schema(required = true)]
    based_on: Option<String>,
    /// The rollout that queued it (trigger `rollout`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    rollout: Option<String>,
    /// The system store paths an apply or a rollback must activate, by node.
    #[schema(required = true)]
    expected_systems: Option<std::collections::BTreeMap<String, String>>,
    /// A plan's inputs (dry runs only): an apply is refused when any moved.
    #[schema(required = true)]
    plan: Option<PlanView>,
    /// Why a queued build waits; `null` once it runs.
    #[schema(required = true)]
    waiting_for: Option<WaitingFor>,
    /// What it changed from the build before it (RFC 6902, secrets by
    /// version only); also `GET /builds/{id}/diff`.
    changes: BuildDiff,
    log: String,
}

/// What a plan was made from (the `plan` of a dry run's [`BuildView`]).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PlanView {
    /// The deployment's version then (ST-3).
    deployment_version: i64,
    /// The deployment's active build then.
    #[schema(required = true)]
    active_build: Option<String>,
    /// `<application>.<field>` → the KV version an apply reads.
    secret_versions: std::collections::BTreeMap<String, u64>,
    /// The fields the plan gave new values for (such a plan cannot be applied).
    secret_values_given: Vec<String>,
    /// SHA-256 (hex) of the migrated configuration planned.
    configuration_sha256: String,
    /// When it can no longer be applied (RFC 3339, `PLAN_TTL`).
    expires_at: String,
    /// Whether its module source declares the `plan` capability; without
    /// it the plan cannot be applied.
    source_supports_plans: bool,
}

impl From<&PlanInputs> for PlanView {
    fn from(p: &PlanInputs) -> Self {
        Self {
            deployment_version: p.deployment_version,
            active_build: p.active_build.clone(),
            secret_versions: p.secret_versions.clone(),
            secret_values_given: p.secret_values_given.clone(),
            configuration_sha256: p.configuration_sha256.clone(),
            expires_at: rfc3339(p.expires_at),
            source_supports_plans: p.source_supports_plans,
        }
    }
}

/// A destroy's reconcile push as a build view shows it (the `callback` of
/// [`BuildView`]). Documentation only: the stored outcome is shown as kept.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct CallbackView {
    /// Where the push goes; `null` once the URL is forgotten.
    #[schema(required = true)]
    url: Option<String>,
    /// Where the push is.
    state: slipway_jobs::store::builds::CallbackState,
    /// A sentence saying so.
    message: String,
    /// When it got there (RFC 3339).
    at: String,
    /// Once sent: the status the front-end answered (`null` when none came).
    #[schema(nullable = true)]
    status: Option<u16>,
    /// Once sent: why it was not delivered (`null` when it was).
    #[schema(nullable = true)]
    error: Option<String>,
    /// Once sent: the address it was sent to (`null` when none was reached).
    #[schema(nullable = true)]
    address: Option<String>,
}

/// The `callback` of a build view: the stored outcome with the URL, `at` as RFC 3339.
fn callback_view(url: Option<String>, outcome: Option<Value>) -> Option<Value> {
    let mut v = outcome?;
    if let Some(at) = v.get("at").and_then(Value::as_i64) {
        v["at"] = Value::String(rfc3339(at));
    }
    v["url"] = url.map_or(Value::Null, Value::String);
    Some(v)
}

/// The answer of `POST /builds/{id}/cancel`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CancelAnswer {
    /// The build.
    build_id: String,
    /// `cancelled` (it had not started: `200`) or `cancelling` (its worker
    /// stops it: `202`).
    status: String,
}

/// `GET /builds/{id}`. A build outside the token's scope answers `404`, so
/// build ids do not reveal which deployments exist.
#[utoipa::path(get, path = "/builds/{id}", tag = "builds",
    params(("id" = String, Path, description = "A build id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The build, its timings, its log so far and its report", body = BuildView),
        (status = 404, description = "`not_found`: no such build, or one outside the token's scope", body = crate::error::ErrorBody),
    ))]
pub async fn show(
    State(app): State<AppState>,
    auth: Auth,
    BuildIdPath(id): BuildIdPath,
) -> Result<Json<BuildView>, ApiError> {
    let mut conn = app.db.acquire().await?;
    let missing = || ApiError::not_found(format!("no build {}", slipway_jobs::id::quoted(&id)));
    let b = builds::get(&mut conn, &id).await?.ok_or_else(missing)?;
    if !auth.0.allows(&b.deployment_id) {
        return Err(missing());
    }
    let log = builds::log(&mut conn, &id).await?.unwrap_or_default();
    let changes = history::diff_of(&mut conn, &b).await?;
    let waiting_for = waiting_for(&app, &mut conn, &b).await?;
    let end = b.finished_at.unwrap_or_else(slipway_jobs::store::now_ms);
    Ok(Json(BuildView {
        duration_ms: b.started_at.map(|s| end - s),
        id: b.id,
        deployment_id: b.deployment_id,
        kind: b.kind,
        status: b.status,
        reason: b.reason,
        error: b.error,
        attempts: b.attempts,
        worker: b.worker,
        module_source: b.module_source,
        instances: b.instances,
        queued_at: rfc3339(b.queued_at),
        started_at: b.started_at.map(rfc3339),
        finished_at: b.finished_at.map(rfc3339),
        report: b.report,
        callback: callback_view(b.callback_url, b.callback),
        phase: b.phase,
        health_gate: b.provenance.health_gate,
        trigger: b.trigger,
        requested_by: b.provenance.requested_by,
        based_on: b.provenance.based_on,
        rollout: b.provenance.rollout,
        expected_systems: b.provenance.expected_systems,
        plan: b.provenance.plan.as_ref().map(PlanView::from),
        waiting_for,
        changes,
        log,
    }))
}

/// Why `b` waits, when it is queued ([`history::waiting_for`], with the
/// takeover window the api counts live workers by).
pub(crate) async fn waiting_for(app: &AppState, conn: &mut Conn, b: &BuildRow) -> Result<Option<WaitingFor>, ApiError> {
    Ok(history::waiting_for(conn, b, crate::observe::live_window_s(app)).await?)
}

/// `GET /builds/{id}/diff`: what the build changed from the build before
/// it, as an RFC 6902 JSON Patch over `{"configuration", "secret_versions"}`
/// (a secret appears only as its KV version, never its value), with the
/// build it is counted from and a one-line summary.
#[utoipa::path(get, path = "/builds/{id}/diff", tag = "builds",
    params(("id" = String, Path, description = "A build id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The build's changes from the build before it", body = BuildDiff),
        (status = 404, description = "`not_found`: no such build, or one outside the token's scope", body = crate::error::ErrorBody),
    ))]
pub async fn diff(
    State(app): State<AppState>,
    auth: Auth,
    BuildIdPath(id): BuildIdPath,
    _query: StrictQuery<NoQuery>,
) -> Result<Json<BuildDiff>, ApiError> {
    let mut conn = app.db.acquire().await?;
    let missing = || ApiError::not_found(format!("no build {}", slipway_jobs::id::quoted(&id)));
    let b = builds::get(&mut conn, &id).await?.ok_or_else(missing)?;
    if !auth.0.allows(&b.deployment_id) {
        return Err(missing());
    }
    Ok(Json(history::diff_of(&mut conn, &b).await?))
}

/// `POST /builds/{id}/cancel`: a queued build is cancelled at once (`200`,
/// `status: cancelled`); a running one is stopped by its worker, which kills
/// the effect's process group (`202`, `status: cancelling`). A finished build
/// answers `409 build_finished`.
#[utoipa::path(post, path = "/builds/{id}/cancel", tag = "builds",
    params(("id" = String, Path, description = "A build id"), ("Idempotency-Key" = Option<String>, Header, description = "Optional (IK-1): a key unique to this request (a ULID or UUID, 1 to 255 visible ASCII characters, as a structured-field string); a retry with the same key within `SLIPWAY_IDEMPOTENCY_TTL` gets the first answer again (`Idempotency-Replayed: true`) and queues nothing")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The build was queued and is now cancelled", body = CancelAnswer),
        (status = 202, description = "The build runs: its worker is asked to stop it", body = CancelAnswer),
        (status = 404, description = "`not_found`: no such build, or one outside the token's scope", body = crate::error::ErrorBody),
        (status = 409, description = "`build_finished`: the build already finished; `idempotency_key_in_flight`: a request with the same Idempotency-Key is still being answered (`Retry-After`)", body = crate::error::ErrorBody),
        (status = 400, description = "`invalid_idempotency_key`: the Idempotency-Key header is not one", body = crate::error::ErrorBody),
        (status = 422, description = "`idempotency_key_reused`: the Idempotency-Key was used for another request", body = crate::error::ErrorBody),
    ))]
pub async fn cancel(
    State(app): State<AppState>,
    auth: Auth,
    BuildIdPath(id): BuildIdPath,
    _query: StrictQuery<NoQuery>,
) -> Result<(axum::http::StatusCode, Json<CancelAnswer>), ApiError> {
    use axum::http::StatusCode;
    use slipway_jobs::submit::Cancel;
    let missing = || ApiError::not_found(format!("no build {}", slipway_jobs::id::quoted(&id)));
    let mut conn = app.db.acquire().await?;
    let b = builds::get(&mut conn, &id).await?.ok_or_else(missing)?;
    drop(conn);
    if !auth.0.allows(&b.deployment_id) {
        return Err(missing());
    }
    let answer = |status: StatusCode, state: &str| {
        Ok((status, Json(CancelAnswer { build_id: id.clone(), status: state.to_owned() })))
    };
    match slipway_jobs::submit::cancel(&app.db, &id).await? {
        Cancel::NotFound => Err(missing()),
        Cancel::AlreadyFinished(s) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "build_finished",
            format!("build {id} already finished ({}); there is nothing to cancel", s.as_str()),
        )),
        Cancel::Cancelled => answer(StatusCode::OK, "cancelled"),
        Cancel::Requested => answer(StatusCode::ACCEPTED, "cancelling"),
    }
}
