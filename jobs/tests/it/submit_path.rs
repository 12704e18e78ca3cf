//! The submit's transaction (`store::submit`): the job push it folds into
//! its statement on PostgreSQL writes the row apalis's own push writes (Q-1:
//! the worker takes it as any other job), and Q-3's cheap bound falls back
//! to a count when it is loose. How many statements it sends:
//! `submit_statements.rs`.

use slipway_jobs::store::queue::{push, BuildJob};
use slipway_jobs::store::{Engine, Q};
use slipway_jobs::submit;
use slipway_jobs::test_support::{checker, submit_demo, world, AnySource};

/// The job row the submit's folded push writes equals, but for its id,
/// payload and time, the row apalis's own push (`push_tasks`) writes, on
/// each engine: the worker takes it as any other job.
async fn the_folded_job_push_writes_the_row_apalis_writes(engine: Engine) {
    let w = world(engine, &[]).await;
    let accepted = submit_demo(&w.ctx.db, &AnySource(checker()), "folded", 1000).await.unwrap();
    let mut tx = w.ctx.db.begin_write().await.unwrap();
    push(&mut tx, &BuildJob { build_id: "by-apalis".into() }, None).await.unwrap();
    tx.commit().await.unwrap();
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let sql = match engine {
        Engine::Postgres => {
            "SELECT (to_jsonb(j) - 'id' - 'job' - 'run_at')::text AS rest, convert_from(job, 'UTF8') AS job,
                    (run_at <= now() AND run_at > now() - interval '1 minute')::int::int8 AS due
             FROM apalis.jobs j ORDER BY convert_from(job, 'UTF8') LIKE '%by-apalis%'"
        }
        Engine::Sqlite => {
            "SELECT json_array(typeof(job), job_type, status, attempts, max_attempts, typeof(run_at), last_result,
                               lock_at, lock_by, done_at, priority, metadata, idempotency_key, length(id)) AS rest,
                    CAST(job AS TEXT) AS job,
                    (run_at <= unixepoch() AND run_at > unixepoch() - 60) AS due
             FROM Jobs ORDER BY CAST(job AS TEXT) LIKE '%by-apalis%'"
        }
    };
    let rows = Q::new(sql).fetch_all(&mut conn).await.unwrap();
    assert_eq!(rows.len(), 2);
    let jobs: Vec<BuildJob> = rows.iter().map(|r| serde_json::from_str(&r.text("job").unwrap()).unwrap()).collect();
    assert_eq!(jobs[0].build_id, accepted.build_id, "the submit's job names its build");
    assert_eq!(jobs[1].build_id, "by-apalis");
    let rest: Vec<String> = rows.iter().map(|r| r.text("rest").unwrap()).collect();
    assert_eq!(rest[0], rest[1], "the folded push and apalis's differ");
    assert!(rows.iter().all(|r| r.int("due").unwrap() == 1), "a job is not due now");
}

slipway_jobs::on_both_engines!(the_folded_job_push_writes_the_row_apalis_writes);

/// Q-3 when the cheap bound is loose: an old build still waits behind
/// builds that ran, so the span of queued submit numbers is far above the
/// queue's length; admission then counts, and admits exactly `QUEUE_SIZE`
/// (before the body and in the transaction alike).
async fn an_old_waiting_build_does_not_make_admission_refuse_a_queue_with_room(engine: Engine) {
    let w = world(engine, &[]).await;
    let sources = AnySource(checker());
    submit_demo(&w.ctx.db, &sources, "old", 100).await.unwrap();
    for i in 0..6 {
        submit_demo(&w.ctx.db, &sources, &format!("ran-{i}"), 100).await.unwrap();
    }
    let mut conn = w.ctx.db.acquire().await.unwrap();
    Q::new("UPDATE builds SET status = 'succeeded', finished_at = 1 WHERE deployment_id LIKE 'ran-%'")
        .execute(&mut conn)
        .await
        .unwrap();
    // One build queued, its submit numbers spanning seven.
    assert_eq!(slipway_jobs::store::submit::admission_count(&mut conn, 3).await.unwrap(), 1);
    drop(conn);
    for id in ["room-1", "room-2"] {
        submit::admit(&w.ctx.db, 3).await.unwrap();
        submit_demo(&w.ctx.db, &sources, id, 3).await.unwrap_or_else(|e| panic!("{id} refused: {e}"));
    }
    let full = submit_demo(&w.ctx.db, &sources, "no-room", 3).await;
    assert!(matches!(full, Err(submit::SubmitError::QueueFull { queued: 3, limit: 3 })), "{full:?}");
    assert!(matches!(submit::admit(&w.ctx.db, 3).await, Err(submit::SubmitError::QueueFull { queued: 3, .. })));
}

slipway_jobs::on_both_engines!(an_old_waiting_build_does_not_make_admission_refuse_a_queue_with_room);
