//! Public procedures (no token): health, the built-in schema (MS-5), labels (ID-2).

use crate::app::AppState;
use crate::error::ApiError;
use crate::extract::{Json, Query};
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{json, Value};

/// `GET /healthz`: the process serves.
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// `?application=` of `GET /schema`.
#[derive(Debug, Deserialize)]
pub struct SchemaQuery {
    application: Option<String>,
}

/// `GET /schema` (`?application=`): the built-in source's schema, or one
/// application's standalone schema (MS-2, MS-5). No fetch, no build.
pub async fn schema(State(app): State<AppState>, Query(q): Query<SchemaQuery>) -> Result<Json<Value>, ApiError> {
    let outputs = app.built_in.outputs();
    match q.application {
        None => Ok(Json(outputs.schema.clone())),
        Some(name) => outputs.applications.get(&name).cloned().map(Json).ok_or_else(|| {
            let known: Vec<&str> = outputs.applications.keys().map(String::as_str).collect();
            ApiError::not_found(format!("no application {name:?} in the built-in source; it has {}", known.join(", ")))
        }),
    }
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
