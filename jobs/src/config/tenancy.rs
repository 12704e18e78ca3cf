//! Safe retries (IK-1) and fair shares per tenant (FS-1), on the api and
//! the workers alike: the `Idempotency-Key` settings and what one tenant
//! may hold.

use super::{duration, number, ConfigError};
use std::collections::BTreeMap;
use std::time::Duration;

/// The `Idempotency-Key` and tenant settings ([`super::Config::tenancy`]).
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
    /// `SLIPWAY_TENANT_CLAIM` (default: none): the token claim (a string)
    /// that names a build's tenant; without it, or in a token without the
    /// claim, the tenant is the token's `iss` and `sub`.
    pub tenant_claim: Option<String>,
    /// `TENANT_BUILD_SLOTS` (default: off): builds one tenant runs at once
    /// across the fleet; a worker holds another build of a tenant at its
    /// cap back and looks again later.
    pub tenant_build_slots: Option<u32>,
    /// `TENANT_QUEUE_SIZE` (default: off): builds one tenant may have
    /// waiting; a submit past it is refused `429 tenant_queue_full` before
    /// its body is read.
    pub tenant_queue_size: Option<u32>,
}

impl TenancyConfig {
    /// Reads the settings from `keys`.
    pub(super) fn from_keys(keys: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        Ok(Self {
            idempotency_ttl: duration(keys, "SLIPWAY_IDEMPOTENCY_TTL", 86_400)?,
            idempotency_lease: duration(keys, "SLIPWAY_IDEMPOTENCY_LEASE", 600)?,
            tenant_claim: match keys.get("SLIPWAY_TENANT_CLAIM").map(|v| v.trim()).filter(|v| !v.is_empty()) {
                None => None,
                Some(v) if v.len() <= 256 && v.bytes().all(|b| b.is_ascii_graphic()) => Some(v.to_owned()),
                Some(v) => {
                    return Err(ConfigError::Invalid {
                        key: "SLIPWAY_TENANT_CLAIM",
                        value: v.to_owned(),
                        reason: "expected a claim name: 1 to 256 visible ASCII characters",
                    })
                }
            },
            tenant_build_slots: optional_number(keys, "TENANT_BUILD_SLOTS")?,
            tenant_queue_size: optional_number(keys, "TENANT_QUEUE_SIZE")?,
        })
    }
}

/// A count that is off unless set (`off` or empty: off).
fn optional_number(keys: &BTreeMap<String, String>, key: &'static str) -> Result<Option<u32>, ConfigError> {
    match keys.get(key).map(|v| v.trim()) {
        None | Some("" | "off") => Ok(None),
        Some(_) => number(keys, key, 1).map(Some),
    }
}
