//! Public procedures (no token): health, version, the built-in source's
//! schema and renames (MS-5), labels (ID-2).

use crate::app::AppState;
use crate::error::ApiError;
use crate::extract::{Json, Query};
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{json, Value};

/// `GET /healthz`: liveness. The process serves HTTP; the database is not
/// asked, so a database outage never gets every api restarted at once.
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// How long `GET /readyz` waits for the database: the readiness budget, the
/// same time any other route waits for a connection before it answers `503`.
pub const READY_TIMEOUT: std::time::Duration = slipway_jobs::store::ACQUIRE_TIMEOUT;

/// `GET /readyz`: readiness. `200 {"status": "ready", "database": engine}`
/// once the database answers a query within [`READY_TIMEOUT`] (2 s);
/// otherwise `503 service_unavailable`, so a load balancer sends submits
/// elsewhere. The outage is logged once, not per poll
/// ([`crate::database_health`]).
pub async fn readyz(State(app): State<AppState>) -> Result<Json<Value>, ApiError> {
    let probe = async { slipway_jobs::store::ping(&mut app.db.acquire().await?).await };
    let engine = app.db.engine().name();
    match tokio::time::timeout(READY_TIMEOUT, probe).await {
        Ok(Ok(_)) => {
            app.database_health.answered();
            Ok(Json(json!({ "status": "ready", "database": engine })))
        }
        Ok(Err(e)) => Err(ApiError::database_away(
            format!("not ready: the {engine} database does not answer ({})", e.why_unavailable()),
            e.to_string(),
        )),
        Err(_) => {
            let message = format!("the {engine} database did not answer within {}s", READY_TIMEOUT.as_secs());
            Err(ApiError::database_away(format!("not ready: {message}"), message))
        }
    }
}

/// The commit this api was built from, when it was built from a git
/// checkout (captured by `build.rs`).
pub const REVISION: Option<&str> = option_env!("SLIPWAY_REVISION");

/// `GET /version` (public): `{"name": "slipway", "version": <the crate
/// version, e.g. "0.1.0">, "revision": <40-hex git commit id, or null when
/// the build had no git checkout>}`.
pub async fn version() -> Json<Value> {
    Json(json!({ "name": "slipway", "version": env!("CARGO_PKG_VERSION"), "revision": REVISION }))
}

/// `?application=` of `GET /schema`.
#[derive(Debug, Deserialize)]
pub struct SchemaQuery {
    application: Option<String>,
}

/// `GET /schema` (`?application=`): the built-in source's schema, or one
/// application's standalone schema (MS-2, MS-5). No fetch, no build.
pub async fn schema(State(app): State<AppState>, Query(q): Query<SchemaQuery>) -> Result<Json<Value>, ApiError> {
    let outputs = app.sources.built_in.outputs();
    match q.application {
        None => Ok(Json(outputs.schema.clone())),
        Some(name) => outputs.applications.get(&name).cloned().map(Json).ok_or_else(|| {
            let known: Vec<&str> = outputs.applications.keys().map(String::as_str).collect();
            ApiError::not_found(format!("no application {name:?} in the built-in source; it has {}", known.join(", ")))
        }),
    }
}

/// `?section=` of `GET /renames`.
#[derive(Debug, Deserialize)]
pub struct RenamesQuery {
    section: Option<String>,
}

/// `GET /renames` (`?section=`): the built-in source's renames table
/// (`renames.json`: ordered `{from, to, kind}` entries, MS-2), or only the
/// entries inside one section, with paths relative to it (MG-4), so a form
/// that edits one section migrates that value alone. No fetch, no build.
pub async fn renames(State(app): State<AppState>, Query(q): Query<RenamesQuery>) -> Result<Json<Value>, ApiError> {
    let outputs = app.sources.built_in.outputs();
    let table = match q.section {
        None => outputs.renames.clone(),
        Some(id) => {
            let Some(section) = outputs.meta.sections.iter().find(|s| s.id == id) else {
                let known: Vec<&str> = outputs.meta.sections.iter().map(|s| s.id.as_str()).collect();
                return Err(ApiError::not_found(format!(
                    "no section {id:?} in the built-in source; it has {}",
                    known.join(", ")
                )));
            };
            slipway_jobs::migrate::section_renames(&outputs.renames, &section.path)
        }
    };
    Ok(Json(serde_json::to_value(table).expect("renames serialise")))
}

/// Body of `POST /labels`.
#[derive(Debug, Deserialize)]
pub struct LabelRequest {
    slug: String,
}

/// `POST /labels {slug}`: a fresh DNS label (ID-2, seed 004 `NewLabel`).
pub async fn labels(Json(req): Json<LabelRequest>) -> Result<Json<Value>, ApiError> {
    slipway_jobs::id::new_label(&req.slug)
        .map(|label| Json(json!({ "label": label })))
        .map_err(|e| ApiError::bad_request("invalid_slug", e.to_string()))
}

/// Any unknown route.
pub async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}

/// A known route with another method.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "this route does not take that method")
}
