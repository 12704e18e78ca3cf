//! What plans, applies and rollbacks read, on the api and the workers
//! alike (PRODUCT.md §13 "Safe change").

use std::time::Duration;

/// Plans' lifetime and the generations kept for rollbacks
/// ([`super::Config::safe_change`]).
#[derive(Debug, Clone)]
pub struct SafeChangeConfig {
    /// `PLAN_TTL` (default 1 h): how long a plan (a dry run) can be
    /// applied, and how long its systems are kept from Nix's garbage
    /// collector.
    pub plan_ttl: Duration,
    /// `KEEP_GENERATIONS` (default 5): each node keeps GC roots for the
    /// systems of this many of its latest successful deploys, so that a
    /// rollback to one of them activates the same store paths without a
    /// rebuild.
    pub keep_generations: u32,
    /// `HEALTH_GATE` (default: none): the health gate of a submit that
    /// names none, `<timeout>` or `<timeout>,rollback` (`5m,rollback`).
    pub health_gate: Option<crate::provenance::HealthGate>,
}
