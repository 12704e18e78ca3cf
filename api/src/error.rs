//! The api's one error type and its HTTP mapping (PRODUCT.md §3).
//!
//! Every error answers `{"error": code, "message": text, "details": …}`.
//! Domain errors come from `slipway_jobs` (thiserror enums); this module is
//! the only place that decides their status codes. Anything unexpected is an
//! opaque 500, logged once here.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use slipway_jobs::nix::{FailureCode, NixFailure};
use slipway_jobs::source::SourceError;
use slipway_jobs::store::StoreError;
use slipway_jobs::submit::SubmitError;

/// An error answer: status, stable code, sentence, optional details.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable code (§3).
    pub code: &'static str,
    /// A sentence naming what is wrong.
    pub message: String,
    /// Structured details (for example every problem of a configuration).
    pub details: Option<Value>,
    /// Set when this answer is a `503` because the database is away: why, in
    /// the database driver's words (never the URL). The answer carries it as
    /// a [`DatabaseAway`] response extension, from which the router's
    /// [`crate::database_health`] watcher logs the outage once.
    pub database_away: Option<String>,
}

/// Response extension of an answer given because the database is away
/// (see [`ApiError::database_away`]): why, never the URL.
#[derive(Debug, Clone)]
pub struct DatabaseAway(pub String);

impl ApiError {
    /// A new error without details.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), details: None, database_away: None }
    }

    /// Adds details.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// 400 with a code.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 401 `unauthorized`.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 403 `forbidden`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 503 `queue_full`.
    pub fn queue_full(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "queue_full", message)
    }

    /// 503 `nix_busy`: every fleet-wide nix slot is busy (MS-7).
    pub fn nix_busy(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "nix_busy", message)
    }

    /// 503 `service_unavailable`.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", message)
    }

    /// 503 `service_unavailable` because the database is away; `why` goes
    /// to the outage log (once per outage), not to the client.
    pub fn database_away(message: impl Into<String>, why: impl Into<String>) -> Self {
        Self { database_away: Some(why.into()), ..Self::unavailable(message) }
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 500 `internal`: the cause is logged here, once, and not shown.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the service failed to handle this request; it has been logged",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": self.code, "message": self.message, "details": self.details });
        let mut response = (self.status, Json(body)).into_response();
        if let Some(why) = self.database_away {
            response.extensions_mut().insert(DatabaseAway(why));
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match &e {
            // Logged once per outage by the database watcher, not per request.
            _ if e.is_unavailable() => {
                tracing::debug!(error = %e, "database unavailable");
                Self::database_away("the database is busy or unreachable; try again", e.to_string())
            }
            StoreError::Conflict(_) => Self::unavailable(e.to_string()),
            _ => Self::internal(e),
        }
    }
}

impl From<SourceError> for ApiError {
    fn from(e: SourceError) -> Self {
        match e {
            SourceError::Malformed(_) => Self::bad_request("invalid_module_source", e.to_string()),
            SourceError::NotAllowed(_) | SourceError::PathNotAllowed(_) => {
                Self::new(StatusCode::FORBIDDEN, "source_not_allowed", e.to_string())
            }
        }
    }
}

/// MS-6: a source's output, or its names eval, that could not be had. The
/// message says which output and why; the build log stays on the job.
/// `output_missing` and `source_too_old` `422`; a build that failed `422`
/// (`invalid_configuration` `400` when the `names` eval refused the
/// configuration, EV-1); `fetch_failed` `502`; `timeout` `504`.
impl From<NixFailure> for ApiError {
    fn from(f: NixFailure) -> Self {
        let details = json!({ "output": f.output });
        let (status, code) = match f.code {
            FailureCode::BuildFailed if f.output.as_deref() == Some("names") => {
                (StatusCode::BAD_REQUEST, "invalid_configuration")
            }
            FailureCode::FetchFailed => (StatusCode::BAD_GATEWAY, f.code.as_str()),
            FailureCode::Timeout => (StatusCode::GATEWAY_TIMEOUT, f.code.as_str()),
            FailureCode::OutputMissing | FailureCode::SourceTooOld | FailureCode::BuildFailed => {
                (StatusCode::UNPROCESSABLE_ENTITY, f.code.as_str())
            }
        };
        Self::new(status, code, f.message).with_details(details)
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        match e {
            // details: {"problems": [the first MAX_PROBLEMS], "omitted": how many more}.
            SubmitError::InvalidConfiguration(listing) => Self::bad_request("invalid_configuration", listing.message())
                .with_details(json!({ "problems": listing.problems, "omitted": listing.omitted })),
            SubmitError::Source(s) => s.into(),
            e @ SubmitError::NotServed(_) => Self::bad_request("invalid_module_source", e.to_string()),
            SubmitError::SourceOutputs(f) => f.into(),
            e @ SubmitError::NixBusy => Self::nix_busy(e.to_string()),
            e @ (SubmitError::NixUnserved | SubmitError::NamesUnavailable(_)) => Self::unavailable(e.to_string()),
            e @ SubmitError::QueueFull { .. } => Self::queue_full(e.to_string()),
            SubmitError::Store(s) => s.into(),
        }
    }
}
