//! SQLite's write-ahead log stays bounded, against the real `slipway-api`
//! binary on a database file that a `sqlite3` shell also opens: a reader
//! left inside a transaction lets the log grow past
//! `SLIPWAY_SQLITE_WAL_LIMIT`, which the api reports (log, `/readyz`
//! warning, `slipway_sqlite_checkpoints_total{outcome="blocked"}`) for as
//! long as the reader stays; once it ends, the log is checkpointed and
//! truncated instead of keeping its size.

use crate::common;

use common::process::{start_api, ApiProcess};
use serde_json::Value;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

async fn warnings(api: &ApiProcess) -> Vec<String> {
    let (status, text) = api.get("/readyz").await;
    assert_eq!(status, 200, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    body["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap().to_owned()).collect()
}

/// Polls `check` every 100 ms until it holds, or panics naming `what`.
async fn until<F: std::future::Future<Output = bool>>(what: &str, deadline: Duration, mut check: impl FnMut() -> F) {
    let end = tokio::time::Instant::now() + deadline;
    while !check().await {
        assert!(tokio::time::Instant::now() < end, "{what} did not happen within {deadline:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn wal_bytes(db: &Path) -> u64 {
    std::fs::metadata(db.with_file_name("slipway.db-wal")).map_or(0, |m| m.len())
}

/// Runs `sql` in a `sqlite3` shell on `db` to its end.
fn sqlite3(db: &Path, sql: &str) {
    let out = std::process::Command::new("sqlite3").arg(db).arg(sql).output().expect("sqlite3 runs (Debian's sqlite3)");
    assert!(out.status.success(), "sqlite3 {sql}: {}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test]
async fn a_reader_left_in_a_transaction_is_reported_and_the_log_is_truncated_once_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let api =
        start_api(dir.path(), None, &[("SLIPWAY_SQLITE_WAL_LIMIT", "1M"), ("SLIPWAY_SQLITE_CHECKPOINT_EVERY", "1s")])
            .await;
    let db = dir.path().join("slipway.db");
    assert_eq!(api.metric("slipway_sqlite_checkpoints_total{outcome=\"blocked\"}").await, 0.0);
    sqlite3(&db, "CREATE TABLE test_filler (b BLOB)");

    // A shell inside BEGIN, its snapshot fixed by a read: it stays until its input closes.
    let mut reader = tokio::process::Command::new("sqlite3")
        .arg(&db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut input = reader.stdin.take().unwrap();
    input.write_all(b"BEGIN;\nSELECT count(*) FROM test_filler;\n").await.unwrap();
    input.flush().await.unwrap();
    let mut out = tokio::io::BufReader::new(reader.stdout.take().unwrap());
    let mut line = String::new();
    tokio::io::AsyncBufReadExt::read_line(&mut out, &mut line).await.unwrap();
    assert_eq!(line.trim(), "0", "the reader's snapshot is fixed");

    // 8 MiB written meanwhile, a commit each, past the 1 MiB limit.
    for _ in 0..8 {
        sqlite3(&db, "INSERT INTO test_filler VALUES (zeroblob(1048576))");
    }
    let grown = wal_bytes(&db);
    assert!(grown > 8 << 20, "the log grew with the reader open: {grown} bytes");
    api.wait_log(0, &["WARN", "cannot be checkpointed"], Duration::from_secs(30)).await;
    until("a blocked checkpoint counted", Duration::from_secs(30), || async {
        api.metric("slipway_sqlite_checkpoints_total{outcome=\"blocked\"}").await >= 1.0
    })
    .await;
    let said = warnings(&api).await;
    assert!(said.iter().any(|w| w.contains("write-ahead log") && w.contains("transaction open")), "{said:?}");
    assert!(api.metric("slipway_sqlite_wal_bytes").await > f64::from(8 << 20));

    // Meanwhile the blocked checkpoints hold up no writer: 60 writes that
    // wait for no lock (`.timeout 0`), over at least three looks, all pass.
    let blocked_before = api.metric("slipway_sqlite_checkpoints_total{outcome=\"blocked\"}").await;
    let mut script = String::from(".timeout 0\n");
    for _ in 0..60 {
        script.push_str("INSERT INTO test_filler VALUES (zeroblob(16));\n.shell sleep 0.05\n");
    }
    let writer = std::process::Command::new("sqlite3")
        .arg(&db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        writer.stdin.as_ref().unwrap().write_all(script.as_bytes()).unwrap();
    }
    let out = writer.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("locked") && !stderr.contains("busy"), "a checkpoint held up a writer: {stderr}");
    let blocked_after = api.metric("slipway_sqlite_checkpoints_total{outcome=\"blocked\"}").await;
    assert!(
        blocked_after >= blocked_before + 2.0,
        "the writes did not span the looks: {blocked_before} → {blocked_after}"
    );

    // The reader ends: the next look checkpoints and truncates the log.
    input.write_all(b"COMMIT;\n.quit\n").await.unwrap();
    drop(input);
    assert!(reader.wait().await.unwrap().success());
    until("the log truncated", Duration::from_secs(30), || async { wal_bytes(&db) <= 1 << 20 }).await;
    api.wait_log(0, &["INFO", "checkpointed again"], Duration::from_secs(30)).await;
    assert!(api.metric("slipway_sqlite_checkpoints_total{outcome=\"truncated\"}").await >= 1.0);
    until("the warning gone", Duration::from_secs(30), || async {
        !warnings(&api).await.iter().any(|w| w.contains("write-ahead log"))
    })
    .await;
    sqlite3(&db, "SELECT count(*) FROM test_filler");
}
