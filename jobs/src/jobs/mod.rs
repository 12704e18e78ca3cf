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
/// and database outages.
pub const BUILD_JOB_ATTEMPTS: usize = 10;

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
