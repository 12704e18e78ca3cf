//! The submit's transaction (`store::submit`): how many statements it
//! sends, and that the job push it folds into its statement on PostgreSQL
//! writes the row apalis's own push writes (Q-1: the worker takes it as any
//! other job).

use slipway_jobs::store::queue::{push_build_job, BuildJob};
use slipway_jobs::store::{Db, Engine, Q};
use slipway_jobs::submit;
use slipway_jobs::test_support::{checker, submit_demo, world, AnySource};
use std::sync::{Arc, Mutex};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Collects the first words of every statement sqlx sends (its
/// `sqlx::query` events) on this thread while it is the default subscriber.
#[derive(Clone, Default)]
struct Statements(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> Layer<S> for Statements {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != "sqlx::query" {
            return;
        }
        struct Summary(String);
        impl tracing::field::Visit for Summary {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "summary" || (field.name() == "message" && self.0.is_empty()) {
                    self.0 = format!("{value:?}");
                }
            }
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "summary" || (field.name() == "message" && self.0.is_empty()) {
                    self.0 = value.to_owned();
                }
            }
        }
        let mut summary = Summary(String::new());
        event.record(&mut summary);
        self.0.lock().unwrap().push(summary.0);
    }
}

/// The statements `submit_demo` of deployment `id` sends (PostgreSQL runs
/// them on the calling thread, so a thread's subscriber sees them all).
async fn statements_of_a_submit(db: &Db, sources: &AnySource, id: &str) -> Vec<String> {
    let seen = Statements::default();
    let subscriber = tracing_subscriber::registry().with(
        seen.clone()
            .with_filter(tracing_subscriber::filter::Targets::new().with_target("sqlx::query", tracing::Level::TRACE)),
    );
    let accepted = {
        let _default = tracing::subscriber::set_default(subscriber);
        submit_demo(db, sources, id, 1000).await
    };
    accepted.expect("the submit is accepted");
    let statements = seen.0.lock().unwrap().clone();
    statements
}

/// A submit's transaction is four round trips on PostgreSQL: `BEGIN` (which
/// sqlx does not log), the deployment's upsert (which takes its lock and the
/// admission lock), one statement that supersedes, inserts the build, pushes
/// its job, records the event and counts the queue, and `COMMIT`; for a new
/// deployment and for one whose queued deploy it supersedes alike (it was
/// seventeen). Before it, without OpenBao, one read of the deployment's
/// secret pins, as the demo configuration has secret fields.
#[tokio::test]
async fn a_submit_on_postgres_is_four_round_trips() {
    let w = world(Engine::Postgres, &[]).await;
    let sources = AnySource(checker());
    for (what, id) in [("a new deployment", "fresh"), ("a deployment with a queued deploy", "fresh")] {
        let statements = statements_of_a_submit(&w.ctx.db, &sources, id).await;
        println!("{what}: {} statements: {statements:#?}", statements.len());
        let starts: Vec<&str> = statements.iter().map(|s| s.split_whitespace().next().unwrap_or("")).collect();
        assert_eq!(starts, ["SELECT", "INSERT", "WITH", "COMMIT"], "{what}: {statements:#?}");
        assert!(statements[0].contains("operator_secrets"), "{what}: {statements:#?}");
    }
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let rows = Q::new("SELECT status, dispatched FROM builds ORDER BY seq").fetch_all(&mut conn).await.unwrap();
    let rows: Vec<(String, i64)> =
        rows.iter().map(|r| (r.text("status").unwrap(), r.int("dispatched").unwrap())).collect();
    assert_eq!(rows, [("superseded".to_owned(), 1), ("queued".to_owned(), 1)], "Q-7 and ST-2");
}

/// The job row the submit's folded push writes equals, but for its id,
/// payload and time, the row `apalis_postgres::queries::push_tasks` writes.
#[tokio::test]
async fn the_folded_job_push_writes_the_row_apalis_writes() {
    let w = world(Engine::Postgres, &[]).await;
    let accepted = submit_demo(&w.ctx.db, &AnySource(checker()), "folded", 1000).await.unwrap();
    let mut tx = w.ctx.db.begin_write().await.unwrap();
    push_build_job(&mut tx, "by-apalis", None).await.unwrap();
    tx.commit().await.unwrap();
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let rows = Q::new(
        "SELECT (to_jsonb(j) - 'id' - 'job' - 'run_at')::text AS rest, convert_from(job, 'UTF8') AS job,
                (run_at <= now() AND run_at > now() - interval '1 minute')::int::int8 AS due
         FROM apalis.jobs j ORDER BY convert_from(job, 'UTF8') LIKE '%by-apalis%'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(rows.len(), 2);
    let jobs: Vec<BuildJob> = rows.iter().map(|r| serde_json::from_str(&r.text("job").unwrap()).unwrap()).collect();
    assert_eq!(jobs[0].build_id, accepted.build_id, "the submit's job names its build");
    assert_eq!(jobs[1].build_id, "by-apalis");
    let rest: Vec<String> = rows.iter().map(|r| r.text("rest").unwrap()).collect();
    assert_eq!(rest[0], rest[1], "the folded push and apalis's differ");
    assert!(rows.iter().all(|r| r.int("due").unwrap() == 1), "a job is not due now");
}

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
