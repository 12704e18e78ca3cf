//! Job payloads and job bodies (PRODUCT.md §6).
//!
//! Each job is a small serde payload carrying ids, and an
//! `async fn run(payload, &Ctx)`; the apalis handler in `worker/` only adapts.
//! [`build::run`] takes a `builds`-queue job, claims the build and hands it to
//! [`deploy`] or [`destroy`], then records the outcome.

pub mod build;
pub mod deploy;
pub mod destroy;
pub mod report;
pub mod sweep;

use crate::config::Config;
use crate::store::Db;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// The apalis queue deploys and destroys share (§6).
pub const BUILDS_QUEUE: &str = "builds";

/// How many times apalis may hand a build job out. A build whose worker died
/// is handed out again; the job body itself never asks for a retry of a
/// failed effect (the build is failed instead), so this bounds only crashes
/// and database outages: with [`retry_backoff`] about 15 minutes of outage.
pub const BUILD_JOB_ATTEMPTS: usize = 20;

/// Heartbeats a worker may miss before its builds go to another worker.
pub const MISSED_HEARTBEATS: u32 = 2;

/// How long a job waits before it gives its failed attempt back to the
/// queue: 1 s, 2 s, 4 s, … capped at 60 s. apalis re-queues a failed job at
/// once, so the backoff is ours (§6: deploy and destroy are resumed, never
/// retried for a failed effect; kinds marked "none" or "never" run once).
pub fn retry_backoff(attempt: usize) -> std::time::Duration {
    let secs = 1u64.checked_shl(attempt.min(16) as u32).unwrap_or(u64::MAX).min(60);
    std::time::Duration::from_secs(secs)
}

#[cfg(test)]
mod tests {
    use super::retry_backoff;
    use std::time::Duration;

    #[test]
    fn backoff_doubles_from_one_second_up_to_a_minute() {
        let waits: Vec<u64> = (0..9).map(|a| retry_backoff(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(retry_backoff(usize::MAX), Duration::from_secs(60));
    }
}

/// A deploy or destroy job: the build to run (its kind is on the row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildJob {
    /// The ST-4 build id.
    pub build_id: String,
}

/// What a job body needs from its surroundings.
#[derive(Clone)]
pub struct Ctx {
    /// The database.
    pub db: Db,
    /// The configuration (§12).
    pub config: Arc<Config>,
    /// This worker's unique name (recorded on the builds it runs).
    pub worker: String,
    /// Also copy effect output to stderr (local runs, §11).
    pub echo_log: bool,
}

impl Ctx {
    /// The work folder of one build: `<state dir>/builds/<build id>`.
    pub fn work_dir(&self, build_id: &str) -> PathBuf {
        self.config.state_dir.join("builds").join(build_id)
    }

    /// The provider state folder of one deployment: `<state dir>/provider/<id>`.
    pub fn provider_state_dir(&self, deployment: &str) -> PathBuf {
        self.config.state_dir.join("provider").join(deployment)
    }
}

/// A failure of the machinery around a job (the database), as opposed to a
/// failed effect, which is a failed build. apalis hands the job out again.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}
