//! What only the api reads: its address, token verification, request
//! limits and timeouts, the submit admission bound, the event-stream caps.

use secrecy::SecretString;
use std::path::PathBuf;
use std::time::Duration;

/// The api's settings ([`super::Config::api`]); workers ignore them.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// `SLIPWAY_BIND`: the api's listen address.
    pub bind: String,
    /// `SLIPWAY_JWT_SECRET`: HS256 secret of a front-end.
    pub jwt_secret: Option<SecretString>,
    /// `SLIPWAY_JWT_PUBLIC_KEY`: an Ed25519 public key (PEM) of a front-end.
    pub jwt_public_key: Option<String>,
    /// `SLIPWAY_JWT_KEYS_FILE`: a JWK Set (RFC 7517) of the front-ends'
    /// keys, each named by its `kid` (SEC-4), instead of the two keys above;
    /// made absolute against the starting folder. The api reads it at start,
    /// on `SIGHUP` and when it changes; this is only its path.
    pub jwt_keys_file: Option<PathBuf>,
    /// `SLIPWAY_JWT_AUDIENCE`: the required `aud` claim.
    pub jwt_audience: String,
    /// `SLIPWAY_JWT_ISSUER`: when set, the required `iss` claim.
    pub jwt_issuer: Option<String>,
    /// `QUEUE_SIZE`.
    pub queue_size: u32,
    /// `SLIPWAY_REQUEST_TIMEOUT`, default 30 s: the time a client gets to
    /// send a request's head (past it the connection is closed unanswered),
    /// the longest pause between two pieces of a body (past it `408
    /// request_timeout`), and the life of an idle keep-alive connection.
    pub request_timeout: Duration,
    /// `SLIPWAY_BODY_TIMEOUT`: the most time a request body may take to
    /// arrive, in all, counted from the end of its head; default 60 s. A
    /// body still arriving past it is answered `408 request_timeout` with
    /// `Connection: close`, however steadily it trickles in (the pauses
    /// alone are bounded by `SLIPWAY_REQUEST_TIMEOUT`).
    pub body_timeout: Duration,
    /// `SLIPWAY_SHUTDOWN_GRACE`: how long the api drains on `SIGTERM` or
    /// `SIGINT`, default 10 s. It stops accepting at once, ends its event
    /// streams and lets the requests in flight finish for at most this
    /// long, then exits with whatever is still open; a second signal ends
    /// the drain at once.
    pub shutdown_grace: Duration,
    /// `SLIPWAY_STREAMS_PER_SUBJECT`: event streams (`GET
    /// /deployments/{id}/events`, `GET /builds/{id}/log`) one token subject
    /// may hold open on one api at once, default 100; past it a stream is
    /// refused `429 too_many_streams`. A ticket's streams count for the
    /// subject of the token that minted it.
    pub streams_per_subject: u32,
    /// `SLIPWAY_STREAMS_PER_API`: event streams one api holds open at
    /// once, whoever opened them, default 10000; past it a stream is
    /// refused `429 too_many_streams`.
    pub streams_per_api: u32,
}
