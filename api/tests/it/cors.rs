//! CORS (PRODUCT.md §12) over the router: the browsers of
//! `SLIPWAY_ALLOWED_ORIGINS` (the callbacks' allowlist, origins compared as
//! browsers serialise them) get their preflights answered on every route
//! without a token, and their answers, errors included, readable; any other
//! origin gets no `Access-Control-Allow-Origin`.

use crate::common;
use crate::route_table;

use axum::body::Body;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use common::*;
use http_body_util::BodyExt;
use serde_json::Value;
use slipway_jobs::store::Engine;
use tower::ServiceExt;

/// The allowlist, written as an operator might: upper case, a default port,
/// a trailing slash.
const ALLOWED: &str = "https://Panel.Example:443, http://localhost:3000/";
const PANEL: &str = "https://panel.example";

async fn cors_harness() -> Harness {
    harness_with(Engine::Sqlite, &[("SLIPWAY_ALLOWED_ORIGINS", ALLOWED)]).await
}

/// A preflight: `OPTIONS uri` from `origin` for `method` with `headers`, no token.
async fn preflight(h: &Harness, uri: &str, origin: &str, method: &Method, headers: &str) -> (StatusCode, HeaderMap) {
    let mut request = Request::builder()
        .method(Method::OPTIONS)
        .uri(uri)
        .header(header::ORIGIN, origin)
        .header(header::ACCESS_CONTROL_REQUEST_METHOD, method.as_str());
    if !headers.is_empty() {
        request = request.header(header::ACCESS_CONTROL_REQUEST_HEADERS, headers);
    }
    let answer = h.router.clone().oneshot(request.body(Body::empty()).unwrap()).await.unwrap();
    (answer.status(), answer.headers().clone())
}

fn value(headers: &HeaderMap, name: header::HeaderName) -> &str {
    headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// The comma-separated items of every `name` header, in lower case.
fn items(headers: &HeaderMap, name: header::HeaderName) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

fn assert_varies_on_origin(headers: &HeaderMap, what: &str) {
    assert!(
        items(headers, header::VARY).contains(&"origin".to_owned()),
        "{what}: Vary {:?}",
        headers.get_all(header::VARY)
    );
}

#[tokio::test]
async fn a_preflight_from_an_allowed_origin_for_a_submit_with_authorization_and_content_type_is_allowed() {
    let h = cors_harness().await;
    let (status, headers) = preflight(&h, "/deployments/demo", PANEL, &Method::PUT, "authorization,content-type").await;
    assert!(status.is_success(), "{status}");
    assert_eq!(value(&headers, header::ACCESS_CONTROL_ALLOW_ORIGIN), PANEL);
    let methods = items(&headers, header::ACCESS_CONTROL_ALLOW_METHODS);
    for m in ["get", "put", "post", "delete"] {
        assert!(methods.contains(&m.to_owned()), "{m} not in {methods:?}");
    }
    let allowed = items(&headers, header::ACCESS_CONTROL_ALLOW_HEADERS);
    for name in ["authorization", "content-type"] {
        assert!(allowed.contains(&name.to_owned()), "{name} not in {allowed:?}");
    }
    assert_eq!(
        value(&headers, header::ACCESS_CONTROL_MAX_AGE),
        slipway_api::middleware::CORS_MAX_AGE.as_secs().to_string()
    );
    assert!(headers.get(header::ACCESS_CONTROL_ALLOW_CREDENTIALS).is_none(), "tokens are bearer headers, not cookies");
    assert_varies_on_origin(&headers, "preflight");
}

#[tokio::test]
async fn a_preflight_for_the_deployment_channel_allows_last_event_id() {
    let h = cors_harness().await;
    let (status, headers) = preflight(&h, "/deployments/demo/events", PANEL, &Method::GET, "last-event-id").await;
    assert!(status.is_success(), "{status}");
    assert_eq!(value(&headers, header::ACCESS_CONTROL_ALLOW_ORIGIN), PANEL);
    assert!(items(&headers, header::ACCESS_CONTROL_ALLOW_HEADERS).contains(&"last-event-id".to_owned()));
    let (_, headers) =
        preflight(&h, "/builds/demo.20260101T000000Z.abcdef/log", PANEL, &Method::GET, "last-event-id").await;
    assert_eq!(value(&headers, header::ACCESS_CONTROL_ALLOW_ORIGIN), PANEL);
}

/// IK-1: a browser may send `If-Match`, `If-None-Match` and
/// `Idempotency-Key` with a write, and read a deployment's `ETag`.
#[tokio::test]
async fn a_preflight_for_a_write_allows_the_precondition_and_idempotency_headers_and_etag_is_readable() {
    let h = cors_harness().await;
    let asked = "if-match,if-none-match,idempotency-key,content-type,authorization";
    let (status, headers) = preflight(&h, "/deployments/demo", PANEL, &Method::PUT, asked).await;
    assert!(status.is_success(), "{status}");
    let allowed = items(&headers, header::ACCESS_CONTROL_ALLOW_HEADERS);
    for name in ["if-match", "if-none-match", "idempotency-key"] {
        assert!(allowed.contains(&name.to_owned()), "{name}: {allowed:?}");
    }
    let answer = h
        .router
        .clone()
        .oneshot(
            Request::builder()
                .uri("/deployments/demo")
                .header(header::ORIGIN, PANEL)
                .header(header::AUTHORIZATION, format!("Bearer {}", all()))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let exposed = items(answer.headers(), header::ACCESS_CONTROL_EXPOSE_HEADERS);
    assert!(exposed.contains(&"etag".to_owned()), "{exposed:?}");
}

/// Every route of the router (`route_table`) answers a preflight for its
/// method, without a token; but the dashboard's (`/ui`), same-origin pages,
/// answer no CORS at all.
#[tokio::test]
async fn every_route_but_the_dashboards_answers_a_preflight_for_its_method_without_a_token() {
    let h = cors_harness().await;
    for route in route_table::routes() {
        let uri = route.uri("demo", "demo.20260101T000000Z.abcdef");
        let (status, headers) = preflight(&h, &uri, PANEL, &route.method, "authorization,content-type").await;
        assert!(status.is_success(), "{}: {status}", route.name());
        if uri == "/ui" || uri.starts_with("/ui/") {
            assert!(headers.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none(), "{}: {headers:?}", route.name());
            assert!(headers.get(header::ACCESS_CONTROL_ALLOW_METHODS).is_none(), "{}: {headers:?}", route.name());
            continue;
        }
        assert_eq!(value(&headers, header::ACCESS_CONTROL_ALLOW_ORIGIN), PANEL, "{}", route.name());
        let methods = items(&headers, header::ACCESS_CONTROL_ALLOW_METHODS);
        assert!(methods.contains(&route.method.as_str().to_ascii_lowercase()), "{}: {methods:?}", route.name());
    }
}

#[tokio::test]
async fn a_preflight_from_an_origin_outside_the_allowlist_gets_no_allow_origin() {
    let h = cors_harness().await;
    for origin in [
        "https://evil.example",
        "http://panel.example",
        "https://panel.example:8443",
        "https://panel.example.evil.example",
        "https://sub.panel.example",
        "http://localhost:3001",
        "null",
        "https://panel.example/path",
    ] {
        let (_, headers) = preflight(&h, "/deployments/demo", origin, &Method::PUT, "authorization").await;
        assert!(headers.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none(), "{origin}: {headers:?}");
        assert_varies_on_origin(&headers, origin);
    }
    // With no allowlist at all (the default), no browser may call.
    let closed = harness(Engine::Sqlite).await;
    let (_, headers) = preflight(&closed, "/deployments/demo", PANEL, &Method::GET, "").await;
    assert!(headers.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none(), "{headers:?}");
}

/// The allowlist's `https://Panel.Example:443` and `http://localhost:3000/`
/// are kept as browsers send origins; an `Origin` written with upper case
/// or the default port is read the same way.
#[tokio::test]
async fn an_allowed_origin_written_with_upper_case_or_its_default_port_is_allowed() {
    let h = cors_harness().await;
    for origin in
        [PANEL, "http://localhost:3000", "HTTPS://PANEL.EXAMPLE", "https://Panel.Example:443", "http://LOCALHOST:3000"]
    {
        let (status, headers) = preflight(&h, "/deployments/demo", origin, &Method::DELETE, "authorization").await;
        assert!(status.is_success(), "{origin}: {status}");
        assert_eq!(value(&headers, header::ACCESS_CONTROL_ALLOW_ORIGIN), origin, "{origin}");
    }
}

/// An actual request: a browser can read the answer, and a `401` (no
/// token) is still the JSON error shape.
#[tokio::test]
async fn an_actual_get_from_an_allowed_origin_can_read_its_401_in_the_json_shape() {
    let h = cors_harness().await;
    for (origin, allowed) in [(PANEL, true), ("https://evil.example", false)] {
        let request = Request::builder()
            .method(Method::GET)
            .uri("/deployments/demo")
            .header(header::ORIGIN, origin)
            .body(Body::empty());
        let answer = h.router.clone().oneshot(request.unwrap()).await.unwrap();
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "{origin}");
        let headers = answer.headers().clone();
        match allowed {
            true => assert_eq!(value(&headers, header::ACCESS_CONTROL_ALLOW_ORIGIN), origin),
            false => assert!(headers.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none(), "{origin}: {headers:?}"),
        }
        assert_varies_on_origin(&headers, origin);
        assert!(value(&headers, header::CONTENT_TYPE).starts_with("application/json"), "{origin}: {headers:?}");
        let bytes = answer.into_body().collect().await.unwrap().to_bytes();
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        assert_error_shape(&body, "unauthorized");
    }
    // And a success carries it too.
    let request = Request::builder().uri("/healthz").header(header::ORIGIN, PANEL).body(Body::empty()).unwrap();
    let answer = h.router.clone().oneshot(request).await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(value(answer.headers(), header::ACCESS_CONTROL_ALLOW_ORIGIN), PANEL);
}
