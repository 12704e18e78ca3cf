//! Readiness (PRODUCT.md §10; seed 004 "Telling when it is ready"): is an
//! instance really serving under its own name?
//!
//! A probe asks `GET <path>` (the module source's `meta.readiness`,
//! default `/api/version`) under the instance's name, within
//! [`PROBE_DEADLINE`], follows no redirect, and reads the answer:
//!
//! | answer | state |
//! | --- | --- |
//! | `200` whose header (default `X-Instance-Host`), present once, names the instance's host | `ready` |
//! | `200` naming another host, not naming one, or with the header more than once | `wrong_host` (something else answered) |
//! | `404` | `not_found` (nothing serves under that path) |
//! | a redirect, any other status, no answer | `pending`, with why |
//!
//! A deployment's instances are probed again, with a growing pause
//! ([`crate::outbound::backoff`], never less than a `Retry-After`), until
//! each is ready or the deployment's deadline (`READY_TIMEOUT` after its
//! deploy) passes; then those not ready are `not_ready`, keeping the last
//! reason seen. The job doing this is [`crate::jobs::readiness`]; the CLI's
//! `run wait-ready` uses the same probe.

use crate::outbound::{self, Class};
use crate::source::outputs::{Instance, ReadinessMeta};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The deadline of one probe: connection, request and answer.
pub const PROBE_DEADLINE: Duration = Duration::from_secs(5);

/// The first pause between probes of an instance not ready yet.
pub const FIRST_PAUSE: Duration = Duration::from_secs(1);

/// The longest pause between probes.
pub const LONGEST_PAUSE: Duration = Duration::from_secs(30);

/// An instance's readiness (§10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = ReadinessState)]
pub enum State {
    /// Not known yet: not probed, or nothing answered as the instance yet.
    Pending,
    /// A `200` naming its own host.
    Ready,
    /// Something else answered for its name.
    WrongHost,
    /// `404` under the probe's path.
    NotFound,
    /// The deadline passed before it was ready (the last reason is kept).
    NotReady,
}

impl State {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Ready => "ready",
            Self::WrongHost => "wrong_host",
            Self::NotFound => "not_found",
            Self::NotReady => "not_ready",
        }
    }

    /// Whether probing it again may change it.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Ready | Self::NotReady)
    }
}

impl std::str::FromStr for State {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "pending" => Self::Pending,
            "ready" => Self::Ready,
            "wrong_host" => Self::WrongHost,
            "not_found" => Self::NotFound,
            "not_ready" => Self::NotReady,
            other => return Err(format!("unknown readiness state {other:?}")),
        })
    }
}

/// What one probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The state it implies (never `not_ready`: only the deadline makes that).
    pub state: State,
    /// Why it is not ready; `None` when ready.
    pub reason: Option<String>,
    /// How the answer classifies ([`crate::outbound`]), for the next pause.
    pub class: Class,
}

/// The local provider's front door, where the reference source sends its
/// probes: the default of `SLIPWAY_READINESS_CONNECT`.
pub const LOCAL_FRONT_DOOR: &str = "http://127.0.0.1:8470";

/// Probes `instance` as `settings` say. Never fails: every failure is a
/// state and a reason. A `connect` that `allowed_connect`
/// (`SLIPWAY_READINESS_CONNECT`; empty allows any) does not list is not
/// probed (SEC-3: a module source names it, and the probe goes from the
/// worker's own network).
pub async fn probe(instance: &Instance, settings: &ReadinessMeta, allowed_connect: &[String]) -> Probe {
    let pending = |reason: String, class: Class| Probe { state: State::Pending, reason: Some(reason), class };
    if let Some(connect) = settings.connect.as_deref() {
        let same = |allowed: &String| allowed.trim_end_matches('/') == connect.trim_end_matches('/');
        if !allowed_connect.is_empty() && !allowed_connect.iter().any(same) {
            let why = format!(
                "the module source's readiness connect {} is not among SLIPWAY_READINESS_CONNECT; nothing was probed",
                shown(connect)
            );
            return pending(why, Class::Refused);
        }
    }
    let target = match Target::of(instance, settings) {
        Ok(t) => t,
        Err(why) => return pending(why, Class::Refused),
    };
    let client = match target.client() {
        Ok(c) => c,
        Err(why) => return pending(why, Class::Refused),
    };
    let ask = || {
        let request = client.get(target.url.clone()).timeout(PROBE_DEADLINE);
        match &target.host_header {
            Some(host) => request.header(http::header::HOST, host),
            None => request,
        }
        .send()
    };
    let mut response = ask().await;
    // A 500 or 502 is asked once more at once (seed 004).
    if matches!(&response, Ok(r) if outbound::classify(r.status().as_u16(), r.headers()) == Class::RetryOnce) {
        response = ask().await;
    }
    let response = match response {
        Ok(r) => r,
        Err(e) if e.is_timeout() => {
            return pending(format!("no answer within {} s", PROBE_DEADLINE.as_secs()), outbound::classify_no_answer())
        }
        Err(e) => {
            return pending(format!("no answer: {}", crate::request_error_line(e)), outbound::classify_no_answer())
        }
    };
    let status = response.status().as_u16();
    let mut class = outbound::classify(status, response.headers());
    if class == Class::RetryOnce {
        // The second 500/502 in a row: try again later.
        class = Class::RetryLater { after: None };
    }
    let asked = format!("{}{}", instance.domain, settings.path);
    match status {
        200 => {
            let named = match only_one(response.headers().get_all(settings.header.as_str())) {
                Ok(named) => named.map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_owned()),
                Err(times) => {
                    return Probe {
                        state: State::WrongHost,
                        reason: Some(format!(
                            "{asked} answered 200 with {} {times} times: more than one server answers for this name",
                            settings.header
                        )),
                        class: Class::RetryLater { after: None },
                    }
                }
            };
            match named {
                Some(host) if host.eq_ignore_ascii_case(&instance.domain) => {
                    Probe { state: State::Ready, reason: None, class: Class::Success }
                }
                Some(other) => Probe {
                    state: State::WrongHost,
                    reason: Some(format!(
                        "{asked} answered 200 for {}: something else serves this name",
                        shown(&other)
                    )),
                    class: Class::RetryLater { after: None },
                },
                None => Probe {
                    state: State::WrongHost,
                    reason: Some(format!(
                        "{asked} answered 200 without {}: something else serves this name",
                        settings.header
                    )),
                    class: Class::RetryLater { after: None },
                },
            }
        }
        404 => Probe {
            state: State::NotFound,
            reason: Some(format!("{asked} answered 404: nothing serves under {}", settings.path)),
            class: Class::RetryLater { after: None },
        },
        300..=399 => {
            let to =
                response.headers().get(http::header::LOCATION).map(|v| shown(&String::from_utf8_lossy(v.as_bytes())));
            let to = to.map_or(String::new(), |l| format!(" to {l}"));
            pending(
                format!("{asked} redirected{to} ({status}); a redirect is never followed"),
                Class::RetryLater { after: None },
            )
        }
        _ => pending(format!("{asked} answered {status}"), class),
    }
}

/// The one value of a header that identifies something: `Ok(None)` when
/// absent, `Ok(Some(value))` when present once, and `Err(n)` when present
/// `n > 1` times. A header that names a host twice names no host: which of
/// the two a reader takes (the first, the last, or both joined) differs
/// between proxies and libraries, so it never counts as a match.
pub fn only_one(values: http::header::GetAll<'_, http::HeaderValue>) -> Result<Option<&http::HeaderValue>, usize> {
    let mut iter = values.iter();
    let first = iter.next();
    match iter.count() {
        0 => Ok(first),
        more => Err(more + 1),
    }
}

/// A value from an answer, shown in a reason: at most 200 characters, no
/// control characters.
fn shown(value: &str) -> String {
    let clean: String = value.chars().filter(|c| !c.is_control()).take(200).collect();
    format!("{clean:?}")
}

/// Where a probe goes.
struct Target {
    /// The URL asked.
    url: url::Url,
    /// `Host` to send when the URL's own is a front door's.
    host_header: Option<String>,
    /// `(host, address)` to connect to instead of resolving `host`.
    resolve: Option<(String, std::net::SocketAddr)>,
}

impl Target {
    fn of(instance: &Instance, settings: &ReadinessMeta) -> Result<Self, String> {
        let base = url::Url::parse(&instance.url)
            .map_err(|e| format!("the instance URL {:?} is not a URL: {e}", instance.url))?;
        let host =
            base.host_str().ok_or_else(|| format!("the instance URL {:?} has no host", instance.url))?.to_owned();
        if !settings.path.starts_with('/') {
            return Err(format!("the probe path {:?} does not start with /", settings.path));
        }
        let mut url = base.clone();
        url.set_query(None);
        url.set_fragment(None);
        let (path, query) = settings.path.split_once('?').map_or((settings.path.as_str(), None), |(p, q)| (p, Some(q)));
        url.set_path(path);
        url.set_query(query);
        match settings.connect.as_deref() {
            None => Ok(Self { url, host_header: None, resolve: None }),
            Some(door) if door.starts_with("http://") => {
                let mut door = url::Url::parse(door).map_err(|e| format!("readiness connect {door:?}: {e}"))?;
                door.set_path(url.path());
                door.set_query(url.query());
                let host_header = match base.port() {
                    Some(port) => format!("{host}:{port}"),
                    None => host,
                };
                Ok(Self { url: door, host_header: Some(host_header), resolve: None })
            }
            Some(address) => {
                let addr: std::net::SocketAddr = address.parse().map_err(|_| {
                    format!("readiness connect {address:?} is neither <ip>:<port> nor http://<host>:<port>")
                })?;
                Ok(Self { url, host_header: None, resolve: Some((host, addr)) })
            }
        }
    }

    fn client(&self) -> Result<reqwest::Client, String> {
        crate::callback::install_crypto_provider();
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(PROBE_DEADLINE)
            .user_agent(concat!("slipway-readiness/", env!("CARGO_PKG_VERSION")));
        if let Some((host, addr)) = &self.resolve {
            builder = builder.resolve(host, *addr);
        }
        builder.build().map_err(|e| format!("no HTTP client: {e}"))
    }
}

/// The pause before probing again after `probes` probes, given the last
/// answer's class.
pub fn pause(probes: u32, class: &Class) -> Duration {
    let after = match class {
        Class::RetryLater { after } => *after,
        _ => None,
    };
    outbound::backoff(probes.max(1), FIRST_PAUSE, LONGEST_PAUSE, after)
}
