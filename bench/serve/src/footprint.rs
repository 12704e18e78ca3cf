//! Footprint (issue 14, item 5): each release binary as an operator starts
//! it. For the api: start to ready (`GET /readyz` answers 200, polled every
//! 2 ms) on a new database (migrations included) and on a migrated one,
//! resident memory once ready and idle, and again after traffic (submits
//! and reads over 8 connections). For a worker: resident memory idle on an
//! empty queue, start to its first claim of a queued build (the build's
//! `started_at`, written by the worker, less the moment it was spawned),
//! and resident memory once the queued deploys it ran are done.

use crate::proc::{bin_dir, each_engine, free_port, pg_database, wait_ready, Client, Process};
use crate::reads::mint;
use anyhow::{ensure, Context as _};
use serde_json::{json, Value};
use slipway_jobs::store::{self, Engine, Q};
use std::path::Path;
use std::time::{Duration, Instant};

/// The options of `footprint`.
#[derive(clap::Args)]
pub struct Args {
    /// Engines to measure, in this order.
    #[arg(long, value_delimiter = ',', default_value = "sqlite,postgres")]
    engines: Vec<String>,
    /// Deploys queued before the worker starts (run on the built-in source).
    #[arg(long, default_value_t = 8)]
    deploys: usize,
    /// Reads sent over each of the 8 connections of the api's traffic.
    #[arg(long, default_value_t = 500)]
    reads: usize,
    /// Seconds a process is left idle before its memory is read.
    #[arg(long, default_value_t = 3.0)]
    idle: f64,
    /// PostgreSQL server (any existing database, for the admin connection);
    /// the bench creates and drops `slipway_bench_footprint` there.
    #[arg(long, env = "SLIPWAY_BENCH_SERVER", default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    server: String,
    /// Folder of the release binaries (default `$CARGO_TARGET_DIR/release` or `target/release`).
    #[arg(long)]
    bin: Option<std::path::PathBuf>,
    /// The built-in module source the worker deploys from (`SLIPWAY_DEFAULT_SOURCE_DIR`).
    #[arg(long, default_value = "nix")]
    source: std::path::PathBuf,
}

const PG_DATABASE: &str = "slipway_bench_footprint";

/// Megabytes (10^6 bytes) of `kib` KiB.
fn mb(kib: u64) -> f64 {
    kib as f64 * 1024.0 / 1e6
}

fn memory(p: &Process) -> anyhow::Result<Value> {
    let (rss, hwm, threads) = p.memory()?;
    Ok(json!({ "rss_mb": mb(rss), "peak_rss_mb": mb(hwm), "threads": threads }))
}

/// Runs the footprint part: one JSON object.
pub async fn run(args: Args) -> anyhow::Result<Value> {
    let bin = bin_dir(args.bin.clone());
    let size = |name: &str| std::fs::metadata(bin.join(name)).map(|m| m.len() as f64 / 1e6).unwrap_or(f64::NAN);
    let (args_ref, bin_ref) = (&args, &bin);
    let engines = each_engine("footprint", &args.engines, &args.server, PG_DATABASE, |engine, scratch| async move {
        one_engine(args_ref, bin_ref, engine, &scratch).await
    })
    .await?;
    Ok(json!({
        "name": "footprint",
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "api_binary_mb": size("slipway-api"),
        "worker_binary_mb": size("slipway-worker"),
        "engines": engines,
    }))
}

async fn one_engine(args: &Args, bin: &Path, engine: Engine, scratch: &Path) -> anyhow::Result<Value> {
    let url = match engine {
        Engine::Sqlite => format!("sqlite://{}", scratch.join("slipway.db").display()),
        Engine::Postgres => pg_database(&args.server, PG_DATABASE, true).await?,
    };
    let addr = format!("127.0.0.1:{}", free_port()?);
    let source = std::fs::canonicalize(&args.source).context("the built-in module source (--source)")?;
    let env: Vec<(String, String)> = vec![
        ("DATABASE_URL".into(), url.clone()),
        ("SLIPWAY_BIND".into(), addr.clone()),
        ("SLIPWAY_JWT_SECRET".into(), "footprint-bench-secret-of-enough-length-0123456789".into()),
        ("SLIPWAY_LOG".into(), "error".into()),
        ("SLIPWAY_STATE_DIR".into(), scratch.join("state").display().to_string()),
        ("SLIPWAY_DEFAULT_SOURCE_DIR".into(), source.display().to_string()),
    ];
    let api_bin = bin.join("slipway-api");
    let worker_bin = bin.join("slipway-worker");
    let idle = Duration::from_secs_f64(args.idle);

    // The api on a new database: its migrations run first.
    let mut api = Process::start(&api_bin, &[], &env, &scratch.join("api-1.log"))?;
    let first_ready = wait_ready(&addr, &mut api, Duration::from_secs(120))?;
    api.stop()?;
    // Again, migrated: what a restart costs.
    let mut api = Process::start(&api_bin, &[], &env, &scratch.join("api-2.log"))?;
    let ready = wait_ready(&addr, &mut api, Duration::from_secs(120))?;
    let at_ready = memory(&api)?;
    std::thread::sleep(idle);
    let api_idle = memory(&api)?;
    eprintln!("[footprint]   api ready in {:.0} ms, idle {}", ready.as_secs_f64() * 1e3, api_idle);

    // A worker on an empty queue, idle once its queues are served.
    let db = match engine {
        Engine::Sqlite => store::open_sqlite(&scratch.join("slipway.db")).await?,
        Engine::Postgres => store::open_postgres(&url).await?,
    };
    let mut worker = Process::start(&worker_bin, &["work"], &env, &scratch.join("worker-1.log"))?;
    let token = mint(&api_bin, &env)?;
    let served = wait_served(&addr, &token, &mut worker)?;
    std::thread::sleep(idle);
    let worker_idle = memory(&worker)?;
    worker.stop()?;
    eprintln!("[footprint]   worker serving in {:.0} ms, idle {}", served.as_secs_f64() * 1e3, worker_idle);

    // Traffic: submits, then reads, over 8 connections at once.
    let demo = std::fs::read_to_string(source.join("../examples/demo.json")).context("examples/demo.json")?;
    let body = format!("{{\"configuration\": {demo}}}");
    let started = Instant::now();
    let mut c = Client::connect(&addr)?;
    for n in 0..args.deploys {
        let (status, answer) = c.send("PUT", &format!("/deployments/footprint-{n}"), Some(&token), Some(&body))?;
        ensure!(status == 202, "submit: {status} {}", String::from_utf8_lossy(&answer));
    }
    drop(c);
    let mut threads = Vec::new();
    for _ in 0..8 {
        let (addr, token) = (addr.clone(), token.clone());
        let (reads, deploys) = (args.reads, args.deploys.max(1));
        threads.push(std::thread::spawn(move || -> anyhow::Result<()> {
            let mut c = Client::connect(&addr)?;
            let list = format!(
                "/deployments?ids={}",
                (0..deploys).map(|n| format!("footprint-{n}")).collect::<Vec<_>>().join(",")
            );
            for r in 0..reads {
                let path = match r % 4 {
                    0 => format!("/deployments/footprint-{}", r % deploys),
                    1 => list.clone(),
                    2 => format!("/deployments/footprint-{}/builds", r % deploys),
                    _ => "/readyz".to_owned(),
                };
                let (status, answer) = c.get(&path, Some(&token))?;
                ensure!(status == 200, "{path}: {status} {}", String::from_utf8_lossy(&answer));
            }
            Ok(())
        }));
    }
    for t in threads {
        t.join().map_err(|_| anyhow::anyhow!("a traffic thread panicked"))??;
    }
    let traffic_s = started.elapsed().as_secs_f64();
    std::thread::sleep(idle);
    let api_after = memory(&api)?;
    eprintln!("[footprint]   api after {traffic_s:.1} s of traffic: {api_after}");

    // A worker started with deploys queued: its first claim, then its
    // memory once they are done.
    let mut worker = Process::start(&worker_bin, &["work"], &env, &scratch.join("worker-2.log"))?;
    let spawned_ms = worker.spawned_ms;
    let deadline = Instant::now() + Duration::from_secs(600);
    let first_claim_ms = loop {
        let mut conn = db.acquire().await?;
        let first = Q::new("SELECT MIN(started_at) AS t FROM builds").fetch_one(&mut conn).await?.opt_int("t")?;
        drop(conn);
        if let Some(t) = first {
            break t - spawned_ms;
        }
        ensure!(worker.child.try_wait()?.is_none(), "the worker exited");
        ensure!(Instant::now() < deadline, "no claim within 600 s");
        std::thread::sleep(Duration::from_millis(5));
    };
    let ran = Instant::now();
    let outcome = loop {
        let mut conn = db.acquire().await?;
        let open = Q::new("SELECT COUNT(*) AS n FROM builds WHERE status IN ('queued', 'running')")
            .fetch_one(&mut conn)
            .await?
            .int("n")?;
        if open == 0 {
            let rows = Q::new("SELECT status, COUNT(*) AS n FROM builds GROUP BY status ORDER BY status")
                .fetch_all(&mut conn)
                .await?;
            let mut m = serde_json::Map::new();
            for r in rows {
                m.insert(r.text("status")?, json!(r.int("n")?));
            }
            break Value::Object(m);
        }
        drop(conn);
        ensure!(worker.child.try_wait()?.is_none(), "the worker exited");
        ensure!(Instant::now() < deadline, "the deploys did not end within 600 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    let builds_s = ran.elapsed().as_secs_f64();
    std::thread::sleep(idle);
    let worker_after = memory(&worker)?;
    eprintln!(
        "[footprint]   worker: first claim {first_claim_ms} ms after start; {} deploys in {builds_s:.1} s ({outcome}); {worker_after}",
        args.deploys
    );
    worker.stop()?;
    api.stop()?;
    db.close().await;
    Ok(json!({
        "api": {
            "first_start_ready_ms": first_ready.as_secs_f64() * 1e3,
            "start_ready_ms": ready.as_secs_f64() * 1e3,
            "at_ready": at_ready,
            "idle": api_idle,
            "after_traffic": api_after,
            "traffic": { "connections": 8, "submits": args.deploys, "reads": 8 * args.reads, "seconds": traffic_s },
        },
        "worker": {
            "start_serving_ms": served.as_secs_f64() * 1e3,
            "idle": worker_idle,
            "start_first_claim_ms": first_claim_ms,
            "deploys": args.deploys,
            "deploys_s": builds_s,
            "deploy_outcomes": outcome,
            "after_deploys": worker_after,
        },
    }))
}

/// Waits until `GET /readyz` shows a live worker on the `builds` queue.
fn wait_served(addr: &str, token: &str, worker: &mut Process) -> anyhow::Result<Duration> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut client = Client::connect(addr)?;
    loop {
        let (status, body) = client.get("/readyz", Some(token))?;
        if status == 200 {
            let v: Value = serde_json::from_slice(&body)?;
            let serving = v["queues"]
                .as_array()
                .is_some_and(|qs| qs.iter().any(|q| q["queue"] == "builds" && q["workers"].as_i64() > Some(0)));
            if serving {
                return Ok(worker.spawned.elapsed());
            }
        }
        ensure!(worker.child.try_wait()?.is_none(), "the worker exited");
        ensure!(Instant::now() < deadline, "no live worker on the builds queue within 120 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}
