//! A database of its own for each test, on either engine, and a database
//! left as an older release migrated it.

use crate::store::Engine;
use std::path::{Path, PathBuf};

/// The PostgreSQL server tests create their databases on.
pub fn postgres_admin_url() -> String {
    std::env::var("SLIPWAY_TEST_POSTGRES").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A database of its own for one test.
#[derive(Debug)]
pub struct TestDatabase {
    /// The `DATABASE_URL` to give Slipway.
    pub url: String,
    /// A temporary folder for the SQLite file and for state.
    pub dir: tempfile::TempDir,
    postgres_name: Option<String>,
    /// Set by [`TestDatabase::keep`]: nothing is removed on drop.
    kept: std::sync::atomic::AtomicBool,
}

impl TestDatabase {
    /// A fresh, empty database on `engine`.
    pub async fn new(engine: Engine) -> Self {
        let dir = tempfile::tempdir().expect("temporary folder");
        match engine {
            Engine::Sqlite => Self {
                url: format!("sqlite://{}", dir.path().join("slipway.db").display()),
                dir,
                postgres_name: None,
                kept: Default::default(),
            },
            Engine::Postgres => {
                use sqlx::Connection;
                let name = format!("slipway_test_{}", ulid::Ulid::generate().to_string().to_lowercase());
                let admin = postgres_admin_url();
                let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap_or_else(|e| {
                    panic!("PostgreSQL at {admin} (SLIPWAY_TEST_POSTGRES): {e}; scripts/test starts it")
                });
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut conn)
                    .await
                    .expect("create database");
                let _ = conn.close().await;
                let base = admin.rsplit_once('/').map(|(b, _)| b.to_owned()).unwrap_or(admin);
                Self { url: format!("{base}/{name}"), dir, postgres_name: Some(name), kept: Default::default() }
            }
        }
    }

    /// Whether process `pid`, a Slipway binary using this database, holds a
    /// transaction open, as a process stopped inside one does. On SQLite:
    /// the write lock does not come free within 3 s (another process holds
    /// it only for a moment). On PostgreSQL: one of its sessions (named by
    /// [`crate::store::application_name`]) is idle in a transaction once its
    /// running statements ended.
    pub async fn holds_a_transaction(&self, pid: u32) -> bool {
        use sqlx::Connection;
        match &self.postgres_name {
            None => {
                let options = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(self.path("slipway.db"))
                    .busy_timeout(std::time::Duration::from_secs(3));
                let mut conn = sqlx::SqliteConnection::connect_with(&options).await.expect("sqlite connection");
                let locked = match sqlx::query("BEGIN IMMEDIATE").execute(&mut conn).await {
                    Ok(_) => {
                        sqlx::query("ROLLBACK").execute(&mut conn).await.expect("rollback");
                        false
                    }
                    Err(e) => {
                        let busy = e.as_database_error().and_then(|d| d.code()).is_some_and(|c| c == "5");
                        assert!(busy, "sqlite write lock: {e}");
                        true
                    }
                };
                let _ = conn.close().await;
                locked
            }
            Some(name) => {
                let mut conn = sqlx::PgConnection::connect(&self.url).await.expect("postgres connection");
                let states = format!(
                    "SELECT state FROM pg_stat_activity WHERE datname = '{name}' AND application_name LIKE '% {pid}'"
                );
                // A statement still running after 2 s waits on a lock (or on a
                // stopped reader): counted as held.
                let mut held = true;
                let start = std::time::Instant::now();
                while start.elapsed() < std::time::Duration::from_secs(2) {
                    let rows: Vec<(Option<String>,)> =
                        sqlx::query_as(sqlx::AssertSqlSafe(states.clone())).fetch_all(&mut conn).await.unwrap();
                    if rows.iter().any(|(s,)| s.as_deref() == Some("active")) {
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        continue;
                    }
                    held = rows.iter().any(|(s,)| s.as_deref().is_some_and(|s| s.starts_with("idle in transaction")));
                    break;
                }
                let _ = conn.close().await;
                held
            }
        }
    }

    /// PostgreSQL only: simulates an outage of this database. `false` makes
    /// the server refuse new connections to it and drops those it has (as a
    /// restart or a failover does) and returns how many were dropped; `true`
    /// lets connections in again.
    pub async fn accept_connections(&self, accept: bool) -> usize {
        use sqlx::Connection;
        let name = self.postgres_name.as_deref().expect("an outage needs a PostgreSQL test database");
        let mut admin = sqlx::PgConnection::connect(&postgres_admin_url()).await.expect("admin connection");
        let sql = |s: String| sqlx::query(sqlx::AssertSqlSafe(s));
        sql(format!("ALTER DATABASE {name} WITH ALLOW_CONNECTIONS {accept}")).execute(&mut admin).await.unwrap();
        let dropped = if accept {
            0
        } else {
            sql(format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"))
                .fetch_all(&mut admin)
                .await
                .unwrap()
                .len()
        };
        let _ = admin.close().await;
        dropped
    }

    /// A path inside this test's temporary folder.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// With `true`, the database and the temporary folder outlive this
    /// value (to inspect them after a failure); `false` undoes it.
    pub fn keep(&self, keep: bool) {
        self.kept.store(keep, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // A failed test keeps what it left (logs, state, its database) and
        // says where, so a failure in CI can be read afterwards.
        if std::thread::panicking() {
            eprintln!("the failed test's folder is kept: {} (database {})", self.dir.path().display(), self.url);
            print_log_tails(self.dir.path());
            *self.kept.get_mut() = true;
        }
        if *self.kept.get_mut() {
            self.dir.disable_cleanup(true);
            return;
        }
        let Some(name) = self.postgres_name.take() else { return };
        // Drop runs outside any runtime guarantee: use a thread of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async {
                use sqlx::Connection;
                if let Ok(mut conn) = sqlx::PgConnection::connect(&postgres_admin_url()).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
                        .execute(&mut conn)
                        .await;
                }
            });
        })
        .join();
    }
}

/// Prints the last lines of each `*.log` file in `dir` (the logs of the
/// processes a test started), so that a failure in CI shows what they did.
fn print_log_tails(dir: &Path) {
    const LINES: usize = 40;
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    for log in logs {
        let text = String::from_utf8_lossy(&std::fs::read(&log).unwrap_or_default()).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        eprintln!("--- the last {} lines of {} ---", LINES.min(lines.len()), log.display());
        for line in &lines[lines.len().saturating_sub(LINES)..] {
            eprintln!("{line}");
        }
    }
}

/// A database of `engine` in `test_db` with only Slipway's migrations
/// numbered below `version` applied (as an older release left it), for
/// tests of a migration: write rows in the old layout, then open it with
/// [`crate::store::open_sqlite`] or [`crate::store::open_postgres`], which
/// runs the rest.
pub async fn migrated_before(engine: Engine, test_db: &TestDatabase, version: i64) -> crate::store::Db {
    use std::borrow::Cow;
    let before = |mut m: sqlx::migrate::Migrator| {
        m.migrations = Cow::Owned(m.migrations.iter().filter(|x| x.version < version).cloned().collect());
        m.dangerous_set_table_name("_slipway_migrations");
        m
    };
    match engine {
        Engine::Sqlite => {
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(test_db.dir.path().join("slipway.db"))
                .create_if_missing(true)
                .foreign_keys(true);
            let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
            before(sqlx::migrate!("../migrations/sqlite")).run(&pool).await.unwrap();
            crate::store::Db::Sqlite(crate::store::SqliteDb::new(pool))
        }
        Engine::Postgres => {
            let pool = sqlx::PgPool::connect(&test_db.url).await.unwrap();
            before(sqlx::migrate!("../migrations/postgres")).run(&pool).await.unwrap();
            crate::store::Db::Postgres(pool)
        }
    }
}
