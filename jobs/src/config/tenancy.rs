//! Safe retries (IK-1) and, on the api and the workers alike, what one
//! token subject may hold: the `Idempotency-Key` settings.

use super::{duration, ConfigError};
use std::collections::BTreeMap;
use std::time::Duration;

/// The `Idempotency-Key` settings ([`super::Config::tenancy`]).
#[derive(Debug, Clone)]
pub struct TenancyConfig {
    /// `SLIPWAY_IDEMPOTENCY_TTL` (default 24 h): how long a key and the
    /// answer it got are kept; a retry with the key within it is answered
    /// that answer again.
    pub idempotency_ttl: Duration,
    /// `SLIPWAY_IDEMPOTENCY_LEASE` (default 10 min): how long a request
    /// holds its key without an answer before a retry may take it over
    /// (an api killed mid-request); a retry sooner is `409
    /// idempotency_key_in_flight`. Longer than any request takes.
    pub idempotency_lease: Duration,
}

impl TenancyConfig {
    /// Reads the settings from `keys`.
    pub(super) fn from_keys(keys: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        Ok(Self {
            idempotency_ttl: duration(keys, "SLIPWAY_IDEMPOTENCY_TTL", 86_400)?,
            idempotency_lease: duration(keys, "SLIPWAY_IDEMPOTENCY_LEASE", 600)?,
        })
    }
}
