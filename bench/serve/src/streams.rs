//! Streams (issue 32): one release `slipway-api` holding `--streams`
//! deployment channels (`GET /deployments/{id}/events`) open over loopback,
//! spread evenly over `--deployments` deployments, all held by this one
//! client process (one tokio task per stream over hyper's HTTP/1.1 client,
//! the events parsed by `eventsource-stream`).
//!
//! Each engine, in order:
//!
//! 1. Seeds the deployments through the real store functions, as a submit
//!    and a worker's claim write them: each has one deploy `running`, and
//!    its channel one event (`1`, `building`).
//! 2. Opens every stream (no `Last-Event-ID`), `--open-batch` at a time,
//!    each batch once the one before has read its first events; leaves them
//!    idle, then reads the api's resident
//!    memory (`VmRSS`; per stream = the growth over the count), its CPU time
//!    (`/proc/PID/stat`) and the database connections it holds
//!    (`pg_stat_activity` by its `application_name`; on SQLite, its open
//!    descriptors of the database file), beside the same before any stream.
//! 3. Reconnect storm: drops every connection, waits until the api has let
//!    them go, records a new event (`2`, a newer deploy queued) on every
//!    other deployment while they are away, then reconnects all at once,
//!    each with `Last-Event-ID` of the last event it read.
//! 4. Ends the builds, as a worker records an end (`builds::finish`,
//!    `builds::dispatch_next`, `events::record` in one transaction), spread
//!    over `--end-seconds` by 4 writers: each follower's delay is from the
//!    moment its build's transaction was sent `COMMIT` to the moment it read
//!    the ending event (one clock: the same process).
//! 5. Checks every follower's ids over its connections: `1, 2` or `1, 2,
//!    3`, none twice, none missing.
//!
//! A follower refused (`429`, `503`) or cut waits 1 s and opens again with
//! its last id, as a browser's `EventSource` would after a cut; refusals
//! are counted and reported. The process raises its own descriptor limit
//! to its hard limit first.

use crate::proc::{bin_dir, each_engine, free_port, percentile, pg_database, wait_ready, Process};
use crate::reads::mint;
use anyhow::{bail, ensure, Context as _};
use eventsource_stream::Eventsource as _;
use futures::StreamExt as _;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use slipway_jobs::id::{new_build_id, DeploymentId};
use slipway_jobs::provenance::Trigger;
use slipway_jobs::state::{BuildKind, BuildStatus};
use slipway_jobs::store::{self, builds, deployments, events, Db, Engine};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The options of `streams`.
#[derive(clap::Args)]
pub struct Args {
    /// Engines to measure, in this order.
    #[arg(long, value_delimiter = ',', default_value = "postgres,sqlite")]
    engines: Vec<String>,
    /// Deployments followed.
    #[arg(long, default_value_t = 1000)]
    deployments: usize,
    /// Streams held open, spread evenly over the deployments.
    #[arg(long, default_value_t = 10_000)]
    streams: usize,
    /// Seconds over which every deployment's build ends.
    #[arg(long, default_value_t = 10.0)]
    end_seconds: f64,
    /// Seconds the streams are left idle before the api's memory is read.
    #[arg(long, default_value_t = 5.0)]
    idle: f64,
    /// Streams opened together while they are first opened (tabs opening
    /// over time; the storm opens them all at once).
    #[arg(long, default_value_t = 500)]
    open_batch: usize,
    /// PostgreSQL server (any existing database, for the admin connection);
    /// the bench creates and drops `slipway_bench_streams` there.
    #[arg(long, env = "SLIPWAY_BENCH_SERVER", default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    server: String,
    /// Folder of the release binaries (default `$CARGO_TARGET_DIR/release` or `target/release`).
    #[arg(long)]
    bin: Option<std::path::PathBuf>,
}

const PG_DATABASE: &str = "slipway_bench_streams";

/// How long each phase may take before the bench gives up.
const PHASE_LIMIT: Duration = Duration::from_secs(180);

/// The writers that end the builds at once.
const WRITERS: usize = 4;

/// A follower's wait before it opens its stream again after a refusal or a
/// cut (a browser's `EventSource` waits the stream's `retry:`, 1 to 5 s).
const REOPEN_WAIT: Duration = Duration::from_secs(1);

/// Runs the streams part: one JSON object.
pub async fn run(args: Args) -> anyhow::Result<Value> {
    let fds = raise_fd_limit()?;
    ensure!(
        fds >= args.streams as u64 + 256,
        "this process may open {fds} descriptors, too few for {} streams",
        args.streams
    );
    ensure!(args.deployments > 0 && args.streams >= args.deployments, "--streams must be at least --deployments");
    let bin = bin_dir(args.bin.clone());
    let (args_ref, bin_ref) = (&args, &bin);
    let engines = each_engine("streams", &args.engines, &args.server, PG_DATABASE, |engine, scratch| async move {
        one_engine(args_ref, bin_ref, engine, &scratch).await
    })
    .await?;
    Ok(json!({
        "name": "streams",
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "deployments": args.deployments,
        "streams": args.streams,
        "end_seconds": args.end_seconds,
        "open_batch": args.open_batch,
        "idle_s": args.idle,
        "client_fd_limit": fds,
        "engines": engines,
    }))
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit: the new soft limit.
fn raise_fd_limit() -> anyhow::Result<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit write and read the one struct given.
    unsafe {
        ensure!(
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0,
            "getrlimit: {}",
            std::io::Error::last_os_error()
        );
        limit.rlim_cur = limit.rlim_max;
        ensure!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0, "setrlimit: {}", std::io::Error::last_os_error());
    }
    Ok(limit.rlim_cur)
}

/// Deployment `d`'s id.
fn deployment_id(d: usize) -> String {
    format!("stream-{d:05}")
}

/// Whether deployment `d` gets an event while its followers are away.
fn changed_while_away(d: usize) -> bool {
    d.is_multiple_of(2)
}

/// The ids a follower of deployment `d` must have read, each once, in order.
fn expected_ids(d: usize) -> Vec<i64> {
    if changed_while_away(d) {
        vec![1, 2, 3]
    } else {
        vec![1, 2]
    }
}

async fn one_engine(args: &Args, bin: &Path, engine: Engine, scratch: &Path) -> anyhow::Result<Value> {
    let url = match engine {
        Engine::Sqlite => format!("sqlite://{}", scratch.join("slipway.db").display()),
        Engine::Postgres => pg_database(&args.server, PG_DATABASE, true).await?,
    };
    let db = match engine {
        Engine::Sqlite => store::open_sqlite(&scratch.join("slipway.db")).await?,
        Engine::Postgres => store::open_postgres(&url).await?,
    };
    let seeding = Instant::now();
    seed(&db, args.deployments).await?;
    eprintln!("[streams]   seeded {} deployments in {:.1} s", args.deployments, seeding.elapsed().as_secs_f64());

    let addr = format!("127.0.0.1:{}", free_port()?);
    let cap = (2 * args.streams + 100).to_string();
    let env: Vec<(String, String)> = vec![
        ("DATABASE_URL".into(), url.clone()),
        ("SLIPWAY_BIND".into(), addr.clone()),
        ("SLIPWAY_JWT_SECRET".into(), "streams-bench-secret-of-enough-length-0123456789".into()),
        ("SLIPWAY_LOG".into(), "warn".into()),
        ("SLIPWAY_STATE_DIR".into(), scratch.join("state").display().to_string()),
        ("SLIPWAY_STREAMS_PER_API".into(), cap.clone()),
        ("SLIPWAY_STREAMS_PER_SUBJECT".into(), cap),
    ];
    let api_bin = bin.join("slipway-api");
    let token = mint(&api_bin, &env)?;
    let mut api = Process::start(&api_bin, &[], &env, &scratch.join("api.log"))?;
    wait_ready(&addr, &mut api, Duration::from_secs(120))?;
    let pid = api.pid();
    let api_fd_limit = soft_fd_limit(pid)?;
    let held = Held::new(&db, engine, pid, scratch.join("slipway.db"));
    let sampler = held.sample_until_dropped();
    let idle = Duration::from_secs_f64(args.idle);
    tokio::time::sleep(idle).await;
    let before = Snapshot::take(&api, &held).await?;
    let base_fds = open_fds(pid)?;

    let client = Arc::new(Client::new(addr.parse()?, token, args));

    // Open every stream and let them sit.
    let started = Instant::now();
    let open_cpu = cpu_seconds(pid)?;
    let mut tasks = Vec::with_capacity(args.streams);
    for start in (0..args.streams).step_by(args.open_batch.max(1)) {
        let end = (start + args.open_batch.max(1)).min(args.streams);
        tasks.extend(client.spawn(start..end));
        client.wait_reads(end, end, "every stream's first event").await?;
    }
    let open_s = started.elapsed().as_secs_f64();
    let open_cpu = cpu_seconds(pid)? - open_cpu;
    let (opened_refused, opened_errors) = client.take_counts();
    eprintln!(
        "[streams]   {} streams open in {open_s:.1} s ({opened_refused} refused, {opened_errors} cut)",
        args.streams
    );
    tokio::time::sleep(idle).await;
    let idle_cpu = cpu_seconds(pid)?;
    let open = Snapshot::take(&api, &held).await?;
    let idle_window = Duration::from_secs(5);
    tokio::time::sleep(idle_window).await;
    let idle_cpu = cpu_seconds(pid)? - idle_cpu;
    let per_stream_kib = (open.rss_kib as f64 - before.rss_kib as f64) / args.streams as f64;
    eprintln!(
        "[streams]   api {} -> {} KiB: {per_stream_kib:.1} KiB per stream; database connections {} -> {}",
        before.rss_kib, open.rss_kib, before.connections, open.connections
    );

    // The storm: every connection dropped; half the deployments change
    // meanwhile; all come back at once with their last id.
    drop(tasks);
    let dropped = Instant::now();
    loop {
        if open_fds(pid)? <= base_fds + 16 {
            break;
        }
        ensure!(dropped.elapsed() < PHASE_LIMIT, "the api still holds the dropped streams' sockets");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let released_ms = dropped.elapsed().as_secs_f64() * 1e3;
    away(&db, args.deployments).await?;
    let replays = (0..args.streams).filter(|i| changed_while_away(i % args.deployments)).count();
    let storm_reads = args.streams + replays;
    let storm_cpu = cpu_seconds(pid)?;
    let started = Instant::now();
    let tasks = client.spawn_all();
    client.wait_reads(storm_reads, args.streams, "every stream back and its replay after the storm").await?;
    let storm_s = started.elapsed().as_secs_f64();
    let storm_cpu = cpu_seconds(pid)? - storm_cpu;
    let (storm_refused, storm_errors) = client.take_counts();
    eprintln!(
        "[streams]   storm: released in {released_ms:.0} ms, all back and replayed in {storm_s:.1} s ({storm_refused} \
         refused, {storm_errors} cut)"
    );

    // The builds end.
    prepare_ends(&db, args.deployments).await?;
    let end_cpu = cpu_seconds(pid)?;
    let started = Instant::now();
    let committing = end_builds(&db, args.deployments, Duration::from_secs_f64(args.end_seconds)).await?;
    client.wait_reads(storm_reads + args.streams, 0, "every ending event").await?;
    let end_s = started.elapsed().as_secs_f64();
    let end_cpu = cpu_seconds(pid)? - end_cpu;
    let (end_refused, end_errors) = client.take_counts();
    // Every stream ends after its terminal event.
    let ending = Instant::now();
    while tasks.iter().any(|t| !t.0.is_finished()) {
        ensure!(ending.elapsed() < PHASE_LIMIT, "streams still open after their terminal event");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(tasks);
    let after = Snapshot::take(&api, &held).await?;
    let most = held.most.load(Ordering::Relaxed);
    drop(sampler);

    // Every follower's ids, and its delay.
    let mut delays = Vec::with_capacity(args.streams);
    let (mut twice, mut missing, mut out_of_order) = (0usize, 0usize, 0usize);
    for (i, f) in client.followers.iter().enumerate() {
        let f = f.lock().expect("follower state");
        let d = i % args.deployments;
        let want = expected_ids(d);
        for id in &want {
            match f.ids.iter().filter(|seen| *seen == id).count() {
                0 => missing += 1,
                1 => {}
                n => twice += n - 1,
            }
        }
        if f.ids.iter().any(|id| !want.contains(id)) || !f.ids.windows(2).all(|w| w[0] < w[1]) {
            out_of_order += 1;
        }
        if let (Some(read), Some(sent)) = (f.terminal_at, committing[d]) {
            delays.push(read.saturating_duration_since(sent).as_secs_f64() * 1e3);
        }
    }
    delays.sort_by(f64::total_cmp);
    eprintln!(
        "[streams]   ends: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms over {} followers; {twice} read twice, {missing} \
         missed, {out_of_order} out of order",
        percentile(&delays, 50.0),
        percentile(&delays, 99.0),
        delays.last().copied().unwrap_or(f64::NAN),
        delays.len()
    );
    api.stop()?;
    db.close().await;
    Ok(json!({
        "api_fd_limit": api_fd_limit,
        "before": before.json(),
        "open": open.json(),
        "after": after.json(),
        "per_stream_kib": per_stream_kib,
        "connections_most": most,
        "pool_cap": held.cap(),
        "opening": { "seconds": open_s, "cpu_s": open_cpu, "refused": opened_refused, "cut": opened_errors },
        "idle": { "window_s": idle_window.as_secs_f64(), "cpu_s": idle_cpu },
        "storm": {
            "released_ms": released_ms, "seconds": storm_s, "cpu_s": storm_cpu,
            "refused": storm_refused, "cut": storm_errors, "replayed": replays,
        },
        "ends": {
            "builds": args.deployments, "spread_s": args.end_seconds, "seconds": end_s, "cpu_s": end_cpu,
            "refused": end_refused, "cut": end_errors, "followers_timed": delays.len(),
            "p50_ms": percentile(&delays, 50.0), "p99_ms": percentile(&delays, 99.0),
            "max_ms": delays.last().copied(),
        },
        "check": { "followers": args.streams, "read_twice": twice, "missed": missing, "out_of_order": out_of_order },
    }))
}

/// The api's state at one moment.
struct Snapshot {
    rss_kib: u64,
    peak_kib: u64,
    threads: u64,
    fds: usize,
    connections: i64,
    busy: i64,
}

impl Snapshot {
    async fn take(api: &Process, held: &Held) -> anyhow::Result<Self> {
        let (rss_kib, peak_kib, threads) = api.memory()?;
        let (connections, busy) = held.now().await?;
        Ok(Self { rss_kib, peak_kib, threads, fds: open_fds(api.pid())?, connections, busy })
    }

    fn json(&self) -> Value {
        json!({
            "rss_kib": self.rss_kib, "peak_kib": self.peak_kib, "threads": self.threads, "fds": self.fds,
            "connections": self.connections, "busy": self.busy,
        })
    }
}

/// The api's open descriptors.
fn open_fds(pid: u32) -> anyhow::Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}

/// The api's soft descriptor limit, from `/proc/PID/limits`.
fn soft_fd_limit(pid: u32) -> anyhow::Result<u64> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits"))?;
    let line = limits.lines().find(|l| l.starts_with("Max open files")).context("no Max open files")?;
    Ok(line.split_whitespace().nth(3).context("a soft limit")?.parse()?)
}

/// The api's CPU time so far (user and system), seconds.
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the command's closing parenthesis: utime is the 12th, stime the 13th.
    let rest = stat.rsplit_once(')').context("a stat line")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    // SAFETY: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok(ticks as f64 / hz)
}

/// The database connections the api holds, read from the database
/// (PostgreSQL) or from its descriptors (SQLite), sampled in the
/// background for the most at once.
#[derive(Clone)]
struct Held {
    db: Db,
    engine: Engine,
    pid: u32,
    file: std::path::PathBuf,
    most: Arc<AtomicU64>,
}

impl Held {
    fn new(db: &Db, engine: Engine, pid: u32, file: std::path::PathBuf) -> Self {
        Self { db: db.clone(), engine, pid, file, most: Arc::new(AtomicU64::new(0)) }
    }

    /// The api's pool size and its LISTEN (PostgreSQL), or its SQLite
    /// connections: what it may hold at most, whatever the streams.
    fn cap(&self) -> Value {
        match self.engine {
            Engine::Postgres => json!(store::POSTGRES_POOL_SIZE + 1),
            // Eight readers and the one writer, each with the database
            // file open (and its write-ahead log).
            Engine::Sqlite => json!(9),
        }
    }

    /// Connections open now, and of them those not idle.
    async fn now(&self) -> anyhow::Result<(i64, i64)> {
        match &self.db {
            Db::Postgres(pool) => {
                let (n, busy): (i64, i64) = sqlx::query_as(
                    "SELECT count(*), count(*) FILTER (WHERE state <> 'idle') FROM pg_stat_activity \
                     WHERE application_name = $1",
                )
                .bind(format!("slipway-api {}", self.pid))
                .fetch_one(pool)
                .await?;
                Ok((n, busy))
            }
            Db::Sqlite(_) => {
                let mut n = 0;
                for entry in std::fs::read_dir(format!("/proc/{}/fd", self.pid))? {
                    if std::fs::read_link(entry?.path()).is_ok_and(|target| target == self.file) {
                        n += 1;
                    }
                }
                Ok((n, -1))
            }
        }
    }

    /// Samples [`Held::now`] every 100 ms into `most` until the guard drops.
    fn sample_until_dropped(&self) -> AbortOnDrop {
        let held = self.clone();
        AbortOnDrop(tokio::spawn(async move {
            loop {
                if let Ok((n, _)) = held.now().await {
                    held.most.fetch_max(n.max(0) as u64, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }))
    }
}

/// A task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What one follower read, over all its connections.
#[derive(Default)]
struct Follower {
    ids: Vec<i64>,
    last: Option<i64>,
    terminal_at: Option<Instant>,
}

/// The streams' client: every follower's state and the counts.
struct Client {
    addr: std::net::SocketAddr,
    token: String,
    deployments: usize,
    followers: Vec<Mutex<Follower>>,
    reads: AtomicUsize,
    opened: AtomicUsize,
    refused: AtomicUsize,
    errors: AtomicUsize,
}

impl Client {
    fn new(addr: std::net::SocketAddr, token: String, args: &Args) -> Self {
        Self {
            addr,
            token,
            deployments: args.deployments,
            followers: (0..args.streams).map(|_| Mutex::default()).collect(),
            reads: AtomicUsize::new(0),
            opened: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            errors: AtomicUsize::new(0),
        }
    }

    /// Starts every follower at once; dropping the answer cuts them all.
    fn spawn_all(self: &Arc<Self>) -> Vec<AbortOnDrop> {
        self.spawn(0..self.followers.len())
    }

    /// Starts followers `range` at once; dropping the answer cuts them.
    fn spawn(self: &Arc<Self>, range: std::ops::Range<usize>) -> Vec<AbortOnDrop> {
        range.map(|i| AbortOnDrop(tokio::spawn(self.clone().follow(i)))).collect()
    }

    /// Waits until the followers have read `total` events in all and opened
    /// `opened` streams since the last [`Client::take_counts`].
    async fn wait_reads(&self, total: usize, opened: usize, what: &str) -> anyhow::Result<()> {
        let started = Instant::now();
        while self.reads.load(Ordering::Relaxed) < total || self.opened.load(Ordering::Relaxed) < opened {
            ensure!(
                started.elapsed() < PHASE_LIMIT,
                "{what}: {} of {total} events read and {} of {opened} streams opened within {PHASE_LIMIT:?}",
                self.reads.load(Ordering::Relaxed),
                self.opened.load(Ordering::Relaxed)
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }

    /// The refusals, cuts and streams opened since the last call, and zero again.
    fn take_counts(&self) -> (usize, usize) {
        self.opened.store(0, Ordering::Relaxed);
        (self.refused.swap(0, Ordering::Relaxed), self.errors.swap(0, Ordering::Relaxed))
    }

    /// Follower `i`: opens its stream (again) with its last id until it
    /// has read a terminal state or is cut by the bench.
    async fn follow(self: Arc<Self>, i: usize) {
        let deployment = deployment_id(i % self.deployments);
        loop {
            let last = self.followers[i].lock().expect("follower state").last;
            match self.stream(i, &deployment, last).await {
                Ok(Ended::Terminal | Ended::NoContent) => return,
                Ok(Ended::Refused) => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Ended::Cut) | Err(_) => {
                    self.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            tokio::time::sleep(REOPEN_WAIT).await;
        }
    }

    /// One connection of follower `i`.
    async fn stream(&self, i: usize, deployment: &str, last: Option<i64>) -> anyhow::Result<Ended> {
        let tcp = tokio::net::TcpStream::connect(self.addr).await?;
        tcp.set_nodelay(true)?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
        let _connection = AbortOnDrop(tokio::spawn(async move {
            let _ = connection.await;
        }));
        let mut request = hyper::Request::get(format!("/deployments/{deployment}/events"))
            .header(hyper::header::HOST, self.addr.to_string())
            .header(hyper::header::AUTHORIZATION, format!("Bearer {}", self.token))
            .header(hyper::header::ACCEPT, "text/event-stream");
        if let Some(n) = last {
            request = request.header("last-event-id", n.to_string());
        }
        let answer = sender.send_request(request.body(Empty::<hyper::body::Bytes>::new())?).await?;
        match answer.status().as_u16() {
            200 => {}
            204 => return Ok(Ended::NoContent),
            429 | 503 => return Ok(Ended::Refused),
            other => bail!("GET /deployments/{deployment}/events: {other}"),
        }
        self.opened.fetch_add(1, Ordering::Relaxed);
        let mut events = answer.into_body().into_data_stream().eventsource();
        while let Some(event) = events.next().await {
            let event = event?;
            if event.event != "state" {
                continue;
            }
            let read = Instant::now();
            let id: i64 = event.id.parse().context("an event id")?;
            let state: Value = serde_json::from_str(&event.data)?;
            let terminal = matches!(state["state"].as_str(), Some("active" | "idle" | "failed"));
            {
                let mut f = self.followers[i].lock().expect("follower state");
                f.ids.push(id);
                f.last = Some(id);
                if terminal {
                    f.terminal_at = Some(read);
                }
            }
            self.reads.fetch_add(1, Ordering::Relaxed);
            if terminal {
                return Ok(Ended::Terminal);
            }
        }
        Ok(Ended::Cut)
    }
}

/// How one connection of a follower ended.
enum Ended {
    /// It read a terminal state (and the api closed the stream).
    Terminal,
    /// `204`: nothing new after a terminal state.
    NoContent,
    /// `429` or `503`.
    Refused,
    /// The stream closed before a terminal state.
    Cut,
}

/// A write transaction on deployment `id`, holding its lock.
async fn begin(db: &Db, id: &str) -> Result<store::Conn, store::StoreError> {
    let mut tx = db.begin_write().await?;
    tx.lock_deployment(id).await?;
    Ok(tx)
}

/// Records the channel's event of `id` as every writer does, and commits:
/// the instant `COMMIT` was sent.
async fn commit(mut tx: store::Conn, id: &str) -> Result<Instant, store::StoreError> {
    events::record(&mut tx, id, store::now_ms()).await?;
    let sent = Instant::now();
    tx.commit().await?;
    Ok(sent)
}

/// A queued deploy of `id`, as a submit inserts it, and its job if it is next.
async fn queue_deploy(conn: &mut store::Conn, id: &str) -> Result<(), store::StoreError> {
    let deployment = DeploymentId::parse(id).map_err(|e| store::StoreError::Corrupt(e.to_string()))?;
    let build = new_build_id(&deployment, time::OffsetDateTime::now_utc());
    let configuration = json!({});
    builds::insert(
        conn,
        builds::NewBuild {
            id: &build,
            deployment_id: id,
            kind: BuildKind::Deploy,
            configuration: &configuration,
            module_source: None,
            instances: &[],
            operator_secrets: None,
            readiness: None,
            dry_run: false,
            trigger: Trigger::Submit,
            provenance: None,
        },
        store::now_ms(),
    )
    .await?;
    builds::dispatch_next(conn, id).await
}

/// The deployment's newest build, claimed by the bench as a worker claims it.
async fn claim_newest(conn: &mut store::Conn, id: &str) -> Result<(), store::StoreError> {
    let build = builds::latest(conn, id).await?.ok_or_else(|| store::StoreError::Corrupt(format!("{id}: no build")))?;
    builds::claim(conn, &build, "slipway-serve-bench", store::now_ms()).await?;
    Ok(())
}

/// Ends deployment `id`'s running build as a worker records its end.
async fn finish_running(conn: &mut store::Conn, id: &str) -> Result<(), store::StoreError> {
    let running = builds::list(conn, id, None, 10, None)
        .await?
        .into_iter()
        .find(|b| b.status == BuildStatus::Running)
        .ok_or_else(|| store::StoreError::Corrupt(format!("{id}: no running build")))?;
    let finish = builds::Finish { status: BuildStatus::Succeeded, reason: None, error: None, report: json!({}) };
    builds::finish(conn, &running, &finish, store::now_ms()).await?;
    builds::dispatch_next(conn, id).await
}

/// Step 1: every deployment with one deploy running, its channel at event 1.
async fn seed(db: &Db, n: usize) -> anyhow::Result<()> {
    let configuration = json!({});
    for d in 0..n {
        let id = deployment_id(d);
        let mut tx = begin(db, &id).await?;
        let snapshot = deployments::Snapshot {
            id: &id,
            configuration: &configuration,
            module_source: None,
            domain: None,
            instances: &[],
            names: None,
        };
        deployments::upsert(&mut tx, snapshot, store::now_ms()).await?;
        queue_deploy(&mut tx, &id).await?;
        claim_newest(&mut tx, &id).await?;
        commit(tx, &id).await?;
    }
    Ok(())
}

/// Step 3: a newer deploy queued on every other deployment (its event 2).
async fn away(db: &Db, n: usize) -> anyhow::Result<()> {
    for d in (0..n).filter(|d| changed_while_away(*d)) {
        let id = deployment_id(d);
        let mut tx = begin(db, &id).await?;
        queue_deploy(&mut tx, &id).await?;
        commit(tx, &id).await?;
    }
    Ok(())
}

/// Before step 4: where a newer deploy waits, the running build ends and
/// the newer one is claimed; no event (the deciding build is the newer one).
async fn prepare_ends(db: &Db, n: usize) -> anyhow::Result<()> {
    for d in (0..n).filter(|d| changed_while_away(*d)) {
        let id = deployment_id(d);
        let mut tx = begin(db, &id).await?;
        finish_running(&mut tx, &id).await?;
        claim_newest(&mut tx, &id).await?;
        commit(tx, &id).await?;
    }
    Ok(())
}

/// Step 4: every deployment's running build ends, spread evenly over
/// `spread` by [`WRITERS`] writers; when each was sent `COMMIT`, by deployment.
async fn end_builds(db: &Db, n: usize, spread: Duration) -> anyhow::Result<Vec<Option<Instant>>> {
    let start = tokio::time::Instant::now();
    let step = spread / n as u32;
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let db = db.clone();
        writers.push(tokio::spawn(async move {
            let mut sent = Vec::new();
            // A fixed shuffle: neighbours in id end apart.
            for k in (w..n).step_by(WRITERS) {
                let d = (k * 7919) % n;
                tokio::time::sleep_until(start + step * k as u32).await;
                let id = deployment_id(d);
                let mut tx = begin(&db, &id).await?;
                finish_running(&mut tx, &id).await?;
                sent.push((d, commit(tx, &id).await?));
            }
            Ok::<_, anyhow::Error>(sent)
        }));
    }
    let mut committing = vec![None; n];
    for w in writers {
        for (d, at) in w.await?? {
            committing[d] = Some(at);
        }
    }
    Ok(committing)
}
