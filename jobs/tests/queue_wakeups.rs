//! On PostgreSQL a worker's task is woken by the inserts of its own queue
//! only: every wake costs it a fetch, and the notification channel carries
//! every queue's inserts (`store::queue::own_jobs`).

use slipway_jobs::store::queue::{own_jobs, push_build_job, push_nix_job, NIX_QUEUE};
use slipway_jobs::store::{Db, Engine, Q};
use slipway_jobs::test_support::world;
use std::time::Duration;

#[tokio::test]
async fn a_queue_s_wakeups_skip_the_jobs_of_other_queues() {
    let w = world(Engine::Postgres, &[]).await;
    let Db::Postgres(pool) = &w.ctx.db else { unreachable!("a PostgreSQL world") };
    let mut wakeups = own_jobs(pool, NIX_QUEUE);
    // The listener connects in the background: wait until it hears a nix
    // job, then drain what it heard.
    let mut heard_first = false;
    for round in 0..50 {
        let mut tx = w.ctx.db.begin_write().await.unwrap();
        push_nix_job(&mut tx, &format!("warm-up-{round}")).await.unwrap();
        tx.commit().await.unwrap();
        if tokio::time::timeout(Duration::from_millis(200), wakeups.recv()).await.is_ok() {
            heard_first = true;
            break;
        }
    }
    assert!(heard_first, "the listener never heard a nix job");
    while wakeups.try_recv().is_ok() {}

    // A build job first, then a nix job, each committed (so notified) in
    // that order: the first wake is the nix job's.
    let mut tx = w.ctx.db.begin_write().await.unwrap();
    push_build_job(&mut tx, "some-build", None).await.unwrap();
    tx.commit().await.unwrap();
    let mut tx = w.ctx.db.begin_write().await.unwrap();
    push_nix_job(&mut tx, "the-eval").await.unwrap();
    tx.commit().await.unwrap();
    let nix_job =
        Q::new("SELECT id FROM apalis.jobs WHERE job_type = $1 AND convert_from(job, 'UTF8') LIKE '%the-eval%'")
            .text(NIX_QUEUE)
            .fetch_one(&mut w.ctx.db.acquire().await.unwrap())
            .await
            .unwrap()
            .text("id")
            .unwrap();
    let woken_by = tokio::time::timeout(Duration::from_secs(30), wakeups.recv())
        .await
        .expect("the nix job woke the nix queue")
        .expect("the listener is still running");
    assert_eq!(woken_by.to_string(), nix_job, "the build job woke the nix queue");
}
