//! Readiness end to end (PRODUCT.md §10): the real api and worker, a real
//! Nix deploy of a copy of the reference source whose `meta.readiness`
//! sends the probes to a stub front door on loopback, the `readiness` job's
//! results in `GET /deployments/{id}`, and `slipway-worker run wait-ready`'s
//! exit codes. Polls with deadlines; never sleeps to synchronise.

use crate::common;

use common::{binary, command, demo, free_port, start, wait_for, Api};
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::{Reply, StubServer, TestDatabase};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A copy of the reference source whose probes connect to `front_door`.
pub(crate) fn source_probing(dir: &std::path::Path, front_door: std::net::SocketAddr) -> String {
    let status = std::process::Command::new("cp").arg("-r").arg(common::repo().join("nix")).arg(dir).status().unwrap();
    assert!(status.success());
    let meta = dir.join("nix/core/meta.nix");
    let text = std::fs::read_to_string(&meta).unwrap();
    assert!(text.contains("http://127.0.0.1:8470"), "the reference meta changed");
    std::fs::write(&meta, text.replace("http://127.0.0.1:8470", &format!("http://{front_door}"))).unwrap();
    format!("path:{}", dir.join("nix").display())
}

/// Each deployed instance's readiness state, by name.
fn states(deployment: &Value) -> Vec<(String, String)> {
    deployment["deployed_instances"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| (i["name"].as_str().unwrap().to_owned(), i["readiness"]["state"].as_str().unwrap_or("").to_owned()))
        .collect()
}

/// `run wait-ready`, off the test's runtime thread (which serves the front door).
async fn wait_ready(
    db: &TestDatabase,
    port: u16,
    door: std::net::SocketAddr,
    id: &str,
    deadline: &str,
) -> (i32, String, String) {
    let mut cmd = command(&binary("slipway-worker"), db, port);
    cmd.args(["run", "wait-ready", "--deployment", id, "--deadline", deadline])
        .env("SLIPWAY_READINESS_CONNECT", format!("http://{door}"));
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn instances_become_ready_or_not_ready_and_wait_ready_says_so(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    // The front door answers for every instance but the dashboard, until told to.
    let dashboard_up = Arc::new(AtomicBool::new(false));
    let up = Arc::clone(&dashboard_up);
    let door = StubServer::start(Arc::new(move |_, host: &str| {
        let host = host.split(':').next().unwrap_or_default().to_owned();
        if host.starts_with("dashboard.") && !up.load(Ordering::SeqCst) {
            Reply::Answer(200, vec![("X-Instance-Host", "hub.example.org".into())])
        } else {
            Reply::Answer(200, vec![("X-Instance-Host", host)])
        }
    }))
    .await;
    let source = source_probing(db.dir.path(), door.addr);
    let port = free_port();
    let mut api = command(&binary("slipway-api"), &db, port);
    api.env("SLIPWAY_ALLOW_PATH_SOURCES", "true");
    let _api = start(api, &db, "api.log");
    let mut worker = command(&binary("slipway-worker"), &db, port);
    worker
        .arg("work")
        .env("SLIPWAY_ALLOW_PATH_SOURCES", "true")
        .env("READY_TIMEOUT", "4s")
        .env("SLIPWAY_READINESS_CONNECT", format!("http://{}", door.addr));
    let _worker = start(worker, &db, "worker.log");
    let api = Api::connect(&db, port).await;

    let body = json!({ "configuration": demo(), "module_source": source });
    // Until the worker is seen alive on the nix queue, a cold source is refused (503).
    let (status, accepted) = wait_for("the worker to serve the nix queue", Duration::from_secs(60), || async {
        let answer = api.call(reqwest::Method::PUT, "/deployments/ready", Some(&body)).await.unwrap();
        (answer.0 != 503).then_some(answer)
    })
    .await;
    assert_eq!(status, 202, "{accepted}");
    api.wait_state("ready", "active", Duration::from_secs(240)).await;
    let end = wait_for("every instance's readiness to settle", Duration::from_secs(60), || async {
        let (_, _, d) = api.get("/deployments/ready").await;
        let s = states(&d);
        (!s.is_empty() && s.iter().all(|(_, state)| state == "ready" || state == "not_ready")).then_some(d)
    })
    .await;
    for (name, state) in states(&end) {
        let want = if name == "dashboard" { "not_ready" } else { "ready" };
        assert_eq!(state, want, "{name}: {end}");
    }
    let dashboard = end["deployed_instances"].as_array().unwrap().iter().find(|i| i["name"] == "dashboard").unwrap();
    assert!(dashboard["readiness"]["reason"].as_str().unwrap().contains("hub.example.org"), "{dashboard}");
    assert!(dashboard["readiness"]["checked_at"].is_string(), "{dashboard}");
    assert!(door.hosts().iter().any(|h| h.starts_with("social.demo.example.org")), "{:?}", door.hosts());

    // wait-ready: the dashboard is not ready within its deadline (exit 1, named with why) …
    let (code, out, err) = wait_ready(&db, port, door.addr, "ready", "2s").await;
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains("dashboard") && out.contains("hub.example.org"), "{out}");
    assert!(!out.contains("mastodon"), "a ready instance is named as not ready: {out}");
    assert!(err.contains("dashboard"), "no progress shown: {err}");
    // … until it answers as itself (exit 0), which the deployment then shows.
    dashboard_up.store(true, Ordering::SeqCst);
    let (code, out, err) = wait_ready(&db, port, door.addr, "ready", "30s").await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("every instance of ready is ready"), "{out}");
    let (_, _, d) = api.get("/deployments/ready").await;
    assert!(states(&d).iter().all(|(_, s)| s == "ready"), "{d}");

    // Bad input: an unknown deployment, a deadline that is no duration.
    assert_eq!(wait_ready(&db, port, door.addr, "never-deployed", "1s").await.0, 2);
    assert_eq!(wait_ready(&db, port, door.addr, "ready", "soon").await.0, 2);
    let (code, _, err) = wait_ready(&db, port, door.addr, "UPPER!", "1s").await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--deployment \"UPPER!\"") && !err.contains("has no successful deploy"), "{err}");
}

slipway_jobs::on_both_engines!(instances_become_ready_or_not_ready_and_wait_ready_says_so);

/// `run wait-ready` only reads: a SQLite `DATABASE_URL` naming no file is
/// refused, naming the path, and no database is created there.
#[tokio::test]
async fn wait_ready_refuses_a_sqlite_url_that_names_no_database_and_creates_none() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let missing = db.path("mistyped/slipway.db");
    let mut cmd = command(&binary("slipway-worker"), &db, free_port());
    cmd.env("DATABASE_URL", format!("sqlite://{}", missing.display()));
    cmd.args(["run", "wait-ready", "--deployment", "demo", "--deadline", "5s"]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&missing.display().to_string()) && stderr.contains("DATABASE_URL"), "{stderr}");
    assert!(!missing.exists() && !missing.parent().unwrap().exists(), "wait-ready created a database");
}

/// The `readiness` job taken by a real apalis worker whose storage is the
/// worker's own ([`slipway_worker::storage::QueueSettings`]), on a real
/// database of each engine (no api, no Nix).
mod backoff {
    use slipway_jobs::probe::State;
    use slipway_jobs::source::outputs::{Instance, ReadinessMeta};
    use slipway_jobs::store::Engine;
    use slipway_jobs::test_support::{Behaviour, Reply, StubServer as Server};
    use std::sync::Arc;
    use std::time::Duration;

    fn through(server: &Server) -> ReadinessMeta {
        ReadinessMeta { connect: Some(format!("http://{}", server.addr)), ..ReadinessMeta::default() }
    }

    fn answering(f: impl Fn(usize, &str) -> Reply + Send + Sync + 'static) -> Behaviour {
        Arc::new(f)
    }

    /// The `readiness` job's pause holds to the deadline: taken by a real
    /// apalis worker from the real queue, an instance that never becomes ready
    /// is asked at most twice over the last second before its deadline (a
    /// round in it and the last round, at the deadline), not every few tens
    /// of milliseconds as the pause shrinks to the time left.
    async fn the_readiness_backoff_holds_until_the_deadline(engine: Engine) {
        use apalis::prelude::*;
        use slipway_jobs::jobs::readiness::run;
        use slipway_jobs::jobs::Ctx;
        use slipway_jobs::store::queue::{push, JobFeed, ReadinessJob, POSTGRES_POLL, READINESS_QUEUE};
        use slipway_jobs::store::{instance_readiness as rows, now_ms, Db, Q};
        use slipway_worker::storage::QueueSettings;
        async fn handle(job: ReadinessJob, ctx: Data<Ctx>) -> Result<(), BoxDynError> {
            run(job, &ctx).await.map_err(Into::into)
        }
        let world = slipway_jobs::test_support::world(engine, &[("SLIPWAY_READINESS_CONNECT", "")]).await;
        let id = "ready-backoff";
        let build = world.queue(id, slipway_jobs::state::BuildKind::Deploy, None).await;
        let asked_at = Arc::new(std::sync::Mutex::new(Vec::<i64>::new()));
        let seen = Arc::clone(&asked_at);
        let server = Server::start(answering(move |_, _| {
            seen.lock().unwrap().push(now_ms());
            Reply::Answer(404, vec![])
        }))
        .await;
        let mut conn = world.ctx.db.acquire().await.unwrap();
        Q::new("UPDATE builds SET readiness = $1 WHERE id = $2")
            .text(serde_json::to_string(&through(&server)).unwrap())
            .text(&build)
            .execute(&mut conn)
            .await
            .unwrap();
        let b = slipway_jobs::store::builds::get(&mut conn, &build).await.unwrap().unwrap();
        let instances: Vec<Instance> = b.instances.iter().filter(|i| i.name == "mastodon").cloned().collect();
        assert_eq!(instances.len(), 1, "{:?}", b.instances);
        let now = now_ms();
        let deadline = now + 3_500;
        rows::begin(&mut conn, id, &build, &instances, now, deadline).await.unwrap();
        drop(conn);
        let mut tx = world.ctx.db.begin_write().await.unwrap();
        let job = ReadinessJob { deployment_id: id.into(), build_id: build.clone(), not_before_ms: None };
        push(&mut tx, &job, None).await.unwrap();
        tx.commit().await.unwrap();

        let settings = QueueSettings { queue: READINESS_QUEUE, batch_size: 1, heartbeat: world.ctx.config.heartbeat };
        let ctx = world.ctx.clone();
        let running = match world.ctx.db.clone() {
            Db::Postgres(pool) => {
                let feed = JobFeed::start(&pool, POSTGRES_POLL);
                let completer = slipway_worker::completer::Completer::start(Db::Postgres(pool.clone()));
                let storage = settings.postgres::<ReadinessJob>(&pool, &feed, &completer);
                let worker = WorkerBuilder::new("readiness-backoff-test").backend(storage).data(ctx).concurrency(4);
                tokio::spawn(worker.build(handle).run())
            }
            Db::Sqlite(pool) => {
                let storage = settings.sqlite::<ReadinessJob>(&pool);
                let worker = WorkerBuilder::new("readiness-backoff-test").backend(storage).data(ctx).concurrency(4);
                tokio::spawn(worker.build(handle).run())
            }
        };
        let start = std::time::Instant::now();
        loop {
            let mut conn = world.ctx.db.acquire().await.unwrap();
            let state = rows::of_deployment(&mut conn, id).await.unwrap()[0].state;
            if state == State::NotReady {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "the deadline never ended the probing: {state:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        running.abort();
        let asked = asked_at.lock().unwrap().clone();
        let offsets: Vec<i64> = asked.iter().map(|t| t - deadline).collect();
        let last_second = offsets.iter().filter(|t| **t >= -1_000).count();
        eprintln!("probes at these ms from the deadline: {offsets:?}");
        assert!(last_second <= 2, "{last_second} probes over the last second (ms from the deadline: {offsets:?})");
        assert!(asked.len() >= 2, "the instance was asked again before the deadline: {offsets:?}");
    }

    slipway_jobs::on_both_engines!(the_readiness_backoff_holds_until_the_deadline);
}
