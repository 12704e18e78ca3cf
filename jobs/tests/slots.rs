//! The fleet-wide slot mechanism (MS-7) on both engines.

use slipway_jobs::config::Config;
use slipway_jobs::store::{slots, Db, Engine};
use slipway_jobs::test_support::TestDatabase;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

async fn open(engine: Engine) -> (Db, TestDatabase) {
    let database = TestDatabase::new(engine).await;
    let keys = BTreeMap::from([("DATABASE_URL".to_owned(), database.url.clone())]);
    (slipway_jobs::store::open(&Config::from_keys(&keys).unwrap()).await.unwrap(), database)
}

const LEASE: Duration = Duration::from_secs(300);

async fn a_full_pool_refuses_at_once_and_a_release_frees_a_slot(engine: Engine) {
    let (db, _d) = open(engine).await;
    let a = slots::try_acquire(&db, "nix", 2, "a", LEASE).await.unwrap().expect("first slot");
    let _b = slots::try_acquire(&db, "nix", 2, "b", LEASE).await.unwrap().expect("second slot");
    let started = Instant::now();
    assert_eq!(slots::try_acquire(&db, "nix", 2, "c", LEASE).await.unwrap(), None);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a full pool must refuse at once, took {:?}",
        started.elapsed()
    );
    // Other pools are independent.
    assert!(slots::try_acquire(&db, "other", 1, "c", LEASE).await.unwrap().is_some());
    slots::release(&db, &a).await.unwrap();
    assert!(slots::try_acquire(&db, "nix", 2, "c", LEASE).await.unwrap().is_some());
    assert_eq!(slots::held(&db, "nix").await.unwrap(), 2);
}

async fn a_holder_that_never_releases_frees_its_slot_when_the_lease_runs_out(engine: Engine) {
    let (db, _d) = open(engine).await;
    slots::try_acquire(&db, "nix", 1, "crashed", Duration::ZERO).await.unwrap().expect("slot");
    // The zero lease is already over at the next acquisition.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if slots::try_acquire(&db, "nix", 1, "next", LEASE).await.unwrap().is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "the expired slot was never reclaimed");
        tokio::task::yield_now().await;
    }
}

async fn concurrent_holders_never_exceed_the_cap(engine: Engine) {
    let (db, _d) = open(engine).await;
    let tasks: Vec<_> = (0..12)
        .map(|i| {
            let db = db.clone();
            tokio::spawn(async move { slots::try_acquire(&db, "nix", 3, &format!("h{i}"), LEASE).await.unwrap() })
        })
        .collect();
    let mut won = 0;
    for t in tasks {
        won += t.await.unwrap().is_some() as usize;
    }
    assert_eq!(won, 3);
    assert_eq!(slots::held(&db, "nix").await.unwrap(), 3);
}

slipway_jobs::on_both_engines!(
    a_full_pool_refuses_at_once_and_a_release_frees_a_slot,
    a_holder_that_never_releases_frees_its_slot_when_the_lease_runs_out,
    concurrent_holders_never_exceed_the_cap,
);
