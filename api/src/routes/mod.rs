//! Route handlers, one file per resource. Handlers only adapt HTTP to
//! `slipway_jobs`; views (the JSON shapes) live next to their handlers.

pub mod builds;
pub mod deployments;
pub mod public;
pub mod sbom;

/// RFC 3339 (UTC, milliseconds) of Unix milliseconds.
pub fn rfc3339(ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    t.format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}
