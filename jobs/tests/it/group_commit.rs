//! SQLite's group commit (`jobs/src/store/db.rs`, `SqliteDb`): the write
//! transactions that wait for the write turn commit with the one before
//! them, one `COMMIT` for all, and each is answered only once that commit
//! returned; one that fails or rolls back takes only its own writes with it.
//! A crash before the commit is `worker/tests/it/durability.rs`'s.

use slipway_jobs::store::{Conn, Db, Engine, Q};
use slipway_jobs::test_support::{checker, submit_demo, wait_for, world, AnySource};
use std::sync::Arc;
use std::time::Duration;

/// The SQLite pool of `db`.
fn sqlite(db: &Db) -> &slipway_jobs::store::SqliteDb {
    match db {
        Db::Sqlite(p) => p,
        Db::Postgres(_) => panic!("group commit is SQLite's"),
    }
}

/// Waits until `n` write transactions wait for the turn.
async fn until_waiting(db: &Db, n: usize) {
    wait_for(&format!("{n} write transactions waiting for the turn"), Duration::from_secs(60), || async {
        (sqlite(db).waiting_writers() == n).then_some(())
    })
    .await;
}

/// Whether build `id` is committed, read on a connection of the pool (never
/// the writer's, so it sees only what committed).
async fn stored(db: &Db, id: &str) -> bool {
    let mut conn = db.acquire().await.unwrap();
    Q::new("SELECT COUNT(*) AS n FROM builds WHERE id = $1")
        .text(id)
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .int("n")
        .unwrap()
        > 0
}

/// Eight submits that arrive while a write transaction holds the turn
/// commit together with it: one `COMMIT` for the nine, and each submit,
/// answered, finds its build and job already committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn submits_waiting_for_the_write_turn_commit_together_and_each_is_stored_when_answered() {
    let w = world(Engine::Sqlite, &[]).await;
    let db = w.ctx.db.clone();
    let sources = Arc::new(AnySource(checker()));
    let (committed_before, commits_before) = sqlite(&db).group_commits();
    let holder = db.begin_write().await.unwrap();
    let mut submits = Vec::new();
    for i in 0..8 {
        let (db, sources) = (db.clone(), sources.clone());
        submits.push(tokio::spawn(async move {
            let accepted = submit_demo(&db, sources.as_ref(), &format!("group-{i}"), 1000).await.unwrap();
            let build = accepted.build_id.clone();
            // Answered: its commit has returned.
            assert!(stored(&db, &build).await, "submit {i} was answered before its build was committed");
            build
        }));
    }
    until_waiting(&db, 8).await;
    holder.commit().await.unwrap();
    let mut builds = Vec::new();
    for s in submits {
        builds.push(s.await.unwrap());
    }
    let (committed, commits) = sqlite(&db).group_commits();
    assert_eq!(committed - committed_before, 9, "the holder and the eight submits committed");
    assert_eq!(commits - commits_before, 1, "the eight submits that waited committed with the holder, in one COMMIT");
    for b in &builds {
        assert!(stored(&db, b).await, "build {b} is not stored");
    }
    let mut conn = db.acquire().await.unwrap();
    let jobs = Q::new("SELECT COUNT(*) AS n FROM Jobs WHERE job_type = 'builds'").fetch_one(&mut conn).await.unwrap();
    assert_eq!(jobs.int("n").unwrap(), 8, "each submit's job");
}

/// An event row for deployment `id`, numbered `n`.
async fn insert_event(tx: &mut Conn, id: &str, n: i64) -> Result<(), slipway_jobs::store::StoreError> {
    Q::new("INSERT INTO deployment_events (deployment_id, n, state, at) VALUES ($1, $2, 'queued', 0)")
        .text(id)
        .int(n)
        .execute(tx)
        .await
        .map(|_| ())
}

/// In one group: `ok-1` commits; `dup` writes a row, then fails on a
/// duplicate key and is dropped without a commit; `undone` writes and rolls
/// back; `ok-2` commits. The group's commit keeps both `ok` rows and
/// nothing of the other two, and the writes after it start a new group.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_that_fails_in_a_group_takes_only_its_own_writes_with_it() {
    let w = world(Engine::Sqlite, &[]).await;
    let db = w.ctx.db.clone();
    let (_, commits_before) = sqlite(&db).group_commits();
    let mut holder = db.begin_write().await.unwrap();
    insert_event(&mut holder, "holder", 1).await.unwrap();
    let mut tasks = Vec::new();
    for (k, name) in ["ok-1", "dup", "undone", "ok-2"].into_iter().enumerate() {
        let writer = db.clone();
        tasks.push(tokio::spawn(async move {
            let mut tx = writer.begin_write().await.unwrap();
            insert_event(&mut tx, name, 1).await.unwrap();
            match name {
                "dup" => {
                    // The holder's row: a duplicate key, an error; the
                    // transaction is dropped as a `?` would drop it.
                    assert!(insert_event(&mut tx, "holder", 1).await.is_err());
                    drop(tx);
                    Ok(())
                }
                "undone" => tx.rollback().await,
                _ => tx.commit().await,
            }
        }));
        until_waiting(&db, k + 1).await;
    }
    holder.commit().await.unwrap();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let mut conn = db.acquire().await.unwrap();
    let rows = Q::new("SELECT deployment_id FROM deployment_events ORDER BY deployment_id")
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .iter()
        .map(|r| r.text("deployment_id").unwrap())
        .collect::<Vec<_>>();
    assert_eq!(rows, ["holder", "ok-1", "ok-2"], "what the group committed");
    let (_, commits) = sqlite(&db).group_commits();
    assert_eq!(commits - commits_before, 1, "one COMMIT for the group");
    drop(conn);
    // The writer connection is clean: a next write commits alone.
    let mut tx = db.begin_write().await.unwrap();
    insert_event(&mut tx, "after", 1).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(sqlite(&db).group_commits().1 - commits_before, 2);
}
