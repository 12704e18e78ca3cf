//! The middleware of the router ([`crate::router::app`]), outermost last in
//! its layer list: submit admission, the header and `Content-Length`
//! limits of [`crate::limits`], the safety net that keeps every error
//! answer in the JSON error shape (PRODUCT.md §3), the access log and CORS.

use crate::error::{ApiError, ErrorShape};
use crate::limits::{BODY_LIMIT, HEADER_FIELDS_LIMIT, HEADER_LIMIT_BYTES};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::json;
use std::time::Duration;
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::trace::TraceLayer;

/// The tracing target of the access log (one INFO line per request), so an
/// operator can quieten it alone: `SLIPWAY_LOG=info,slipway_api::access=warn`.
pub const ACCESS_LOG_TARGET: &str = "slipway_api::access";

/// past `QUEUE_SIZE` queued builds a submit is refused with
/// `503 queue_full` before its body is read, and (FS-1) past
/// `TENANT_QUEUE_SIZE` builds of its tenant, when set, with `429
/// tenant_queue_full` ([`slipway_jobs::submit::admit`]:
/// a snapshot; the exact bound is kept by the submit's own transaction,
/// which answers the same error).
pub(crate) async fn admission(State(app): State<AppState>, request: Request, next: Next) -> Response {
    // Authentication first: the queue depth is not for anonymous callers.
    let claims = match app.verifier.verify_headers(request.headers()) {
        Ok(claims) => claims,
        Err(e) => return e.into_response(),
    };
    // FS-1: the tenant's own bound, only when it is set.
    if let Some(limit) = app.config.tenancy.tenant_queue_size {
        let tenant = crate::auth::Auth(claims).tenant();
        if let Err(e) = slipway_jobs::submit::admit_tenant(&app.db, &tenant, limit).await {
            return ApiError::from(e).into_response();
        }
    }
    match slipway_jobs::submit::admit(&app.db, app.config.api.queue_size).await {
        Ok(()) => next.run(request).await,
        Err(e) => {
            crate::observe::count_refusal(&app, &e);
            ApiError::from(e).into_response()
        }
    }
}

/// Refuses a request whose header section is larger than
/// [`HEADER_LIMIT_BYTES`] or has more than [`HEADER_FIELDS_LIMIT`] fields:
/// `431 request_header_fields_too_large` with the limits in `details`. The
/// answer never repeats a header.
pub(crate) async fn header_limit(request: Request, next: Next) -> Response {
    match header_size(request.headers()) {
        (bytes, fields) if bytes > HEADER_LIMIT_BYTES || fields > HEADER_FIELDS_LIMIT => ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "request_header_fields_too_large",
            format!(
                "the request's header fields take {bytes} bytes in {fields} fields; this service accepts at most \
                 {HEADER_LIMIT_BYTES} bytes and {HEADER_FIELDS_LIMIT} fields"
            ),
        )
        .with_details(json!({
            "header_bytes": bytes,
            "header_fields": fields,
            "limit_bytes": HEADER_LIMIT_BYTES,
            "limit_fields": HEADER_FIELDS_LIMIT,
        }))
        .into_response(),
        _ => next.run(request).await,
    }
}

/// Refuses a request whose `Content-Length` announces more than
/// [`BODY_LIMIT`] bytes with `413 payload_too_large`, on every route and
/// before the body is read. A body without `Content-Length` (chunked) is
/// cut at the same limit where a handler reads it (`DefaultBodyLimit`, and
/// the extractors of [`crate::extract`]).
pub(crate) async fn content_length_limit(request: Request, next: Next) -> Response {
    let announced =
        request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    match announced {
        Some(length) if length > BODY_LIMIT as u64 => ApiError::payload_too_large().into_response(),
        _ => next.run(request).await,
    }
}

/// The most bytes of a JSON error answer [`error_shape`] reads to see
/// whether it is in the §3 shape; a larger one is replaced.
const SHAPE_CHECK_BYTES: usize = 64 * 1024;

/// The safety net of PRODUCT.md §3: every error answer (status 400 or more)
/// is `{"error", "message", "details"}` with `Content-Type:
/// application/json`. An answer of [`ApiError`] (marked [`ErrorShape`]), or
/// a JSON body already in the shape, passes; any other (axum's plain-text
/// rejections, an empty `405`, a `413` of a body limit, …) is replaced by
/// [`ApiError::from_status`]: the same status, the code of
/// [`crate::error::status_code`], and the headers of the old answer (`Allow`,
/// `Retry-After`, …) except those that described its body. The old body is
/// never repeated: it may echo the request.
pub(crate) async fn error_shape(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if status.as_u16() < 400 || response.extensions().get::<ErrorShape>().is_some() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    if crate::extract::json_content_type(&parts.headers) {
        if let Ok(bytes) = axum::body::to_bytes(body, SHAPE_CHECK_BYTES).await {
            if in_error_shape(&bytes) {
                return Response::from_parts(parts, Body::from(bytes));
            }
        }
    }
    if status.is_server_error() {
        tracing::warn!(status = status.as_u16(), "an error answer outside the JSON error shape was replaced");
    } else {
        tracing::debug!(status = status.as_u16(), "an error answer outside the JSON error shape was replaced");
    }
    for name in [header::CONTENT_TYPE, header::CONTENT_LENGTH, header::TRANSFER_ENCODING, header::CONTENT_ENCODING] {
        parts.headers.remove(name);
    }
    let mut answer = ApiError::from_status(status).into_response();
    answer.headers_mut().extend(parts.headers);
    answer
}

/// Whether a body is `{"error": string, "message": string, "details": …}`.
fn in_error_shape(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|v| {
        v.get("error").is_some_and(serde_json::Value::is_string)
            && v.get("message").is_some_and(serde_json::Value::is_string)
            && v.get("details").is_some()
    })
}

/// (bytes, fields) of a header section, each field counted as on the wire:
/// name, `: `, value, line end.
fn header_size(headers: &HeaderMap) -> (usize, usize) {
    headers
        .iter()
        .fold((0, 0), |(bytes, fields), (name, value)| (bytes + name.as_str().len() + value.len() + 4, fields + 1))
}

/// The access log: one INFO line per request under [`ACCESS_LOG_TARGET`],
/// in the request's span ([`crate::observe::request_span`]), with the status
/// and the latency to the response head in ms. Headers (tokens) are never
/// logged; a `5xx` is logged where it is handled, not here.
pub(crate) fn access_log<S>(router: Router<S>) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let trace = TraceLayer::new_for_http()
        .make_span_with(crate::observe::request_span)
        .on_request(())
        .on_response(|response: &Response, latency: Duration, _: &tracing::Span| {
            tracing::info!(
                target: ACCESS_LOG_TARGET,
                status = response.status().as_u16(),
                // A number (to the microsecond) in JSON logs, not a string.
                latency_ms = (latency.as_secs_f64() * 1e6).round() / 1e3,
                "answered"
            );
        })
        .on_body_chunk(())
        .on_eos(())
        .on_failure(|failure: ServerErrorsFailureClass, _: Duration, _: &tracing::Span| {
            // A 5xx status was already logged by `on_response`; only a body
            // that failed while streaming is news.
            if let ServerErrorsFailureClass::Error(e) = failure {
                tracing::warn!(target: ACCESS_LOG_TARGET, error = %e, "the response body failed");
            }
        });
    router.layer(trace)
}

/// How long a browser may keep a preflight's answer: one hour (browsers
/// cap it lower: Chromium at two hours, so this is honoured as given).
pub const CORS_MAX_AGE: Duration = Duration::from_secs(3600);

/// CORS (PRODUCT.md §12) for the origins of `SLIPWAY_ALLOWED_ORIGINS`,
/// compared as a browser serialises them ([`slipway_jobs::callback::Origins`]);
/// preflights answered here for every route, without a token. No
/// credentials: tokens travel as bearer headers.
pub(crate) fn cors(origins: &slipway_jobs::callback::Origins) -> CorsLayer {
    let origins = origins.clone();
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin: &HeaderValue, _| {
            origin.to_str().is_ok_and(|origin| origins.allows(origin))
        }))
        .allow_methods([Method::GET, Method::PUT, Method::POST, Method::PATCH, Method::DELETE])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            HeaderName::from_static("last-event-id"),
            header::IF_MATCH,
            header::IF_NONE_MATCH,
            crate::idempotency::IDEMPOTENCY_KEY,
        ])
        // IK-1: a browser reads a deployment's version, and whether an
        // answer was replayed.
        .expose_headers([header::ETAG, header::RETRY_AFTER, crate::idempotency::IDEMPOTENCY_REPLAYED])
        .max_age(CORS_MAX_AGE)
        .vary([header::ORIGIN, header::ACCESS_CONTROL_REQUEST_METHOD, header::ACCESS_CONTROL_REQUEST_HEADERS])
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::middleware;
    use axum::routing::get;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    /// A router whose routes answer as given, behind the safety net.
    fn net() -> Router {
        Router::new()
            .route("/plain", get(|| async { (StatusCode::IM_A_TEAPOT, "short and stout") }))
            .route("/allow", get(|| async { (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "GET,HEAD")], "") }))
            .route("/empty", get(|| async { StatusCode::BAD_GATEWAY }))
            .route(
                "/other-json",
                get(|| async { (StatusCode::CONFLICT, axum::Json(serde_json::json!({ "oops": true }))) }),
            )
            .route(
                "/shaped-json",
                get(|| async {
                    let body = serde_json::json!({ "error": "build_finished", "message": "done", "details": null });
                    (StatusCode::CONFLICT, axum::Json(body))
                }),
            )
            .route("/ours", get(|| async { ApiError::new(StatusCode::CONFLICT, "mine", "as written") }))
            .route("/fine", get(|| async { "plain success" }))
            .layer(middleware::from_fn(error_shape))
    }

    async fn get_from(path: &str) -> (StatusCode, HeaderMap, Vec<u8>) {
        let answer = net().oneshot(Request::builder().uri(path).body(Body::empty()).unwrap()).await.unwrap();
        let (parts, body) = answer.into_parts();
        (parts.status, parts.headers, body.collect().await.unwrap().to_bytes().to_vec())
    }

    fn json(body: &[u8]) -> serde_json::Value {
        serde_json::from_slice(body).unwrap()
    }

    #[tokio::test]
    async fn an_error_answer_outside_the_json_shape_is_put_in_it_with_its_status_and_the_code_of_the_map() {
        for (path, status, code) in [
            ("/plain", StatusCode::IM_A_TEAPOT, "invalid_request"),
            ("/empty", StatusCode::BAD_GATEWAY, "bad_gateway"),
            ("/other-json", StatusCode::CONFLICT, "conflict"),
        ] {
            let (got, headers, body) = get_from(path).await;
            assert_eq!(got, status, "{path}");
            assert_eq!(headers[header::CONTENT_TYPE], "application/json", "{path}");
            let body = json(&body);
            assert_eq!(body["error"], code, "{path}: {body}");
            assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()) && body.get("details").is_some(), "{body}");
            assert!(!body.to_string().contains("stout"), "the old body is repeated: {body}");
        }
    }

    #[tokio::test]
    async fn a_replaced_405_keeps_its_allow_header() {
        let (status, headers, body) = get_from("/allow").await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(headers[header::ALLOW], "GET,HEAD");
        assert_eq!(json(&body)["error"], "method_not_allowed");
    }

    #[tokio::test]
    async fn answers_in_the_json_shape_and_successes_pass_untouched() {
        let (status, _, body) = get_from("/shaped-json").await;
        assert_eq!((status, json(&body)["error"].as_str()), (StatusCode::CONFLICT, Some("build_finished")));
        let (status, _, body) = get_from("/ours").await;
        assert_eq!((status, json(&body)["error"].as_str()), (StatusCode::CONFLICT, Some("mine")));
        let (status, headers, body) = get_from("/fine").await;
        assert_eq!((status, body.as_slice()), (StatusCode::OK, &b"plain success"[..]));
        assert!(headers[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/plain"));
    }

    #[test]
    fn the_status_map_names_the_codes_of_the_specification() {
        use crate::error::status_code;
        for (status, code) in [
            (400, "invalid_request"),
            (401, "unauthorized"),
            (403, "forbidden"),
            (404, "not_found"),
            (405, "method_not_allowed"),
            (413, "payload_too_large"),
            (415, "unsupported_media_type"),
            (431, "request_header_fields_too_large"),
            (500, "internal"),
            (503, "service_unavailable"),
            (504, "timeout"),
            (418, "invalid_request"),
            (599, "internal"),
        ] {
            assert_eq!(status_code(StatusCode::from_u16(status).unwrap()).0, code, "{status}");
        }
    }
}
