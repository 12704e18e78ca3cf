//! The HTTP side: one [`Client`] per run, holding the api's base URL and the
//! bearer token, and [`Failure`], every way a command can end other than
//! success, each with its exit code.

use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::time::Duration;

/// How a command failed; [`Failure::exit_code`] is what the process exits with.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The api answered an error (PRODUCT's error shape: `error`, `message`, `details`).
    #[error("{message} ({code}, HTTP {status})")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The `error` code (`not_found`, `forbidden`, `validation_failed`, …).
        code: String,
        /// The api's sentence.
        message: String,
        /// The `details` (every problem of a refused configuration, …).
        details: Value,
        /// The answer's `Retry-After` (seconds, or an HTTP date), on a
        /// refusal that passes with time (`503 queue_full`, `nix_busy`).
        retry_after: Option<String>,
    },
    /// No connection to the api (refused, reset, timed out, bad TLS).
    #[error("could not reach the Slipway api at {url}: {cause}")]
    Unreachable {
        /// The base URL tried.
        url: String,
        /// What went wrong, with its causes.
        cause: String,
    },
    /// Bad input before anything was sent (no token, an unreadable file, …).
    #[error("{0}")]
    Usage(String),
    /// A followed build ended without success.
    #[error("build {build_id} {status}{}", reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    BuildUnsuccessful {
        /// The build.
        build_id: String,
        /// `failed`, `cancelled` or `superseded`.
        status: String,
        /// The build's error, when it has one.
        reason: Option<String>,
    },
    /// The api answered something this client cannot read.
    #[error("{0}")]
    Protocol(String),
    /// The person stopped a follow (Ctrl-C, `SIGINT`); the build goes on.
    #[error("stopped following build {build_id} (the build goes on); follow it again with: {again}")]
    Interrupted {
        /// The build that was followed.
        build_id: String,
        /// The command that follows it again.
        again: String,
    },
}

impl Failure {
    /// The process's exit code (documented in `slipway --help` and
    /// docs/CLI.md): a refusal that passes with time (HTTP 503 or 429, such
    /// as `queue_full`) is 5, apart from the other refusals (1), so that a
    /// script can wait `Retry-After` and try again; a stop by Ctrl-C is 130,
    /// as a shell reports a process ended by `SIGINT`.
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Api { status: 503 | 429, .. } => 5,
            Failure::Api { .. } | Failure::Protocol(_) => 1,
            Failure::Usage(_) => 2,
            Failure::Unreachable { .. } => 3,
            Failure::BuildUnsuccessful { .. } => 4,
            Failure::Interrupted { .. } => 130,
        }
    }
}

/// An error and its causes, `: `-separated (reqwest's own message omits the
/// cause, which is what says "connection refused").
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let next = e.to_string();
        if !text.contains(&next) {
            text = format!("{text}: {next}");
        }
        source = e.source();
    }
    text
}

/// The api at one base URL, with an optional bearer token.
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    /// A client of the api at `base` (`http://127.0.0.1:8080`); `token` is
    /// sent as `Authorization: Bearer` and never printed.
    pub fn new(base: &str, token: Option<String>) -> Result<Self, Failure> {
        let parsed = reqwest::Url::parse(base).map_err(|e| {
            Failure::Usage(format!("--url {base:?} is not a URL ({e}); for example http://127.0.0.1:8080"))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(Failure::Usage(format!("--url {base:?}: expected an http:// or https:// URL")));
        }
        // The workspace's reqwest has no rustls crypto provider of its own.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .user_agent(concat!("slipway-cli/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| Failure::Usage(format!("cannot set up HTTP: {}", chain(&e))))?;
        Ok(Self { http, base: base.trim_end_matches('/').to_owned(), token: token.filter(|t| !t.trim().is_empty()) })
    }

    /// The base URL, without a trailing `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// A request to `path` (from `/`), with the token when there is one.
    pub fn request(&self, method: Method, path: &str) -> Result<reqwest::RequestBuilder, Failure> {
        let token = self.token.as_deref().ok_or_else(|| {
            Failure::Usage(
                "no token: pass --token or set SLIPWAY_TOKEN (tokens come from your front-end, or from `slipway-api token` in development)"
                    .into(),
            )
        })?;
        Ok(self.http.request(method, format!("{}{path}", self.base)).bearer_auth(token.trim()))
    }

    /// Sends `request`; a failure to connect is [`Failure::Unreachable`].
    pub async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, Failure> {
        request.send().await.map_err(|e| self.unreachable(&e))
    }

    /// [`Failure::Unreachable`] for `error`, naming the base URL (the
    /// message of a reqwest error names the URL, never a header).
    pub fn unreachable(&self, error: &reqwest::Error) -> Failure {
        Failure::Unreachable { url: self.base.clone(), cause: chain(error) }
    }

    /// Sends `request` and reads a JSON answer: `Ok((status, body))` for a
    /// success, [`Failure::Api`] for an error answer.
    pub async fn json(&self, request: reqwest::RequestBuilder) -> Result<(StatusCode, Value), Failure> {
        let answer = self.send(request).await?;
        let status = answer.status();
        let headers = answer.headers().clone();
        let bytes = answer.bytes().await.map_err(|e| self.unreachable(&e))?;
        if !status.is_success() {
            return Err(api_error(status, &headers, &bytes));
        }
        if status == StatusCode::NO_CONTENT {
            return Ok((status, Value::Null));
        }
        let body = serde_json::from_slice(&bytes).map_err(|e| {
            Failure::Protocol(format!("the api answered HTTP {status} with a body that is not JSON: {e}"))
        })?;
        Ok((status, body))
    }

    /// `GET path`, read as JSON.
    pub async fn get(&self, path: &str) -> Result<Value, Failure> {
        Ok(self.json(self.request(Method::GET, path)?).await?.1)
    }

    /// `GET path`, the body's bytes as the api sent them (an SBOM document).
    pub async fn get_bytes(&self, path: &str) -> Result<Vec<u8>, Failure> {
        let answer = self.send(self.request(Method::GET, path)?).await?;
        let status = answer.status();
        let headers = answer.headers().clone();
        let bytes = answer.bytes().await.map_err(|e| self.unreachable(&e))?;
        if !status.is_success() {
            return Err(api_error(status, &headers, &bytes));
        }
        Ok(bytes.to_vec())
    }
}

/// [`Failure::Api`] from an error answer with its `headers` (for
/// `Retry-After`); an answer outside the error shape (a proxy's page) keeps
/// its status and says so.
pub fn api_error(status: StatusCode, headers: &reqwest::header::HeaderMap, body: &[u8]) -> Failure {
    let retry_after = headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty());
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let field = |name: &str| parsed.as_ref().and_then(|v| v.get(name)).and_then(Value::as_str).map(str::to_owned);
    match (field("error"), field("message")) {
        (Some(code), Some(message)) => Failure::Api {
            status: status.as_u16(),
            code,
            message,
            details: parsed.as_ref().and_then(|v| v.get("details")).cloned().unwrap_or(Value::Null),
            retry_after,
        },
        _ => Failure::Api {
            status: status.as_u16(),
            code: "unexpected_answer".into(),
            message: format!(
                "HTTP {status} without Slipway's JSON error shape (is --url the Slipway api, not a proxy or another service?)"
            ),
            details: Value::Null,
            retry_after,
        },
    }
}

/// A `Retry-After` value as words: `30` is "in 30 s", an HTTP date "after `<date>`".
pub fn retry_after_words(value: &str) -> String {
    if value.bytes().all(|b| b.is_ascii_digit()) {
        format!("in {value} s")
    } else {
        format!("after {value}")
    }
}

/// Percent-encodes one query value (`?node=`), RFC 3986 unreserved kept.
pub fn query_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Checks a deployment or build id before it goes into a path: no `/`,
/// `?`, `#`, `%` or whitespace, not empty (the api says what else is wrong).
pub fn path_id<'a>(what: &str, id: &'a str) -> Result<&'a str, Failure> {
    if id.is_empty() || id.chars().any(|c| c.is_whitespace() || "/?#%".contains(c)) {
        return Err(Failure::Usage(format!("{what} {id:?} cannot be part of a URL path")));
    }
    Ok(id)
}
