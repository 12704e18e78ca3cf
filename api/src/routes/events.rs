//! Streams (DL-3): the deployment channel `GET /deployments/{id}/events`
//! and the live build log `GET /builds/{id}/log`, both server-sent events.
//!
//! Both are resumable: every event carries a numeric `id`, and a client
//! that reconnects with `Last-Event-ID: <n>` (a browser's `EventSource`
//! does so by itself) gets the events after `n`, none twice. Both end by
//! closing the stream after their last event; a reconnect after that
//! answers `204 No Content`, which tells an `EventSource` to stop. A
//! comment line every [`KEEP_ALIVE`] keeps proxies from cutting an idle
//! stream.
//!
//! Both take the token from the `Authorization` header or, because a
//! browser's `EventSource` cannot set headers, from an `access_token`
//! query parameter (RFC 6750 §2.3); the access log never writes query
//! strings.

use super::rfc3339;
use crate::app::{AppState, Auth};
use crate::auth::TokenError;
use crate::error::ApiError;
use crate::extract::{BuildIdPath, DeploymentIdPath, Query};
use axum::extract::{FromRef, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use slipway_jobs::channel::Wake;
use slipway_jobs::store::{builds, events, Db, StoreError};
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// How often an idle stream sends a keep-alive comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How often a deployment stream reads its events even without a wake-up
/// (a safety net: wake-ups can be lost when the database connection of the
/// api's listener breaks).
const RECHECK: Duration = Duration::from_secs(60);

/// How often a build log stream looks for new chunks.
pub const LOG_POLL: Duration = Duration::from_millis(250);

/// Events or chunks read at once.
const PAGE: i64 = 500;

/// `?access_token=` of a stream.
#[derive(Debug, Deserialize)]
struct StreamQuery {
    access_token: Option<String>,
}

/// The token of a stream (SEC-1, as [`Auth`]): the `Authorization` header,
/// else the `access_token` query parameter. Every problem is `401`, also a
/// token sent both ways (RFC 6750 §2: one method per request), which would
/// leave the token that counts to a guess.
#[derive(Debug, Clone)]
pub struct StreamAuth(pub Auth);

impl<S> FromRequestParts<S> for StreamAuth
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        if parts.headers.contains_key(header::AUTHORIZATION) {
            let in_query = parts
                .uri
                .query()
                .is_some_and(|q| url::form_urlencoded::parse(q.as_bytes()).any(|(name, _)| name == "access_token"));
            if in_query {
                return Err(TokenError::TwoCarriers.into());
            }
            return Auth::from_request_parts(parts, state).await.map(Self);
        }
        let Query(q) = Query::<StreamQuery>::from_request_parts(parts, state).await?;
        let app = AppState::from_ref(state);
        let bearer = q.access_token.map(|t| format!("Bearer {t}"));
        app.verifier.verify(bearer.as_deref()).map(|claims| Self(Auth(claims)))
    }
}

/// The `Last-Event-ID` header: a non-negative integer, or absent.
fn last_event_id(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
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

/// An SSE response over what a task sends into `rx`, with keep-alives and
/// headers that keep proxies from buffering it.
fn sse(rx: mpsc::Receiver<Event>) -> Response {
    let stream =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx)) });
    let mut response = Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)).into_response();
    response.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// When a stream must end whatever it follows: when the process stops
/// serving, or when the token it was opened with expires (a token is
/// checked when a stream opens; the client reconnects with a fresh one and
/// its last id).
fn ends(app: &AppState, auth: &Auth) -> impl std::future::Future<Output = ()> + Send + 'static {
    let closed = app.hub.closed();
    let now = time::OffsetDateTime::now_utc().unix_timestamp_nanos() as f64 / 1e9;
    let left = Duration::try_from_secs_f64(auth.0.exp - now).unwrap_or(Duration::ZERO);
    async move {
        tokio::select! {
            () = closed => {}
            () = tokio::time::sleep(left) => {}
        }
    }
}

/// Runs a stream's task until it ends or must end (see [`ends`]);
/// dropping its sender ends the response.
async fn until_closed(task: impl std::future::Future<Output = ()>, closed: impl std::future::Future<Output = ()>) {
    tokio::select! {
        () = task => {}
        () = closed => {}
    }
}

/// One event of the deployment channel.
fn state_event(e: &events::Event) -> Event {
    Event::default().id(e.n.to_string()).event("state").data(
        json!({
            "deployment_id": e.deployment_id,
            "state": e.state,
            "build_id": e.build_id,
            "at": rfc3339(e.at),
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
/// "state", "build_id", "at"}`. The stream ends after a terminal state
/// (`active`, `idle`, `failed`); a reconnect with nothing new after a
/// terminal state answers `204`. `404` for an unknown deployment, `403`
/// outside the token's scope.
#[utoipa::path(get, path = "/deployments/{id}/events", tag = "streams",
    params(
        ("id" = String, Path, description = "A deployment id (lower-case letters, digits and `-`)"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id"),
        ("access_token" = Option<String>, Query, description = "The token, for a browser's EventSource that cannot send a header"),
    ),
    security(("bearer" = []), ("access_token" = [])),
    responses(
        (status = 200, description = "Server-sent events: `event: state`, `data: {deployment_id, state, build_id, at}`",
         body = String, content_type = "text/event-stream"),
        (status = 204, description = "Nothing new after a terminal state: stop reconnecting"),
        (status = 400, description = "`invalid_request` (a bad `Last-Event-ID` or query string) or `invalid_deployment_id`", body = crate::error::ErrorBody),
        (status = 403, description = "`forbidden`: outside the token's scope", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such deployment", body = crate::error::ErrorBody),
    ))]
pub async fn deployment(
    State(app): State<AppState>,
    StreamAuth(auth): StreamAuth,
    DeploymentIdPath(id): DeploymentIdPath,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    auth.require(id.as_str())?;
    let last = last_event_id(&headers)?;
    // Subscribed before the first read, so nothing committed after it is missed.
    let wakes = app.hub.subscribe();
    let mut conn = app.db.acquire().await?;
    let read = slipway_jobs::read::deployment(&mut conn, id.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no deployment {id}")))?;
    let latest = events::latest(&mut conn, id.as_str()).await?;
    // An id past the deployment's last event was never sent for it: start
    // over from the current state, as without one.
    let last = last.filter(|n| *n <= latest.as_ref().map_or(0, |e| e.n));
    let (first, after) = match last {
        None => {
            let current = latest.unwrap_or_else(|| events::Event {
                deployment_id: id.to_string(),
                n: 0,
                state: read.state,
                build_id: read.state_build.map(|b| b.id),
                at: read.deployment.updated_at,
            });
            let n = current.n;
            (vec![current], n)
        }
        Some(n) => {
            let missed = events::since(&mut conn, id.as_str(), n, PAGE).await?;
            let state_now = latest.as_ref().map_or(read.state, |e| e.state);
            if missed.is_empty() && state_now.is_terminal() {
                return Ok(StatusCode::NO_CONTENT.into_response());
            }
            (missed, n)
        }
    };
    drop(conn);
    let (tx, rx) = mpsc::channel(16);
    let follow = follow_deployment(app.db.clone(), id.to_string(), first, after, wakes, tx);
    tokio::spawn(until_closed(follow, ends(&app, &auth)));
    Ok(sse(rx))
}

/// Sends `first`, then every event after the last one sent until a
/// terminal state, reading the rows when the hub wakes this stream (and
/// every [`RECHECK`]). Ends when the client goes away or the database
/// fails (the client reconnects with its last id).
async fn follow_deployment(
    db: Db,
    id: String,
    first: Vec<events::Event>,
    mut after: i64,
    mut wakes: broadcast::Receiver<Wake>,
    tx: mpsc::Sender<Event>,
) {
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
        if ended && (batch.len() as i64) < PAGE {
            return;
        }
        if (batch.len() as i64) < PAGE {
            let woken = async {
                loop {
                    match wakes.recv().await {
                        Ok(w) if !w.concerns(&id) => continue,
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => return true,
                        Err(broadcast::error::RecvError::Closed) => return false,
                    }
                }
            };
            tokio::select! {
                alive = woken => if !alive { return },
                _ = tokio::time::sleep(RECHECK) => {}
                _ = tx.closed() => return,
            }
        }
        batch = match read_since(&db, &id, after).await {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!(deployment.id = %id, error = %e, "the deployment channel stops: the database failed");
                return;
            }
        };
    }
}

async fn read_since(db: &Db, id: &str, after: i64) -> Result<Vec<events::Event>, StoreError> {
    events::since(&mut db.acquire().await?, id, after, PAGE).await
}

/// `GET /builds/{id}/log`: a build's log as it is written (DL-3, Q-4).
///
/// Each chunk is `event: log`, `id: <chunk number>` (numbers grow within
/// a build, across its attempts), `data: {"text"}`; when the build has
/// ended and every chunk was sent, `event: end`, `id: <last chunk + 1>`,
/// `data: {"build_id", "status"}`, and the stream closes. With
/// `Last-Event-ID` it resumes after that chunk; a reconnect after the end
/// answers `204`. A build outside the token's scope is `404`, like an
/// unknown one.
#[utoipa::path(get, path = "/builds/{id}/log", tag = "streams",
    params(
        ("id" = String, Path, description = "A build id"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this chunk"),
        ("access_token" = Option<String>, Query, description = "The token, for a browser's EventSource that cannot send a header"),
    ),
    security(("bearer" = []), ("access_token" = [])),
    responses(
        (status = 200, description = "Server-sent events: `event: log` (`data: {text}`), then `event: end` (`data: {build_id, status}`)",
         body = String, content_type = "text/event-stream"),
        (status = 204, description = "The build ended and every chunk was sent: stop reconnecting"),
        (status = 400, description = "`invalid_request` (a bad `Last-Event-ID` or query string)", body = crate::error::ErrorBody),
        (status = 404, description = "`not_found`: no such build, or one outside the token's scope", body = crate::error::ErrorBody),
    ))]
pub async fn build_log(
    State(app): State<AppState>,
    StreamAuth(auth): StreamAuth,
    BuildIdPath(id): BuildIdPath,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let last = last_event_id(&headers)?;
    let missing = || ApiError::not_found(format!("no build {id}"));
    let mut conn = app.db.acquire().await?;
    let build = builds::get(&mut conn, &id).await?.ok_or_else(missing)?;
    if !auth.0.allows(&build.deployment_id) {
        return Err(missing());
    }
    let after = last.unwrap_or(0);
    if build.status.is_terminal() && last.is_some() {
        let end = log_end(&mut conn, &id).await?;
        if after >= end {
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
    }
    drop(conn);
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(until_closed(follow_log(app.db.clone(), id, after, tx), ends(&app, &auth)));
    Ok(sse(rx))
}

/// The id of a finished build's `end` event: one past its last chunk's
/// number (1 for a build without a log).
async fn log_end(conn: &mut slipway_jobs::store::Conn, id: &str) -> Result<i64, StoreError> {
    Ok(builds::log_last(conn, id).await?.unwrap_or(0) + 1)
}

/// Sends the log's chunks after `after` as they come, then the `end` event.
async fn follow_log(db: Db, id: String, mut after: i64, tx: mpsc::Sender<Event>) {
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
