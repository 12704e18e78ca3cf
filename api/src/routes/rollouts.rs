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

/// How often a rollout's event stream looks for new events.
const EVENTS_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// `GET /rollouts/{id}/events`: the rollout's events as server-sent events,
/// oldest first: `id: <n>` (increasing across all rollouts), `event:
/// <type>` (`rollout.started`, `rollout.wave_started`,
/// `rollout.wave_completed`, `rollout.paused`, `rollout.resumed`,
/// `rollout.cancelled`, `rollout.halted`, `rollout.completed`) and `data:`
/// the event's JSON (`type`, `rollout_id`, what it says, `id`, `at`).
/// With `Last-Event-ID` it resumes after that event. The stream ends once
/// the rollout halted, was cancelled or completed and every event was
/// sent; a reconnect with nothing new then answers `204`. Operator tokens
/// only (the `Authorization` header); counted against the stream caps
/// (`429 too_many_streams`) and ended when the token expires, as the
/// deployment channel is.
#[utoipa::path(get, path = "/rollouts/{id}/events", tag = "rollouts",
    params(
        ("id" = String, Path, description = "A rollout id"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id"),
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Server-sent events: `event: <type>`, `data: {type, rollout_id, …, id, at}`",
         body = String, content_type = "text/event-stream"),
        (status = 204, description = "Nothing new after the rollout ended: stop reconnecting"),
        (status = 400, description = "`invalid_request`: a bad `Last-Event-ID` or query string", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: the token lacks the operator claim", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such rollout", body = crate::error::ErrorBody),
        (status = 429, description = "`too_many_streams`: the token's subject, or this api, holds its most streams open (`details.limit`, `Retry-After`)", body = crate::error::ErrorBody),
    ))]
pub async fn events(
    State(app): State<AppState>,
    auth: Auth,
    RolloutIdPath(id): RolloutIdPath,
    headers: HeaderMap,
    _query: StrictQuery<NoQuery>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse as _;
    auth.require_operator()?;
    let last = super::events::last_event_id(&headers)?.unwrap_or(0);
    let mut conn = app.db.acquire().await?;
    let row = slipway_jobs::store::rollouts::get(&mut conn, &id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no rollout {}", slipway_jobs::id::quoted(&id))))?;
    let ended = !matches!(row.state.as_str(), "running" | "paused");
    if ended && slipway_jobs::store::rollouts::events_after(&mut conn, &id, last, 1).await?.is_empty() {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    drop(conn);
    // Counted against SLIPWAY_STREAMS_PER_SUBJECT and _PER_API like a
    // deployment's channel; ended when the api stops or the token expires.
    let slot = app.streams.open(&auth.0.sub, slipway_jobs::store::tickets::StreamKind::DeploymentEvents)?;
    let db = app.db.clone();
    Ok(super::events::spawn_stream(&app, &auth, slot, move |tx| follow(db, id, last, tx)))
}

/// Sends rollout `id`'s events after `last` until it ended and every event
/// was sent, the client went away, or the database failed (the client
/// reconnects with its last id).
async fn follow(db: slipway_jobs::store::Db, id: String, mut last: i64, tx: super::events::EventSender) {
    use slipway_jobs::store::rollouts;
    loop {
        let Ok(mut conn) = db.acquire().await else { return };
        // The state first: its change commits with its events, so an ended
        // rollout's events are all there when they are read after it.
        let Ok(Some(row)) = rollouts::get(&mut conn, &id).await else { return };
        let Ok(page) = rollouts::events_after(&mut conn, &id, last, 100).await else { return };
        drop(conn);
        for e in &page {
            let mut data = e.body.clone();
            data["id"] = serde_json::json!(e.id);
            data["at"] = serde_json::json!(super::rfc3339(e.at));
            let event =
                axum::response::sse::Event::default().id(e.id.to_string()).event(&e.kind).data(data.to_string());
            if tx.send(event).await.is_err() {
                return;
            }
            last = e.id;
        }
        if page.is_empty() && !matches!(row.state.as_str(), "running" | "paused") {
            return;
        }
        if page.len() < 100 {
            tokio::select! {
                _ = tokio::time::sleep(EVENTS_POLL) => {}
                _ = tx.closed() => return,
            }
        }
    }
}
