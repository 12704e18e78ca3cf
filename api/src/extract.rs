//! Extractors whose rejections use the JSON error shape of §3.

use crate::error::ApiError;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, StatusCode};

/// `axum::Json` with §3 errors: a body without `Content-Type:
/// application/json` is `415 unsupported_media_type`; a body over
/// [`crate::limits::BODY_LIMIT`] (with or without a `Content-Length`) `413
/// payload_too_large`; a malformed body `400 malformed_json` naming where it
/// broke, not axum's plain-text rejection; a body that is not a JSON object,
/// or not of `T`'s shape, `400 invalid_request` (serde alone would read a
/// struct from an array too). So is a body that repeats a key in one object
/// (which value counts would be a guess) or nests deeper than
/// [`MAX_DEPTH`] levels, each named with where it happens.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<S, T> FromRequest<S> for Json<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        // The media type first: a body of another type is not read at all.
        if !json_content_type(req.headers()) {
            return Err(unsupported_media_type());
        }
        let bytes = read_body(req, state).await?;
        parse_object(&bytes).map(Self)
    }
}

impl<T: serde::Serialize> axum::response::IntoResponse for Json<T> {
    fn into_response(self) -> axum::response::Response {
        axum::Json(self.0).into_response()
    }
}

/// An optional JSON body (`DELETE /deployments/{id}`, DL-2): `None` when
/// the body is empty or only whitespace, whatever its `Content-Type`;
/// otherwise read as [`Json`] reads one, with the same §3 errors: `413
/// payload_too_large` past [`crate::limits::BODY_LIMIT`] (also for a chunked
/// body without `Content-Length`, and before the media type is looked at),
/// `415 unsupported_media_type` for a body that is not sent as JSON, `400
/// malformed_json`, `400 invalid_request` for a body that is not a JSON
/// object of `T`'s shape.
#[derive(Debug, Clone, Copy, Default)]
pub struct OptionalJson<T>(pub Option<T>);

impl<S, T> FromRequest<S> for OptionalJson<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let json = json_content_type(req.headers());
        let bytes = read_body(req, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self(None));
        }
        if !json {
            return Err(unsupported_media_type());
        }
        parse_object(&bytes).map(|v| Self(Some(v)))
    }
}

/// Whether the request says its body is JSON: `application/json` or
/// `application/<something>+json`, with any parameters but a `charset`
/// other than UTF-8 (JSON is UTF-8, RFC 8259 §8.1; a body said to be in
/// another encoding would be read as what it is not).
pub(crate) fn json_content_type(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else { return false };
    let mut parts = value.split(';');
    let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    let utf8 = parts.filter_map(|p| p.split_once('=')).all(|(name, value)| {
        !name.trim().eq_ignore_ascii_case("charset") || value.trim().trim_matches('"').eq_ignore_ascii_case("utf-8")
    });
    utf8 && (essence == "application/json"
        || essence.strip_prefix("application/").is_some_and(|sub| sub.ends_with("+json") && sub.len() > "+json".len()))
}

fn unsupported_media_type() -> ApiError {
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        "send the body as JSON in UTF-8 with Content-Type: application/json",
    )
}

/// The whole body, at most [`crate::limits::BODY_LIMIT`] bytes (the router's
/// `DefaultBodyLimit`): past it `413 payload_too_large`, whether the body
/// announced its length or came in chunks; a body that paused longer than
/// `SLIPWAY_REQUEST_TIMEOUT` between two pieces, or still arriving
/// `SLIPWAY_BODY_TIMEOUT` after the head ([`crate::body_deadline`]), `408
/// request_timeout` (the latter with `limit_seconds` in `details`); a body
/// that broke off `400 invalid_request`.
pub(crate) async fn read_body<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::payload_too_large()
        } else if let Some(limit) = crate::body_deadline::timed_out(&rejection) {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!(
                    "the body was still arriving {} s after the request's head, longer than this service waits for a \
                     whole body; send it faster or in a smaller request",
                    limit.as_secs()
                ),
            )
            .with_details(serde_json::json!({ "limit_seconds": limit.as_secs() }))
        } else if timed_out(&rejection) {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "the body stopped arriving: a pause between two pieces of it outlasted the server's read timeout",
            )
        } else {
            ApiError::bad_request("invalid_request", format!("the body could not be read: {}", rejection.body_text()))
        }
    })
}

/// Whether reading the body failed because it paused too long (the router's
/// `RequestBodyTimeoutLayer`), somewhere in the rejection's chain of causes.
fn timed_out(rejection: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(rejection);
    while let Some(error) = cause {
        if error.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        cause = error.source();
    }
    false
}

/// How deep a body's arrays and objects may nest: serde_json's own bound.
pub const MAX_DEPTH: usize = 128;

/// A body as a JSON object of `T`'s shape (see [`Json`] for the errors).
fn parse_object<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let value = match strict_value(bytes) {
        Ok(value) => value,
        Err(e) => return Err(json_error(&e)),
    };
    if !value.is_object() {
        return Err(ApiError::bad_request("invalid_request", "the body must be a JSON object"));
    }
    serde_json::from_value(value)
        .map_err(|e| ApiError::bad_request("invalid_request", format!("the body is not of the expected shape: {e}")))
}

/// The §3 error of a body serde_json could not read into a [`Strict`] value.
fn json_error(e: &serde_json::Error) -> ApiError {
    let at = format!("line {}, column {}", e.line(), e.column());
    let text = e.to_string();
    if text.starts_with("recursion limit exceeded") {
        ApiError::bad_request(
            "invalid_request",
            format!(
                "the body nests arrays and objects deeper than {MAX_DEPTH} levels ({at}), more than this service reads"
            ),
        )
    } else if let Some(key) =
        text.strip_prefix(DUPLICATE_KEY).map(|rest| rest.rsplit_once(" at line ").map_or(rest, |(key, _)| key))
    {
        ApiError::bad_request(
            "invalid_request",
            format!("the body repeats the key {key} in one object ({at}): each key may appear once"),
        )
    } else {
        ApiError::bad_request("malformed_json", format!("the body is not valid JSON: {e}"))
    }
}

/// A JSON document read like `serde_json::from_slice::<Value>`, except that
/// an object that repeats a key is an error (`duplicate key "k" at line …`):
/// the body of [`Json`], and the token keys file ([`crate::keys`]).
pub(crate) fn strict_value(bytes: &[u8]) -> Result<serde_json::Value, serde_json::Error> {
    serde_json::from_slice::<Strict>(bytes).map(|Strict(value)| value)
}

/// How [`Strict`] starts the message of a repeated key.
const DUPLICATE_KEY: &str = "duplicate key ";

/// A JSON value read like `serde_json::Value`, except that an object that
/// repeats a key is an error (`Value` would keep the last one silently).
struct Strict(serde_json::Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, serde_json::Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(Strict(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(serde_json::Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!("{DUPLICATE_KEY}{}", serde_json::Value::from(key))));
            }
            let Strict(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(serde_json::Value::Object(object))
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

/// The query of a route that changes state (every `PUT`, `POST` and
/// `DELETE`): read as [`Query`] reads one, after refusing any parameter
/// `T` does not name with `400 invalid_request`, `details: {"parameter":
/// <its name>, "allowed": [<the names T takes>]}`. A parameter a route
/// ignores could be a caller's `?dry_run=true` on a route that has no dry
/// run: refused, nothing happens. A parameter given twice, or with a value
/// its type does not take (`?dry_run=yes`), is `400 invalid_request` too,
/// `details: {"parameter": <its name>}`. Routes without a query take
/// [`NoQuery`], so any parameter at all is refused. `T` is a struct whose
/// field names are its parameters (serde's names, after any `rename`).
#[derive(Debug, Clone, Copy, Default)]
pub struct StrictQuery<T>(pub T);

/// The query of a route that takes none: with [`StrictQuery`], every
/// parameter is refused.
#[derive(Debug, Clone, Copy, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoQuery {}

impl<S, T> axum::extract::FromRequestParts<S> for StrictQuery<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let allowed = field_names::<T>();
        let query = parts.uri.query().unwrap_or("");
        let mut seen: Vec<std::borrow::Cow<'_, str>> = Vec::new();
        for (name, _) in url::form_urlencoded::parse(query.as_bytes()) {
            if !allowed.contains(&name.as_ref()) {
                return Err(unknown_parameter(&name, allowed));
            }
            if seen.contains(&name) {
                return Err(ApiError::bad_request(
                    "invalid_request",
                    format!("the query parameter `{name}` is given more than once; give it once; nothing was done"),
                )
                .with_details(serde_json::json!({ "parameter": name })));
            }
            seen.push(name);
        }
        let values = serde_urlencoded::Deserializer::new(url::form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(values).map(Self).map_err(|e| {
            let parameter = e.path().to_string();
            let message = match parameter.as_str() {
                "." | "" => format!("the query string is not valid: {}; nothing was done", e.inner()),
                name => format!("the query parameter `{name}` is not valid: {}; nothing was done", e.inner()),
            };
            ApiError::bad_request("invalid_request", message)
                .with_details(serde_json::json!({ "parameter": parameter }))
        })
    }
}

/// `400 invalid_request` naming a query parameter the route does not take.
fn unknown_parameter(name: &str, allowed: &[&str]) -> ApiError {
    let name: String = name.chars().take(64).collect();
    let takes = match allowed {
        [] => "this route takes no query parameters".to_owned(),
        names => {
            format!("this route takes only {}", names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", "))
        }
    };
    ApiError::bad_request(
        "invalid_request",
        format!("the query parameter `{name}` is not one this route knows; nothing was done ({takes})"),
    )
    .with_details(serde_json::json!({ "parameter": name, "allowed": allowed }))
}

/// The field names serde's derived `Deserialize` of struct `T` asks for
/// (its `deserialize_struct` call), or none for any other shape.
fn field_names<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    struct Names(std::cell::Cell<&'static [&'static str]>);
    #[derive(Debug)]
    struct Stop;
    impl std::fmt::Display for Stop {
        fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("field names read")
        }
    }
    impl std::error::Error for Stop {}
    impl serde::de::Error for Stop {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Stop
        }
    }
    impl<'de> serde::Deserializer<'de> for &Names {
        type Error = Stop;
        fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            self.0.set(fields);
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let names = Names(std::cell::Cell::new(&[]));
    let _ = T::deserialize(&names);
    names.0.get()
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::extract::DefaultBodyLimit;
    use axum::routing::delete;
    use axum::Router;
    use http_body_util::BodyExt;
    use serde_json::{json, Value};
    use tower::ServiceExt;

    /// A route answering `{"got": <the optional body>}`, behind the router's body limit.
    fn router() -> Router {
        Router::new()
            .route("/", delete(|OptionalJson(body): OptionalJson<Value>| async move { Json(json!({ "got": body })) }))
            .layer(DefaultBodyLimit::max(crate::limits::BODY_LIMIT))
    }

    async fn call(content_type: Option<&str>, body: Body) -> (StatusCode, Value) {
        let mut request = axum::http::Request::builder().method("DELETE").uri("/");
        if let Some(t) = content_type {
            request = request.header(header::CONTENT_TYPE, t);
        }
        let answer = router().oneshot(request.body(body).unwrap()).await.unwrap();
        let status = answer.status();
        let bytes = answer.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn an_optional_json_body_may_be_absent_or_blank_whatever_its_media_type() {
        for (content_type, body) in [(None, ""), (Some("application/json"), ""), (Some("text/plain"), " \r\n\t")] {
            let (status, answer) = call(content_type, Body::from(body)).await;
            assert_eq!((status, &answer), (StatusCode::OK, &json!({ "got": null })), "{content_type:?} {body:?}");
        }
        for content_type in ["application/json; charset=utf-8", "application/json;charset=\"UTF-8\""] {
            let (status, answer) = call(Some(content_type), Body::from(r#"{"a": 1}"#)).await;
            assert_eq!((status, answer), (StatusCode::OK, json!({ "got": { "a": 1 } })), "{content_type}");
        }
    }

    #[tokio::test]
    async fn an_optional_json_body_that_is_there_is_read_as_json_with_its_errors_in_the_json_shape() {
        for (content_type, body, status, code) in [
            (None, r#"{"a": 1}"#, StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            (Some("text/plain"), r#"{"a": 1}"#, StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            (
                Some("application/json; charset=utf-16"),
                r#"{"a": 1}"#,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
            ),
            (
                Some("application/json;charset=\"latin1\""),
                r#"{"a": 1}"#,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
            ),
            (Some("application/json"), r#"{"a": "#, StatusCode::BAD_REQUEST, "malformed_json"),
            (Some("application/json"), "[1, 2]", StatusCode::BAD_REQUEST, "invalid_request"),
        ] {
            let (got, answer) = call(content_type, Body::from(body)).await;
            assert_eq!((got, answer["error"].as_str()), (status, Some(code)), "{content_type:?} {body:?}: {answer}");
        }
    }

    #[tokio::test]
    async fn an_optional_json_body_over_the_limit_is_413_in_the_json_shape_even_in_chunks() {
        let limit = crate::limits::BODY_LIMIT;
        let chunks: Vec<Result<Bytes, std::io::Error>> =
            (0..(2 * limit / 65536)).map(|_| Ok(Bytes::from(vec![b' '; 65536]))).collect();
        for (what, body) in [
            ("whole", Body::from(vec![b' '; 2 * limit])),
            ("chunked", Body::from_stream(futures::stream::iter(chunks))),
        ] {
            // Blank, and without a media type: the size alone refuses it.
            let (status, answer) = call(None, body).await;
            assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{what}: {answer}");
            assert_eq!(answer["error"], "payload_too_large", "{what}: {answer}");
            assert_eq!(answer["details"]["limit_bytes"], limit, "{what}: {answer}");
        }
    }
}
