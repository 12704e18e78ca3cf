//! Public procedures (no token): health, version, the built-in source's
//! schema and renames (MS-5), what a draft configuration serves (TF-2),
//! labels (ID-2).

use crate::app::AppState;
use crate::error::ApiError;
use crate::extract::{Json, NoQuery, Query, StrictQuery};
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;
use slipway_jobs::openbao_token::TokenState;

/// `GET /healthz`: liveness. The process serves HTTP; the database is not
/// asked, so a database outage never gets every api restarted at once.
#[utoipa::path(get, path = "/healthz", tag = "public",
    responses((status = 200, description = "The process serves HTTP", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health { status: "ok".to_owned() })
}

/// The answer of `GET /healthz`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Health {
    /// Always `ok`.
    status: String,
}

/// The answer of `GET /readyz`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Readiness {
    /// Always `ready`.
    status: String,
    /// The database engine: `sqlite` or `postgres`.
    database: String,
    /// Each queue whose jobs live in the database: jobs waiting, live workers.
    queues: Vec<slipway_jobs::store::workers::QueueState>,
    /// `ok` or `unavailable`; `null` when this api has no OpenBao configured.
    #[schema(required = true)]
    openbao: Option<String>,
    /// The state of the api's OpenBao token (`docs/OPENBAO.md`): `ok`,
    /// `expiring` (a warning says when it ends), `denied` (its policy lacks
    /// `auth/token/lookup-self`), `unavailable` (OpenBao could not be
    /// asked), `unknown` (not looked at yet); `null` without OpenBao. An
    /// `expired` token makes the answer `503`.
    #[schema(required = true)]
    openbao_token: Option<String>,
    /// What an operator should look at (a queue no live worker serves, …).
    warnings: Vec<String>,
}

/// How long `GET /readyz` waits for the database: the readiness budget, the
/// same time any other route waits for a connection before it answers `503`.
pub const READY_TIMEOUT: std::time::Duration = slipway_jobs::store::ACQUIRE_TIMEOUT;

/// `GET /readyz`: readiness. `200 {"status": "ready", "database": engine,
/// "queues": [{"queue", "waiting", "workers"}], "warnings": [...]}` once the
/// database answers a query within [`READY_TIMEOUT`] (2 s); otherwise `503
/// service_unavailable`, so a load balancer sends submits elsewhere. The
/// outage is logged once, not per poll ([`crate::database_health`]). A queue
/// whose jobs wait while no live worker serves it is a warning here
/// and in the log, not unreadiness: the api itself serves.
#[utoipa::path(get, path = "/readyz", tag = "public",
    responses(
        (status = 200, description = "The database answers", body = Readiness),
        (status = 503, description = "`service_unavailable`: the database does not answer, or OpenBao no longer accepts the api's token (`details.openbao_token`: `expired`)", body = crate::error::ErrorBody),
    ))]
pub async fn readyz(State(app): State<AppState>) -> Result<Json<Readiness>, ApiError> {
    let probe = async {
        let mut conn = app.db.acquire().await?;
        slipway_jobs::store::ping(&mut conn).await?;
        queue_states(&app, &mut conn).await
    };
    let engine = app.db.engine().name();
    match tokio::time::timeout(READY_TIMEOUT, probe).await {
        Ok(Ok(queues)) => {
            app.database_health.answered();
            let mut warnings = unserved_warnings(&app, &queues);
            // OpenBao's trouble does not make the api unready (it serves
            // everything else), but a submit that needs it would get 503.
            let openbao = match &app.secrets {
                None => None,
                Some(bao) => match bao.clone().with_timeout(READY_TIMEOUT).check().await {
                    Ok(()) => Some("ok".to_owned()),
                    Err(e) => {
                        warnings.push(format!(
                            "OpenBao, which keeps operator secrets, cannot serve this api ({e}): submits of \
                             deployments with secret fields answer 503 until it can"
                        ));
                        Some("unavailable".to_owned())
                    }
                },
            };
            let token = app.openbao_token.as_ref().map(|w| w.status());
            if let Some(token) = token.as_ref().filter(|t| t.state == TokenState::Expired) {
                return Err(ApiError::unavailable(format!(
                    "not ready: OpenBao no longer accepts this api's token ({}); give the api a new OPENBAO_TOKEN",
                    token.problem.as_deref().unwrap_or("expired")
                ))
                .with_details(serde_json::json!({ "openbao_token": "expired" })));
            }
            if let Some(problem) = token.as_ref().filter(|t| t.state != TokenState::Ok).and_then(|t| t.problem.clone())
            {
                warnings.push(format!("this api's OpenBao token: {problem}"));
            }
            warnings.extend(app.wal.as_ref().and_then(|w| w.warning()));
            warnings.extend(app.storage.warnings());
            warnings.extend(app.clock.warning());
            let openbao_token = token.map(|t| t.state.as_str().to_owned());
            Ok(Json(Readiness {
                status: "ready".to_owned(),
                database: engine.to_owned(),
                queues,
                openbao,
                openbao_token,
                warnings,
            }))
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

/// The queues whose jobs live in the database (`builds`, `nix`): jobs
/// waiting and live workers serving each.
pub async fn queue_states(
    app: &AppState,
    conn: &mut slipway_jobs::store::Conn,
) -> Result<Vec<slipway_jobs::store::workers::QueueState>, slipway_jobs::store::StoreError> {
    use slipway_jobs::store::queue::{BUILDS_QUEUE, CALLBACKS_QUEUE, MISSED_HEARTBEATS, NIX_QUEUE, READINESS_QUEUE};
    let window = (app.config.heartbeat * MISSED_HEARTBEATS).as_secs() as i64 + 1;
    let queues = [BUILDS_QUEUE, NIX_QUEUE, CALLBACKS_QUEUE, READINESS_QUEUE];
    slipway_jobs::store::workers::queue_states(conn, &queues, window).await
}

/// One sentence per queue whose jobs wait with no live worker serving it
/// logged as a warning when the queue first turns so.
pub fn unserved_warnings(app: &AppState, queues: &[slipway_jobs::store::workers::QueueState]) -> Vec<String> {
    let mut warnings = Vec::new();
    for q in queues {
        let unserved = q.waiting > 0 && q.workers == 0;
        let was = app.unserved.lock().expect("unserved queues lock").insert(q.queue.clone(), unserved);
        if unserved {
            let jobs = if q.waiting == 1 { "1 job waits".to_owned() } else { format!("{} jobs wait", q.waiting) };
            let warning = format!(
                "{jobs} on the {} queue, which no live worker serves: start a worker that serves it \
                 (slipway-worker work serves every queue unless --queues or SLIPWAY_QUEUES says otherwise)",
                q.queue
            );
            if was != Some(true) {
                tracing::warn!(queue = %q.queue, waiting = q.waiting, "jobs wait on a queue that no live worker serves");
            }
            warnings.push(warning);
        }
    }
    warnings
}

/// The commit this api was built from, when it was built from a git
/// checkout (captured by `build.rs`).
pub const REVISION: Option<&str> = option_env!("SLIPWAY_REVISION");

/// `GET /version` (public): `{"name": "slipway", "version": <the crate
/// version, e.g. "0.1.0">, "revision": <40-hex git commit id, or null when
/// the build had no git checkout>}`.
#[utoipa::path(get, path = "/version", tag = "public",
    responses((status = 200, description = "What this api is", body = Version)))]
pub async fn version() -> Json<Version> {
    Json(Version {
        name: "slipway".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        revision: REVISION.map(str::to_owned),
    })
}

/// The answer of `GET /version`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Version {
    /// Always `slipway`.
    name: String,
    /// The crate version, e.g. `0.1.0`.
    version: String,
    /// The git commit this api was built from (40 hex digits); `null` without a checkout.
    #[schema(required = true)]
    revision: Option<String>,
}

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
pub async fn schema(State(app): State<AppState>, Query(q): Query<SchemaQuery>) -> Result<Json<Value>, ApiError> {
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
pub async fn renames(State(app): State<AppState>, Query(q): Query<RenamesQuery>) -> Result<Json<Value>, ApiError> {
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

/// Any unknown route.
pub async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}

/// A known route with another method.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "this route does not take that method")
}
