//! SBOM reads (seed 000 "SBOM of the deployed nodes"): `GET /sbom-list/{id}`
//! and `GET /sbom/{id}?node=` (`application/vnd.cyclonedx+json`).

use super::deployments::require_exists;
use super::rfc3339;
use crate::auth::Auth;
use crate::error::ApiError;
use crate::extract::{DeploymentIdPath, Json, Query};
use crate::state::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use slipway_jobs::store::sboms::{self, SbomText};

/// The CycloneDX JSON media type.
pub const CYCLONEDX_JSON: &str = "application/vnd.cyclonedx+json";

/// The answer of `GET /sbom-list/{id}`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct SbomList {
    /// The deployment.
    deployment_id: String,
    /// One entry per node that a successful deploy recorded.
    nodes: Vec<SbomNode>,
}

/// One node of [`SbomList`].
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct SbomNode {
    /// The node's name.
    node: String,
    /// `ready` or `unavailable`.
    status: String,
    /// Why it is unavailable; `null` when ready.
    #[schema(required = true)]
    reason: Option<String>,
    /// The deploy that produced it.
    build_id: String,
    /// When, RFC 3339.
    created_at: String,
}

/// `GET /sbom-list/{id}`: each node's SBOM state, the build that gave it and when.
#[utoipa::path(get, path = "/sbom-list/{id}", tag = "sbom",
    params(("id" = String, Path, description = "A deployment id (lower-case letters, digits and `-`)")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Each node's SBOM state", body = SbomList),
        (status = 400, description = "`invalid_deployment_id`", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: outside the token's scope", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such deployment", body = crate::error::ErrorBody),
    ))]
pub async fn list(
    State(app): State<AppState>,
    auth: Auth,
    DeploymentIdPath(id): DeploymentIdPath,
) -> Result<Json<SbomList>, ApiError> {
    auth.require(id.as_str())?;
    let mut conn = app.db.acquire().await?;
    require_exists(&mut conn, &id).await?;
    let nodes: Vec<SbomNode> = sboms::list(&mut conn, id.as_str())
        .await?
        .into_iter()
        .map(|e| SbomNode {
            node: e.node,
            status: e.status,
            reason: e.reason,
            build_id: e.build_id,
            created_at: rfc3339(e.created_at),
        })
        .collect();
    Ok(Json(SbomList { deployment_id: id.to_string(), nodes }))
}

/// `?node=` of `GET /sbom/{id}`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct NodeQuery {
    /// The node whose SBOM to send.
    #[param(required = true, min_length = 1)]
    node: Option<String>,
}

/// `GET /sbom/{id}?node=`: one node's CycloneDX document, or `404` with the
/// reason. The document is sent as the store puts it together, as text
/// (`sboms::document_text`), never parsed into a JSON value and written again.
#[utoipa::path(get, path = "/sbom/{id}", tag = "sbom",
    params(("id" = String, Path, description = "A deployment id (lower-case letters, digits and `-`)"), NodeQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The node's CycloneDX document", body = Object, content_type = "application/vnd.cyclonedx+json"),
        (status = 400, description = "`invalid_request` (no `node`) or `invalid_deployment_id`", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: outside the token's scope", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such deployment, or no SBOM for the node (`details.reason` when unavailable)", body = crate::error::ErrorBody),
    ))]
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
        None => {
            let nodes: Vec<String> = sboms::list(&mut conn, id.as_str()).await?.into_iter().map(|e| e.node).collect();
            Err(if nodes.is_empty() {
                ApiError::not_found(format!(
                    "deployment {id} has no SBOM for node {node}: no successful deploy has produced one"
                ))
            } else {
                ApiError::not_found(format!(
                    "deployment {id} has no node {node}; the nodes of its last deploy are {}",
                    nodes.join(", ")
                ))
                .with_details(json!({ "nodes": nodes }))
            })
        }
    }
}
