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
            // The api's error shape, so a scraper reads the same refusal
            // from either process.
            let body = serde_json::json!({
                "error": "unauthorized",
                "message": "send the metrics token: Authorization: Bearer <SLIPWAY_METRICS_TOKEN>",
                "details": null,
            });
            return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], axum::Json(body))
                .into_response();
        }
    }
    let content_type = HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");
    ([(header::CONTENT_TYPE, content_type)], state.metrics.render()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    async fn scrape_with(token: Option<&str>, sent: Option<&str>) -> (StatusCode, Option<String>, Vec<u8>) {
        let state =
            Scrape { metrics: Metrics::new(), token: token.map(|t| Arc::new(SecretString::from(t.to_owned()))) };
        let mut request = Request::new(Body::empty());
        if let Some(sent) = sent {
            request.headers_mut().insert(header::AUTHORIZATION, HeaderValue::from_str(sent).unwrap());
        }
        let answer = scrape(State(state), request).await;
        let status = answer.status();
        let content_type = answer.headers().get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap().to_owned());
        let body = axum::body::to_bytes(answer.into_body(), usize::MAX).await.unwrap().to_vec();
        (status, content_type, body)
    }

    #[tokio::test]
    async fn a_scrape_without_the_metrics_token_is_refused_in_the_apis_error_shape() {
        for sent in [None, Some("Bearer wrong")] {
            let (status, content_type, body) = scrape_with(Some("the-token"), sent).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED);
            assert_eq!(content_type.as_deref(), Some("application/json"));
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!((body["error"].as_str(), body["details"].is_null()), (Some("unauthorized"), true), "{body}");
            assert!(!body.to_string().contains("the-token"), "{body}");
        }
        let (status, content_type, _) = scrape_with(Some("the-token"), Some("Bearer the-token")).await;
        assert_eq!(status, StatusCode::OK);
        assert!(content_type.unwrap().starts_with("text/plain"));
        assert_eq!(scrape_with(None, None).await.0, StatusCode::OK);
    }
}
