//! The application state and the router (`fn app(state) -> Router`).

use crate::auth::{Claims, Verifier};
use crate::database_health::DatabaseHealth;
use crate::error::{ApiError, ErrorShape};
use crate::routes;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, FromRef, FromRequestParts};
use axum::extract::{Request, State};
use axum::handler::Handler;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use serde_json::json;
use slipway_jobs::config::Config;
use slipway_jobs::source::fleet::FleetSources;
use slipway_jobs::source::policy::SourcePolicy;
use slipway_jobs::store::Db;
use slipway_jobs::validate::Checker;
use std::sync::Arc;
use std::time::Duration;
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::trace::TraceLayer;

/// Largest request body accepted, in bytes.
pub const BODY_LIMIT: usize = 1024 * 1024;

/// Largest header section accepted, in bytes: 64 KiB, counted as each
/// field's name and value plus 4 bytes (`: ` and the line end), as on the
/// wire. A larger one answers `431 request_header_fields_too_large` in the
/// JSON error shape (hyper itself buffers up to [`crate::serve::HEAD_BUFFER_BYTES`]).
pub const HEADER_LIMIT_BYTES: usize = 64 * 1024;

/// Most header fields accepted in one request; more answer
/// `431 request_header_fields_too_large` like [`HEADER_LIMIT_BYTES`].
pub const HEADER_FIELDS_LIMIT: usize = 100;

/// The tracing target of the access log (one INFO line per request), so an
/// operator can quieten it alone: `SLIPWAY_LOG=info,slipway_api::access=warn`.
pub const ACCESS_LOG_TARGET: &str = "slipway_api::access";

/// Everything a handler needs, shared by reference.
#[derive(Debug)]
pub struct App {
    /// The configuration (§12).
    pub config: Config,
    /// The database.
    pub db: Db,
    /// Token verification (SEC-1) with the keys live now (SEC-4: those of
    /// a keys file are reloaded by [`crate::rotation::watch`]).
    pub verifier: Verifier,
    /// The module sources a submit is checked against: the built-in one,
    /// its outputs baked in and its schema compiled (MS-5), and any allowed
    /// source's outputs built on the `nix` queue and cached (MS-6), under
    /// the policy of MS-1, MS-6, MS-8.
    pub sources: FleetSources,
    /// Whether the database is away: outages are logged once each.
    pub database_health: DatabaseHealth,
    /// Queues last seen with waiting jobs and no live worker, so
    /// each such stretch is logged once.
    pub unserved: std::sync::Mutex<std::collections::HashMap<String, bool>>,
    /// Wakes the deployment channels this process streams (DL-3).
    pub hub: slipway_jobs::channel::Hub,
    /// Where a submit's operator secrets go (§8), with the api's token;
    /// `None` without `OPENBAO_ADDR` (a secret value is then refused).
    pub secrets: Option<slipway_jobs::openbao::OpenBao>,
    /// The api's OpenBao token, looked after (renewed) in the background
    /// ([`slipway_jobs::openbao_token`]); `None` without `OPENBAO_ADDR`, or
    /// when the app was built outside a tokio runtime.
    pub openbao_token: Option<slipway_jobs::openbao_token::TokenWatch>,
    /// This process's metrics (docs/METRICS.md), served by `GET /metrics`.
    pub metrics: slipway_jobs::metrics::Metrics,
    /// The event streams open now, under `SLIPWAY_STREAMS_PER_SUBJECT` and
    /// `SLIPWAY_STREAMS_PER_API`.
    pub streams: crate::stream_caps::StreamCaps,
    /// The keeper of the SQLite write-ahead log (`None` on PostgreSQL); its
    /// rounds run in `main`, its warning shows in `/readyz`.
    pub wal: Option<slipway_jobs::sqlite_wal::WalKeeper>,
    /// The storage faults answered lately (`503 storage_unavailable`),
    /// for the log, the metrics and `/readyz`.
    pub storage: crate::storage_health::StorageHealth,
    /// This process's watch over its clock ([`slipway_jobs::clock`]): its
    /// readings run in `main`, its warning shows in `/readyz`.
    pub clock: slipway_jobs::clock::ClockWatch,
}

/// The state handlers take: `State(state): State<AppState>`.
#[derive(Debug, Clone)]
pub struct AppState(pub Arc<App>);

impl std::ops::Deref for AppState {
    type Target = App;
    fn deref(&self) -> &App {
        &self.0
    }
}

impl AppState {
    /// Wires an app from its configuration and an opened database.
    pub fn new(config: Config, db: Db) -> anyhow::Result<AppState> {
        let verifier = Verifier::from_config(&config)?;
        let policy = SourcePolicy {
            trusted: config.trusted_sources.clone(),
            allow_path: config.allow_path_sources,
            self_source: config.self_source.clone(),
        };
        slipway_jobs::nix::check_provider(&config.provider).map_err(|e| anyhow::anyhow!("SLIPWAY_PROVIDER: {e}"))?;
        let sources = FleetSources::new(
            policy,
            Checker::new(crate::default_source::outputs())?,
            db.clone(),
            &config.provider,
            config.nix_slots,
            config.nix_timeout,
            &config.state_dir,
            config.heartbeat,
        );
        let database_health = DatabaseHealth::new(db.clone());
        let hub = slipway_jobs::channel::Hub::new(db.clone());
        let secrets = config
            .openbao
            .as_ref()
            .map(slipway_jobs::openbao::OpenBao::new)
            .transpose()
            .map_err(|e| anyhow::anyhow!("OPENBAO_TOKEN: {e}"))?;
        // The longest a request may take (the top of the latency buckets):
        // a submit or `get_for` may wait on a Nix build.
        let ceiling = config.request_timeout.max(config.nix_timeout);
        let metrics = slipway_jobs::metrics::Metrics::with_http_ceiling(ceiling);
        metrics.register_refusals();
        metrics.register_key_reloads();
        // The api's longest job with the token is a submit, bounded by its
        // names eval (NIX_TIMEOUT).
        let openbao_token = secrets
            .clone()
            .filter(|_| tokio::runtime::Handle::try_current().is_ok())
            .map(|bao| slipway_jobs::openbao_token::TokenWatch::start(bao, config.nix_timeout, Some(metrics.clone())));
        let streams =
            crate::stream_caps::StreamCaps::new(config.streams_per_subject, config.streams_per_api, metrics.clone());
        let wal = config
            .sqlite_path()
            .map(|path| slipway_jobs::sqlite_wal::WalKeeper::new(&path, config.sqlite_wal_limit, metrics.clone()));
        let storage = crate::storage_health::StorageHealth::new(metrics.clone());
        let clock = slipway_jobs::clock::ClockWatch::new(config.clock_skew_limit, metrics.clone());
        Ok(AppState(Arc::new(App {
            config,
            db,
            verifier,
            sources,
            database_health,
            unserved: Default::default(),
            hub,
            secrets,
            openbao_token,
            metrics,
            streams,
            wal,
            storage,
            clock,
        })))
    }
}

/// A verified bearer token (SEC-1). Extracting it answers `401` on any problem.
#[derive(Debug, Clone)]
pub struct Auth(pub Claims);

impl<S> FromRequestParts<S> for Auth
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        AppState::from_ref(state).verifier.verify_headers(&parts.headers).map(Auth)
    }
}

impl Auth {
    /// `403` unless the token may touch deployment `id`.
    pub fn require(&self, id: &str) -> Result<(), ApiError> {
        if self.0.allows(id) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!("this token may not touch deployment {id}")))
        }
    }

    /// `403` unless the token carries the operator claim (the fleet routes:
    /// `GET /queues`, `GET /workers`).
    pub fn require_operator(&self) -> Result<(), ApiError> {
        if self.0.operator {
            Ok(())
        } else {
            Err(ApiError::forbidden(
                "this route is for operators: it needs a token with the operator claim (slipway-api token --operator)",
            ))
        }
    }
}

/// past `QUEUE_SIZE` queued builds a submit is refused with
/// `503 queue_full` before its body is read ([`slipway_jobs::submit::admit`]:
/// a snapshot; the exact bound is kept by the submit's own transaction,
/// which answers the same error).
async fn admission(State(app): State<AppState>, request: Request, next: Next) -> Response {
    // Authentication first: the queue depth is not for anonymous callers.
    if let Err(e) = app.verifier.verify_headers(request.headers()) {
        return e.into_response();
    }
    match slipway_jobs::submit::admit(&app.db, app.config.queue_size).await {
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
async fn header_limit(request: Request, next: Next) -> Response {
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
async fn content_length_limit(request: Request, next: Next) -> Response {
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
async fn error_shape(request: Request, next: Next) -> Response {
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

/// The access log: one INFO line per request, under [`ACCESS_LOG_TARGET`],
/// in the request's span ([`crate::observe::request_span`]: `http.method`,
/// `http.route`, the route template (`/deployments/{id}`, never the query
/// string; `-` when no route matched), and the `deployment.id` or `build.id`
/// the path names), with the status and the latency to the response head in
/// milliseconds. Headers
/// (tokens) are never logged. A `5xx` is an answer like any other here: an
/// unexpected failure is logged where it is handled ([`ApiError::internal`]),
/// a database outage once by [`crate::database_health`].
fn access_log<S>(router: Router<S>) -> Router<S>
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

/// CORS (PRODUCT.md §12) for the browsers of `SLIPWAY_ALLOWED_ORIGINS`, the
/// allowlist callbacks use too ([`slipway_jobs::callback::Origins`]): an
/// `Origin` is compared as a browser serialises it, so an entry configured
/// as `https://Panel.example:443` allows `https://panel.example`. Methods
/// `GET`, `PUT`, `POST`, `DELETE`; request headers `Authorization`,
/// `Content-Type` and `Last-Event-ID` (an `EventSource` resuming a stream,
/// DL-3); a preflight (`OPTIONS`) is answered here, for every route and
/// without a token, and kept [`CORS_MAX_AGE`]. Another origin gets no
/// `Access-Control-Allow-Origin`. Every answer says `Vary: Origin` (and the
/// preflight's request headers), so a cache never hands one origin's
/// answer to another. No credentials: tokens travel as bearer headers.
fn cors(origins: &slipway_jobs::callback::Origins) -> CorsLayer {
    let origins = origins.clone();
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin: &HeaderValue, _| {
            origin.to_str().is_ok_and(|origin| origins.allows(origin))
        }))
        .allow_methods([Method::GET, Method::PUT, Method::POST, Method::DELETE])
        .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE, HeaderName::from_static("last-event-id")])
        .max_age(CORS_MAX_AGE)
        .vary([header::ORIGIN, header::ACCESS_CONTROL_REQUEST_METHOD, header::ACCESS_CONTROL_REQUEST_HEADERS])
}

/// The router with every route of this release, CORS, body and header
/// limits, the database watcher and the access log.
pub fn app(state: AppState) -> Router {
    let submit = routes::deployments::submit.layer(middleware::from_fn_with_state(state.clone(), admission));
    let cors = cors(&state.config.allowed_origins);
    let router = Router::new()
        .route("/healthz", get(routes::public::healthz))
        .route("/readyz", get(routes::public::readyz))
        .route("/version", get(routes::public::version))
        .route("/schema", get(routes::public::schema))
        .route("/renames", get(routes::public::renames))
        .route("/application-paths", post(routes::public::application_paths))
        .route("/sections", post(routes::public::sections))
        .route("/labels", post(routes::public::labels))
        .route("/deployments", get(routes::deployments::list))
        .route(
            "/deployments/",
            get(routes::deployments::empty_id).put(routes::deployments::empty_id).delete(routes::deployments::empty_id),
        )
        .route(
            "/deployments/{id}",
            get(routes::deployments::show).merge(put(submit)).delete(routes::deployments::delete),
        )
        .route("/deployments/{id}/builds", get(routes::deployments::builds))
        .route("/deployments/{id}/events", get(routes::events::deployment))
        .route("/deployments/{id}/events/ticket", post(routes::events::ticket_for_events))
        .route("/deployments/{id}/preview", post(routes::deployments::preview))
        .route("/schema/get_for", post(routes::sources::schema))
        .route("/renames/get_for", post(routes::sources::renames))
        .route("/builds/{id}", get(routes::builds::show))
        .route("/builds/{id}/log", get(routes::events::build_log))
        .route("/builds/{id}/log/ticket", post(routes::events::ticket_for_log))
        .route("/builds/{id}/cancel", post(routes::builds::cancel))
        .route("/sbom-list/{id}", get(routes::sbom::list))
        .route("/sbom/{id}", get(routes::sbom::document))
        .merge(crate::ui::router())
        .route("/queues", get(routes::fleet::queues))
        .route("/workers", get(routes::fleet::workers))
        // The OpenAPI document and its documentation page (public).
        .route("/openapi.json", get(crate::openapi::openapi_json))
        .route("/docs", get(crate::openapi::docs))
        .route("/docs/swagger-ui.css", axum::routing::get_service(crate::openapi::docs_assets()))
        .route("/docs/swagger-ui-bundle.js", axum::routing::get_service(crate::openapi::docs_assets()))
        .route("/metrics", get(crate::observe::scrape))
        .fallback(routes::public::not_found)
        .method_not_allowed_fallback(routes::public::method_not_allowed)
        // Innermost first: each layer wraps those above it.
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        // A body that pauses longer than SLIPWAY_REQUEST_TIMEOUT between two
        // pieces: 408 where a handler reads it (crate::extract).
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(state.config.request_timeout))
        // A body still arriving SLIPWAY_BODY_TIMEOUT after its head: 408
        // where a handler reads it, and the connection closed.
        .layer(middleware::from_fn_with_state(state.config.body_timeout, crate::body_deadline::limit))
        .layer(middleware::from_fn(content_length_limit))
        .layer(middleware::from_fn(header_limit))
        .layer(middleware::from_fn_with_state(state.clone(), crate::database_health::watch))
        .layer(middleware::from_fn_with_state(state.clone(), crate::storage_health::watch))
        // Every error answer of the layers above in the §3 shape.
        .layer(middleware::from_fn(error_shape))
        // Outside the header limit, so a browser can read its 431.
        .layer(cors)
        // Outside CORS: the dashboard's answers lose its headers and get their own.
        .layer(middleware::from_fn(crate::ui::page_headers))
        // Every answer counted, by route template (docs/METRICS.md).
        .layer(middleware::from_fn_with_state(state.clone(), crate::observe::track));
    access_log(router).with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;
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
