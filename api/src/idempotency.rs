//! Safe retries (IK-1): the `Idempotency-Key` request header of the IETF
//! httpapi draft (`draft-ietf-httpapi-idempotency-key-header`), as one
//! route layer ([`idempotent`]) put on each route that queues work.
//!
//! A request that carries a key, from a token subject (`iss` + `sub`):
//! 1. the key is checked: a structured-field string (RFC 8941 §3.3.3,
//!    `"…"`) or a bare token, of 1 to [`MAX_KEY_LEN`] visible ASCII
//!    characters, in one header field; else `400 invalid_idempotency_key`;
//! 2. the body is read and the request's fingerprint taken: SHA-256 of the
//!    method, path and query, `If-Match`, `If-None-Match` and body;
//! 3. the key is claimed for the subject in one statement
//!    ([`slipway_jobs::store::idempotency::claim`]) before the handler
//!    runs. If another request holds it: another fingerprint is `422
//!    idempotency_key_reused`; the same one still running is `409
//!    idempotency_key_in_flight` (`Retry-After: 1`); the same one answered
//!    is that answer again (status, body, `Content-Type`, `ETag`,
//!    `Location`, plus `Idempotency-Replayed: true`), and nothing runs;
//! 4. the handler runs in a task of its own, so a client that hangs up does
//!    not cut it short; its answer is stored when [`replayable`], otherwise
//!    the key is let go (a retry runs again).
//!
//! An api killed between the claim and the answer leaves the key in flight
//! until `SLIPWAY_IDEMPOTENCY_LEASE`; a retry after that runs the request
//! again (docs/DECISIONS.md, "Idempotency keys: claimed before, answered
//! after"). Keys and answers are kept `SLIPWAY_IDEMPOTENCY_TTL`, then the
//! retention sweep deletes them. A request without the header, and a
//! `GET`, `HEAD` or `OPTIONS`, pass untouched.

use crate::error::ApiError;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use sha2::{Digest, Sha256};
use slipway_jobs::store::idempotency::{self, Answer, Held, NewClaim, Scope};
use slipway_jobs::store::now_ms;

/// The request header.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The header a replayed answer carries (`true`), so a client can tell it
/// from a first answer.
pub const IDEMPOTENCY_REPLAYED: HeaderName = HeaderName::from_static("idempotency-replayed");

/// The longest key accepted, in characters (a ULID is 26, a UUID 36).
pub const MAX_KEY_LEN: usize = 255;

/// The largest answer kept for a replay, in bytes; the queuing routes
/// answer a few KiB.
pub const ANSWER_LIMIT: usize = 1024 * 1024;

/// The headers of an answer that a replay repeats.
const KEPT_HEADERS: [HeaderName; 3] = [header::CONTENT_TYPE, header::ETAG, header::LOCATION];

/// `route` with the `Idempotency-Key` layer: the one line that makes a
/// route's requests safe to retry (`api/src/router.rs`), such as
/// `.route("/rollouts", idempotent(&state, post(routes::rollouts::start)))`.
/// Put it inside any admission layer of the route, so that a refusal
/// before the body is read stays before it.
pub fn idempotent(state: &AppState, route: MethodRouter<AppState>) -> MethodRouter<AppState> {
    route.layer(middleware::from_fn_with_state(state.clone(), guard))
}

/// The layer of [`idempotent`] (usable alone with
/// `axum::middleware::from_fn_with_state(state, guard)`, for example on a
/// handler under an admission layer).
pub async fn guard(State(app): State<AppState>, request: Request, next: Next) -> Response {
    if matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        || !request.headers().contains_key(IDEMPOTENCY_KEY)
    {
        return next.run(request).await;
    }
    // Whose key: a request without a valid token is refused as the route
    // would refuse it.
    let claims = match app.verifier.verify_headers(request.headers()) {
        Ok(claims) => claims,
        Err(e) => return e.into_response(),
    };
    let key = match parse_key(request.headers()) {
        Ok(key) => key,
        Err(e) => return e.into_response(),
    };
    let (parts, body) = request.into_parts();
    let body = match crate::extract::read_body(
        Request::new(Body::new(http_body_util::Limited::new(body, crate::limits::BODY_LIMIT))),
        &(),
    )
    .await
    {
        Ok(bytes) => bytes,
        Err(e) => return e.into_response(),
    };
    let fingerprint = fingerprint(&parts.method, &parts.uri, &parts.headers, &body);
    let (iss, sub) = (claims.iss.unwrap_or_default(), claims.sub);
    let claim = claim_id();
    match take(&app, Scope { iss: &iss, sub: &sub }, &key, &fingerprint, &claim).await {
        Ok(Taken::Ours) => {}
        Ok(Taken::Answered(answer)) => return replay(answer),
        Ok(Taken::Other) => return reused(),
        Ok(Taken::InFlight) => return in_flight(),
        Err(e) => return e.into_response(),
    }
    let request = Request::from_parts(parts, Body::from(body));
    // In a task of its own: the answer is stored even if the client hangs up.
    let held = (app.clone(), iss.clone(), sub.clone(), key.clone(), claim.clone());
    let run = tokio::spawn(async move {
        let response = next.run(request).await;
        finish(&app, Scope { iss: &iss, sub: &sub }, &key, &claim, response).await
    });
    match run.await {
        Ok(response) => response,
        Err(e) => {
            // The handler panicked: no answer to keep, so a retry runs again.
            let (app, iss, sub, key, claim) = held;
            tracing::error!(error = %e, "a request with an Idempotency-Key failed; its key is let go");
            let _ = release(&app, Scope { iss: &iss, sub: &sub }, &key, &claim).await;
            ApiError::from_status(StatusCode::INTERNAL_SERVER_ERROR).into_response()
        }
    }
}

/// How a claim went.
enum Taken {
    /// This request holds the key: it runs.
    Ours,
    /// The same request was answered: this answer again.
    Answered(Answer),
    /// Another request (another fingerprint) holds or held the key.
    Other,
    /// The same request is still being answered.
    InFlight,
}

/// Claims the key, or reads how another request holds it. A key let go
/// between the two is claimed again (at most three tries).
async fn take(app: &AppState, scope: Scope<'_>, key: &str, fingerprint: &[u8], claim: &str) -> Result<Taken, ApiError> {
    let ttl = i64::try_from(app.config.tenancy.idempotency_ttl.as_millis()).unwrap_or(i64::MAX / 4);
    let lease = i64::try_from(app.config.tenancy.idempotency_lease.as_millis()).unwrap_or(i64::MAX / 4);
    for _ in 0..3 {
        let now = now_ms();
        let mut tx = app.db.begin_write().await?;
        let new = NewClaim {
            scope,
            key,
            fingerprint,
            claim,
            now,
            lease_until: now.saturating_add(lease),
            expires_at: now.saturating_add(ttl),
        };
        if idempotency::claim(&mut tx, &new).await? {
            tx.commit().await?;
            return Ok(Taken::Ours);
        }
        let held = idempotency::get(&mut tx, scope, key, now).await?;
        tx.commit().await?;
        return Ok(match held {
            None => continue,
            Some(Held { fingerprint: theirs, .. }) if theirs != fingerprint => Taken::Other,
            Some(Held { answer: None, .. }) => Taken::InFlight,
            Some(Held { answer: Some(answer), .. }) => Taken::Answered(answer),
        });
    }
    Err(ApiError::from_status(StatusCode::SERVICE_UNAVAILABLE))
}

/// Stores the handler's answer for replays when [`replayable`], or lets the
/// key go; answers it either way. A store that fails is logged: the key
/// then stays in flight until its lease.
async fn finish(app: &AppState, scope: Scope<'_>, key: &str, claim: &str, response: Response) -> Response {
    let (parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, ANSWER_LIMIT).await {
        Ok(bytes) => bytes,
        Err(e) => {
            tracing::error!(error = %e, "the answer of a request with an Idempotency-Key could not be read");
            let _ = release(app, scope, key, claim).await;
            return ApiError::from_status(StatusCode::INTERNAL_SERVER_ERROR).into_response();
        }
    };
    let kept = if replayable(parts.status, &bytes) {
        let answer = Answer {
            status: parts.status.as_u16(),
            headers: KEPT_HEADERS
                .iter()
                .filter_map(|name| {
                    let value = parts.headers.get(name)?.to_str().ok()?;
                    Some((name.as_str().to_owned(), value.to_owned()))
                })
                .collect(),
            body: bytes.to_vec(),
        };
        store(app, scope, key, claim, &answer).await
    } else {
        release(app, scope, key, claim).await
    };
    if let Err(e) = kept {
        tracing::warn!(error = %e.message, "the answer of a request with an Idempotency-Key could not be recorded; \
                                            a retry with the key waits for SLIPWAY_IDEMPOTENCY_LEASE");
    }
    Response::from_parts(parts, Body::from(bytes))
}

async fn store(app: &AppState, scope: Scope<'_>, key: &str, claim: &str, answer: &Answer) -> Result<(), ApiError> {
    let mut tx = app.db.begin_write().await?;
    let held = idempotency::answer(&mut tx, scope, key, claim, answer).await?;
    tx.commit().await?;
    if !held {
        tracing::warn!("a request outlasted SLIPWAY_IDEMPOTENCY_LEASE and another took its Idempotency-Key over");
    }
    Ok(())
}

async fn release(app: &AppState, scope: Scope<'_>, key: &str, claim: &str) -> Result<(), ApiError> {
    let mut tx = app.db.begin_write().await?;
    idempotency::release(&mut tx, scope, key, claim).await?;
    tx.commit().await?;
    Ok(())
}

/// Whether an answer is replayed to a retry, rather than the retry run
/// again: every `2xx`, and every `4xx` that would be answered again the
/// same, which is all but `401` (a token that expired meanwhile), `408`
/// (the body came too slowly), `429` (a bound that passes with time) and
/// `409 conflict` (a write that raced another: try again). A `5xx`
/// (`503 queue_full`, the database away, …) is never kept: a retry may
/// succeed.
pub fn replayable(status: StatusCode, body: &[u8]) -> bool {
    match status.as_u16() {
        200..=299 => true,
        401 | 408 | 429 => false,
        409 => serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .is_none_or(|v| v.get("error").and_then(|e| e.as_str()) != Some("conflict")),
        400..=499 => true,
        _ => false,
    }
}

fn replay(answer: Answer) -> Response {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = Response::new(Body::from(answer.body));
    *response.status_mut() = status;
    for (name, value) in answer.headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            response.headers_mut().insert(name, value);
        }
    }
    response.headers_mut().insert(IDEMPOTENCY_REPLAYED, HeaderValue::from_static("true"));
    if status.as_u16() >= 400 {
        // Already in the error shape when it was first answered.
        response.extensions_mut().insert(crate::error::ErrorShape);
    }
    response
}

fn reused() -> Response {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency_key_reused",
        "this Idempotency-Key was already used for another request (another route, body or precondition); use a new \
         key for each distinct request, and the same key only to retry the same request",
    )
    .into_response()
}

fn in_flight() -> Response {
    let mut e = ApiError::new(
        StatusCode::CONFLICT,
        "idempotency_key_in_flight",
        "a request with this Idempotency-Key is still being answered; try again once it is, and its answer is \
         repeated",
    );
    e.retry_after = Some(1);
    e.into_response()
}

/// The key of the request's `Idempotency-Key` header (RFC 8941 sf-string
/// contents, or the bare value): `400 invalid_idempotency_key` saying
/// what is wrong, never repeating the value.
pub fn parse_key(headers: &HeaderMap) -> Result<String, ApiError> {
    let bad = |why: String| {
        ApiError::bad_request(
            "invalid_idempotency_key",
            format!(
                "the Idempotency-Key header {why}; send one key of 1 to {MAX_KEY_LEN} visible ASCII characters, as \
                 a structured-field string such as \"01JD7Q0R6Q3W6Y1B8Z2M4N5P7S\" (a new ULID or UUID per request)"
            ),
        )
    };
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let value = values.next().ok_or_else(|| bad("is missing".to_owned()))?;
    if values.next().is_some() {
        return Err(bad("is sent more than once".to_owned()));
    }
    let raw = value.as_bytes();
    if raw.len() > MAX_KEY_LEN + 2 {
        return Err(bad(format!("is {} bytes long", raw.len())));
    }
    if let Some(i) = raw.iter().position(|b| !(0x20..0x7f).contains(b)) {
        return Err(bad(format!("has a byte outside visible ASCII (0x{:02x} at offset {i})", raw[i])));
    }
    let text = std::str::from_utf8(raw).expect("visible ASCII");
    let key = match text.strip_prefix('"') {
        Some(quoted) => {
            let inner = quoted.strip_suffix('"').ok_or_else(|| bad("opens a string it does not close".to_owned()))?;
            let mut key = String::with_capacity(inner.len());
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some(c @ ('"' | '\\')) => key.push(c),
                        _ => return Err(bad("has a backslash that escapes neither \" nor \\".to_owned())),
                    },
                    '"' => return Err(bad("has an unescaped \" inside its string".to_owned())),
                    c => key.push(c),
                }
            }
            key
        }
        None if text.contains(['"', ' ']) => {
            return Err(bad("is neither a quoted string nor a single token".to_owned()));
        }
        None => text.to_owned(),
    };
    if key.is_empty() {
        return Err(bad("is empty".to_owned()));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(bad(format!("is {} characters long", key.len())));
    }
    Ok(key)
}

/// SHA-256 of what makes a request the same request: method, path and
/// query, `If-Match`, `If-None-Match`, body; each part length-prefixed.
pub fn fingerprint(method: &Method, uri: &axum::http::Uri, headers: &HeaderMap, body: &[u8]) -> Vec<u8> {
    let mut hash = Sha256::new();
    let joined = |name: HeaderName| {
        headers.get_all(name).iter().map(|v| v.as_bytes().to_vec()).collect::<Vec<_>>().join(&b","[..])
    };
    let path = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let parts: [&[u8]; 5] =
        [method.as_str().as_bytes(), path.as_bytes(), &joined(header::IF_MATCH), &joined(header::IF_NONE_MATCH), body];
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hash.finalize().to_vec()
}

/// A value unique to one request: 16 random bytes, hex.
fn claim_id() -> String {
    use rand::RngCore as _;
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(value: &[u8]) -> Result<String, String> {
        let mut headers = HeaderMap::new();
        headers.insert(IDEMPOTENCY_KEY, HeaderValue::from_bytes(value).unwrap());
        parse_key(&headers).map_err(|e| e.message)
    }

    #[test]
    fn a_key_is_a_structured_field_string_or_a_bare_token_of_visible_ascii() {
        assert_eq!(key(b"\"8e03978e-40d5-43e8\"").unwrap(), "8e03978e-40d5-43e8");
        assert_eq!(key(b"\"a \\\"b\\\\\"").unwrap(), "a \"b\\");
        assert_eq!(key(b"01JD7Q0R6Q3W6Y1B8Z2M4N5P7S").unwrap(), "01JD7Q0R6Q3W6Y1B8Z2M4N5P7S");
        assert!(key(b"\"\"").unwrap_err().contains("is empty"));
        assert!(key(b"\"open").unwrap_err().contains("does not close"));
        assert!(key(b"a b").unwrap_err().contains("single token"));
        assert!(key(&[b'k'; 10 * 1024]).unwrap_err().contains("10240 bytes long"));
        assert!(key(b"\"k\tk\"").unwrap_err().contains("0x09"));
        assert!(key("\"k\u{e9}\"".as_bytes()).unwrap_err().contains("visible ASCII"));
        assert!(!key(&[b'k'; 10 * 1024]).unwrap_err().contains("kkkk"), "the key is repeated");
    }

    #[test]
    fn only_final_answers_are_replayed() {
        for (status, body, kept) in [
            (202, &b"{}"[..], true),
            (400, br#"{"error":"invalid_configuration"}"#, true),
            (404, b"{}", true),
            (409, br#"{"error":"build_finished"}"#, true),
            (409, br#"{"error":"conflict"}"#, false),
            (412, b"{}", true),
            (401, b"{}", false),
            (408, b"{}", false),
            (429, b"{}", false),
            (500, b"{}", false),
            (503, br#"{"error":"queue_full"}"#, false),
        ] {
            assert_eq!(replayable(StatusCode::from_u16(status).unwrap(), body), kept, "{status}");
        }
    }
}
