//! `POST /rollouts`, `GET /rollouts`, `GET /rollouts/{id}` and `POST
//! /rollouts/{id}/pause|resume|cancel` (RO-1, [`slipway_jobs::rollout`]).
//! Operator tokens only.

use crate::auth::Auth;
use crate::error::ApiError;
use crate::extract::{Json, NoQuery, StrictQuery};
use crate::state::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use slipway_jobs::provenance::HealthGate;
use slipway_jobs::rollout::{self, Budget, Control, RolloutView, Selection, StartRequest, WaveSize};

/// The `select` of a rollout.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Select {
    /// Every live deployment whose stored module source is this repository
    /// (`file:///…`, `https://…`; with or without `git+`).
    repository: String,
}

/// The health gate of a rollout's builds.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GateBody {
    /// How long the instances have to become ready (`90s`, `5m`), 1 s to 24 h.
    timeout: String,
    /// Roll a deployment back when its gate fails (default false).
    #[serde(default)]
    rollback: bool,
}

/// The failure budgets: one number for both, or each.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum BudgetBody {
    /// The same budget per wave and in all.
    Both(u32),
    /// Each budget.
    Each(Budget),
}

/// The body of `POST /rollouts`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    /// The target: `git+<url>?rev=<40 hex>`, or `?ref=<branch>`, resolved
    /// once and pinned for the whole rollout.
    module_source: String,
    /// The deployments, in order (or `select`).
    #[serde(default)]
    deployments: Option<Vec<String>>,
    /// Instead of `deployments`: every live deployment of a repository.
    #[serde(default)]
    select: Option<Select>,
    /// Each wave's size: a number of deployments, or `"<p>%"`, the share of
    /// all the deployments reached by the end of that wave; they must add
    /// up to every deployment. The first wave is the canaries.
    #[schema(value_type = Vec<Value>)]
    waves: Vec<Value>,
    /// Failures (failed builds, preflight skips) allowed per wave and in
    /// all; default 0.
    #[serde(default)]
    max_failures: Option<BudgetBody>,
    /// The pause between waves (`30s`, `5m`), at most a day; default none.
    #[serde(default)]
    pause: Option<String>,
    /// The health gate of each build; absent: the wave waits for readiness like any deploy.
    #[serde(default)]
    health_gate: Option<GateBody>,
}

/// `400 invalid_rollout`.
fn invalid(message: String) -> ApiError {
    ApiError::bad_request("invalid_rollout", message)
}

/// `POST /rollouts`: start a rollout of `module_source` to `deployments` (or
/// `select`) in `waves`. The preflight checks each deployment's stored
/// configuration against the target revision first: a refused one is
/// `skipped` with its reason and counts as a failure. `201` with the
/// rollout. Refused, changing nothing: `400 invalid_rollout` (empty list,
/// waves that do not add up, both or neither of `deployments` and
/// `select`, …), `400 unknown_deployments` (`details.deployments`,
/// `details.total`), `400 too_many_deployments` (over
/// `ROLLOUT_MAX_DEPLOYMENTS`), `403` without the operator claim, and the
/// refusals of a submit's module source.
#[utoipa::path(post, path = "/rollouts", tag = "rollouts",
    request_body = StartBody,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "The rollout started", body = RolloutView),
        (status = 400, description = "`invalid_rollout`, `unknown_deployments`, `too_many_deployments`, `invalid_module_source`, `malformed_json` or `invalid_request`", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: the token lacks the operator claim", body = crate::error::ErrorBody),
        (status = 422, description = "The target's outputs could not be built", body = crate::error::ErrorBody),
        (status = 503, description = "`nix_busy` or `service_unavailable`", body = crate::error::ErrorBody),
    ))]
pub async fn start(
    State(app): State<AppState>,
    auth: Auth,
    headers: HeaderMap,
    _query: StrictQuery<NoQuery>,
    Json(body): Json<StartBody>,
) -> Result<(StatusCode, Json<RolloutView>), ApiError> {
    auth.require_operator()?;
    let selection = match (body.deployments, body.select) {
        (Some(ids), None) => Selection::Ids(ids),
        (None, Some(select)) => Selection::Repository(select.repository),
        _ => return Err(invalid("give either deployments (a list of ids) or select (a repository), not both".into())),
    };
    let waves = body
        .waves
        .iter()
        .enumerate()
        .map(|(i, w)| WaveSize::parse(w).map_err(|e| invalid(format!("waves[{i}]: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let max_failures = match body.max_failures {
        None => Budget::default(),
        Some(BudgetBody::Both(n)) => Budget { per_wave: n, total: n },
        Some(BudgetBody::Each(b)) => b,
    };
    let pause = match body.pause.as_deref() {
        None => std::time::Duration::ZERO,
        Some(p) => {
            slipway_jobs::config::parse_duration(p).filter(|d| *d <= rollout::LONGEST_PAUSE).ok_or_else(|| {
                invalid(format!(
                    "pause {} is not a duration up to 24h (such as 30s or 5m)",
                    slipway_jobs::id::quoted(p)
                ))
            })?
        }
    };
    let health_gate = match body.health_gate {
        None => None,
        Some(g) => Some(HealthGate::new(&g.timeout, g.rollback).map_err(|e| invalid(format!("health_gate: {e}")))?),
    };
    let request = StartRequest {
        module_source: body.module_source,
        selection,
        waves,
        max_failures,
        pause,
        health_gate,
        requested_by: Some(auth.requested_by(&headers)),
    };
    let view = rollout::start(
        &app.db,
        &app.sources,
        app.config.sources.nix_slots,
        app.config.rollouts.max_deployments,
        request,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(view)))
}

/// The answer of `GET /rollouts`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RolloutList {
    /// The latest rollouts, newest first (at most 100), without their deployments.
    pub rollouts: Vec<RolloutView>,
}

/// `GET /rollouts`: the latest 100 rollouts, newest first, with each
/// wave's progress. Operator tokens only.
#[utoipa::path(get, path = "/rollouts", tag = "rollouts",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The latest rollouts", body = RolloutList),
        (status = 403, description = "`forbidden`: the token lacks the operator claim", body = crate::error::ErrorBody),
    ))]
pub async fn list(
    State(app): State<AppState>,
    auth: Auth,
    _query: StrictQuery<NoQuery>,
) -> Result<Json<RolloutList>, ApiError> {
    auth.require_operator()?;
    Ok(Json(RolloutList { rollouts: rollout::list(&app.db, 100).await? }))
}

/// The `{id}` of a rollout route; anything else names no rollout (`404`).
pub struct RolloutIdPath(pub String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for RolloutIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<String>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(id)| Self(id))
            .map_err(|_| ApiError::not_found("no such rollout"))
    }
}

/// `GET /rollouts/{id}`: the rollout's state (`running`, `paused`,
/// `halted`, `cancelled`, `completed`), its pinned revision, each wave's
/// progress and each deployment's (its build and outcome). Operator tokens only.
#[utoipa::path(get, path = "/rollouts/{id}", tag = "rollouts",
    params(("id" = String, Path, description = "A rollout id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The rollout", body = RolloutView),
        (status = 403, description = "`forbidden`: the token lacks the operator claim", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such rollout", body = crate::error::ErrorBody),
    ))]
pub async fn show(
    State(app): State<AppState>,
    auth: Auth,
    RolloutIdPath(id): RolloutIdPath,
    _query: StrictQuery<NoQuery>,
) -> Result<Json<RolloutView>, ApiError> {
    auth.require_operator()?;
    let view = rollout::view(&app.db, &id).await?;
    view.map(Json).ok_or_else(|| ApiError::not_found(format!("no rollout {}", slipway_jobs::id::quoted(&id))))
}

async fn control(app: AppState, auth: Auth, id: String, what: Control) -> Result<Json<RolloutView>, ApiError> {
    auth.require_operator()?;
    Ok(Json(rollout::control(&app.db, &id, what).await?))
}

/// `POST /rollouts/{id}/pause`: queue nothing more until resumed; the
/// builds already queued go on. Pausing a paused rollout changes nothing.
#[utoipa::path(post, path = "/rollouts/{id}/pause", tag = "rollouts",
    params(("id" = String, Path, description = "A rollout id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The rollout, paused", body = RolloutView),
        (status = 400, description = "`invalid_request`: a query parameter this route does not take", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: the token lacks the operator claim", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such rollout", body = crate::error::ErrorBody),
        (status = 409, description = "`rollout_ended`: it halted, was cancelled or completed", body = crate::error::ErrorBody),
    ))]
pub async fn pause(
    State(app): State<AppState>,
    auth: Auth,
    RolloutIdPath(id): RolloutIdPath,
    _query: StrictQuery<NoQuery>,
) -> Result<Json<RolloutView>, ApiError> {
    control(app, auth, id, Control::Pause).await
}

/// `POST /rollouts/{id}/resume`: go on from where it paused.
#[utoipa::path(post, path = "/rollouts/{id}/resume", tag = "rollouts",
    params(("id" = String, Path, description = "A rollout id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The rollout, running", body = RolloutView),
        (status = 400, description = "`invalid_request`: a query parameter this route does not take", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: the token lacks the operator claim", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such rollout", body = crate::error::ErrorBody),
        (status = 409, description = "`rollout_ended`: it halted, was cancelled or completed", body = crate::error::ErrorBody),
    ))]
pub async fn resume(
    State(app): State<AppState>,
    auth: Auth,
    RolloutIdPath(id): RolloutIdPath,
    _query: StrictQuery<NoQuery>,
) -> Result<Json<RolloutView>, ApiError> {
    control(app, auth, id, Control::Resume).await
}

/// `POST /rollouts/{id}/cancel`: queue nothing more, for good. The builds
/// the rollout already queued are left to finish (ordinary deploys: cancel
/// one with `POST /builds/{id}/cancel`); the deployments whose builds were
/// not queued yet are `cancelled`.
#[utoipa::path(post, path = "/rollouts/{id}/cancel", tag = "rollouts",
    params(("id" = String, Path, description = "A rollout id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The rollout, cancelled", body = RolloutView),
        (status = 400, description = "`invalid_request`: a query parameter this route does not take", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: the token lacks the operator claim", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such rollout", body = crate::error::ErrorBody),
        (status = 409, description = "`rollout_ended`: it halted, was cancelled or completed", body = crate::error::ErrorBody),
    ))]
pub async fn cancel(
    State(app): State<AppState>,
    auth: Auth,
    RolloutIdPath(id): RolloutIdPath,
    _query: StrictQuery<NoQuery>,
) -> Result<Json<RolloutView>, ApiError> {
    control(app, auth, id, Control::Cancel).await
}
