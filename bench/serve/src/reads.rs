//! Reads at scale (issue 14, item 3): the same five reads through a release
//! `slipway-api` on a database of `--small` deployments and one of `--big`
//! (seeded by [`crate::seed`]), the plan of each read's statements, and
//! the Q-3 admission count on both.

use crate::proc::{bin_dir, free_port, percentile, wait_ready, Client, Process};
use crate::seed;
use anyhow::{ensure, Context as _};
use serde_json::{json, Value};
use slipway_jobs::store::builds::{self, Newest};
use slipway_jobs::store::{self, deployments, instance_readiness, Db, Engine};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection, Row as _};
use std::path::Path;
use std::time::{Duration, Instant};

/// The options of `reads`.
#[derive(clap::Args)]
pub struct Args {
    /// Engines to measure, in this order.
    #[arg(long, value_delimiter = ',', default_value = "postgres,sqlite")]
    engines: Vec<String>,
    /// Deployments of the small database (a multiple of 100).
    #[arg(long, default_value_t = 100)]
    small: usize,
    /// Deployments of the big database (a multiple of 100; 10 builds each on average).
    #[arg(long, default_value_t = 100_000)]
    big: usize,
    /// Seconds each read is repeated, after its warm-up.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Admission counts timed per database.
    #[arg(long, default_value_t = 2000)]
    counts: usize,
    /// PostgreSQL server (any existing database, for the admin connection);
    /// the bench creates and drops `slipway_bench_reads` and `slipway_bench_reads_big` there.
    #[arg(long, env = "SLIPWAY_BENCH_SERVER", default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    server: String,
    /// Folder of the release binaries (default `$CARGO_TARGET_DIR/release` or `target/release`).
    #[arg(long)]
    bin: Option<std::path::PathBuf>,
    /// Only seed each database and print its plans to stderr (no api).
    #[arg(long)]
    plans_only: bool,
}

/// The PostgreSQL databases of the small and the big side.
const PG_DATABASES: [&str; 2] = ["slipway_bench_reads", "slipway_bench_reads_big"];
const QUEUE_SIZE: i64 = 1000;

/// The columns `store::builds` reads (its `COLUMNS`).
const BUILD_COLUMNS: &str =
    "id, seq, deployment_id, kind, status, reason, error, configuration, module_source, instances, \
     report, attempts, cancel_requested, worker, version, queued_at, started_at, finished_at, \
     callback_url, callback, operator_secrets, readiness, dry_run";

/// What one database's samples are: ids the reads ask for.
struct Samples {
    deployments: Vec<String>,
    /// `(deployment, build)`: a deployment of 208 builds and its 101st newest.
    pages: Vec<(String, String)>,
    builds: Vec<String>,
    /// A build with a log.
    logged: String,
}

/// One read: its name and the paths it cycles through.
fn reads(s: &Samples) -> Vec<(&'static str, Vec<String>)> {
    let d = &s.deployments;
    let lists: Vec<String> = (0..50)
        .map(|k| {
            let ids: Vec<&str> = (0..100).map(|i| d[(k * 100 + i * 7) % d.len()].as_str()).collect();
            format!("/deployments?ids={}", ids.join(","))
        })
        .collect();
    vec![
        ("GET /deployments/{id}", d.iter().map(|id| format!("/deployments/{id}")).collect()),
        ("GET /deployments?ids= (100 ids)", lists),
        ("GET /deployments/{id}/builds (first page)", d.iter().map(|id| format!("/deployments/{id}/builds")).collect()),
        (
            "GET /deployments/{id}/builds?limit=20&before= (next page)",
            s.pages.iter().map(|(d, b)| format!("/deployments/{d}/builds?limit=20&before={b}")).collect(),
        ),
        ("GET /sbom-list/{id}", d.iter().map(|id| format!("/sbom-list/{id}")).collect()),
        ("GET /builds/{id}", s.builds.iter().map(|id| format!("/builds/{id}")).collect()),
    ]
}

/// The statements of each read (the store functions' own SQL), with sample
/// parameters: `(read, function, sql, params)`.
fn statements(s: &Samples) -> Vec<(&'static str, &'static str, String, Vec<String>)> {
    let d = s.deployments[0].clone();
    let (hot, before) = s.pages[0].clone();
    let deployment_get = "SELECT id, configuration, module_source, domain, instances, names, version, created_at, \
                          updated_at FROM deployments WHERE id = $1"
        .to_owned();
    let one = |v: &str| vec![v.to_owned()];
    let many: Vec<String> = s.deployments.iter().take(100).cloned().collect();
    vec![
        ("GET /deployments/{id}", "deployments::get", deployment_get.clone(), one(&d)),
        ("GET /deployments/{id}", "builds::latest", builds::newest_sql(Newest::Any), one(&d)),
        ("GET /deployments/{id}", "builds::deciding", builds::newest_sql(Newest::Deciding), one(&d)),
        ("GET /deployments/{id}", "builds::latest_succeeded", builds::newest_sql(Newest::Succeeded), one(&d)),
        (
            "GET /deployments/{id}",
            "instance_readiness::of_deployment",
            "SELECT deployment_id, instance, build_id, url, state, reason, probes, since, checked_at, deadline_at \
             FROM instance_readiness WHERE deployment_id = $1 ORDER BY instance"
                .to_owned(),
            one(&d),
        ),
        ("GET /deployments?ids=", "deployments::get_many", deployments::get_many_sql(many.len()), many.clone()),
        (
            "GET /deployments?ids=",
            "builds::newest_of_each (latest)",
            builds::newest_of_each_sql(Newest::Any, many.len()),
            many.clone(),
        ),
        (
            "GET /deployments?ids=",
            "builds::newest_of_each (deciding)",
            builds::newest_of_each_sql(Newest::Deciding, many.len()),
            many.clone(),
        ),
        (
            "GET /deployments?ids=",
            "builds::newest_of_each (latest succeeded)",
            builds::newest_of_each_sql(Newest::Succeeded, many.len()),
            many.clone(),
        ),
        (
            "GET /deployments?ids=",
            "instance_readiness::of_deployments",
            instance_readiness::of_deployments_sql(many.len()),
            many.clone(),
        ),
        ("GET /deployments/{id}/builds", "deployments::get (require_exists)", deployment_get.clone(), one(&hot)),
        (
            "GET /deployments/{id}/builds",
            "builds::get (before)",
            format!("SELECT {BUILD_COLUMNS} FROM builds WHERE id = $1"),
            one(&before),
        ),
        (
            "GET /deployments/{id}/builds",
            "builds::list",
            format!(
                "SELECT {BUILD_COLUMNS} FROM builds WHERE deployment_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3"
            ),
            vec![hot.clone(), format!("@seq:{before}"), "21".into()],
        ),
        ("GET /sbom-list/{id}", "deployments::get (require_exists)", deployment_get, one(&d)),
        (
            "GET /sbom-list/{id}",
            "sboms::list",
            "SELECT node, status, reason, build_id, created_at FROM sboms WHERE deployment_id = $1 ORDER BY node"
                .to_owned(),
            one(&d),
        ),
        (
            "GET /builds/{id}",
            "builds::get",
            format!("SELECT {BUILD_COLUMNS} FROM builds WHERE id = $1"),
            one(&s.logged),
        ),
        ("GET /builds/{id}", "builds::log", "SELECT id FROM builds WHERE id = $1".to_owned(), one(&s.logged)),
        (
            "GET /builds/{id}",
            "builds::log",
            "SELECT chunk FROM build_log_chunks WHERE build_id = $1 ORDER BY seq".to_owned(),
            one(&s.logged),
        ),
    ]
}

/// Runs the reads part: one JSON object. Per engine both databases are
/// seeded and served at once, and each read is timed on them in turns
/// ([`ROUNDS`] slices each), so that a slow spell of the machine lands on
/// both sides of a ratio, not on one.
pub async fn run(args: Args) -> anyhow::Result<Value> {
    let bin = bin_dir(args.bin.clone());
    let mut engines = Vec::new();
    for name in &args.engines {
        let engine = crate::proc::engine_named(name)?;
        let result = both_databases(&args, &bin, engine).await;
        if engine == Engine::Postgres {
            for database in PG_DATABASES {
                drop_pg_database(&args.server, database).await?;
            }
        }
        let Some((small, big)) = result.with_context(|| name.clone())? else { continue };
        let mut ratios = Vec::new();
        for (s, b) in small["reads"].as_array().unwrap().iter().zip(big["reads"].as_array().unwrap()) {
            ratios.push(json!({
                "read": s["read"],
                "p50_ratio": b["p50_us"].as_f64().unwrap() / s["p50_us"].as_f64().unwrap(),
                "p99_ratio": b["p99_us"].as_f64().unwrap() / s["p99_us"].as_f64().unwrap(),
            }));
        }
        engines.push(json!({ "engine": name, "small": small, "big": big, "ratios": ratios }));
    }
    Ok(json!({ "name": "reads", "seconds": args.seconds, "queue_size": QUEUE_SIZE, "engines": engines }))
}

/// Slices each read's `--seconds` is cut into, per database, taken in turns.
const ROUNDS: u32 = 5;

/// The small and the big database of `engine`, read in turns: `(small,
/// big)`, each its figures; `None` with `--plans-only`.
async fn both_databases(args: &Args, bin: &Path, engine: Engine) -> anyhow::Result<Option<(Value, Value)>> {
    let scratch = tempfile::tempdir()?;
    let mut sides = Vec::new();
    for (n, database) in [args.small, args.big].into_iter().zip(PG_DATABASES) {
        eprintln!("[reads] {engine:?}: {n} deployments");
        let dir = scratch.path().join(n.to_string());
        std::fs::create_dir_all(&dir)?;
        let served = one_database(args, bin, engine, n, &dir, database).await;
        match served.with_context(|| format!("{n} deployments"))? {
            Some(side) => sides.push(side),
            None => continue,
        }
    }
    if sides.len() < 2 {
        return Ok(None);
    }
    for side in sides.iter_mut() {
        side.client = Some(Client::connect(&side.addr)?);
    }
    let read_names: Vec<&str> = sides[0].reads.iter().map(|(read, _)| *read).collect();
    let mut measured: [Vec<Value>; 2] = [Vec::new(), Vec::new()];
    for (i, read) in read_names.iter().enumerate() {
        let mut timings = [Timings::default(), Timings::default()];
        for side in sides.iter_mut() {
            side.warm_up(i).with_context(|| read.to_string())?;
        }
        for _ in 0..ROUNDS {
            for (side, t) in sides.iter_mut().zip(timings.iter_mut()) {
                side.time(i, args.seconds / f64::from(ROUNDS), t).with_context(|| read.to_string())?;
            }
        }
        for (k, t) in timings.into_iter().enumerate() {
            let mut m = t.summary();
            eprintln!(
                "[reads]   {} deployments, {read}: p50 {:.0} µs, p99 {:.0} µs",
                sides[k].info["deployments"], m["p50_us"], m["p99_us"]
            );
            m["read"] = json!(read);
            measured[k].push(m);
        }
    }
    let mut out = Vec::new();
    for (side, reads) in sides.into_iter().zip(measured) {
        let Served { mut info, api, .. } = side;
        let (rss, _, _) = api.memory()?;
        api.stop()?;
        info["api_rss_kib_after"] = json!(rss);
        info["reads"] = json!(reads);
        out.push(info);
    }
    let big = out.pop().expect("two sides");
    let small = out.pop().expect("two sides");
    Ok(Some((small, big)))
}

/// One database served by its own api, ready to be read.
struct Served {
    /// Its figures so far (seeding, plans, admission count).
    info: Value,
    api: Process,
    /// Its api's address.
    addr: String,
    /// Connected once both databases are ready (an api closes a
    /// connection left idle while the other database is seeded).
    client: Option<Client>,
    token: String,
    /// Each read's name and the paths it cycles through.
    reads: Vec<(&'static str, Vec<String>)>,
    /// Where each read's next request starts in its paths.
    next: Vec<usize>,
}

/// One read's timed requests on one database.
#[derive(Default)]
struct Timings {
    micros: Vec<f64>,
    bytes: usize,
}

impl Timings {
    fn summary(mut self) -> Value {
        let n = self.micros.len();
        self.micros.sort_by(f64::total_cmp);
        json!({
            "requests": n,
            "p50_us": percentile(&self.micros, 50.0),
            "p99_us": percentile(&self.micros, 99.0),
            "mean_us": self.micros.iter().sum::<f64>() / n as f64,
            "answer_bytes": self.bytes / n.max(1),
        })
    }
}

impl Served {
    /// Read `i`'s warm-up: its paths once, for at most 3 s.
    fn warm_up(&mut self, i: usize) -> anyhow::Result<()> {
        let paths = &self.reads[i].1;
        ensure!(!paths.is_empty(), "no sample");
        let client = self.client.as_mut().context("not connected")?;
        let warm = Instant::now();
        for path in paths {
            let (status, body) = client.get(path, Some(&self.token))?;
            ensure!(status == 200, "{path}: {status} {}", String::from_utf8_lossy(&body));
            if warm.elapsed() > Duration::from_secs(3) {
                break;
            }
        }
        Ok(())
    }

    /// `seconds` of read `i`'s requests (at least 4), timed into `t`; every
    /// answer must be 200.
    fn time(&mut self, i: usize, seconds: f64, t: &mut Timings) -> anyhow::Result<()> {
        let paths = &self.reads[i].1;
        let client = self.client.as_mut().context("not connected")?;
        let start = Instant::now();
        let mut sent = 0;
        while start.elapsed().as_secs_f64() < seconds || sent < 4 {
            let path = &paths[self.next[i] % paths.len()];
            self.next[i] += 1;
            sent += 1;
            let begun = Instant::now();
            let (status, body) = client.get(path, Some(&self.token))?;
            t.micros.push(begun.elapsed().as_secs_f64() * 1e6);
            ensure!(status == 200, "{path}: {status} {}", String::from_utf8_lossy(&body));
            t.bytes += body.len();
        }
        Ok(())
    }
}

/// Seeds a database of `n` deployments (on PostgreSQL, `database`), takes
/// its plans and admission count, and starts its api; `None` with
/// `--plans-only`, which prints the plans instead.
async fn one_database(
    args: &Args,
    bin: &Path,
    engine: Engine,
    n: usize,
    scratch: &Path,
    database: &str,
) -> anyhow::Result<Option<Served>> {
    let sqlite_path = scratch.join("slipway.db");
    let url = match engine {
        Engine::Sqlite => format!("sqlite://{}", sqlite_path.display()),
        Engine::Postgres => {
            drop_pg_database(&args.server, database).await?;
            let admin: sqlx::postgres::PgConnectOptions = args.server.parse().context("parsing --server")?;
            let mut conn = admin.connect().await.with_context(|| format!("connecting to {}", args.server))?;
            sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {database}"))).execute(&mut conn).await?;
            conn.close().await?;
            let base = args.server.rsplit_once('/').map_or(args.server.as_str(), |(b, _)| b);
            format!("{base}/{database}")
        }
    };
    // Slipway's own open: its migrations, its connection settings.
    let db = match engine {
        Engine::Sqlite => store::open_sqlite(&sqlite_path).await?,
        Engine::Postgres => store::open_postgres(&url).await?,
    };
    let started = Instant::now();
    let seed_sql = seed::sql(engine == Engine::Postgres, n);
    let mut vacuum_s = 0.0;
    match &db {
        Db::Postgres(pool) => {
            let mut conn = pool.acquire().await?;
            sqlx::raw_sql(AssertSqlSafe(seed_sql)).execute(&mut *conn).await.context("seeding")?;
            let v = Instant::now();
            sqlx::raw_sql("VACUUM ANALYZE").execute(&mut *conn).await?;
            vacuum_s = v.elapsed().as_secs_f64();
            // The bulk load's dirty pages written out now, so that no
            // checkpoint of them lands among the reads measured next.
            sqlx::raw_sql("CHECKPOINT").execute(&mut *conn).await?;
        }
        Db::Sqlite(pool) => {
            let mut conn = pool.acquire().await?;
            sqlx::raw_sql(AssertSqlSafe(seed_sql)).execute(&mut *conn).await.context("seeding")?;
            // Likewise the write-ahead log folded into the database file.
            sqlx::raw_sql("PRAGMA wal_checkpoint(TRUNCATE)").execute(&mut *conn).await?;
        }
    }
    let seed_s = started.elapsed().as_secs_f64();
    let counts = table_counts(&db).await?;
    let size_mb = database_mb(&db, &sqlite_path).await?;
    eprintln!("[reads]   seeded in {seed_s:.1} s ({counts}), {size_mb:.0} MB");
    let samples = samples(&db).await?;
    let plans = explain(&db, &samples).await?;
    let count = time_count(&db, args.counts).await?;
    db.close().await;
    if args.plans_only {
        for p in &plans {
            eprintln!(
                "-- {} ({})\n{}\n",
                p["function"].as_str().unwrap_or(""),
                p["read"].as_str().unwrap_or(""),
                p["plan"].as_str().unwrap_or("")
            );
        }
        eprintln!("admission count: {count}");
        return Ok(None);
    }
    let mut info = json!({
        "deployments": n,
        "rows": counts,
        "database_mb": size_mb,
        "seed_s": seed_s,
        "vacuum_analyze_s": vacuum_s,
        "admission_count": count,
        "plans": plans,
    });

    // The api, as an operator starts it.
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let secret = format!("{:032x}", rand_u128());
    let env: Vec<(String, String)> = vec![
        ("DATABASE_URL".into(), url.clone()),
        ("SLIPWAY_BIND".into(), addr.clone()),
        ("SLIPWAY_JWT_SECRET".into(), secret.clone()),
        ("SLIPWAY_LOG".into(), "error".into()),
        ("SLIPWAY_STATE_DIR".into(), scratch.join("state").display().to_string()),
        ("QUEUE_SIZE".into(), QUEUE_SIZE.to_string()),
    ];
    let api_bin = bin.join("slipway-api");
    let token = mint(&api_bin, &env)?;
    let mut api = Process::start(&api_bin, &[], &env, &scratch.join("api.log"))?;
    let ready = wait_ready(&addr, &mut api, Duration::from_secs(60))?;
    info["api_ready_ms"] = json!(ready.as_secs_f64() * 1000.0);
    let reads = reads(&samples);
    let next = vec![0; reads.len()];
    Ok(Some(Served { info, api, addr, client: None, token, reads, next }))
}

fn rand_u128() -> u128 {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .expect("urandom");
    u128::from_le_bytes(bytes)
}

/// A token for every deployment, minted by `slipway-api token`.
pub fn mint(api_bin: &Path, env: &[(String, String)]) -> anyhow::Result<String> {
    let out = std::process::Command::new(api_bin)
        .args(["token", "--deployments", "*", "--ttl", "2h", "--operator"])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()?;
    ensure!(out.status.success(), "slipway-api token: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

async fn table_counts(db: &Db) -> anyhow::Result<Value> {
    let mut conn = db.acquire().await?;
    let mut out = serde_json::Map::new();
    for table in ["deployments", "builds", "sboms", "instance_readiness", "build_log_chunks"] {
        let n = store::Q::new(format!("SELECT COUNT(*) AS n FROM {table}")).fetch_one(&mut conn).await?.int("n")?;
        out.insert(table.into(), json!(n));
    }
    let queued = store::Q::new("SELECT COUNT(*) AS n FROM builds WHERE status = 'queued'")
        .fetch_one(&mut conn)
        .await?
        .int("n")?;
    out.insert("queued_builds".into(), json!(queued));
    Ok(Value::Object(out))
}

async fn database_mb(db: &Db, sqlite_path: &Path) -> anyhow::Result<f64> {
    Ok(match db {
        Db::Postgres(pool) => {
            let bytes: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())").fetch_one(pool).await?;
            bytes as f64 / 1e6
        }
        Db::Sqlite(_) => {
            let wal = std::fs::metadata(sqlite_path.with_extension("db-wal")).map_or(0, |m| m.len());
            (std::fs::metadata(sqlite_path)?.len() + wal) as f64 / 1e6
        }
    })
}

async fn samples(db: &Db) -> anyhow::Result<Samples> {
    let mut conn = db.acquire().await?;
    let ids = |sql: &str| store::Q::new(sql.to_owned());
    let deployments: Vec<String> = ids("SELECT id FROM deployments ORDER BY random() LIMIT 1000")
        .fetch_all(&mut conn)
        .await?
        .iter()
        .map(|r| r.text("id"))
        .collect::<Result<_, _>>()?;
    let builds: Vec<String> = ids("SELECT id FROM builds ORDER BY random() LIMIT 1000")
        .fetch_all(&mut conn)
        .await?
        .iter()
        .map(|r| r.text("id"))
        .collect::<Result<_, _>>()?;
    // Deployments of 208 builds are every 100th by creation.
    let hot: Vec<String> = ids("SELECT id FROM deployments WHERE version = 208 ORDER BY random() LIMIT 100")
        .fetch_all(&mut conn)
        .await?
        .iter()
        .map(|r| r.text("id"))
        .collect::<Result<_, _>>()?;
    let mut pages = Vec::new();
    for d in hot {
        let b = store::Q::new("SELECT id FROM builds WHERE deployment_id = $1 ORDER BY seq DESC LIMIT 1 OFFSET 100")
            .text(&d)
            .fetch_one(&mut conn)
            .await?
            .text("id")?;
        pages.push((d, b));
    }
    let logged = ids("SELECT build_id FROM build_log_chunks ORDER BY build_id LIMIT 1")
        .fetch_one(&mut conn)
        .await?
        .text("build_id")?;
    ensure!(!pages.is_empty(), "no deployment of 208 builds");
    Ok(Samples { deployments, pages, builds, logged })
}

/// Each read's statements' plans: PostgreSQL's `EXPLAIN (ANALYZE, BUFFERS)`
/// of the generic plan (the one a prepared statement settles on, as the
/// api's pooled connections run them); SQLite's `EXPLAIN QUERY PLAN` by
/// the bundled SQLite the binaries link.
async fn explain(db: &Db, s: &Samples) -> anyhow::Result<Vec<Value>> {
    let mut stmts = statements(s);
    stmts.push((
        "admission (Q-3)",
        "store::submit::admission_count",
        slipway_jobs::store::submit::admission_count_sql(),
        vec![QUEUE_SIZE.to_string()],
    ));
    let mut out = Vec::new();
    let mut conn = db.acquire().await?;
    for (read, function, sql, params) in stmts {
        let mut resolved = Vec::new();
        for p in params {
            match p.strip_prefix("@seq:") {
                Some(id) => resolved.push(
                    store::Q::new("SELECT seq FROM builds WHERE id = $1")
                        .text(id)
                        .fetch_one(&mut conn)
                        .await?
                        .int("seq")?
                        .to_string(),
                ),
                None => resolved.push(p),
            }
        }
        let plan = match db {
            Db::Postgres(pool) => {
                let mut c = pool.acquire().await?;
                let literals: Vec<String> = resolved
                    .iter()
                    .map(|v| if v.parse::<i64>().is_ok() { v.clone() } else { format!("'{}'", v.replace('\'', "''")) })
                    .collect();
                let script = format!(
                    "SET plan_cache_mode = force_generic_plan; PREPARE s AS {sql}; \
                     EXPLAIN (ANALYZE, BUFFERS) EXECUTE s({}); DEALLOCATE s; RESET plan_cache_mode",
                    literals.join(", ")
                );
                // The plan's lines come back as rows of the EXPLAIN.
                let rows = sqlx::raw_sql(AssertSqlSafe(script)).fetch_all(&mut *c).await?;
                rows.iter().filter_map(|r| r.try_get::<String, _>(0).ok()).collect::<Vec<_>>().join("\n")
            }
            Db::Sqlite(pool) => {
                let mut q = sqlx::query(AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")));
                for v in &resolved {
                    q = match v.parse::<i64>() {
                        Ok(i) => q.bind(i),
                        Err(_) => q.bind(v.clone()),
                    };
                }
                let rows = q.fetch_all(&**pool).await?;
                let mut depth: std::collections::HashMap<i64, usize> = std::collections::HashMap::new();
                let mut lines = Vec::new();
                for r in rows {
                    let (id, parent, detail): (i64, i64, String) = (r.try_get(0)?, r.try_get(1)?, r.try_get(3)?);
                    let d = depth.get(&parent).map_or(0, |d| d + 1);
                    depth.insert(id, d);
                    lines.push(format!("{}{detail}", "  ".repeat(d)));
                }
                lines.join("\n")
            }
        };
        out.push(json!({ "read": read, "function": function, "sql": sql, "params": resolved, "plan": plan }));
    }
    Ok(out)
}

/// Times `store::submit::admission_count` (what admission runs before a
/// submit's body is read) `n` times on one pooled connection.
async fn time_count(db: &Db, n: usize) -> anyhow::Result<Value> {
    let mut conn = db.acquire().await?;
    let mut times = Vec::with_capacity(n);
    let mut queued = 0;
    for i in 0..n + 20 {
        let t = Instant::now();
        let q = slipway_jobs::store::submit::admission_count(&mut conn, QUEUE_SIZE).await?;
        if i >= 20 {
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
        queued = q;
    }
    times.sort_by(f64::total_cmp);
    Ok(json!({ "queued": queued, "runs": n, "p50_us": percentile(&times, 50.0), "p99_us": percentile(&times, 99.0) }))
}

async fn drop_pg_database(server: &str, database: &str) -> anyhow::Result<()> {
    let admin: sqlx::postgres::PgConnectOptions = server.parse().context("parsing --server")?;
    let mut conn = admin.connect().await.with_context(|| format!("connecting to {server}"))?;
    sqlx::raw_sql(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))).execute(&mut conn).await?;
    conn.close().await?;
    Ok(())
}
