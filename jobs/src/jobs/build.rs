//! The `builds` queue job: claim the build, run its deploy or destroy, record
//! the outcome (and SBOM changes) in one transaction, dispatch the next build
//! of the deployment (ST-2).

use super::report::Report;
use super::{deploy, destroy, BuildJob, Ctx, JobError};
use crate::effect::{EffectOutcome, EffectSpec, LogSink};
use crate::source::ModuleSource;
use crate::state::{BuildKind, BuildStatus};
use crate::store::builds::{self, BuildRow, Finish};
use crate::store::sboms::{self, NodeSbom};
use crate::store::{now_ms, Db};
use futures::future::BoxFuture;
use futures::FutureExt;
use std::path::PathBuf;
use std::time::Instant;
use tracing::Instrument;

/// What a finished effect changes besides the build row.
#[derive(Debug, Clone)]
pub enum SbomChange {
    /// Nothing (a failed build changes no SBOM).
    None,
    /// A successful deploy: these nodes' SBOMs replace the deployment's.
    Replace(Vec<(String, NodeSbom)>),
    /// A successful destroy: every SBOM of the deployment goes.
    RemoveAll,
}

/// A job body's result: the report and the SBOM change it implies.
#[derive(Debug)]
pub struct Outcome {
    /// The run report (its status decides the build's).
    pub report: Report,
    /// SBOM change to store with the build's end.
    pub sboms: SbomChange,
}

/// What happened to a job.
#[derive(Debug)]
pub enum Ran {
    /// The build was already finished (a repeated delivery): nothing ran.
    AlreadyFinished,
    /// The build ran and ended with this report.
    Finished(Report),
    /// Another worker took the build over while it ran; its outcome was discarded.
    LostRace,
    /// The build runs on a live worker (its job was handed out again after
    /// a database outage); a new job looks again later.
    Deferred,
    /// This process is stopping at once ([`abandon_running_builds`]): the
    /// outcome was not recorded and another worker runs the build again.
    Abandoned,
}

static ABANDONED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Called when the process stops at once (a worker's second SIGTERM), before
/// it kills its effects: no build of this process records an outcome from
/// then on, so an effect killed by the stop is never taken for a failure;
/// the builds stay `running` and another worker takes them over.
pub fn abandon_running_builds() {
    ABANDONED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Runs one `builds` job (§6 `deploy`/`destroy`).
pub async fn run(job: BuildJob, ctx: &Ctx) -> Result<Ran, JobError> {
    if let Some(owner) = live_owner(&job.build_id, ctx).await? {
        tracing::info!(build.id = %job.build_id, worker.name = %owner, "the build runs on a live worker; looking again later");
        builds::push_recheck(&ctx.db, &job.build_id, takeover_window(ctx)).await?;
        return Ok(Ran::Deferred);
    }
    let Some(build) = builds::claim(&ctx.db, &job.build_id, &ctx.worker).await? else {
        return Ok(Ran::AlreadyFinished);
    };
    let span = tracing::info_span!(
        "build",
        build.id = %build.id,
        deployment.id = %build.deployment_id,
        build.kind = build.kind.as_str(),
        build.attempt = build.attempts
    );
    run_claimed(build, ctx).instrument(span).await
}

/// How stale a worker's heartbeat must be before its builds are taken over.
fn takeover_window(ctx: &Ctx) -> std::time::Duration {
    ctx.config.heartbeat * super::MISSED_HEARTBEATS
}

/// Builds this process runs now (their ids).
static RUNNING_HERE: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Removes a build from [`RUNNING_HERE`] when its run ends, however it ends.
struct RunningHere(String);

impl RunningHere {
    fn enter(id: &str) -> Self {
        RUNNING_HERE.lock().expect("running builds lock").push(id.to_owned());
        Self(id.to_owned())
    }
}

impl Drop for RunningHere {
    fn drop(&mut self) {
        RUNNING_HERE.lock().expect("running builds lock").retain(|b| *b != self.0);
    }
}

/// The live worker that runs build `id`, if any. A build's job can be handed
/// out again while its worker still runs it: after a database outage every
/// worker's heartbeat looks stale at once. So a `running` build is taken over
/// only when its worker is gone: not this process's own running build, and
/// a heartbeat older than the missed-beat window, still so one heartbeat
/// later (a live worker beats every half heartbeat once the database is back).
async fn live_owner(id: &str, ctx: &Ctx) -> Result<Option<String>, JobError> {
    let window_ms = takeover_window(ctx).as_millis() as i64;
    let owner = {
        let mut conn = ctx.db.acquire().await?;
        match builds::get(&mut conn, id).await? {
            Some(b) if b.status == BuildStatus::Running => b.worker,
            _ => None,
        }
    };
    let Some(owner) = owner else { return Ok(None) };
    if owner == ctx.worker {
        let mine = RUNNING_HERE.lock().expect("running builds lock").iter().any(|b| b == id);
        return Ok(mine.then_some(owner));
    }
    for look in 0..2 {
        if look > 0 {
            tokio::time::sleep(ctx.config.heartbeat).await;
        }
        match crate::store::db::worker_heartbeat_age_ms(&ctx.db, &owner).await? {
            Some(age) if age < window_ms => return Ok(Some(owner)),
            Some(_) => {}
            // Not a registered worker at all (a local run's build): gone.
            None => return Ok(None),
        }
    }
    Ok(None)
}

async fn run_claimed(build: BuildRow, ctx: &Ctx) -> Result<Ran, JobError> {
    let _here = RunningHere::enter(&build.id);
    tracing::info!("build started");
    let started = Instant::now();
    let mut outcome = match build.kind {
        // Cancelled while its worker was dead: it is not run again, and what
        // that worker left running on this host is stopped.
        _ if build.cancel_requested => {
            crate::effect::kill_marked(&build.id);
            Outcome { report: cancelled(blank_report(&build)), sboms: SbomChange::None }
        }
        BuildKind::Deploy => deploy::run(&build, ctx).await,
        BuildKind::Destroy => destroy::run(&build, ctx).await,
    };
    if ABANDONED.load(std::sync::atomic::Ordering::SeqCst) {
        tracing::warn!("this worker is stopping at once; the build is left for another worker");
        return Ok(Ran::Abandoned);
    }
    outcome.report.duration_ms = started.elapsed().as_millis() as i64;
    outcome.report.summarise();
    let report = outcome.report;
    let finish = Finish {
        status: report.status,
        reason: report.reason.clone(),
        error: report.error.clone(),
        report: serde_json::to_value(&report).expect("report serialises"),
    };
    let stored = record(ctx, &build, &finish, outcome.sboms).await?;
    if !stored {
        tracing::warn!("build was taken over by another worker; this run's outcome is discarded");
        return Ok(Ran::LostRace);
    }
    match report.status {
        BuildStatus::Succeeded => tracing::info!(duration_ms = report.duration_ms, "build succeeded"),
        _ => tracing::warn!(
            reason = report.reason.as_deref().unwrap_or(""),
            error = report.error.as_deref().unwrap_or(""),
            "build failed"
        ),
    }
    Ok(Ran::Finished(report))
}

/// How long a finished build keeps trying to record its end while the
/// database is away, before it gives the job back (and the effect re-runs).
const RECORD_PATIENCE: std::time::Duration = std::time::Duration::from_secs(600);

/// Records a build's end with its SBOM change (see [`builds::finish`]). The
/// effect has already run, so a database outage (a restart, a failover) is
/// waited out with [`super::retry_backoff`] for up to [`RECORD_PATIENCE`]
/// rather than re-running the effect. `Ok(false)`: another worker holds the
/// build now.
async fn record(ctx: &Ctx, build: &BuildRow, finish: &Finish, change: SbomChange) -> Result<bool, JobError> {
    let started = Instant::now();
    let mut attempt = 0;
    loop {
        let (deployment, build_id, change) = (build.deployment_id.clone(), build.id.clone(), change.clone());
        let result = builds::finish(&ctx.db, build, finish, move |conn| {
            async move {
                let now = now_ms();
                match change {
                    SbomChange::None => Ok(()),
                    SbomChange::Replace(nodes) => sboms::replace(conn, &deployment, &build_id, &nodes, now).await,
                    SbomChange::RemoveAll => sboms::remove_all(conn, &deployment).await,
                }
            }
            .boxed()
        })
        .await;
        match result {
            Ok(stored) => return Ok(stored),
            Err(e @ crate::store::StoreError::Database(_)) if started.elapsed() < RECORD_PATIENCE => {
                let wait = super::retry_backoff(attempt);
                attempt += 1;
                tracing::warn!(error = %e, retry_in_s = wait.as_secs(), "cannot record the build's end yet; trying again");
                tokio::time::sleep(wait).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// A report to start from, filled in by the job bodies.
pub(crate) fn blank_report(build: &BuildRow) -> Report {
    Report {
        build_id: build.id.clone(),
        deployment_id: build.deployment_id.clone(),
        kind: build.kind,
        status: BuildStatus::Failed,
        reason: None,
        error: None,
        attempt: build.attempts,
        exit_code: None,
        duration_ms: 0,
        nodes: Vec::new(),
        warnings: Vec::new(),
        summary: Default::default(),
    }
}

/// Marks `report` failed with `reason` and a sentence.
pub(crate) fn fail(mut report: Report, reason: &str, error: impl Into<String>) -> Report {
    report.status = BuildStatus::Failed;
    report.reason = Some(reason.to_owned());
    report.error = Some(error.into());
    report
}

/// Marks `report` cancelled.
pub(crate) fn cancelled(mut report: Report) -> Report {
    report.status = BuildStatus::Cancelled;
    report.reason = Some("cancelled".to_owned());
    report.error = Some("cancelled on request; the effect's process group was killed".to_owned());
    report
}

/// The folder holding `core/` for a build's module source (MS-1). A build
/// without a source floats on the worker's built-in source.
pub(crate) fn resolve_source(build: &BuildRow, ctx: &Ctx) -> Result<PathBuf, String> {
    let dir = match build.module_source.as_deref() {
        None => ctx.config.default_source_dir.clone(),
        Some(s) => match ModuleSource::parse(s).map_err(|e| e.to_string())? {
            ModuleSource::Path(dir) => dir,
            ModuleSource::Git { .. } => {
                return Err(format!("module source {s}: fetching git sources is not supported by this worker yet"))
            }
        },
    };
    if dir.join("core/default.nix").is_file() {
        Ok(dir)
    } else {
        Err(format!("module source folder {} has no core/default.nix", dir.display()))
    }
}

/// The most a build's log keeps, in bytes; output beyond it is counted, not stored.
pub const LOG_LIMIT: i64 = 8 * 1024 * 1024;

/// Appends effect output to the build's log in the database, up to
/// [`LOG_LIMIT`] bytes over all attempts of the build.
/// Only the worker that holds the build's claim writes; each attempt
/// numbers its chunks apart ([`builds::log_base`]).
pub(crate) struct DbLog {
    db: Db,
    build: BuildRow,
    echo: bool,
    /// Next chunk number and bytes stored so far.
    end: std::sync::Mutex<(i64, i64)>,
}

impl DbLog {
    pub(crate) async fn open(db: Db, build: &BuildRow, echo: bool) -> Self {
        let end =
            builds::log_end(&db, &build.id, build.attempts).await.unwrap_or((builds::log_base(build.attempts) + 1, 0));
        Self { db, build: build.clone(), echo, end: std::sync::Mutex::new(end) }
    }
}

impl LogSink for DbLog {
    fn append<'a>(&'a self, chunk: &'a str) -> BoxFuture<'a, ()> {
        async move {
            if self.echo {
                eprint!("{chunk}");
            }
            let (seq, text) = {
                let mut end = self.end.lock().expect("log position lock");
                let (seq, bytes) = *end;
                let room = LOG_LIMIT - bytes;
                let text = if room <= 0 {
                    None
                } else if chunk.len() as i64 <= room {
                    Some(chunk.to_owned())
                } else {
                    let mut cut = room as usize;
                    while !chunk.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    Some(format!(
                        "{}\nslipway: the log reached {} MiB; further output is not stored\n",
                        &chunk[..cut],
                        LOG_LIMIT / 1024 / 1024
                    ))
                };
                *end = (seq + 1, bytes + chunk.len() as i64);
                (seq, text)
            };
            let Some(text) = text else { return };
            match builds::append_log(&self.db, &self.build, seq, &text).await {
                Ok(true) => {}
                Ok(false) => tracing::debug!("build log not appended: another worker holds the build now"),
                Err(e) => tracing::warn!(error = %e, "could not append to the build log"),
            }
        }
        .boxed()
    }
}

/// Prepares a build's work folder (with an empty `sbom/` folder, the
/// effect's `SBOM_OUT_DIR`) and runs one of the source's effects with the
/// environment of Q-4. Returns how it ended and the work folder.
pub(crate) async fn run_effect(
    build: &BuildRow,
    ctx: &Ctx,
    source: &std::path::Path,
    effect: &str,
    deadline: std::time::Duration,
) -> Result<(EffectOutcome, PathBuf), String> {
    let work = ctx.work_dir(&build.id);
    let state = ctx.provider_state_dir(&build.deployment_id);
    let prepare = || -> std::io::Result<PathBuf> {
        // A worker that died on this host left its effect running: stop it
        // before running again (Q-1; one build of a deployment at a time).
        let stale = crate::effect::kill_marked(&build.id);
        if stale > 0 {
            tracing::warn!(processes = stale, "stopped the effect a dead worker left running");
        }
        // A re-run after a crash starts from a clean work folder.
        if work.exists() {
            std::fs::remove_dir_all(&work)?;
        }
        std::fs::create_dir_all(work.join("sbom"))?;
        std::fs::create_dir_all(&state)?;
        let file = work.join("configuration.json");
        std::fs::write(&file, serde_json::to_vec_pretty(&build.configuration).expect("configuration serialises"))?;
        Ok(file)
    };
    let config_file = prepare().map_err(|e| format!("cannot prepare the work folder {}: {e}", work.display()))?;
    let abs = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()).display().to_string();
    let env = vec![
        ("DEPLOYMENT_ID".to_owned(), build.deployment_id.clone()),
        ("BUILD_ID".to_owned(), build.id.clone()),
        ("CONFIGURATION_FILE".to_owned(), abs(&config_file)),
        ("MODULE_SOURCE_DIR".to_owned(), abs(source)),
        ("STATE_DIR".to_owned(), abs(&state)),
        ("SBOM_OUT_DIR".to_owned(), abs(&work.join("sbom"))),
        ("DEPLOY_SBOM_TIMEOUT".to_owned(), ctx.config.deploy_sbom_timeout.as_secs().to_string()),
        ("PROVIDER".to_owned(), "local".to_owned()),
        ("NIX_CONFIG".to_owned(), "substituters =".to_owned()),
    ];
    let spec = EffectSpec {
        program: source.join("core/effects").join(effect),
        dir: work.clone(),
        env,
        deadline,
        marker: build.id.clone(),
    };
    let log = DbLog::open(ctx.db.clone(), build, ctx.echo_log).await;
    let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(build.cancel_requested);
    let watcher = tokio::spawn(watch_cancel(ctx.db.clone(), build.id.clone(), cancel_tx));
    let outcome = crate::effect::run(&spec, &log, cancel_rx).await;
    watcher.abort();
    Ok((outcome.map_err(|e| e.to_string())?, work))
}

/// How often a running build looks for a cancel request.
const CANCEL_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Sends `true` once someone asked to cancel the build.
async fn watch_cancel(db: Db, build_id: String, tx: tokio::sync::watch::Sender<bool>) {
    let mut tick = tokio::time::interval(CANCEL_POLL);
    loop {
        tick.tick().await;
        if let Ok(true) = builds::cancel_requested(&db, &build_id).await {
            let _ = tx.send(true);
            return;
        }
    }
}
