//! The operator routes: `GET /queues` and `GET /workers`. Only a token with
//! the operator claim may call them (`403 forbidden` otherwise): a
//! front-end's token never sees the fleet, whatever deployments it names.

use super::rfc3339;
use crate::auth::Auth;
use crate::error::ApiError;
use crate::extract::Json;
use crate::state::AppState;
use axum::extract::State;
use serde::Serialize;
use slipway_jobs::store::fleet::{self, QueueLoad};
use slipway_jobs::store::queue::{DATABASE_QUEUES, MISSED_HEARTBEATS};

/// How far back `GET /workers` looks: workers that beat within the last hour.
pub const WORKERS_WINDOW_S: i64 = 3600;

/// The answer of `GET /queues`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QueuesAnswer {
    /// Each queue's jobs now, in the order `builds`, `nix`, `callbacks`, `readiness`, `rollouts`.
    pub queues: Vec<QueueLoad>,
}

/// One worker process in the answer of `GET /workers`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WorkerAnswer {
    /// Its worker name (`<prefix>@<host>-<pid>-<random>`).
    pub name: String,
    /// The host it runs on, read from its name; `null` for a name of another shape.
    #[schema(required = true)]
    pub host: Option<String>,
    /// The queues it serves, sorted.
    pub queues: Vec<String>,
    /// Builds it runs now, each holding one of its build slots.
    pub slots_in_use: i64,
    /// Its latest heartbeat, RFC 3339 UTC.
    pub last_heartbeat: String,
    /// How long ago that was, in milliseconds.
    pub heartbeat_age_ms: i64,
    /// Whether it still counts as alive ([`alive_window_ms`]).
    pub alive: bool,
}

/// The answer of `GET /workers`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WorkersAnswer {
    /// How far back the list looks, in seconds.
    pub window_s: i64,
    /// The workers, newest heartbeat first.
    pub workers: Vec<WorkerAnswer>,
}

/// `GET /queues`: `{"queues": [{queue, waiting, scheduled, running,
/// oldest_waiting_ms}]}` for `builds`, `nix`, `callbacks` and `readiness`
/// (the `maintenance` sweep runs from a timer in each worker and has no
/// stored jobs). `waiting` counts due jobs no worker has taken;
/// `oldest_waiting_ms` is `null` when none waits. Operator tokens only.
#[utoipa::path(get, path = "/queues", tag = "fleet",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Each queue's waiting, scheduled and running jobs", body = QueuesAnswer),
        (status = 403, description = "`forbidden`: the token lacks the operator claim", body = crate::error::ErrorBody),
    ))]
pub async fn queues(State(app): State<AppState>, auth: Auth) -> Result<Json<QueuesAnswer>, ApiError> {
    auth.require_operator()?;
    let mut conn = app.db.acquire().await?;
    let queues = fleet::queue_loads(&mut conn, &DATABASE_QUEUES).await?;
    Ok(Json(QueuesAnswer { queues }))
}

/// How old a worker's latest heartbeat may be for it to count as alive, in
/// milliseconds: `2 × SLIPWAY_HEARTBEAT` and a second of rounding (the
/// heartbeat is stored in whole seconds on SQLite). Past it, its builds go
/// to another worker.
pub fn alive_window_ms(app: &AppState) -> i64 {
    (app.config.heartbeat * MISSED_HEARTBEATS).as_millis() as i64 + 1000
}

/// `GET /workers`: `{"window_s", "workers": [{name, host, queues,
/// slots_in_use, last_heartbeat, heartbeat_age_ms, alive}]}`, the worker
/// processes that beat within the last [`WORKERS_WINDOW_S`] seconds, newest
/// heartbeat first. `alive` is false once a worker has missed its
/// heartbeats ([`alive_window_ms`]): its builds go to another worker.
#[utoipa::path(get, path = "/workers", tag = "fleet",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The workers seen in the last hour", body = WorkersAnswer),
        (status = 403, description = "`forbidden`: the token lacks the operator claim", body = crate::error::ErrorBody),
    ))]
pub async fn workers(State(app): State<AppState>, auth: Auth) -> Result<Json<WorkersAnswer>, ApiError> {
    auth.require_operator()?;
    let mut conn = app.db.acquire().await?;
    let dead_after_ms = alive_window_ms(&app);
    let workers = fleet::workers(&mut conn, WORKERS_WINDOW_S)
        .await?
        .into_iter()
        .map(|w| WorkerAnswer {
            alive: w.heartbeat_age_ms <= dead_after_ms,
            last_heartbeat: rfc3339(w.last_heartbeat_ms),
            name: w.name,
            host: w.host,
            queues: w.queues,
            slots_in_use: w.slots_in_use,
            heartbeat_age_ms: w.heartbeat_age_ms,
        })
        .collect();
    Ok(Json(WorkersAnswer { window_s: WORKERS_WINDOW_S, workers }))
}
