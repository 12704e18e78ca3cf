//! The reconcile push (DL-2): one POST of a JSON body to a checked callback
//! URL, connecting only to the addresses that were checked.

use super::{check_url, forbidden_address, Origins};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::time::{Duration, Instant};
use url::Host;

/// The production deadline of one push: resolution, connection, TLS, the
/// request and the answer's status line and headers (DL-2 "a short
/// deadline").
pub const PUSH_DEADLINE: Duration = Duration::from_secs(10);

/// An answer of [`Resolve::lookup`]: the addresses of a host name.
pub type Lookup<'a> = Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send + 'a>>;

/// Resolves a host name to its addresses, once per push (the one outside
/// service of a push, behind a trait so that a test controls the answers).
pub trait Resolve: Send + Sync {
    /// The addresses of `host` (a DNS name in ASCII, never an IP literal);
    /// an error or an empty list means the push is not sent.
    fn lookup<'a>(&'a self, host: &'a str) -> Lookup<'a>;
}

/// The system's resolver (`getaddrinfo`, through tokio's `lookup_host`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn lookup<'a>(&'a self, host: &'a str) -> Lookup<'a> {
        Box::pin(async move {
            let mut ips: Vec<IpAddr> = Vec::new();
            for address in tokio::net::lookup_host((host, 0)).await? {
                if !ips.contains(&address.ip()) {
                    ips.push(address.ip());
                }
            }
            Ok(ips)
        })
    }
}

/// One push to make. `Debug` never shows the token (SEC-2).
pub struct PushRequest<'a> {
    /// The callback URL as stored with the delete; checked again with
    /// [`check_url`] against `origins`.
    pub url: &'a str,
    /// The callback token, sent as `Authorization: Bearer <token>`.
    pub token: &'a SecretString,
    /// The JSON body, sent as `application/json`.
    pub body: &'a serde_json::Value,
    /// The allowlist of this moment (`SLIPWAY_ALLOWED_ORIGINS`).
    pub origins: &'a Origins,
    /// `SLIPWAY_CALLBACK_ALLOW_PRIVATE`: connect also to the addresses
    /// [`forbidden_address`] refuses (development only).
    pub allow_private: bool,
    /// Resolves the URL's host name, once.
    pub resolver: &'a dyn Resolve,
    /// The whole push's deadline: [`PUSH_DEADLINE`] in production.
    pub deadline: Duration,
}

impl std::fmt::Debug for PushRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushRequest")
            .field("url", &self.url)
            .field("token", &"[redacted]")
            .field("body", self.body)
            .field("origins", self.origins)
            .field("allow_private", &self.allow_private)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

/// Why no HTTP status came back from a push; serialised in `snake_case`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PushError {
    /// The URL no longer passes [`check_url`] (its origin left the
    /// allowlist, …): nothing was sent.
    RefusedOrigin,
    /// The host is, or resolved to, an address [`forbidden_address`]
    /// refuses: nothing was sent.
    RefusedAddress,
    /// The host name did not resolve, or resolved to no address.
    ResolveFailed,
    /// No connection could be made to any checked address.
    ConnectFailed,
    /// The deadline passed before an answer came.
    Timeout,
    /// The TLS handshake failed (certificate, protocol).
    Tls,
    /// Anything else that kept the request from being sent or answered.
    RequestFailed,
}

impl PushError {
    /// The stable class name (`"refused_origin"`, …), as serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RefusedOrigin => "refused_origin",
            Self::RefusedAddress => "refused_address",
            Self::ResolveFailed => "resolve_failed",
            Self::ConnectFailed => "connect_failed",
            Self::Timeout => "timeout",
            Self::Tls => "tls",
            Self::RequestFailed => "request_failed",
        }
    }
}

/// What one push did, to be recorded (DL-2). Never holds the token (SEC-2).
///
/// JSON: `{"delivered": bool, "status": 204 | null, "error":
/// "connect_failed" | null, "message": "…", "address": "203.0.113.9:443" |
/// null}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushOutcome {
    /// The callback answered a 2xx.
    pub delivered: bool,
    /// The HTTP status of the answer, when one came (a 3xx is recorded, never
    /// followed).
    pub status: Option<u16>,
    /// Why no answer came; `None` when `status` is set.
    pub error: Option<PushError>,
    /// A sentence for the operator.
    pub message: String,
    /// The address that answered, when one did.
    pub address: Option<SocketAddr>,
}

impl PushOutcome {
    /// A failure before or without an answer.
    pub fn failed(error: PushError, message: String) -> Self {
        Self { delivered: false, status: None, error: Some(error), message, address: None }
    }
}

/// Installs ring as the process's rustls crypto provider, unless one is
/// already installed. [`push`] calls it; any other code of the process that
/// builds a `reqwest::Client` must call it first too (the workspace's
/// reqwest has no provider of its own).
pub fn install_crypto_provider() {
    // An error means a provider is already installed, which is as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The checks every outbound call to a URL from a caller goes through
/// before anything is sent (DL-2, WH-1): `raw_url` checked again with
/// [`check_url`] against `origins`; its host resolved once with `resolver`
/// (an IP literal is not resolved); refused when any address is refused by
/// [`forbidden_address`] and `allow_private` is off; then a client that
/// connects only to the checked addresses (no second resolution, no proxy,
/// no redirect followed), with a timeout of what is left of `deadline`
/// since `started`. `Err` is the outcome to record: nothing was sent.
pub async fn checked_client(
    raw_url: &str,
    origins: &Origins,
    allow_private: bool,
    resolver: &dyn Resolve,
    deadline: Duration,
    started: Instant,
) -> Result<(url::Url, reqwest::Client, Vec<SocketAddr>), PushOutcome> {
    let url = match check_url(raw_url, origins) {
        Ok(url) => url,
        Err(refusal) => {
            return Err(PushOutcome::failed(PushError::RefusedOrigin, format!("No push was sent: {refusal}.")));
        }
    };
    let port = url.port_or_known_default().unwrap_or(443);
    let (name, ips): (Option<&str>, Vec<IpAddr>) = match url.host() {
        Some(Host::Ipv4(ip)) => (None, vec![IpAddr::V4(ip)]),
        Some(Host::Ipv6(ip)) => (None, vec![IpAddr::V6(ip)]),
        Some(Host::Domain(name)) => match tokio::time::timeout(deadline, resolver.lookup(name)).await {
            Err(_) => {
                return Err(PushOutcome::failed(
                    PushError::Timeout,
                    format!("No push was sent: {name} did not resolve within {} ms.", deadline.as_millis()),
                ));
            }
            Ok(Err(e)) => {
                return Err(PushOutcome::failed(
                    PushError::ResolveFailed,
                    format!("No push was sent: {name} did not resolve: {e}."),
                ));
            }
            Ok(Ok(ips)) if ips.is_empty() => {
                return Err(PushOutcome::failed(
                    PushError::ResolveFailed,
                    format!("No push was sent: {name} resolved to no address."),
                ));
            }
            Ok(Ok(ips)) => (Some(name), ips),
        },
        None => {
            return Err(PushOutcome::failed(
                PushError::RefusedOrigin,
                "No push was sent: the callback URL has no host.".into(),
            ))
        }
    };
    if !allow_private {
        if let Some((ip, why)) = ips.iter().find_map(|ip| forbidden_address(*ip).map(|why| (ip, why))) {
            return Err(PushOutcome::failed(
                PushError::RefusedAddress,
                format!(
                    "No push was sent: the callback host is {ip}, an address of a refused kind ({why}), which is refused unless \
                     SLIPWAY_CALLBACK_ALLOW_PRIVATE is set."
                ),
            ));
        }
    }
    let addrs: Vec<SocketAddr> = ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect();
    let remaining = deadline.saturating_sub(started.elapsed());
    if remaining.is_zero() {
        return Err(PushOutcome::failed(
            PushError::Timeout,
            "No push was sent: the deadline passed while resolving.".into(),
        ));
    }
    install_crypto_provider();
    let mut client = reqwest::Client::builder()
        .no_proxy()
        .user_agent(concat!("slipway/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::none())
        .timeout(remaining)
        .dns_resolver(NoSecondResolution);
    if let Some(name) = name {
        client = client.resolve_to_addrs(name, &addrs);
    }
    let client = match client.build() {
        Ok(client) => client,
        Err(e) => {
            return Err(PushOutcome::failed(
                PushError::RequestFailed,
                format!("No push was sent: {}.", crate::request_error_line(e)),
            ));
        }
    };
    Ok((url, client, addrs))
}

/// POSTs `request.body` once to the callback URL (DL-2), with the token as
/// a bearer header, and says what happened. Never fails: every failure is a
/// [`PushOutcome`] with an [`PushError`] class.
///
/// In order: the URL is checked again with [`check_url`] against
/// `request.origins` (refused: `refused_origin`, nothing sent); its host is
/// resolved once with `request.resolver` (an IP literal is not resolved);
/// when any address is refused by [`forbidden_address`] and
/// `allow_private` is off, nothing is sent (`refused_address`); the request
/// then goes only to the checked addresses (no second resolution, no proxy,
/// no redirect followed, a 3xx is recorded as it is), once, within
/// `request.deadline` counted from the call (`timeout`).
pub async fn push(request: PushRequest<'_>) -> PushOutcome {
    let started = Instant::now();
    let (url, client, addrs) = match checked_client(
        request.url,
        request.origins,
        request.allow_private,
        request.resolver,
        request.deadline,
        started,
    )
    .await
    {
        Ok(checked) => checked,
        Err(failed) => return failed,
    };
    let Ok(mut authorization) =
        reqwest::header::HeaderValue::from_str(&format!("Bearer {}", request.token.expose_secret()))
    else {
        return PushOutcome::failed(
            PushError::RequestFailed,
            "No push was sent: the callback token cannot be sent in a header.".into(),
        );
    };
    authorization.set_sensitive(true);
    let sent = client.post(url).header(reqwest::header::AUTHORIZATION, authorization).json(request.body).send().await;
    match sent {
        Ok(response) => {
            let status = response.status();
            let address = response.remote_addr();
            let from = address.map(|a| format!(" from {a}")).unwrap_or_default();
            let message = if status.is_success() {
                format!("Delivered: the callback answered {status}{from}.")
            } else if status.is_redirection() {
                format!("Not delivered: the callback answered {status}{from}; redirects are not followed.")
            } else {
                // DL-2: never retried, whatever the class; the message says
                // what the front-end asked for.
                let asked = match crate::outbound::classify(status.as_u16(), response.headers()) {
                    crate::outbound::Class::RetryLater { after: Some(after) } => {
                        format!(" (it asked to be tried again after {} s)", after.as_secs())
                    }
                    class if class.is_retryable() => " (a failure on its side)".to_owned(),
                    _ => " (a refusal)".to_owned(),
                };
                format!("Not delivered: the callback answered {status}{from}{asked}; a push is not retried.")
            };
            PushOutcome { delivered: status.is_success(), status: Some(status.as_u16()), error: None, message, address }
        }
        Err(e) => {
            let error = classify(&e);
            let to = addrs.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
            let message = match error {
                PushError::Timeout => format!("No answer from {to} within {} ms.", request.deadline.as_millis()),
                _ => format!("The push to {to} failed: {}.", crate::request_error_line(e)),
            };
            PushOutcome::failed(error, message)
        }
    }
}

/// reqwest's resolver for names that are not the checked host: none. The
/// checked host's addresses are given with `resolve_to_addrs`, so nothing
/// is ever resolved a second time (DNS rebinding).
struct NoSecondResolution;

impl reqwest::dns::Resolve for NoSecondResolution {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let name = name.as_str().to_owned();
        Box::pin(async move { Err(format!("{name} is not the checked callback host").into()) })
    }
}

/// The class of a failed request: TLS is told from other connection errors
/// by a rustls error in the chain. tokio-rustls wraps it in an `io::Error`
/// (and reqwest in another), whose `source` skips the wrapped error, so an
/// `io::Error` is looked into with `get_ref`.
pub fn classify(e: &reqwest::Error) -> PushError {
    if e.is_timeout() {
        return PushError::Timeout;
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cause {
        if err.is::<rustls::Error>() {
            return PushError::Tls;
        }
        cause = match err.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    if e.is_connect() {
        PushError::ConnectFailed
    } else {
        PushError::RequestFailed
    }
}
