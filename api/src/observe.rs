//! What an operator observes of the api (docs/METRICS.md): `GET /metrics`
//! ([`scrape`]), the HTTP families recorded for every request ([`track`]),
//! the admission refusals ([`count_refusal`]), the fields of each
//! request's span ([`request_span`]), and the queues no live worker serves
//! ([`queue_states`], [`unserved_warnings`]: `/readyz` and `get_for`, Q-8).
//!
//! Labels come only from fixed sets: the route's template (never the path),
//! a method of [`method_label`]'s list, the status; ids go to the request's
//! log span, never to a metric.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use secrecy::ExposeSecret;
use slipway_jobs::metrics::{Refusal, UNMATCHED_ROUTE};
use slipway_jobs::submit::SubmitError;
use std::time::{Duration, Instant};

/// The `Content-Type` of the Prometheus text format.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How often the api folds its histograms' samples in between scrapes.
pub const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The `method` label: the methods of HTTP's registry the api may see, and
/// `other` for any extension method, so a client cannot make new series.
pub fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    }
}

/// Middleware recording [`slipway_jobs::metrics::HTTP_REQUESTS`] and
/// [`slipway_jobs::metrics::HTTP_DURATION`] for every request: the route's
/// template (`unmatched` when none matched), the method, the status and the
/// time to the answer's head (a stream's body is not waited for).
pub async fn track(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(request.method());
    let route = request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned());
    let response = next.run(request).await;
    let route = route.as_deref().unwrap_or(UNMATCHED_ROUTE);
    app.metrics.http_request(route, method, response.status().as_u16(), started.elapsed());
    response
}

/// Counts a submit refused by a cap ([`slipway_jobs::metrics::ADMISSION_REFUSALS`]):
/// `queue_full` (`QUEUE_SIZE`) and `nix_busy` (`NIX_SLOTS`); other refusals
/// are not a cap's.
pub fn count_refusal(app: &AppState, e: &SubmitError) {
    match e {
        SubmitError::QueueFull { .. } => app.metrics.admission_refused(Refusal::QueueFull),
        SubmitError::NixBusy => app.metrics.admission_refused(Refusal::NixBusy),
        _ => {}
    }
}

/// `GET /metrics`: this api's families, then the fleet's gauges read from
/// the database now. When `SLIPWAY_METRICS_TOKEN` is set, only a request
/// with `Authorization: Bearer <that token>` is answered (`401` otherwise).
/// A database that does not answer within the connection budget leaves the
/// fleet's gauges out of that scrape (never stale values): the api's own
/// families are still answered.
pub async fn scrape(State(app): State<AppState>, request: Request) -> Response {
    if let Some(token) = &app.config.metrics.token {
        let sent = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if !slipway_jobs::metrics::bearer_matches(sent, token.expose_secret()) {
            return ApiError::unauthorized("send the metrics token: Authorization: Bearer <SLIPWAY_METRICS_TOKEN>")
                .into_response();
        }
    }
    app.streams.record();
    let mut text = app.metrics.render();
    let window = app.config.heartbeat * slipway_jobs::store::queue::MISSED_HEARTBEATS;
    let fleet = async {
        let mut conn = app.db.acquire().await?;
        let now = slipway_jobs::store::now_ms();
        slipway_jobs::store::fleet::fleet(&mut conn, window.as_secs() as i64, app.config.sources.nix_slots, now).await
    };
    match fleet.await {
        Ok(fleet) => text.push_str(&slipway_jobs::metrics::fleet_text(&fleet)),
        Err(e) => {
            tracing::debug!(error = %e, "the fleet's gauges were left out of a scrape: the database did not answer")
        }
    }
    ([(header::CONTENT_TYPE, HeaderValue::from_static(PROMETHEUS_TEXT))], text).into_response()
}

/// The span of one request (target [`crate::middleware::ACCESS_LOG_TARGET`]):
/// `http.method`, `http.route` (the template, `-` when no route matched),
/// and `deployment.id` or `build.id` when the route names one and the path
/// holds a well-formed one (a malformed id is left out: it is the client's
/// text, not an id).
pub fn request_span(request: &Request) -> tracing::Span {
    let template = request.extensions().get::<MatchedPath>().map(MatchedPath::as_str);
    let span = tracing::info_span!(
        target: crate::middleware::ACCESS_LOG_TARGET,
        "request",
        http.method = %request.method(),
        http.route = %template.unwrap_or("-"),
        deployment.id = tracing::field::Empty,
        build.id = tracing::field::Empty,
    );
    if let Some((field, id)) = template.and_then(|t| path_id(t, request.uri().path())) {
        span.record(field, tracing::field::display(id));
    }
    span
}

/// The id a route's `{id}` takes in `path`, and the span field it goes to:
/// `build.id` under `/builds/`, `deployment.id` under `/deployments/`,
/// `/sbom-list/` and `/sbom/`; `None` for another route or an id that is
/// not well formed.
fn path_id<'p>(template: &str, path: &'p str) -> Option<(&'static str, &'p str)> {
    let at = template.split('/').position(|s| s == "{id}")?;
    let id = path.split('/').nth(at)?;
    match template.split('/').nth(1)? {
        "builds" => is_build_id(id).then_some(("build.id", id)),
        "deployments" | "sbom-list" | "sbom" => {
            slipway_jobs::id::DeploymentId::parse(id).is_ok().then_some(("deployment.id", id))
        }
        _ => None,
    }
}

/// Whether `id` has the shape of a build id (ST-4):
/// `<deployment id>.<YYYYMMDDThhmmssZ>.<6 of [a-z0-9]>`.
fn is_build_id(id: &str) -> bool {
    let mut parts = id.rsplitn(3, '.');
    let (Some(suffix), Some(at), Some(deployment)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    suffix.len() == 6
        && suffix.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && at.len() == 16
        && at.bytes().all(|b| b.is_ascii_digit() || b == b'T' || b == b'Z')
        && slipway_jobs::id::DeploymentId::parse(deployment).is_ok()
}

/// The queues whose jobs live in the database
/// ([`slipway_jobs::store::queue::DATABASE_QUEUES`]): jobs waiting and live
/// workers serving each.
pub async fn queue_states(
    app: &AppState,
    conn: &mut slipway_jobs::store::Conn,
) -> Result<Vec<slipway_jobs::store::fleet::QueueState>, slipway_jobs::store::StoreError> {
    slipway_jobs::store::fleet::queue_states(conn, &slipway_jobs::store::queue::DATABASE_QUEUES, live_window_s(app))
        .await
}

/// How recently a worker must have beaten to count as live, in seconds:
/// the takeover window (`SLIPWAY_HEARTBEAT` × the missed beats), plus one.
pub fn live_window_s(app: &AppState) -> i64 {
    (app.config.heartbeat * slipway_jobs::store::queue::MISSED_HEARTBEATS).as_secs() as i64 + 1
}

/// One sentence per queue whose jobs wait with no live worker serving it
/// logged as a warning when the queue first turns so.
pub fn unserved_warnings(app: &AppState, queues: &[slipway_jobs::store::fleet::QueueState]) -> Vec<String> {
    let mut warnings = Vec::new();
    for q in queues {
        let unserved = q.waiting > 0 && q.workers == 0;
        let was = app.unserved.lock().expect("unserved queues lock").insert(q.queue.clone(), unserved);
        if unserved {
            let jobs = if q.waiting == 1 { "1 job waits".to_owned() } else { format!("{} jobs wait", q.waiting) };
            let warning = format!(
                "{jobs} on the {} queue, which no live worker serves: start a worker that serves it \
                 (slipway-worker work serves every queue unless --queues or SLIPWAY_QUEUES says otherwise)",
                q.queue
            );
            if was != Some(true) {
                tracing::warn!(queue = %q.queue, waiting = q.waiting, "jobs wait on a queue that no live worker serves");
            }
            warnings.push(warning);
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_names_its_deployment_or_build_only_when_the_id_is_well_formed() {
        let build = "demo.20260101T000000Z.abc123";
        assert_eq!(path_id("/deployments/{id}", "/deployments/demo"), Some(("deployment.id", "demo")));
        assert_eq!(path_id("/deployments/{id}/events", "/deployments/demo/events"), Some(("deployment.id", "demo")));
        assert_eq!(path_id("/sbom/{id}", "/sbom/demo"), Some(("deployment.id", "demo")));
        assert_eq!(path_id("/builds/{id}/log", &format!("/builds/{build}/log")), Some(("build.id", build)));
        assert_eq!(path_id("/builds/{id}", "/builds/not-a-build"), None);
        assert_eq!(path_id("/deployments/{id}", "/deployments/Not%20An%20Id"), None);
        assert_eq!(path_id("/healthz", "/healthz"), None);
    }

    #[test]
    fn an_extension_method_is_one_label() {
        assert_eq!(method_label(&Method::from_bytes(b"BREW").unwrap()), "other");
        assert_eq!(method_label(&Method::PUT), "PUT");
    }
}
