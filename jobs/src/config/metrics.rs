//! Where a worker serves its own metrics, and who may scrape them.

use secrecy::SecretString;

/// The metrics endpoints ([`super::Config::metrics`], docs/METRICS.md).
#[derive(Debug, Clone)]
pub struct MetricsConfig {
    /// `SLIPWAY_METRICS_ADDR`: where a worker serves its own metrics
    /// (`GET /metrics`, docs/METRICS.md); `None` (the default): it serves none.
    /// The api serves its metrics on its own address and ignores this.
    pub addr: Option<String>,
    /// `SLIPWAY_METRICS_TOKEN`: when set, `GET /metrics` (the api's and a
    /// worker's) answers only `Authorization: Bearer <this token>`;
    /// unset: anyone who reaches the address may scrape.
    pub token: Option<SecretString>,
}
