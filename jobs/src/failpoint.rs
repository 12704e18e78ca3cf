//! Fault injection for durability tests: `SLIPWAY_FAILPOINTS=a,b`
//! makes the process abort, as a crash would, when it reaches a named point.
//! Read once from the environment; unset in production, where [`hit`] is a
//! single comparison against an empty list.

use std::sync::OnceLock;

/// The points this process aborts at.
fn armed() -> &'static [String] {
    static POINTS: OnceLock<Vec<String>> = OnceLock::new();
    POINTS.get_or_init(|| {
        std::env::var("SLIPWAY_FAILPOINTS")
            .map(|v| v.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect())
            .unwrap_or_default()
    })
}

/// Aborts the process (no unwinding, no cleanup: a crash) when `name` is armed.
pub fn hit(name: &str) {
    if armed().iter().any(|p| p == name) {
        eprintln!("slipway: failpoint {name}: aborting");
        std::process::abort();
    }
}
