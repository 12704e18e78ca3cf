//! Every job kind a worker serves, registered on one monitor
//! ([`register_all`]): each queue of `slipway_jobs::store::queue::KINDS`
//! that lives in the database with [`register`] (its storage made by
//! [`QueueSettings`], the one place apalis's storage is configured, its
//! handler [`handle`]), and the retention sweep on apalis-cron.

use super::handlers::{handle, sweep_tick, Handled, Slots};
use super::shutdown::Gate;
use crate::completer::Completer;
use crate::storage::QueueSettings;
use crate::supervise::Supervisor;
use apalis::prelude::{Monitor, WorkerBuilder, WorkerBuilderExt as _};
use apalis_cron::{timezone::Utc, CronScheduler, Schedule, Tick};
use slipway_jobs::jobs::Ctx;
use slipway_jobs::metrics::Metrics;
use slipway_jobs::store::queue::{
    BuildJob, CallbackJob, Concurrency, JobFeed, JobKind, NixJob, ReadinessJob, RolloutJob, MAINTENANCE_QUEUE,
    MAINTENANCE_WORKER_SUFFIX,
};
use slipway_jobs::store::Db;
use std::time::Duration;

/// What every apalis worker of this process is registered with.
#[derive(Clone)]
pub(crate) struct Registration {
    /// The job bodies' context (this worker's name, database, configuration).
    pub(crate) ctx: Ctx,
    /// The rolling stop's gate every job body holds a share of.
    pub(crate) gate: Gate,
    /// Restarts a failed queue worker after its pause ([`crate::supervise::Supervised`]).
    pub(crate) supervisor: Supervisor,
    /// The process's LISTEN that wakes each queue's workers (PostgreSQL only).
    pub(crate) feed: Option<JobFeed>,
    /// The process's writer of its jobs' starts and ends (PostgreSQL only).
    pub(crate) completer: Option<Completer>,
    /// The build slots (`BUILD_SLOTS`, or `--slots`).
    pub(crate) slots: Slots,
    /// How many permits `slots` has.
    pub(crate) slot_count: usize,
    /// How many `builds` jobs apalis claims at once (`BUILD_PREFETCH`).
    pub(crate) prefetch: usize,
    /// The worker's metrics (builds are counted as they end).
    pub(crate) metrics: Metrics,
}

impl Registration {
    /// How many `J` jobs one apalis worker claims at once, and how many it
    /// runs at once. apalis claims `prefetch` builds at once and runs as
    /// many handlers; the slot semaphore keeps the builds themselves at its
    /// permits. `nix` jobs run as many at once as `NIX_SLOTS`, which bounds
    /// them fleet-wide.
    fn batch_and_concurrency<J: JobKind>(&self) -> (usize, usize) {
        match J::CONCURRENCY {
            Concurrency::BuildSlots => (self.prefetch, self.prefetch.max(self.slot_count)),
            Concurrency::NixSlots => (1, self.ctx.config.sources.nix_slots.max(1) as usize),
            Concurrency::Fixed(n) => (1, n),
        }
    }
}

/// Registers on `monitor` the apalis worker `<worker name><J::WORKER_SUFFIX>`
/// that runs [`handle`] for `J`'s queue on either engine, with the claims
/// and concurrency `J` asks for. A restart waits the pause the supervisor
/// gives it ([`crate::supervise::Supervised`]). Its name lets it beat and
/// be handed back with the worker
/// ([`slipway_jobs::store::queue::SIBLING_SUFFIXES`]).
pub(crate) fn register<J: Handled>(monitor: Monitor, reg: &Registration) -> Monitor {
    let (batch_size, concurrency) = reg.batch_and_concurrency::<J>();
    let settings = QueueSettings { queue: J::QUEUE, batch_size, heartbeat: reg.ctx.config.heartbeat };
    let name = format!("{}{}", reg.ctx.worker, J::WORKER_SUFFIX);
    let reg = reg.clone();
    match (reg.ctx.db.clone(), reg.feed.clone()) {
        (Db::Sqlite(pool), _) => monitor.register(move |_restarts| {
            WorkerBuilder::new(name.clone())
                .backend(reg.supervisor.hold(&name, settings.sqlite::<J>(&pool), &reg.ctx))
                .data(reg.ctx.clone())
                .data(reg.slots.clone())
                .data(reg.metrics.clone())
                .data(reg.gate.clone())
                .concurrency(concurrency)
                .build(handle::<J>)
        }),
        (Db::Postgres(pool), feed) => {
            let feed = feed.expect("a PostgreSQL worker has a job feed");
            let completer = reg.completer.clone().expect("a PostgreSQL worker has a completer");
            monitor.register(move |_restarts| {
                WorkerBuilder::new(name.clone())
                    .backend(reg.supervisor.hold(&name, settings.postgres::<J>(&pool, &feed, &completer), &reg.ctx))
                    .data(reg.ctx.clone())
                    .data(reg.slots.clone())
                    .data(reg.metrics.clone())
                    .data(reg.gate.clone())
                    .concurrency(concurrency)
                    .build(handle::<J>)
            })
        }
    }
}

/// Every job kind this worker runs of `queues`, on one monitor: `builds`,
/// `nix`, `callbacks` and `readiness` jobs ([`register`]) and, for
/// `maintenance`, the retention sweep every [`SWEEP_EVERY`].
pub(crate) fn register_all(monitor: Monitor, reg: &Registration, queues: &[String]) -> Monitor {
    let serves = |queue: &str| queues.iter().any(|q| q == queue);
    let mut monitor = monitor;
    if serves(BuildJob::QUEUE) {
        monitor = register::<BuildJob>(monitor, reg);
    }
    if serves(NixJob::QUEUE) {
        monitor = register::<NixJob>(monitor, reg);
    }
    if serves(CallbackJob::QUEUE) {
        monitor = register::<CallbackJob>(monitor, reg);
    }
    if serves(ReadinessJob::QUEUE) {
        monitor = register::<ReadinessJob>(monitor, reg);
    }
    if serves(RolloutJob::QUEUE) {
        monitor = register::<RolloutJob>(monitor, reg);
    }
    if serves(MAINTENANCE_QUEUE) {
        let sweep_name = format!("{}{MAINTENANCE_WORKER_SUFFIX}", reg.ctx.worker);
        let (ctx, gate) = (reg.ctx.clone(), reg.gate.clone());
        monitor = monitor.register(move |_restarts| {
            WorkerBuilder::new(sweep_name.clone())
                .backend(CronScheduler::new(Every(SWEEP_EVERY)))
                .data(ctx.clone())
                .data(gate.clone())
                .build(sweep_tick)
        });
    }
    monitor
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
