//! `slipway-queue-bench`: no-op throughput and enqueue→start latency of
//! Slipway's job queue on PostgreSQL (apalis 1.0 + apalis-postgres 1.0), as
//! Slipway's worker configures it. `scripts/bench` drives it; see
//! `docs/BENCHMARKS.md`.
//!
//! ```text
//! slipway-queue-bench drain   --jobs 20000 [--workers W --concurrency C --batch-size B --pool-size P]
//! slipway-queue-bench latency --jobs 200 --spacing-ms 20 [same tuning flags]
//! slipway-queue-bench large-statement --sizes-kb 16,64,256,1024 --runs 100
//! slipway-queue-bench fair    --a-jobs 500 --b-jobs 5 --build-ms 20 [--unfair] [same tuning flags]
//! ```
//!
//! Every run drops and recreates its own scratch database (`slipway_bench` on
//! the server given by `--server`, default `127.0.0.1:5432` as `postgres`)
//! and runs apalis-postgres's migrations in it, then drops the job table's
//! indexes Slipway's migration 0025 drops. Each measurement is one JSON
//! line on stdout; errors go to stderr (and, with `RUST_LOG` set, apalis's and
//! sqlx's tracing: e.g. `RUST_LOG=sqlx=debug` shows every statement's time).
//!
//! - `drain`: enqueues N no-op jobs with `apalis_postgres::queries::push_tasks`
//!   in batches, one transaction per batch, with no worker running; then starts
//!   the worker(s) and times until every job is `Done` in the table.
//!   `jobs_per_s` = N / (last job Done − first job started), the definition
//!   the peer drivers in `bench/peers` use too; `jobs_per_s_wall` counts from
//!   the worker launch.
//! - `latency`: the worker runs idle, woken by LISTEN/NOTIFY;
//!   the bench enqueues one job every `--spacing-ms` from its own connection,
//!   noting the instant just before the insert is sent; the handler notes the
//!   instant it starts. Both clocks are this process's monotonic clock. The
//!   figure is start − enqueue, so it includes the insert's own commit.
//! - `large-statement`: one statement carrying a configuration of each size
//!   (JSON text sent as a parameter and stored as `jsonb`, as a submit stores
//!   one), timed end to end on a plain sqlx connection (sqlx 0.9.0 leaves
//!   `TCP_NODELAY` off) and on a connection of Slipway's own pool
//!   (`store::open_postgres`, which sets it), alternating, over TCP.
//! - `fair` (FS-1): tenant A's N jobs are queued, the worker(s) start, and
//!   once A's first job runs tenant B queues M; each job takes `--build-ms`.
//!   With `--unfair`, without priorities (the queue before FS-1, every job
//!   priority 0); otherwise with the priorities Slipway's fair order gives
//!   (`slipway_jobs::store::fair`: A's tags 0..N, B's from one before the
//!   earliest tag still waiting). Reports when B's first job started after B queued it,
//!   in ms and in build times, and each run's throughput.

use anyhow::{bail, Context as _};
use apalis::prelude::*;
use apalis_postgres::{PgTask, PostgresStorage};
use clap::{Args, Parser, Subcommand};
use serde::{Deserialize, Serialize};
use serde_json::json;
use slipway_jobs::store::queue::JobFeed;
use slipway_worker::completer::Completer;
use slipway_worker::storage::QueueSettings;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection, PgPool};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The bench's queue name, set explicitly as Slipway does (apalis's default
/// is the Rust type name).
const QUEUE: &str = "slipway-bench-noop";

#[derive(Parser)]
#[command(name = "slipway-queue-bench", about = "Throughput and pick-up latency of Slipway's PostgreSQL job queue")]
struct Cli {
    /// PostgreSQL server to use (any existing database on it, for the admin
    /// connection); the bench creates and drops its own database there.
    #[arg(
        long,
        env = "SLIPWAY_BENCH_SERVER",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres",
        global = true
    )]
    server: String,
    /// Scratch database, dropped and recreated at every run.
    #[arg(long, default_value = "slipway_bench", global = true)]
    database: String,
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Enqueue N no-op jobs, then start the worker(s) and time until all are Done.
    Drain {
        #[arg(long, default_value_t = 20_000)]
        jobs: u64,
        /// Jobs per `push_tasks` call (one transaction each).
        #[arg(long, default_value_t = 5_000)]
        insert_batch: usize,
        #[command(flatten)]
        tuning: Tuning,
    },
    /// Idle worker; one job every --spacing-ms; p50/p95/p99 of start − enqueue.
    Latency {
        #[arg(long, default_value_t = 200)]
        jobs: u64,
        #[arg(long, default_value_t = 20)]
        spacing_ms: u64,
        /// Jobs run (and not counted) before measuring.
        #[arg(long, default_value_t = 20)]
        warmup: u64,
        #[command(flatten)]
        tuning: Tuning,
    },
    /// Tenant A queues --a-jobs, then B --b-jobs once A's first runs; B's
    /// first start and the throughput, unfair and fair.
    Fair {
        #[arg(long, default_value_t = 500)]
        a_jobs: u64,
        #[arg(long, default_value_t = 5)]
        b_jobs: u64,
        /// How long each job takes, ms (a build's time, scaled down).
        #[arg(long, default_value_t = 20)]
        build_ms: u64,
        /// Every job at priority 0 (the queue before FS-1), for comparison.
        #[arg(long)]
        unfair: bool,
        #[command(flatten)]
        tuning: Tuning,
    },
    /// p50/p99 of one statement carrying a configuration of each size, on a
    /// plain sqlx connection and on one of Slipway's pool.
    LargeStatement {
        /// Configuration sizes, in KiB of JSON text.
        #[arg(long, value_delimiter = ',', default_value = "16,64,256,1024")]
        sizes_kb: Vec<usize>,
        /// Statements per size and connection.
        #[arg(long, default_value_t = 100)]
        runs: usize,
    },
}

/// The knobs of Slipway's queue that matter for these figures.
#[derive(Args, Clone, Debug, Serialize)]
struct Tuning {
    /// Worker instances, each with its own unique name, storage, LISTEN
    /// connection and heartbeat (all in this process).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// `.concurrency(n)` of each worker.
    #[arg(long, default_value_t = 10)]
    concurrency: usize,
    /// `Config::batch_size`: jobs claimed per fetch.
    #[arg(long, default_value_t = 10)]
    batch_size: usize,
    /// Connections in the workers' pool; 0 = 3 per worker + 1 (each worker
    /// holds one for LISTEN, uses one at a time for fetch and heartbeat,
    /// and its completer one for the starts and ends).
    #[arg(long, default_value_t = 0)]
    pool_size: u32,
    /// Slipway's heartbeat (`SLIPWAY_HEARTBEAT`), seconds.
    #[arg(long, default_value_t = 5)]
    heartbeat_secs: u64,
}

impl Tuning {
    fn pool_size(&self) -> u32 {
        if self.pool_size > 0 {
            self.pool_size
        } else {
            3 * self.workers as u32 + 1
        }
    }
}

/// The no-op job. `seq` lets the latency mode match a start to its enqueue.
#[derive(Serialize, Deserialize, Debug, Clone)]
struct NoopJob {
    seq: u64,
}

/// What the handler records: shared by every worker of the process.
struct Probe {
    started: AtomicU64,
    first_start: OnceLock<Instant>,
    /// Start instant per `seq` (latency mode); empty in drain mode.
    starts: Mutex<Vec<Option<Instant>>>,
    /// How long each job takes (fair mode); zero otherwise.
    work: Duration,
}

impl Probe {
    fn new(track: usize) -> Arc<Self> {
        Arc::new(Probe {
            started: AtomicU64::new(0),
            first_start: OnceLock::new(),
            starts: Mutex::new(vec![None; track]),
            work: Duration::ZERO,
        })
    }

    fn with_work(track: usize, work: Duration) -> Arc<Self> {
        Arc::new(Probe {
            started: AtomicU64::new(0),
            first_start: OnceLock::new(),
            starts: Mutex::new(vec![None; track]),
            work,
        })
    }
}

/// The handler: notes when it started, does nothing else.
async fn noop(job: NoopJob, probe: Data<Arc<Probe>>) -> Result<(), BoxDynError> {
    let now = Instant::now();
    probe.first_start.get_or_init(|| now);
    {
        let mut starts = probe.starts.lock().expect("probe lock");
        if let Some(slot) = starts.get_mut(job.seq as usize) {
            slot.get_or_insert(now);
        }
    }
    probe.started.fetch_add(1, Ordering::Relaxed);
    if !probe.work.is_zero() {
        tokio::time::sleep(probe.work).await;
    }
    Ok(())
}

/// Builds one worker of Slipway's queue on PostgreSQL the way Slipway's worker
/// configures it, and returns its context (to stop it) and its run future.
///
/// The storage comes from [`QueueSettings::postgres`], the constructor
/// `slipway-worker` builds its `builds` queue with (queue name, batch size,
/// heartbeat and missed-beat window, LISTEN/NOTIFY with a poll, and a
/// completer of its own for the jobs' starts and ends), so the figures are
/// those of the worker's own queue; the worker has a unique name and
/// `.concurrency(n)`.
fn slipway_queue_worker(
    pool: &PgPool,
    tuning: &Tuning,
    worker_name: &str,
    probe: Arc<Probe>,
) -> (WorkerContext, impl Future<Output = Result<(), WorkerError>> + Send + 'static) {
    let settings = QueueSettings {
        queue: QUEUE,
        batch_size: tuning.batch_size,
        heartbeat: Duration::from_secs(tuning.heartbeat_secs),
    };
    // Each worker has its own LISTEN and completer, as a worker process has.
    let feed = JobFeed::start(pool, slipway_jobs::store::queue::POSTGRES_POLL);
    let completer = Completer::start(slipway_jobs::store::Db::Postgres(pool.clone()));
    let storage = settings.postgres::<NoopJob>(pool, &feed, &completer);
    let ctx = WorkerContext::new(worker_name);
    let worker = WorkerBuilder::new(&ctx).backend(storage).data(probe).concurrency(tuning.concurrency).build(noop);
    (ctx, worker.run())
}

/// A name no other worker has: `<prefix>-<host>-<pid>-<index>-<random>`.
fn unique_worker_name(index: usize) -> String {
    let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_owned()).unwrap_or_else(|_| "host".into());
    let random = ulid::Ulid::generate().to_string().to_lowercase();
    format!("bench-{host}-{}-{index}-{}", std::process::id(), &random[16..])
}

/// Running workers of one measurement.
struct Fleet {
    contexts: Vec<WorkerContext>,
    handles: Vec<tokio::task::JoinHandle<Result<(), WorkerError>>>,
}

impl Fleet {
    fn start(pool: &PgPool, tuning: &Tuning, probe: &Arc<Probe>) -> Fleet {
        let mut fleet = Fleet { contexts: Vec::new(), handles: Vec::new() };
        for i in 0..tuning.workers {
            let (ctx, run) = slipway_queue_worker(pool, tuning, &unique_worker_name(i), probe.clone());
            fleet.contexts.push(ctx);
            fleet.handles.push(tokio::spawn(run));
        }
        fleet
    }

    /// Stops every worker (they finish what they hold) and reports errors.
    async fn stop(self) -> anyhow::Result<()> {
        for ctx in &self.contexts {
            let _ = ctx.stop();
        }
        for handle in self.handles {
            match tokio::time::timeout(Duration::from_secs(30), handle).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => bail!("a worker stopped with an error: {e}"),
                Ok(Err(e)) => bail!("a worker task failed: {e}"),
                Err(_) => bail!("a worker did not stop within 30 s"),
            }
        }
        Ok(())
    }

    fn check_alive(&self) -> anyhow::Result<()> {
        if self.handles.iter().any(|h| h.is_finished()) {
            bail!("a worker exited early (backend error?)");
        }
        Ok(())
    }
}

/// Drops and recreates the scratch database; returns its connect options.
async fn fresh_database(server: &str, database: &str) -> anyhow::Result<PgConnectOptions> {
    if !database.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        bail!("--database must be letters, digits and _");
    }
    let admin: PgConnectOptions = server.parse().context("parsing --server")?;
    let mut conn = admin.connect().await.with_context(|| format!("connecting to {server}"))?;
    sqlx::raw_sql(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))).execute(&mut conn).await?;
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {database}"))).execute(&mut conn).await?;
    conn.close().await?;
    Ok(admin.database(database))
}

/// Opens the scratch database and runs apalis-postgres's migrations in it.
async fn prepare(cli: &Cli) -> anyhow::Result<PgConnectOptions> {
    let options = fresh_database(&cli.server, &cli.database).await?;
    let mut conn = options.connect().await?;
    PostgresStorage::migrations().run(&mut conn).await.context("running apalis-postgres migrations")?;
    // The job table's indexes as Slipway's migrations leave them (0025
    // drops apalis's duplicates; its `builds` index is not here).
    sqlx::raw_sql(include_str!("../../../migrations/postgres/0025_unread_indexes.sql"))
        .execute(&mut conn)
        .await
        .context("dropping the indexes Slipway's migration 0025 drops")?;
    // Statistics of the empty tables, as autovacuum leaves a new schema: the
    // same starting point the peer drivers give graphile-worker and
    // procrastinate. (Statistics taken while every row is Pending with no
    // `lock_by` make apalis's ack query scan: see docs/BENCHMARKS.md.)
    sqlx::raw_sql("VACUUM ANALYZE apalis.jobs").execute(&mut conn).await?;
    sqlx::raw_sql("VACUUM ANALYZE apalis.workers").execute(&mut conn).await?;
    conn.close().await?;
    Ok(options)
}

async fn pool(options: &PgConnectOptions, size: u32) -> anyhow::Result<PgPool> {
    Ok(PgPoolOptions::new()
        .max_connections(size)
        .min_connections(size)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(options.clone())
        .await?)
}

fn noop_task(seq: u64) -> anyhow::Result<PgTask> {
    Ok(TaskBuilder::new(serde_json::to_vec(&NoopJob { seq })?).max_attempts(3).build())
}

/// Enqueues jobs `seqs` with `push_tasks`, `batch` per transaction.
async fn enqueue(client: &PgPool, seqs: std::ops::Range<u64>, batch: usize) -> anyhow::Result<()> {
    let mut next = seqs.start;
    while next < seqs.end {
        let end = (next + batch.max(1) as u64).min(seqs.end);
        let tasks = (next..end).map(noop_task).collect::<anyhow::Result<Vec<_>>>()?;
        let mut tx = client.begin().await?;
        apalis_postgres::queries::push_tasks(&mut *tx, QUEUE, tasks).await?;
        tx.commit().await?;
        next = end;
    }
    Ok(())
}

async fn not_done(client: &PgPool) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM apalis.jobs WHERE job_type = $1 AND status <> 'Done'")
        .bind(QUEUE)
        .fetch_one(client)
        .await?)
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 100.0
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn summary(mut values: Vec<f64>) -> serde_json::Value {
    values.sort_by(|a, b| a.total_cmp(b));
    let r = |x: f64| (x * 100.0).round() / 100.0;
    json!({
        "n": values.len(),
        "p50": r(percentile(&values, 50.0)),
        "p95": r(percentile(&values, 95.0)),
        "p99": r(percentile(&values, 99.0)),
        "max": r(values.last().copied().unwrap_or(f64::NAN)),
        "min": r(values.first().copied().unwrap_or(f64::NAN)),
    })
}

async fn drain(cli: &Cli, jobs: u64, insert_batch: usize, tuning: &Tuning) -> anyhow::Result<()> {
    let options = prepare(cli).await?;
    let client = pool(&options, 2).await?;

    let t = Instant::now();
    enqueue(&client, 0..jobs, insert_batch).await?;
    let insert = t.elapsed();
    // No checkpoint pending from the insert when the drain starts.
    sqlx::raw_sql("CHECKPOINT").execute(&client).await?;

    let probe = Probe::new(0);
    let workers = pool(&options, tuning.pool_size()).await?;
    let launch = Instant::now();
    let fleet = Fleet::start(&workers, tuning, &probe);

    let deadline = launch + Duration::from_secs(60 + jobs / 200);
    while probe.started.load(Ordering::Relaxed) < jobs {
        fleet.check_alive()?;
        if Instant::now() > deadline {
            bail!("drain timed out: {} of {jobs} jobs started", probe.started.load(Ordering::Relaxed));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Every handler has run; now wait until the last acknowledgements are committed.
    while not_done(&client).await? > 0 {
        fleet.check_alive()?;
        if Instant::now() > deadline {
            bail!("drain timed out waiting for the last jobs to be marked Done");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let all_done = Instant::now();
    fleet.stop().await?;

    let done: i64 = sqlx::query_scalar("SELECT count(*) FROM apalis.jobs WHERE job_type = $1 AND status = 'Done'")
        .bind(QUEUE)
        .fetch_one(&client)
        .await?;
    let first = *probe.first_start.get().context("no job started")?;
    let drain = all_done - first;
    let wall = all_done - launch;
    println!(
        "{}",
        json!({
            "queue": "slipway",
            "mode": "drain",
            "jobs": jobs,
            "workers": tuning.workers,
            "concurrency": tuning.concurrency,
            "batch_size": tuning.batch_size,
            "pool_size": tuning.pool_size(),
            "insert_batch": insert_batch,
            "insert_ms": ms(insert),
            "insert_jobs_per_s": (jobs as f64 / insert.as_secs_f64()).round(),
            "first_job_after_launch_ms": ms(first - launch),
            "drain_ms": ms(drain),
            "jobs_per_s": (jobs as f64 / drain.as_secs_f64()).round(),
            "wall_ms": ms(wall),
            "jobs_per_s_wall": (jobs as f64 / wall.as_secs_f64()).round(),
            "done_rows": done,
            "ok": done == jobs as i64 && probe.started.load(Ordering::Relaxed) == jobs,
        })
    );
    Ok(())
}

/// Enqueues jobs `seqs` in one transaction, job `seq` with the priority
/// `priority(seq)` gives.
async fn enqueue_with(
    client: &PgPool,
    seqs: std::ops::Range<u64>,
    priority: impl Fn(u64) -> usize,
) -> anyhow::Result<()> {
    let tasks = seqs
        .map(|seq| {
            Ok(TaskBuilder::new(serde_json::to_vec(&NoopJob { seq })?).max_attempts(3).priority(priority(seq)).build())
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut tx = client.begin().await?;
    apalis_postgres::queries::push_tasks(&mut *tx, QUEUE, tasks).await?;
    tx.commit().await?;
    Ok(())
}

/// One `fair` run: `fair` false gives every job priority 0.
async fn fair(cli: &Cli, a: u64, b: u64, build_ms: u64, tuning: &Tuning, fair: bool) -> anyhow::Result<()> {
    use slipway_jobs::store::fair::task_priority;
    let options = prepare(cli).await?;
    let client = pool(&options, 2).await?;
    // A's tags 0..a (its outstanding builds, in order).
    enqueue_with(&client, 0..a, |seq| if fair { task_priority(seq as i64) } else { 0 }).await?;
    let probe = Probe::with_work((a + b) as usize, Duration::from_millis(build_ms));
    let workers = pool(&options, tuning.pool_size()).await?;
    let launch = Instant::now();
    let fleet = Fleet::start(&workers, tuning, &probe);
    let deadline = launch + Duration::from_secs(60 + (a + b) * build_ms / 1000 * 3);
    while probe.started.load(Ordering::Relaxed) == 0 {
        fleet.check_alive()?;
        if Instant::now() > deadline {
            bail!("no job of A started");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // B's tags: from one before the earliest tag still waiting (B has none
    // outstanding), as `slipway_jobs::store::fair::tag_sql` gives them.
    let head: i64 = sqlx::query_scalar(
        "SELECT GREATEST(COALESCE(-MAX(priority), 0) - 1, 0)::bigint FROM apalis.jobs
         WHERE job_type = $1 AND status = 'Pending'",
    )
    .bind(QUEUE)
    .fetch_one(&client)
    .await?;
    let queued_b = Instant::now();
    enqueue_with(&client, a..a + b, |seq| if fair { task_priority(head + (seq - a) as i64) } else { 0 }).await?;
    while not_done(&client).await? > 0 {
        fleet.check_alive()?;
        if Instant::now() > deadline {
            bail!("fair run timed out: {} of {} jobs started", probe.started.load(Ordering::Relaxed), a + b);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let all_done = Instant::now();
    fleet.stop().await?;
    let starts = probe.starts.lock().expect("probe lock").clone();
    let b_first = starts[a as usize..].iter().flatten().min().copied().context("no job of B started")?;
    let first = *probe.first_start.get().context("no job started")?;
    let wait = b_first.saturating_duration_since(queued_b);
    let a_before_b = starts[..a as usize].iter().flatten().filter(|s| **s < b_first).count();
    println!(
        "{}",
        json!({
            "queue": "slipway",
            "mode": "fair",
            "fair": fair,
            "a_jobs": a,
            "b_jobs": b,
            "build_ms": build_ms,
            "workers": tuning.workers,
            "concurrency": tuning.concurrency,
            "b_first_start_ms": ms(wait),
            "b_first_start_builds": ((wait.as_secs_f64() * 1000.0 / build_ms.max(1) as f64) * 100.0).round() / 100.0,
            "a_started_before_b": a_before_b,
            "drain_ms": ms(all_done - first),
            "jobs_per_s": (((a + b) as f64 / (all_done - first).as_secs_f64()) * 10.0).round() / 10.0,
        })
    );
    Ok(())
}

async fn latency(cli: &Cli, jobs: u64, spacing_ms: u64, warmup: u64, tuning: &Tuning) -> anyhow::Result<()> {
    let options = prepare(cli).await?;
    // The enqueuing client has its own connection, as an api replica would.
    let client = pool(&options, 1).await?;
    // No checkpoint pending from earlier measurements (the peer drivers do the same).
    sqlx::raw_sql("CHECKPOINT").execute(&client).await?;
    let total = warmup + jobs;
    let probe = Probe::new(total as usize);
    let workers = pool(&options, tuning.pool_size()).await?;
    let fleet = Fleet::start(&workers, tuning, &probe);
    // Let the workers register and LISTEN.
    tokio::time::sleep(Duration::from_millis(500)).await;
    fleet.check_alive()?;

    let spacing = Duration::from_millis(spacing_ms);
    let mut enqueued: Vec<Option<Instant>> = vec![None; total as usize];
    let mut commit_ms = Vec::with_capacity(jobs as usize);
    // Warm-up (seq ≥ jobs), then a pause, then the measured jobs (seq < jobs).
    for seq in jobs..total {
        enqueue(&client, seq..seq + 1, 1).await?;
        tokio::time::sleep(spacing).await;
    }
    let wait_until = Instant::now() + Duration::from_secs(10);
    while probe.started.load(Ordering::Relaxed) < warmup && Instant::now() < wait_until {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    let t0 = Instant::now();
    for seq in 0..jobs {
        let target = t0 + spacing * seq as u32;
        tokio::time::sleep_until(target.into()).await;
        let sent = Instant::now();
        enqueued[seq as usize] = Some(sent);
        enqueue(&client, seq..seq + 1, 1).await?;
        commit_ms.push(ms(sent.elapsed()));
    }
    let wait_until = Instant::now() + Duration::from_secs(10);
    while probe.started.load(Ordering::Relaxed) < total && Instant::now() < wait_until {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = probe.started.load(Ordering::Relaxed);
    // Give the last acknowledgements a moment, then stop.
    tokio::time::sleep(Duration::from_millis(200)).await;
    fleet.stop().await?;

    let starts = probe.starts.lock().expect("probe lock").clone();
    let mut lat = Vec::with_capacity(jobs as usize);
    for seq in 0..jobs as usize {
        if let (Some(sent), Some(start)) = (enqueued[seq], starts[seq]) {
            lat.push(ms(start.saturating_duration_since(sent)));
        }
    }
    let missing = jobs as usize - lat.len();
    println!(
        "{}",
        json!({
            "queue": "slipway",
            "mode": "latency",
            "jobs": jobs,
            "spacing_ms": spacing_ms,
            "workers": tuning.workers,
            "concurrency": tuning.concurrency,
            "batch_size": tuning.batch_size,
            "pool_size": tuning.pool_size(),
            "wakeup": "LISTEN/NOTIFY",
            "enqueue_to_start_ms": summary(lat),
            "enqueue_commit_ms": summary(commit_ms),
            "missing": missing,
            "ok": missing == 0 && started == total,
        })
    );
    Ok(())
}

/// A configuration of about `kib` KiB of JSON text: applications with
/// settings, as an operator's would be, only more of them.
fn configuration_of(kib: usize) -> String {
    let mut applications = serde_json::Map::new();
    let mut n = 0;
    while serde_json::to_string(&applications).unwrap().len() < kib * 1024 {
        let settings: serde_json::Map<String, serde_json::Value> =
            (0..20).map(|i| (format!("setting{i}"), json!(format!("value {n}-{i} of some length")))).collect();
        applications.insert(format!("app{n}"), json!({ "enable": true, "settings": settings }));
        n += 1;
    }
    json!({ "applications": applications }).to_string()
}

/// `SELECT pg_column_size($1::jsonb)` with `text` on `conn`: milliseconds.
async fn time_statement(conn: &mut sqlx::PgConnection, text: &str) -> anyhow::Result<f64> {
    let start = Instant::now();
    let (size,): (i32,) = sqlx::query_as("SELECT pg_column_size($1::text::jsonb)").bind(text).fetch_one(conn).await?;
    anyhow::ensure!(size > 0, "the server stored nothing");
    Ok(start.elapsed().as_secs_f64() * 1000.0)
}

/// The `large-statement` mode (see the module doc).
async fn large_statement(cli: &Cli, sizes_kb: &[usize], runs: usize) -> anyhow::Result<()> {
    let options = fresh_database(&cli.server, &cli.database).await?;
    anyhow::ensure!(options.get_socket().is_none(), "--server must be a TCP address: the bench measures TCP");
    let url =
        format!("postgres://{}@{}:{}/{}", options.get_username(), options.get_host(), options.get_port(), cli.database);
    let mut plain = options.connect().await?;
    let slipway_jobs::store::Db::Postgres(pool) = slipway_jobs::store::open_postgres(&url).await? else {
        bail!("open_postgres gave another engine")
    };
    let mut ours = pool.acquire().await?;
    let mut sizes = Vec::new();
    for &kib in sizes_kb {
        let text = configuration_of(kib);
        let (mut plain_ms, mut ours_ms) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            time_statement(&mut plain, &text).await?;
            time_statement(&mut ours, &text).await?;
        }
        for _ in 0..runs {
            plain_ms.push(time_statement(&mut plain, &text).await?);
            ours_ms.push(time_statement(&mut ours, &text).await?);
        }
        sizes.push(json!({
            "kib": kib,
            "bytes": text.len(),
            "plain_sqlx_ms": summary(plain_ms),
            "slipway_pool_ms": summary(ours_ms),
        }));
    }
    println!("{}", json!({ "name": "large statement", "runs": runs, "sizes": sizes }));
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Off unless RUST_LOG is set (diagnostics only; stderr).
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    match &cli.mode {
        Mode::Drain { jobs, insert_batch, tuning } => drain(&cli, *jobs, *insert_batch, tuning).await,
        Mode::Latency { jobs, spacing_ms, warmup, tuning } => latency(&cli, *jobs, *spacing_ms, *warmup, tuning).await,
        Mode::Fair { a_jobs, b_jobs, build_ms, unfair, tuning } => {
            fair(&cli, *a_jobs, *b_jobs, *build_ms, tuning, !*unfair).await
        }
        Mode::LargeStatement { sizes_kb, runs } => large_statement(&cli, sizes_kb, *runs).await,
    }
}
