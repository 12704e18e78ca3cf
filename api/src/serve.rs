//! Serving the router over HTTP/1.1 with our own connection limits.
//!
//! `axum::serve` takes no builder options, and hyper's defaults answer a
//! request head over about 400 KiB with an empty `431` of its own before
//! axum sees it. Here hyper may buffer a head up to [`HEAD_BUFFER_BYTES`] and
//! [`HYPER_MAX_HEADERS`] fields, so the router's header limit
//! ([`crate::limits::HEADER_LIMIT_BYTES`], [`crate::limits::HEADER_FIELDS_LIMIT`])
//! answers in the JSON error shape of PRODUCT.md §3. Only a head past hyper's
//! own bounds still gets hyper's bare `431` (and a URI over 64 KiB its bare
//! `414`); those bounds keep the memory one connection can take fixed.
//!
//! A client gets `read_timeout` (`SLIPWAY_REQUEST_TIMEOUT`) to send a whole
//! request head, and an idle keep-alive connection is closed after as long:
//! a connection that never finishes its head cannot be held open. A body's
//! pauses, and its whole arrival, are timed by the router
//! ([`crate::router::app`], [`crate::body_deadline`], `408`).
//!
//! On shutdown it stops accepting and drains the open connections for a
//! bounded time ([`serve_draining`]: `SLIPWAY_SHUTDOWN_GRACE` in the api,
//! or until a second signal).
//!
//! Every accepted connection sets `TCP_NODELAY`. A server-sent event is a
//! small write that follows another; without it, Nagle's algorithm holds
//! each event until the client acknowledges the one before, and a client
//! delays that acknowledgement by up to 40 ms on Linux. The deploy bench
//! saw it as 20–30 ms between a build's end and a follower reading
//! `active`.

use axum::Router;
use futures::FutureExt as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// The most bytes hyper buffers for one request head (request line and
/// header fields): 2 MiB, well above the 1 MiB headers a client may send,
/// so such a request reaches the router's limit and its JSON answer.
pub const HEAD_BUFFER_BYTES: usize = 2 * 1024 * 1024;

/// The most header fields hyper parses in one request (hyper's default is
/// 100); the router refuses more than [`crate::limits::HEADER_FIELDS_LIMIT`].
pub const HYPER_MAX_HEADERS: usize = 1024;

/// Serves `router` on `listener` until `shutdown` completes, then stops
/// accepting and waits for the connections to finish their requests
/// (graceful shutdown: idle keep-alive connections close at once). A
/// connection whose request head has not fully arrived `read_timeout` after
/// hyper started reading it (or that sat idle between requests as long) is
/// closed without an answer. A failed `accept` (for example too many open
/// files) is logged and retried after a short pause; nothing else ends
/// serving. Each accepted connection has `TCP_NODELAY` set.
pub async fn serve(listener: TcpListener, router: Router, read_timeout: Duration, shutdown: impl Future<Output = ()>) {
    serve_draining(listener, router, read_timeout, shutdown, std::future::pending()).await;
}

/// How a drain ended ([`serve_draining`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// Every connection finished its request and closed.
    Complete,
    /// The drain was cut short with this many connections still open
    /// (their requests unanswered, or their answers cut off).
    CutShort {
        /// Connections open when the drain ended.
        open: usize,
    },
}

/// [`serve`], with a bound on the drain: once `shutdown` completes it stops
/// accepting (the port closes at once) and lets the open connections finish
/// until they have or `stop_draining` completes, whichever comes first (a
/// grace period, a second signal). A connection still open then is left to
/// be dropped with the runtime.
pub async fn serve_draining(
    listener: TcpListener,
    router: Router,
    read_timeout: Duration,
    shutdown: impl Future<Output = ()>,
    stop_draining: impl Future<Output = ()>,
) -> Drained {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.max_buf_size(HEAD_BUFFER_BYTES)
        .max_headers(HYPER_MAX_HEADERS)
        .timer(TokioTimer::new())
        .header_read_timeout(read_timeout);
    let graceful = GracefulShutdown::new();
    let open = Arc::new(AtomicUsize::new(0));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!(error = %e, "setting TCP_NODELAY on an accepted connection failed");
                    }
                    stream
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        let counted = OpenConnection::new(&open);
        // A combinator, not an `async` block that awaits it: the task then
        // holds the connection's future once, not also a moved copy.
        tokio::spawn(connection.map(move |ended| {
            drop(counted);
            if let Err(e) = ended {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }));
    }
    drop(listener);
    tracing::info!(connections = open.load(Ordering::Relaxed), "stopped accepting; draining the open connections");
    tokio::select! {
        () = graceful.shutdown() => Drained::Complete,
        () = stop_draining => Drained::CutShort { open: open.load(Ordering::Relaxed) },
    }
}

/// Counts one open connection until dropped (when its task ends).
struct OpenConnection(Arc<AtomicUsize>);

impl OpenConnection {
    fn new(open: &Arc<AtomicUsize>) -> Self {
        open.fetch_add(1, Ordering::Relaxed);
        Self(open.clone())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
