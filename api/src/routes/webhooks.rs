//! The webhook routes (WH-1), for operator tokens only (`403 forbidden`
//! otherwise): endpoints registered, listed, shown, changed and deleted,
//! their delivery log, and a delivery queued again by hand
//! ([`slipway_jobs::webhooks`] checks what they are given; the deliveries
//! are the worker's, `jobs/src/jobs/webhook.rs`). No answer but the `201`
//! of a create (or of a rotation) carries the secret.

use super::rfc3339;
use crate::auth::Auth;
use crate::error::ApiError;
use crate::extract::{Json, NoQuery, Query, StrictQuery};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use slipway_jobs::jobs::webhook::start_chain;
use slipway_jobs::store::webhooks::{self as rows, Change, Delivery, Endpoint, NewEndpoint};
use slipway_jobs::store::{events, now_ms, rollouts};
use slipway_jobs::webhooks::{
    check_endpoint_url, check_events, check_secret, generate_secret, sources, MAX_DESCRIPTION,
};

/// The most endpoints `GET /webhooks` lists.
pub const MAX_ENDPOINTS: i64 = 1000;

/// An endpoint as every answer shows it (never its secret).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WebhookView {
    /// Its id (`wh_` and a ULID).
    pub id: String,
    /// Where deliveries go.
    pub url: String,
    /// The event types it receives, or `["*"]`.
    pub events: Vec<String>,
    /// The operator's note.
    #[schema(required = true)]
    pub description: Option<String>,
    /// Whether deliveries are sent.
    pub enabled: bool,
    /// Why it is disabled (`disabled by an operator`, or the retry window it failed throughout).
    #[schema(required = true)]
    pub disabled_reason: Option<String>,
    /// When it was disabled, RFC 3339 UTC.
    #[schema(required = true)]
    pub disabled_at: Option<String>,
    /// Since when every attempt failed (`null`: the last one succeeded or none failed).
    #[schema(required = true)]
    pub failing_since: Option<String>,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// RFC 3339 UTC.
    pub updated_at: String,
}

impl From<Endpoint> for WebhookView {
    fn from(e: Endpoint) -> Self {
        Self {
            id: e.id,
            url: e.url,
            events: e.events,
            description: e.description,
            enabled: e.enabled,
            disabled_reason: e.disabled_reason,
            disabled_at: e.disabled_at.map(rfc3339),
            failing_since: e.failing_since.map(rfc3339),
            created_at: rfc3339(e.created_at),
            updated_at: rfc3339(e.updated_at),
        }
    }
}

/// The answer of a create, or of a change that rotated the secret: the
/// endpoint and, this once, its secret.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WebhookWithSecret {
    /// The endpoint.
    #[serde(flatten)]
    pub webhook: WebhookView,
    /// The `whsec_` secret deliveries are signed with; shown only in this answer.
    pub secret: String,
}

/// The body of `POST /webhooks`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    /// An `http` or `https` URL whose origin is in `SLIPWAY_ALLOWED_ORIGINS`.
    url: String,
    /// Event types (`deployment.active`, `rollout.completed`, …), or `["*"]` for all.
    events: Vec<String>,
    /// A `whsec_` secret (base64 of 24 to 64 bytes); generated when absent.
    secret: Option<String>,
    /// A note, at most 500 bytes.
    description: Option<String>,
}

/// The body of `PATCH /webhooks/{id}`: each field present is changed.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateBody {
    /// A new URL, checked as at creation.
    url: Option<String>,
    /// New event types.
    events: Option<Vec<String>>,
    /// `true` enables (clearing why it was disabled; pending deliveries
    /// resume), `false` disables.
    enabled: Option<bool>,
    /// A new note (`""` clears it).
    description: Option<String>,
    /// `true`: a new secret is generated and answered once.
    #[serde(default)]
    rotate_secret: bool,
    /// A new `whsec_` secret (instead of `rotate_secret`).
    secret: Option<String>,
}

/// The list of `GET /webhooks`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WebhookList {
    /// Every endpoint, oldest first.
    pub webhooks: Vec<WebhookView>,
}

/// One delivery of the delivery log (never its body's signature nor the secret).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeliveryView {
    /// The delivery's id: its `webhook-id`, the same at every attempt.
    pub id: String,
    /// The event type.
    pub event_type: String,
    /// The event's source (`deployment` or `rollout`).
    pub source: String,
    /// The event's subject (a deployment id or a rollout id).
    pub subject: String,
    /// The event's number within its subject (deliveries of one subject go in this order).
    pub n: i64,
    /// `pending`, `delivered` or `failed`.
    pub status: String,
    /// Attempts made.
    pub attempts: i64,
    /// The class of the last failure: `status` (an answer that is not a
    /// `2xx`), `redirect`, `timeout`, `connect_failed`, `resolve_failed`,
    /// `refused_origin`, `refused_address`, `tls`, `request_failed`,
    /// `retry_window_passed`.
    #[schema(required = true)]
    pub last_error: Option<String>,
    /// The HTTP status of the last answer.
    #[schema(required = true)]
    pub last_status_code: Option<i64>,
    /// At most 256 bytes of the last answer's body.
    #[schema(required = true)]
    pub last_response_excerpt: Option<String>,
    /// When it is tried next, RFC 3339 UTC (`null`: not again).
    #[schema(required = true)]
    pub next_try_at: Option<String>,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// RFC 3339 UTC.
    pub updated_at: String,
    /// RFC 3339 UTC.
    #[schema(required = true)]
    pub delivered_at: Option<String>,
}

impl From<Delivery> for DeliveryView {
    fn from(d: Delivery) -> Self {
        let pending = d.status == "pending";
        Self {
            id: d.id,
            event_type: d.event_type,
            source: d.source,
            subject: d.subject,
            n: d.n,
            status: d.status,
            attempts: d.attempts,
            last_error: d.last_error,
            last_status_code: d.last_status,
            last_response_excerpt: d.last_excerpt,
            next_try_at: d.next_try_at.filter(|_| pending).map(rfc3339),
            created_at: rfc3339(d.created_at),
            updated_at: rfc3339(d.updated_at),
            delivered_at: d.delivered_at.map(rfc3339),
        }
    }
}

/// A page of `GET /webhooks/{id}/deliveries`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeliveryPage {
    /// Newest first.
    pub deliveries: Vec<DeliveryView>,
    /// The `before` of the next (older) page; `null` on the last one.
    #[schema(required = true)]
    pub next_before: Option<String>,
}

/// `?limit=&before=` of `GET /webhooks/{id}/deliveries`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeliveriesQuery {
    /// Page size, 1–100 (default 50).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<i64>,
    /// A delivery id: the page starts after it (older deliveries).
    before: Option<String>,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid_webhook", message)
}

fn invalid_url(reason: String) -> ApiError {
    ApiError::bad_request("invalid_webhook_url", format!("url is refused: {reason}"))
}

fn check_description(description: &str) -> Result<(), ApiError> {
    if description.len() > MAX_DESCRIPTION || description.chars().any(|c| c.is_control() && c != '\n') {
        return Err(invalid(format!("description must be at most {MAX_DESCRIPTION} bytes without control characters")));
    }
    Ok(())
}

/// The endpoint of a path id, or `404`: an id of another shape is never looked up.
async fn endpoint_of(app: &AppState, id: &str) -> Result<Endpoint, ApiError> {
    let shaped = id.len() == 29 && id.starts_with("wh_") && id[3..].bytes().all(|b| b.is_ascii_alphanumeric());
    let found = if shaped { rows::get(&mut app.db.acquire().await?, id).await? } else { None };
    found.ok_or_else(|| ApiError::not_found("no such webhook"))
}

/// `POST /webhooks {url, events, secret?, description?}`: registers an
/// endpoint, enabled, receiving the events recorded from now on. `201`
/// with the endpoint and its `secret` (the one given, or a new one of 32
/// random bytes): the only answer that shows it. Refused, storing nothing:
/// `400 invalid_webhook_url` (not `http(s)`, user information, a fragment,
/// an origin outside `SLIPWAY_ALLOWED_ORIGINS`, a host written as a
/// private, loopback or metadata address), `400 invalid_webhook` (an
/// unknown event type, a secret that is not `whsec_` base64 of 24 to 64
/// bytes, a description too long).
#[utoipa::path(post, path = "/webhooks", tag = "webhooks",
    request_body = CreateBody,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Registered; the secret is shown this once", body = WebhookWithSecret),
        (status = 400, description = "`invalid_webhook_url`, `invalid_webhook`, `malformed_json` or `invalid_request`", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: the token lacks the operator claim", body = crate::error::ErrorBody),
    ))]
pub async fn create(
    State(app): State<AppState>,
    auth: Auth,
    _query: StrictQuery<NoQuery>,
    Json(body): Json<CreateBody>,
) -> Result<(StatusCode, Json<WebhookWithSecret>), ApiError> {
    auth.require_operator()?;
    check_endpoint_url(&body.url, &app.config.allowed_origins, app.config.callback_allow_private)
        .map_err(invalid_url)?;
    check_events(&body.events).map_err(invalid)?;
    if let Some(description) = &body.description {
        check_description(description)?;
    }
    let secret = match body.secret {
        Some(given) => {
            check_secret(&given).map_err(invalid)?;
            SecretString::from(given)
        }
        None => generate_secret(),
    };
    let id = format!("wh_{}", ulid::Ulid::generate());
    let now = now_ms();
    let mut tx = app.db.begin_write().await?;
    let start_seq = events::last_seq(&mut tx).await?;
    let new = NewEndpoint {
        id: &id,
        url: &body.url,
        events: &body.events,
        description: body.description.as_deref().filter(|d| !d.is_empty()),
        secret: secret.expose_secret(),
        start_seq,
        now,
    };
    rows::insert(&mut tx, &new).await?;
    let last_rollout_event = rollouts::last_event_id(&mut tx).await?;
    sources::start_rollout_cursor(&mut tx, &id, last_rollout_event).await?;
    start_chain(&mut tx, &id).await?;
    let endpoint = rows::get(&mut tx, &id).await?.ok_or_else(|| ApiError::internal("the new webhook vanished"))?;
    tx.commit().await?;
    tracing::info!(webhook.id = %id, "webhook endpoint registered");
    let answer = WebhookWithSecret { webhook: endpoint.into(), secret: secret.expose_secret().to_owned() };
    Ok((StatusCode::CREATED, Json(answer)))
}

/// `GET /webhooks`: every endpoint (at most 1000), oldest first, without secrets.
#[utoipa::path(get, path = "/webhooks", tag = "webhooks",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The endpoints", body = WebhookList),
        (status = 403, description = "`forbidden`: the token lacks the operator claim", body = crate::error::ErrorBody),
    ))]
pub async fn list(
    State(app): State<AppState>,
    auth: Auth,
    _query: StrictQuery<NoQuery>,
) -> Result<Json<WebhookList>, ApiError> {
    auth.require_operator()?;
    let endpoints = rows::list(&mut app.db.acquire().await?, None, MAX_ENDPOINTS).await?;
    Ok(Json(WebhookList { webhooks: endpoints.into_iter().map(Into::into).collect() }))
}

/// `GET /webhooks/{id}`: one endpoint, with why it is disabled
/// (`disabled_reason`, `disabled_at`) and since when it fails.
#[utoipa::path(get, path = "/webhooks/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "A webhook id (`wh_…`)")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The endpoint", body = WebhookView),
        (status = 403, description = "`forbidden`: the token lacks the operator claim", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such webhook", body = crate::error::ErrorBody),
    ))]
pub async fn show(
    State(app): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
    _query: StrictQuery<NoQuery>,
) -> Result<Json<WebhookView>, ApiError> {
    auth.require_operator()?;
    Ok(Json(endpoint_of(&app, &id).await?.into()))
}

/// `PATCH /webhooks/{id} {url?, events?, enabled?, description?,
/// rotate_secret?, secret?}`: changes what is given, checked as at
/// creation (`400 invalid_webhook_url`, `400 invalid_webhook`; nothing
/// changed). `200` with the endpoint; with `rotate_secret: true` or a
/// `secret`, the answer carries the new secret this once, and deliveries
/// not yet sent are signed with it. Enabling clears why it was disabled
/// and its pending deliveries resume, in order.
#[utoipa::path(patch, path = "/webhooks/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "A webhook id (`wh_…`)")),
    request_body = UpdateBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The endpoint as changed (with `secret` after a rotation)", body = WebhookWithSecret),
        (status = 400, description = "`invalid_webhook_url`, `invalid_webhook`, `malformed_json` or `invalid_request`", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: the token lacks the operator claim", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such webhook", body = crate::error::ErrorBody),
    ))]
pub async fn update(
    State(app): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
    _query: StrictQuery<NoQuery>,
    Json(body): Json<UpdateBody>,
) -> Result<Json<serde_json::Value>, ApiError> {
    auth.require_operator()?;
    endpoint_of(&app, &id).await?;
    if let Some(url) = &body.url {
        check_endpoint_url(url, &app.config.allowed_origins, app.config.callback_allow_private).map_err(invalid_url)?;
    }
    if let Some(events) = &body.events {
        check_events(events).map_err(invalid)?;
    }
    if let Some(description) = &body.description {
        check_description(description)?;
    }
    let secret = match (&body.secret, body.rotate_secret) {
        (Some(_), true) => return Err(invalid("give either secret or rotate_secret, not both")),
        (Some(given), false) => {
            check_secret(given).map_err(invalid)?;
            Some(SecretString::from(given.clone()))
        }
        (None, true) => Some(generate_secret()),
        (None, false) => None,
    };
    let change = Change {
        url: body.url.as_deref(),
        events: body.events.as_deref(),
        description: body.description.as_deref().map(|d| Some(d).filter(|d| !d.is_empty())),
        enabled: body.enabled,
        secret: secret.as_ref().map(|s| s.expose_secret()),
    };
    let mut tx = app.db.begin_write().await?;
    if !rows::update(&mut tx, &id, &change, now_ms()).await? {
        return Err(ApiError::not_found("no such webhook"));
    }
    let endpoint = rows::get(&mut tx, &id).await?.ok_or_else(|| ApiError::not_found("no such webhook"))?;
    if endpoint.enabled {
        start_chain(&mut tx, &id).await?;
    }
    tx.commit().await?;
    let view = WebhookView::from(endpoint);
    let answer = match secret {
        Some(secret) => {
            serde_json::to_value(WebhookWithSecret { webhook: view, secret: secret.expose_secret().to_owned() })
        }
        None => serde_json::to_value(view),
    }
    .map_err(ApiError::internal)?;
    Ok(Json(answer))
}

/// `DELETE /webhooks/{id}`: the endpoint, its cursors and its delivery log
/// are removed; nothing more is sent. `204`.
#[utoipa::path(delete, path = "/webhooks/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "A webhook id (`wh_…`)")),
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, description = "`forbidden`: the token lacks the operator claim", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such webhook", body = crate::error::ErrorBody),
    ))]
pub async fn delete(
    State(app): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
    _query: StrictQuery<NoQuery>,
) -> Result<StatusCode, ApiError> {
    auth.require_operator()?;
    endpoint_of(&app, &id).await?;
    let mut tx = app.db.begin_write().await?;
    let deleted = rows::delete(&mut tx, &id).await?;
    tx.commit().await?;
    if !deleted {
        return Err(ApiError::not_found("no such webhook"));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /webhooks/{id}/deliveries?limit=&before=`: the delivery log, newest
/// first: each delivery's event type and subject, status, attempts, last
/// error class and status code, next try and times. Never a secret, a
/// token or a signature.
#[utoipa::path(get, path = "/webhooks/{id}/deliveries", tag = "webhooks",
    params(("id" = String, Path, description = "A webhook id (`wh_…`)"), DeliveriesQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A page of the delivery log", body = DeliveryPage),
        (status = 400, description = "`invalid_request`: a bad `limit` or query parameter", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: the token lacks the operator claim", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such webhook", body = crate::error::ErrorBody),
    ))]
pub async fn deliveries(
    State(app): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
    Query(q): Query<DeliveriesQuery>,
) -> Result<Json<DeliveryPage>, ApiError> {
    auth.require_operator()?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::bad_request("invalid_request", "limit must be 1 to 100"));
    }
    endpoint_of(&app, &id).await?;
    let page = rows::deliveries(&mut app.db.acquire().await?, &id, q.before.as_deref(), limit + 1).await?;
    let more = page.len() as i64 > limit;
    let deliveries: Vec<DeliveryView> = page.into_iter().take(limit as usize).map(Into::into).collect();
    let next_before = if more { deliveries.last().map(|d| d.id.clone()) } else { None };
    Ok(Json(DeliveryPage { deliveries, next_before }))
}

/// `POST /webhooks/{id}/deliveries/{delivery_id}/redeliver`: queues the
/// delivery again, due now, with the same `webhook-id` and body (a
/// delivered one is sent once more). `202` with the delivery.
#[utoipa::path(post, path = "/webhooks/{id}/deliveries/{delivery_id}/redeliver", tag = "webhooks",
    params(
        ("id" = String, Path, description = "A webhook id (`wh_…`)"),
        ("delivery_id" = String, Path, description = "A delivery id (`msg_…`)"),
    ),
    security(("bearer" = [])),
    responses(
        (status = 202, description = "Queued again", body = DeliveryView),
        (status = 403, description = "`forbidden`: the token lacks the operator claim", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such webhook or delivery", body = crate::error::ErrorBody),
    ))]
pub async fn redeliver(
    State(app): State<AppState>,
    auth: Auth,
    Path((id, delivery_id)): Path<(String, String)>,
    _query: StrictQuery<NoQuery>,
) -> Result<(StatusCode, Json<DeliveryView>), ApiError> {
    auth.require_operator()?;
    let endpoint = endpoint_of(&app, &id).await?;
    let mut tx = app.db.begin_write().await?;
    if !rows::redeliver(&mut tx, &id, &delivery_id, now_ms()).await? {
        return Err(ApiError::not_found("no such delivery of this webhook"));
    }
    if endpoint.enabled {
        start_chain(&mut tx, &id).await?;
    }
    let delivery = rows::delivery_of(&mut tx, &id, &delivery_id)
        .await?
        .ok_or_else(|| ApiError::not_found("no such delivery of this webhook"))?;
    tx.commit().await?;
    Ok((StatusCode::ACCEPTED, Json(delivery.into())))
}
