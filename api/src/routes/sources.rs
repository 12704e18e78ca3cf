//! Module sources' schemas and renames: the built-in source's (`GET
//! /schema`, `GET /renames`: public, MS-5, no fetch, no build) and the
//! `get_for` procedures (MS-6) for any source, authenticated and
//! allowlisted, built on the `nix` queue on a miss.
//!
//! Order: the token (`401`), the body, the source parsed (`400
//! invalid_module_source`) and allowlisted before anything is fetched
//! (`403 source_not_allowed`), then the cache (memory, then disk, then the
//! shared database) → `200`. A miss queues one `schema_build` and answers
//! `202 {"status": "computing"}` (the client repeats the same call); with
//! every nix slot busy it answers `503 nix_busy` at once. A build that
//! failed answers its error: `output_missing`, `source_too_old` (`422`),
//! `build_failed` (`422`), `source_repository_not_found`,
//! `source_revision_not_found` (`422`), `fetch_failed` (`502`), `timeout`
//! (`504`), naming the output; the build log stays with the job, for
//! operators.

use crate::auth::Auth;
use crate::error::ApiError;
use crate::extract::{Json, NoQuery, Query, StrictQuery};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use slipway_jobs::source::fleet::{Lookup, SourceSchema};
use slipway_jobs::source::ModuleSource;
use std::sync::Arc;

/// `?application=` of `GET /schema`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SchemaQuery {
    /// One application's standalone schema instead of the whole one.
    application: Option<String>,
}

/// `GET /schema` (`?application=`): the built-in source's schema, or one
/// application's standalone schema (MS-2, MS-5). No fetch, no build.
#[utoipa::path(get, path = "/schema", tag = "public",
    params(SchemaQuery),
    responses(
        (status = 200, description = "A JSON Schema (draft 2020-12) of the configuration", body = Object),
        (status = 400, description = "`invalid_request`: the query string is not valid", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such application", body = crate::error::ErrorBody),
    ))]
pub async fn built_in_schema(
    State(app): State<AppState>,
    Query(q): Query<SchemaQuery>,
) -> Result<Json<Value>, ApiError> {
    let outputs = app.sources.built_in.outputs();
    match q.application.as_deref() {
        None => Ok(Json(outputs.schema.clone())),
        Some(name) => pick_application(&outputs.applications, name, "the built-in source").map(Json),
    }
}

/// One application's schema from `applications` (`404` naming the
/// applications `source` has).
pub fn pick_application(
    applications: &std::collections::BTreeMap<String, Value>,
    name: &str,
    source: &str,
) -> Result<Value, ApiError> {
    applications.get(name).cloned().ok_or_else(|| {
        let known: Vec<&str> = applications.keys().map(String::as_str).collect();
        ApiError::not_found(format!("no application {name:?} in {source}; it has {}", known.join(", ")))
    })
}

/// `?section=` of `GET /renames`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RenamesQuery {
    /// Only the entries inside this section, with paths relative to it.
    section: Option<String>,
}

/// `GET /renames` (`?section=`): the built-in source's renames table
/// (`renames.json`: ordered `{from, to, kind}` entries, MS-2), or only the
/// entries inside one section, with paths relative to it (MG-4), so a form
/// that edits one section migrates that value alone. No fetch, no build.
#[utoipa::path(get, path = "/renames", tag = "public",
    params(RenamesQuery),
    responses(
        (status = 200, description = "The renames table, in order", body = Vec<slipway_jobs::renames::Rename>),
        (status = 400, description = "`invalid_request`: the query string is not valid", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such section", body = crate::error::ErrorBody),
    ))]
pub async fn built_in_renames(
    State(app): State<AppState>,
    Query(q): Query<RenamesQuery>,
) -> Result<Json<Value>, ApiError> {
    let outputs = app.sources.built_in.outputs();
    pick_renames(&outputs.renames, &outputs.meta, q.section.as_deref(), "the built-in source").map(Json)
}

/// The whole renames table, or only the entries inside `section` with paths
/// relative to it (MG-4; `404` naming the sections `source` has).
pub fn pick_renames(
    renames: &[slipway_jobs::renames::Rename],
    meta: &slipway_jobs::source::outputs::Meta,
    section: Option<&str>,
    source: &str,
) -> Result<Value, ApiError> {
    let table = match section {
        None => renames.to_vec(),
        Some(id) => {
            let Some(section) = meta.sections.iter().find(|s| s.id == id) else {
                let known: Vec<&str> = meta.sections.iter().map(|s| s.id.as_str()).collect();
                return Err(ApiError::not_found(format!("no section {id:?} in {source}; it has {}", known.join(", "))));
            };
            slipway_jobs::renames::section_renames(renames, &section.path)
        }
    };
    Ok(serde_json::to_value(table).expect("renames serialise"))
}

/// Body of `POST /schema/get_for`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SchemaFor {
    /// A module source (MS-1); absent: the built-in source.
    #[serde(default)]
    source: Option<String>,
    /// One application's standalone schema instead of the whole one.
    #[serde(default)]
    application: Option<String>,
}

/// Body of `POST /renames/get_for`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenamesFor {
    /// A module source (MS-1); absent: the built-in source.
    #[serde(default)]
    source: Option<String>,
    /// Only the renames inside this section, relative to it (MG-4).
    #[serde(default)]
    section: Option<String>,
}

/// The outputs of `source`, or the answer to give instead.
async fn lookup(app: &AppState, source: &str) -> Result<Result<Arc<SourceSchema>, Response>, ApiError> {
    let parsed = ModuleSource::parse(source)?;
    parsed.check_allowed(&app.sources.policy.trusted, app.sources.policy.allow_path)?;
    Ok(match app.sources.schema(&parsed, false).await? {
        Lookup::Ready(schema) => Ok(schema),
        Lookup::Computing => {
            let mut answer = json!({
                "status": "computing",
                "message": "the source's outputs are being built; repeat this request",
            });
            let queues = crate::observe::queue_states(app, &mut app.db.acquire().await?).await?;
            let warnings = crate::observe::unserved_warnings(app, &queues);
            if !warnings.is_empty() {
                answer["warnings"] = json!(warnings);
            }
            Err((StatusCode::ACCEPTED, axum::Json(answer)).into_response())
        }
        Lookup::Busy => Err(ApiError::nix_busy(format!(
            "every nix slot (NIX_SLOTS {}) is busy building or evaluating module sources; try again shortly",
            app.config.sources.nix_slots
        ))
        .into_response()),
        Lookup::Failed(f) => Err(ApiError::from(f).into_response()),
        // Only a waiting caller gets it; get_for answers 202 with a warning instead.
        Lookup::Unserved => Err(ApiError::from(slipway_jobs::submit::SubmitError::NixUnserved).into_response()),
    })
}

/// `POST /schema/get_for {"source", "application"?}` (MS-6): the source's
/// `schema.json`, or one application's schema from `applications.json`.
/// See the module doc for the answers.
#[utoipa::path(post, path = "/schema/get_for", tag = "sources",
    request_body = SchemaFor,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A JSON Schema (draft 2020-12) of the source's configuration", body = Object),
        (status = 202, description = "The source's outputs are being built: repeat the same call", body = Computing),
        (status = 400, description = "`invalid_module_source`, `malformed_json` or `invalid_request`", body = crate::error::ErrorBody),
        (status = 403, description = "`source_not_allowed`: the source is not on this service's allowlist", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such application or section in the source", body = crate::error::ErrorBody),
        (status = 415, description = "`unsupported_media_type`: the body is not sent as JSON", body = crate::error::ErrorBody),
        (status = 422, description = "`output_missing`, `source_too_old`, `build_failed`, `source_repository_not_found` \
                                      or `source_revision_not_found`", body = crate::error::ErrorBody),
        (status = 502, description = "`fetch_failed`: the source's server could not be reached, or failed", body = crate::error::ErrorBody),
        (status = 503, description = "`nix_busy` or `service_unavailable`", body = crate::error::ErrorBody),
        (status = 504, description = "`timeout`: building the source's outputs took too long", body = crate::error::ErrorBody),
    ))]
pub async fn schema(
    State(app): State<AppState>,
    _auth: Auth,
    _query: StrictQuery<NoQuery>,
    Json(body): Json<SchemaFor>,
) -> Result<Response, ApiError> {
    let Some(source) = body.source.as_deref() else {
        let outputs = app.sources.built_in.outputs();
        let value = match body.application.as_deref() {
            None => outputs.schema.clone(),
            Some(name) => pick_application(&outputs.applications, name, "the built-in source")?,
        };
        return Ok(axum::Json(value).into_response());
    };
    let schema = match lookup(&app, source).await? {
        Ok(schema) => schema,
        Err(answer) => return Ok(answer),
    };
    let value = match body.application.as_deref() {
        None => schema.built.document("schema")?.clone(),
        Some(name) => pick_application(&schema.built.parsed("applicationSchemas")?, name, "this source")?,
    };
    Ok(axum::Json(value).into_response())
}

/// `POST /renames/get_for {"source", "section"?}` (MS-6): the source's
/// `renames.json`, or only the entries inside one section with paths
/// relative to it (MG-4). See the module doc for the answers.
#[utoipa::path(post, path = "/renames/get_for", tag = "sources",
    request_body = RenamesFor,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The source's renames table, in order", body = Vec<slipway_jobs::renames::Rename>),
        (status = 202, description = "The source's outputs are being built: repeat the same call", body = Computing),
        (status = 400, description = "`invalid_module_source`, `malformed_json` or `invalid_request`", body = crate::error::ErrorBody),
        (status = 403, description = "`source_not_allowed`: the source is not on this service's allowlist", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such application or section in the source", body = crate::error::ErrorBody),
        (status = 415, description = "`unsupported_media_type`: the body is not sent as JSON", body = crate::error::ErrorBody),
        (status = 422, description = "`output_missing`, `source_too_old`, `build_failed`, `source_repository_not_found` \
                                      or `source_revision_not_found`", body = crate::error::ErrorBody),
        (status = 502, description = "`fetch_failed`: the source's server could not be reached, or failed", body = crate::error::ErrorBody),
        (status = 503, description = "`nix_busy` or `service_unavailable`", body = crate::error::ErrorBody),
        (status = 504, description = "`timeout`: building the source's outputs took too long", body = crate::error::ErrorBody),
    ))]
pub async fn renames(
    State(app): State<AppState>,
    _auth: Auth,
    _query: StrictQuery<NoQuery>,
    Json(body): Json<RenamesFor>,
) -> Result<Response, ApiError> {
    let section = body.section.as_deref();
    let Some(source) = body.source.as_deref() else {
        let outputs = app.sources.built_in.outputs();
        return Ok(
            axum::Json(pick_renames(&outputs.renames, &outputs.meta, section, "the built-in source")?).into_response()
        );
    };
    let schema = match lookup(&app, source).await? {
        Ok(schema) => schema,
        Err(answer) => return Ok(answer),
    };
    if section.is_none() {
        return Ok(axum::Json(schema.built.document("renames")?.clone()).into_response());
    }
    let value = pick_renames(
        &schema.built.parsed::<Vec<_>>("renames")?,
        &schema.built.parsed("meta")?,
        section,
        "this source",
    )?;
    Ok(axum::Json(value).into_response())
}

/// The `202` of a `get_for` whose source's outputs are being built.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Computing {
    /// Always `computing`.
    status: String,
    /// What to do: repeat the request.
    message: String,
    /// Why the build may not progress (a queue no live worker serves); absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}
