//! Q-1 with real processes on both engines: an api that dies inside a submit
//! leaves nothing half-written, and a build whose worker is SIGKILLed is
//! picked up by another worker and run again.

use crate::common;

use common::{
    binary, command, demo, effect_processes, free_port, overlapping_runs, signal, slow_source, slow_worker, start,
    stop_at_once, wait_build, wait_exit, wait_for, Api, ENDED,
};
use slipway_jobs::store::{Db, Engine, Q};
use slipway_jobs::test_support::TestDatabase;
use std::time::{Duration, Instant};

async fn open(db: &TestDatabase) -> Db {
    let keys = std::collections::BTreeMap::from([("DATABASE_URL".to_owned(), db.url.clone())]);
    slipway_jobs::store::open(&slipway_jobs::config::Config::from_keys(&keys).unwrap()).await.unwrap()
}

/// Rows of `deployments`, `builds` and apalis's job table.
async fn counts(db: &Db) -> (i64, i64, i64) {
    let jobs = match db.engine() {
        Engine::Sqlite => "Jobs",
        Engine::Postgres => "apalis.jobs",
    };
    let mut conn = db.acquire().await.unwrap();
    let n = |table: &str| Q::new(format!("SELECT COUNT(*) AS n FROM {table}"));
    let d = n("deployments").fetch_one(&mut conn).await.unwrap().int("n").unwrap();
    let b = n("builds").fetch_one(&mut conn).await.unwrap().int("n").unwrap();
    let j = n(jobs).fetch_one(&mut conn).await.unwrap().int("n").unwrap();
    (d, b, j)
}

async fn an_api_that_dies_inside_a_submit_leaves_no_build_without_its_job(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    for point in ["build_inserted", "job_pushed"] {
        let port = free_port();
        let mut cmd = command(&binary("slipway-api"), &db, port);
        cmd.env("SLIPWAY_FAILPOINTS", point);
        let mut api_process = start(cmd, &db, "api.log");
        let api = Api::connect(&db, port).await;
        let answer = api.submit("demo", &demo()).await;
        assert!(answer.is_err(), "the api answered although it crashed at {point}: {answer:?}");
        let status = api_process.0.wait().unwrap();
        assert!(!status.success(), "the api did not die at {point}");
        let pool = open(&db).await;
        assert_eq!(counts(&pool).await, (0, 0, 0), "a crash at {point} left rows behind");
        pool.close().await;
    }
    // After the crash point that follows the commit, the submit is whole.
    let port = free_port();
    let mut cmd = command(&binary("slipway-api"), &db, port);
    cmd.env("SLIPWAY_FAILPOINTS", "submit_committed");
    let _dead = start(cmd, &db, "api.log");
    let api = Api::connect(&db, port).await;
    assert!(api.submit("demo", &demo()).await.is_err());
    let pool = open(&db).await;
    assert_eq!(counts(&pool).await, (1, 1, 1));
}

/// SQLite's group commit (`jobs/src/store/db.rs`, `SqliteDb`): an api that
/// dies before the `COMMIT` of a group of submits (the failpoint aborts only
/// at a group of two or more) has answered none of them. Rounds of eight
/// concurrent submits run until one forms a group and the api dies; every
/// submit answered `202` before that is stored, each with its deployment
/// and its job.
#[tokio::test]
async fn an_api_that_dies_before_a_group_commit_loses_only_submits_it_never_answered() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let port = free_port();
    let mut cmd = command(&binary("slipway-api"), &db, port);
    cmd.env("SLIPWAY_FAILPOINTS", "sqlite_group_commit");
    let mut api_process = start(cmd, &db, "api.log");
    let api = Api::connect(&db, port).await;
    let mut answered = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut round = 0;
    let status = loop {
        if let Some(status) = api_process.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "no round of concurrent submits formed a group");
        round += 1;
        let submits = (0..8).map(|i| {
            let api = &api;
            async move { api.submit(&format!("group-{round}-{i}"), &demo()).await }
        });
        for answer in futures::future::join_all(submits).await {
            if let Ok((202, body)) = answer {
                answered.push(body["build_id"].as_str().unwrap().to_owned());
            }
        }
    };
    assert!(!status.success(), "the api did not die at the group's commit");
    let pool = open(&db).await;
    let mut conn = pool.acquire().await.unwrap();
    for build in &answered {
        let row = Q::new("SELECT COUNT(*) AS n FROM builds WHERE id = $1").text(build.as_str());
        assert_eq!(row.fetch_one(&mut conn).await.unwrap().int("n").unwrap(), 1, "answered build {build} was lost");
    }
    let (deployments, builds, jobs) = counts(&pool).await;
    assert_eq!((deployments, jobs), (builds, builds), "a build without its deployment or its job");
}

async fn a_build_whose_worker_is_killed_is_run_again_by_another_worker(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let source = db.path("slow-source");
    slow_source(&source, 3);
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let worker = || slow_worker(&db, port, &source);
    let mut first = start(worker(), &db, "worker-1.log");
    let api = Api::connect(&db, port).await;
    let (status, accepted) = api.submit("demo", &demo()).await.unwrap();
    assert_eq!(status, 202);
    let build_id = accepted["build_id"].as_str().unwrap().to_owned();
    let build_path = format!("/builds/{build_id}");
    let running = wait_build(&api, &build_path, "the deploy to run", &["running"]).await;
    let first_name = running["worker"].as_str().unwrap().to_owned();
    wait_for("the first attempt's effect to run", Duration::from_secs(30), || async {
        (!effect_processes(&build_id, 1).is_empty()).then_some(())
    })
    .await;

    first.kill();
    let killed_at = Instant::now();
    let _second = start(worker(), &db, "worker-2.log");
    let done = wait_build(&api, &build_path, "another worker to finish the build", ENDED).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["attempts"], 2, "{done}");
    assert_ne!(done["worker"].as_str().unwrap(), first_name);
    // Recovery window (2 missed 1 s heartbeats) plus the 3 s re-run, with room for a slow machine.
    assert!(killed_at.elapsed() < Duration::from_secs(30), "took {:?}", killed_at.elapsed());
    // The dead worker's effect did not keep running beside the new one.
    let left = effect_processes(&build_id, 1);
    assert!(left.is_empty(), "the dead worker's effect still runs: {left:?}");
    assert_eq!(overlapping_runs(&db.path("state")), Vec::<(String, String)>::new());
}

async fn a_busy_worker_keeps_its_long_build_while_another_worker_waits(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let source = db.path("slow-source");
    slow_source(&source, 5);
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let worker = |slots: &str| {
        let mut cmd = slow_worker(&db, port, &source);
        cmd.env("BUILD_SLOTS", slots);
        cmd
    };
    let _busy = start(worker("1"), &db, "worker-1.log");
    let api = Api::connect(&db, port).await;
    let (_, accepted) = api.submit("demo", &demo()).await.unwrap();
    let build_path = format!("/builds/{}", accepted["build_id"].as_str().unwrap());
    wait_build(&api, &build_path, "the deploy to run", &["running"]).await;
    // A second worker watches for dead workers while the first one's only slot is busy for 5 s (5 heartbeats).
    let _idle = start(worker("4"), &db, "worker-2.log");
    let done = wait_build(&api, &build_path, "the build to finish", ENDED).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["attempts"], 1, "a live worker's build was taken over: {done}");
}

/// A rolling restart: SIGTERM lets the worker's running build finish (no
/// re-run elsewhere), takes no new build meanwhile, then the worker exits 0.
async fn a_worker_stopped_with_sigterm_finishes_its_running_build_first(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let source = db.path("slow-source");
    slow_source(&source, 4);
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let worker = start(slow_worker(&db, port, &source), &db, "worker.log");
    let api = Api::connect(&db, port).await;
    let (_, accepted) = api.submit("demo", &demo()).await.unwrap();
    let build_path = format!("/builds/{}", accepted["build_id"].as_str().unwrap());
    wait_build(&api, &build_path, "the deploy to run", &["running"]).await;
    // SAFETY: signals the worker this test started.
    unsafe { libc::kill(worker.0.id() as i32, libc::SIGTERM) };
    // A build submitted after the signal is left for another worker.
    let (_, later) = api.submit("other", &demo()).await.unwrap();
    let exit =
        wait_exit(worker, "the worker stopping after its build", Duration::from_secs(120), &db.path("worker.log"))
            .await;
    assert!(exit.success(), "the worker exited with {exit:?}");
    let (_, _, done) = api.get(&build_path).await;
    assert_eq!(done["status"], "succeeded", "the worker stopped before its build ended: {done}");
    assert_eq!(done["attempts"], 1, "{done}");
    let (_, _, waiting) = api.get(&format!("/builds/{}", later["build_id"].as_str().unwrap())).await;
    assert_eq!(waiting["status"], "queued", "a stopping worker took a new build: {waiting}");
}

/// A second SIGTERM stops the worker at once: its effect is killed with it,
/// and another worker runs the build again.
async fn a_second_sigterm_stops_the_worker_and_its_effect_at_once(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let source = db.path("slow-source");
    slow_source(&source, 6);
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let worker = || slow_worker(&db, port, &source);
    let mut first = start(worker(), &db, "worker-1.log");
    let api = Api::connect(&db, port).await;
    let (_, accepted) = api.submit("demo", &demo()).await.unwrap();
    let build_id = accepted["build_id"].as_str().unwrap().to_owned();
    let build_path = format!("/builds/{build_id}");
    wait_build(&api, &build_path, "the deploy to run", &["running"]).await;
    wait_for("the effect to start", Duration::from_secs(30), || async {
        (!effect_processes(&build_id, 1).is_empty()).then_some(())
    })
    .await;
    let exit = stop_at_once(&mut first, &db.path("worker-1.log")).await;
    assert_eq!(exit.code(), Some(1), "{exit:?}");
    let left = effect_processes(&build_id, 1);
    assert!(left.is_empty(), "the stopped worker's effect still runs: {left:?}");
    let _second = start(worker(), &db, "worker-2.log");
    let done = wait_build(&api, &build_path, "another worker to finish the build", ENDED).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["attempts"], 2, "{done}");
}

/// Q-1 "survives a database restart": PostgreSQL drops every connection
/// of the fleet mid-build and refuses new ones for longer than the
/// missed-heartbeat window (as a restart or failover does). The running
/// build is neither lost nor re-run: it ends once, as attempt 1, and the
/// deployment's next build runs after it.
#[tokio::test]
async fn a_build_running_while_postgres_drops_every_connection_ends_once() {
    let db = TestDatabase::new(Engine::Postgres).await;
    let source = db.path("slow-source");
    slow_source(&source, 4);
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let _worker = start(slow_worker(&db, port, &source), &db, "worker.log");
    // A second worker, which finds the build's job handed out again after
    // the outage and must leave it to the live worker that runs it.
    let mut cmd = slow_worker(&db, port, &source);
    cmd.env("BUILD_SLOTS", "1");
    let _other = start(cmd, &db, "worker.log");
    let api = Api::connect(&db, port).await;
    let (_, first) = api.submit("demo", &demo()).await.unwrap();
    let runs = db.path("state").join("provider/demo/runs");
    wait_for("the effect to start", Duration::from_secs(30), || async { runs.exists().then_some(()) }).await;
    // Submitted while the first runs, so it waits its turn (a queued deploy
    // would be superseded by it instead).
    let (_, second) = api.submit("demo", &demo()).await.unwrap();
    // The database refuses connections and drops those it has until the
    // first effect has ended and its worker waits to record it: longer than
    // the missed-heartbeat window (2 × 1 s), so every worker's heartbeat
    // looks stale when the database comes back.
    assert!(db.accept_connections(false).await > 0, "no connection of the fleet was dropped");
    let log = db.path("worker.log");
    wait_for("the worker to wait out the outage", Duration::from_secs(30), || async {
        std::fs::read_to_string(&log).ok()?.contains("cannot record the build's end yet").then_some(())
    })
    .await;
    db.accept_connections(true).await;
    for accepted in [&first, &second] {
        let path = format!("/builds/{}", accepted["build_id"].as_str().unwrap());
        let done = wait_build(&api, &path, "the build to end", ENDED).await;
        assert_eq!(done["status"], "succeeded", "{done}");
        assert_eq!(done["attempts"], 1, "the effect ran again after the connections dropped: {done}");
    }
    let effects = std::fs::read_to_string(&runs).unwrap().lines().filter(|l| l.starts_with("start ")).count();
    assert_eq!(effects, 2, "one effect per build, none re-run");
}

/// `BUILD_PREFETCH` above `BUILD_SLOTS`: the worker claims several build
/// jobs at once, and still runs no more builds at a time than its slots.
async fn a_worker_prefetches_more_jobs_than_it_has_slots_and_runs_one_at_a_time(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let source = db.path("slow-source");
    slow_source(&source, 2);
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let api = Api::connect(&db, port).await;
    let mut paths = Vec::new();
    for id in ["p1", "p2", "p3"] {
        let (_, accepted) = api.submit(id, &demo()).await.unwrap();
        paths.push(format!("/builds/{}", accepted["build_id"].as_str().unwrap()));
    }
    let mut cmd = slow_worker(&db, port, &source);
    cmd.env("BUILD_SLOTS", "1").env("BUILD_PREFETCH", "3");
    let _worker = start(cmd, &db, "worker.log");
    wait_builds_handed_out(&db, engine, 3, "the worker to claim all three jobs at once").await;
    for path in &paths {
        let done = wait_build(&api, path, "the build to end", ENDED).await;
        assert_eq!(done["status"], "succeeded", "{done}");
        assert_eq!(done["attempts"], 1, "{done}");
    }
    assert_eq!(
        overlapping_runs(&db.path("state")),
        Vec::<(String, String)>::new(),
        "builds ran beside each other on a 1-slot worker"
    );
}

/// Waits (up to 30 s, naming `what`) until apalis has handed out `n` jobs
/// of the `builds` queue: they are `Running` in its table, whether or not
/// their build has started.
async fn wait_builds_handed_out(db: &TestDatabase, engine: Engine, n: i64, what: &str) {
    let pool = open(db).await;
    let jobs = match engine {
        Engine::Sqlite => "Jobs",
        Engine::Postgres => "apalis.jobs",
    };
    let sql = format!("SELECT COUNT(*) AS n FROM {jobs} WHERE status = 'Running' AND job_type = 'builds'");
    wait_for(what, Duration::from_secs(30), || async {
        let mut conn = pool.acquire().await.ok()?;
        (Q::new(sql.as_str()).fetch_one(&mut conn).await.ok()?.int("n").ok()? == n).then_some(())
    })
    .await;
}

/// A rolling restart finishes only what runs: a build the worker was handed
/// but had not started (it waited for the worker's one slot) is handed back
/// at exit, still queued and not attempted, and the next worker runs it.
async fn a_worker_stopped_with_sigterm_hands_back_a_build_it_had_not_started(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let source = db.path("slow-source");
    slow_source(&source, 3);
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let api = Api::connect(&db, port).await;
    let mut paths = Vec::new();
    for id in ["first", "second"] {
        let (_, accepted) = api.submit(id, &demo()).await.unwrap();
        paths.push(format!("/builds/{}", accepted["build_id"].as_str().unwrap()));
    }
    let worker = || {
        let mut cmd = slow_worker(&db, port, &source);
        cmd.env("BUILD_SLOTS", "1").env("BUILD_PREFETCH", "2");
        cmd
    };
    let stopping = start(worker(), &db, "worker-1.log");
    wait_builds_handed_out(&db, engine, 2, "the worker to be handed both builds").await;
    let running = wait_for("one build to run", Duration::from_secs(30), || async {
        for path in &paths {
            let (_, _, b) = api.get(path).await;
            if b["status"] == "running" {
                return Some(path.clone());
            }
        }
        None
    })
    .await;
    let waiting = paths.iter().find(|p| **p != running).unwrap().clone();
    signal(stopping.0.id(), libc::SIGTERM);
    let exit = wait_exit(stopping, "the stopping worker", Duration::from_secs(120), &db.path("worker-1.log")).await;
    assert!(exit.success(), "the worker exited with {exit:?}");
    let (_, _, done) = api.get(&running).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let (_, _, handed_back) = api.get(&waiting).await;
    assert_eq!(handed_back["status"], "queued", "the stopping worker started a build it was handed: {handed_back}");
    assert_eq!(handed_back["attempts"], 0, "{handed_back}");
    let _next = start(worker(), &db, "worker-2.log");
    let done = wait_build(&api, &waiting, "the next worker to run the handed-back build", ENDED).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["attempts"], 1, "{done}");
}

/// A queue worker that fails is started again and serves its queue: here
/// apalis's own heartbeat of the `builds` and `nix` queue workers fails
/// (their rows are moved to another queue under them) while the process
/// goes on beating their rows. On SQLite apalis refused to register a name
/// whose row beat within its interval, so a queue worker that failed once
/// (say on `database is locked`) never came back.
async fn a_queue_worker_that_failed_registers_again_and_runs_the_next_deploy(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let source = db.path("slow-source");
    slow_source(&source, 0);
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    // A 2 s heartbeat: the process beats every second, so the rows never
    // look older than apalis's 1 s interval by themselves.
    let mut cmd = slow_worker(&db, port, &source);
    cmd.env("SLIPWAY_HEARTBEAT", "2");
    let _worker = start(cmd, &db, "worker.log");
    let pool = open(&db).await;
    let workers = match engine {
        Engine::Sqlite => "Workers",
        Engine::Postgres => "apalis.workers",
    };
    let serving = format!("SELECT COUNT(*) AS n FROM {workers} WHERE worker_type IN ('builds', 'nix')");
    let count = |sql: String| {
        let pool = pool.clone();
        async move { Q::new(sql).fetch_one(&mut pool.acquire().await.ok()?).await.ok()?.int("n").ok() }
    };
    wait_for("the builds and nix queue workers to register", Duration::from_secs(30), || async {
        (count(serving.clone()).await? == 2).then_some(())
    })
    .await;
    let moved =
        Q::new(format!("UPDATE {workers} SET worker_type = 'elsewhere' WHERE worker_type IN ('builds', 'nix')"))
            .execute(&mut pool.acquire().await.unwrap())
            .await
            .unwrap();
    assert_eq!(moved, 2);
    let log = db.path("worker.log");
    wait_for("both queue workers to fail and register again", Duration::from_secs(30), || async {
        (count(serving.clone()).await? == 2).then_some(())
    })
    .await;
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("restarting it"), "no queue worker was restarted:\n{logged}");
    let api = Api::connect(&db, port).await;
    let (status, accepted) = api.submit("demo", &demo()).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    let path = format!("/builds/{}", accepted["build_id"].as_str().unwrap());
    let done = wait_build(&api, &path, "the restarted builds worker to run the deploy", ENDED).await;
    assert_eq!(done["status"], "succeeded", "{done}");
}

slipway_jobs::on_both_engines!(
    a_queue_worker_that_failed_registers_again_and_runs_the_next_deploy,
    a_worker_stopped_with_sigterm_hands_back_a_build_it_had_not_started,
    a_worker_prefetches_more_jobs_than_it_has_slots_and_runs_one_at_a_time,
    a_second_sigterm_stops_the_worker_and_its_effect_at_once,
    a_worker_stopped_with_sigterm_finishes_its_running_build_first,
    a_busy_worker_keeps_its_long_build_while_another_worker_waits,
    an_api_that_dies_inside_a_submit_leaves_no_build_without_its_job,
    a_build_whose_worker_is_killed_is_run_again_by_another_worker,
);

/// The status of the `readiness` job whose payload names `deployment`.
async fn job_status(db: &Db, deployment: &str) -> Option<String> {
    let mut conn = db.acquire().await.ok()?;
    Q::new("SELECT status FROM apalis.jobs WHERE job_type = 'readiness' AND convert_from(job, 'UTF8') LIKE $1")
        .text(format!("%{deployment}%"))
        .fetch_optional(&mut conn)
        .await
        .ok()??
        .text("status")
        .ok()
}

/// Pushes a `readiness` job for `deployment` (which has no instances: its
/// job ends at once) and returns how long the worker took to finish it, up
/// to 20 s.
async fn job_done_after(db: &Db, deployment: &str) -> Option<Duration> {
    use slipway_jobs::store::queue::{push, ReadinessJob};
    let job = ReadinessJob { deployment_id: deployment.into(), build_id: "none".into(), not_before_ms: None };
    let mut tx = db.begin_write().await.unwrap();
    push(&mut tx, &job, None).await.unwrap();
    tx.commit().await.unwrap();
    let pushed = Instant::now();
    common::poll(Duration::from_secs(20), || async {
        (job_status(db, deployment).await.as_deref() == Some("Done")).then(|| pushed.elapsed())
    })
    .await
}

/// After PostgreSQL refused and dropped every connection for 5 s (a
/// restart or failover), the worker's LISTEN comes back: its log says it
/// lost it and listens again, and a new job is then taken at once by its
/// notification, while the poll (30 s here) would wait. (A `readiness`
/// job: every queue's workers are woken by the same feed, and this one
/// needs no Nix.)
#[tokio::test]
async fn a_worker_listens_again_after_postgres_refused_every_connection_for_5_s() {
    let db = TestDatabase::new(Engine::Postgres).await;
    let mut cmd = command(&binary("slipway-worker"), &db, free_port());
    cmd.arg("work").env("SLIPWAY_POSTGRES_POLL", "30s").env("SLIPWAY_HEARTBEAT", "30");
    let _worker = start(cmd, &db, "worker.log");
    let log = db.path("worker.log");
    wait_for("the worker to start", Duration::from_secs(60), || async {
        std::fs::read_to_string(&log).ok()?.contains("worker started").then_some(())
    })
    .await;
    let store = open(&db).await;
    assert!(job_done_after(&store, "warm-up-before").await.is_some(), "the worker never took a job");
    let before = job_done_after(&store, "timed-before").await.expect("the worker takes jobs");

    // Every connection of the database is refused and dropped, again and
    // again, for 5 s.
    let outage = Instant::now();
    let mut dropped = 0;
    while outage.elapsed() < Duration::from_secs(5) {
        dropped += db.accept_connections(false).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(dropped > 0, "no connection of the worker was dropped");
    db.accept_connections(true).await;
    let said = wait_for("the worker to listen again", Duration::from_secs(30), || async {
        let text = std::fs::read_to_string(&log).ok()?;
        (text.contains("LISTEN lost") && text.contains("listening again")).then_some(text)
    })
    .await;
    assert_eq!(said.matches("LISTEN lost").count(), 1, "one line for the loss:\n{said}");
    // Its queue workers may restart after the outage: the first job may
    // wait for that; the next is woken by its notification alone.
    assert!(job_done_after(&store, "warm-up-after").await.is_some(), "no job taken after the outage");
    let after = job_done_after(&store, "timed-after").await.expect("a job taken after the outage");
    eprintln!(
        "a job taken {} ms after its push before the outage, {} ms after it",
        before.as_millis(),
        after.as_millis()
    );
    if after >= Duration::from_secs(2) {
        // What the worker said after the outage, to tell a lost LISTEN from
        // a queue worker that was restarting.
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(60).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        panic!("taken after {after:?}: only the poll found it; the worker's log ends:\n{}", tail.join("\n"));
    }
}

/// The apalis row of the `builds` job of `deployment`'s build: its status
/// and attempts (PostgreSQL).
async fn build_job_row(db: &Db, build_id: &str) -> Option<(String, i64)> {
    let mut conn = db.acquire().await.ok()?;
    let row = Q::new(
        "SELECT status, attempts::bigint AS attempts FROM apalis.jobs WHERE job_type = 'builds' AND convert_from(job, 'UTF8') LIKE $1",
    )
    .text(format!("%{build_id}%"))
    .fetch_optional(&mut conn)
    .await
    .ok()??;
    Some((row.text("status").ok()?, row.int("attempts").ok()?))
}

/// On PostgreSQL a job's end is written by the process's completer after
/// the job body committed its own: a worker that dies in between (a
/// failpoint aborts it once a job's end is gathered and not yet written)
/// leaves its build ended and its job not done. Once its heartbeat is
/// stale another worker is handed the job, finds the build ended, runs
/// nothing, and the job ends done: the effect ran once.
#[tokio::test]
async fn a_worker_that_dies_before_writing_a_job_s_end_leaves_a_build_that_ran_once() {
    let db = TestDatabase::new(Engine::Postgres).await;
    let source = db.path("slow-source");
    slow_source(&source, 1);
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    // Builds only: no other job of the run may end first.
    let worker = |failpoint: Option<&str>| {
        let mut cmd = slow_worker(&db, port, &source);
        cmd.env("SLIPWAY_QUEUES", "builds");
        if let Some(point) = failpoint {
            cmd.env("SLIPWAY_FAILPOINTS", point);
        }
        cmd
    };
    let crashing = start(worker(Some("job_ended_unrecorded")), &db, "worker-1.log");
    let api = Api::connect(&db, port).await;
    let (status, accepted) = api.submit("demo", &demo()).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    let build_id = accepted["build_id"].as_str().unwrap().to_owned();
    let path = format!("/builds/{build_id}");
    let status = wait_exit(
        crashing,
        "the worker to die with the build's end unwritten",
        Duration::from_secs(60),
        &db.path("worker-1.log"),
    )
    .await;
    assert!(!status.success(), "the worker did not die at the failpoint");
    let (_, _, ended) = api.get(&path).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    let store = open(&db).await;
    let (job_status, _) = build_job_row(&store, &build_id).await.expect("the build's job");
    assert_ne!(job_status, "Done", "the job's end was written before the crash");

    let _second = start(worker(None), &db, "worker-2.log");
    let (job_status, attempts) = wait_for("another worker to finish the job", Duration::from_secs(60), || async {
        build_job_row(&store, &build_id).await.filter(|(status, _)| status == "Done")
    })
    .await;
    assert_eq!((job_status.as_str(), attempts), ("Done", 2), "the job was not handed out again");
    let (_, _, done) = api.get(&path).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["attempts"], 1, "the build ran again: {done}");
    let runs = std::fs::read_to_string(db.path("state").join("provider").join("demo").join("runs")).unwrap();
    assert_eq!(runs.lines().filter(|l| l.starts_with("start")).count(), 1, "the effect ran again:\n{runs}");
}
