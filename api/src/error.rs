//! The api's one error type and its HTTP mapping (PRODUCT.md §3).
//!
//! Every error answers `{"error": code, "message": text, "details": …}`.
//! Domain errors come from `slipway_jobs` (thiserror enums); this module is
//! the only place that decides their status codes. Anything unexpected is an
//! opaque 500, logged once here.
//!
//! An error answer no handler wrote (a rejection of axum or tower-http, a
//! plain-text `413`, …) is put in the same shape by the router's safety net
//! (`crate::middleware`), its code taken from [`status_code`]; an [`ApiError`]'s
//! answer carries the [`ErrorShape`] mark, so the net lets it through.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use slipway_jobs::nix::{FailureCode, NixFailure};
use slipway_jobs::rollout::RolloutError;
use slipway_jobs::safe_change::ChangeError;
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
    /// Seconds a client should wait before trying again, sent as
    /// `Retry-After` (RFC 9110 §10.2.3) on the refusals that pass with time:
    /// [`Self::queue_full`], [`Self::nix_busy`] and [`Self::too_many_streams`].
    pub retry_after: Option<u32>,
}

/// `Retry-After` of `503 storage_unavailable`, seconds: an operator has to
/// free space first.
pub const STORAGE_RETRY_AFTER: u32 = 30;

/// `Retry-After` of `503 queue_full`, seconds: the queue drains as workers
/// finish builds, which take minutes, so sooner rarely helps.
pub const QUEUE_FULL_RETRY_AFTER: u32 = 30;

/// `Retry-After` of `503 nix_busy`, seconds: a schema build or names eval
/// holds a slot for seconds.
pub const NIX_BUSY_RETRY_AFTER: u32 = 5;

/// `Retry-After` of a `503` for OpenBao's `429` when OpenBao named no
/// time, seconds.
pub const OPENBAO_RETRY_AFTER: u32 = 2;

/// The body of every error answer (§3), as the OpenAPI document
/// (`GET /openapi.json`) describes it: `{"error": code, "message": text,
/// "details": any JSON value or null}`. [`ApiError`] writes it.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    /// The stable code: one of [`ErrorCode`].
    #[schema(value_type = ErrorCode)]
    pub error: String,
    /// A sentence naming what is wrong.
    pub message: String,
    /// Structured details (every problem of a configuration, the limits
    /// passed, …); `null` when there are none.
    #[schema(value_type = Object, nullable, required = true)]
    pub details: Option<Value>,
}

/// Every stable code an error answer of this api can carry (PRODUCT.md §3),
/// as the OpenAPI document lists them (the `error` of [`ErrorBody`]). A
/// client may meet only these; `api/tests/it/openapi.rs` fails when the code can
/// produce one that is missing here. A NEW ERROR CODE MUST BE ADDED HERE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// `400`: the request is not valid (a body of another shape, a bad or
    /// unknown query parameter, …); the message says what.
    InvalidRequest,
    /// `400`: the body is not valid JSON.
    MalformedJson,
    /// `400`: the deployment id is not one.
    InvalidDeploymentId,
    /// `400`: the configuration has problems (`details.problems`).
    InvalidConfiguration,
    /// `400`: the module source is malformed or over a transport not fetched.
    InvalidModuleSource,
    /// `400`: the slug of `POST /labels` is not one.
    InvalidSlug,
    /// `400`: the `Idempotency-Key` header is not one (empty, too long,
    /// not visible ASCII, or sent twice).
    InvalidIdempotencyKey,
    /// `400`: a webhook's URL is refused (scheme, user information, an
    /// origin outside `SLIPWAY_ALLOWED_ORIGINS`, a refused address).
    InvalidWebhookUrl,
    /// `400`: a webhook's event types, secret or description are refused.
    InvalidWebhook,
    /// `400`: `POST /rollouts` is not a rollout (an empty list, waves that
    /// do not add up, …); the message says what.
    InvalidRollout,
    /// `400`: deployments a rollout names do not exist
    /// (`details.deployments`: the first 20; `details.total`).
    UnknownDeployments,
    /// `400`: a rollout names more deployments than
    /// `ROLLOUT_MAX_DEPLOYMENTS` (`details.limit`).
    TooManyDeployments,
    /// `401`: no token, or one that is not valid.
    Unauthorized,
    /// `403`: this token may not do that.
    Forbidden,
    /// `403`: the module source is not on this service's allowlist.
    SourceNotAllowed,
    /// `404`: no such route or resource.
    NotFound,
    /// `405`: the route does not take that method.
    MethodNotAllowed,
    /// `406`: no media type the request accepts.
    NotAcceptable,
    /// `408`: the request (or its body) took too long to arrive.
    RequestTimeout,
    /// `409`: the request conflicts with the current state.
    Conflict,
    /// `409`: the build already finished.
    BuildFinished,
    /// `409`: something a plan was made from moved since (`details.moved`).
    PlanStale,
    /// `409`: the plan did not succeed, or gave secret values it cannot keep.
    PlanNotAppliable,
    /// `409`: a rollback's target is not a successful deploy of the deployment.
    InvalidRollbackTarget,
    /// `409`: a secret version a rollback's target read was cleared since (`details.field`).
    SecretGone,
    /// `409`: the deployment is being destroyed, or was.
    DeploymentDestroyed,
    /// `409`: a request with the same `Idempotency-Key` is still being
    /// answered; try again once it is.
    IdempotencyKeyInFlight,
    /// `409`: the rollout halted, was cancelled or completed: it can no
    /// longer be paused, resumed or cancelled.
    RolloutEnded,
    /// `410`: the plan's `PLAN_TTL` has passed.
    PlanExpired,
    /// `411`: the request needs a `Content-Length`.
    LengthRequired,
    /// `412`: the deployment is not in the version `If-Match` names (or
    /// exists despite `If-None-Match: *`); nothing was changed.
    PreconditionFailed,
    /// `413`: the body is over the limit.
    PayloadTooLarge,
    /// `414`: the URI is too long.
    UriTooLong,
    /// `415`: the body is not sent as JSON.
    UnsupportedMediaType,
    /// `422`: well formed but cannot be processed.
    UnprocessableEntity,
    /// `422`: the `Idempotency-Key` was used for another request (another
    /// body, route or precondition) within its lifetime.
    IdempotencyKeyReused,
    /// `422`: the module source lacks an output.
    OutputMissing,
    /// `422`: the module source is older than this service needs.
    SourceTooOld,
    /// `422`: the module source's outputs did not build.
    BuildFailed,
    /// `422`: the repository the source names is not there.
    SourceRepositoryNotFound,
    /// `422`: the revision the source names is not there.
    SourceRevisionNotFound,
    /// `422`: building the source's outputs ran out of memory.
    OutOfMemory,
    /// `422`: an output of the source is over `SLIPWAY_OUTPUT_LIMIT`.
    OutputTooLarge,
    /// `422`: the source is over its size limit.
    SourceTooLarge,
    /// `422`: the source would do what Slipway refuses.
    SourceUnsafe,
    /// `429`: too many requests.
    TooManyRequests,
    /// `429`: the token's tenant has `TENANT_QUEUE_SIZE` builds waiting
    /// (`Retry-After`).
    TenantQueueFull,
    /// `429`: an event-stream cap is reached (`details.limit`: `subject` or
    /// `api`; `Retry-After`).
    TooManyStreams,
    /// `431`: the header section is too large.
    RequestHeaderFieldsTooLarge,
    /// `500`: the service failed; it has been logged.
    Internal,
    /// `501`: not implemented.
    NotImplemented,
    /// `502`: a service this one depends on answered badly.
    BadGateway,
    /// `502`: the module source's server could not be reached, or failed.
    FetchFailed,
    /// `503`: the service (or the database, or OpenBao) is unavailable.
    ServiceUnavailable,
    /// `503`: the build queue is full (`Retry-After`).
    QueueFull,
    /// `503`: every nix slot is busy (`Retry-After`).
    NixBusy,
    /// `503`: a host's storage cannot be written (`details.storage`:
    /// `worker` or `database`; `Retry-After`).
    StorageUnavailable,
    /// `504`: the request did not finish in time.
    Timeout,
}

impl ErrorCode {
    /// Every code, in the order of the document.
    pub const ALL: [ErrorCode; 58] = {
        use ErrorCode::*;
        [
            InvalidRequest,
            MalformedJson,
            InvalidDeploymentId,
            InvalidConfiguration,
            InvalidModuleSource,
            InvalidSlug,
            InvalidIdempotencyKey,
            InvalidWebhookUrl,
            InvalidWebhook,
            InvalidRollout,
            UnknownDeployments,
            TooManyDeployments,
            Unauthorized,
            Forbidden,
            SourceNotAllowed,
            NotFound,
            MethodNotAllowed,
            NotAcceptable,
            RequestTimeout,
            Conflict,
            BuildFinished,
            PlanStale,
            PlanNotAppliable,
            InvalidRollbackTarget,
            SecretGone,
            DeploymentDestroyed,
            IdempotencyKeyInFlight,
            RolloutEnded,
            PlanExpired,
            LengthRequired,
            PreconditionFailed,
            PayloadTooLarge,
            UriTooLong,
            UnsupportedMediaType,
            UnprocessableEntity,
            IdempotencyKeyReused,
            OutputMissing,
            SourceTooOld,
            BuildFailed,
            SourceRepositoryNotFound,
            SourceRevisionNotFound,
            OutOfMemory,
            OutputTooLarge,
            SourceTooLarge,
            SourceUnsafe,
            TooManyRequests,
            TenantQueueFull,
            TooManyStreams,
            RequestHeaderFieldsTooLarge,
            Internal,
            NotImplemented,
            BadGateway,
            FetchFailed,
            ServiceUnavailable,
            QueueFull,
            NixBusy,
            StorageUnavailable,
            Timeout,
        ]
    };

    /// The code as answered (`invalid_request`, …).
    pub fn as_str(self) -> String {
        serde_json::to_value(self).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
    }
}

/// Response extension marking an answer written by [`ApiError`]: already in
/// the §3 shape, so the router's safety net passes it through untouched.
#[derive(Debug, Clone, Copy)]
pub struct ErrorShape;

/// The stable code and a sentence for an error status when nothing better
/// is known: the one status → code map of the router's safety net
/// (`crate::middleware`), which answers every error that is not in the §3 shape
/// with these. A `4xx` not listed is `invalid_request`, a `5xx` not listed
/// `internal`. Codes are those of PRODUCT.md §3 where it names one.
pub fn status_code(status: StatusCode) -> (&'static str, &'static str) {
    match status.as_u16() {
        401 => ("unauthorized", "send a valid bearer token: Authorization: Bearer <token>"),
        403 => ("forbidden", "this token may not do that"),
        404 => ("not_found", "no such route or resource"),
        405 => ("method_not_allowed", "this route does not take that method"),
        406 => ("not_acceptable", "this route cannot answer in a media type the request accepts"),
        408 => ("request_timeout", "the request took too long to arrive"),
        409 => ("conflict", "the request conflicts with the current state"),
        411 => ("length_required", "the request needs a Content-Length"),
        412 => ("precondition_failed", "the request's precondition does not hold"),
        413 => ("payload_too_large", "the body is larger than this service accepts"),
        414 => ("uri_too_long", "the request's URI is longer than this service accepts"),
        415 => ("unsupported_media_type", "send the body as JSON with Content-Type: application/json"),
        422 => ("unprocessable_entity", "the request is well formed but cannot be processed"),
        429 => ("too_many_requests", "too many requests; try again later"),
        431 => ("request_header_fields_too_large", "the request's header fields are larger than this service accepts"),
        501 => ("not_implemented", "this service does not implement that"),
        502 => ("bad_gateway", "a service this one depends on answered badly"),
        503 => ("service_unavailable", "the service is unavailable; try again"),
        504 => ("timeout", "the request did not finish in time"),
        // 400 and every 4xx not named above.
        400..=499 => ("invalid_request", "the request is not valid"),
        _ => ("internal", "the service failed to handle this request; it has been logged"),
    }
}

/// Response extension of a `503 storage_unavailable` answer: the storage
/// that failed (`worker`, `database`) and the answer's message.
#[derive(Debug, Clone)]
pub struct StorageFault {
    /// `worker` or `database`.
    pub storage: &'static str,
    /// What the answer said.
    pub message: String,
}

/// Response extension of an answer given because the database is away
/// (see [`ApiError::database_away`]): why, never the URL.
#[derive(Debug, Clone)]
pub struct DatabaseAway(pub String);

impl ApiError {
    /// A new error without details.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), details: None, database_away: None, retry_after: None }
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

    /// 503 `queue_full`, with `Retry-After: 30`.
    pub fn queue_full(message: impl Into<String>) -> Self {
        Self {
            retry_after: Some(QUEUE_FULL_RETRY_AFTER),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "queue_full", message)
        }
    }

    /// 503 `nix_busy`: every fleet-wide nix slot is busy (MS-7), with
    /// `Retry-After: 5`.
    pub fn nix_busy(message: impl Into<String>) -> Self {
        Self {
            retry_after: Some(NIX_BUSY_RETRY_AFTER),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "nix_busy", message)
        }
    }

    /// 429 `too_many_streams`: an event-stream cap is reached
    /// ([`crate::stream_caps`]), with `Retry-After: 10`.
    pub fn too_many_streams(message: impl Into<String>) -> Self {
        Self {
            retry_after: Some(crate::stream_caps::STREAMS_RETRY_AFTER),
            ..Self::new(StatusCode::TOO_MANY_REQUESTS, "too_many_streams", message)
        }
    }

    /// 503 `storage_unavailable`: `storage` (`worker`, `database`) cannot
    /// be written, with `Retry-After: 30` and `details.storage`. A host's
    /// fault, never the client's. The answer carries a [`StorageFault`]
    /// response extension, from which [`crate::storage_health`] logs it,
    /// counts it and warns in `/readyz`.
    pub fn storage_unavailable(storage: &'static str, message: impl Into<String>) -> Self {
        Self {
            retry_after: Some(STORAGE_RETRY_AFTER),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable", message)
        }
        .with_details(json!({ "storage": storage }))
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

    /// `status` with the code and sentence of [`status_code`]: for an
    /// error whose cause says nothing more to the client (`413` is
    /// [`ApiError::payload_too_large`], with the limit).
    pub fn from_status(status: StatusCode) -> Self {
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            return Self::payload_too_large();
        }
        let (code, message) = status_code(status);
        Self::new(status, code, message)
    }

    /// 413 `payload_too_large`: a body over [`crate::limits::BODY_LIMIT`]
    /// bytes, whether or not it came with a `Content-Length`; `details`:
    /// `{"limit_bytes": 1048576}`.
    pub fn payload_too_large() -> Self {
        let limit = crate::limits::BODY_LIMIT;
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the body is larger than this service accepts ({limit} bytes)"),
        )
        .with_details(json!({ "limit_bytes": limit }))
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
        // Which storage failed, for [`crate::storage_health`].
        let storage = (self.code == "storage_unavailable")
            .then(|| match self.details.as_ref().and_then(|d| d["storage"].as_str()) {
                Some("database") => "database",
                _ => "worker",
            })
            .map(|storage| StorageFault { storage, message: self.message.clone() });
        let body = json!({ "error": self.code, "message": self.message, "details": self.details });
        let mut response = (self.status, Json(body)).into_response();
        response.extensions_mut().insert(ErrorShape);
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        if let Some(why) = self.database_away {
            response.extensions_mut().insert(DatabaseAway(why));
        }
        if let Some(fault) = storage {
            response.extensions_mut().insert(fault);
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match &e {
            // Before "unavailable": the database answers, but cannot write.
            _ if e.is_storage_full() => Self::storage_unavailable(
                "database",
                "the database cannot write: its disk is full; nothing of this request was stored (a fault of the \
                 service's host, not of the request: try again once its operator has freed space)",
            ),
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

/// A malformed source, or one over a transport Slipway does not fetch
/// (SEC-3), is `400 invalid_module_source`; one outside the allowlist
/// `403 source_not_allowed` (MS-6).
impl From<SourceError> for ApiError {
    fn from(e: SourceError) -> Self {
        match e {
            SourceError::Malformed(_) | SourceError::TransportNotAllowed(_) => {
                Self::bad_request("invalid_module_source", e.to_string())
            }
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
/// configuration, EV-1); a repository, commit, branch or tag the source
/// names that is not there (`source_repository_not_found`,
/// `source_revision_not_found`) `422`; `fetch_failed` (the server could not
/// be reached, or failed) `502`; `timeout` `504`; what a source's own
/// content caused past a bound of SEC-3 (`out_of_memory`,
/// `output_too_large`, `source_too_large`, `source_unsafe`) `422`.
impl From<NixFailure> for ApiError {
    fn from(f: NixFailure) -> Self {
        let details = json!({ "output": f.output });
        let (status, code) = match f.code {
            FailureCode::BuildFailed if f.output.as_deref() == Some("names") => {
                (StatusCode::BAD_REQUEST, "invalid_configuration")
            }
            FailureCode::StorageUnavailable => {
                return Self::storage_unavailable(
                    "worker",
                    format!(
                        "{} (a fault of the worker's host, not of the request: try again once its operator has freed \
                         space)",
                        f.message
                    ),
                )
                .with_details(json!({ "storage": "worker", "output": f.output }))
            }
            FailureCode::FetchFailed => (StatusCode::BAD_GATEWAY, f.code.as_str()),
            FailureCode::Timeout => (StatusCode::GATEWAY_TIMEOUT, f.code.as_str()),
            FailureCode::OutputMissing
            | FailureCode::SourceTooOld
            | FailureCode::BuildFailed
            | FailureCode::OutOfMemory
            | FailureCode::OutputTooLarge
            | FailureCode::SourceTooLarge
            | FailureCode::SourceUnsafe
            | FailureCode::SourceRepositoryNotFound
            | FailureCode::SourceRevisionNotFound => (StatusCode::UNPROCESSABLE_ENTITY, f.code.as_str()),
        };
        Self::new(status, code, f.message).with_details(details)
    }
}

impl From<ChangeError> for ApiError {
    fn from(e: ChangeError) -> Self {
        let conflict = |code: &'static str, e: &ChangeError| Self::new(StatusCode::CONFLICT, code, e.to_string());
        match e {
            e @ (ChangeError::UnknownDeployment(_) | ChangeError::NotFound(_)) => Self::not_found(e.to_string()),
            ChangeError::PlanStale(ref moved) => {
                let details = json!({ "moved": moved });
                conflict("plan_stale", &e).with_details(details)
            }
            e @ ChangeError::PlanExpired { .. } => Self::new(StatusCode::GONE, "plan_expired", e.to_string()),
            e @ ChangeError::PlanNotAppliable(_) => conflict("plan_not_appliable", &e),
            e @ ChangeError::InvalidTarget(_) => conflict("invalid_rollback_target", &e),
            ChangeError::SecretGone { ref field, .. } => {
                let details = json!({ "field": field });
                conflict("secret_gone", &e).with_details(details)
            }
            e @ ChangeError::Destroyed(_) => conflict("deployment_destroyed", &e),
            ChangeError::Store(s) => s.into(),
        }
    }
}

impl From<RolloutError> for ApiError {
    fn from(e: RolloutError) -> Self {
        match e {
            e @ RolloutError::Invalid(_) => Self::bad_request("invalid_rollout", e.to_string()),
            RolloutError::UnknownDeployments { ref named, total } => {
                let details = json!({ "deployments": named, "total": total });
                Self::bad_request("unknown_deployments", e.to_string()).with_details(details)
            }
            RolloutError::TooMany { count, limit } => Self::bad_request("too_many_deployments", e.to_string())
                .with_details(json!({ "count": count, "limit": limit })),
            e @ RolloutError::NotFound(_) => Self::not_found(e.to_string()),
            e @ RolloutError::Ended { .. } => Self::new(StatusCode::CONFLICT, "rollout_ended", e.to_string()),
            RolloutError::Source(e) => e.into(),
            RolloutError::Store(s) => s.into(),
        }
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
            e @ SubmitError::TenantQueueFull { .. } => Self {
                retry_after: Some(QUEUE_FULL_RETRY_AFTER),
                ..Self::new(StatusCode::TOO_MANY_REQUESTS, "tenant_queue_full", e.to_string())
            },
            SubmitError::SecretStore(e) => secret_store(e),
            e @ SubmitError::DryRunUnknown(_) => Self::not_found(e.to_string()),
            e @ SubmitError::SecretStoreMissing(_) => {
                tracing::warn!(error = %e, "a submit was refused: this api has no OPENBAO_ADDR");
                Self::unavailable(e.to_string())
            }
            e @ SubmitError::PreconditionFailed(_) => {
                Self::new(StatusCode::PRECONDITION_FAILED, "precondition_failed", e.to_string())
            }
            SubmitError::Store(s) => s.into(),
        }
    }
}

/// §8: OpenBao refused, is sealed or cannot be reached: `503
/// service_unavailable`, nothing stored, with `details.openbao.cause`
/// ([`slipway_jobs::openbao::OpenBaoError::cause`]): `token_expired` (the
/// api's token is no longer valid: retrying does not help), `path_denied`
/// (the token is valid, its policy denies the path), `unreachable`,
/// `sealed`, `rate_limited` (OpenBao answered `429` past the client's
/// retries: `Retry-After` says when to try again), `busy`, `refused`,
/// `malformed`. The client learns which; the operator's log gets the whole
/// sentence (address, path, OpenBao's words), which never holds the token
/// or a value. A name that cannot be a path segment is the configuration's
/// problem: `400`.
fn secret_store(e: slipway_jobs::openbao::OpenBaoError) -> ApiError {
    use slipway_jobs::openbao::OpenBaoError as E;
    let details = json!({ "openbao": { "cause": e.cause() } });
    let what = match &e {
        E::Segment { .. } => return ApiError::bad_request("invalid_configuration", e.to_string()),
        E::Sealed { .. } => "OpenBao, which keeps the operator secrets, is sealed".to_owned(),
        E::Unavailable { .. } => "OpenBao, which keeps the operator secrets, cannot be reached".to_owned(),
        E::Busy { status: 429, retry_after, .. } => {
            tracing::warn!(error = %e, "OpenBao rate-limits the api past its retries; the submit was refused");
            let after = retry_after.map_or(OPENBAO_RETRY_AFTER, |a| (a.as_secs() as u32).clamp(1, 3600));
            return ApiError {
                retry_after: Some(after),
                ..ApiError::unavailable(
                    "OpenBao, which keeps the operator secrets, is rate-limiting this api (429); nothing was \
                     stored, try again after Retry-After",
                )
                .with_details(details)
            };
        }
        E::Busy { status, .. } => format!("OpenBao, which keeps the operator secrets, cannot serve now ({status})"),
        E::TokenInvalid { .. } => {
            tracing::error!(error = %e, "OpenBao no longer accepts the api's token: give the api a new OPENBAO_TOKEN");
            return ApiError::unavailable(
                "OpenBao, which keeps the operator secrets, no longer accepts this api's token (expired, revoked or \
                 unknown); nothing was stored. An operator must give the api a new OPENBAO_TOKEN",
            )
            .with_details(details);
        }
        E::Refused { status: 401 | 403, .. } => {
            tracing::warn!(error = %e, "OpenBao's policy for the api's token denies a path: give the api's token the slipway-api policy");
            return ApiError::unavailable(
                "OpenBao, which keeps the operator secrets, denies this api's token a path the submit needs (its \
                 policy lacks the slipway-api rules); nothing was stored. An operator must fix the token's policy",
            )
            .with_details(details);
        }
        E::Refused { status, .. } => {
            format!("OpenBao, which keeps the operator secrets, refused the submit's read or write ({status})")
        }
        E::Malformed { .. } => {
            "OpenBao, which keeps the operator secrets, gave an answer Slipway does not understand".to_owned()
        }
    };
    tracing::warn!(error = %e, "a submit's operator secrets could not be stored; nothing was stored");
    ApiError::unavailable(format!("{what}; nothing was stored, try again later")).with_details(details)
}
