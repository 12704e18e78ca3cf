//! What a draft configuration serves (TF-2, no token): each application's
//! place and the sections of a configuration that is not stored, and fresh
//! DNS labels (ID-2).

use crate::error::ApiError;
use crate::extract::{Json, NoQuery, StrictQuery};
use crate::state::AppState;
use axum::extract::State;
use serde::Deserialize;
use serde_json::Value;

/// Body of `POST /application-paths`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplicationPathsBody {
    /// The configuration to read (a JSON object, in any shape the built-in
    /// source's renames migrate).
    #[schema(value_type = Object)]
    configuration: Value,
    /// Another configuration (say the stored one) to compare it with;
    /// absent or `null` for none.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    previous: Option<Value>,
}

/// `POST /application-paths` (public, TF-2): where each application's value
/// sits in a configuration that is not stored (a draft), and, when
/// `previous` is given, which applications changed between the two.
///
/// Body: `{"configuration": {…}, "previous"?: {…}}`. Each side is migrated
/// with the built-in source's renames, as a submit would, then read at its
/// own paths. Answer `200`:
/// `{"applications": {"<key>": {"path": [..], "present": bool, "section": "<id>"}},
/// "changed": ["<key>", …]}`; `changed` (sorted keys) only with `previous`.
/// Errors: `400 malformed_json`, `400 invalid_request` (a body of another
/// shape, an unknown field, or a side that is not a JSON object). Reads only
/// the body: no token, no database, no fetch.
#[utoipa::path(post, path = "/application-paths", tag = "public",
    request_body = ApplicationPathsBody,
    responses(
        (status = 200, description = "Each application's place in the configuration", body = slipway_jobs::draft::ApplicationPaths),
        (status = 400, description = "`malformed_json` or `invalid_request` (a body of another shape)", body = crate::error::ErrorBody),
        (status = 415, description = "`unsupported_media_type`: the body is not sent as JSON", body = crate::error::ErrorBody),
    ))]
pub async fn application_paths(
    State(app): State<AppState>,
    _query: StrictQuery<NoQuery>,
    Json(body): Json<ApplicationPathsBody>,
) -> Result<Json<slipway_jobs::draft::ApplicationPaths>, ApiError> {
    require_object("configuration", &body.configuration)?;
    if let Some(previous) = &body.previous {
        require_object("previous", previous)?;
    }
    let outputs = app.sources.built_in.outputs();
    Ok(Json(slipway_jobs::draft::application_paths(
        &outputs.meta,
        &outputs.renames,
        &body.configuration,
        body.previous.as_ref(),
    )))
}

/// Body of `POST /sections`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SectionsBody {
    /// The configuration to read (a JSON object).
    #[schema(value_type = Object)]
    configuration: Value,
}

/// `POST /sections` (public, TF-2): the sections a form edits one at a
/// time, as a configuration that is not stored (a draft) holds them.
///
/// Body: `{"configuration": {…}}`, migrated with the built-in source's
/// renames as a submit would. Answer `200`: `{"sections": [{"id", "title",
/// "path": [..], "present": bool, "value": <the section's value, null when
/// not present>}]}` in the source's order. A section id is opaque (at present
/// an application's key): a front-end matches it, never parses it. Errors as
/// [`application_paths`]. Reads only the body.
#[utoipa::path(post, path = "/sections", tag = "public",
    request_body = SectionsBody,
    responses(
        (status = 200, description = "The sections, in the source's order", body = slipway_jobs::draft::Sections),
        (status = 400, description = "`malformed_json` or `invalid_request` (a body of another shape)", body = crate::error::ErrorBody),
        (status = 415, description = "`unsupported_media_type`: the body is not sent as JSON", body = crate::error::ErrorBody),
    ))]
pub async fn sections(
    State(app): State<AppState>,
    _query: StrictQuery<NoQuery>,
    Json(body): Json<SectionsBody>,
) -> Result<Json<slipway_jobs::draft::Sections>, ApiError> {
    require_object("configuration", &body.configuration)?;
    let outputs = app.sources.built_in.outputs();
    Ok(Json(slipway_jobs::draft::sections(&outputs.meta, &outputs.renames, &body.configuration)))
}

/// `400 invalid_request` unless the body's `field` is a JSON object.
fn require_object(field: &str, value: &Value) -> Result<(), ApiError> {
    if value.is_object() {
        Ok(())
    } else {
        Err(ApiError::bad_request("invalid_request", format!("{field} must be a JSON object (a configuration)")))
    }
}

/// Body of `POST /labels`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct LabelRequest {
    /// A readable start for the label: lower-case letters, digits and
    /// inner hyphens (cut to 25 characters).
    #[schema(pattern = "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")]
    slug: String,
}

/// The answer of `POST /labels`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Label {
    /// A fresh DNS label: the slug and a random suffix.
    label: String,
}

/// `POST /labels {slug}`: a fresh DNS label (ID-2, seed 004 `NewLabel`).
#[utoipa::path(post, path = "/labels", tag = "public",
    request_body = LabelRequest,
    responses(
        (status = 200, description = "A fresh label", body = Label),
        (status = 400, description = "`invalid_slug`, `malformed_json` or `invalid_request`", body = crate::error::ErrorBody),
        (status = 415, description = "`unsupported_media_type`: the body is not sent as JSON", body = crate::error::ErrorBody),
    ))]
pub async fn labels(_query: StrictQuery<NoQuery>, Json(req): Json<LabelRequest>) -> Result<Json<Label>, ApiError> {
    slipway_jobs::id::new_label(&req.slug)
        .map(|label| Json(Label { label }))
        .map_err(|e| ApiError::bad_request("invalid_slug", e.to_string()))
}
