//! The simulated fleet: the database side of many worker processes in one
//! process, each with its own identity.
//!
//! A simulated worker does against the database what `slipway-worker work`
//! does (`worker/src/work/`), through the same code: one apalis worker per
//! database queue (`builds`, `nix`, `callbacks`, `readiness`, `rollouts`),
//! named as the real process names them and built by
//! [`QueueSettings::postgres`] with the batch sizes the worker's
//! registration gives, so apalis registers, beats, looks for orphans and
//! polls exactly as it does there; Slipway's own keep-alive every half
//! heartbeat ([`heartbeats::keep_alive`]); the clock read every minute
//! ([`store::db_now_ms`], what `ClockWatch` reads). The LISTEN
//! ([`JobFeed`]) and the connection pool are shared by a group of
//! simulated workers: a real worker holds one LISTEN and up to 16 pooled
//! connections, and 1,000 of them would exceed `max_connections`.
//!
//! A build runs the frame of `jobs/src/jobs/build_job.rs` with the effect
//! replaced by a sleep: the claim (a write transaction, [`builds::get`] then
//! [`builds::claim`]), one chunk of output ([`builds::append_log`]), the
//! sleep, then the record transaction as `record_once` writes it for a
//! successful deploy (the deployment's lock, [`sboms::replace`],
//! [`builds::finish`], [`instance_readiness::begin`] and the readiness job
//! pushed, [`builds::dispatch_next`], [`events::record`]). A readiness job
//! makes one round whose probes all answer ready at once (the round's reads
//! and writes of `jobs/src/jobs/readiness.rs`, without the HTTP probes).
//! Builds come in through the submit's own transaction
//! ([`submit::lock_and_upsert`] and [`submit::write_build`], which pushes
//! the job), without the validation before it.

use apalis::prelude::{BoxDynError, Data, WorkerBuilder, WorkerBuilderExt as _};
use serde_json::{json, Value};
use slipway_jobs::probe::State;
use slipway_jobs::provenance::Trigger;
use slipway_jobs::source::outputs::{Instance, ReadinessMeta};
use slipway_jobs::state::{BuildKind, BuildStatus, DeploymentState};
use slipway_jobs::store::instance_readiness::{self, Found};
use slipway_jobs::store::queue::{
    BuildJob, CallbackJob, Concurrency, JobFeed, JobKind, NixJob, ReadinessJob, RolloutJob,
};
use slipway_jobs::store::sboms::{self, NodeSbom};
use slipway_jobs::store::submit::{self, AdmissionLock, WriteBuild};
use slipway_jobs::store::{self, builds, deployments, events, heartbeats, queue, Db};
use slipway_worker::completer::Completer;
use slipway_worker::storage::QueueSettings;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

/// How the simulated workers behave (the worker's settings they stand for).
#[derive(Debug, Clone)]
pub struct Settings {
    /// `SLIPWAY_HEARTBEAT`.
    pub heartbeat: Duration,
    /// `SLIPWAY_POSTGRES_POLL`: an idle apalis worker looks this often.
    pub poll: Duration,
    /// How long a build's no-op effect sleeps.
    pub build: Duration,
    /// `BUILD_SLOTS` (and `BUILD_PREFETCH`, left at its default, the same).
    pub slots: usize,
    /// `NIX_SLOTS`: the `nix` queue's concurrency.
    pub nix_slots: usize,
    /// Components of each node's SBOM.
    pub components: usize,
}

/// What the fleet did, counted as it happens.
#[derive(Default)]
pub struct Tally {
    /// Builds submitted.
    pub submitted: AtomicU64,
    /// Builds claimed.
    pub claimed: AtomicU64,
    /// Builds whose end was recorded.
    pub finished: AtomicU64,
    /// Readiness rounds run.
    pub readiness_rounds: AtomicU64,
    /// Failures of any step (each logged once to stderr).
    pub errors: AtomicU64,
    /// Queued to claimed of each claimed build, ms, with the claim's
    /// instant (ms since the fleet started).
    pub claim_waits: Mutex<Vec<(u64, f64)>>,
    /// Queued to recorded of each build, ms, with its instant.
    pub lifecycles: Mutex<Vec<(u64, f64)>>,
}

impl Tally {
    fn failed(&self, what: &str, e: impl std::fmt::Display) {
        if self.errors.fetch_add(1, Ordering::Relaxed) < 5 {
            eprintln!("[fleet-bench] {what}: {e}");
        }
    }
}

/// What a simulated worker's handlers share.
struct Sim {
    /// The worker's name (its `builds` apalis worker's).
    name: String,
    db: Db,
    settings: Arc<Settings>,
    tally: Arc<Tally>,
    /// Its build slots.
    slots: Arc<tokio::sync::Semaphore>,
    started: std::time::Instant,
}

/// The running fleet: its tasks and pools.
pub struct Fleet {
    tasks: Vec<JoinHandle<()>>,
    pools: Vec<sqlx::PgPool>,
    /// What it did.
    pub tally: Arc<Tally>,
    /// Its simulated workers' names.
    pub names: Vec<String>,
}

impl Fleet {
    /// Starts `workers` simulated workers on `pools` pools of `pool_size`
    /// connections each (worker `i` on pool `i % pools`), their starts
    /// spread over `spread`.
    pub async fn start(
        options: &PgConnectOptions,
        settings: Settings,
        workers: usize,
        pools: usize,
        pool_size: u32,
        spread: Duration,
    ) -> anyhow::Result<Self> {
        let settings = Arc::new(settings);
        let tally = Arc::new(Tally::default());
        let mut fleet = Fleet { tasks: Vec::new(), pools: Vec::new(), tally: tally.clone(), names: Vec::new() };
        let mut feeds = Vec::new();
        let port = options.get_port();
        for _ in 0..pools.min(workers).max(1) {
            let pool = PgPoolOptions::new()
                .max_connections(pool_size)
                .min_connections(pool_size)
                .idle_timeout(None)
                .max_lifetime(None)
                .acquire_timeout(Duration::from_secs(60))
                .test_before_acquire(false)
                .after_connect(move |_conn, _meta| {
                    Box::pin(async move {
                        store::nodelay::set_on_connections_to(port);
                        Ok(())
                    })
                })
                .connect_with(options.clone())
                .await?;
            feeds.push(JobFeed::start(&pool, settings.poll));
            fleet.pools.push(pool);
        }
        let started = std::time::Instant::now();
        for i in 0..workers {
            let pool = fleet.pools[i % fleet.pools.len()].clone();
            let feed = feeds[i % feeds.len()].clone();
            let sim = Arc::new(Sim {
                name: worker_name(i),
                db: Db::Postgres(pool.clone()),
                settings: settings.clone(),
                tally: tally.clone(),
                slots: Arc::new(tokio::sync::Semaphore::new(settings.slots)),
                started,
            });
            fleet.names.push(sim.name.clone());
            let delay = spread.mul_f64(i as f64 / workers as f64);
            fleet.tasks.push(tokio::spawn(run_worker(sim, pool, feed, delay)));
        }
        Ok(fleet)
    }

    /// Stops every simulated worker and closes the pools.
    pub async fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
        for task in self.tasks {
            let _ = task.await;
        }
        for pool in self.pools {
            pool.close().await;
        }
    }
}

/// A name as `slipway-worker` makes one (`<prefix>@<host>-<pid>-<random>`),
/// with the simulated worker's index.
fn worker_name(index: usize) -> String {
    let random = ulid::Ulid::generate().to_string().to_lowercase();
    format!("fleet@sim-{}-{index}-{}", std::process::id(), &random[20..])
}

/// One simulated worker: after `delay`, its apalis workers, its keep-alive
/// and its clock reads, until aborted.
async fn run_worker(sim: Arc<Sim>, pool: sqlx::PgPool, feed: JobFeed, delay: Duration) {
    tokio::time::sleep(delay).await;
    let mut inner = tokio::task::JoinSet::new();
    let s = &sim.settings;
    let prefetch = s.slots;
    // (batch size, concurrency) as `worker/src/work/register.rs` gives them.
    let sizes = |c: Concurrency| match c {
        Concurrency::BuildSlots => (prefetch, prefetch.max(s.slots)),
        Concurrency::NixSlots => (1, s.nix_slots.max(1)),
        Concurrency::Fixed(n) => (1, n),
    };
    // One completer per simulated worker process, as each real one has
    // (`worker/src/work/mod.rs`): its queue workers' job starts and ends.
    let completer = Completer::start(Db::Postgres(pool.clone()));
    macro_rules! queue_worker {
        ($kind:ty, $handler:expr) => {{
            let (batch_size, concurrency) = sizes(<$kind>::CONCURRENCY);
            let settings = QueueSettings { queue: <$kind>::QUEUE, batch_size, heartbeat: s.heartbeat };
            let storage = settings.postgres::<$kind>(&pool, &feed, &completer);
            let name = format!("{}{}", sim.name, <$kind>::WORKER_SUFFIX);
            let worker =
                WorkerBuilder::new(name).backend(storage).data(sim.clone()).concurrency(concurrency).build($handler);
            let tally = sim.tally.clone();
            inner.spawn(async move {
                if let Err(e) = worker.run().await {
                    tally.failed("an apalis worker stopped", e);
                }
            });
        }};
    }
    queue_worker!(BuildJob, build);
    queue_worker!(NixJob, nothing::<NixJob>);
    queue_worker!(CallbackJob, nothing::<CallbackJob>);
    queue_worker!(ReadinessJob, readiness);
    queue_worker!(RolloutJob, nothing::<RolloutJob>);
    let alive = sim.clone();
    inner.spawn(async move {
        let mut tick = tokio::time::interval(alive.settings.heartbeat / 2);
        loop {
            tick.tick().await;
            let beat = async { heartbeats::keep_alive(&mut alive.db.acquire().await?, &alive.name, &[]).await };
            if let Err(e) = beat.await {
                alive.tally.failed("a keep-alive", e);
            }
        }
    });
    let clock = sim.clone();
    inner.spawn(async move {
        // `ClockWatch` reads the database's clock every minute.
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        loop {
            tick.tick().await;
            let read = async { store::db_now_ms(&mut clock.db.acquire().await?).await };
            if let Err(e) = read.await {
                clock.tally.failed("a clock read", e);
            }
        }
    });
    while inner.join_next().await.is_some() {}
}

/// The handler of the queues that get no jobs here.
async fn nothing<J>(_job: J) -> Result<(), BoxDynError> {
    Ok(())
}

fn ms_since(started: std::time::Instant) -> u64 {
    started.elapsed().as_millis() as u64
}

/// A `builds` job: the build frame with a sleep for its effect.
async fn build(job: BuildJob, sim: Data<Arc<Sim>>) -> Result<(), BoxDynError> {
    let _slot = sim.slots.clone().acquire_owned().await?;
    match run_build(&job.build_id, &sim).await {
        Ok(()) => Ok(()),
        Err(e) => {
            sim.tally.failed("a build", &e);
            Err(Box::new(e))
        }
    }
}

async fn run_build(id: &str, sim: &Sim) -> Result<(), store::StoreError> {
    // The claim: a conditional update on the version read (ST-3).
    let mut claimed = None;
    for _ in 0..5 {
        let mut tx = sim.db.begin_write().await?;
        let Some(row) = builds::get(&mut tx, id).await? else {
            return Err(store::StoreError::Corrupt(format!("job for unknown build {id}")));
        };
        if row.status.is_terminal() || row.status == BuildStatus::Running {
            tx.rollback().await?;
            return Ok(());
        }
        let now = store::now_ms();
        if builds::claim(&mut tx, &row, &sim.name, now).await? {
            tx.commit().await?;
            let mut row = row;
            row.status = BuildStatus::Running;
            row.attempts += 1;
            row.worker = Some(sim.name.clone());
            row.started_at = Some(now);
            row.version += 1;
            claimed = Some(row);
            break;
        }
        tx.rollback().await?;
    }
    let Some(build) = claimed else { return Err(store::StoreError::Conflict("build")) };
    let at = ms_since(sim.started);
    sim.tally.claimed.fetch_add(1, Ordering::Relaxed);
    let queued_at = build.queued_at;
    let waited = (build.started_at.unwrap_or(queued_at) - queued_at) as f64;
    sim.tally.claim_waits.lock().expect("tally lock").push((at, waited));
    // The effect: its output, then its run.
    let seq = builds::log_base(build.attempts) + 1;
    builds::append_log(&mut sim.db.acquire().await?, &build, seq, &effect_output(&build.id)).await?;
    tokio::time::sleep(sim.settings.build).await;
    record(sim, &build).await?;
    sim.tally.finished.fetch_add(1, Ordering::Relaxed);
    let done = ms_since(sim.started);
    sim.tally.lifecycles.lock().expect("tally lock").push((done, (store::now_ms() - queued_at) as f64));
    Ok(())
}

/// The record transaction of a successful deploy (`record_once`).
async fn record(sim: &Sim, build: &builds::BuildRow) -> Result<(), store::StoreError> {
    let mut tx = sim.db.begin_write().await?;
    tx.lock_deployment(&build.deployment_id).await?;
    let now = store::now_ms();
    let node = node_of(&build.deployment_id);
    let document = sbom_document(&node, deployment_index(&build.deployment_id), build.seq, sim.settings.components);
    sboms::replace(&mut tx, &build.deployment_id, &build.id, &[(node.clone(), NodeSbom::Ready(document))], now).await?;
    let finish = builds::Finish {
        status: BuildStatus::Succeeded,
        reason: None,
        error: None,
        report: run_report(build, &node, sim.settings.build, now),
    };
    if !builds::finish(&mut tx, build, &finish, now).await? {
        tx.rollback().await?;
        return Err(store::StoreError::Conflict("build"));
    }
    let deadline = now + 300_000;
    instance_readiness::begin(&mut tx, &build.deployment_id, &build.id, &build.instances, now, deadline).await?;
    if !build.instances.is_empty() {
        let job = ReadinessJob {
            deployment_id: build.deployment_id.clone(),
            build_id: build.id.clone(),
            not_before_ms: None,
        };
        queue::push(&mut tx, &job, None).await?;
    }
    builds::dispatch_next(&mut tx, &build.deployment_id).await?;
    events::record(&mut tx, &build.deployment_id, now).await?;
    tx.commit().await
}

/// A `readiness` job: one round whose probes all answer ready.
async fn readiness(job: ReadinessJob, sim: Data<Arc<Sim>>) -> Result<(), BoxDynError> {
    let round = async {
        let waiting: Vec<_> = {
            let mut conn = sim.db.acquire().await?;
            let rows = instance_readiness::of_deployment(&mut conn, &job.deployment_id).await?;
            let waiting: Vec<_> =
                rows.into_iter().filter(|r| r.build_id == job.build_id && !r.state.is_final()).collect();
            if waiting.is_empty() {
                return Ok(());
            }
            builds::get(&mut conn, &job.build_id).await?;
            waiting
        };
        let at = store::now_ms();
        let mut tx = sim.db.begin_write().await?;
        for row in &waiting {
            let found = Found { instance: &row.instance, state: State::Ready, reason: None, at };
            instance_readiness::record(&mut tx, &job.deployment_id, &job.build_id, &found).await?;
        }
        tx.commit().await?;
        sim.tally.readiness_rounds.fetch_add(1, Ordering::Relaxed);
        Ok::<_, store::StoreError>(())
    };
    match round.await {
        Ok(()) => Ok(()),
        Err(e) => {
            sim.tally.failed("a readiness round", &e);
            Err(Box::new(e))
        }
    }
}

/// Submits builds at `rate` a second (each in a task of its own, so a slow
/// submit does not slow the rate) over `deployments` deployments in turn,
/// until aborted.
pub fn submit_at(db: Db, tally: Arc<Tally>, rate: f64, deployments: usize) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut k = 0usize;
        loop {
            tick.tick().await;
            let (db, tally) = (db.clone(), tally.clone());
            let deployment = format!("fleet-{}", k % deployments);
            k += 1;
            tokio::spawn(async move {
                match submit_one(&db, &deployment).await {
                    Ok(()) => {
                        tally.submitted.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => tally.failed("a submit", e),
                }
            });
        }
    })
}

/// The submit's transaction for one deploy of `deployment` (one instance).
async fn submit_one(db: &Db, deployment: &str) -> Result<(), store::StoreError> {
    let id =
        slipway_jobs::id::DeploymentId::parse(deployment).map_err(|e| store::StoreError::Corrupt(e.to_string()))?;
    let configuration = configuration_of(deployment);
    let instances = [Instance {
        name: "web".into(),
        domain: format!("{deployment}.fleet.example"),
        url: format!("https://{deployment}.fleet.example/"),
        section: Some("web".into()),
    }];
    let readiness = ReadinessMeta::default();
    let mut tx = db.begin_write().await?;
    let snapshot = deployments::Snapshot {
        id: deployment,
        configuration: &configuration,
        module_source: None,
        domain: Some("fleet.example"),
        instances: &instances,
        names: None,
    };
    submit::lock_and_upsert(&mut tx, deployment, Some(snapshot), AdmissionLock::Shared, None, store::now_ms()).await?;
    let now = store::now_ms();
    let build_id = slipway_jobs::id::new_build_id(&id, slipway_jobs::clock::now());
    let new = builds::NewBuild {
        id: &build_id,
        deployment_id: deployment,
        kind: BuildKind::Deploy,
        configuration: &configuration,
        module_source: None,
        instances: &instances,
        operator_secrets: None,
        readiness: Some(&readiness),
        dry_run: false,
        trigger: Trigger::Submit,
        provenance: None,
    };
    let how = WriteBuild {
        supersede: true,
        event: Some(DeploymentState::derive(Some((BuildKind::Deploy, BuildStatus::Queued)))),
        cap: 1000,
        check_kept_secrets: false,
    };
    submit::write_build(&mut tx, new, how, now).await?;
    tx.commit().await
}

/// A configuration of about 2 KB, as a small deployment's.
fn configuration_of(deployment: &str) -> Value {
    let packages: Vec<String> = (0..40).map(|i| format!("package-{i}")).collect();
    json!({
        "web": {
            "enable": true,
            "domain": format!("{deployment}.fleet.example"),
            "listen": [{"addr": "0.0.0.0", "port": 443, "ssl": true}],
            "locations": {"/": {"proxyPass": "http://127.0.0.1:8080", "extraConfig": "client_max_body_size 10m;"}},
            "environment": {"RUST_LOG": "info", "DATABASE_URL": "postgres://app@db/app"},
            "packages": packages,
        },
        "users": {"deploy": {"isNormalUser": true, "openssh": {"authorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBenchBenchBenchBenchBenchBenchBenchBench deploy"]}}},
    })
}

/// The effect's output a short no-op deploy prints (about 1 KB).
fn effect_output(build: &str) -> String {
    let mut out = format!("building the system of {build}\n");
    for i in 0..12 {
        out.push_str(&format!("copying path '/nix/store/{i:032x}-unit-{i}' to the node\n"));
    }
    out.push_str("activating the configuration...\nsetting up /etc...\nthe node is up to date\n");
    out
}

/// The run report of a successful one-node deploy (about 600 bytes), with
/// the fields `jobs/src/jobs/report.rs` writes.
fn run_report(build: &builds::BuildRow, node: &str, ran: Duration, now: i64) -> Value {
    json!({
        "kind": "deploy",
        "status": "succeeded",
        "duration_ms": ran.as_millis() as u64,
        "nodes": [{"name": node, "status": "succeeded", "generation": build.seq, "activated": true}],
        "summary": {"nodes": 1, "succeeded": 1, "failed": 0},
        "timings": {
            "queued_ms": (build.started_at.unwrap_or(now) - build.queued_at) as f64,
            "effect_ms": ran.as_millis() as f64,
            "slipway_ms": 3.0,
            "sbom_ms": 1.0,
        },
    })
}

/// The node of a deployment (one a deployment).
fn node_of(deployment: &str) -> String {
    format!("{deployment}-node")
}

fn deployment_index(deployment: &str) -> usize {
    deployment.rsplit('-').next().and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// Components the whole fleet draws its shared ones from.
const SHARED_POOL: usize = 2_000;

/// A node's CycloneDX 1.5 document of `components` store paths: 90 %
/// shared across the fleet (a NixOS closure's common paths, drawn from
/// [`SHARED_POOL`] by the deployment's index), the rest the deployment's
/// own, a tenth of those (at least one) changed by every build (`seq`):
/// a re-deploy that updated a few packages.
fn sbom_document(node: &str, deployment: usize, seq: i64, components: usize) -> Value {
    let own = (components / 10).max(1);
    let changed = (own / 10).max(1);
    let shared = components.saturating_sub(own);
    let mut list = Vec::with_capacity(components);
    for i in 0..shared {
        let n = (deployment * 7 + i) % SHARED_POOL;
        list.push(component(&format!("{n:032x}"), &format!("lib{n}"), "1.0"));
    }
    for j in 0..own {
        let version = if j < changed { format!("2.{seq}") } else { "2.0".to_owned() };
        let hash = format!("{:016x}{:016x}", deployment, (j as u64) << 32 | (if j < changed { seq as u64 } else { 0 }));
        list.push(component(&hash, &format!("{node}-app{j}"), &version));
    }
    let refs: Vec<String> = list.iter().map(|c| c["bom-ref"].as_str().unwrap_or_default().to_owned()).collect();
    let node_ref = format!("/nix/store/{:032x}-nixos-system-{node}", deployment);
    let mut dependencies = vec![json!({"ref": node_ref, "dependsOn": refs.iter().take(8).collect::<Vec<_>>()})];
    for (i, r) in refs.iter().enumerate() {
        let depends: Vec<&String> = refs.iter().skip(i + 1).take(2).collect();
        dependencies.push(json!({"ref": r, "dependsOn": depends}));
    }
    json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {"component": {"type": "operating-system", "bom-ref": node_ref, "name": node}},
        "components": list,
        "dependencies": dependencies,
    })
}

fn component(hash: &str, name: &str, version: &str) -> Value {
    let path = format!("/nix/store/{hash}-{name}-{version}");
    json!({
        "type": "library",
        "bom-ref": path,
        "name": name,
        "version": version,
        "purl": format!("pkg:nix/{name}@{version}"),
        "hashes": [{"alg": "SHA-256", "content": format!("{hash}{hash}")}],
        "properties": [{"name": "nix:store_path", "value": path}],
    })
}
