//! PRODUCT.md §3 on every route: each (method, route) of the router
//! (`route_table`) × every way a request can be refused, through the real
//! router with a valid token, so each call reaches its handler: every answer
//! is JSON, and every error answer is `{"error", "message", "details"}`.

use crate::common;
use crate::route_table;

use axum::body::{Body, Bytes};
use axum::http::{header, Method, Request, StatusCode};
use common::*;
use http_body_util::BodyExt;
use route_table::{routes, Access, Input, Route};
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use tower::ServiceExt;

/// A deployment and a build that do not exist: reads answer `404`, no
/// stream opens.
const ID: &str = "z";
const BUILD: &str = "z.20260101T000000Z.abcdef";

/// The router's body limit (`slipway_api::limits::BODY_LIMIT`), doubled.
const OVER_LIMIT: usize = 2 * slipway_api::limits::BODY_LIMIT;

/// A JSON object of [`OVER_LIMIT`] bytes, as a submit would send it.
fn big_json() -> Vec<u8> {
    let head = br#"{"configuration": {"padding": ""#;
    let tail = br#""}}"#;
    let mut body = head.to_vec();
    body.resize(OVER_LIMIT - tail.len(), b'a');
    body.extend_from_slice(tail);
    body
}

/// A body sent in 64 KiB chunks with no `Content-Length`, as a chunked upload.
fn chunked(bytes: Vec<u8>) -> Body {
    let chunks: Vec<Result<Bytes, std::io::Error>> =
        bytes.chunks(64 * 1024).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
    Body::from_stream(futures::stream::iter(chunks))
}

/// The ways a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// A body over the limit that says so in its `Content-Length`.
    OverLimitWithLength,
    /// A body over the limit, chunked, without `Content-Length`.
    OverLimitChunked,
    /// A body that is not JSON, sent as JSON.
    MalformedJson,
    /// A query string the route cannot read.
    BadQuery,
    /// A path segment that is not UTF-8 (`%FF`) where the id goes.
    BadPath,
    /// A method the route does not take.
    WrongMethod,
}

const FAULTS: [Fault; 6] = [
    Fault::OverLimitWithLength,
    Fault::OverLimitChunked,
    Fault::MalformedJson,
    Fault::BadQuery,
    Fault::BadPath,
    Fault::WrongMethod,
];

/// What the router answered.
#[derive(Debug)]
struct Answer {
    status: StatusCode,
    content_type: String,
    allow: Option<String>,
    body: Value,
}

async fn send(h: &Harness, request: Request<Body>) -> Answer {
    let answer = h.router.clone().oneshot(request).await.unwrap();
    let status = answer.status();
    let header = |name| answer.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let content_type = header(header::CONTENT_TYPE).unwrap_or_default();
    let allow = header(header::ALLOW);
    let bytes = answer.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({ "raw": String::from_utf8_lossy(&bytes) }));
    Answer { status, content_type, allow, body }
}

/// The request for `route` with `fault`, with a valid token for everything
/// (in the query for a stream's bad query, the only query it reads), and
/// what it must answer when the fault is one the route can meet: `(status,
/// code)`; `None` where the route never looks at what is wrong (a `GET`
/// that reads no body), which must still answer in JSON.
fn faulty(route: &Route, fault: Fault, token: &str) -> (Request<Body>, Option<(StatusCode, &'static str)>) {
    let mut method = route.method.clone();
    let mut uri = route.uri(ID, BUILD);
    let mut body = Body::empty();
    let mut json = false;
    let mut length = None;
    let mut header_token = true;
    let expected = match fault {
        Fault::OverLimitWithLength => {
            let bytes = big_json();
            length = Some(bytes.len());
            body = Body::from(bytes);
            json = true;
            // Refused on its Content-Length alone, on every route.
            Some((StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"))
        }
        Fault::OverLimitChunked => {
            body = chunked(big_json());
            json = true;
            route.input.reads_body().then_some((StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"))
        }
        Fault::MalformedJson => {
            body = Body::from(r#"{"configuration": "#);
            json = true;
            route.input.reads_body().then_some((StatusCode::BAD_REQUEST, "malformed_json"))
        }
        Fault::BadQuery => {
            let path = route.path(ID, BUILD);
            if route.stream {
                header_token = false;
                uri = format!("{path}?access_token={token}&access_token={token}");
                Some((StatusCode::BAD_REQUEST, "invalid_request"))
            } else if let Some(bad) = route.bad_query {
                uri = format!("{path}?{bad}");
                Some((StatusCode::BAD_REQUEST, "invalid_request"))
            } else {
                uri = format!("{path}?%FF=%&x=%ZZ");
                None
            }
        }
        Fault::BadPath => {
            if route.uri.contains("{build}") {
                uri = route.uri(ID, "%FF");
                Some((StatusCode::NOT_FOUND, "not_found"))
            } else if route.uri.contains("{rollout}") {
                uri = route.uri.replace("{rollout}", "%FF");
                Some((StatusCode::NOT_FOUND, "not_found"))
            } else if route.uri.contains("{id}") {
                uri = route.uri("%FF", BUILD);
                Some((StatusCode::BAD_REQUEST, "invalid_deployment_id"))
            } else {
                None
            }
        }
        Fault::WrongMethod => {
            // A method no route takes (PATCH is a webhook's update).
            method = Method::TRACE;
            Some((StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"))
        }
    };
    let mut request = Request::builder().method(method).uri(uri);
    if header_token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    if json {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    if let Some(n) = length {
        request = request.header(header::CONTENT_LENGTH, n);
    }
    (request.body(body).unwrap(), expected)
}

/// Panics unless `answer` is JSON (a success of the dashboard: its
/// route's media type) and, as an error, the §3 shape.
fn assert_json_and_shaped(answer: &Answer, media: &str, what: &str) {
    let want = if answer.status.as_u16() < 400 { media } else { "application/json" };
    assert!(answer.content_type.starts_with(want), "{what}: {} {:?}", answer.status, answer.content_type);
    if answer.status.as_u16() >= 400 {
        assert!(answer.body["error"].is_string(), "{what}: {}", answer.body);
        assert!(answer.body["message"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {}", answer.body);
        assert!(answer.body.get("details").is_some(), "{what}: {}", answer.body);
    }
}

async fn every_refusal_of_every_route_answers_in_the_json_error_shape(engine: Engine) {
    let h = harness(engine).await;
    let token = all();
    for route in routes() {
        for fault in FAULTS {
            if fault == Fault::BadPath && !route.has_id() {
                continue;
            }
            let what = format!("{} with {fault:?}", route.name());
            let (request, expected) = faulty(&route, fault, &token);
            let answer = send(&h, request).await;
            assert_json_and_shaped(&answer, route.media, &what);
            if let Some((status, code)) = expected {
                assert_eq!(answer.status, status, "{what}: {}", answer.body);
                assert_error_shape(&answer.body, code);
            }
            if fault == Fault::WrongMethod {
                let allow = answer.allow.as_deref().unwrap_or("");
                assert!(allow.contains(route.method.as_str()), "{what}: Allow {allow:?}");
            }
        }
    }
    // Nothing refused was stored.
    assert_eq!(h.count("deployments").await, 0);
}

async fn an_unknown_route_answers_404_in_the_json_error_shape(engine: Engine) {
    let h = harness(engine).await;
    for (method, uri) in [
        (Method::GET, "/nope"),
        (Method::POST, "/nope"),
        (Method::GET, "/deployments/z/nope"),
        (Method::GET, "/%FF"),
        (Method::DELETE, "/builds"),
    ] {
        for bearer in [None, Some(all())] {
            let mut request = Request::builder().method(method.clone()).uri(uri);
            if let Some(t) = &bearer {
                request = request.header(header::AUTHORIZATION, format!("Bearer {t}"));
            }
            let answer = send(&h, request.body(Body::empty()).unwrap()).await;
            let what = format!("{method} {uri}");
            assert_eq!(answer.status, StatusCode::NOT_FOUND, "{what}: {}", answer.body);
            assert_json_and_shaped(&answer, "application/json", &what);
            assert_error_shape(&answer.body, "not_found");
        }
    }
}

/// The fault of issue 10: `DELETE /deployments/{id}` read its body as bytes
/// and answered a body over the limit with axum's `text/plain` 413.
async fn a_two_mebibyte_delete_body_answers_413_in_the_json_shape(engine: Engine) {
    let h = harness(engine).await;
    let delete = routes().into_iter().find(|r| r.method == Method::DELETE && r.uri == "/deployments/{id}").unwrap();
    assert!(matches!(delete.input, Input::OptionalJson));
    for fault in [Fault::OverLimitWithLength, Fault::OverLimitChunked] {
        let (request, _) = faulty(&delete, fault, &all());
        let answer = send(&h, request).await;
        assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE, "{fault:?}: {}", answer.body);
        assert_json_and_shaped(&answer, "application/json", &format!("{fault:?}"));
        assert_error_shape(&answer.body, "payload_too_large");
        assert_eq!(answer.body["details"]["limit_bytes"], slipway_api::limits::BODY_LIMIT, "{fault:?}");
    }
}

/// A public route refuses a body over the limit too, before any token is
/// looked at; an authenticated one without a token says `401` first only
/// when the body is within the limit.
async fn a_body_over_the_limit_is_refused_on_its_length_before_the_token_is_read(engine: Engine) {
    let h = harness(engine).await;
    for route in routes().iter().filter(|r| r.input.reads_body()) {
        let (request, _) = faulty(route, Fault::OverLimitWithLength, "not.a.jwt");
        let answer = send(&h, request).await;
        assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE, "{}: {}", route.name(), answer.body);
        assert_error_shape(&answer.body, "payload_too_large");
        if route.access != Access::Public {
            let (status, body) = h.call(route.method.clone(), &route.uri(ID, BUILD), Some("not.a.jwt"), None).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{}: {body}", route.name());
        }
    }
}

slipway_jobs::on_both_engines!(
    every_refusal_of_every_route_answers_in_the_json_error_shape,
    an_unknown_route_answers_404_in_the_json_error_shape,
    a_two_mebibyte_delete_body_answers_413_in_the_json_shape,
    a_body_over_the_limit_is_refused_on_its_length_before_the_token_is_read,
);
