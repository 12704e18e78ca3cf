//! The `builds` queue job (§6 `deploy`/`destroy`): the frame of every
//! build, top to bottom. What a deploy adds is in [`deploy`], what a
//! destroy adds in [`destroy`].
//!
//! 1. [`run`]: a build whose worker still lives is left to it
//!    (`live_owner`); otherwise `claim` makes it this worker's next
//!    attempt (a conditional update, ST-3).
//! 2. `run_claimed` hands it to [`deploy::run`] or [`destroy::run`], which
//!    run the effect in the attempt's workspace
//!    (`workspace::run_kind`) and give back the run report and the
//!    SBOM change it implies ([`Outcome`]).
//! 3. `record` opens one transaction holding the deployment's lock:
//!    the SBOM change → the build's end with its report and `timings`
//!    (conditional on the claim; rolled back whole when it no longer holds)
//!    → what the kind adds (`deploy::record_end`, `destroy::record_end`)
//!    → the dispatch of the deployment's next build (ST-2) → commit.

use super::outcome::{blank_report, cancelled, Outcome, SbomChange};
use super::report::{Reason, Report};
use super::timing::{now_us, Marks};
use super::{deploy, destroy, Ctx, Job, JobError, RECORD_PATIENCE};
use crate::state::{BuildKind, BuildStatus};
use crate::store::builds::{self, BuildRow, Finish};
use crate::store::queue::{BuildJob, MISSED_HEARTBEATS};
use crate::store::sboms;
use crate::store::{events, heartbeats, now_ms, StoreError};
use std::time::{Duration, Instant};
use tracing::Instrument;

/// What happened to a job.
#[derive(Debug)]
pub enum Ran {
    /// The build was already finished (a repeated delivery): nothing ran.
    AlreadyFinished,
    /// The build ran and ended with this report.
    Finished(Box<Report>),
    /// Another worker took the build over while it ran; its outcome was discarded.
    LostRace,
    /// The build runs on a live worker (its job was handed out again after
    /// a database outage); a new job looks again later.
    Deferred,
    /// This process is stopping at once ([`super::WorkerProcess::abandon`]): the
    /// outcome was not recorded and another worker runs the build again.
    Abandoned,
}

/// A `builds` job runs in the span [`run`] opens once the build is claimed
/// (it names the deployment and the kind, read from the row).
impl Job for BuildJob {
    type Output = Ran;
    const NAME: &'static str = "build";

    fn run(self, ctx: &Ctx) -> impl std::future::Future<Output = Result<Ran, JobError>> + Send {
        run(self, ctx)
    }

    fn span(&self, _worker: &str) -> tracing::Span {
        tracing::Span::none()
    }
}

/// Runs one `builds` job.
pub async fn run(job: BuildJob, ctx: &Ctx) -> Result<Ran, JobError> {
    let picked_us = now_us();
    let build = match claim(ctx, &job.build_id, false).await? {
        Claim::Claimed(build) => *build,
        Claim::Finished => return Ok(Ran::AlreadyFinished),
        // FS-1: its tenant runs TENANT_BUILD_SLOTS builds already.
        Claim::HeldBack(tag) => {
            tracing::debug!(build.id = %job.build_id, "the build's tenant is at TENANT_BUILD_SLOTS; looking again later");
            crate::store::queue::push_with_priority(
                &mut ctx.db.acquire().await?,
                &BuildJob { build_id: job.build_id.clone() },
                Some(TENANT_HOLD),
                crate::store::fair::task_priority(tag),
            )
            .await?;
            return Ok(Ran::Deferred);
        }
        // Started by a worker: taken over only when that worker is gone.
        Claim::Running => {
            if let Some((owner, wait)) = live_owner(&job.build_id, ctx).await? {
                tracing::info!(build.id = %job.build_id, worker.name = %owner, "the build runs on a live worker; looking again later");
                builds::push_recheck(&mut ctx.db.acquire().await?, &job.build_id, wait).await?;
                return Ok(Ran::Deferred);
            }
            match claim(ctx, &job.build_id, true).await? {
                Claim::Claimed(build) => *build,
                Claim::Finished => return Ok(Ran::AlreadyFinished),
                Claim::Running | Claim::HeldBack(_) => return Err(StoreError::Conflict("build").into()),
            }
        }
    };
    let marks = Marks { queued_us: build.queued_at * 1000, picked_us, claimed_us: now_us(), ..Marks::default() };
    // The job's span: every line of the run carries its build, deployment,
    // worker and kind (`deploy` or `destroy`).
    let span = tracing::info_span!(
        "build",
        build.id = %build.id,
        deployment.id = %build.deployment_id,
        worker.name = %ctx.worker,
        job.kind = build.kind.as_str(),
        build.attempt = build.attempts
    );
    run_claimed(build, marks, ctx).instrument(span).await
}

/// How stale a worker's heartbeat must be before its builds are taken over.
fn takeover_window(ctx: &Ctx) -> Duration {
    ctx.config.heartbeat * MISSED_HEARTBEATS
}

/// The live worker that runs build `id`, if any, and when to look again. A
/// build's job can be handed out again while its worker still runs it:
/// after a database outage every worker's heartbeat looks stale at once. So
/// a `running` build is taken over only when its worker is gone: not this
/// process's own running build, and a heartbeat older than the missed-beat
/// window while this process itself has reached the database for at least
/// that window (a live owner would have beaten meanwhile: workers beat every
/// half heartbeat).
async fn live_owner(id: &str, ctx: &Ctx) -> Result<Option<(String, Duration)>, JobError> {
    let window = takeover_window(ctx);
    let mut conn = ctx.db.acquire().await?;
    let owner = match builds::get(&mut conn, id).await? {
        Some(b) if b.status == BuildStatus::Running => b.worker,
        _ => None,
    };
    let Some(owner) = owner else { return Ok(None) };
    if owner == ctx.worker {
        return Ok(ctx.process.runs(id).then_some((owner, window)));
    }
    match heartbeats::heartbeat_age_ms(&mut conn, &owner).await? {
        Some(age) if age < window.as_millis() as i64 => Ok(Some((owner, window))),
        // Stale, but this process has not seen the database long enough to
        // tell a dead worker from one that cannot reach it either.
        Some(_) if ctx.process.reachable_for() < window => {
            Ok(Some((owner, window.saturating_sub(ctx.process.reachable_for()).max(ctx.config.heartbeat / 2))))
        }
        Some(_) => Ok(None),
        // Not a registered worker at all (a local run's build): gone.
        None => Ok(None),
    }
}

/// What [`claim`] found.
enum Claim {
    /// The build is this worker's next attempt (the row as claimed).
    Claimed(Box<BuildRow>),
    /// The build has already ended: nothing to do.
    Finished,
    /// The build runs (a worker started it) and a takeover was not asked for.
    Running,
    /// FS-1: the build waits, and its tenant already runs
    /// `TENANT_BUILD_SLOTS` builds: its job is pushed again, with the
    /// build's fair tag, to run after [`TENANT_HOLD`].
    HeldBack(i64),
}

/// How long a build held back by `TENANT_BUILD_SLOTS` waits before a
/// worker looks at it again.
pub const TENANT_HOLD: Duration = Duration::from_secs(1);

/// Makes build `id` this worker's next attempt, in a write transaction of
/// its own (a conditional update on the version read, ST-3; a lost race
/// reads again). A build found `running` was started by another worker: it
/// is taken over and its effect re-run only with `takeover` (once
/// [`live_owner`] found that worker gone); otherwise [`Claim::Running`].
/// The claimed row is the one read with the claim's changes, not read
/// again (the update changes nothing else).
async fn claim(ctx: &Ctx, id: &str, takeover: bool) -> Result<Claim, StoreError> {
    for _ in 0..5 {
        let mut tx = ctx.db.begin_write().await?;
        let Some(row) = builds::get(&mut tx, id).await? else {
            return Err(StoreError::Corrupt(format!("job for unknown build {id}")));
        };
        if row.status.is_terminal() {
            tx.rollback().await?;
            return Ok(Claim::Finished);
        }
        if row.status == BuildStatus::Running && !takeover {
            tx.rollback().await?;
            return Ok(Claim::Running);
        }
        if let (Some(cap), BuildStatus::Queued) = (ctx.config.tenancy.tenant_build_slots, row.status) {
            // Builds no token asked for (tenant '') are never held back.
            if let Some((tenant, tag)) = crate::store::fair::of_build(&mut tx, id).await?.filter(|(t, _)| !t.is_empty())
            {
                // Serialises the claims of one tenant's builds fleet-wide.
                tx.lock_name(&format!("slipway.tenant.{tenant}")).await?;
                if crate::store::fair::running(&mut tx, &tenant, i64::from(cap)).await? >= i64::from(cap) {
                    tx.rollback().await?;
                    return Ok(Claim::HeldBack(tag));
                }
            }
        }
        let now = now_ms();
        if builds::claim(&mut tx, &row, &ctx.worker, now).await? {
            tx.commit().await?;
            let mut claimed = row;
            claimed.status = BuildStatus::Running;
            claimed.attempts += 1;
            claimed.worker = Some(ctx.worker.clone());
            claimed.started_at = Some(now);
            claimed.version += 1;
            return Ok(Claim::Claimed(Box::new(claimed)));
        }
        tx.rollback().await?;
    }
    Err(StoreError::Conflict("build"))
}

async fn run_claimed(build: BuildRow, mut marks: Marks, ctx: &Ctx) -> Result<Ran, JobError> {
    let _running = ctx.process.enter(&build.id);
    tracing::info!("build started");
    crate::failpoint::hit_between_statements("build_claimed", &ctx.db).await;
    let started = Instant::now();
    let mut outcome = match build.kind {
        // Cancelled while its worker was dead: it is not run again, and what
        // that worker left running on this host is stopped.
        _ if build.cancel_requested => {
            crate::effect::kill_stale(&build.id, build.attempts);
            Outcome::unchanged(cancelled(blank_report(&build)))
        }
        BuildKind::Deploy => {
            let judged = deploy::run(&build, ctx).await;
            super::health_gate::verify(&build, ctx, judged).await
        }
        BuildKind::Destroy => destroy::run(&build, ctx).await,
    };
    if ctx.process.abandoned() {
        tracing::warn!("this worker is stopping at once; the build is left for another worker");
        return Ok(Ran::Abandoned);
    }
    crate::failpoint::hit_between_statements("effect_ended", &ctx.db).await;
    outcome.report.duration_ms = started.elapsed().as_millis() as i64;
    outcome.report.summarise();
    marks.effect = outcome.effect;
    let mut report = outcome.report;
    if !record(ctx, &build, &mut report, &mut marks, &outcome.sboms).await? {
        tracing::warn!("build was taken over by another worker; this run's outcome is discarded");
        return Ok(Ran::LostRace);
    }
    match report.status {
        BuildStatus::Succeeded => tracing::info!(
            duration_ms = report.duration_ms,
            slipway_ms = report.timings.map_or(0.0, |t| t.slipway_ms),
            "build succeeded"
        ),
        _ => tracing::warn!(
            reason = report.reason.map_or("", Reason::as_str),
            error = report.error.as_deref().unwrap_or(""),
            "build failed"
        ),
    }
    Ok(Ran::Finished(Box::new(report)))
}

/// The first pause between tries to record a build's end, doubling up to
/// [`RECORD_RETRY_MOST`]: the end is recorded within seconds of the
/// database coming back, however long it was away.
const RECORD_RETRY: Duration = Duration::from_millis(250);
const RECORD_RETRY_MOST: Duration = Duration::from_secs(4);

/// Records a build's end: in one transaction holding the deployment's lock,
/// its SBOM change → the build's end with its report (conditional on this
/// worker's claim: when it no longer holds, the whole transaction is rolled
/// back) → the dispatch of the deployment's next build (ST-2) → commit. The
/// report's `timings` are completed here (`marks`: the recording, the SBOM
/// store, the end written). The effect
/// has already run, so a database outage (a restart, a failover) is waited
/// out, trying again every few seconds, for up to [`RECORD_PATIENCE`]
/// rather than re-running the effect. `Ok(false)`: another worker holds the
/// build now, and nothing was written.
async fn record(
    ctx: &Ctx,
    build: &BuildRow,
    report: &mut Report,
    marks: &mut Marks,
    change: &SbomChange,
) -> Result<bool, JobError> {
    let started = Instant::now();
    marks.recording_us = now_us();
    let mut attempt = 0;
    loop {
        match record_once(ctx, build, report, marks, change).await {
            Ok(stored) => return Ok(stored),
            Err(e @ StoreError::Database(_)) if started.elapsed() < RECORD_PATIENCE => {
                let wait = RECORD_RETRY.saturating_mul(1 << attempt.min(4)).min(RECORD_RETRY_MOST);
                attempt += 1;
                tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "cannot record the build's end yet; trying again");
                tokio::time::sleep(wait).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

async fn record_once(
    ctx: &Ctx,
    build: &BuildRow,
    report: &mut Report,
    marks: &mut Marks,
    change: &SbomChange,
) -> Result<bool, StoreError> {
    let mut tx = ctx.db.begin_write().await?;
    tx.lock_deployment(&build.deployment_id).await?;
    let now = now_ms();
    // The SBOM change first, so that its time is in the report the end
    // carries; a claim that no longer holds rolls it back with the rest.
    marks.sbom_started_us = now_us();
    match change {
        SbomChange::None => {}
        SbomChange::Replace(nodes) => sboms::replace(&mut tx, &build.deployment_id, &build.id, nodes, now).await?,
        SbomChange::RemoveAll => sboms::remove_all(&mut tx, &build.deployment_id).await?,
    }
    marks.sbom_ended_us = now_us();
    marks.written_us = now_us();
    report.timings = Some(marks.timings());
    let finish = Finish {
        status: report.status,
        reason: report.reason.map(|r| r.as_str().to_owned()),
        error: report.error.clone(),
        report: serde_json::to_value(&*report).expect("report serialises"),
    };
    if !builds::finish(&mut tx, build, &finish, marks.written_us / 1000).await? {
        tx.rollback().await?;
        return Ok(false);
    }
    crate::failpoint::hit("build_finishing");
    match build.kind {
        BuildKind::Deploy => deploy::record_end(&mut tx, ctx, build, report, now).await?,
        BuildKind::Destroy => destroy::record_end(&mut tx, build, finish.status, now).await?,
    }
    builds::dispatch_next(&mut tx, &build.deployment_id).await?;
    events::record(&mut tx, &build.deployment_id, now).await?;
    tx.commit().await?;
    Ok(true)
}
