//! What the webhook deliveries read (WH-1), on the workers; the api reads
//! nothing of it but shows it nowhere.

use std::time::Duration;

/// Webhook delivery settings ([`super::Config::webhooks`]).
#[derive(Debug, Clone)]
pub struct WebhooksConfig {
    /// `WEBHOOK_RETRY_WINDOW` (default 24 h): how long a failing delivery
    /// is tried again, and how long an endpoint may fail every attempt
    /// before it is disabled.
    pub retry_window: Duration,
    /// `WEBHOOK_POLL` (default 2 s): how often an endpoint's delivery job
    /// looks for new events and due retries.
    pub poll: Duration,
    /// `WEBHOOK_TIMEOUT` (default 10 s): one attempt's deadline, from the
    /// name's resolution to the end of the (bounded) answer.
    pub attempt_timeout: Duration,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        Self {
            retry_window: Duration::from_secs(86_400),
            poll: Duration::from_secs(2),
            attempt_timeout: Duration::from_secs(10),
        }
    }
}

impl WebhooksConfig {
    /// The longest pause between two attempts of a delivery: an hour, or
    /// an eighth of the retry window when that is shorter (at least 1 s),
    /// so a window holds several attempts.
    pub fn max_backoff(&self) -> Duration {
        (self.retry_window / 8).clamp(Duration::from_secs(1), Duration::from_secs(3600))
    }
}
