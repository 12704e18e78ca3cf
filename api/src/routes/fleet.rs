//! The operator routes: `GET /queues` and `GET /workers`. Only a token with
//! the operator claim may call them (`403 forbidden` otherwise): a
//! front-end's token never sees the fleet, whatever deployments it names.

use super::rfc3339;
use crate::app::{AppState, Auth};
use crate::error::ApiError;
use crate::extract::Json;
use axum::extract::State;
use serde_json::{json, Value};
use slipway_jobs::store::fleet;
use slipway_jobs::store::queue::{ALL_QUEUES, MAINTENANCE_QUEUE, MISSED_HEARTBEATS};

/// How far back `GET /workers` looks: workers that beat within the last hour.
pub const WORKERS_WINDOW_S: i64 = 3600;

/// `GET /queues`: `{"queues": [{queue, waiting, scheduled, running,
/// oldest_waiting_ms}]}` for `builds`, `nix`, `callbacks` and `readiness`
/// (the `maintenance` sweep runs from a timer in each worker and has no
/// stored jobs). `waiting` counts due jobs no worker has taken;
/// `oldest_waiting_ms` is `null` when none waits.
pub async fn queues(State(app): State<AppState>, auth: Auth) -> Result<Json<Value>, ApiError> {
    auth.require_operator()?;
    let names: Vec<&str> = ALL_QUEUES.iter().copied().filter(|q| *q != MAINTENANCE_QUEUE).collect();
    let mut conn = app.db.acquire().await?;
    let loads = fleet::queue_loads(&mut conn, &names).await?;
    Ok(Json(json!({ "queues": loads })))
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
pub async fn workers(State(app): State<AppState>, auth: Auth) -> Result<Json<Value>, ApiError> {
    auth.require_operator()?;
    let mut conn = app.db.acquire().await?;
    let dead_after_ms = alive_window_ms(&app);
    let workers: Vec<Value> = fleet::workers(&mut conn, WORKERS_WINDOW_S)
        .await?
        .into_iter()
        .map(|w| {
            json!({
                "name": w.name,
                "host": w.host,
                "queues": w.queues,
                "slots_in_use": w.slots_in_use,
                "last_heartbeat": rfc3339(w.last_heartbeat_ms),
                "heartbeat_age_ms": w.heartbeat_age_ms,
                "alive": w.heartbeat_age_ms <= dead_after_ms,
            })
        })
        .collect();
    Ok(Json(json!({ "window_s": WORKERS_WINDOW_S, "workers": workers })))
}
