//! Stream tickets: a browser's `EventSource` opens a stream with a
//! single-use `?ticket=` minted with the bearer token for that one stream
//! (`POST /deployments/{id}/events/ticket`, `POST /builds/{id}/log/ticket`),
//! never with the token in the URL. And the dashboard's own answers: no
//! CORS, `X-Frame-Options: DENY` beside the CSP, on its 404 and 405 too.

use crate::common;

use axum::body::Body;
use axum::http::{header, Method, Request, Response, StatusCode};
use common::{all, demo, harness, harness_with, sign, token, Harness, SECRET};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use slipway_jobs::store::tickets::{self, StreamKind};
use slipway_jobs::store::{Engine, Q};
use tower::ServiceExt;

/// One request with an optional bearer header and extra headers; the
/// answer unread (a stream lasts until its deployment settles).
async fn send(h: &Harness, method: Method, uri: &str, bearer: Option<&str>, extra: &[(&str, &str)]) -> Response<Body> {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(t) = bearer {
        request = request.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    h.router.clone().oneshot(request.body(Body::empty()).unwrap()).await.unwrap()
}

async fn json_of(response: Response<Body>) -> Value {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({ "raw": String::from_utf8_lossy(&bytes) }))
}

/// `POST {stream}/ticket` with `bearer`: the status and the body.
async fn mint(h: &Harness, stream: &str, bearer: &str) -> (StatusCode, Value) {
    let answer = send(h, Method::POST, &format!("{stream}/ticket"), Some(bearer), &[]).await;
    (answer.status(), json_of(answer).await)
}

/// A ticket for `stream`, minted with `bearer`.
async fn ticket(h: &Harness, stream: &str, bearer: &str) -> String {
    let (status, body) = mint(h, stream, bearer).await;
    assert_eq!(status, StatusCode::OK, "{stream}: {body}");
    body["ticket"].as_str().unwrap().to_owned()
}

/// Opens `stream` with `?ticket=`: the status, and the error code when refused.
async fn open(h: &Harness, stream: &str, ticket: &str) -> (StatusCode, Value) {
    let answer = send(h, Method::GET, &format!("{stream}?ticket={ticket}"), None, &[]).await;
    let status = answer.status();
    if status == StatusCode::OK {
        let kind = answer.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        assert!(kind.starts_with("text/event-stream"), "{stream}: {kind}");
        return (status, Value::Null);
    }
    (status, json_of(answer).await)
}

/// A harness with `demo` and `other` submitted; the build id of `demo`'s submit.
async fn seeded(engine: Engine) -> (Harness, String) {
    let h = harness(engine).await;
    let (status, body) = h.put("other", &json!({ "configuration": demo() })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (status, body) = h.put("demo", &json!({ "configuration": demo() })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let build = body["build_id"].as_str().unwrap().to_owned();
    (h, build)
}

fn subject_token(sub: &str, deployments: &[&str], exp_offset: i64) -> String {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    sign(&json!({ "sub": sub, "aud": "slipway", "exp": now + exp_offset, "deployments": deployments }))
}

async fn a_ticket_opens_its_stream_once_and_a_second_use_is_unauthorized(engine: Engine) {
    let (h, build) = seeded(engine).await;
    for stream in ["/deployments/demo/events".to_owned(), format!("/builds/{build}/log")] {
        let (status, body) = mint(&h, &stream, &all()).await;
        assert_eq!(status, StatusCode::OK, "{stream}: {body}");
        assert_eq!(body["expires_in"], 60, "{body}");
        let ticket = body["ticket"].as_str().unwrap().to_owned();
        // 256 random bits in base64url: 43 characters, none of the token's.
        assert_eq!(ticket.len(), 43, "{ticket}");
        assert!(ticket.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{ticket}");
        assert_eq!(open(&h, &stream, &ticket).await.0, StatusCode::OK, "{stream}: the first use");
        let (status, body) = open(&h, &stream, &ticket).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{stream}: the second use: {body}");
        assert_eq!(body["error"], "unauthorized", "{body}");
    }
    assert_eq!(h.count("stream_tickets").await, 0, "used tickets stay stored");
}

slipway_jobs::on_both_engines!(a_ticket_opens_its_stream_once_and_a_second_use_is_unauthorized);

async fn only_a_tickets_sha256_is_stored_with_its_stream_and_the_subject_that_minted_it(engine: Engine) {
    let (h, _) = seeded(engine).await;
    let ticket = ticket(&h, "/deployments/demo/events", &subject_token("alice", &["demo"], 3600)).await;
    let mut conn = h.db.acquire().await.unwrap();
    let row =
        Q::new("SELECT hash, kind, stream_id, subject, deployment_id, created_at, expires_at FROM stream_tickets")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(row.bytes("hash").unwrap(), Sha256::digest(ticket.as_bytes()).to_vec());
    assert_eq!(row.text("kind").unwrap(), "deployment_events");
    assert_eq!(row.text("stream_id").unwrap(), "demo");
    assert_eq!(row.text("subject").unwrap(), "alice");
    assert_eq!(row.text("deployment_id").unwrap(), "demo");
    assert_eq!(row.int("expires_at").unwrap() - row.int("created_at").unwrap(), 60_000);
}

slipway_jobs::on_both_engines!(only_a_tickets_sha256_is_stored_with_its_stream_and_the_subject_that_minted_it);

async fn a_ticket_opens_no_other_stream_and_stays_good_for_its_own(engine: Engine) {
    let (h, build) = seeded(engine).await;
    let (_, other) = h.put("other", &json!({ "configuration": demo() })).await;
    let other_build = other["build_id"].as_str().unwrap().to_owned();
    let events = ticket(&h, "/deployments/demo/events", &all()).await;
    let log = ticket(&h, &format!("/builds/{build}/log"), &all()).await;
    for (stream, ticket) in [
        ("/deployments/other/events".to_owned(), &events),
        (format!("/builds/{build}/log"), &events),
        ("/deployments/demo/events".to_owned(), &log),
        (format!("/builds/{other_build}/log"), &log),
    ] {
        let (status, body) = open(&h, &stream, ticket).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{stream}: {body}");
    }
    assert_eq!(open(&h, "/deployments/demo/events", &events).await.0, StatusCode::OK);
    assert_eq!(open(&h, &format!("/builds/{build}/log"), &log).await.0, StatusCode::OK);
}

slipway_jobs::on_both_engines!(a_ticket_opens_no_other_stream_and_stays_good_for_its_own);

#[tokio::test]
async fn a_ticket_is_minted_only_for_a_stream_the_token_may_open() {
    let (h, build) = seeded(Engine::Sqlite).await;
    let other_only = token(&["other"], 3600, SECRET);
    let (status, body) = mint(&h, "/deployments/demo/events", &other_only).await;
    assert_eq!((status, body["error"].clone()), (StatusCode::FORBIDDEN, json!("forbidden")), "{body}");
    let (status, body) = mint(&h, &format!("/builds/{build}/log"), &other_only).await;
    assert_eq!((status, body["error"].clone()), (StatusCode::NOT_FOUND, json!("not_found")), "{body}");
    let (status, body) = mint(&h, "/deployments/nowhere/events", &all()).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let answer = send(&h, Method::POST, "/deployments/demo/events/ticket", None, &[]).await;
    assert_eq!(answer.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(h.count("stream_tickets").await, 0, "a refused mint stored a ticket");
}

#[tokio::test]
async fn an_expired_ticket_is_refused_and_a_ticket_never_outlives_its_token() {
    let (h, _) = seeded(Engine::Sqlite).await;
    // Stored as minted 61 s ago.
    let now = slipway_jobs::store::now_ms();
    let expired = "an-expired-ticket";
    let hash = Sha256::digest(expired.as_bytes());
    let mut conn = h.db.acquire().await.unwrap();
    let minted = tickets::NewTicket {
        hash: &hash,
        kind: StreamKind::DeploymentEvents,
        stream_id: "demo",
        subject: "t",
        deployment_id: "demo",
        token_exp_ms: now + 3_600_000,
        created_at: now - 61_000,
        expires_at: now - 1_000,
    };
    tickets::insert(&mut conn, &minted).await.unwrap();
    drop(conn);
    let (status, body) = open(&h, "/deployments/demo/events", expired).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body["message"].as_str().unwrap().contains("expired"), "{body}");
    // A token with 5 s left mints a ticket of at most 5 s.
    let (status, body) = mint(&h, "/deployments/demo/events", &subject_token("t", &["demo"], 5)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["expires_in"].as_u64().unwrap() <= 5, "{body}");
}

#[tokio::test]
async fn a_ticket_sent_with_another_subjects_token_or_with_any_token_is_refused_and_stays_unused() {
    let (h, _) = seeded(Engine::Sqlite).await;
    let alice = subject_token("alice", &["demo"], 3600);
    let bob = subject_token("bob", &["demo"], 3600);
    let ticket = ticket(&h, "/deployments/demo/events", &alice).await;
    let with_bob = send(&h, Method::GET, &format!("/deployments/demo/events?ticket={ticket}"), Some(&bob), &[]).await;
    assert_eq!(with_bob.status(), StatusCode::UNAUTHORIZED);
    assert!(json_of(with_bob).await["message"].as_str().unwrap().contains("one credential"));
    let with_query = format!("/deployments/demo/events?ticket={ticket}&access_token={bob}");
    assert_eq!(send(&h, Method::GET, &with_query, None, &[]).await.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(open(&h, "/deployments/demo/events", &ticket).await.0, StatusCode::OK, "alice's ticket was used up");
}

#[tokio::test]
async fn a_stream_opened_with_the_token_in_the_query_still_works_and_says_it_is_deprecated() {
    let (h, _) = seeded(Engine::Sqlite).await;
    let answer = send(&h, Method::GET, &format!("/deployments/demo/events?access_token={}", all()), None, &[]).await;
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(answer.headers()[header::HeaderName::from_static("deprecation")], "true");
    let answer = send(&h, Method::GET, "/deployments/demo/events", Some(&all()), &[]).await;
    assert_eq!(answer.status(), StatusCode::OK);
    assert!(!answer.headers().contains_key("deprecation"));
}

#[tokio::test]
async fn the_dashboard_opens_its_streams_with_tickets_and_puts_no_token_in_a_url() {
    let h = harness(Engine::Sqlite).await;
    let answer = send(&h, Method::GET, "/ui/dashboard.js", None, &[]).await;
    assert_eq!(answer.status(), StatusCode::OK);
    let script = String::from_utf8(answer.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    assert!(!script.contains("access_token"), "the dashboard still puts the token in a URL");
    assert!(
        script.contains("/ticket`, { method: \"POST\" }") && script.contains("?ticket="),
        "no ticket in the script"
    );
    // Every URL the script builds from a template holds no token.
    for (n, line) in script.lines().enumerate() {
        if line.contains("new EventSource(") || line.contains("fetch(") {
            assert!(!line.contains("token()"), "line {}: {line}", n + 1);
        }
    }
}

#[tokio::test]
async fn the_dashboard_answers_no_cors_even_to_an_allowed_origin_while_the_api_does() {
    let origin = "https://panel.example";
    let h = harness_with(Engine::Sqlite, &[("SLIPWAY_ALLOWED_ORIGINS", origin)]).await;
    let api = send(&h, Method::GET, "/deployments", Some(&all()), &[("origin", origin)]).await;
    assert_eq!(api.headers().get(header::ACCESS_CONTROL_ALLOW_ORIGIN).map(|v| v.to_str().unwrap()), Some(origin));
    for path in ["/ui", "/ui/dashboard.js", "/ui/fragments/deployments", "/ui/nothing-here"] {
        let answer = send(&h, Method::GET, path, Some(&all()), &[("origin", origin)]).await;
        assert!(
            !answer.headers().contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN),
            "GET {path}: {:?}",
            answer.headers()
        );
        let preflight = send(
            &h,
            Method::OPTIONS,
            path,
            None,
            &[
                ("origin", origin),
                ("access-control-request-method", "GET"),
                ("access-control-request-headers", "authorization"),
            ],
        )
        .await;
        for name in [
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            header::ACCESS_CONTROL_ALLOW_METHODS,
        ] {
            assert!(!preflight.headers().contains_key(&name), "OPTIONS {path}: {name}: {:?}", preflight.headers());
        }
    }
}

#[tokio::test]
async fn every_dashboard_answer_even_a_404_or_a_405_forbids_framing_twice() {
    let h = harness(Engine::Sqlite).await;
    for (method, path, want) in [
        (Method::GET, "/ui", StatusCode::OK),
        (Method::GET, "/ui/fragments/deployments", StatusCode::OK),
        (Method::GET, "/ui/nothing-here", StatusCode::NOT_FOUND),
        (Method::GET, "/ui/fragments/nothing-here", StatusCode::NOT_FOUND),
        (Method::POST, "/ui", StatusCode::METHOD_NOT_ALLOWED),
        (Method::DELETE, "/ui/dashboard.js", StatusCode::METHOD_NOT_ALLOWED),
    ] {
        let answer = send(&h, method.clone(), path, Some(&all()), &[]).await;
        assert_eq!(answer.status(), want, "{method} {path}");
        let headers = answer.headers();
        assert_eq!(headers.get(header::X_FRAME_OPTIONS).map(|v| v.to_str().unwrap()), Some("DENY"), "{method} {path}");
        let csp = headers.get(header::CONTENT_SECURITY_POLICY).map(|v| v.to_str().unwrap()).unwrap_or("");
        assert!(csp.contains("frame-ancestors 'none'"), "{method} {path}: {csp:?}");
        assert_eq!(headers.get(header::X_CONTENT_TYPE_OPTIONS).map(|v| v.to_str().unwrap()), Some("nosniff"));
    }
    // Not the dashboard's: `/uix` is the api's plain 404.
    let answer = send(&h, Method::GET, "/uix", None, &[]).await;
    assert_eq!(answer.status(), StatusCode::NOT_FOUND);
    assert!(!answer.headers().contains_key(header::X_FRAME_OPTIONS));
}
