//! `/deployments`: submit (MG-7), read (ST-1, TF-1), list, delete (DL-1).

use super::rfc3339;
use crate::auth::Auth;
use crate::error::ApiError;
use crate::extract::{DeploymentIdPath, Json, NoQuery, OptionalJson, Query, StrictQuery};
use crate::state::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use slipway_jobs::callback::check_delete_callback;
use slipway_jobs::id::DeploymentId;
use slipway_jobs::read::DeploymentRead;
use slipway_jobs::source::outputs::Instance;
use slipway_jobs::state::{BuildKind, DeploymentState};
use slipway_jobs::store::builds::{self, BuildRow};
use slipway_jobs::store::deployments;
use slipway_jobs::store::Conn;
use slipway_jobs::submit::{self, Queueing, SubmitRequest};

/// Parses a path id (ID-1): anything else is `400 invalid_deployment_id`.
pub fn parse_id(raw: &str) -> Result<DeploymentId, ApiError> {
    DeploymentId::parse(raw).map_err(|e| ApiError::bad_request("invalid_deployment_id", e.to_string()))
}

/// `404` unless deployment `id` exists.
pub async fn require_exists(conn: &mut Conn, id: &DeploymentId) -> Result<(), ApiError> {
    match deployments::get(conn, id.as_str()).await? {
        Some(_) => Ok(()),
        None => Err(ApiError::not_found(format!("no deployment {id}"))),
    }
}

/// `/deployments/` with an empty id.
#[utoipa::path(get, path = "/deployments/", tag = "deployments",
    description = "The deployment id is empty: always `400 invalid_deployment_id` once the token is checked \
                   (also for `PUT` and `DELETE`).",
    security(("bearer" = [])),
    responses((status = 400, description = "`invalid_deployment_id`: the id is empty", body = crate::error::ErrorBody)))]
pub async fn empty_id(_auth: Auth, _query: StrictQuery<NoQuery>) -> ApiError {
    ApiError::bad_request("invalid_deployment_id", "the deployment id is empty")
}

/// A build as a deployment read shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BuildSummary {
    id: String,
    kind: BuildKind,
    status: slipway_jobs::state::BuildStatus,
    /// Why it failed or ended without running; absent while it runs or when it succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = slipway_jobs::jobs::report::Reason)]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    error: Option<String>,
    attempts: i64,
    queued_at: String,
    #[schema(required = true)]
    started_at: Option<String>,
    #[schema(required = true)]
    finished_at: Option<String>,
    /// Why it was queued.
    trigger: slipway_jobs::provenance::Trigger,
    /// Who asked (`null` for a build made before this was recorded).
    #[schema(required = true)]
    requested_by: Option<slipway_jobs::provenance::RequestedBy>,
    /// The plan an apply activates, or the build a rollback returns to.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    based_on: Option<String>,
    /// The rollout that queued it (trigger `rollout`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    rollout: Option<String>,
    /// A dry run (a plan): it changed nothing.
    dry_run: bool,
    /// One line on what it changed from the build before it
    /// (`GET /builds/{id}/diff` has the whole patch); in the run history
    /// (`GET /deployments/{id}/builds`) only.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    changes: Option<String>,
}

impl BuildSummary {
    /// The summary of `b` in the run history, whose changes are counted
    /// from `previous`.
    fn of(b: &BuildRow, previous: Option<&BuildRow>) -> Self {
        Self { changes: Some(slipway_jobs::history::diff(b, previous).summary), ..Self::from(b) }
    }
}

impl From<&BuildRow> for BuildSummary {
    fn from(b: &BuildRow) -> Self {
        Self {
            trigger: b.trigger,
            requested_by: b.provenance.requested_by.clone(),
            based_on: b.provenance.based_on.clone(),
            rollout: b.provenance.rollout.clone(),
            dry_run: b.dry_run,
            changes: None,
            id: b.id.clone(),
            kind: b.kind,
            status: b.status,
            reason: b.reason.clone(),
            error: b.error.clone(),
            attempts: b.attempts,
            queued_at: rfc3339(b.queued_at),
            started_at: b.started_at.map(rfc3339),
            finished_at: b.finished_at.map(rfc3339),
        }
    }
}

/// `GET /deployments/{id}`: state (ST-1) and typed fields (TF-1).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeploymentView {
    id: String,
    state: DeploymentState,
    /// The build the state comes from: the latest that ran or may still
    /// run. `last_build` may be newer: a build cancelled before it started,
    /// or superseded, changed nothing (ST-1, Q-7).
    #[schema(required = true)]
    state_build_id: Option<String>,
    #[schema(required = true)]
    module_source: Option<String>,
    #[schema(required = true)]
    domain: Option<String>,
    /// Instances of the last submit.
    instances: Vec<Instance>,
    /// Instances of the last successful build (empty after a destroy),
    /// each with its readiness (§10).
    deployed_instances: Vec<DeployedInstance>,
    /// The stored configuration (migrated).
    #[schema(value_type = Object)]
    configuration: Value,
    /// EV-1: the last submit's names eval (`{nodes: [{name, dnsNames,
    /// configuration}], disabledApplications}`); `null` when it stored
    /// without one.
    #[schema(required = true, value_type = Option<slipway_jobs::nix::Names>)]
    names: Option<Value>,
    #[schema(required = true)]
    last_build: Option<BuildSummary>,
    created_at: String,
    updated_at: String,
}

/// A deployed instance (TF-1) with its readiness (§10).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeployedInstance {
    #[serde(flatten)]
    instance: Instance,
    /// `null` until its deploy recorded it (a deploy of an older release).
    #[schema(required = true)]
    readiness: Option<ReadinessView>,
}

/// An instance's readiness: `{state, reason?, checked_at, probes,
/// deadline_at}`; `state` is `pending`, `ready`, `wrong_host`,
/// `not_found` or `not_ready`; times are RFC 3339 (`checked_at` null
/// before the first probe).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReadinessView {
    state: slipway_jobs::probe::State,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    reason: Option<String>,
    #[schema(required = true)]
    checked_at: Option<String>,
    probes: i64,
    deadline_at: String,
}

impl From<&slipway_jobs::store::instance_readiness::ReadinessRow> for ReadinessView {
    fn from(r: &slipway_jobs::store::instance_readiness::ReadinessRow) -> Self {
        Self {
            state: r.state,
            reason: r.reason.clone(),
            checked_at: r.checked_at.map(rfc3339),
            probes: r.probes,
            deadline_at: rfc3339(r.deadline_at),
        }
    }
}

impl From<DeploymentRead> for DeploymentView {
    fn from(read: DeploymentRead) -> Self {
        let row = read.deployment;
        Self {
            id: row.id,
            state: read.state,
            state_build_id: read.state_build.map(|b| b.id),
            module_source: row.module_source,
            domain: row.domain,
            instances: row.instances,
            deployed_instances: read
                .deployed_instances
                .into_iter()
                .map(|instance| {
                    let row = read.readiness.iter().find(|r| r.instance == instance.name);
                    DeployedInstance { readiness: row.map(ReadinessView::from), instance }
                })
                .collect(),
            configuration: row.configuration,
            names: row.names,
            last_build: read.last_build.as_ref().map(BuildSummary::from),
            created_at: rfc3339(row.created_at),
            updated_at: rfc3339(row.updated_at),
        }
    }
}

/// `GET /deployments/{id}`.
#[utoipa::path(get, path = "/deployments/{id}", tag = "deployments",
    params(("id" = String, Path, description = "A deployment id (lower-case letters, digits and `-`)")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The deployment: state, instances, configuration, last build; `ETag` is its version, for `If-Match`", body = DeploymentView,
            headers(("ETag" = String, description = "The deployment's version as a strong entity tag (`\"7\"`): send it as `If-Match` with a `PUT` or `DELETE`"))),
        (status = 400, description = "`invalid_deployment_id`", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: outside the token's scope", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such deployment", body = crate::error::ErrorBody),
    ))]
pub async fn show(
    State(app): State<AppState>,
    auth: Auth,
    DeploymentIdPath(id): DeploymentIdPath,
) -> Result<([(axum::http::HeaderName, String); 1], Json<DeploymentView>), ApiError> {
    auth.require(id.as_str())?;
    let read = slipway_jobs::read::deployment(&mut app.db.acquire().await?, id.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no deployment {id}")))?;
    let etag = slipway_jobs::precondition::etag(read.deployment.version);
    Ok(([(axum::http::header::ETAG, etag)], Json(read.into())))
}

/// The most ids one `GET /deployments?ids=` may name.
pub const MAX_LIST: usize = 100;

/// `?ids=a,b` of `GET /deployments`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// The deployments to list, comma-separated (at most 100).
    #[param(required = true)]
    ids: Option<String>,
}

/// The answer of `GET /deployments?ids=`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeploymentList {
    /// The listed deployments that exist, in the order given.
    deployments: Vec<DeploymentView>,
}

/// `GET /deployments?ids=a,b`: the listed deployments that exist, in the
/// order given. Every id must be valid and in the token's scope.
#[utoipa::path(get, path = "/deployments", tag = "deployments",
    params(ListQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The listed deployments that exist", body = DeploymentList),
        (status = 400, description = "`invalid_request` (no `ids`, more than 100) or `invalid_deployment_id`", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: an id is outside the token's scope", body = crate::error::ErrorBody),
    ))]
pub async fn list(
    State(app): State<AppState>,
    auth: Auth,
    Query(q): Query<ListQuery>,
) -> Result<Json<DeploymentList>, ApiError> {
    let raw = q.ids.ok_or_else(|| {
        ApiError::bad_request(
            "invalid_request",
            "name the deployments to list: ?ids=a,b (Slipway does not know your tenancy)",
        )
    })?;
    let mut ids: Vec<String> = Vec::new();
    for part in raw.split(',').filter(|s| !s.is_empty()) {
        let id = parse_id(part)?;
        auth.require(id.as_str())?;
        if !ids.contains(&id.to_string()) {
            ids.push(id.to_string());
        }
    }
    if ids.len() > MAX_LIST {
        return Err(ApiError::bad_request("invalid_request", format!("list at most {MAX_LIST} ids at a time")));
    }
    let reads = slipway_jobs::read::deployments(&mut app.db.acquire().await?, &ids).await?;
    let out: Vec<DeploymentView> = reads.into_iter().map(DeploymentView::from).collect();
    Ok(Json(DeploymentList { deployments: out }))
}

/// Body of `PUT /deployments/{id}` and `POST /deployments/{id}/preview`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitBody {
    /// The configuration (a JSON object, checked against the module
    /// source's schema after migration).
    #[schema(value_type = Object)]
    configuration: Value,
    /// A module source to deploy with; absent: the built-in one.
    #[serde(default)]
    module_source: Option<String>,
    /// Wait for every deployed instance to be ready before the deploy
    /// succeeds; absent: `HEALTH_GATE`'s (none by default). Ignored by a
    /// preview and a dry run.
    #[serde(default)]
    health_gate: Option<HealthGateBody>,
}

/// The `health_gate` of a submit.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthGateBody {
    /// How long the instances have to become ready: `90s`, `5m`, `1h`
    /// (1 s to 24 h); past it the build fails `health_gate`.
    timeout: String,
    /// Roll back to the previous successful deploy when the gate fails.
    #[serde(default)]
    rollback: bool,
}

/// The query of `PUT /deployments/{id}`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SubmitQuery {
    /// §11: evaluate and build, change nothing (`?dry_run=true`).
    #[serde(default)]
    dry_run: bool,
}

/// `PUT /deployments/{id}[?dry_run=true]`: migrate, validate, names eval,
/// store, queue a deploy (MG-7). `202 {deployment_id, build_id, state,
/// names?, names_skipped?, warnings?, dry_run?, deprecations?}`: `names` is the eval's
/// `{nodes: [{name, dnsNames, configuration}], disabledApplications}`;
/// `names_skipped` says why the submit stored without it (every nix slot
/// busy, EV-1). A dry run (§11) stores nothing of the deployment, writes no
/// secret, and queues a build that evaluates and builds but activates
/// nothing; its report (`GET /builds/{id}`) says per node what a real run
/// would change. A dry run of a deployment never submitted is `404`.
/// `deprecations` lists each rename the migration applied to the
/// configuration sent (`{from, to, module_source}`, JSON Pointers), and
/// `warnings` says the same in sentences beginning `deprecated:`: the sender
/// used a name the module source has renamed. Any query parameter other than
/// `dry_run` is `400 invalid_request`, naming it.
#[utoipa::path(put, path = "/deployments/{id}", tag = "deployments",
    params(("id" = String, Path, description = "A deployment id (lower-case letters, digits and `-`)"), SubmitQuery, ("Idempotency-Key" = Option<String>, Header, description = "Optional (IK-1): a key unique to this request (a ULID or UUID, 1 to 255 visible ASCII characters, as a structured-field string); a retry with the same key within `SLIPWAY_IDEMPOTENCY_TTL` gets the first answer again (`Idempotency-Replayed: true`) and queues nothing"), ("If-Match" = Option<String>, Header, description = "Optional: `*` or the `ETag` of `GET /deployments/{id}`; `412 precondition_failed` when the deployment changed since (or does not exist)"), ("If-None-Match" = Option<String>, Header, description = "Optional: `*`: create the deployment only; `412 precondition_failed` when it exists")),
    request_body = SubmitBody,
    security(("bearer" = [])),
    responses(
        (status = 202, description = "Stored, and a deploy (or a dry run) queued; `deprecations` lists the renames applied to the configuration sent", body = slipway_jobs::submit::Accepted),
        (status = 400, description = "`invalid_configuration` (every problem in `details.problems`), `invalid_module_source`, \
                                      `invalid_request`, `malformed_json` or `invalid_deployment_id`", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden` (outside the token's scope) or `source_not_allowed`", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: a dry run of a deployment never submitted", body = crate::error::ErrorBody),
        (status = 422, description = "`output_missing`, `source_too_old` or `build_failed` (the module source's outputs), \
                                      `source_repository_not_found` or `source_revision_not_found` (what it names is not there)", body = crate::error::ErrorBody),
        (status = 502, description = "`fetch_failed`: the module source's server could not be reached, or failed", body = crate::error::ErrorBody),
        (status = 429, description = "`tenant_queue_full`: the token's tenant has `TENANT_QUEUE_SIZE` builds waiting (`Retry-After`), refused before the body is read", body = crate::error::ErrorBody),
        (status = 503, description = "`queue_full`, `nix_busy`, `service_unavailable`, or `storage_unavailable` (a worker's state folder or the database's disk cannot be written: `details.storage`)", body = crate::error::ErrorBody),
        (status = 504, description = "`timeout`: building the module source's outputs took too long", body = crate::error::ErrorBody),
        (status = 400, description = "`invalid_idempotency_key`: the Idempotency-Key header is not one", body = crate::error::ErrorBody),
        (status = 409, description = "`idempotency_key_in_flight`: a request with the same Idempotency-Key is still being answered (`Retry-After`)", body = crate::error::ErrorBody),
        (status = 422, description = "`idempotency_key_reused`: the Idempotency-Key was used for another request", body = crate::error::ErrorBody),
        (status = 412, description = "`precondition_failed`: `If-Match` or `If-None-Match` does not hold (the deployment changed since it was read); nothing was changed", body = crate::error::ErrorBody),
    ))]
pub async fn submit(
    State(app): State<AppState>,
    auth: Auth,
    DeploymentIdPath(id): DeploymentIdPath,
    headers: HeaderMap,
    StrictQuery(query): StrictQuery<SubmitQuery>,
    Json(body): Json<SubmitBody>,
) -> Result<(StatusCode, Json<submit::Accepted>), ApiError> {
    auth.require(id.as_str())?;
    let precondition = crate::precondition::read(&headers, true)?;
    let request = SubmitRequest {
        deployment: id.clone(),
        configuration: body.configuration,
        module_source: body.module_source,
        queueing: Queueing { kind: BuildKind::Deploy, limit: Some(app.config.api.queue_size) },
        dry_run: query.dry_run,
        requested_by: Some(auth.requested_by(&headers)),
        plan_ttl: app.config.safe_change.plan_ttl,
        health_gate: match body.health_gate {
            Some(g) => Some(
                slipway_jobs::provenance::HealthGate::new(&g.timeout, g.rollback)
                    .map_err(|e| ApiError::bad_request("invalid_request", format!("health_gate.timeout: {e}")))?,
            ),
            None => app.config.safe_change.health_gate,
        },
    };
    let accepted = submit::submit_if(&app.db, &app.sources, app.secrets.as_ref(), request, precondition.as_ref())
        .await
        .inspect_err(|e| crate::observe::count_refusal(&app, e))?;
    let what = if accepted.dry_run { "dry run queued" } else { "deploy queued" };
    tracing::info!(deployment.id = %id, build.id = %accepted.build_id, "{what}");
    Ok((StatusCode::ACCEPTED, Json(accepted)))
}

/// `POST /deployments/{id}/preview` (EV-2): the submit's checks and names
/// eval, storing nothing and queuing no build. Same body as a submit;
/// `200 {deployment_id, module_source, configuration, nodes: [{name,
/// dnsNames, configuration}], disabled_applications}`; `503 nix_busy` when
/// every nix slot is busy (a preview without the eval has no result).
#[utoipa::path(post, path = "/deployments/{id}/preview", tag = "deployments",
    params(("id" = String, Path, description = "A deployment id (lower-case letters, digits and `-`)")),
    request_body = SubmitBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "What a submit would store and the nodes it would stand up", body = slipway_jobs::submit::Preview),
        (status = 400, description = "`invalid_configuration`, `invalid_module_source`, `invalid_request`, `malformed_json` \
                                      or `invalid_deployment_id`", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden` (outside the token's scope) or `source_not_allowed`", body = crate::error::ErrorBody),
        (status = 422, description = "`output_missing`, `source_too_old` or `build_failed` (the module source's outputs), \
                                      `source_repository_not_found` or `source_revision_not_found` (what it names is not there)", body = crate::error::ErrorBody),
        (status = 502, description = "`fetch_failed`: the module source's server could not be reached, or failed", body = crate::error::ErrorBody),
        (status = 503, description = "`nix_busy`, `service_unavailable` (no worker serves the nix queue) or `storage_unavailable` (the worker cannot write to its state folder)", body = crate::error::ErrorBody),
        (status = 504, description = "`timeout`: the names eval took too long", body = crate::error::ErrorBody),
    ))]
pub async fn preview(
    State(app): State<AppState>,
    auth: Auth,
    DeploymentIdPath(id): DeploymentIdPath,
    _query: StrictQuery<NoQuery>,
    Json(body): Json<SubmitBody>,
) -> Result<Json<submit::Preview>, ApiError> {
    auth.require(id.as_str())?;
    let request = SubmitRequest {
        deployment: id,
        configuration: body.configuration,
        module_source: body.module_source,
        queueing: Queueing { kind: BuildKind::Deploy, limit: None },
        dry_run: false,
        requested_by: None,
        plan_ttl: app.config.safe_change.plan_ttl,
        health_gate: None,
    };
    Ok(Json(submit::preview(&app.sources, app.secrets.is_some(), request).await?))
}

/// The `callback` of a delete's answer: whether the callback was stored
/// for a push, and if not, why.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CallbackAnswer {
    /// Whether the push will be sent when the destroy reaches `idle`.
    accepted: bool,
    /// Why not, when it will not.
    #[schema(required = true)]
    reason: Option<String>,
}

/// The optional body of `DELETE /deployments/{id}` (DL-2). Read as any
/// JSON object: a field that is wrong refuses the callback, never the delete.
#[derive(Debug, utoipa::ToSchema)]
pub struct DeleteBody {
    /// Where to `POST` once the destroy reaches `idle`.
    #[allow(dead_code)]
    callback_url: Option<String>,
    /// The bearer token to send with that push (1 to 4096 visible ASCII characters).
    #[allow(dead_code)]
    callback_token: Option<String>,
}

/// The answer of `DELETE /deployments/{id}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Deleted {
    /// The destroy's build and the state it implies.
    #[serde(flatten)]
    accepted: submit::Accepted,
    /// Whether the body's callback was accepted; `null` without one.
    #[schema(required = true)]
    callback: Option<CallbackAnswer>,
}

impl CallbackAnswer {
    fn refused(reason: impl Into<String>) -> Self {
        Self { accepted: false, reason: Some(reason.into()) }
    }
}

/// `DELETE /deployments/{id}` (DL-1, DL-2): queue a destroy and answer
/// `202 {deployment_id, build_id, state, callback}` at once; unknown id
/// `404` (a front-end counts that as done). Harmless to repeat. With a
/// body `{"callback_url", "callback_token"}` the destroy POSTs once to the
/// URL when it reaches `idle`; `callback` says whether that was accepted
/// (`{"accepted": true, "reason": null}`) or why not. A refused callback
/// never blocks the delete. `callback` is `null` when the body gave none.
#[utoipa::path(delete, path = "/deployments/{id}", tag = "deployments",
    params(("id" = String, Path, description = "A deployment id (lower-case letters, digits and `-`)"), ("Idempotency-Key" = Option<String>, Header, description = "Optional (IK-1): a key unique to this request (a ULID or UUID, 1 to 255 visible ASCII characters, as a structured-field string); a retry with the same key within `SLIPWAY_IDEMPOTENCY_TTL` gets the first answer again (`Idempotency-Replayed: true`) and queues nothing"), ("If-Match" = Option<String>, Header, description = "Optional: `*` or the `ETag` of `GET /deployments/{id}`; `412 precondition_failed` when the deployment changed since (or does not exist)")),
    request_body(content = DeleteBody, description = "Optional: a callback to push when the destroy reaches `idle`"),
    security(("bearer" = [])),
    responses(
        (status = 202, description = "A destroy is queued (or was already queued or done)", body = Deleted),
        (status = 400, description = "`malformed_json`, `invalid_request` or `invalid_deployment_id`, or `invalid_idempotency_key`", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: outside the token's scope", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such deployment", body = crate::error::ErrorBody),
        (status = 409, description = "`idempotency_key_in_flight`: a request with the same Idempotency-Key is still being answered (`Retry-After`)", body = crate::error::ErrorBody),
        (status = 422, description = "`idempotency_key_reused`: the Idempotency-Key was used for another request", body = crate::error::ErrorBody),
        (status = 412, description = "`precondition_failed`: `If-Match` or `If-None-Match` does not hold (the deployment changed since it was read); nothing was changed", body = crate::error::ErrorBody),
    ))]
pub async fn delete(
    State(app): State<AppState>,
    auth: Auth,
    DeploymentIdPath(id): DeploymentIdPath,
    headers: HeaderMap,
    _query: StrictQuery<NoQuery>,
    OptionalJson(body): OptionalJson<Map<String, Value>>,
) -> Result<(StatusCode, Json<Deleted>), ApiError> {
    auth.require(id.as_str())?;
    let precondition = crate::precondition::read(&headers, false)?;
    let (callback, mut answer) = match body {
        None => (None, None),
        Some(b) if b.values().all(Value::is_null) => (None, None),
        Some(b) => match check_delete_callback(&b, &app.config.allowed_origins, app.config.callback_allow_private) {
            Ok(c) => (Some(c), None),
            Err(refused) => (None, Some(CallbackAnswer::refused(refused.to_string()))),
        },
    };
    let deleted =
        submit::delete_if(&app.db, &id, callback.as_ref(), Some(&auth.requested_by(&headers)), precondition.as_ref())
            .await?
            .ok_or_else(|| ApiError::not_found(format!("no deployment {id}")))?;
    let accepted = deleted.accepted;
    if deleted.queued {
        tracing::info!(deployment.id = %id, build.id = %accepted.build_id, "destroy queued");
    } else {
        tracing::info!(deployment.id = %id, build.id = %accepted.build_id, "delete repeated: its destroy was already queued or done");
    }
    if callback.is_some() {
        answer = Some(if deleted.callback_stored {
            CallbackAnswer { accepted: true, reason: None }
        } else {
            CallbackAnswer::refused(
                "the deployment is already idle: its destroy has finished, so no push will come (this answer's state is final)",
            )
        });
    }
    Ok((StatusCode::ACCEPTED, Json(Deleted { accepted, callback: answer })))
}

/// `?limit=&before=&trigger=` of `GET /deployments/{id}/builds`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct BuildsQuery {
    /// Page size, 1–100 (default 100).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<usize>,
    /// A build id of this deployment: the page starts after it (older builds).
    before: Option<String>,
    /// Only the builds of this trigger (`submit`, `delete`, `dry_run`,
    /// `apply`, `rollback`, `auto_rollback`, `rollout`).
    #[param(value_type = Option<slipway_jobs::provenance::Trigger>)]
    trigger: Option<String>,
}

/// `GET /deployments/{id}/builds?limit=&before=&trigger=`: the
/// deployment's run history, newest first, a page of at most `limit`
/// (1–100, default 100), each build with who asked (`requested_by`), why
/// (`trigger`) and a one-line summary of what it changed (`changes`).
/// `{"builds": [...], "next": <build id> | null}`: pass `next` as `before`
/// for the following page; `null` means this was the last.
#[utoipa::path(get, path = "/deployments/{id}/builds", tag = "deployments",
    params(("id" = String, Path, description = "A deployment id (lower-case letters, digits and `-`)"), BuildsQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A page of the deployment's builds, newest first", body = BuildPage),
        (status = 400, description = "`invalid_request` (a bad `limit` or `before`) or `invalid_deployment_id`", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: outside the token's scope", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such deployment", body = crate::error::ErrorBody),
    ))]
pub async fn builds(
    State(app): State<AppState>,
    auth: Auth,
    DeploymentIdPath(id): DeploymentIdPath,
    Query(q): Query<BuildsQuery>,
) -> Result<Json<BuildPage>, ApiError> {
    auth.require(id.as_str())?;
    let limit = q.limit.unwrap_or(MAX_LIST);
    if !(1..=MAX_LIST).contains(&limit) {
        return Err(ApiError::bad_request("invalid_request", format!("limit must be 1 to {MAX_LIST}, not {limit}")));
    }
    let mut conn = app.db.acquire().await?;
    require_exists(&mut conn, &id).await?;
    let before = match q.before.as_deref() {
        None => None,
        Some(b) => match builds::get(&mut conn, b).await? {
            Some(row) if row.deployment_id == id.as_str() => Some(row.seq),
            _ => {
                return Err(ApiError::bad_request(
                    "invalid_request",
                    format!("before={b:?} is not a build of deployment {id}"),
                ))
            }
        },
    };
    let trigger = q
        .trigger
        .as_deref()
        .map(str::parse::<slipway_jobs::provenance::Trigger>)
        .transpose()
        .map_err(|e| ApiError::bad_request("invalid_request", format!("trigger: {e}")))?;
    let mut rows = builds::list(&mut conn, id.as_str(), before, limit as i64 + 1, trigger).await?;
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next = if more { rows.last().map(|r| r.id.clone()) } else { None };
    // Each build's changes count from the one before it that is not a dry
    // run: the next such row of the page, else one read past the page.
    // (A filtered page is not consecutive: each build reads its own.)
    let mut list = Vec::with_capacity(rows.len());
    for (i, b) in rows.iter().enumerate() {
        let in_page = trigger.is_none().then(|| rows[i + 1..].iter().find(|r| !r.dry_run)).flatten();
        let previous = match in_page {
            Some(r) => Some(r.clone()),
            None => builds::newest_before(&mut conn, id.as_str(), builds::Newest::Any, b.seq).await?,
        };
        list.push(BuildSummary::of(b, previous.as_ref()));
    }
    Ok(Json(BuildPage { builds: list, next }))
}

/// A page of `GET /deployments/{id}/builds`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BuildPage {
    /// The builds, newest first.
    builds: Vec<BuildSummary>,
    /// The id to pass as `before` for the next page; `null` on the last.
    #[schema(required = true)]
    next: Option<String>,
}
