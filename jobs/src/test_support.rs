//! Support for tests that run against both engines (issue: every storage
//! test runs on SQLite and on PostgreSQL, each in its own database).
//!
//! [`TestDatabase::new`] makes a fresh SQLite file in a temporary folder, or
//! a fresh PostgreSQL database on the server named by
//! `SLIPWAY_TEST_POSTGRES` (default `postgres://postgres@127.0.0.1:5432/postgres`),
//! dropped again when the value is dropped. [`on_both_engines!`] turns one
//! `async fn name(engine: Engine)` into two tests, `name::sqlite` and
//! `name::postgres`.

use crate::store::Engine;
use std::path::PathBuf;

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
}

impl TestDatabase {
    /// A fresh, empty database on `engine`.
    pub async fn new(engine: Engine) -> Self {
        let dir = tempfile::tempdir().expect("temporary folder");
        match engine {
            Engine::Sqlite => {
                Self { url: format!("sqlite://{}", dir.path().join("slipway.db").display()), dir, postgres_name: None }
            }
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
                Self { url: format!("{base}/{name}"), dir, postgres_name: Some(name) }
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
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
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

/// True while process `pid` runs (a zombie waiting to be reaped does not run).
pub fn process_runs(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit(')').next().and_then(|s| s.split_whitespace().next()).unwrap_or("gone");
    state != "gone" && state != "Z"
}

/// Turns each `async fn name(engine: Engine)` into the tests `name::sqlite`
/// and `name::postgres`.
#[macro_export]
macro_rules! on_both_engines {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test]
                async fn sqlite() {
                    super::$name($crate::store::Engine::Sqlite).await
                }
                #[tokio::test]
                async fn postgres() {
                    super::$name($crate::store::Engine::Postgres).await
                }
            }
        )*
    };
}
