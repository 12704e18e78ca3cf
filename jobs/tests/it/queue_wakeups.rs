//! On PostgreSQL a worker's task is woken by the inserts of its own queue
//! only: every wake costs it a fetch, and the notification channel carries
//! every queue's inserts (`store::queue::JobFeed`).

use slipway_jobs::store::queue::{push, BuildJob, JobFeed, NixJob, Woken, NIX_QUEUE, POSTGRES_POLL};
use slipway_jobs::store::{Db, Engine, Q};
use slipway_jobs::test_support::world;
use std::time::Duration;

/// The id of the nix job whose payload names `marker`.
async fn job_id(w: &slipway_jobs::test_support::World, marker: &str) -> String {
    Q::new("SELECT id FROM apalis.jobs WHERE job_type = $1 AND convert_from(job, 'UTF8') LIKE $2")
        .text(NIX_QUEUE)
        .text(format!("%\"{marker}\"%"))
        .fetch_one(&mut w.ctx.db.acquire().await.unwrap())
        .await
        .unwrap()
        .text("id")
        .unwrap()
}

#[tokio::test]
async fn a_queue_s_wakeups_skip_the_jobs_of_other_queues() {
    let w = world(Engine::Postgres, &[]).await;
    let Db::Postgres(pool) = &w.ctx.db else { unreachable!("a PostgreSQL world") };
    let feed = JobFeed::start(pool, POSTGRES_POLL);
    let mut wakeups = feed.subscribe(NIX_QUEUE);
    // The listener connects in the background and says when it listens:
    // every insert committed after that is announced.
    let first = tokio::time::timeout(Duration::from_secs(30), wakeups.recv()).await;
    assert_eq!(first.ok().flatten(), Some(Woken::Listening), "the feed never listened");

    // A build job first, then a nix job, each committed (so notified) in
    // that order: the first wake is the nix job's.
    let mut tx = w.ctx.db.begin_write().await.unwrap();
    push(&mut tx, &BuildJob { build_id: "some-build".into() }, None).await.unwrap();
    tx.commit().await.unwrap();
    let mut tx = w.ctx.db.begin_write().await.unwrap();
    push(&mut tx, &NixJob { key: "the-eval".into() }, None).await.unwrap();
    tx.commit().await.unwrap();
    let nix_job = job_id(&w, "the-eval").await;
    let woken_by = tokio::time::timeout(Duration::from_secs(30), wakeups.recv())
        .await
        .expect("the nix job woke the nix queue")
        .expect("the listener is still running");
    assert_eq!(woken_by, Woken::Job(nix_job), "the build job woke the nix queue");
}

/// The job feed comes back after PostgreSQL refused and dropped every
/// connection for 3 s (as a restart or failover does): it wakes its
/// queue's workers once it listens again (jobs inserted meanwhile were
/// not announced), then with each new job of their queue.
#[tokio::test]
async fn the_job_feed_listens_again_after_postgres_refused_every_connection() {
    let w = world(Engine::Postgres, &[]).await;
    let Db::Postgres(pool) = &w.ctx.db else { unreachable!("a PostgreSQL world") };
    let feed = JobFeed::start(pool, POSTGRES_POLL);
    let mut wakeups = feed.subscribe(NIX_QUEUE);
    let first = tokio::time::timeout(Duration::from_secs(30), wakeups.recv()).await;
    assert_eq!(first.ok().flatten(), Some(Woken::Listening), "the feed never listened");

    let outage = std::time::Instant::now();
    let mut dropped = 0;
    while outage.elapsed() < Duration::from_secs(3) {
        dropped += w.db.accept_connections(false).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(dropped > 0, "the feed's connection was not dropped");
    w.db.accept_connections(true).await;
    let again = tokio::time::timeout(Duration::from_secs(30), wakeups.recv()).await;
    assert_eq!(again.ok().flatten(), Some(Woken::Listening), "the feed did not listen again");

    // A connection the feed made while a round of the outage began (its
    // backend not yet listed, so not dropped) is dropped by the next round:
    // the feed then listens once more. Its wake says so, and a job pushed
    // while it was away is found by that wake, not announced; each job
    // pushed after it listens is announced.
    let mut heard = Vec::new();
    for attempt in 0..2 {
        let mut tx = w.ctx.db.begin_write().await.unwrap();
        push(&mut tx, &NixJob { key: format!("after-the-outage-{attempt}") }, None).await.unwrap();
        tx.commit().await.unwrap();
        let next = tokio::time::timeout(Duration::from_secs(5), wakeups.recv()).await;
        heard.push(format!("{next:?}"));
        match next {
            Ok(Some(Woken::Job(_))) => return,
            Ok(Some(Woken::Listening)) => continue,
            _ => break,
        }
    }
    panic!("a new job went unheard after the outage: {heard:?}");
}

/// A storage is built from a feed its caller need not keep (the queue
/// benchmark passed a temporary): the subscription alone keeps the feed
/// listening, so a new job still wakes its queue's workers at once instead
/// of at their next poll, a second later.
#[tokio::test]
async fn a_subscription_is_woken_by_new_jobs_after_its_feed_is_dropped() {
    let w = world(Engine::Postgres, &[]).await;
    let Db::Postgres(pool) = &w.ctx.db else { unreachable!("a PostgreSQL world") };
    let mut wakeups = JobFeed::start(pool, POSTGRES_POLL).subscribe(NIX_QUEUE);
    let first = tokio::time::timeout(Duration::from_secs(30), wakeups.recv()).await;
    assert_eq!(first.ok().flatten(), Some(Woken::Listening), "the feed never listened");

    let mut tx = w.ctx.db.begin_write().await.unwrap();
    push(&mut tx, &NixJob { key: "after-the-feed".into() }, None).await.unwrap();
    tx.commit().await.unwrap();
    let nix_job = job_id(&w, "after-the-feed").await;
    let woken_by = tokio::time::timeout(Duration::from_secs(30), wakeups.recv()).await;
    assert_eq!(woken_by.ok().flatten(), Some(Woken::Job(nix_job)), "the new job did not wake the queue");
}
