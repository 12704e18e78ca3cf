//! The total deadline of a request body (`SLIPWAY_BODY_TIMEOUT`).
//!
//! hyper bounds the time a client takes to send a request head, and the
//! router's `RequestBodyTimeoutLayer` bounds each pause inside a body; a
//! body sent at one byte per second has no long pause and would hold its
//! connection (and a handler) for as long as it keeps sending. [`limit`]
//! wraps every request body that has one in a [`DeadlineBody`], which fails
//! with [`BodyTimedOut`] once the body is still arriving `limit` after the
//! request reached the router. The extractors of [`crate::extract`] answer
//! that `408 request_timeout` in the JSON error shape, and the answer to
//! such a request, whatever it is, carries `Connection: close`: what is
//! left of the body is never read.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Frame, SizeHint};
use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// The error of a body still arriving past its deadline.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the body was still arriving {} s after the request's head", limit.as_secs())]
pub struct BodyTimedOut {
    /// The deadline, counted from the moment the request reached the router.
    pub limit: Duration,
}

/// A request body that fails with [`BodyTimedOut`] when it has not ended
/// within its deadline; until then it yields the inner body's frames as they
/// come, with the inner body's size hint.
pub struct DeadlineBody {
    inner: Body,
    sleep: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
    /// Set once the deadline cut the body short.
    fired: Arc<AtomicBool>,
    /// The inner body ended, or the deadline fired: nothing more comes.
    ended: bool,
}

impl DeadlineBody {
    /// `inner`, which must end within `limit` from now; `fired` is set if it does not.
    pub fn new(inner: Body, limit: Duration, fired: Arc<AtomicBool>) -> Self {
        Self { inner, sleep: Box::pin(tokio::time::sleep(limit)), limit, fired, ended: false }
    }

    fn fire(&mut self) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        self.ended = true;
        self.fired.store(true, Ordering::Relaxed);
        Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut { limit: self.limit }))))
    }
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        if this.sleep.is_elapsed() {
            return this.fire();
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(None) => {
                this.ended = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(frame)) => Poll::Ready(Some(frame)),
            Poll::Pending => match this.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => this.fire(),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Middleware: gives the request's body, if it has one, `limit` to arrive
/// in all ([`DeadlineBody`]); if the deadline cut it short, the answer gets
/// `Connection: close`. A request without a body gets no timer.
pub async fn limit(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    use http_body::Body as _;
    if request.body().is_end_stream() {
        return next.run(request).await;
    }
    let fired = Arc::new(AtomicBool::new(false));
    let request = request.map(|body| Body::new(DeadlineBody::new(body, limit, fired.clone())));
    let mut response = next.run(request).await;
    if fired.load(Ordering::Relaxed) {
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Whether `error`, or one of its causes, is a [`BodyTimedOut`]: its deadline.
pub fn timed_out(error: &(dyn std::error::Error + 'static)) -> Option<Duration> {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if let Some(timed_out) = error.downcast_ref::<BodyTimedOut>() {
            return Some(timed_out.limit);
        }
        cause = error.source();
    }
    None
}
