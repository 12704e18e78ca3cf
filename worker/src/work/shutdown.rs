//! How a worker stops: a rolling stop (the first SIGTERM or Ctrl-C) lets
//! every running job body end behind a closed [`Gate`]; a second signal
//! kills the effects and hands the builds back at once.

use slipway_jobs::jobs::Ctx;
use std::sync::Arc;
use std::time::Duration;

/// The job bodies this process runs, for a rolling stop (the first SIGTERM).
/// Each job body holds a share of the gate while it runs; [`Gate::close`]
/// lets no job body start after it (a job apalis hands this process from
/// then on waits, and is handed back at exit) and resolves once every
/// running one has ended.
///
/// The stop is ours, not apalis's: apalis's own graceful stop stops driving
/// its storage while it waits for the running jobs, and a transaction its
/// storage had open at that moment (a claim or an acknowledgement) then
/// holds SQLite's write lock until those jobs end, which they cannot, since
/// they must write to record their end.
#[derive(Clone, Default)]
pub(crate) struct Gate(Arc<tokio::sync::RwLock<()>>);

impl Gate {
    /// A share for one job body; once the gate is closing, never.
    pub(crate) async fn enter(&self) -> tokio::sync::OwnedRwLockReadGuard<()> {
        Arc::clone(&self.0).read_owned().await
    }

    /// A share for a job body that holds a build slot: `None` once the gate
    /// is closing (the caller gives its slot back and does not start).
    pub(crate) fn try_enter(&self) -> Option<tokio::sync::OwnedRwLockReadGuard<()>> {
        Arc::clone(&self.0).try_read_owned().ok()
    }

    /// Closes the gate: resolves once every job body that entered has ended.
    async fn close(&self) -> tokio::sync::OwnedRwLockWriteGuard<()> {
        Arc::clone(&self.0).write_owned().await
    }
}

/// Serialises this worker's heartbeats with the release of its claims on a
/// forced stop, so no beat lands after the release.
#[derive(Clone, Default)]
pub(crate) struct Beats(Arc<tokio::sync::Mutex<()>>);

impl Beats {
    /// Holds off the heartbeats (and a forced stop's release) until the guard drops.
    pub(crate) async fn hold(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.0.lock().await
    }
}

/// After a rolling stop: the jobs apalis handed this worker that it did not
/// start go back to the queue for another worker (and so does the
/// acknowledgement apalis had not yet written of a job that ended, which its
/// next worker finds already done).
pub(crate) async fn hand_back_waiting(ctx: &Ctx) {
    match tokio::time::timeout(RELEASE_PATIENCE, ctx.hand_back()).await {
        Ok(Ok(jobs)) => tracing::info!(jobs, "running jobs have ended; handed back the jobs this worker had not started"),
        Ok(Err(e)) => tracing::warn!(error = %e, "running jobs have ended; could not hand back the jobs this worker had not started, so another worker takes them over once its heartbeat is stale"),
        Err(_) => tracing::warn!("running jobs have ended; the database did not answer, so another worker takes over the jobs this worker had not started once its heartbeat is stale"),
    }
}

/// How long a worker stopping at once tries to hand its builds back before
/// it exits anyway (their heartbeat then goes stale instead).
pub(crate) const RELEASE_PATIENCE: Duration = Duration::from_secs(3);

/// How [`stop`] ended.
pub(crate) enum Stopped {
    /// After the first signal, every running job body ended.
    Gracefully,
    /// A second signal came first: this worker's effects were killed
    /// (`processes` of them, of `builds` builds); its builds are still to be
    /// handed back ([`hand_back_at_once`]).
    AtOnce { processes: usize, builds: usize },
}

/// Resolves after the first SIGTERM or SIGINT once every job body this
/// worker was running has ended ([`Gate::close`]): the worker starts no new
/// job meanwhile and then exits (a rolling restart re-runs nothing). A
/// second signal stops it at once: its effects are killed and it resolves
/// with [`Stopped::AtOnce`] (heartbeats stay stopped until the process
/// exits), so that the caller stops taking jobs before it hands its builds
/// and claimed jobs back and exits with status 1. A second signal
/// after the graceful end (while the worker waits for builds a restart of
/// apalis's worker left running) hands back and exits 1 from here.
pub(crate) async fn stop(ctx: Ctx, gate: Gate, beats: Beats) -> std::io::Result<Stopped> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down: running builds finish first; a second SIGTERM or Ctrl-C stops them now");
    let (at_once, mut stopped_at_once) = tokio::sync::oneshot::channel();
    let process = Arc::clone(&ctx.process);
    tokio::spawn(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        let _no_more_beats = beats.hold().await;
        ctx.process.abandon();
        let builds = ctx.process.running().len();
        let killing = ctx.clone();
        let processes = tokio::task::spawn_blocking(move || {
            let processes = slipway_jobs::effect::kill_own();
            // Their scratch folders go before the exit, not as they end.
            killing.remove_running_scratch();
            processes
        })
        .await
        .unwrap_or(0);
        if at_once.send(Stopped::AtOnce { processes, builds }).is_err() {
            // The graceful stop already ended (apalis's workers are gone).
            hand_back_at_once(&ctx, processes, builds).await;
        }
        // The caller hands back and exits; no beat may land meanwhile.
        std::future::pending::<()>().await
    });
    tokio::select! {
        _ = gate.close() => {}
        Ok(stopped) = &mut stopped_at_once => return Ok(stopped),
    }
    // The bodies also end when a second signal abandoned them: its task
    // tells how once it has killed the effects.
    if process.abandoned() {
        if let Ok(stopped) = stopped_at_once.await {
            return Ok(stopped);
        }
    }
    Ok(Stopped::Gracefully)
}

/// The end of a stop at once, once apalis's workers are gone (so none of
/// them takes a job again after it was handed back, which would leave it
/// waiting for this worker's heartbeat to go stale): hands the builds and
/// claimed jobs back within [`RELEASE_PATIENCE`] and exits with status 1.
pub(crate) async fn hand_back_at_once(ctx: &Ctx, processes: usize, builds: usize) -> ! {
    match tokio::time::timeout(RELEASE_PATIENCE, ctx.hand_back()).await {
        Ok(Ok(jobs)) => tracing::warn!(
            processes,
            builds,
            jobs,
            "stopping now: killed this worker's effects and handed its builds back to the fleet"
        ),
        Ok(Err(e)) => tracing::warn!(processes, error = %e, "stopping now: killed this worker's effects; could not hand its builds back, so another worker takes them over once its heartbeat is stale"),
        Err(_) => tracing::warn!(processes, "stopping now: killed this worker's effects; the database did not answer, so another worker takes its builds over once its heartbeat is stale"),
    }
    std::process::exit(1)
}
