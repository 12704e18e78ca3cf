//! The router: every route of this release and the layers around them
//! (`fn app(state) -> Router`, built once and served, or called with
//! `oneshot` in tests).

use crate::idempotency::idempotent;
use crate::limits::BODY_LIMIT;
use crate::routes;
use crate::state::AppState;
use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::middleware;
use axum::routing::{delete, get, post, put};
use axum::Router;

/// The router with every route of this release, CORS, body and header
/// limits, the database watcher and the access log.
pub fn app(state: AppState) -> Router {
    // IK-1 inside Q-3's admission: a full queue is refused before the body is read.
    let submit = routes::deployments::submit
        .layer(middleware::from_fn_with_state(state.clone(), crate::idempotency::guard))
        .layer(middleware::from_fn_with_state(state.clone(), crate::middleware::admission));
    let cors = crate::middleware::cors(&state.config.allowed_origins);
    let router = Router::new()
        .route("/healthz", get(routes::health::healthz))
        .route("/readyz", get(routes::health::readyz))
        .route("/version", get(routes::health::version))
        .route("/schema", get(routes::sources::built_in_schema))
        .route("/renames", get(routes::sources::built_in_renames))
        .route("/application-paths", post(routes::drafts::application_paths))
        .route("/sections", post(routes::drafts::sections))
        .route("/labels", post(routes::drafts::labels))
        .route("/deployments", get(routes::deployments::list))
        .route(
            "/deployments/",
            get(routes::deployments::empty_id).put(routes::deployments::empty_id).delete(routes::deployments::empty_id),
        )
        .route(
            "/deployments/{id}",
            get(routes::deployments::show)
                .merge(put(submit))
                .merge(idempotent(&state, delete(routes::deployments::delete))),
        )
        .route("/deployments/{id}/builds", get(routes::deployments::builds))
        .route("/deployments/{id}/events", get(routes::events::deployment))
        .route("/deployments/{id}/events/ticket", post(routes::events::ticket_for_events))
        .route("/deployments/{id}/preview", post(routes::deployments::preview))
        .route("/deployments/{id}/apply", idempotent(&state, post(routes::changes::apply)))
        .route("/deployments/{id}/rollback", idempotent(&state, post(routes::changes::rollback)))
        .route("/schema/get_for", post(routes::sources::schema))
        .route("/renames/get_for", post(routes::sources::renames))
        .route("/builds/{id}", get(routes::builds::show))
        .route("/builds/{id}/log", get(routes::events::build_log))
        .route("/builds/{id}/log/ticket", post(routes::events::ticket_for_log))
        .route("/builds/{id}/cancel", idempotent(&state, post(routes::builds::cancel)))
        .route("/builds/{id}/diff", get(routes::builds::diff))
        .route("/sbom-list/{id}", get(routes::sbom::list))
        .route("/sbom/{id}", get(routes::sbom::document))
        .merge(crate::ui::router())
        .route("/queues", get(routes::fleet::queues))
        .route("/workers", get(routes::fleet::workers))
        .route("/webhooks", get(routes::webhooks::list).post(routes::webhooks::create))
        .route(
            "/webhooks/{id}",
            get(routes::webhooks::show).patch(routes::webhooks::update).delete(routes::webhooks::delete),
        )
        .route("/webhooks/{id}/deliveries", get(routes::webhooks::deliveries))
        .route(
            "/webhooks/{id}/deliveries/{delivery_id}/redeliver",
            idempotent(&state, post(routes::webhooks::redeliver)),
        )
        .route("/rollouts", get(routes::rollouts::list).merge(idempotent(&state, post(routes::rollouts::start))))
        .route("/rollouts/{id}", get(routes::rollouts::show))
        .route("/rollouts/{id}/pause", idempotent(&state, post(routes::rollouts::pause)))
        .route("/rollouts/{id}/resume", idempotent(&state, post(routes::rollouts::resume)))
        .route("/rollouts/{id}/cancel", idempotent(&state, post(routes::rollouts::cancel)))
        .route("/rollouts/{id}/events", get(routes::rollouts::events))
        // The OpenAPI document and its documentation page (public).
        .route("/openapi.json", get(crate::openapi::openapi_json))
        .route("/docs", get(crate::openapi::docs))
        .route("/docs/swagger-ui.css", axum::routing::get_service(crate::openapi::docs_assets()))
        .route("/docs/swagger-ui-bundle.js", axum::routing::get_service(crate::openapi::docs_assets()))
        .route("/metrics", get(crate::observe::scrape))
        .fallback(routes::health::not_found)
        .method_not_allowed_fallback(routes::health::method_not_allowed)
        // Innermost first: each layer wraps those above it.
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        // A body that pauses longer than SLIPWAY_REQUEST_TIMEOUT between two
        // pieces: 408 where a handler reads it (crate::extract).
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(state.config.api.request_timeout))
        // A body still arriving SLIPWAY_BODY_TIMEOUT after its head: 408
        // where a handler reads it, and the connection closed.
        .layer(middleware::from_fn_with_state(state.config.api.body_timeout, crate::body_deadline::limit))
        .layer(middleware::from_fn(crate::middleware::content_length_limit))
        .layer(middleware::from_fn(crate::middleware::header_limit))
        .layer(middleware::from_fn_with_state(state.clone(), crate::database_health::watch))
        .layer(middleware::from_fn_with_state(state.clone(), crate::storage_health::watch))
        // Every error answer of the layers above in the §3 shape.
        .layer(middleware::from_fn(crate::middleware::error_shape))
        // Outside the header limit, so a browser can read its 431.
        .layer(cors)
        // Outside CORS: the dashboard's answers lose its headers and get their own.
        .layer(middleware::from_fn(crate::ui::page_headers))
        // Every answer counted, by route template (docs/METRICS.md).
        .layer(middleware::from_fn_with_state(state.clone(), crate::observe::track));
    crate::middleware::access_log(router).with_state(state)
}
