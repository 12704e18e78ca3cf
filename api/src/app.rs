//! The application state and the router (`fn app(state) -> Router`).

use crate::auth::{Claims, Verifier};
use crate::database_health::DatabaseHealth;
use crate::error::ApiError;
use crate::routes;
use axum::extract::{DefaultBodyLimit, FromRef, FromRequestParts, MatchedPath};
use axum::extract::{Request, State};
use axum::handler::Handler;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use serde_json::json;
use slipway_jobs::config::Config;
use slipway_jobs::sources::FleetSources;
use slipway_jobs::store::Db;
use slipway_jobs::submit::SourcePolicy;
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
    /// Token verification (SEC-1).
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
        Ok(AppState(Arc::new(App { config, db, verifier, sources, database_health, unserved: Default::default() })))
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
        let app = AppState::from_ref(state);
        let header = parts.headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        app.verifier.verify(header).map(Auth)
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
}

/// past `QUEUE_SIZE` queued builds a submit is refused with
/// `503 queue_full` before its body is read ([`slipway_jobs::submit::admit`]:
/// a snapshot; the exact bound is kept by the submit's own transaction,
/// which answers the same error).
async fn admission(State(app): State<AppState>, request: Request, next: Next) -> Response {
    // Authentication first: the queue depth is not for anonymous callers.
    let header = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if let Err(e) = app.verifier.verify(header) {
        return e.into_response();
    }
    match slipway_jobs::submit::admit(&app.db, app.config.queue_size).await {
        Ok(()) => next.run(request).await,
        Err(e) => ApiError::from(e).into_response(),
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

/// (bytes, fields) of a header section, each field counted as on the wire:
/// name, `: `, value, line end.
fn header_size(headers: &HeaderMap) -> (usize, usize) {
    headers
        .iter()
        .fold((0, 0), |(bytes, fields), (name, value)| (bytes + name.as_str().len() + value.len() + 4, fields + 1))
}

/// The access log: one INFO line per request, under [`ACCESS_LOG_TARGET`],
/// with the method, the route template (`/deployments/{id}`, never the path
/// with its ids, never the query string; `-` when no route matched), the
/// status and the latency to the response head in milliseconds. Headers
/// (tokens) are never logged. A `5xx` is an answer like any other here: an
/// unexpected failure is logged where it is handled ([`ApiError::internal`]),
/// a database outage once by [`crate::database_health`].
fn access_log<S>(router: Router<S>) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let trace = TraceLayer::new_for_http()
        .make_span_with(|request: &Request| {
            let route = request.extensions().get::<MatchedPath>().map_or("-", MatchedPath::as_str);
            tracing::info_span!(target: ACCESS_LOG_TARGET, "request", method = %request.method(), route = %route)
        })
        .on_request(())
        .on_response(|response: &Response, latency: Duration, _: &tracing::Span| {
            tracing::info!(
                target: ACCESS_LOG_TARGET,
                status = response.status().as_u16(),
                latency_ms = %format_args!("{:.3}", latency.as_secs_f64() * 1000.0),
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

/// The router with every route of this release, CORS, body and header
/// limits, the database watcher and the access log.
pub fn app(state: AppState) -> Router {
    let submit = routes::deployments::submit.layer(middleware::from_fn_with_state(state.clone(), admission));
    let origins: Vec<HeaderValue> = state.config.allowed_origins.iter().filter_map(|o| o.parse().ok()).collect();
    let cors = CorsLayer::new()
        .allow_origin(AllowOrigin::list(origins))
        .allow_methods([Method::GET, Method::PUT, Method::POST, Method::DELETE])
        .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE]);
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
        .route("/deployments/{id}/preview", post(routes::deployments::preview))
        .route("/schema/get_for", post(routes::sources::schema))
        .route("/renames/get_for", post(routes::sources::renames))
        .route("/builds/{id}", get(routes::builds::show))
        .route("/builds/{id}/cancel", post(routes::builds::cancel))
        .route("/sbom-list/{id}", get(routes::sbom::list))
        .route("/sbom/{id}", get(routes::sbom::document))
        .fallback(routes::public::not_found)
        .method_not_allowed_fallback(routes::public::method_not_allowed)
        // Innermost first: each layer wraps those above it.
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn(header_limit))
        .layer(middleware::from_fn_with_state(state.clone(), crate::database_health::watch))
        // Outside the header limit, so a browser can read its 431.
        .layer(cors);
    access_log(router).with_state(state)
}
