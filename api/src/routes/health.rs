//! Health and identity (no token): liveness, readiness, the version, and
//! the answers of an unknown route or method.

use crate::error::ApiError;
use crate::extract::Json;
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use slipway_jobs::openbao_token::TokenState;

/// `GET /healthz`: liveness. The process serves HTTP; the database is not
/// asked, so a database outage never gets every api restarted at once.
#[utoipa::path(get, path = "/healthz", tag = "public",
    responses((status = 200, description = "The process serves HTTP", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health { status: "ok".to_owned() })
}

/// The answer of `GET /healthz`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Health {
    /// Always `ok`.
    status: String,
}

/// The answer of `GET /readyz`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Readiness {
    /// Always `ready`.
    status: String,
    /// The database engine: `sqlite` or `postgres`.
    database: String,
    /// Each queue whose jobs live in the database: jobs waiting, live workers.
    queues: Vec<slipway_jobs::store::fleet::QueueState>,
    /// `ok` or `unavailable`; `null` when this api has no OpenBao configured.
    #[schema(required = true)]
    openbao: Option<String>,
    /// The state of the api's OpenBao token (`docs/OPENBAO.md`): `ok`,
    /// `expiring` (a warning says when it ends), `denied` (its policy lacks
    /// `auth/token/lookup-self`), `unavailable` (OpenBao could not be
    /// asked), `unknown` (not looked at yet); `null` without OpenBao. An
    /// `expired` token makes the answer `503`.
    #[schema(required = true)]
    openbao_token: Option<String>,
    /// What an operator should look at (a queue no live worker serves, …).
    warnings: Vec<String>,
}

/// How long `GET /readyz` waits for the database: the readiness budget, the
/// same time any other route waits for a connection before it answers `503`.
pub const READY_TIMEOUT: std::time::Duration = slipway_jobs::store::ACQUIRE_TIMEOUT;

/// `GET /readyz`: readiness. `200 {"status": "ready", "database": engine,
/// "queues": [{"queue", "waiting", "workers"}], "warnings": [...]}` once the
/// database answers a query within [`READY_TIMEOUT`] (2 s); otherwise `503
/// service_unavailable`, so a load balancer sends submits elsewhere. The
/// outage is logged once, not per poll ([`crate::database_health`]). A queue
/// whose jobs wait while no live worker serves it is a warning here
/// and in the log, not unreadiness: the api itself serves.
#[utoipa::path(get, path = "/readyz", tag = "public",
    responses(
        (status = 200, description = "The database answers", body = Readiness),
        (status = 503, description = "`service_unavailable`: the database does not answer, or OpenBao no longer accepts the api's token (`details.openbao_token`: `expired`)", body = crate::error::ErrorBody),
    ))]
pub async fn readyz(State(app): State<AppState>) -> Result<Json<Readiness>, ApiError> {
    let probe = async {
        let mut conn = app.db.acquire().await?;
        slipway_jobs::store::ping(&mut conn).await?;
        crate::observe::queue_states(&app, &mut conn).await
    };
    let engine = app.db.engine().name();
    match tokio::time::timeout(READY_TIMEOUT, probe).await {
        Ok(Ok(queues)) => {
            app.database_health.answered();
            let mut warnings = crate::observe::unserved_warnings(&app, &queues);
            // OpenBao's trouble does not make the api unready (it serves
            // everything else), but a submit that needs it would get 503.
            let openbao = match &app.secrets {
                None => None,
                Some(bao) => match bao.clone().with_timeout(READY_TIMEOUT).check().await {
                    Ok(()) => Some("ok".to_owned()),
                    Err(e) => {
                        warnings.push(format!(
                            "OpenBao, which keeps operator secrets, cannot serve this api ({e}): submits of \
                             deployments with secret fields answer 503 until it can"
                        ));
                        Some("unavailable".to_owned())
                    }
                },
            };
            let token = app.openbao_token.as_ref().map(|w| w.status());
            if let Some(token) = token.as_ref().filter(|t| t.state == TokenState::Expired) {
                return Err(ApiError::unavailable(format!(
                    "not ready: OpenBao no longer accepts this api's token ({}); give the api a new OPENBAO_TOKEN",
                    token.problem.as_deref().unwrap_or("expired")
                ))
                .with_details(serde_json::json!({ "openbao_token": "expired" })));
            }
            if let Some(problem) = token.as_ref().filter(|t| t.state != TokenState::Ok).and_then(|t| t.problem.clone())
            {
                warnings.push(format!("this api's OpenBao token: {problem}"));
            }
            warnings.extend(app.wal.as_ref().and_then(|w| w.warning()));
            warnings.extend(app.storage.warnings());
            warnings.extend(app.clock.warning());
            let openbao_token = token.map(|t| t.state.as_str().to_owned());
            Ok(Json(Readiness {
                status: "ready".to_owned(),
                database: engine.to_owned(),
                queues,
                openbao,
                openbao_token,
                warnings,
            }))
        }
        Ok(Err(e)) => Err(ApiError::database_away(
            format!("not ready: the {engine} database does not answer ({})", e.why_unavailable()),
            e.to_string(),
        )),
        Err(_) => {
            let message = format!("the {engine} database did not answer within {}s", READY_TIMEOUT.as_secs());
            Err(ApiError::database_away(format!("not ready: {message}"), message))
        }
    }
}

/// The commit this api was built from, when it was built from a git
/// checkout (captured by `build.rs`).
pub const REVISION: Option<&str> = option_env!("SLIPWAY_REVISION");

/// `GET /version` (public): `{"name": "slipway", "version": <the crate
/// version, e.g. "0.1.0">, "revision": <40-hex git commit id, or null when
/// the build had no git checkout>}`.
#[utoipa::path(get, path = "/version", tag = "public",
    responses((status = 200, description = "What this api is", body = Version)))]
pub async fn version() -> Json<Version> {
    Json(Version {
        name: "slipway".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        revision: REVISION.map(str::to_owned),
    })
}

/// The answer of `GET /version`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Version {
    /// Always `slipway`.
    name: String,
    /// The crate version, e.g. `0.1.0`.
    version: String,
    /// The git commit this api was built from (40 hex digits); `null` without a checkout.
    #[schema(required = true)]
    revision: Option<String>,
}

/// Any unknown route.
pub async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}

/// A known route with another method.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "this route does not take that method")
}
