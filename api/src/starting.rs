//! The api while it starts: it listens before its database is open, so a
//! client or a load balancer gets an answer while migrations run (or wait
//! for another process's migration lock, which can take long) instead of a
//! refused or hanging connection.
//!
//! [`router`] answers every request `503 service_unavailable` in the JSON
//! error shape with `Retry-After: 5` until [`Ready::set`] gives it the real
//! router, to which it hands every request from then on.

use crate::error::ApiError;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::Router;
use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use tower::ServiceExt as _;

/// Seconds a client is told to wait (`Retry-After`) while the api starts.
pub const STARTING_RETRY_AFTER: u32 = 5;

/// Where the real router appears once the database is ready.
#[derive(Clone, Default)]
pub struct Ready(Arc<OnceLock<Router>>);

impl Ready {
    /// Nothing ready yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Hands every request from now on to `app`. A second call is ignored.
    pub fn set(&self, app: Router) {
        let _ = self.0.set(app);
    }
}

/// A router answering `503` until `ready` holds the real router, then
/// passing each request to it.
pub fn router(ready: Ready) -> Router {
    Router::new().fallback_service(tower::service_fn(move |request: Request| {
        let app = ready.0.get().cloned();
        async move {
            match app {
                Some(app) => app.oneshot(request).await,
                None => Ok::<Response, Infallible>(starting()),
            }
        }
    }))
}

/// The answer while the api starts.
fn starting() -> Response {
    let mut error = ApiError::unavailable(
        "the service is starting: its database is being migrated (or it waits for another process's migrations); \
         try again shortly",
    );
    error.retry_after = Some(STARTING_RETRY_AFTER);
    error.into_response()
}
