//! The dashboard at `/ui`: server-rendered HTML (maud), no JavaScript
//! build step, nothing loaded from elsewhere.
//!
//! `GET /ui` is a static shell (public: it holds no data) with its script
//! and style sheet, both compiled into the binary. The tab keeps the token
//! the user pastes in `sessionStorage` and fetches the HTML fragments below
//! with it as the bearer header; they are authorised exactly like the JSON
//! routes (the same [`Auth`] extractor, the same scope checks), so a
//! refusal is the usual JSON error (`401`, `403`, `404`). Live updates come
//! from the api's own streams: `GET /deployments/{id}/events` re-renders a
//! deployment's fragment on each state change, `GET /builds/{id}/log`
//! streams a running build's log. A stream is opened with a single-use
//! ticket minted for it (`POST …/ticket` with the bearer header, then
//! `?ticket=`): the token never goes into a URL. Every `/ui` answer
//! (404 and 405 included) carries the page headers of [`page_headers`] and
//! no CORS header.
//!
//! | route | access |
//! | --- | --- |
//! | `GET /ui`, `/ui/dashboard.js`, `/ui/dashboard.css` | public |
//! | `GET /ui/fragments/deployments` | any token: the deployments it names, or the 100 most recent for `*` |
//! | `GET /ui/fragments/deployments/{id}` | a token for `{id}` (`403` otherwise) |
//! | `GET /ui/fragments/builds/{id}` | a token for the build's deployment (`404` otherwise, as `GET /builds/{id}`) |
//! | `GET /ui/fragments/fleet` | a token that may see the fleet ([`may_see_fleet`]; `403` otherwise) |
//! | `GET /ui/fragments/webhooks` | the same: the webhook endpoints and their latest deliveries |
//! | `GET /ui/fragments/rollouts`, `/ui/fragments/rollouts/{id}` | an operator's token, as `GET /rollouts` |

mod rollouts;
mod views;
mod webhooks;

use crate::auth::Auth;
use crate::auth::Claims;
use crate::error::ApiError;
use crate::extract::{BuildIdPath, DeploymentIdPath};
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use maud::Markup;
use slipway_jobs::store::{builds, deployments, fleet, queue};

/// The most deployments the list shows.
pub const LIST_LIMIT: usize = 100;

/// The most builds a deployment's view lists (newest first).
pub const BUILDS_SHOWN: i64 = 20;

/// The content security policy of every `/ui` answer: the page runs its own
/// script and style sheet only, talks to this origin only, and cannot be
/// framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The dashboard's routes, merged into the api's router by [`crate::router::app`].
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui", get(shell))
        .route("/ui/dashboard.js", get(script))
        .route("/ui/dashboard.css", get(style))
        .route("/ui/fragments/deployments", get(deployments))
        .route("/ui/fragments/deployments/{id}", get(deployment))
        .route("/ui/fragments/builds/{id}", get(build))
        .route("/ui/fragments/fleet", get(fleet_view))
        .route("/ui/fragments/webhooks", get(webhooks::fragment))
        .route("/ui/fragments/rollouts", get(rollouts::rollouts_view))
        .route("/ui/fragments/rollouts/{id}", get(rollouts::rollout_view))
}

/// Whether `claims` may see the queues and workers: an operator's token
/// (`"operator": true`), as for `GET /queues` and `GET /workers`; a
/// front-end's token never sees the fleet, whatever deployments it names.
pub fn may_see_fleet(claims: &Claims) -> bool {
    claims.operator
}

/// Whether `path` is the dashboard's: `/ui` or below it (not `/uix`).
pub fn is_dashboard(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// The CORS headers a `/ui` answer never carries.
const CORS_HEADERS: [header::HeaderName; 6] = [
    header::ACCESS_CONTROL_ALLOW_ORIGIN,
    header::ACCESS_CONTROL_ALLOW_METHODS,
    header::ACCESS_CONTROL_ALLOW_HEADERS,
    header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
    header::ACCESS_CONTROL_EXPOSE_HEADERS,
    header::ACCESS_CONTROL_MAX_AGE,
];

/// Middleware, outside CORS in [`crate::router::app`], for every answer whose
/// path is the dashboard's ([`is_dashboard`]), whichever route or fallback
/// gave it (a page, a fragment, a `404`, a `405`, a preflight):
/// [`CONTENT_SECURITY_POLICY`] with `X-Frame-Options: DENY` beside its
/// `frame-ancestors 'none'` (for browsers that do not read CSP), no MIME
/// sniffing, no referrer, no caching of fragments (they carry data), and no
/// CORS header: the dashboard is a same-origin page, and no other origin,
/// even an allowed one, may read it.
pub async fn page_headers(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let (dashboard, fragment) = (is_dashboard(path), path.starts_with("/ui/fragments/"));
    if !dashboard {
        return next.run(request).await;
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for name in CORS_HEADERS {
        headers.remove(name);
    }
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    if fragment {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// `GET /ui`: the shell.
async fn shell() -> Markup {
    views::shell()
}

/// `GET /ui/dashboard.js`: the page's script (vanilla, no build step).
async fn script() -> Response {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], include_str!("dashboard.js")).into_response()
}

/// `GET /ui/dashboard.css`: the page's style sheet.
async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], include_str!("dashboard.css")).into_response()
}

/// `GET /ui/fragments/deployments`: the deployments the token names, in
/// the order of its claim (the first [`LIST_LIMIT`]); for a token of every
/// deployment, the [`LIST_LIMIT`] most recently submitted.
async fn deployments(State(app): State<AppState>, Auth(claims): Auth) -> Result<Markup, ApiError> {
    let everything = claims.deployments.iter().any(|d| d == "*");
    let mut conn = app.db.acquire().await?;
    let ids: Vec<String> = if everything {
        deployments::recent_deployment_ids(&mut conn, LIST_LIMIT as i64).await?
    } else {
        let mut ids: Vec<String> = Vec::new();
        for id in &claims.deployments {
            if !ids.contains(id) && slipway_jobs::id::DeploymentId::parse(id).is_ok() {
                ids.push(id.clone());
            }
        }
        ids.truncate(LIST_LIMIT);
        ids
    };
    let reads = slipway_jobs::read::deployments(&mut conn, &ids).await?;
    Ok(views::deployments(&reads, everything, may_see_fleet(&claims)))
}

/// `GET /ui/fragments/deployments/{id}`: one deployment with its
/// instances and its latest [`BUILDS_SHOWN`] builds.
async fn deployment(
    State(app): State<AppState>,
    auth: Auth,
    DeploymentIdPath(id): DeploymentIdPath,
) -> Result<Markup, ApiError> {
    auth.require(id.as_str())?;
    let mut conn = app.db.acquire().await?;
    let read = slipway_jobs::read::deployment(&mut conn, id.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no deployment {id}")))?;
    let rows = builds::list(&mut conn, id.as_str(), None, BUILDS_SHOWN, None).await?;
    Ok(views::deployment(&read, &rows, slipway_jobs::store::now_ms()))
}

/// `GET /ui/fragments/builds/{id}`: one build with what it changed, why it
/// waits while queued, its plan or run report, and its log. A build
/// outside the token's scope is `404`, like an unknown one.
async fn build(State(app): State<AppState>, auth: Auth, BuildIdPath(id): BuildIdPath) -> Result<Markup, ApiError> {
    let missing = || ApiError::not_found(format!("no build {id}"));
    let mut conn = app.db.acquire().await?;
    let b = builds::get(&mut conn, &id).await?.ok_or_else(missing)?;
    if !auth.0.allows(&b.deployment_id) {
        return Err(missing());
    }
    let log =
        if b.status.is_terminal() { builds::log(&mut conn, &id).await?.unwrap_or_default() } else { String::new() };
    let changes = slipway_jobs::history::diff_of(&mut conn, &b).await?;
    let waiting_for = crate::routes::builds::waiting_for(&app, &mut conn, &b).await?;
    let extras = views::BuildExtras {
        changes: &changes,
        waiting_for: waiting_for.as_ref(),
        now_ms: slipway_jobs::store::now_ms(),
    };
    Ok(views::build(&b, &log, &extras))
}

/// `GET /ui/fragments/fleet`: every queue's load and the workers seen in
/// the last hour; `403` for a token that may not see the fleet.
async fn fleet_view(State(app): State<AppState>, Auth(claims): Auth) -> Result<Markup, ApiError> {
    if !may_see_fleet(&claims) {
        return Err(ApiError::forbidden(
            "this token may not see the queues and workers (it needs the operator claim: slipway-api token --operator)",
        ));
    }
    let alive_ms = crate::routes::fleet::alive_window_ms(&app);
    let queues = queue::DATABASE_QUEUES;
    // One snapshot for both reads: read apart, a claim landing between
    // them showed a build's slot in use while its job still waited.
    let mut read = app.db.begin_read().await?;
    let loads = fleet::queue_loads(&mut read, &queues).await?;
    let workers = fleet::workers(&mut read, crate::routes::fleet::WORKERS_WINDOW_S).await?;
    read.commit().await?;
    Ok(views::fleet(&loads, &workers, alive_ms))
}
