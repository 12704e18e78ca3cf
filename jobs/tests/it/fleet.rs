//! The fleet as `GET /queues` and `GET /workers` read it
//! (`store::fleet`), on both engines: apalis's worker rows folded into one
//! process per name, the host read from the name, running builds as slots
//! in use, workers gone quiet for longer than the window left out; due,
//! scheduled and claimed jobs counted apart.

use slipway_jobs::state::BuildKind;
use slipway_jobs::store::queue::BUILDS_QUEUE;
use slipway_jobs::store::{fleet, Engine, Q};
use slipway_jobs::test_support::world;

/// An apalis worker row `id` serving `queue`, last seen `ago_s` seconds ago.
fn worker_row(engine: Engine, id: &str, queue: &str, ago_s: i64) -> Q {
    let sql = match engine {
        Engine::Sqlite => {
            "INSERT INTO Workers (id, worker_type, storage_name, layers, last_seen)
             VALUES ($1, $2, 'SqliteStorage', '', CAST(strftime('%s', 'now') AS INTEGER) - $3)"
        }
        Engine::Postgres => {
            "INSERT INTO apalis.workers (id, worker_type, storage_name, layers, last_seen)
             VALUES ($1, $2, 'PostgresStorage', '', now() - make_interval(secs => $3))"
        }
    };
    Q::new(sql).text(id).text(queue).int(ago_s)
}

/// Build `build` running on worker `name`, as its claim leaves it.
fn running_on(name: &str, build: &str) -> Q {
    Q::new("UPDATE builds SET status = 'running', worker = $1 WHERE id = $2").text(name).text(build)
}

async fn a_worker_process_is_one_row_with_its_host_queues_running_builds_and_latest_heartbeat(engine: Engine) {
    let w = world(engine, &[]).await;
    let name = "worker@web-1.example-4242-abc123";
    let build = w.queue("demo", BuildKind::Deploy, None).await;
    let mut conn = w.ctx.db.acquire().await.unwrap();
    for (id, queue, ago) in [
        (name.to_owned(), "builds", 3),
        (format!("{name}-nix"), "nix", 1),
        (format!("{name}-readiness"), "readiness", 2),
        ("worker@gone-7-zzzzzz".to_owned(), "builds", 7200),
    ] {
        worker_row(engine, &id, queue, ago).execute(&mut conn).await.unwrap();
    }
    running_on(name, &build).execute(&mut conn).await.unwrap();

    let workers = fleet::workers(&mut conn, 3600).await.unwrap();
    assert_eq!(workers.len(), 1, "{workers:?}");
    let one = &workers[0];
    assert_eq!((one.name.as_str(), one.host.as_deref()), (name, Some("web-1.example")));
    assert_eq!(one.queues, ["builds", "nix", "readiness"]);
    assert_eq!(one.slots_in_use, 1);
    // The newest of its rows' heartbeats, a second ago (whole seconds on SQLite).
    assert!((0..=2_500).contains(&one.heartbeat_age_ms), "{one:?}");
    let now_ms = time::OffsetDateTime::now_utc().unix_timestamp() * 1000;
    assert!((now_ms - one.last_heartbeat_ms - one.heartbeat_age_ms).abs() <= 2_000, "{one:?}");
}

async fn queue_loads_count_due_scheduled_and_claimed_jobs_apart(engine: Engine) {
    let w = world(engine, &[]).await;
    w.queue("alpha", BuildKind::Deploy, None).await;
    w.queue("beta", BuildKind::Deploy, None).await;
    let (jobs, ago, later, claim) = match engine {
        Engine::Sqlite => (
            "Jobs",
            "CAST(strftime('%s', 'now') AS INTEGER) - 30",
            "CAST(strftime('%s', 'now') AS INTEGER) + 600",
            "'Running'",
        ),
        Engine::Postgres => {
            ("apalis.jobs", "now() - interval '30 seconds'", "now() + interval '10 minutes'", "'Running'")
        }
    };
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let ids: Vec<String> = Q::new(format!("SELECT id FROM {jobs} WHERE job_type = $1 ORDER BY id"))
        .text(BUILDS_QUEUE)
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .iter()
        .map(|r| r.text("id").unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    // One job waits for 30 s; the other is claimed; a copy of it is scheduled for later.
    Q::new(format!("UPDATE {jobs} SET run_at = {ago} WHERE id = $1")).text(&ids[0]).execute(&mut conn).await.unwrap();
    Q::new(format!("UPDATE {jobs} SET status = {claim} WHERE id = $1")).text(&ids[1]).execute(&mut conn).await.unwrap();
    w.queue("gamma", BuildKind::Deploy, None).await;
    Q::new(format!("UPDATE {jobs} SET run_at = {later} WHERE job_type = $1 AND status = 'Pending' AND id <> $2"))
        .text(BUILDS_QUEUE)
        .text(&ids[0])
        .execute(&mut conn)
        .await
        .unwrap();

    let loads = fleet::queue_loads(&mut conn, &[BUILDS_QUEUE, "nix"]).await.unwrap();
    let builds = &loads[0];
    assert_eq!((builds.waiting, builds.scheduled, builds.running), (1, 1, 1), "{loads:?}");
    assert!(builds.oldest_waiting_ms.is_some_and(|ms| (29_000..=35_000).contains(&ms)), "{loads:?}");
    assert_eq!((loads[1].waiting, loads[1].oldest_waiting_ms), (0, None), "{loads:?}");
}

/// A worker process beats the rows of all its queue workers (the
/// `builds` one and every sibling) but one that registers again after a
/// failure; that one's row is made to look just older than apalis's
/// heartbeat interval (on SQLite, where apalis refuses a name that beat
/// within it), which is still far from stale.
async fn a_worker_beats_its_queue_workers_but_one_that_registers_again(engine: Engine) {
    use slipway_jobs::store::heartbeats::{apalis_names, heartbeat_age_ms, keep_alive, make_registrable};
    let w = world(engine, &[]).await;
    let name = "worker@web-1.example-4242-abc123";
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let names = apalis_names(name);
    assert_eq!(names.len(), 5, "{names:?}");
    for id in names.iter().chain([&"worker@other-7-zzzzzz".to_owned()]) {
        worker_row(engine, id, "builds", 600).execute(&mut conn).await.unwrap();
    }
    let rejoining = format!("{name}-nix");
    assert_eq!(keep_alive(&mut conn, name, std::slice::from_ref(&rejoining)).await.unwrap(), 4);
    for id in &names {
        let age = heartbeat_age_ms(&mut conn, id).await.unwrap().unwrap();
        if *id == rejoining {
            assert!(age >= 600_000, "{id} was beaten while it registers again: {age} ms");
        } else {
            assert!(age < 2_000, "{id} was not beaten: {age} ms");
        }
    }
    let other = heartbeat_age_ms(&mut conn, "worker@other-7-zzzzzz").await.unwrap().unwrap();
    assert!(other >= 600_000, "another process's row was beaten: {other} ms");

    assert_eq!(keep_alive(&mut conn, name, &[]).await.unwrap(), 5);
    let interval = std::time::Duration::from_millis(2_500);
    let aged = make_registrable(&mut conn, &rejoining, interval).await.unwrap();
    let age = heartbeat_age_ms(&mut conn, &rejoining).await.unwrap().unwrap();
    match engine {
        // apalis-sqlite takes the name once `now - last_seen` exceeds the
        // interval's whole seconds (2 here).
        Engine::Sqlite => assert!(aged && (3_000..=4_000).contains(&age), "aged {aged}, {age} ms"),
        Engine::Postgres => assert!(!aged && age < 2_000, "aged {aged}, {age} ms"),
    }
    let beaten = heartbeat_age_ms(&mut conn, name).await.unwrap().unwrap();
    assert!(beaten < 2_000, "the builds worker's row was aged with it: {beaten} ms");
}

/// The dashboard reads the queues and the workers in one read transaction
/// (`Db::begin_read`): a claim that commits between its two reads (the job
/// taken off the queue, its build running on a worker) shows in neither,
/// and in both once read again. Read apart, the CI once saw the build's
/// slot in use while its job still waited.
async fn the_fleet_is_read_in_one_snapshot_so_a_claim_between_its_reads_shows_in_both_or_neither(engine: Engine) {
    let w = world(engine, &[]).await;
    let name = "worker@web-1.example-4242-abc123";
    let build = w.queue("demo", BuildKind::Deploy, None).await;
    let mut conn = w.ctx.db.acquire().await.unwrap();
    worker_row(engine, name, BUILDS_QUEUE, 0).execute(&mut conn).await.unwrap();
    let jobs = match engine {
        Engine::Sqlite => "Jobs",
        Engine::Postgres => "apalis.jobs",
    };

    let mut read = w.ctx.db.begin_read().await.unwrap();
    let loads = fleet::queue_loads(&mut read, &[BUILDS_QUEUE]).await.unwrap();
    assert_eq!((loads[0].waiting, loads[0].running), (1, 0), "{loads:?}");
    // The worker claims: its job leaves the queue, its build runs there.
    Q::new(format!("UPDATE {jobs} SET status = 'Queued', lock_by = $1 WHERE job_type = $2"))
        .text(name)
        .text(BUILDS_QUEUE)
        .execute(&mut conn)
        .await
        .unwrap();
    running_on(name, &build).execute(&mut conn).await.unwrap();
    let workers = fleet::workers(&mut read, 3600).await.unwrap();
    assert_eq!(workers[0].slots_in_use, 0, "the claim showed inside the snapshot: {workers:?}");
    read.commit().await.unwrap();

    let (loads, workers) =
        (fleet::queue_loads(&mut conn, &[BUILDS_QUEUE]).await.unwrap(), fleet::workers(&mut conn, 3600).await.unwrap());
    assert_eq!((loads[0].waiting, loads[0].running, workers[0].slots_in_use), (0, 1, 1), "{loads:?} {workers:?}");
}

slipway_jobs::on_both_engines!(
    a_worker_beats_its_queue_workers_but_one_that_registers_again,
    a_worker_process_is_one_row_with_its_host_queues_running_builds_and_latest_heartbeat,
    queue_loads_count_due_scheduled_and_claimed_jobs_apart,
    the_fleet_is_read_in_one_snapshot_so_a_claim_between_its_reads_shows_in_both_or_neither,
);
