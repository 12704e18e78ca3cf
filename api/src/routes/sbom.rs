//! SBOM reads (seed 000 "SBOM of the deployed nodes"): `GET /sbom-list/{id}`
//! and `GET /sbom/{id}?node=` (`application/vnd.cyclonedx+json`).

use super::deployments::require_exists;
use super::rfc3339;
use crate::app::{AppState, Auth};
use crate::error::ApiError;
use crate::extract::{DeploymentIdPath, Json, Query};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use slipway_jobs::store::sboms::{self, SbomText};

/// The CycloneDX JSON media type.
pub const CYCLONEDX_JSON: &str = "application/vnd.cyclonedx+json";

/// `GET /sbom-list/{id}`: each node's SBOM state, the build that gave it and when.
pub async fn list(
    State(app): State<AppState>,
    auth: Auth,
    DeploymentIdPath(id): DeploymentIdPath,
) -> Result<Json<Value>, ApiError> {
    auth.require(id.as_str())?;
    let mut conn = app.db.acquire().await?;
    require_exists(&mut conn, &id).await?;
    let nodes: Vec<Value> = sboms::list(&mut conn, id.as_str())
        .await?
        .into_iter()
        .map(|e| {
            json!({
                "node": e.node, "status": e.status, "reason": e.reason,
                "build_id": e.build_id, "created_at": rfc3339(e.created_at),
            })
        })
        .collect();
    Ok(Json(json!({ "deployment_id": id.as_str(), "nodes": nodes })))
}

/// `?node=` of `GET /sbom/{id}`.
#[derive(Debug, Deserialize)]
pub struct NodeQuery {
    node: Option<String>,
}

/// `GET /sbom/{id}?node=`: one node's CycloneDX document, or `404` with the
/// reason. The document is sent as the store puts it together, as text
/// (`sboms::document_text`), never parsed into a JSON value and written again.
pub async fn document(
    State(app): State<AppState>,
    auth: Auth,
    DeploymentIdPath(id): DeploymentIdPath,
    Query(q): Query<NodeQuery>,
) -> Result<Response, ApiError> {
    auth.require(id.as_str())?;
    let node = q
        .node
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::bad_request("invalid_request", "name the node: ?node=<name>"))?;
    let mut conn = app.db.acquire().await?;
    require_exists(&mut conn, &id).await?;
    match sboms::document_text(&mut conn, id.as_str(), &node).await? {
        Some(SbomText::Ready(text)) => Ok(([(header::CONTENT_TYPE, CYCLONEDX_JSON)], text).into_response()),
        Some(SbomText::Unavailable(reason)) => {
            Err(ApiError::not_found(format!("the SBOM of node {node} is unavailable: {reason}"))
                .with_details(json!({ "reason": reason })))
        }
        None => Err(ApiError::not_found(format!(
            "deployment {id} has no SBOM for node {node}: no successful deploy has produced one"
        ))),
    }
}
