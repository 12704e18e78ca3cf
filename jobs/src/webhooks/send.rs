//! One attempt of a webhook delivery (WH-1): the URL checked again and its
//! host resolved and checked as a reconcile push's
//! ([`crate::callback::checked_client`]: the allowlist of this moment, no
//! address of a refused kind, no second resolution, no proxy, no redirect
//! followed), a POST of the stored body with the Standard Webhooks headers,
//! within a deadline, reading at most [`EXCERPT_BYTES`] of the answer.

use crate::callback::{checked_client, classify_request_error, Origins, PushError, Resolve};
use crate::outbound::{classify, Class};
use secrecy::{ExposeSecret, SecretString};
use std::time::{Duration, Instant};

/// The most bytes of an answer's body read and kept (the rest is never read).
pub const EXCERPT_BYTES: usize = 256;

/// One attempt to make.
pub struct Attempt<'a> {
    /// The endpoint's URL as stored.
    pub url: &'a str,
    /// The `webhook-id`: the delivery's id, the same at every attempt.
    pub id: &'a str,
    /// The exact body.
    pub body: &'a str,
    /// The endpoint's secret.
    pub secret: &'a SecretString,
    /// `SLIPWAY_ALLOWED_ORIGINS` now.
    pub origins: &'a Origins,
    /// `SLIPWAY_CALLBACK_ALLOW_PRIVATE`.
    pub allow_private: bool,
    /// Resolves the host name, once.
    pub resolver: &'a dyn Resolve,
    /// The attempt's deadline (`WEBHOOK_TIMEOUT`).
    pub deadline: Duration,
    /// The `webhook-timestamp`, Unix seconds.
    pub timestamp: i64,
}

/// What an attempt gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// How the answer (or its absence) classifies.
    pub class: Class,
    /// The answer's status, when one came.
    pub status: Option<u16>,
    /// Why no answer came, or `status` for an answer that is not a `2xx`.
    pub error: Option<&'static str>,
    /// The start of the answer's body, with the secret taken out.
    pub excerpt: Option<String>,
}

/// Makes one attempt. A URL or address refused now, a failed resolution or
/// connection, or a timeout is an answer-less [`Sent`]; never an error.
/// A refused URL or address is [`Class::Refused`]: retrying cannot fix it.
pub async fn attempt(a: Attempt<'_>) -> Sent {
    let started = Instant::now();
    let (url, client, _addrs) =
        match checked_client(a.url, a.origins, a.allow_private, a.resolver, a.deadline, started).await {
            Ok(checked) => checked,
            Err(outcome) => {
                let error = outcome.error.unwrap_or(PushError::RequestFailed);
                let class = match error {
                    PushError::RefusedOrigin | PushError::RefusedAddress => Class::Refused,
                    _ => crate::outbound::classify_no_answer(),
                };
                return Sent { class, status: None, error: Some(error.as_str()), excerpt: None };
            }
        };
    let Some(signature) = super::signature(a.secret, a.id, a.timestamp, a.body) else {
        return Sent { class: Class::Refused, status: None, error: Some("bad_secret"), excerpt: None };
    };
    let sent = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("webhook-id", a.id)
        .header("webhook-timestamp", a.timestamp.to_string())
        .header("webhook-signature", signature)
        .body(a.body.to_owned())
        .send()
        .await;
    let mut response = match sent {
        Ok(response) => response,
        Err(e) => {
            let error = classify_request_error(&e);
            return Sent {
                class: crate::outbound::classify_no_answer(),
                status: None,
                error: Some(error.as_str()),
                excerpt: None,
            };
        }
    };
    let status = response.status().as_u16();
    let class = if response.status().is_redirection() { Class::Refused } else { classify(status, response.headers()) };
    let mut bytes: Vec<u8> = Vec::new();
    let left = a.deadline.saturating_sub(started.elapsed());
    let read = tokio::time::timeout(left, async {
        // Past the excerpt by a secret's length, so a secret across its end
        // is still found and taken out.
        while bytes.len() < EXCERPT_BYTES + 128 {
            match response.chunk().await {
                Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
                _ => break,
            }
        }
    })
    .await;
    drop(read);
    bytes.truncate(EXCERPT_BYTES + 128);
    let mut excerpt = redact(&String::from_utf8_lossy(&bytes), a.secret);
    if excerpt.len() > EXCERPT_BYTES {
        let mut end = EXCERPT_BYTES;
        while !excerpt.is_char_boundary(end) {
            end -= 1;
        }
        excerpt.truncate(end);
    }
    let error = match class {
        Class::Success => None,
        _ if response_is_redirect(status) => Some("redirect"),
        _ => Some("status"),
    };
    Sent { class, status: Some(status), error, excerpt: (!excerpt.is_empty()).then_some(excerpt) }
}

fn response_is_redirect(status: u16) -> bool {
    (300..400).contains(&status)
}

/// `text` with the secret, and its key part alone, replaced by
/// `[redacted]` (an endpoint that echoes what it got never puts the secret
/// in the delivery log).
pub fn redact(text: &str, secret: &SecretString) -> String {
    let whole = secret.expose_secret();
    let key = whole.strip_prefix(super::SECRET_PREFIX).unwrap_or(whole).trim_end_matches('=');
    let mut out = text.replace(whole, "[redacted]");
    if key.len() >= 16 {
        out = out.replace(key, "[redacted]");
    }
    out
}
