//! `slipway-fleet-bench`: how big a fleet one PostgreSQL coordinates.
//! `scripts/bench --only fleet` drives it; see `docs/BENCHMARKS.md` and the
//! capacity model in `docs/OPERATOR-GUIDE.md`.
//!
//! ```text
//! slipway-fleet-bench [--workers 10,100,1000] [--idle-s 20] [--loaded-s 25] [--build-ms 3000]
//!                     [--rate 0.5] [--heartbeat-s 30] [--poll-ms 10000] [--pools 10] [--pool-size 3]
//! ```
//!
//! For each fleet size N: a fresh scratch database (`slipway_bench_fleet`,
//! migrated by `store::open_postgres`), N simulated workers ([`sim`]: each
//! worker's database side through the real store and apalis's real
//! storage), then two windows measured by [`meter`]:
//!
//! - idle: no builds; PostgreSQL's CPU and WAL over the window;
//! - loaded: builds submitted at a fixed rate (`--rate` a second, whatever
//!   the fleet's size), each claimed, run as a sleep of `--build-ms`, recorded with
//!   its SBOM and readiness rows, and probed ready once; measured after a
//!   warm-up, with the builds finished in the window, how long claims
//!   waited and what was left queued.
//!
//! One JSON line per fleet size on stdout (the raw measurement; the model is
//! fitted by `bench/report_fleet.py`); progress on stderr.

mod meter;
mod sim;

use anyhow::{bail, Context as _};
use clap::Parser;
use serde_json::{json, Value};
use sqlx::postgres::PgConnectOptions;
use sqlx::{AssertSqlSafe, ConnectOptions as _, Connection as _};
use std::sync::atomic::Ordering;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "slipway-fleet-bench", about = "PostgreSQL's CPU and WAL per idle worker and per build")]
struct Cli {
    /// PostgreSQL server (any existing database on it, for the admin
    /// connection); the bench creates and drops its own database there.
    #[arg(long, env = "SLIPWAY_BENCH_SERVER", default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    server: String,
    /// Scratch database, dropped and recreated for each fleet size.
    #[arg(long, default_value = "slipway_bench_fleet")]
    database: String,
    /// Fleet sizes, simulated workers.
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
    workers: Vec<usize>,
    /// The idle window, seconds.
    #[arg(long, default_value_t = 20)]
    idle_s: u64,
    /// The loaded window, seconds (after `--warmup-s`).
    #[arg(long, default_value_t = 25)]
    loaded_s: u64,
    /// Builds run before the loaded window is measured, seconds.
    #[arg(long, default_value_t = 8)]
    warmup_s: u64,
    /// How long each build's no-op effect sleeps, ms.
    #[arg(long, default_value_t = 3000)]
    build_ms: u64,
    /// Builds submitted a second in the loaded window, the same at every
    /// fleet size (so the fleet's part of a build's cost shows).
    #[arg(long, default_value_t = 0.5)]
    rate: f64,
    /// `SLIPWAY_HEARTBEAT`, seconds (the default is 5; 1,000 workers at 5
    /// would need several PostgreSQL cores for their heartbeats alone).
    #[arg(long, default_value_t = 30)]
    heartbeat_s: u64,
    /// `SLIPWAY_POSTGRES_POLL`, ms (the default is 1,000).
    #[arg(long, default_value_t = 10_000)]
    poll_ms: u64,
    /// `BUILD_SLOTS` of each simulated worker.
    #[arg(long, default_value_t = 4)]
    slots: usize,
    /// `NIX_SLOTS`.
    #[arg(long, default_value_t = 2)]
    nix_slots: usize,
    /// Components of each node's SBOM.
    #[arg(long, default_value_t = 300)]
    components: usize,
    /// Connection pools the simulated workers share (worker i on pool i mod
    /// this), each with its own LISTEN; never more than the workers.
    #[arg(long, default_value_t = 10)]
    pools: usize,
    /// Connections in each pool (its LISTEN besides).
    #[arg(long, default_value_t = 3)]
    pool_size: u32,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if !cli.database.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        bail!("--database must be letters, digits and _");
    }
    for &n in &cli.workers {
        let result = measure(&cli, n).await;
        drop_database(&cli).await?;
        println!("{}", result.with_context(|| format!("measuring {n} workers"))?);
    }
    Ok(())
}

/// The scratch database's URL.
fn database_url(cli: &Cli) -> String {
    let base = cli.server.rsplit_once('/').map_or(cli.server.as_str(), |(b, _)| b);
    format!("{base}/{}", cli.database)
}

async fn admin(cli: &Cli) -> anyhow::Result<sqlx::PgConnection> {
    let options: PgConnectOptions = cli.server.parse().context("parsing --server")?;
    options.connect().await.with_context(|| format!("connecting to {}", cli.server))
}

async fn drop_database(cli: &Cli) -> anyhow::Result<()> {
    let mut conn = admin(cli).await?;
    sqlx::raw_sql(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", cli.database)))
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    Ok(())
}

fn log(what: &str) {
    eprintln!("[fleet-bench {}] {what}", time::OffsetDateTime::now_utc().time());
}

/// Nearest-rank percentiles of `values`: p50, p99 and the largest.
fn summary(mut values: Vec<f64>) -> Value {
    values.sort_by(f64::total_cmp);
    let at = |p: f64| {
        if values.is_empty() {
            return Value::Null;
        }
        let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
        json!(values[rank.clamp(1, values.len()) - 1])
    };
    json!({"n": values.len(), "p50": at(50.0), "p99": at(99.0), "max": values.last()})
}

/// The values of `series` whose instant is in `window` (ms since the fleet started).
fn within(series: &std::sync::Mutex<Vec<(u64, f64)>>, window: std::ops::Range<u64>) -> Vec<f64> {
    series.lock().expect("tally lock").iter().filter(|(at, _)| window.contains(at)).map(|(_, v)| *v).collect()
}

async fn measure(cli: &Cli, n: usize) -> anyhow::Result<Value> {
    drop_database(cli).await?;
    let mut conn = admin(cli).await?;
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {}", cli.database))).execute(&mut conn).await?;
    conn.close().await?;
    let url = database_url(cli);
    // The "api": migrates the database and submits the builds.
    let api = slipway_jobs::store::open_postgres(&url).await.context("opening the scratch database")?;
    let mut meter = meter::Meter::connect(&url, &cli.database).await?;
    let settings = sim::Settings {
        heartbeat: Duration::from_secs(cli.heartbeat_s),
        poll: Duration::from_millis(cli.poll_ms),
        build: Duration::from_millis(cli.build_ms),
        slots: cli.slots,
        nix_slots: cli.nix_slots,
        components: cli.components,
    };
    let options: PgConnectOptions =
        url.parse::<PgConnectOptions>()?.application_name(&format!("slipway-fleet-bench-{}", std::process::id()));
    let pools = cli.pools.min(n).max(1);
    log(&format!("{n} workers on {pools} pools of {} connections: starting", cli.pool_size));
    let started = std::time::Instant::now();
    // Starts spread over apalis's beat period, so that any window holds
    // its share of every worker's beats.
    let spread = Duration::from_secs(cli.heartbeat_s) / 2;
    let fleet = sim::Fleet::start(&options, settings, n, pools, cli.pool_size, spread).await?;
    // Every simulated worker's rows beat (the fleet as `GET /workers` reads it).
    let registered = loop {
        let seen = slipway_jobs::store::fleet::workers(&mut api.acquire().await?, 3 * cli.heartbeat_s as i64).await?;
        if seen.len() >= n {
            break started.elapsed();
        }
        if started.elapsed() > Duration::from_secs(180) {
            bail!("only {} of {n} simulated workers registered within 180 s", seen.len());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    log(&format!("{n} workers registered in {:.1} s; settling", registered.as_secs_f64()));
    tokio::time::sleep(Duration::from_secs(5)).await;

    log(&format!("idle window, {} s", cli.idle_s));
    let before = meter.snapshot().await?;
    tokio::time::sleep(Duration::from_secs(cli.idle_s)).await;
    let after = meter.snapshot().await?;
    let idle = meter::spent(&before, &after);

    let rate = cli.rate;
    // Each deployment gets a build about every 20 s: one at a time, never superseded.
    let deployments = ((rate * 20.0).ceil() as usize).max(8);
    log(&format!(
        "loaded window: {rate:.1} builds/s over {deployments} deployments, {} s warm-up, {} s measured",
        cli.warmup_s, cli.loaded_s
    ));
    let tally = fleet.tally.clone();
    let submitter = sim::submit_at(api.clone(), tally.clone(), rate, deployments);
    tokio::time::sleep(Duration::from_secs(cli.warmup_s)).await;
    let t0 = started.elapsed().as_millis() as u64;
    let (submitted0, claimed0, finished0, rounds0) = (
        tally.submitted.load(Ordering::Relaxed),
        tally.claimed.load(Ordering::Relaxed),
        tally.finished.load(Ordering::Relaxed),
        tally.readiness_rounds.load(Ordering::Relaxed),
    );
    let before = meter.snapshot().await?;
    tokio::time::sleep(Duration::from_secs(cli.loaded_s)).await;
    let after = meter.snapshot().await?;
    let t1 = started.elapsed().as_millis() as u64;
    let (submitted1, claimed1, finished1, rounds1) = (
        tally.submitted.load(Ordering::Relaxed),
        tally.claimed.load(Ordering::Relaxed),
        tally.finished.load(Ordering::Relaxed),
        tally.readiness_rounds.load(Ordering::Relaxed),
    );
    submitter.abort();
    let mut loaded = meter::spent(&before, &after);
    let seconds = loaded["seconds"].as_f64().unwrap_or(cli.loaded_s as f64);
    let finished = finished1 - finished0;
    loaded["offered_per_s"] = json!(rate);
    loaded["submitted"] = json!(submitted1 - submitted0);
    loaded["claimed"] = json!(claimed1 - claimed0);
    loaded["finished"] = json!(finished);
    loaded["builds_per_s"] = json!((finished as f64 / seconds * 1000.0).round() / 1000.0);
    loaded["readiness_rounds"] = json!(rounds1 - rounds0);
    // Submitted and not yet claimed at the window's end.
    loaded["backlog"] = json!(submitted1.saturating_sub(claimed1));
    loaded["claim_wait_ms"] = summary(within(&tally.claim_waits, t0..t1));
    loaded["lifecycle_ms"] = summary(within(&tally.lifecycles, t0..t1));
    let errors = tally.errors.load(Ordering::Relaxed);
    log(&format!("{n} workers: {finished} builds in {seconds:.1} s, backlog {}, errors {errors}", loaded["backlog"]));
    fleet.stop().await;
    meter.close().await;
    if let slipway_jobs::store::Db::Postgres(pool) = api {
        pool.close().await;
    }
    Ok(json!({
        "name": "fleet",
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "workers": n,
        "pools": pools,
        "pool_size": cli.pool_size,
        "connections": pools * (cli.pool_size as usize + 1),
        "apalis_workers": n * slipway_jobs::store::queue::DATABASE_QUEUES.len(),
        "heartbeat_s": cli.heartbeat_s,
        "poll_ms": cli.poll_ms,
        "build_ms": cli.build_ms,
        "slots": cli.slots,
        "components": cli.components,
        "rate": cli.rate,
        "deployments": deployments,
        "registered_s": (registered.as_secs_f64() * 10.0).round() / 10.0,
        "errors": errors,
        "cores": std::thread::available_parallelism().map_or(0, |c| c.get()),
        "idle": idle,
        "loaded": loaded,
    }))
}
