//! The worker's metrics listener (`SLIPWAY_METRICS_ADDR`, off by default):
//! `GET /metrics` answers this process's families (docs/METRICS.md) in the
//! Prometheus text format, behind `SLIPWAY_METRICS_TOKEN` when it is set.

use anyhow::Context as _;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use secrecy::{ExposeSecret, SecretString};
use slipway_jobs::metrics::Metrics;
use std::sync::Arc;
use std::time::Duration;

/// How often the histograms' samples are folded in between scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// What the listener answers with.
#[derive(Clone)]
struct Scrape {
    metrics: Metrics,
    token: Option<Arc<SecretString>>,
}

/// Binds `addr` (an error names `SLIPWAY_METRICS_ADDR`) and serves
/// `metrics` there, and folds the histograms in every few seconds, until
/// the returned task is aborted.
pub async fn start(
    addr: &str,
    token: Option<SecretString>,
    metrics: Metrics,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener =
        tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding SLIPWAY_METRICS_ADDR {addr}"))?;
    tracing::info!(address = %listener.local_addr()?, "serving metrics at /metrics");
    let state = Scrape { metrics: metrics.clone(), token: token.map(Arc::new) };
    let router = axum::Router::new().route("/metrics", get(scrape)).with_state(state);
    Ok(tokio::spawn(async move {
        let upkeep = async {
            let mut tick = tokio::time::interval(UPKEEP_EVERY);
            loop {
                tick.tick().await;
                metrics.upkeep();
            }
        };
        tokio::select! {
            served = axum::serve(listener, router) => {
                if let Err(e) = served {
                    tracing::warn!(error = %e, "the metrics listener stopped");
                }
            }
            () = upkeep => {}
        }
    }))
}

/// `GET /metrics`: `401` without the metrics token when one is set.
async fn scrape(State(state): State<Scrape>, request: Request) -> Response {
    if let Some(token) = &state.token {
        let sent = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if !slipway_jobs::metrics::bearer_matches(sent, token.expose_secret()) {
            return (
                StatusCode::UNAUTHORIZED,
                "send the metrics token: Authorization: Bearer <SLIPWAY_METRICS_TOKEN>\n",
            )
                .into_response();
        }
    }
    let content_type = HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");
    ([(header::CONTENT_TYPE, content_type)], state.metrics.render()).into_response()
}
