//! Outbound calls' answers and failures, classified in one place (seed 004
//! "Errors", "Publishing a hub's paths"): the readiness probes, the OpenBao
//! client and the reconcile push read an HTTP answer through [`classify`],
//! git fetches their tool's output through [`classify_git`], and waits go
//! through [`backoff`].
//!
//! - A refusal that retrying cannot fix ([`Class::Refused`]): a `4xx` other
//!   than `408` and `429` (the credential, the request or the address is
//!   wrong), or a redirect where none is followed.
//! - A failure worth one more try at once ([`Class::RetryOnce`]): `500` and
//!   `502`. A second one is [`Class::RetryLater`].
//! - A failure to try again later, never in a tight loop
//!   ([`Class::RetryLater`]): `429`, `503`, `504`, `408`, any other `5xx`,
//!   and no answer at all; it carries the server's `Retry-After` when it
//!   gave one.
//!
//! The pause before a later try is [`backoff`]: exponential with jitter
//! (the `backon` crate), never shorter than the server's `Retry-After`.

use http::HeaderMap;
use std::time::Duration;

/// What an answer (or its absence) means for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    /// A `2xx`.
    Success,
    /// Retrying cannot fix it.
    Refused,
    /// `500` or `502`: try once more at once.
    RetryOnce,
    /// Try again later, not before `after` when the server said so.
    RetryLater {
        /// The server's `Retry-After`, when it gave one.
        after: Option<Duration>,
    },
}

impl Class {
    /// Whether a later try may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::RetryOnce | Self::RetryLater { .. })
    }
}

/// Classifies an answer by its status and headers.
pub fn classify(status: u16, headers: &HeaderMap) -> Class {
    match status {
        200..=299 => Class::Success,
        500 | 502 => Class::RetryOnce,
        408 | 429 | 500..=599 => Class::RetryLater { after: retry_after(headers) },
        _ => Class::Refused,
    }
}

/// Classifies a request that got no answer: always worth a later try (a
/// connection refused, reset or timed out may work next time).
pub fn classify_no_answer() -> Class {
    Class::RetryLater { after: None }
}

/// Classifies a failed `git` command from its output: the HTTP status a
/// smart-HTTP server answered (`The requested URL returned error: 502`) as
/// [`classify`] does; a connection that failed or broke off (a name that
/// did not resolve, a refusal, a timeout, a reset, an early end) as worth a
/// later try; anything else (no such repository, a refused login, an
/// unknown commit) as refused.
pub fn classify_git(output: &str) -> Class {
    if let Some(rest) = output.split("returned error: ").nth(1) {
        if let Ok(status) = rest.chars().take_while(char::is_ascii_digit).collect::<String>().parse::<u16>() {
            return classify(status, &HeaderMap::new());
        }
    }
    const TRANSIENT: [&str; 9] = [
        "Could not resolve host",
        "Connection refused",
        "Connection timed out",
        "Operation timed out",
        "Failed to connect",
        "Connection reset",
        "early EOF",
        "RPC failed",
        "unexpected disconnect",
    ];
    if TRANSIENT.iter().any(|t| output.contains(t)) {
        classify_no_answer()
    } else {
        Class::Refused
    }
}

/// The longest `Retry-After` honoured: a server asking for more is asked
/// again after this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// The server's `Retry-After`: seconds, or an HTTP date (then the time
/// from now, zero when past); `None` when absent or unreadable. At most
/// [`MAX_RETRY_AFTER`].
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(http::header::RETRY_AFTER)?.to_str().ok()?.trim();
    let wait = if let Ok(seconds) = value.parse::<u64>() {
        Duration::from_secs(seconds)
    } else {
        let at = httpdate::parse_http_date(value).ok()?;
        at.duration_since(std::time::SystemTime::now()).unwrap_or(Duration::ZERO)
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

/// The pause before try number `attempt` (from 1) of something that
/// failed retryably: exponential from `first`, doubling up to `most`, with
/// jitter, and never less than `after` (the server's `Retry-After`).
pub fn backoff(attempt: u32, first: Duration, most: Duration, after: Option<Duration>) -> Duration {
    use backon::BackoffBuilder as _;
    let mut delays = backon::ExponentialBuilder::new()
        .with_min_delay(first)
        .with_max_delay(most)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build();
    let step = delays.nth(attempt.saturating_sub(1) as usize).unwrap_or(most);
    step.max(after.unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        map
    }

    #[test]
    fn each_status_has_its_class() {
        let none = HeaderMap::new();
        for status in [200, 204] {
            assert_eq!(classify(status, &none), Class::Success, "{status}");
        }
        for status in [500, 502] {
            assert_eq!(classify(status, &none), Class::RetryOnce, "{status}");
        }
        for status in [408, 429, 503, 504, 599] {
            assert_eq!(classify(status, &none), Class::RetryLater { after: None }, "{status}");
        }
        for status in [301, 302, 400, 401, 403, 404, 409, 422] {
            assert_eq!(classify(status, &none), Class::Refused, "{status}");
        }
    }

    #[test]
    fn a_retry_after_in_seconds_or_as_a_date_is_carried() {
        let later = classify(429, &headers(&[("retry-after", "7")]));
        assert_eq!(later, Class::RetryLater { after: Some(Duration::from_secs(7)) });
        let date = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(120));
        let Class::RetryLater { after: Some(after) } = classify(503, &headers(&[("retry-after", &date)])) else {
            panic!("no Retry-After read from a date")
        };
        assert!(after > Duration::from_secs(100) && after <= Duration::from_secs(120), "{after:?}");
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")])), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "999999")])), Some(MAX_RETRY_AFTER));
    }

    #[test]
    fn a_git_failure_is_read_from_its_output() {
        let said = |s: &str| classify_git(s);
        assert_eq!(said("fatal: unable to access 'x': The requested URL returned error: 502"), Class::RetryOnce);
        assert_eq!(
            said("fatal: unable to access 'x': The requested URL returned error: 429"),
            Class::RetryLater { after: None }
        );
        assert_eq!(said("fatal: unable to access 'x': The requested URL returned error: 403"), Class::Refused);
        assert_eq!(said("fatal: unable to access 'x': Could not resolve host: git.example"), classify_no_answer());
        assert_eq!(said("fatal: unable to access 'x': Failed to connect to 127.0.0.1 port 1"), classify_no_answer());
        assert_eq!(said("fatal: repository 'x' not found"), Class::Refused);
        assert_eq!(said("fatal: remote error: upload-pack: not our ref 0123"), Class::Refused);
    }

    #[test]
    fn the_backoff_grows_to_its_ceiling_and_honours_retry_after() {
        let (first, most) = (Duration::from_secs(1), Duration::from_secs(30));
        let early = backoff(1, first, most, None);
        assert!(early >= first && early <= first * 2, "{early:?}");
        let late = backoff(20, first, most, None);
        assert!(late >= most && late <= most * 2, "{late:?}");
        assert!(backoff(1, first, most, Some(Duration::from_secs(90))) >= Duration::from_secs(90));
    }
}
