//! The `get_for` procedures (MS-6): a module source's schema or renames,
//! authenticated and allowlisted, built on the `nix` queue on a miss.
//!
//! Order: the token (`401`), the body, the source parsed (`400
//! invalid_module_source`) and allowlisted before anything is fetched
//! (`403 source_not_allowed`), then the cache (memory, then disk, then the
//! shared database) → `200`. A miss queues one `schema_build` and answers
//! `202 {"status": "computing"}` (the client repeats the same call); with
//! every nix slot busy it answers `503 nix_busy` at once. A build that
//! failed answers its error: `output_missing`, `source_too_old` (`422`),
//! `build_failed` (`422`), `fetch_failed` (`502`), `timeout` (`504`), naming
//! the output; the build log stays with the job, for operators.

use crate::app::{AppState, Auth};
use crate::error::ApiError;
use crate::extract::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use slipway_jobs::source::ModuleSource;
use slipway_jobs::sources::{Lookup, SourceSchema};
use std::sync::Arc;

/// Body of `POST /schema/get_for`.
#[derive(Debug, Deserialize)]
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
#[derive(Debug, Deserialize)]
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
            let queues = crate::routes::public::queue_states(app, &mut app.db.acquire().await?).await?;
            let warnings = crate::routes::public::unserved_warnings(app, &queues);
            if !warnings.is_empty() {
                answer["warnings"] = json!(warnings);
            }
            Err((StatusCode::ACCEPTED, axum::Json(answer)).into_response())
        }
        Lookup::Busy => Err(ApiError::nix_busy(format!(
            "every nix slot (NIX_SLOTS {}) is busy building or evaluating module sources; try again shortly",
            app.config.nix_slots
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
pub async fn schema(
    State(app): State<AppState>,
    _auth: Auth,
    Json(body): Json<SchemaFor>,
) -> Result<Response, ApiError> {
    let Some(source) = body.source.as_deref() else {
        let outputs = app.sources.built_in.outputs();
        return Ok(axum::Json(pick_application(&outputs.schema, &outputs.applications, body.application.as_deref())?)
            .into_response());
    };
    let schema = match lookup(&app, source).await? {
        Ok(schema) => schema,
        Err(answer) => return Ok(answer),
    };
    let value = match body.application.as_deref() {
        None => schema.built.document("schema")?.clone(),
        Some(name) => {
            let applications = schema.built.document("applicationSchemas")?;
            applications.get(name).cloned().ok_or_else(|| {
                let known: Vec<&str> =
                    applications.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
                ApiError::not_found(format!("no application {name:?} in this source; it has {}", known.join(", ")))
            })?
        }
    };
    Ok(axum::Json(value).into_response())
}

fn pick_application(
    schema: &Value,
    applications: &std::collections::BTreeMap<String, Value>,
    application: Option<&str>,
) -> Result<Value, ApiError> {
    match application {
        None => Ok(schema.clone()),
        Some(name) => applications.get(name).cloned().ok_or_else(|| {
            let known: Vec<&str> = applications.keys().map(String::as_str).collect();
            ApiError::not_found(format!("no application {name:?} in the built-in source; it has {}", known.join(", ")))
        }),
    }
}

/// `POST /renames/get_for {"source", "section"?}` (MS-6): the source's
/// `renames.json`, or only the entries inside one section with paths
/// relative to it (MG-4). See the module doc for the answers.
pub async fn renames(
    State(app): State<AppState>,
    _auth: Auth,
    Json(body): Json<RenamesFor>,
) -> Result<Response, ApiError> {
    let (table, meta) = if let Some(source) = body.source.as_deref() {
        let schema = match lookup(&app, source).await? {
            Ok(schema) => schema,
            Err(answer) => return Ok(answer),
        };
        let table = schema.built.document("renames")?.clone();
        let meta = match body.section {
            Some(_) => schema.built.document("meta")?.clone(),
            None => Value::Null,
        };
        (table, meta)
    } else {
        let outputs = app.sources.built_in.outputs();
        (
            serde_json::to_value(&outputs.renames).expect("renames serialise"),
            serde_json::to_value(&outputs.meta).expect("meta serialises"),
        )
    };
    let Some(id) = body.section else { return Ok(axum::Json(table).into_response()) };
    let renames: Vec<slipway_jobs::migrate::Rename> = serde_json::from_value(table).map_err(|e| {
        ApiError::from(slipway_jobs::nix::NixFailure {
            code: slipway_jobs::nix::FailureCode::BuildFailed,
            output: Some("renames".into()),
            message: format!("renames.json is not a list of {{from, to, kind}} entries: {e}"),
        })
    })?;
    let meta: slipway_jobs::source::Meta = serde_json::from_value(meta).map_err(|e| {
        ApiError::from(slipway_jobs::nix::NixFailure {
            code: slipway_jobs::nix::FailureCode::BuildFailed,
            output: Some("meta".into()),
            message: format!("meta.json is not of its documented shape: {e}"),
        })
    })?;
    let Some(section) = meta.sections.iter().find(|s| s.id == id) else {
        let known: Vec<&str> = meta.sections.iter().map(|s| s.id.as_str()).collect();
        return Err(ApiError::not_found(format!("no section {id:?} in this source; it has {}", known.join(", "))));
    };
    let table = slipway_jobs::migrate::section_renames(&renames, &section.path);
    Ok(axum::Json(serde_json::to_value(table).expect("renames serialise")).into_response())
}
