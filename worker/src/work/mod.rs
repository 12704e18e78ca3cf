//! `slipway-worker work`: the apalis adapter around `slipway_jobs::jobs`.
//!
//! [`run`] starts the process's watches and registers every job kind it
//! serves on one monitor (`register::register_all`: one apalis worker per
//! queue of `slipway_jobs::store::queue::KINDS`, its storage made by
//! [`crate::storage::QueueSettings`], the one place apalis's storage is
//! configured; each job adapted to its body by `handlers::handle`), then
//! stops as `shutdown` says. Every process gets a unique worker name. A
//! dead worker's build is taken over within `2.5 × SLIPWAY_HEARTBEAT` plus a
//! poll and a second of clock rounding (see [`crate::storage::QueueSettings`]).

mod handlers;
mod register;
mod shutdown;

use crate::completer::Completer;
use crate::supervise::Supervisor;
use anyhow::Context as _;
use apalis::prelude::Monitor;
use handlers::Slots;
use register::{register_all, Registration};
use shutdown::{hand_back_at_once, hand_back_waiting, stop, Beats, Gate, Stopped, RELEASE_PATIENCE};
use slipway_jobs::config::Config;
use slipway_jobs::jobs::{sweep, Ctx};
use slipway_jobs::metrics::Metrics;
use slipway_jobs::store::queue::JobFeed;
use slipway_jobs::store::Db;
use std::sync::Arc;

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

/// Runs the worker until SIGINT or SIGTERM, serving `queues`.
pub async fn run(config: Config, prefix: &str, slots: Option<u32>, queues: Vec<String>) -> anyhow::Result<()> {
    slipway_jobs::effect::check_containment().map_err(|e| anyhow::anyhow!(e))?;
    slipway_jobs::sandbox::private_dir(&config.state_dir)
        .with_context(|| format!("making the state folder {} private", config.state_dir.display()))?;
    slipway_jobs::sandbox::check(&config).await.map_err(|e| anyhow::anyhow!(e))?;
    if !config.sources.default_source_dir.join("core/default.nix").is_file() {
        anyhow::bail!(
            "SLIPWAY_DEFAULT_SOURCE_DIR {} holds no core/default.nix: point it at the built-in module source \
             (the nix/ folder of Slipway's source tree), which deployments without a module source are deployed from",
            config.sources.default_source_dir.display()
        );
    }
    let db = slipway_jobs::store::open(&config).await.context("opening the database")?;
    let slots = slots.unwrap_or(config.worker.build_slots) as usize;
    // apalis claims `prefetch` jobs at once and runs as many handlers; the
    // slot semaphore keeps the builds themselves at `slots`.
    let prefetch = config.worker.build_prefetch.map_or(slots, |p| p as usize);
    let name = unique_name(prefix);
    let ctx = Ctx::new(db.clone(), Arc::new(config), name.clone(), false);
    let build_slots = Slots(Arc::new(tokio::sync::Semaphore::new(slots)));
    let all_slots = build_slots.clone();
    let beats = Beats::default();
    let metrics = Metrics::new();
    metrics.register_builds();
    let listener = match &ctx.config.metrics.addr {
        Some(addr) => Some(crate::serve_metrics::start(addr, ctx.config.metrics.token.clone(), metrics.clone()).await?),
        None => None,
    };
    // The worker's OpenBao token is renewed in the background while the
    // worker runs (docs/OPENBAO.md); kept alive by this binding.
    let _openbao_token = match ctx.config.openbao.as_ref() {
        Some(openbao) => {
            let bao = slipway_jobs::openbao::OpenBao::new(openbao).context("OPENBAO_TOKEN")?;
            let config = &ctx.config;
            let longest =
                config.worker.deploy_timeout.max(config.worker.destroy_timeout).max(config.sources.nix_timeout);
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
    let wal = ctx.config.database.sqlite_path().map(|path| {
        let keeper =
            slipway_jobs::sqlite_wal::WalKeeper::new(&path, ctx.config.database.sqlite_wal_limit, metrics.clone());
        tokio::spawn(keeper.run(db.clone(), ctx.config.database.sqlite_checkpoint_every))
    });
    tracing::info!(worker.name = %name, slots, prefetch, queues = %queues.join(","), engine = ?db.engine(), "worker started");
    sweep::tick(&ctx).await;
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
    // And one completer, which writes every queue worker's job starts and
    // ends in batches (PostgreSQL only; apalis-sqlite writes its own).
    let (feed, completer) = match &db {
        Db::Postgres(pool) => {
            (Some(JobFeed::start(pool, ctx.config.database.postgres_poll)), Some(Completer::start(db.clone())))
        }
        Db::Sqlite(_) => (None, None),
    };
    let registration = Registration {
        ctx: ctx.clone(),
        gate: gate.clone(),
        supervisor,
        feed,
        completer: completer.clone(),
        slots: build_slots,
        slot_count: slots,
        prefetch,
        metrics,
    };
    let monitor = register_all(monitor, &registration, &queues);
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
    // The ends gathered so far are written before anything is handed back,
    // so that no job that ended goes back to the queue.
    if stopped.is_some() {
        if let Some(completer) = &completer {
            if tokio::time::timeout(RELEASE_PATIENCE, completer.flush()).await.is_err() {
                tracing::warn!("the database did not answer; jobs that ended and were not yet recorded done are handed back, and their next worker finds them done");
            }
        }
    }
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

/// Beats for this worker every half heartbeat, also while all its slots are
/// busy and apalis does not poll (otherwise its long builds would be taken
/// over by another worker while it still runs them), and tells the job
/// bodies whether the database answers ([`slipway_jobs::jobs::WorkerProcess::beat`]).
async fn keep_alive(ctx: Ctx, beats: Beats) {
    let mut tick = tokio::time::interval(ctx.config.heartbeat / 2);
    loop {
        tick.tick().await;
        let _beat = beats.hold().await;
        if ctx.process.abandoned() {
            return;
        }
        ctx.beat().await;
    }
}
