//! `POST /deployments/{id}/apply` and `POST /deployments/{id}/rollback`:
//! deploys made from a stored build (a plan, an earlier successful deploy)
//! instead of a submitted configuration ([`slipway_jobs::safe_change`]).

use crate::auth::Auth;
use crate::error::ApiError;
use crate::extract::{DeploymentIdPath, Json, NoQuery, OptionalJson, StrictQuery};
use crate::state::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use slipway_jobs::provenance::Trigger;
use slipway_jobs::safe_change::{self, ApplyRequest, RollbackRequest};
use slipway_jobs::submit::Accepted;

/// The body of `POST /deployments/{id}/apply`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyBody {
    /// The plan: the build id a dry run of this deployment answered.
    plan: String,
}

/// `POST /deployments/{id}/apply {"plan": "<build id>"}`: queue a deploy
/// that activates exactly the plan's systems (the effect refuses to
/// activate any other path: the build fails `plan_mismatch`). `202` as a
/// submit answers. Refused, changing nothing: `404` when the build is not
/// a plan of this deployment; `409 plan_stale` naming what moved since the
/// plan (`details.moved`: a newer submit, apply or rollback, another
/// active build, a new secret version); `409 plan_not_appliable` (the
/// plan has not succeeded, or it gave secret values, which a plan never
/// stores); `409 deployment_destroyed`; `410 plan_expired` past `PLAN_TTL`.
#[utoipa::path(post, path = "/deployments/{id}/apply", tag = "deployments",
    params(("id" = String, Path, description = "A deployment id (lower-case letters, digits and `-`)"), ("Idempotency-Key" = Option<String>, Header, description = "Optional (IK-1): a key unique to this request (a ULID or UUID, 1 to 255 visible ASCII characters, as a structured-field string); a retry with the same key within `SLIPWAY_IDEMPOTENCY_TTL` gets the first answer again (`Idempotency-Replayed: true`) and queues nothing")),
    request_body = ApplyBody,
    security(("bearer" = [])),
    responses(
        (status = 202, description = "A deploy of the plan's systems is queued", body = Accepted),
        (status = 400, description = "`malformed_json`, `invalid_request` or `invalid_deployment_id`, or `invalid_idempotency_key`", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: outside the token's scope", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such deployment, or the build is not a plan of it", body = crate::error::ErrorBody),
        (status = 409, description = "`plan_stale` (`details.moved`), `plan_not_appliable` or `deployment_destroyed`; `idempotency_key_in_flight`: a request with the same Idempotency-Key is still being answered (`Retry-After`)", body = crate::error::ErrorBody),
        (status = 410, description = "`plan_expired`: past `PLAN_TTL`", body = crate::error::ErrorBody),
        (status = 422, description = "`idempotency_key_reused`: the Idempotency-Key was used for another request", body = crate::error::ErrorBody),
    ))]
pub async fn apply(
    State(app): State<AppState>,
    auth: Auth,
    DeploymentIdPath(id): DeploymentIdPath,
    headers: HeaderMap,
    _query: StrictQuery<NoQuery>,
    Json(body): Json<ApplyBody>,
) -> Result<(StatusCode, Json<Accepted>), ApiError> {
    auth.require(id.as_str())?;
    let request = ApplyRequest { deployment: id, plan: body.plan, requested_by: Some(auth.requested_by(&headers)) };
    let accepted = safe_change::apply(&app.db, request).await?;
    Ok((StatusCode::ACCEPTED, Json(accepted)))
}

/// The optional body of `POST /deployments/{id}/rollback`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RollbackBody {
    /// The build to return to; absent: the last successful deploy before
    /// the active one (or, after a failed deploy, the last successful one).
    #[serde(default)]
    to: Option<String>,
}

/// `POST /deployments/{id}/rollback {"to"?: "<build id>"}`: queue a deploy
/// of that build's pinned module source revision, configuration snapshot
/// and operator secret versions, activating the same system store paths
/// (kept by GC roots for the last `KEEP_GENERATIONS` successful deploys; an
/// older one is built again). The deployment's stored configuration
/// becomes the target's, and its event stream records the build with
/// `trigger: rollback`: read the deployment again. `202` as a submit
/// answers. Refused, changing nothing: `404` for an unknown deployment or
/// build; `409 invalid_rollback_target` (not a successful deploy of this
/// deployment, or none to return to); `409 secret_gone` (a later clear
/// deleted a secret the target read: `details.field`, never a value);
/// `409 deployment_destroyed`.
#[utoipa::path(post, path = "/deployments/{id}/rollback", tag = "deployments",
    params(("id" = String, Path, description = "A deployment id (lower-case letters, digits and `-`)"), ("Idempotency-Key" = Option<String>, Header, description = "Optional (IK-1): a key unique to this request (a ULID or UUID, 1 to 255 visible ASCII characters, as a structured-field string); a retry with the same key within `SLIPWAY_IDEMPOTENCY_TTL` gets the first answer again (`Idempotency-Replayed: true`) and queues nothing")),
    request_body(content = RollbackBody, description = "Optional: the build to return to"),
    security(("bearer" = [])),
    responses(
        (status = 202, description = "A deploy of the target build is queued", body = Accepted),
        (status = 400, description = "`malformed_json`, `invalid_request` or `invalid_deployment_id`, or `invalid_idempotency_key`", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: outside the token's scope", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such deployment or build", body = crate::error::ErrorBody),
        (status = 409, description = "`invalid_rollback_target`, `secret_gone` (`details.field`) or `deployment_destroyed`; `idempotency_key_in_flight`: a request with the same Idempotency-Key is still being answered (`Retry-After`)", body = crate::error::ErrorBody),
        (status = 422, description = "`idempotency_key_reused`: the Idempotency-Key was used for another request", body = crate::error::ErrorBody),
    ))]
pub async fn rollback(
    State(app): State<AppState>,
    auth: Auth,
    DeploymentIdPath(id): DeploymentIdPath,
    headers: HeaderMap,
    _query: StrictQuery<NoQuery>,
    OptionalJson(body): OptionalJson<RollbackBody>,
) -> Result<(StatusCode, Json<Accepted>), ApiError> {
    auth.require(id.as_str())?;
    let request = RollbackRequest {
        deployment: id,
        to: body.unwrap_or_default().to,
        requested_by: Some(auth.requested_by(&headers)),
        trigger: Trigger::Rollback,
    };
    let accepted = safe_change::rollback(&app.db, request).await?;
    Ok((StatusCode::ACCEPTED, Json(accepted)))
}
