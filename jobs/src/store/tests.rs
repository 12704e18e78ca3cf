//! Tests of opening a store and of its error kinds, without a database
//! where they can; the store's queries are tested in `jobs/tests/`.

use super::open;
use crate::config::Config;

#[tokio::test]
async fn an_unsupported_database_url_is_named_by_its_scheme_only() {
    for (url, shown) in [("mysql://admin:hunter2@db/slipway", "mysql://"), ("hunter2", "(none)")] {
        let keys = std::collections::BTreeMap::from([("DATABASE_URL".to_owned(), url.to_owned())]);
        let message = open(&Config::from_keys(&keys).unwrap()).await.unwrap_err().to_string();
        assert!(message.contains(shown), "{message}");
        assert!(!message.contains("hunter2"), "the URL leaked: {message}");
    }
}

/// A transaction whose COMMIT failed leaves its connection counted as
/// inside a transaction (here: SQLite ended it underneath, as it does on
/// a disk I/O error); the pool must not hand that connection out again.
#[tokio::test]
async fn a_connection_whose_commit_failed_is_not_handed_out_again() {
    let dir = tempfile::tempdir().unwrap();
    let db = super::open_sqlite(&dir.path().join("slipway.db")).await.unwrap();
    for round in 0..3 {
        let mut tx = db.begin_write().await.unwrap();
        super::Q::new("ROLLBACK").execute(&mut tx).await.unwrap();
        assert!(tx.commit().await.is_err(), "round {round}: the commit should fail");
        for n in 0..16 {
            let tx = db.begin_write().await.unwrap_or_else(|e| panic!("round {round}, begin {n}: {e}"));
            tx.rollback().await.unwrap();
        }
    }
}

/// A transaction dropped unfinished (a request cancelled mid-way) is
/// rolled back before its connection is used again: what it wrote is
/// gone and the next write transaction begins.
#[tokio::test]
async fn a_write_transaction_dropped_unfinished_writes_nothing_and_the_next_begins() {
    let dir = tempfile::tempdir().unwrap();
    let db = super::open_sqlite(&dir.path().join("slipway.db")).await.unwrap();
    for round in 0..3 {
        let mut tx = db.begin_write().await.unwrap();
        super::Q::new("INSERT INTO nix_slots (slot, holder, expires_at) VALUES ($1, 'dropped', 0)")
            .int(round)
            .execute(&mut tx)
            .await
            .unwrap();
        drop(tx);
        let tx = db.begin_write().await.unwrap_or_else(|e| panic!("round {round}: {e}"));
        tx.rollback().await.unwrap();
    }
    let mut conn = db.acquire().await.unwrap();
    let n = super::Q::new("SELECT COUNT(*) AS n FROM nix_slots").fetch_one(&mut conn).await.unwrap();
    assert_eq!(n.int("n").unwrap(), 0, "a dropped transaction's write was kept");
}

/// A process's SQLite write transactions run on one connection of
/// their own ([`super::SqliteDb`]), whose page cache then holds from one
/// to the next: a temporary table (seen only by the connection that made
/// it) made in one is there in the next, and not on the reads'.
#[tokio::test]
async fn a_process_s_sqlite_write_transactions_share_one_connection() {
    let dir = tempfile::tempdir().unwrap();
    let db = super::open_sqlite(&dir.path().join("slipway.db")).await.unwrap();
    let mut tx = db.begin_write().await.unwrap();
    super::Q::new("CREATE TEMP TABLE mark (x INTEGER)").execute(&mut tx).await.unwrap();
    tx.commit().await.unwrap();
    let exists = "SELECT COUNT(*) AS n FROM sqlite_temp_master WHERE name = 'mark'";
    for n in 0..3 {
        let mut tx = db.begin_write().await.unwrap();
        let row = super::Q::new(exists).fetch_one(&mut tx).await.unwrap();
        assert_eq!(row.int("n").unwrap(), 1, "write transaction {n} ran on another connection");
        tx.rollback().await.unwrap();
    }
    let mut reads = Vec::new();
    for _ in 0..8 {
        let mut conn = db.acquire().await.unwrap();
        let row = super::Q::new(exists).fetch_one(&mut conn).await.unwrap();
        assert_eq!(row.int("n").unwrap(), 0, "a read connection is the writers' connection");
        reads.push(conn);
    }
}

/// [`super::Db::hold_all`] on SQLite holds the write turn too: no write
/// transaction begins until what it holds is given back.
#[tokio::test]
async fn holding_every_sqlite_connection_holds_the_write_turn() {
    let dir = tempfile::tempdir().unwrap();
    let db = super::open_sqlite(&dir.path().join("slipway.db")).await.unwrap();
    let held = db.hold_all().await;
    let mut write = tokio::spawn({
        let db = db.clone();
        async move { db.begin_write().await?.commit().await }
    });
    if let Ok(done) = tokio::time::timeout(std::time::Duration::from_millis(500), &mut write).await {
        panic!("a write transaction began while every connection was held: {:?}", done.unwrap());
    }
    drop(held);
    write.await.unwrap().unwrap();
}

/// A write that SQLite cannot take now (the lock held elsewhere past
/// the busy timeout) is "unavailable" (`503`, try again), not a fault.
#[tokio::test]
async fn a_sqlite_write_lock_held_elsewhere_is_unavailable_not_a_fault() {
    use sqlx::{ConnectOptions as _, Executor as _};
    let dir = tempfile::tempdir().unwrap();
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.path().join("slipway.db"))
        .create_if_missing(true)
        .busy_timeout(std::time::Duration::ZERO);
    let mut holder = options.connect().await.unwrap();
    let mut other = options.connect().await.unwrap();
    holder.execute("BEGIN IMMEDIATE").await.unwrap();
    let error = super::StoreError::from(other.execute("BEGIN IMMEDIATE").await.unwrap_err());
    assert!(error.is_unavailable(), "{error}");
    assert_eq!(error.why_unavailable(), "SQLite: database is locked");
}

/// A process's SQLite write transactions take turns in the process
/// ([`super::SqliteDb`]), so none meets SQLite's lock held by another of
/// them: with no busy timeout at all, a second writer waits for the first
/// instead of failing with "database is locked".
#[tokio::test]
async fn a_process_s_sqlite_writers_take_turns_without_meeting_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("slipway.db");
    super::open_sqlite(&path).await.unwrap().close().await;
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&path).busy_timeout(std::time::Duration::ZERO);
    let db = super::Db::Sqlite(super::SqliteDb::new(sqlx::SqlitePool::connect_with(options).await.unwrap()));
    let first = db.begin_write().await.unwrap();
    let mut second = tokio::spawn({
        let db = db.clone();
        async move {
            let mut tx = db.begin_write().await?;
            super::Q::new("DELETE FROM deployments WHERE id = 'none'").execute(&mut tx).await?;
            tx.commit().await
        }
    });
    // Without turns the second `BEGIN IMMEDIATE` fails at once; with
    // them it is still waiting.
    if let Ok(done) = tokio::time::timeout(std::time::Duration::from_millis(500), &mut second).await {
        panic!("the second writer did not wait for the first: {:?}", done.unwrap());
    }
    first.commit().await.unwrap();
    second.await.unwrap().unwrap();
}

/// An api and a worker started together open a new SQLite file at once;
/// switching it to WAL must not answer "database is locked" to either.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn processes_opening_a_new_sqlite_file_at_once_all_open_it() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..20 {
        let path = dir.path().join(format!("round-{round}.db"));
        let opens: Vec<_> = (0..6)
            .map(|_| {
                let path = path.clone();
                tokio::spawn(async move { super::open_sqlite(&path).await.map(|db| db.engine()) })
            })
            .collect();
        for open in opens {
            open.await.unwrap().unwrap_or_else(|e| panic!("round {round}: {e}"));
        }
    }
}
