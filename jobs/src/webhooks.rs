//! Webhooks (WH-1): what an operator registers and how each event the
//! fleet records reaches it, signed per the Standard Webhooks
//! specification (<https://www.standardwebhooks.com/>).
//!
//! - An endpoint is a URL checked as a reconcile push's is (DL-2,
//!   [`check_endpoint_url`]: the `SLIPWAY_ALLOWED_ORIGINS` allowlist, no
//!   user information, no address of a refused kind written as the host),
//!   the event types it subscribes to ([`check_events`]: names of
//!   [`EVENT_TYPES`] or `["*"]`) and a `whsec_` secret ([`check_secret`],
//!   or one made by [`generate_secret`]).
//! - Events come from the sources of [`sources`] (the deployment channel,
//!   DL-3, and the rollouts' steps, RO-1); each endpoint's job (`jobs/src/jobs/webhook.rs`) fans
//!   new events out into delivery rows, then sends them one at a time per
//!   endpoint and subject, in order ([`send`]), with the headers of
//!   [`signature`].
//! - The secret is stored in the database and never leaves it but in the
//!   signature and in the `201` that created it (docs/DECISIONS.md).

pub mod send;
pub mod sources;

use crate::callback::{check_url, forbidden_address, Origins};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};

/// The prefix of a Standard Webhooks secret: `whsec_` then base64.
pub const SECRET_PREFIX: &str = "whsec_";

/// The fewest bytes a secret's key may have.
pub const MIN_SECRET_BYTES: usize = 24;
/// The most bytes a secret's key may have.
pub const MAX_SECRET_BYTES: usize = 64;
/// The bytes of a generated secret's key.
pub const GENERATED_SECRET_BYTES: usize = 32;

/// Every event type an endpoint may subscribe to, besides `*`: one per
/// state a deployment enters (DL-3; a build's end is the state it leaves
/// the deployment in: `active`, `failed`, `idle`), then one per step a
/// rollout records (RO-1). An event source added to [`sources`] adds its
/// types here.
pub const EVENT_TYPES: [&str; 13] = [
    "deployment.building",
    "deployment.active",
    "deployment.destroying",
    "deployment.idle",
    "deployment.failed",
    "rollout.started",
    "rollout.wave_started",
    "rollout.wave_completed",
    "rollout.paused",
    "rollout.resumed",
    "rollout.cancelled",
    "rollout.halted",
    "rollout.completed",
];

/// The most event types one endpoint lists.
pub const MAX_EVENTS: usize = 32;
/// The longest description, in bytes.
pub const MAX_DESCRIPTION: usize = 500;

/// Checks a webhook URL when it is registered or changed: [`check_url`]
/// against `origins` and, for a host written as an address, the address
/// table of [`forbidden_address`] unless `allow_private`
/// (`SLIPWAY_CALLBACK_ALLOW_PRIVATE`). A host name is resolved and its
/// addresses checked at each delivery. `Err` is the reason sentence; it
/// never repeats the URL.
pub fn check_endpoint_url(raw: &str, origins: &Origins, allow_private: bool) -> Result<(), String> {
    let url = check_url(raw, origins).map_err(|refusal| refusal.to_string().replace("callback", "webhook"))?;
    let ip = match url.host() {
        Some(url::Host::Ipv4(ip)) => Some(std::net::IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Some(std::net::IpAddr::V6(ip)),
        _ => None,
    };
    if let Some(why) = ip.and_then(forbidden_address) {
        if !allow_private {
            return Err(format!(
                "the webhook host is an address of a refused kind ({why}); deliveries go there only with \
                 SLIPWAY_CALLBACK_ALLOW_PRIVATE=true"
            ));
        }
    }
    Ok(())
}

/// Checks the event types of an endpoint: 1 to [`MAX_EVENTS`] names of
/// [`EVENT_TYPES`], without repeats, or exactly `["*"]`. `Err` names the
/// first one refused.
pub fn check_events(events: &[String]) -> Result<(), String> {
    if events.is_empty() {
        return Err("events must name at least one event type, or be [\"*\"] for all".into());
    }
    if events.len() > MAX_EVENTS {
        return Err(format!("events lists more than {MAX_EVENTS} event types"));
    }
    if events.iter().any(|e| e == "*") {
        return match events.len() {
            1 => Ok(()),
            _ => Err("\"*\" already names every event type; list it alone".into()),
        };
    }
    for (i, event) in events.iter().enumerate() {
        if !EVENT_TYPES.contains(&event.as_str()) {
            return Err(format!(
                "events[{i}] is {:?}, not an event type; they are {}",
                crate::id::quoted(event),
                EVENT_TYPES.join(", ")
            ));
        }
        if events[..i].contains(event) {
            return Err(format!("events[{i}] repeats {event}"));
        }
    }
    Ok(())
}

/// Whether an endpoint subscribed to `events` receives `event_type`.
pub fn subscribes(events: &[String], event_type: &str) -> bool {
    events.iter().any(|e| e == "*" || e == event_type)
}

/// Checks a secret an operator gave: `whsec_` then standard base64 (with
/// or without padding) of [`MIN_SECRET_BYTES`] to [`MAX_SECRET_BYTES`]
/// bytes. The reason never repeats the secret.
pub fn check_secret(secret: &str) -> Result<(), String> {
    let key = secret_key(secret).ok_or_else(|| {
        "secret must be whsec_ followed by the base64 of the key (standard alphabet), as Standard Webhooks \
         libraries take it"
            .to_owned()
    })?;
    if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&key.len()) {
        return Err(format!(
            "secret's key is {} bytes; it must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes",
            key.len()
        ));
    }
    Ok(())
}

/// The key bytes of a `whsec_` secret, `None` when it is not one.
fn secret_key(secret: &str) -> Option<Vec<u8>> {
    let encoded = secret.strip_prefix(SECRET_PREFIX)?;
    let trimmed = encoded.trim_end_matches('=');
    base64::engine::general_purpose::STANDARD_NO_PAD.decode(trimmed).ok()
}

/// A new secret: `whsec_` and the base64 of [`GENERATED_SECRET_BYTES`]
/// random bytes from rand's thread generator (a CSPRNG seeded by the
/// operating system).
pub fn generate_secret() -> SecretString {
    use rand::RngCore as _;
    let mut key = [0u8; GENERATED_SECRET_BYTES];
    rand::rng().fill_bytes(&mut key);
    let secret = format!("{SECRET_PREFIX}{}", base64::engine::general_purpose::STANDARD.encode(key));
    key.fill(0);
    SecretString::from(secret)
}

/// The `webhook-signature` value of message `id` sent at `timestamp`
/// (Unix seconds) with `body`: `v1,` and the base64 of HMAC-SHA256 over
/// `{id}.{timestamp}.{body}`, keyed by the secret's decoded key. `None`
/// when the stored secret is not a `whsec_` one (never stored so).
pub fn signature(secret: &SecretString, id: &str, timestamp: i64, body: &str) -> Option<String> {
    let key = secret_key(secret.expose_secret())?;
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).ok()?;
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    Some(format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())))
}

/// RFC 3339 in UTC with milliseconds (`2026-11-29T22:04:05.070Z`).
pub fn rfc3339(ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let format =
        time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    t.format(&format).unwrap_or_default()
}

/// How many deliveries one run of an endpoint's job ended, by outcome, for
/// the worker's metrics (`slipway_webhook_deliveries_total`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Answered with a `2xx`.
    pub delivered: u64,
    /// Failed, to be tried again.
    pub retrying: u64,
    /// Failed for good (refused, or out of the retry window).
    pub failed: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_matches_the_specification_example() {
        // The example of the Standard Webhooks specification's test vectors.
        let secret = SecretString::from("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let body = r#"{"test": 2432232314}"#;
        let sig = signature(&secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body).unwrap();
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn secrets_are_checked_without_being_repeated() {
        assert!(check_secret(generate_secret().expose_secret()).is_ok());
        let short = format!("{SECRET_PREFIX}{}", base64::engine::general_purpose::STANDARD.encode([7u8; 8]));
        let err = check_secret(&short).unwrap_err();
        assert!(err.contains("8 bytes") && !err.contains(&short), "{err}");
        assert!(check_secret("plain-password-here-long-enough").is_err());
        assert!(check_secret("whsec_not base64!").is_err());
    }

    #[test]
    fn events_name_known_types_or_all() {
        assert!(check_events(&["*".into()]).is_ok());
        assert!(check_events(&["deployment.active".into(), "deployment.failed".into()]).is_ok());
        assert!(check_events(&[]).is_err());
        assert!(check_events(&["*".into(), "deployment.active".into()]).is_err());
        assert!(check_events(&["deployment.exploded".into()]).unwrap_err().contains("events[0]"));
        assert!(check_events(&["deployment.active".into(), "deployment.active".into()]).is_err());
    }
}
