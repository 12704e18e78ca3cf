//! Job bodies (PRODUCT.md §6): each job's payload is a small serde type in
//! [`crate::store::queue`] carrying ids, and its body an
//! `async fn run(payload, &Ctx)` ([`Job`]); the apalis handler in `worker/`
//! only adapts.
//!
//! A build, top to bottom: [`build_job`] is the frame of every build (claim
//! → run the kind → record); [`deploy`] is what a deploy adds and
//! [`destroy`] what a destroy adds, each run by
//! `workspace::run_kind` in the attempt's [`workspace`], with its log in
//! the database ([`build_log`]) and, for a deploy, its operator secrets
//! ([`operator_secrets`]); [`outcome`] is what a run gives the frame to
//! record, [`effect_output`] what an effect leaves behind. A deploy's
//! success queues [`readiness`], which probes its instances; a destroy's
//! end queues its [`callback`]. [`nix`] runs the `nix` queue's jobs and
//! [`sweep`] is the periodic retention sweep.
//!
//! Imports go one way: `build_job` → `deploy`, `destroy` → `workspace` →
//! `build_log`, `operator_secrets` → `outcome`, `effect_output` → `report`
//! → `timing`; any file may import this one, which imports none of them.

pub mod build_job;
pub mod build_log;
pub mod callback;
pub mod deploy;
pub mod destroy;
pub mod effect_output;
pub mod health_gate;
pub mod nix;
pub mod operator_secrets;
pub mod outcome;
pub mod readiness;
pub mod report;
pub mod sweep;
pub mod timing;
pub mod webhook;
pub mod workspace;

use crate::config::Config;
use crate::store::queue::JobKind;
use crate::store::Db;
use std::path::PathBuf;
use std::sync::Arc;

/// How long a job waits before it gives its failed attempt back to the
/// queue: 1 s, 2 s, 4 s, … capped at 60 s. apalis re-queues a failed job at
/// once, so the backoff is ours (§6: deploy and destroy are resumed, never
/// retried for a failed effect; kinds marked "none" or "never" run once).
pub fn retry_backoff(attempt: usize) -> std::time::Duration {
    let secs = 1u64.checked_shl(attempt.min(16) as u32).unwrap_or(u64::MAX).min(60);
    std::time::Duration::from_secs(secs)
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
    /// What this worker process knows of itself, shared by its job bodies.
    pub process: Arc<WorkerProcess>,
}

/// The state one worker process keeps about itself (never stored).
#[derive(Debug)]
pub struct WorkerProcess {
    /// Builds this process runs now (their ids).
    running: std::sync::Mutex<Vec<String>>,
    /// Set when the process stops at once: no build records an outcome any more.
    abandoned: std::sync::atomic::AtomicBool,
    /// Since when this process has reached the database without a failed
    /// heartbeat; `None` while it cannot. A worker judges another dead only
    /// after it could see the database itself for the whole missed-beat window.
    reachable_since: std::sync::Mutex<Option<std::time::Instant>>,
    /// This process's apalis workers that register again after a failure
    /// (by name): its heartbeats leave their rows alone meanwhile.
    rejoining: std::sync::Mutex<Vec<String>>,
}

impl Default for WorkerProcess {
    fn default() -> Self {
        Self {
            running: Default::default(),
            abandoned: Default::default(),
            reachable_since: std::sync::Mutex::new(Some(std::time::Instant::now())),
            rejoining: Default::default(),
        }
    }
}

impl WorkerProcess {
    /// Records that build `id` runs in this process until the guard drops.
    pub(crate) fn enter(self: &Arc<Self>, id: &str) -> RunningBuild {
        self.running.lock().expect("running builds lock").push(id.to_owned());
        RunningBuild { process: Arc::clone(self), id: id.to_owned() }
    }

    /// Records that this process's apalis worker `name` registers again
    /// after a failure, until the guard drops: heartbeats leave its row
    /// alone meanwhile ([`Ctx::rejoin`]).
    pub fn rejoining(self: &Arc<Self>, name: &str) -> Rejoining {
        self.rejoining.lock().expect("rejoining lock").push(name.to_owned());
        Rejoining { process: Arc::clone(self), name: name.to_owned() }
    }

    /// Whether build `id` runs in this process.
    pub fn runs(&self, id: &str) -> bool {
        self.running.lock().expect("running builds lock").iter().any(|b| b == id)
    }

    /// The builds this process runs now.
    pub fn running(&self) -> Vec<String> {
        self.running.lock().expect("running builds lock").clone()
    }

    /// Called when the process stops at once (a worker's second SIGTERM),
    /// before it kills its effects: no build of this process records an
    /// outcome from then on, so an effect killed by the stop is never taken
    /// for a failure; another worker takes the builds over.
    pub fn abandon(&self) {
        self.abandoned.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether [`WorkerProcess::abandon`] was called.
    pub fn abandoned(&self) -> bool {
        self.abandoned.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Records a heartbeat of this worker: `reached` when it reached the
    /// database. Returns whether that changed: `Some(false)` when the
    /// database has just gone away, `Some(true)` when it has just come back.
    pub fn beat(&self, reached: bool) -> Option<bool> {
        let mut since = self.reachable_since.lock().expect("reachability lock");
        match (reached, *since) {
            (true, None) => {
                *since = Some(std::time::Instant::now());
                Some(true)
            }
            (false, Some(_)) => {
                *since = None;
                Some(false)
            }
            _ => None,
        }
    }

    /// For how long this process has reached the database without a failure.
    pub fn reachable_for(&self) -> std::time::Duration {
        self.reachable_since.lock().expect("reachability lock").map_or(std::time::Duration::ZERO, |s| s.elapsed())
    }
}

/// Removes a build from [`WorkerProcess`]'s running builds when its run ends, however it ends.
pub(crate) struct RunningBuild {
    process: Arc<WorkerProcess>,
    id: String,
}

/// An apalis worker of this process registering again ([`WorkerProcess::rejoining`]);
/// its heartbeats resume when this drops.
#[derive(Debug)]
pub struct Rejoining {
    process: Arc<WorkerProcess>,
    name: String,
}

impl Drop for Rejoining {
    fn drop(&mut self) {
        let mut rejoining = self.process.rejoining.lock().expect("rejoining lock");
        if let Some(i) = rejoining.iter().position(|n| *n == self.name) {
            rejoining.remove(i);
        }
    }
}

impl Drop for RunningBuild {
    fn drop(&mut self) {
        self.process.running.lock().expect("running builds lock").retain(|b| *b != self.id);
    }
}

/// The folder, in the attempt's work folder, that holds the values handed
/// to the effect: `secrets/<application>/<instance>/<field>`, each name as
/// OpenBao's entry names it ([`crate::openbao::escape_segment`];
/// [`operator_secrets`]).
pub const SECRETS_DIR: &str = "secrets";

/// The folders of an attempt's work folder that go as soon as the attempt
/// can no longer run: its effect's scratch folder (`TMPDIR`) and the
/// operator secrets handed to it.
pub(crate) const DISPOSABLE: [&str; 2] = ["tmp", SECRETS_DIR];

/// How long a finished build keeps trying to record its end while the
/// database is away, before it gives the job back (and the effect re-runs).
pub(crate) const RECORD_PATIENCE: std::time::Duration = std::time::Duration::from_secs(600);

impl Ctx {
    /// A context for worker `worker` (a name no other process has).
    pub fn new(db: Db, config: Arc<Config>, worker: impl Into<String>, echo_log: bool) -> Self {
        Self { db, config, worker: worker.into(), echo_log, process: Arc::default() }
    }

    /// Records this worker's heartbeat and tells [`WorkerProcess`] whether the
    /// database answered. A database that stops or starts answering is
    /// logged once each way, not on every beat.
    pub async fn beat(&self) {
        let rejoining = self.process.rejoining.lock().expect("rejoining lock").clone();
        let beat = async {
            crate::store::heartbeats::keep_alive(&mut self.db.acquire().await?, &self.worker, &rejoining).await
        };
        let result = beat.await;
        match (self.process.beat(result.is_ok()), result) {
            (Some(false), Err(e)) => tracing::error!(
                error = %e,
                "the database is away: builds that end meanwhile wait to record their end (logged once per outage)"
            ),
            (Some(true), _) => tracing::info!("the database answers again"),
            (_, Err(e)) => tracing::debug!(error = %e, "could not record this worker's heartbeat"),
            _ => {}
        }
    }

    /// Readies this process's apalis worker `name` (its `builds` worker or
    /// a sibling) to register again after it failed: heartbeats leave its
    /// row alone until the returned guard drops, and the row is made to
    /// look old enough for apalis to take the name again
    /// ([`crate::store::heartbeats::make_registrable`]): apalis refuses to
    /// register a name whose row looks alive, and this process's own beats
    /// keep it so. A failure here is logged and
    /// left to the registration, which fails and is tried again.
    /// `interval` is apalis's heartbeat interval.
    pub async fn rejoin(&self, name: &str, interval: std::time::Duration) -> Rejoining {
        let guard = self.process.rejoining(name);
        let aged =
            async { crate::store::heartbeats::make_registrable(&mut self.db.acquire().await?, name, interval).await };
        if let Err(e) = aged.await {
            tracing::debug!(error = %e, queue_worker = %name, "could not ready the queue worker's row to register again");
        }
        guard
    }

    /// Hands back, in one transaction, the builds and claimed jobs of this
    /// worker (stopping at once, after its effects were killed), so another
    /// worker takes them over at once ([`crate::store::heartbeats::release`]).
    /// Returns how many jobs were handed back.
    pub async fn hand_back(&self) -> Result<u64, crate::store::StoreError> {
        let mut tx = self.db.begin_write().await?;
        let jobs = crate::store::heartbeats::release(&mut tx, &self.worker).await?;
        tx.commit().await?;
        Ok(jobs)
    }

    /// The work folder of one build: `<state dir>/builds/<build id>`; each
    /// attempt works in a folder of its own inside it ([`Ctx::attempt_dir`]).
    pub fn work_dir(&self, build_id: &str) -> PathBuf {
        self.config.state_dir.join("builds").join(build_id)
    }

    /// The work folder of one attempt of a build: `<work dir>/attempt-<n>`.
    pub fn attempt_dir(&self, build_id: &str, attempt: i64) -> PathBuf {
        self.work_dir(build_id).join(format!("attempt-{attempt}"))
    }

    /// Removes the scratch folders (`attempt-<n>/tmp`, an effect's
    /// `TMPDIR`) and handed operator secrets (`attempt-<n>/secrets`) of
    /// the builds this process runs: for a worker stopping at
    /// once, after it killed its effects, which would otherwise remove
    /// their own as they end, racing the process's exit. Returns how
    /// many it removed; one that cannot be removed is logged and left to
    /// the sweep.
    pub fn remove_running_scratch(&self) -> usize {
        let mut removed = 0;
        for build_id in self.process.running() {
            for attempt in std::fs::read_dir(self.work_dir(&build_id)).into_iter().flatten().flatten() {
                for folder in DISPOSABLE {
                    match std::fs::remove_dir_all(attempt.path().join(folder)) {
                        Ok(()) => removed += 1,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => tracing::warn!(build.id = %build_id, error = %e, "cannot remove a scratch folder"),
                    }
                }
            }
        }
        removed
    }

    /// The provider state folder of one deployment: `<state dir>/provider/<id>`.
    pub fn provider_state_dir(&self, deployment: &str) -> PathBuf {
        self.config.state_dir.join("provider").join(deployment)
    }

    /// The folder of a plan's GC roots on this host (a dry run's
    /// `PLAN_ROOTS_DIR`): `<state dir>/plans/<deployment>/<build id>`, one
    /// indirect GC root per planned node's system, kept until the plan is
    /// applied ([`sweep::drop_plan_roots`]) or older than `PLAN_TTL`
    /// (the retention sweep).
    pub fn plan_roots_dir(&self, deployment: &str, build_id: &str) -> PathBuf {
        self.plans_dir().join(deployment).join(build_id)
    }

    /// Where every plan's GC roots sit on this host: `<state dir>/plans`.
    pub fn plans_dir(&self) -> PathBuf {
        self.config.state_dir.join("plans")
    }

    /// The lock file one deployment's effects hold on this host:
    /// `<state dir>/locks/<id>.lock`.
    pub fn deployment_lock(&self, deployment: &str) -> PathBuf {
        self.config.state_dir.join("locks").join(format!("{deployment}.lock"))
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

/// A job kind's body, implemented next to it: what the apalis handler in
/// `worker/` runs for each job of the kind's queue (crates.io's
/// `BackgroundJob`).
pub trait Job: JobKind {
    /// What a run that ended says (`()` but for builds: [`build_job::Ran`]).
    type Output: Send + 'static;
    /// The job's name in the worker's log (`<NAME> job could not record its end`).
    const NAME: &'static str;
    /// Runs the job to its recorded end. An error is a failure of the
    /// machinery (the database): the job goes back to the queue.
    fn run(self, ctx: &Ctx) -> impl std::future::Future<Output = Result<Self::Output, JobError>> + Send;
    /// The span the job runs in, on worker `worker`.
    fn span(&self, worker: &str) -> tracing::Span;
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
