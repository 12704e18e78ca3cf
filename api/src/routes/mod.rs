//! Route handlers, one file per resource. Handlers only adapt HTTP to
//! `slipway_jobs`; views (the JSON shapes) live next to their handlers.

pub mod builds;
pub mod changes;
pub mod deployments;
pub mod drafts;
pub mod events;
pub mod fleet;
pub mod health;
pub mod rollouts;
pub mod sbom;
pub mod sources;
pub mod webhooks;

/// RFC 3339 in UTC with exactly three fractional digits
/// (`2026-11-29T22:04:05.070Z`), so timestamps also sort as strings.
pub fn rfc3339(ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let format =
        time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    t.format(&format).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_always_have_three_fractional_digits() {
        assert_eq!(super::rfc3339(1_764_453_845_070), "2025-11-29T22:04:05.070Z");
        assert_eq!(super::rfc3339(1_764_453_845_000), "2025-11-29T22:04:05.000Z");
    }
}
