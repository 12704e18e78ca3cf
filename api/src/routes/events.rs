//! Streams (DL-3): the deployment channel `GET /deployments/{id}/events`
//! and the live build log `GET /builds/{id}/log`, both server-sent events.
//!
//! Both are resumable: every event carries a numeric `id`, and a client
//! that reconnects with `Last-Event-ID: <n>` (a browser's `EventSource`
//! does so by itself) gets the events after `n`, none twice. Both end by
//! closing the stream after their last event; a reconnect after that
//! answers `204 No Content`, which tells an `EventSource` to stop. A
//! comment line every [`KEEP_ALIVE`] keeps proxies from cutting an idle
//! stream. Each stream opens with a `retry:` drawn afresh ([`RETRY_LEAST`]
//! plus up to [`RETRY_SPREAD`]) so that reconnects after an api restart
//! spread out, and one cut because its token expired ends with an `event:
//! token_expired`. Open streams are capped per token subject and per api
//! ([`crate::stream_caps`]).
//!
//! Both take the token from the `Authorization` header or, because a
//! browser's `EventSource` cannot set headers, a single-use `ticket` query
//! parameter minted with the token for that one stream (`POST
//! /deployments/{id}/events/ticket`, `POST /builds/{id}/log/ticket`;
//! stored as its SHA-256, valid 60 s, [`slipway_jobs::store::tickets`]).
//! The token itself as an `access_token` query parameter (RFC 6750 §2.3)
//! still works but is deprecated: such an answer says `Deprecation: true`
//! and the api warns once. The access log never writes query strings.

use super::rfc3339;
use crate::auth::Auth;
use crate::auth::{Audience, Claims, TokenError};
use crate::error::ApiError;
use crate::extract::{BuildIdPath, DeploymentIdPath, NoQuery, Query, StrictQuery};
use crate::state::AppState;
use crate::stream_caps::StreamSlot;
use axum::extract::{FromRef, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use slipway_jobs::channel::Follow;
use slipway_jobs::store::tickets::{self, StreamKind};
use slipway_jobs::store::{builds, events, Db, StoreError};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// How often an idle stream sends a keep-alive comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How often a deployment stream reads its events even without a wake-up
/// (a safety net: wake-ups can be lost when the database connection of the
/// api's listener breaks).
const RECHECK: Duration = Duration::from_secs(60);

/// How long a deployment stream's opening waits for a database connection
/// while the pool is busy, past which it answers `503`: longer than an
/// ordinary request's [`slipway_jobs::store::ACQUIRE_TIMEOUT`], because a
/// browser's `EventSource` does not reconnect after a `503`, and a
/// reconnect storm (every stream of an api that restarted) asks for
/// thousands of connections at once.
pub const STREAM_OPEN_PATIENCE: Duration = Duration::from_secs(10);

/// How often a build log stream looks for new chunks.
pub const LOG_POLL: Duration = Duration::from_millis(250);

/// Events or chunks read at once.
const PAGE: i64 = 500;

/// `?ticket=` and (deprecated) `?access_token=` of a stream.
#[derive(Debug, Deserialize)]
struct StreamQuery {
    ticket: Option<String>,
    access_token: Option<String>,
}

/// How long a stream ticket opens its stream after it is minted (at most:
/// never past the minting token's own expiry).
pub const TICKET_TTL: Duration = Duration::from_secs(60);

/// The random bytes of a ticket: 256 bits.
const TICKET_BYTES: usize = 32;

/// How a stream request proves who it is (SEC-1, as [`Auth`]), before the
/// stream it opens is known: the token from the `Authorization` header or,
/// deprecated, the `access_token` query parameter; or a `ticket` query
/// parameter, minted with the token for exactly one stream
/// ([`ticket_for_events`], [`ticket_for_log`]) and checked by
/// `StreamAuth::open`. Every problem is `401`, also two credentials at
/// once (a token sent both ways, RFC 6750 §2, or a ticket with a token),
/// which would leave the one that counts to a guess.
#[derive(Debug, Clone)]
pub enum StreamAuth {
    /// A verified token.
    Token {
        /// The token's claims.
        auth: Auth,
        /// It came as `?access_token=` (deprecated: it ends up in proxies'
        /// logs and browser history).
        in_query: bool,
    },
    /// A ticket, not yet checked.
    Ticket(String),
}

impl<S> FromRequestParts<S> for StreamAuth
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let named = |wanted: &str| {
            parts.uri.query().is_some_and(|q| url::form_urlencoded::parse(q.as_bytes()).any(|(name, _)| name == wanted))
        };
        let (ticket_named, token_named) = (named("ticket"), named("access_token"));
        let header = parts.headers.contains_key(header::AUTHORIZATION);
        if ticket_named && (header || token_named) {
            return Err(TokenError::TicketAndToken.into());
        }
        if header {
            if token_named {
                return Err(TokenError::TwoCarriers.into());
            }
            let auth = Auth::from_request_parts(parts, state).await?;
            return Ok(Self::Token { auth, in_query: false });
        }
        let Query(q) = Query::<StreamQuery>::from_request_parts(parts, state).await?;
        if let Some(ticket) = q.ticket {
            return Ok(Self::Ticket(ticket));
        }
        let app = AppState::from_ref(state);
        let bearer = q.access_token.as_ref().map(|t| format!("Bearer {t}"));
        let claims = app.verifier.verify(bearer.as_deref())?;
        Ok(Self::Token { auth: Auth(claims), in_query: q.access_token.is_some() })
    }
}

impl StreamAuth {
    /// The claims the stream `kind`/`stream_id` is opened with. A token's
    /// are its own; a ticket is used up here (whatever follows) and opens
    /// its stream with the scope of that stream's deployment only, the
    /// subject of the token that minted it, and that token's expiry.
    /// `401` ([`TokenError::BadTicket`]) for a ticket that is unknown, used,
    /// expired or minted for another stream.
    async fn open(self, app: &AppState, kind: StreamKind, stream_id: &str) -> Result<(Auth, bool), ApiError> {
        let ticket = match self {
            Self::Token { auth, in_query } => {
                if in_query {
                    deprecated_access_token();
                }
                return Ok((auth, in_query));
            }
            Self::Ticket(ticket) => ticket,
        };
        let hash = Sha256::digest(ticket.as_bytes());
        let mut conn = app.db.acquire().await?;
        let used = tickets::consume(&mut conn, &hash, kind, stream_id, slipway_jobs::store::now_ms())
            .await?
            .ok_or(TokenError::BadTicket)?;
        let claims = Claims {
            sub: used.subject,
            exp: used.token_exp_ms as f64 / 1000.0,
            aud: Audience::Many(Vec::new()),
            iss: None,
            deployments: vec![used.deployment_id],
            operator: false,
            tenant: None,
        };
        Ok((Auth(claims), false))
    }
}

/// Says once per process, at `warn`, that a stream was opened with
/// `?access_token=` (deprecated); later ones at `debug`. The answer also
/// carries `Deprecation: true`.
fn deprecated_access_token() {
    static SAID: AtomicBool = AtomicBool::new(false);
    if SAID.swap(true, Ordering::Relaxed) {
        tracing::debug!("a stream was opened with ?access_token=, which is deprecated");
    } else {
        tracing::warn!(
            "a stream was opened with ?access_token=, which is deprecated: the token ends up in proxies' logs and \
             browser history; mint a single-use ticket (POST …/ticket) and open the stream with ?ticket= instead \
             (docs/INTEGRATOR-GUIDE.md); this is said once"
        );
    }
}

/// Marks an answer to a stream opened with `?access_token=` as using a
/// deprecated form (`Deprecation: true`, RFC 9745).
fn mark_deprecated(mut response: Response, deprecated: bool) -> Response {
    if deprecated {
        response.headers_mut().insert("deprecation", HeaderValue::from_static("true"));
    }
    response
}

/// A stream ticket, as `POST …/ticket` answers it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TicketBody {
    /// The ticket: 256 random bits, base64url without padding. Open the
    /// stream with `?ticket=<ticket>` once; it opens no other stream.
    pub ticket: String,
    /// Seconds it stays usable: 60, or fewer when the token that minted it
    /// expires sooner.
    pub expires_in: u64,
}

/// Mints a ticket for `kind`/`stream_id` (of `deployment_id`) for the
/// holder of `auth`: stored as its SHA-256 only, usable once, for
/// [`TICKET_TTL`] or until the token expires, whichever is first.
async fn mint(
    app: &AppState,
    auth: &Auth,
    kind: StreamKind,
    stream_id: &str,
    deployment_id: &str,
) -> Result<Response, ApiError> {
    use rand::RngCore as _;
    let mut bytes = [0u8; TICKET_BYTES];
    rand::rng().fill_bytes(&mut bytes);
    let ticket = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let hash = Sha256::digest(ticket.as_bytes());
    let now = slipway_jobs::store::now_ms();
    let token_exp_ms = (auth.0.exp * 1000.0).floor() as i64;
    let expires_at = (now + TICKET_TTL.as_millis() as i64).min(token_exp_ms);
    let mut conn = app.db.begin_write().await?;
    tickets::insert(
        &mut conn,
        &tickets::NewTicket {
            hash: &hash,
            kind,
            stream_id,
            subject: &auth.0.sub,
            deployment_id,
            token_exp_ms,
            created_at: now,
            expires_at,
        },
    )
    .await?;
    conn.commit().await?;
    let body = TicketBody { ticket, expires_in: ((expires_at - now).max(0) / 1000) as u64 };
    Ok(([(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))], Json(body)).into_response())
}

/// `POST /deployments/{id}/events/ticket`: a single-use ticket that opens
/// `GET /deployments/{id}/events?ticket=…` once, within 60 s, for a browser's
/// `EventSource` (which cannot send the bearer header). Authorised as the
/// stream: `403` outside the token's scope, `404` for an unknown deployment.
#[utoipa::path(post, path = "/deployments/{id}/events/ticket", tag = "streams",
    params(("id" = String, Path, description = "A deployment id (lower-case letters, digits and `-`)")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A ticket for this deployment's channel: use it once, within `expires_in` seconds",
         body = TicketBody),
        (status = 400, description = "`invalid_deployment_id`", body = crate::error::ErrorBody),
        (status = 401, description = "`unauthorized`: no token, or a token that does not verify", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: outside the token's scope", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such deployment", body = crate::error::ErrorBody),
    ))]
pub async fn ticket_for_events(
    State(app): State<AppState>,
    auth: Auth,
    DeploymentIdPath(id): DeploymentIdPath,
    _query: StrictQuery<NoQuery>,
) -> Result<Response, ApiError> {
    auth.require(id.as_str())?;
    let mut conn = app.db.acquire().await?;
    if slipway_jobs::read::deployment(&mut conn, id.as_str()).await?.is_none() {
        return Err(ApiError::not_found(format!("no deployment {id}")));
    }
    drop(conn);
    mint(&app, &auth, StreamKind::DeploymentEvents, id.as_str(), id.as_str()).await
}

/// `POST /builds/{id}/log/ticket`: a single-use ticket that opens
/// `GET /builds/{id}/log?ticket=…` once, within 60 s. Authorised as the
/// stream: a build outside the token's scope is `404`, like an unknown one.
#[utoipa::path(post, path = "/builds/{id}/log/ticket", tag = "streams",
    params(("id" = String, Path, description = "A build id")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A ticket for this build's log stream: use it once, within `expires_in` seconds",
         body = TicketBody),
        (status = 400, description = "`invalid_build_id`", body = crate::error::ErrorBody),
        (status = 401, description = "`unauthorized`: no token, or a token that does not verify", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such build, or one outside the token's scope", body = crate::error::ErrorBody),
    ))]
pub async fn ticket_for_log(
    State(app): State<AppState>,
    auth: Auth,
    BuildIdPath(id): BuildIdPath,
    _query: StrictQuery<NoQuery>,
) -> Result<Response, ApiError> {
    let missing = || ApiError::not_found(format!("no build {}", slipway_jobs::id::quoted(&id)));
    let mut conn = app.db.acquire().await?;
    let build = builds::get(&mut conn, &id).await?.ok_or_else(missing)?;
    if !auth.0.allows(&build.deployment_id) {
        return Err(missing());
    }
    drop(conn);
    mint(&app, &auth, StreamKind::BuildLog, &id, &build.deployment_id).await
}

/// The `Last-Event-ID` header: a non-negative integer, or absent.
pub(crate) fn last_event_id(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
    let Some(value) = headers.get("last-event-id") else { return Ok(None) };
    let invalid =
        || ApiError::bad_request("invalid_request", "Last-Event-ID must be an event id this service sent (a number)");
    let text = value.to_str().map_err(|_| invalid())?.trim();
    if text.is_empty() {
        return Ok(None);
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    text.parse::<i64>().map(Some).map_err(|_| invalid())
}

/// The least `retry:` a stream asks a client to wait before it reconnects.
pub const RETRY_LEAST: Duration = Duration::from_secs(1);

/// The span `retry:` is drawn from above [`RETRY_LEAST`]: each stream asks
/// for a wait drawn afresh, so that the clients of an api that restarts do
/// not all come back in the same instant.
pub const RETRY_SPREAD: Duration = Duration::from_secs(4);

/// A reconnection wait for one stream: [`RETRY_LEAST`] plus a uniform draw
/// from [`RETRY_SPREAD`], in whole milliseconds.
fn retry_wait() -> Duration {
    use rand::Rng as _;
    RETRY_LEAST + Duration::from_millis(rand::rng().random_range(0..RETRY_SPREAD.as_millis() as u64))
}

/// Events a stream's task sends to its response ([`spawn_stream`]). Each
/// is boxed: a channel holds its events in blocks of 32 slots, allocated
/// when the channel is made, so an idle stream keeps 32 pointers rather
/// than 32 events.
#[derive(Debug, Clone)]
pub(crate) struct EventSender(mpsc::Sender<Box<Event>>);

/// The response of an [`EventSender`] went away (the client disconnected,
/// or the stream ended).
#[derive(Debug)]
pub(crate) struct ResponseGone;

impl EventSender {
    /// Sends `event`, waiting while the client's buffer of 16 events is full.
    pub(crate) async fn send(&self, event: Event) -> Result<(), ResponseGone> {
        self.0.send(Box::new(event)).await.map_err(|_| ResponseGone)
    }

    /// Resolves once the response went away.
    pub(crate) async fn closed(&self) {
        self.0.closed().await;
    }
}

/// An SSE response over what a task sends into `rx`, with keep-alives and
/// headers that keep proxies from buffering it. It opens with a `retry:`
/// field alone (no data, so no event is dispatched): how long the client
/// waits before reconnecting once the stream is cut ([`retry_wait`]).
fn sse(rx: mpsc::Receiver<Box<Event>>) -> Response {
    let retry = futures::stream::once(std::future::ready(Ok::<_, Infallible>(Event::default().retry(retry_wait()))));
    let stream =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (Ok::<_, Infallible>(*e), rx)) });
    let mut response = Sse::new(retry.chain(stream)).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)).into_response();
    response.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Starts a stream: a task that runs `task` (made here from the stream's
/// [`EventSender`]) until it ends or the stream must end whatever it
/// follows, holding `slot` under the caps ([`crate::stream_caps`]) until
/// then, and the SSE response it feeds ([`sse`]). A stream must end when
/// the process stops serving (the client reconnects, to another api) or
/// when the token it was opened with expires (a token is checked when a
/// stream opens): then it gets a last `event: token_expired`, and the
/// client reconnects with a fresh token and its last id.
///
/// `task` is made inside the spawned task, so the task keeps `task`'s
/// inputs and its future once each rather than a moved copy of the future
/// beside it (an idle stream's memory, issue 32's bar).
pub(crate) fn spawn_stream<F>(
    app: &AppState,
    auth: &Auth,
    slot: StreamSlot,
    task: impl FnOnce(EventSender) -> F + Send + 'static,
) -> Response
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(16);
    let tx = EventSender(tx);
    let closed = Box::pin(app.hub.closed());
    let exp = auth.0.exp;
    let left = until_expiry(exp, slipway_jobs::clock::now_us() as f64 / 1e6);
    tokio::spawn(async move {
        let follow = task(tx.clone());
        tokio::select! {
            () = follow => {}
            () = closed => {}
            () = tokio::time::sleep(left) => {
                let _ = tokio::time::timeout(LAST_EVENT_WAIT, tx.send(token_expired_event(exp))).await;
            }
        }
        drop(slot);
    });
    sse(rx)
}

/// How long a token expiring at `exp` has left at `now` (both seconds
/// since the epoch): zero once it expired, and [`Duration::MAX`] (never
/// within the life of a process) for an `exp` too far ahead for a
/// `Duration`, such as `1e20`.
fn until_expiry(exp: f64, now: f64) -> Duration {
    match Duration::try_from_secs_f64(exp - now) {
        Ok(left) => left,
        Err(_) if exp > now => Duration::MAX,
        Err(_) => Duration::ZERO,
    }
}

/// The last event of a stream cut because its token expired: `event:
/// token_expired`, no `id` (the client's last id stays that of the last
/// event it got), `data: {"message", "expired_at"}`.
fn token_expired_event(exp: f64) -> Event {
    let at = rfc3339((exp * 1000.0).floor() as i64);
    Event::default().event("token_expired").data(
        json!({
            "message": "the token this stream was opened with expired: open it again with a fresh token (or a \
                        ticket minted with one) and Last-Event-ID to go on where it stopped",
            "expired_at": at,
        })
        .to_string(),
    )
}

/// How long the last event of a cut stream may wait for room in a slow
/// client's buffer before the stream ends without it.
const LAST_EVENT_WAIT: Duration = Duration::from_secs(5);

/// One event of the deployment channel.
fn state_event(e: &events::Event) -> Event {
    Event::default().id(e.n.to_string()).event("state").data(
        json!({
            "deployment_id": e.deployment_id,
            "state": e.state,
            "build_id": e.build_id,
            "at": rfc3339(e.at),
            "trigger": e.trigger,
        })
        .to_string(),
    )
}

/// `GET /deployments/{id}/events`: the deployment channel (DL-3).
///
/// Without `Last-Event-ID` it starts with the current state; with one, it
/// sends the events after it. Each event is `event: state`, `id: <n>`
/// (numbers per deployment, from 1; `0` stands for the state of a
/// deployment with no recorded event yet) and `data: {"deployment_id",
/// "state", "build_id", "at", "trigger"}`; `trigger` says why that build
/// was queued (`submit`, `delete`, `apply`, `rollback`, `auto_rollback`,
/// `rollout`; `null` without a build): after an `apply`, a `rollback`, an
/// `auto_rollback` or a `rollout` the deployment's stored configuration
/// (and its module source) is that build's,
/// so read it again. The stream ends after a terminal state
/// (`active`, `idle`, `failed`); a reconnect with nothing new after a
/// terminal state answers `204`. `404` for an unknown deployment, `403`
/// outside the token's scope, `429` past a stream cap ([`crate::stream_caps`]).
#[utoipa::path(get, path = "/deployments/{id}/events", tag = "streams",
    params(
        ("id" = String, Path, description = "A deployment id (lower-case letters, digits and `-`)"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id"),
        ("ticket" = Option<String>, Query, description = "A single-use ticket from `POST …/ticket`, for a browser's EventSource that cannot send a header"),
        ("access_token" = Option<String>, Query, deprecated, description = "Deprecated: the token itself (it ends up in proxies' logs and browser history); use `ticket`"),
    ),
    security(("bearer" = []), ("access_token" = []), ("ticket" = [])),
    responses(
        (status = 200, description = "Server-sent events: `event: state`, `data: {deployment_id, state, build_id, at, trigger}`",
         body = String, content_type = "text/event-stream"),
        (status = 204, description = "Nothing new after a terminal state: stop reconnecting"),
        (status = 400, description = "`invalid_request` (a bad `Last-Event-ID` or query string) or `invalid_deployment_id`", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: outside the token's scope", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such deployment", body = crate::error::ErrorBody),
        (status = 429, description = "`too_many_streams`: the token's subject, or this api, holds its most streams open (`details.limit`, `Retry-After`)", body = crate::error::ErrorBody),
    ))]
pub async fn deployment(
    State(app): State<AppState>,
    credential: StreamAuth,
    DeploymentIdPath(id): DeploymentIdPath,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (auth, deprecated) = credential.open(&app, StreamKind::DeploymentEvents, id.as_str()).await?;
    auth.require(id.as_str())?;
    let last = last_event_id(&headers)?;
    let slot = app.streams.open(&auth.0.sub, StreamKind::DeploymentEvents)?;
    // Subscribed before the first read, so nothing committed after it is missed.
    let follow = app.hub.follow(id.as_str());
    let mut conn = app.db.acquire_within(STREAM_OPEN_PATIENCE).await?;
    // One statement when the deployment has events (deployments are never
    // removed, so an event means it exists); its whole read only before
    // its first event.
    let latest = events::latest(&mut conn, id.as_str()).await?;
    let (first, after) = match (latest, last) {
        // An id past the deployment's last event was never sent for it:
        // start over from the current state, as without one.
        (Some(latest), None) => {
            let n = latest.n;
            (vec![latest], n)
        }
        (Some(latest), Some(n)) if n > latest.n => {
            let n = latest.n;
            (vec![latest], n)
        }
        (Some(latest), Some(n)) if n == latest.n => {
            if latest.state.is_terminal() {
                return Ok(StatusCode::NO_CONTENT.into_response());
            }
            (Vec::new(), n)
        }
        (Some(_), Some(n)) => (events::since(&mut conn, id.as_str(), n, PAGE).await?, n),
        (None, last) => {
            let read = slipway_jobs::read::deployment(&mut conn, id.as_str())
                .await?
                .ok_or_else(|| ApiError::not_found(format!("no deployment {id}")))?;
            if last.is_some_and(|n| n == 0) {
                if read.state.is_terminal() {
                    return Ok(StatusCode::NO_CONTENT.into_response());
                }
                (Vec::new(), 0)
            } else {
                let current = events::Event {
                    deployment_id: id.to_string(),
                    n: 0,
                    state: read.state,
                    trigger: read.state_build.as_ref().map(|b| b.trigger),
                    build_id: read.state_build.map(|b| b.id),
                    at: read.deployment.updated_at,
                };
                (vec![current], 0)
            }
        }
    };
    drop(conn);
    let db = app.db.clone();
    let response = spawn_stream(&app, &auth, slot, move |tx| follow_deployment(db, first, after, follow, tx));
    Ok(mark_deprecated(response, deprecated))
}

/// Sends `first`, then every event after the last one sent until a
/// terminal state, reading the rows when the hub wakes this stream (a read
/// shared with the deployment's other streams woken with it,
/// [`Follow::read`]) and every [`RECHECK`] (a read of its own). Ends when
/// the client goes away or the database fails (the client reconnects with
/// its last id).
async fn follow_deployment(db: Db, first: Vec<events::Event>, mut after: i64, mut follow: Follow, tx: EventSender) {
    let mut batch = first;
    loop {
        let mut ended = false;
        for e in &batch {
            after = after.max(e.n);
            ended = e.state.is_terminal();
            if tx.send(state_event(e)).await.is_err() {
                return;
            }
        }
        // A full page means more are waiting.
        let full = batch.len() as i64 >= PAGE;
        if ended && !full {
            return;
        }
        let mut fresh = full;
        if !full {
            tokio::select! {
                () = follow.woken() => {}
                _ = tokio::time::sleep(RECHECK) => fresh = true,
                _ = tx.closed() => return,
            }
        }
        // Boxed: the task of an idle stream holds only a pointer to it.
        batch = match Box::pin(follow.read(&db, after, PAGE, fresh)).await {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!(deployment.id = %follow.deployment(), error = %e, "the deployment channel stops: the database failed");
                return;
            }
        };
    }
}

/// `GET /builds/{id}/log`: a build's log as it is written (DL-3, Q-4).
///
/// Each chunk is `event: log`, `id: <chunk number>` (numbers grow within
/// a build, across its attempts), `data: {"text"}`; when the build has
/// ended and every chunk was sent, `event: end`, `id: <last chunk + 1>`,
/// `data: {"build_id", "status"}`, and the stream closes. With
/// `Last-Event-ID` it resumes after that chunk; a reconnect after the end
/// answers `204`. A build outside the token's scope is `404`, like an
/// unknown one; `429` past a stream cap ([`crate::stream_caps`]).
#[utoipa::path(get, path = "/builds/{id}/log", tag = "streams",
    params(
        ("id" = String, Path, description = "A build id"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this chunk"),
        ("ticket" = Option<String>, Query, description = "A single-use ticket from `POST …/ticket`, for a browser's EventSource that cannot send a header"),
        ("access_token" = Option<String>, Query, deprecated, description = "Deprecated: the token itself (it ends up in proxies' logs and browser history); use `ticket`"),
    ),
    security(("bearer" = []), ("access_token" = []), ("ticket" = [])),
    responses(
        (status = 200, description = "Server-sent events: `event: log` (`data: {text}`), then `event: end` (`data: {build_id, status}`)",
         body = String, content_type = "text/event-stream"),
        (status = 204, description = "The build ended and every chunk was sent: stop reconnecting"),
        (status = 400, description = "`invalid_request` (a bad `Last-Event-ID` or query string)", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such build, or one outside the token's scope", body = crate::error::ErrorBody),
        (status = 429, description = "`too_many_streams`: the token's subject, or this api, holds its most streams open (`details.limit`, `Retry-After`)", body = crate::error::ErrorBody),
    ))]
pub async fn build_log(
    State(app): State<AppState>,
    credential: StreamAuth,
    BuildIdPath(id): BuildIdPath,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (auth, deprecated) = credential.open(&app, StreamKind::BuildLog, &id).await?;
    let last = last_event_id(&headers)?;
    let missing = || ApiError::not_found(format!("no build {}", slipway_jobs::id::quoted(&id)));
    let mut conn = app.db.acquire().await?;
    let build = builds::get(&mut conn, &id).await?.ok_or_else(missing)?;
    if !auth.0.allows(&build.deployment_id) {
        return Err(missing());
    }
    let slot = app.streams.open(&auth.0.sub, StreamKind::BuildLog)?;
    let after = last.unwrap_or(0);
    if build.status.is_terminal() && last.is_some() {
        let end = log_end(&mut conn, &id).await?;
        if after >= end {
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
    }
    drop(conn);
    let db = app.db.clone();
    let response = spawn_stream(&app, &auth, slot, move |tx| follow_log(db, id, after, tx));
    Ok(mark_deprecated(response, deprecated))
}

/// The id of a finished build's `end` event: one past its last chunk's
/// number (1 for a build without a log).
async fn log_end(conn: &mut slipway_jobs::store::Conn, id: &str) -> Result<i64, StoreError> {
    Ok(builds::log_last(conn, id).await?.unwrap_or(0) + 1)
}

/// Sends the log's chunks after `after` as they come, then the `end` event.
async fn follow_log(db: Db, id: String, mut after: i64, tx: EventSender) {
    loop {
        let step = async {
            let mut conn = db.acquire().await?;
            // The status is read before the chunks: a chunk is only ever
            // written while the build runs, so once it has ended, the read
            // that follows sees every chunk.
            let status = builds::get(&mut conn, &id).await?.map(|b| b.status);
            let chunks = builds::log_since(&mut conn, &id, after, PAGE).await?;
            Ok::<_, StoreError>((status, chunks))
        };
        let (status, chunks) = match step.await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(build.id = %id, error = %e, "the log stream stops: the database failed");
                return;
            }
        };
        let full = chunks.len() as i64 == PAGE;
        for (n, text) in chunks {
            after = n;
            let event = Event::default().id(n.to_string()).event("log").data(json!({ "text": text }).to_string());
            if tx.send(event).await.is_err() {
                return;
            }
        }
        if full {
            continue;
        }
        match status {
            Some(s) if s.is_terminal() => {
                let end = Event::default()
                    .id((after + 1).to_string())
                    .event("end")
                    .data(json!({ "build_id": id, "status": s }).to_string());
                let _ = tx.send(end).await;
                return;
            }
            None => return,
            Some(_) => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(LOG_POLL) => {}
            _ = tx.closed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_expiring_too_far_ahead_for_a_duration_never_ends_its_stream() {
        assert_eq!(until_expiry(1e20, 1.8e9), Duration::MAX);
        assert_eq!(until_expiry(f64::INFINITY, 1.8e9), Duration::MAX);
        assert_eq!(until_expiry(1.8e9 - 5.0, 1.8e9), Duration::ZERO);
        assert_eq!(until_expiry(1.8e9 + 2.5, 1.8e9), Duration::from_secs_f64(2.5));
    }
}
