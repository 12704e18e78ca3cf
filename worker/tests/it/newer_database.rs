//! A worker started on a database a newer release migrated says which
//! migration it does not know, in one line, and exits 78 (`EX_CONFIG`), which
//! the shipped unit does not restart (the api's side, and the poolers, are
//! in api/tests/it/database_start.rs).

use crate::common;

use common::{binary, command};
use slipway_jobs::store::{Engine, Q};
use slipway_jobs::test_support::TestDatabase;

#[tokio::test]
async fn a_worker_on_a_database_a_newer_release_migrated_says_which_migration_in_one_line_and_exits_78() {
    for engine in [Engine::Sqlite, Engine::Postgres] {
        let database = TestDatabase::new(engine).await;
        let keys = [("DATABASE_URL".to_owned(), database.url.clone())].into();
        let db = slipway_jobs::store::open(&slipway_jobs::config::Config::from_keys(&keys).unwrap()).await.unwrap();
        let mut conn = db.acquire().await.unwrap();
        Q::new(
            "INSERT INTO _slipway_migrations (version, description, success, checksum, execution_time) \
             VALUES (9998, 'a later table', TRUE, $1, 0)",
        )
        .bytes(vec![0u8])
        .execute(&mut conn)
        .await
        .unwrap();
        drop(conn);
        db.close().await;
        let mut worker = tokio::process::Command::from(command(&binary("slipway-worker"), &database, 0));
        worker.arg("work").env("SLIPWAY_LOG", "warn").stdin(std::process::Stdio::null());
        let output = tokio::time::timeout(std::time::Duration::from_secs(120), worker.output())
            .await
            .expect("the worker exits within 120 s")
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(78), "{engine:?}: {stderr}");
        let last_words: Vec<&str> = stderr.lines().filter(|l| l.starts_with("slipway-worker:")).collect();
        assert_eq!(last_words.len(), 1, "{engine:?}: {stderr}");
        for words in ["newer Slipway release", "migration 9998", "a later table", "run that newer release"] {
            assert!(last_words[0].contains(words), "{engine:?}: {words:?} not in {}", last_words[0]);
        }
    }
}
