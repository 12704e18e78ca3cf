//! PostgreSQL wake-ups follow the commit of what they announce
//! (`store::db::Notices`): no transaction notifies inside itself, a
//! committed one's notifications arrive, a rolled-back one's never do, and
//! a job that is not yet due wakes nobody.

use slipway_jobs::store::events::NOTIFY_CHANNEL;
use slipway_jobs::store::queue::{push, BuildJob, BUILDS_QUEUE};
use slipway_jobs::store::{Db, Engine, Q};
use slipway_jobs::test_support::world;
use std::time::Duration;

/// Deadline for a notification that must arrive (a failure bound, not a wait).
const ARRIVES: Duration = Duration::from_secs(30);

#[tokio::test]
async fn no_trigger_on_the_job_table_notifies_inside_the_inserting_transaction() {
    let w = world(Engine::Postgres, &[]).await;
    let notifying = Q::new(
        "SELECT COUNT(*) AS n FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
         WHERE t.tgrelid = 'apalis.jobs'::regclass AND p.prosrc LIKE '%pg_notify%'",
    )
    .fetch_one(&mut w.ctx.db.acquire().await.unwrap())
    .await
    .unwrap()
    .int("n")
    .unwrap();
    assert_eq!(notifying, 0, "a trigger on apalis.jobs notifies inside the transaction that inserts a job");
}

#[tokio::test]
async fn a_committed_transaction_s_wake_ups_arrive_and_a_rolled_back_one_s_never_do() {
    let w = world(Engine::Postgres, &[]).await;
    let Db::Postgres(pool) = &w.ctx.db else { unreachable!("a PostgreSQL world") };
    let mut listener = sqlx::postgres::PgListener::connect_with(pool).await.unwrap();
    listener.listen_all([NOTIFY_CHANNEL, "apalis::job::insert"]).await.unwrap();

    let mut rolled_back = w.ctx.db.begin_write().await.unwrap();
    rolled_back.notify(NOTIFY_CHANNEL, "rolled-back".to_owned()).await.unwrap();
    push(&mut rolled_back, &BuildJob { build_id: "rolled-back-build".into() }, None).await.unwrap();
    rolled_back.rollback().await.unwrap();

    // A job due in a minute wakes nobody now; the one due now does, after
    // the event notified before it in the same transaction.
    let mut committed = w.ctx.db.begin_write().await.unwrap();
    push(&mut committed, &BuildJob { build_id: "later-build".into() }, Some(Duration::from_secs(60))).await.unwrap();
    committed.notify(NOTIFY_CHANNEL, "committed".to_owned()).await.unwrap();
    push(&mut committed, &BuildJob { build_id: "due-build".into() }, None).await.unwrap();
    committed.commit().await.unwrap();

    let due_job = Q::new("SELECT id FROM apalis.jobs WHERE convert_from(job, 'UTF8') LIKE '%due-build%'")
        .fetch_one(&mut w.ctx.db.acquire().await.unwrap())
        .await
        .unwrap()
        .text("id")
        .unwrap();
    let mut heard = Vec::new();
    for _ in 0..2 {
        let n = tokio::time::timeout(ARRIVES, listener.recv()).await.expect("a wake-up arrives").unwrap();
        heard.push((n.channel().to_owned(), n.payload().to_owned()));
    }
    let job: serde_json::Value = serde_json::from_str(&heard[1].1).unwrap();
    assert_eq!(heard[0], (NOTIFY_CHANNEL.to_owned(), "committed".to_owned()), "{heard:?}");
    assert_eq!(heard[1].0, "apalis::job::insert", "{heard:?}");
    assert_eq!(job, serde_json::json!({ "job_type": BUILDS_QUEUE, "id": due_job }), "{heard:?}");
}
