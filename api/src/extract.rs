//! Extractors whose rejections use the JSON error shape of §3.

use crate::error::ApiError;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;

/// `axum::Json` with §3 errors: a malformed body is `400 malformed_json`
/// naming where it broke, not axum's plain-text rejection; a body that is not
/// a JSON object, or not of `T`'s shape, is `400 invalid_request` (serde
/// alone would read a struct from an array too).
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<S, T> FromRequest<S> for Json<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let value = match axum::Json::<serde_json::Value>::from_request(req, state).await {
            Ok(axum::Json(v)) => v,
            Err(rejection) => {
                return Err(match rejection {
                    JsonRejection::JsonSyntaxError(e) => ApiError::bad_request(
                        "malformed_json",
                        format!("the body is not valid JSON: {}", e.body_text()),
                    ),
                    JsonRejection::MissingJsonContentType(_) => ApiError::new(
                        StatusCode::UNSUPPORTED_MEDIA_TYPE,
                        "unsupported_media_type",
                        "send the body as JSON with Content-Type: application/json",
                    ),
                    JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "payload_too_large",
                        format!("the body is larger than this service accepts ({} bytes)", crate::app::BODY_LIMIT),
                    ),
                    other => ApiError::bad_request("invalid_request", other.body_text()),
                })
            }
        };
        if !value.is_object() {
            return Err(ApiError::bad_request("invalid_request", "the body must be a JSON object"));
        }
        serde_json::from_value(value).map(Self).map_err(|e| {
            ApiError::bad_request("invalid_request", format!("the body is not of the expected shape: {e}"))
        })
    }
}

impl<T: serde::Serialize> axum::response::IntoResponse for Json<T> {
    fn into_response(self) -> axum::response::Response {
        axum::Json(self.0).into_response()
    }
}

/// `axum::extract::Query` with §3 errors (`400 invalid_request`), also for a
/// repeated or malformed parameter.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<S, T> axum::extract::FromRequestParts<S> for Query<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(v)| Self(v))
            .map_err(|e| {
                ApiError::bad_request("invalid_request", format!("the query string is not valid: {}", e.body_text()))
            })
    }
}

/// The `{id}` of a deployment route, checked against ID-1: anything else,
/// also a segment that is not UTF-8, is `400 invalid_deployment_id`.
#[derive(Debug, Clone)]
pub struct DeploymentIdPath(pub slipway_jobs::id::DeploymentId);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for DeploymentIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        let invalid = |why: String| ApiError::bad_request("invalid_deployment_id", why);
        let axum::extract::Path(raw) = axum::extract::Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| invalid(format!("the deployment id is not valid: {}", e.body_text())))?;
        slipway_jobs::id::DeploymentId::parse(&raw).map(Self).map_err(|e| invalid(e.to_string()))
    }
}

/// The `{id}` of a build route. A segment that is not UTF-8 names no build: `404`.
#[derive(Debug, Clone)]
pub struct BuildIdPath(pub String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for BuildIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<String>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(id)| Self(id))
            .map_err(|_| ApiError::not_found("no such build"))
    }
}
