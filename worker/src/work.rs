//! `slipway-worker work`: the apalis adapter around `slipway_jobs::jobs`.
//!
//! [`register_all`] registers every job kind on one monitor: the `builds`,
//! `nix` and `callbacks` queues (their storage made by [`QueueSettings`], the
//! one place apalis's storage is configured) and the retention sweep on
//! apalis-cron. Every
//! process gets a unique worker name. No apalis timeout or catch-panic layer
//! is used: deadlines live in the job body, which always records an outcome.
//! A dead worker's build is taken over within `2.5 × SLIPWAY_HEARTBEAT` plus
//! a poll and a second of clock rounding (see [`QueueSettings`]).

use crate::supervise::Supervisor;
use anyhow::Context as _;
use apalis::prelude::*;
use apalis_cron::{timezone::Utc, CronScheduler, Schedule, Tick};
use slipway_jobs::config::Config;
use slipway_jobs::jobs::{build_job, callback, nix, readiness, retry_backoff, sweep, Ctx};
use slipway_jobs::metrics::Metrics;
use slipway_jobs::store::queue::{
    BuildJob, CallbackJob, JobFeed, NixJob, QueueSettings, ReadinessJob, BUILDS_QUEUE, CALLBACKS_CONCURRENCY,
    CALLBACKS_QUEUE, CALLBACKS_WORKER_SUFFIX, MAINTENANCE_QUEUE, NIX_QUEUE, NIX_WORKER_SUFFIX, READINESS_CONCURRENCY,
    READINESS_QUEUE, READINESS_WORKER_SUFFIX,
};
use slipway_jobs::store::Db;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// A name no other process has: `<prefix>@<host>-<pid>-<random>`. A host
/// name has no `@`, so `GET /workers` reads the host back from the name
/// ([`slipway_jobs::store::fleet::host_of`]).
fn unique_name(prefix: &str) -> String {
    let host = slipway_jobs::clock::hostname();
    format!(
        "{prefix}@{host}-{}-{}",
        std::process::id(),
        ulid::Ulid::generate().to_string().to_lowercase().split_at(20).1
    )
}

/// The builds this process runs at most at once (`BUILD_SLOTS`), counted
/// by the build tasks themselves rather than by apalis (see [`handle`]).
#[derive(Clone)]
struct Slots(Arc<tokio::sync::Semaphore>);

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
struct Gate(Arc<tokio::sync::RwLock<()>>);

impl Gate {
    /// A share for one job body; once the gate is closing, never.
    async fn enter(&self) -> tokio::sync::OwnedRwLockReadGuard<()> {
        Arc::clone(&self.0).read_owned().await
    }

    /// A share for a job body that holds a build slot: `None` once the gate
    /// is closing (the caller gives its slot back and does not start).
    fn try_enter(&self) -> Option<tokio::sync::OwnedRwLockReadGuard<()>> {
        Arc::clone(&self.0).try_read_owned().ok()
    }

    /// Closes the gate: resolves once every job body that entered has ended.
    async fn close(&self) -> tokio::sync::OwnedRwLockWriteGuard<()> {
        Arc::clone(&self.0).write_owned().await
    }
}

/// The apalis handler: adapts a queued [`BuildJob`] to [`build_job::run`].
///
/// The build runs in a task of its own, holding one of the process's
/// slots: when the database drops its connections (a restart, a failover)
/// apalis ends the worker's stream and the monitor starts it again,
/// dropping this future; the build task goes on, waits the outage out and
/// records its end, so a database restart re-runs no effect. When the
/// job cannot record its outcome at all, it waits its backoff before giving
/// the attempt back, since apalis re-queues at once.
///
/// A build that ran to an end this worker recorded is counted in its
/// metrics (kind, outcome, how long the effect ran).
async fn handle(
    job: BuildJob,
    ctx: Data<Ctx>,
    slots: Data<Slots>,
    metrics: Data<Metrics>,
    gate: Data<Gate>,
    attempt: Attempt,
) -> Result<(), BoxDynError> {
    // A build waiting for a slot has not started: a rolling stop hands it back.
    let permit = Arc::clone(&(*slots).0).acquire_owned().await.expect("the slot semaphore is never closed");
    let Some(share) = gate.try_enter() else {
        drop(permit);
        return std::future::pending().await;
    };
    let ctx = (*ctx).clone();
    let task = tokio::spawn(async move {
        let result = build_job::run(job, &ctx).await;
        drop(permit);
        drop(share);
        result
    });
    match task.await {
        // The process exits at once: the job must not be acknowledged, so
        // that another worker takes the build over.
        Ok(Ok(build_job::Ran::Abandoned)) => std::future::pending().await,
        Ok(Ok(build_job::Ran::Finished(report))) => {
            let ran = Duration::from_millis(report.duration_ms.max(0) as u64);
            metrics.build_finished(report.kind, report.status, ran);
            Ok(())
        }
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => give_back(e, &attempt, "build").await,
        Err(e) => Err(Box::new(e)),
    }
}

/// A job that could not record its end waits its backoff, then fails its
/// attempt so apalis hands it out again (apalis itself re-queues at once).
async fn give_back<E>(e: E, attempt: &Attempt, kind: &str) -> Result<(), BoxDynError>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let wait = retry_backoff(attempt.current());
    tracing::error!(error = %e, retry_in_s = wait.as_secs(), "{kind} job could not record its end; it will be handed out again");
    tokio::time::sleep(wait).await;
    Err(Box::new(e))
}

/// The apalis handler of the `nix` queue: adapts a [`NixJob`] to
/// [`nix::run`], in a task of its own (a restart of the apalis worker does
/// not drop it). A job that cannot record its end waits its backoff and
/// goes back to the queue; its own failures are its result.
async fn handle_nix(job: NixJob, ctx: Data<Ctx>, gate: Data<Gate>, attempt: Attempt) -> Result<(), BoxDynError> {
    let ctx = (*ctx).clone();
    let kind = if job.key.starts_with("names ") { "names_eval" } else { "schema_build" };
    let span = tracing::info_span!("job", job.kind = kind, worker.name = %ctx.worker);
    run_body(&gate, &attempt, "nix", span, async move { nix::run(job, &ctx).await }).await
}

/// The apalis handler of the `callbacks` queue: adapts a [`CallbackJob`] to
/// [`callback::run`] in a task of its own. The push itself is never
/// retried (DL-2); only a job that could not take or record it goes back.
async fn handle_callback(
    job: CallbackJob,
    ctx: Data<Ctx>,
    gate: Data<Gate>,
    attempt: Attempt,
) -> Result<(), BoxDynError> {
    let ctx = (*ctx).clone();
    let span =
        tracing::info_span!("job", job.kind = "reconcile_push", build.id = %job.build_id, worker.name = %ctx.worker);
    run_body(&gate, &attempt, "callback", span, async move { callback::run(job, &ctx).await }).await
}

/// The apalis handler of the `readiness` queue: adapts a [`ReadinessJob`]
/// to [`readiness::run`] in a task of its own; a round that could not
/// record its probes waits its backoff and goes back.
async fn handle_readiness(
    job: ReadinessJob,
    ctx: Data<Ctx>,
    gate: Data<Gate>,
    attempt: Attempt,
) -> Result<(), BoxDynError> {
    let ctx = (*ctx).clone();
    let span = tracing::info_span!(
        "job",
        job.kind = "readiness",
        build.id = %job.build_id,
        deployment.id = %job.deployment_id,
        worker.name = %ctx.worker
    );
    run_body(&gate, &attempt, "readiness", span, async move { readiness::run(job, &ctx).await }).await
}

/// Runs a job body of the `nix`, `callbacks` or `readiness` queue in a task
/// of its own (a restart of the apalis worker does not drop it), in `span`,
/// holding a share of `gate` until it ends; once the gate is closing it
/// does not start. A body that could not record its end waits its backoff
/// and goes back to the queue ([`give_back`], `kind` names it in the log).
async fn run_body<F, E>(
    gate: &Gate,
    attempt: &Attempt,
    kind: &str,
    span: tracing::Span,
    body: F,
) -> Result<(), BoxDynError>
where
    F: std::future::Future<Output = Result<(), E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    let share = gate.enter().await;
    let task = tokio::spawn(
        async move {
            let result = body.await;
            drop(share);
            result
        }
        .instrument(span),
    );
    match task.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => give_back(e, attempt, kind).await,
        Err(e) => Err(Box::new(e)),
    }
}

/// Runs the worker until SIGINT or SIGTERM, serving `queues`.
pub async fn run(config: Config, prefix: &str, slots: Option<u32>, queues: Vec<String>) -> anyhow::Result<()> {
    slipway_jobs::effect::check_containment().map_err(|e| anyhow::anyhow!(e))?;
    slipway_jobs::sandbox::private_dir(&config.state_dir)
        .with_context(|| format!("making the state folder {} private", config.state_dir.display()))?;
    slipway_jobs::sandbox::check(&config).await.map_err(|e| anyhow::anyhow!(e))?;
    if !config.default_source_dir.join("core/default.nix").is_file() {
        anyhow::bail!(
            "SLIPWAY_DEFAULT_SOURCE_DIR {} holds no core/default.nix: point it at the built-in module source \
             (the nix/ folder of Slipway's source tree), which deployments without a module source are deployed from",
            config.default_source_dir.display()
        );
    }
    let db = slipway_jobs::store::open(&config).await.context("opening the database")?;
    let slots = slots.unwrap_or(config.build_slots) as usize;
    // apalis claims `prefetch` jobs at once and runs as many handlers; the
    // slot semaphore keeps the builds themselves at `slots`.
    let prefetch = config.build_prefetch.map_or(slots, |p| p as usize);
    let name = unique_name(prefix);
    let ctx = Ctx::new(db.clone(), Arc::new(config), name.clone(), false);
    let build_slots = Slots(Arc::new(tokio::sync::Semaphore::new(slots)));
    let all_slots = build_slots.clone();
    let beats = Beats::default();
    let metrics = Metrics::new();
    metrics.register_builds();
    let listener = match &ctx.config.metrics_addr {
        Some(addr) => Some(crate::serve_metrics::start(addr, ctx.config.metrics_token.clone(), metrics.clone()).await?),
        None => None,
    };
    // The worker's OpenBao token is renewed in the background while the
    // worker runs (docs/OPENBAO.md); kept alive by this binding.
    let _openbao_token = match ctx.config.openbao.as_ref() {
        Some(openbao) => {
            let bao = slipway_jobs::openbao::OpenBao::new(openbao).context("OPENBAO_TOKEN")?;
            let config = &ctx.config;
            let longest = config.deploy_timeout.max(config.destroy_timeout).max(config.nix_timeout);
            Some(slipway_jobs::openbao_token::TokenWatch::start(bao, longest, Some(metrics.clone())))
        }
        None => None,
    };
    // The fleet's clock, read from the database now and every minute ([`slipway_jobs::clock`]).
    let clock_watch = slipway_jobs::clock::ClockWatch::new(ctx.config.clock_skew_limit, metrics.clone());
    if let Err(e) = clock_watch.check(&db).await {
        tracing::warn!(error = %e, "the database's clock could not be read; using this host's until it can");
    }
    let clock = tokio::spawn(clock_watch.run(db.clone()));
    // The SQLite write-ahead log kept bounded (docs/OPERATOR-GUIDE.md).
    let wal = ctx.config.sqlite_path().map(|path| {
        let keeper = slipway_jobs::sqlite_wal::WalKeeper::new(&path, ctx.config.sqlite_wal_limit, metrics.clone());
        tokio::spawn(keeper.run(db.clone(), ctx.config.sqlite_checkpoint_every))
    });
    tracing::info!(worker.name = %name, slots, prefetch, queues = %queues.join(","), engine = ?db.engine(), "worker started");
    stop_orphans();
    sweep_once(&ctx).await;
    let supervisor = Supervisor::default();
    let failures = supervisor.clone();
    let monitor = Monitor::new().should_restart(move |worker, error| {
        // Supervision: a queue worker whose heartbeat or storage failed
        // starts again, after a pause that grows while the failures go on
        // (the database may be away for a while; builds keep running
        // meanwhile). The pause is the restarted worker's own
        // (`Supervised`): waiting here would stop every queue worker.
        let (wait, first) = failures.failed(worker.name(), std::time::Instant::now());
        if first {
            tracing::warn!(%error, queue_worker = %worker.name(), "the queue worker stopped with an error; restarting it (with backoff while this goes on)");
        } else {
            tracing::debug!(%error, queue_worker = %worker.name(), retry_in_ms = wait.as_millis() as u64, "the queue worker stopped again; restarting it");
        }
        true
    });
    let gate = Gate::default();
    // One LISTEN for the process, which comes back after an outage: it
    // wakes each queue's apalis workers (PostgreSQL only).
    let feed = match &db {
        Db::Postgres(pool) => Some(JobFeed::start(pool, ctx.config.postgres_poll)),
        Db::Sqlite(_) => None,
    };
    let monitor =
        register_all(monitor, &ctx, &gate, &supervisor, feed.as_ref(), build_slots, metrics, slots, prefetch, &queues);
    let alive = tokio::spawn(keep_alive(ctx.clone(), beats.clone()));
    // The monitor runs until the first signal has let every running job end,
    // or a second signal killed them; dropping it then drops apalis's
    // workers (their open transactions roll back) and the jobs they hold,
    // which are handed back below. Handed back only once no worker of this
    // process can take a job again: a build handed back while this process
    // still fetched could be taken by it again and then wait for its
    // heartbeat to go stale.
    let mut monitor = Box::pin(monitor.run());
    let (result, stopped) = tokio::select! {
        result = &mut monitor => (Some(result.context("the worker stopped with an error")), None),
        stopped = stop(ctx.clone(), gate, beats) => (None, Some(stopped?)),
    };
    drop(monitor);
    match stopped {
        Some(Stopped::Gracefully) => hand_back_waiting(&ctx).await,
        Some(Stopped::AtOnce { processes, builds }) => hand_back_at_once(&ctx, processes, builds).await,
        None => {}
    }
    // Builds whose handler a restart of the apalis worker dropped still run:
    // they finish (and beat) before the process exits.
    let _all = all_slots.0.acquire_many(slots as u32).await;
    alive.abort();
    clock.abort();
    if let Some(wal) = wal {
        wal.abort();
    }
    if let Some(listener) = listener {
        listener.abort();
    }
    result.transpose()?;
    Ok(())
}

/// After a rolling stop: the jobs apalis handed this worker that it did not
/// start go back to the queue for another worker (and so does the
/// acknowledgement apalis had not yet written of a job that ended, which its
/// next worker finds already done).
async fn hand_back_waiting(ctx: &Ctx) {
    match tokio::time::timeout(RELEASE_PATIENCE, ctx.hand_back()).await {
        Ok(Ok(jobs)) => tracing::info!(jobs, "running jobs have ended; handed back the jobs this worker had not started"),
        Ok(Err(e)) => tracing::warn!(error = %e, "running jobs have ended; could not hand back the jobs this worker had not started, so another worker takes them over once its heartbeat is stale"),
        Err(_) => tracing::warn!("running jobs have ended; the database did not answer, so another worker takes over the jobs this worker had not started once its heartbeat is stale"),
    }
}

/// Serialises this worker's heartbeats with the release of its claims on a
/// forced stop, so no beat lands after the release.
#[derive(Clone, Default)]
struct Beats(Arc<tokio::sync::Mutex<()>>);

/// Registers on `$monitor` the apalis worker `<worker><$suffix>` that runs
/// `$handler` for `$job`s of `$queue`, `$concurrency` at once, one claimed
/// at a time, with the worker's [`Ctx`] and [`Gate`]: the `nix` and `callbacks` queues.
/// A restart waits the pause `$supervisor` gives it ([`crate::supervise::Supervised`]).
/// Its name lets it beat and be handed back with the worker
/// ([`slipway_jobs::store::queue::SIBLING_SUFFIXES`]).
macro_rules! register_sibling {
    ($monitor:expr, $ctx:expr, $gate:expr, $supervisor:expr, $feed:expr, $queue:expr, $suffix:expr, $job:ty, $handler:expr, $concurrency:expr) => {{
        let settings = QueueSettings { queue: $queue, batch_size: 1, heartbeat: $ctx.config.heartbeat };
        let (name, data, concurrency) = (format!("{}{}", $ctx.worker, $suffix), $ctx.clone(), $concurrency);
        let gate: Gate = $gate.clone();
        let supervisor: Supervisor = $supervisor.clone();
        match $ctx.db.clone() {
            Db::Sqlite(pool) => $monitor.register(move |_restarts| {
                WorkerBuilder::new(name.clone())
                    .backend(supervisor.hold(&name, settings.sqlite::<$job>(&pool), &data))
                    .data(data.clone())
                    .data(gate.clone())
                    .concurrency(concurrency)
                    .build($handler)
            }),
            Db::Postgres(pool) => {
                let feed: JobFeed = $feed.cloned().expect("a PostgreSQL worker has a job feed");
                $monitor.register(move |_restarts| {
                    WorkerBuilder::new(name.clone())
                        .backend(supervisor.hold(&name, settings.postgres::<$job>(&pool, &feed), &data))
                        .data(data.clone())
                        .data(gate.clone())
                        .concurrency(concurrency)
                        .build($handler)
                })
            }
        }
    }};
}

/// Every job kind this worker runs of `queues`, on one monitor: `builds`
/// jobs ([`handle`], counted in `metrics`, on either engine, `prefetch` claimed at once, at most as
/// many builds at a time as `slots` has permits), `nix` jobs ([`handle_nix`],
/// as many at once as `NIX_SLOTS`, which bounds them fleet-wide),
/// `callbacks` jobs ([`handle_callback`], `CALLBACKS_CONCURRENCY` at once)
/// and, for `maintenance`, the retention sweep every [`SWEEP_EVERY`].
#[allow(clippy::too_many_arguments)]
fn register_all(
    monitor: Monitor,
    ctx: &Ctx,
    gate: &Gate,
    supervisor: &Supervisor,
    feed: Option<&JobFeed>,
    slots: Slots,
    metrics: Metrics,
    slot_count: usize,
    prefetch: usize,
    queues: &[String],
) -> Monitor {
    let serves = |queue: &str| queues.iter().any(|q| q == queue);
    let settings = QueueSettings { queue: BUILDS_QUEUE, batch_size: prefetch, heartbeat: ctx.config.heartbeat };
    // apalis claims `prefetch` jobs at once and runs as many handlers; the
    // slot semaphore keeps the builds themselves at its permits.
    let concurrency = prefetch.max(slot_count);
    let (name, db) = (ctx.worker.clone(), ctx.db.clone());
    let (builds_ctx, sweep_ctx) = (ctx.clone(), ctx.clone());
    let (builds_gate, sweep_gate) = (gate.clone(), gate.clone());
    let builds_supervisor = supervisor.clone();
    macro_rules! builds_worker {
        ($storage:expr) => {
            WorkerBuilder::new(name.clone())
                .backend(builds_supervisor.hold(&name, $storage, &builds_ctx))
                .data(builds_ctx.clone())
                .data(slots.clone())
                .data(metrics.clone())
                .data(builds_gate.clone())
                .concurrency(concurrency)
                .build(handle)
        };
    }
    let mut monitor = monitor;
    if serves(BUILDS_QUEUE) {
        monitor = match db.clone() {
            Db::Sqlite(pool) => monitor.register(move |_restarts| builds_worker!(settings.sqlite::<BuildJob>(&pool))),
            Db::Postgres(pool) => {
                let feed = feed.cloned().expect("a PostgreSQL worker has a job feed");
                monitor.register(move |_restarts| builds_worker!(settings.postgres::<BuildJob>(&pool, &feed)))
            }
        };
    }
    if serves(NIX_QUEUE) {
        let concurrency = ctx.config.nix_slots.max(1) as usize;
        monitor = register_sibling!(
            monitor,
            ctx,
            gate,
            supervisor,
            feed,
            NIX_QUEUE,
            NIX_WORKER_SUFFIX,
            NixJob,
            handle_nix,
            concurrency
        );
    }
    if serves(CALLBACKS_QUEUE) {
        monitor = register_sibling!(
            monitor,
            ctx,
            gate,
            supervisor,
            feed,
            CALLBACKS_QUEUE,
            CALLBACKS_WORKER_SUFFIX,
            CallbackJob,
            handle_callback,
            CALLBACKS_CONCURRENCY
        );
    }
    if serves(READINESS_QUEUE) {
        monitor = register_sibling!(
            monitor,
            ctx,
            gate,
            supervisor,
            feed,
            READINESS_QUEUE,
            READINESS_WORKER_SUFFIX,
            ReadinessJob,
            handle_readiness,
            READINESS_CONCURRENCY
        );
    }
    if serves(MAINTENANCE_QUEUE) {
        let sweep_name = format!("{}-sweep", ctx.worker);
        monitor = monitor.register(move |_restarts| {
            WorkerBuilder::new(sweep_name.clone())
                .backend(CronScheduler::new(Every(SWEEP_EVERY)))
                .data(sweep_ctx.clone())
                .data(sweep_gate.clone())
                .build(sweep_tick)
        });
    }
    monitor
}

/// Beats for this worker every half heartbeat, also while all its slots are
/// busy and apalis does not poll (otherwise its long builds would be taken
/// over by another worker while it still runs them), and tells the job
/// bodies whether the database answers ([`slipway_jobs::jobs::WorkerProcess::beat`]).
async fn keep_alive(ctx: Ctx, beats: Beats) {
    let mut tick = tokio::time::interval(ctx.config.heartbeat / 2);
    loop {
        tick.tick().await;
        let _beat = beats.0.lock().await;
        if ctx.process.abandoned() {
            return;
        }
        ctx.beat().await;
    }
}

/// How often each worker runs the retention sweep (§6 `sweep`, Q-6).
const SWEEP_EVERY: Duration = Duration::from_secs(600);

/// A schedule of one tick every period, counted from now.
#[derive(Debug, Clone, Copy)]
struct Every(Duration);

impl Schedule<Utc> for Every {
    fn next_tick(&mut self, _: &Utc) -> Option<Tick<Utc>> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Some(Tick::new((now + self.0).as_secs()))
    }
}

/// Kills the effects that dead workers left running on this host (at start
/// and on every sweep tick).
fn stop_orphans() {
    let orphans = slipway_jobs::effect::kill_orphans();
    if orphans > 0 {
        tracing::warn!(processes = orphans, "stopped effects that a dead worker on this host left running");
    }
}

/// One retention sweep (also of the scratch folders that attempts which can
/// no longer run left on this host).
async fn sweep_once(ctx: &Ctx) {
    match sweep::run(ctx).await {
        Ok(swept) => tracing::info!(
            logs = swept.logs,
            work_dirs = swept.work_dirs,
            scratch_dirs = swept.scratch_dirs,
            nix_results = swept.nix_results,
            "retention sweep"
        ),
        Err(e) => tracing::warn!(error = %e, "retention sweep failed; the next tick tries again"),
    }
}

/// The sweep job: a failed sweep waits for the next tick (§6: "next tick").
async fn sweep_tick(_tick: Tick<Utc>, ctx: Data<Ctx>, gate: Data<Gate>) -> Result<(), BoxDynError> {
    let _share = gate.enter().await;
    stop_orphans();
    sweep_once(&ctx).await;
    Ok(())
}

/// How long a worker stopping at once tries to hand its builds back before
/// it exits anyway (their heartbeat then goes stale instead).
const RELEASE_PATIENCE: Duration = Duration::from_secs(3);

/// How [`stop`] ended.
enum Stopped {
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
async fn stop(ctx: Ctx, gate: Gate, beats: Beats) -> std::io::Result<Stopped> {
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
        let _no_more_beats = beats.0.lock().await;
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
async fn hand_back_at_once(ctx: &Ctx, processes: usize, builds: usize) -> ! {
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
