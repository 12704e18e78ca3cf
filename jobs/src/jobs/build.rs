//! The `builds` queue job: claim the build, run its deploy or destroy, record
//! the outcome (and SBOM changes) in one transaction, dispatch the next build
//! of the deployment (ST-2).

use super::report::Report;
use super::{deploy, destroy, BuildJob, Ctx, JobError};
use crate::effect::{EffectOutcome, EffectSpec, LogSink, Stop};
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
    /// This process is stopping at once ([`super::Here::abandon`]): the
    /// outcome was not recorded and another worker runs the build again.
    Abandoned,
}

/// Runs one `builds` job (§6 `deploy`/`destroy`).
pub async fn run(job: BuildJob, ctx: &Ctx) -> Result<Ran, JobError> {
    if let Some((owner, wait)) = live_owner(&job.build_id, ctx).await? {
        tracing::info!(build.id = %job.build_id, worker.name = %owner, "the build runs on a live worker; looking again later");
        builds::push_recheck(&ctx.db, &job.build_id, wait).await?;
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

/// The live worker that runs build `id`, if any, and when to look again. A
/// build's job can be handed out again while its worker still runs it:
/// after a database outage every worker's heartbeat looks stale at once. So
/// a `running` build is taken over only when its worker is gone: not this
/// process's own running build, and a heartbeat older than the missed-beat
/// window while this process itself has reached the database for at least
/// that window (a live owner would have beaten meanwhile: workers beat every
/// half heartbeat).
async fn live_owner(id: &str, ctx: &Ctx) -> Result<Option<(String, std::time::Duration)>, JobError> {
    let window = takeover_window(ctx);
    let owner = {
        let mut conn = ctx.db.acquire().await?;
        match builds::get(&mut conn, id).await? {
            Some(b) if b.status == BuildStatus::Running => b.worker,
            _ => None,
        }
    };
    let Some(owner) = owner else { return Ok(None) };
    if owner == ctx.worker {
        return Ok(ctx.here.runs(id).then_some((owner, window)));
    }
    match crate::store::db::worker_heartbeat_age_ms(&ctx.db, &owner).await? {
        Some(age) if age < window.as_millis() as i64 => Ok(Some((owner, window))),
        // Stale, but this process has not seen the database long enough to
        // tell a dead worker from one that cannot reach it either.
        Some(_) if ctx.here.reachable_for() < window => {
            Ok(Some((owner, window.saturating_sub(ctx.here.reachable_for()).max(ctx.config.heartbeat / 2))))
        }
        Some(_) => Ok(None),
        // Not a registered worker at all (a local run's build): gone.
        None => Ok(None),
    }
}

async fn run_claimed(build: BuildRow, ctx: &Ctx) -> Result<Ran, JobError> {
    let _here = ctx.here.enter(&build.id);
    tracing::info!("build started");
    crate::failpoint::hit("build_claimed");
    let started = Instant::now();
    let mut outcome = match build.kind {
        // Cancelled while its worker was dead: it is not run again, and what
        // that worker left running on this host is stopped.
        _ if build.cancel_requested => {
            crate::effect::kill_stale(&build.id, build.attempts);
            Outcome { report: cancelled(blank_report(&build)), sboms: SbomChange::None }
        }
        BuildKind::Deploy => deploy::run(&build, ctx).await,
        BuildKind::Destroy => destroy::run(&build, ctx).await,
    };
    if ctx.here.abandoned() {
        tracing::warn!("this worker is stopping at once; the build is left for another worker");
        return Ok(Ran::Abandoned);
    }
    crate::failpoint::hit("effect_ended");
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

/// The first pause between tries to record a build's end, doubling up to
/// [`RECORD_RETRY_MOST`]: the end is recorded within seconds of the
/// database coming back, however long it was away.
const RECORD_RETRY: std::time::Duration = std::time::Duration::from_millis(250);
const RECORD_RETRY_MOST: std::time::Duration = std::time::Duration::from_secs(4);

/// Records a build's end with its SBOM change (see [`builds::finish`]). The
/// effect has already run, so a database outage (a restart, a failover) is
/// waited out, trying again every few seconds, for up to [`RECORD_PATIENCE`]
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
                let wait = RECORD_RETRY.saturating_mul(1 << attempt.min(4)).min(RECORD_RETRY_MOST);
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
    report.error = Some("cancelled on request; every process of the effect was killed".to_owned());
    report
}

/// Marks `report` as the run of an attempt whose claim another worker took
/// (never stored: recording it fails on the claim).
pub(crate) fn claim_lost(report: Report) -> Report {
    fail(report, "claim_lost", "another worker took this build over; this attempt stopped")
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
/// numbers its chunks apart ([`builds::log_base`]). Paths of this host are
/// shown relative to the attempt's work folder (`./sbom/…`) or by the
/// variable that names them (`$STATE_DIR/…`, `$MODULE_SOURCE_DIR/…`), so
/// token holders never see the server's layout.
pub(crate) struct DbLog {
    db: Db,
    build: BuildRow,
    echo: bool,
    /// Host paths and what the log shows instead, longest first.
    paths: Vec<(String, String)>,
    /// Next chunk number and bytes stored so far.
    end: std::sync::Mutex<(i64, i64)>,
}

impl DbLog {
    pub(crate) async fn open(db: Db, build: &BuildRow, echo: bool, paths: Vec<(String, String)>) -> Self {
        let end =
            builds::log_end(&db, &build.id, build.attempts).await.unwrap_or((builds::log_base(build.attempts) + 1, 0));
        let mut paths = paths;
        paths.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
        Self { db, build: build.clone(), echo, paths, end: std::sync::Mutex::new(end) }
    }
}

/// Replaces each host path `from` in `text` by `to` where the path ends
/// there (followed by `/`, the end, or a character that cannot continue a
/// file name such as a space or quote).
pub(crate) fn hide_paths(text: &str, paths: &[(String, String)]) -> String {
    let mut out = text.to_owned();
    for (from, to) in paths {
        if from.is_empty() || !out.contains(from.as_str()) {
            continue;
        }
        let mut result = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(at) = rest.find(from.as_str()) {
            let after = &rest[at + from.len()..];
            let ends = after.chars().next().is_none_or(|c| !(c.is_alphanumeric() || "-_.+".contains(c)));
            result.push_str(&rest[..at]);
            result.push_str(if ends { to } else { from });
            rest = after;
        }
        result.push_str(rest);
        out = result;
    }
    out
}

impl LogSink for DbLog {
    fn append<'a>(&'a self, chunk: &'a str) -> BoxFuture<'a, ()> {
        async move {
            if self.echo {
                eprint!("{chunk}");
            }
            let chunk = hide_paths(chunk, &self.paths);
            let (seq, text) = {
                let mut end = self.end.lock().expect("log position lock");
                let (seq, bytes) = *end;
                let room = LOG_LIMIT - bytes;
                let text = if room <= 0 {
                    None
                } else if chunk.len() as i64 <= room {
                    Some(chunk.clone())
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

/// Prepares the attempt's work folder (with an empty `sbom/` folder, the
/// effect's `SBOM_OUT_DIR`) and runs one of the source's effects with the
/// environment of Q-4. Returns how it ended and the attempt's work folder.
///
/// Everything here is scoped to this attempt: it stops only older attempts'
/// effects on this host, removes only older attempts' folders, and runs the
/// effect only while this worker still holds the build's claim (checked
/// before the start and every second while it runs; the deployment's lock,
/// which the effect holds, keeps a late start from running beside the
/// attempt that took over).
pub(crate) async fn run_effect(
    build: &BuildRow,
    ctx: &Ctx,
    source: &std::path::Path,
    effect: &str,
    deadline: std::time::Duration,
) -> Result<(EffectOutcome, PathBuf), String> {
    let work = ctx.attempt_dir(&build.id, build.attempts);
    let state = ctx.provider_state_dir(&build.deployment_id);
    // A worker that died (or was taken for dead) on this host may have left
    // an older attempt's effect running: stop it before running again (Q-1;
    // one build of a deployment at a time).
    let stale = crate::effect::kill_stale(&build.id, build.attempts);
    if stale > 0 {
        tracing::warn!(processes = stale, "stopped an older attempt's effect left running on this host");
    }
    // A database that does not answer now is no reason to give up: the
    // claim is watched while the effect runs, and the lock keeps a late
    // start from running beside the attempt that took over.
    if builds::claim_status(&ctx.db, build).await.is_ok_and(|status| !status.held) {
        return Ok((EffectOutcome::Stopped(Stop::ClaimLost), work));
    }
    let prepare = || -> std::io::Result<PathBuf> {
        // Older attempts' folders go; this attempt starts from a clean one.
        for entry in std::fs::read_dir(ctx.work_dir(&build.id)).into_iter().flatten().flatten() {
            let older = entry
                .file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("attempt-")?.parse::<i64>().ok())
                .is_some_and(|n| n < build.attempts);
            if older {
                std::fs::remove_dir_all(entry.path())?;
            }
        }
        if work.exists() {
            std::fs::remove_dir_all(&work)?;
        }
        std::fs::create_dir_all(work.join("sbom"))?;
        std::fs::create_dir_all(&state)?;
        let file = work.join("configuration.json");
        std::fs::write(&file, serde_json::to_vec_pretty(&build.configuration).expect("configuration serialises"))?;
        Ok(file)
    };
    let config_file = prepare().map_err(|e| format!("cannot prepare the build's work folder: {e}"))?;
    let abs = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()).display().to_string();
    let (work_abs, state_abs, source_abs) = (abs(&work), abs(&state), abs(source));
    let env = vec![
        ("DEPLOYMENT_ID".to_owned(), build.deployment_id.clone()),
        ("BUILD_ID".to_owned(), build.id.clone()),
        ("CONFIGURATION_FILE".to_owned(), abs(&config_file)),
        ("MODULE_SOURCE_DIR".to_owned(), source_abs.clone()),
        ("STATE_DIR".to_owned(), state_abs.clone()),
        ("SBOM_OUT_DIR".to_owned(), abs(&work.join("sbom"))),
        ("DEPLOY_SBOM_TIMEOUT".to_owned(), ctx.config.deploy_sbom_timeout.as_secs().to_string()),
        ("PROVIDER".to_owned(), "local".to_owned()),
    ];
    let spec = EffectSpec {
        program: source.join("core/effects").join(effect),
        dir: work.clone(),
        env,
        deadline,
        build: build.id.clone(),
        attempt: build.attempts,
        lock: ctx.deployment_lock(&build.deployment_id),
        scratch: work.join("tmp"),
    };
    // Each folder as the effect sees it, and as the worker's configuration names it.
    let paths = [
        (work_abs, &work, "."),
        (state_abs, &state, "$STATE_DIR"),
        (source_abs, &source.to_path_buf(), "$MODULE_SOURCE_DIR"),
    ]
    .into_iter()
    .flat_map(|(canonical, given, to)| [(canonical, to.to_owned()), (given.display().to_string(), to.to_owned())])
    .filter(|(from, _)| from.starts_with('/'))
    .collect();
    let log = DbLog::open(ctx.db.clone(), build, ctx.echo_log, paths).await;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(build.cancel_requested.then_some(Stop::Cancel));
    let watcher = tokio::spawn(watch_claim(ctx.db.clone(), build.clone(), stop_tx));
    let outcome = crate::effect::run(&spec, &log, stop_rx).await;
    watcher.abort();
    Ok((outcome.map_err(|e| e.to_string())?, work))
}

/// How often a running build looks for a cancel request and its claim.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Sends why the effect must stop: someone asked to cancel the build, or
/// this worker no longer holds its claim.
async fn watch_claim(db: Db, build: BuildRow, tx: tokio::sync::watch::Sender<Option<Stop>>) {
    let mut tick = tokio::time::interval(WATCH_EVERY);
    loop {
        tick.tick().await;
        let stop = match builds::claim_status(&db, &build).await {
            Ok(status) if !status.held => Stop::ClaimLost,
            Ok(status) if status.cancel_requested => Stop::Cancel,
            // A database outage is not a reason to stop the effect.
            _ => continue,
        };
        let _ = tx.send(Some(stop));
        return;
    }
}
