//! Storage: every query Slipway makes lives here (STYLE.md "Database").
//!
//! One SQLite file is the embedded default (`DATABASE_URL=sqlite://<file>`).
//! Queries are written with `$n` placeholders so the same text serves the
//! PostgreSQL engine of the fleet. Functions that must share a transaction
//! take a `&mut Conn`; the caller decides the bounds.
//!
//! Tables: see `migrations/sqlite/`. apalis keeps its `Jobs` and `Workers`
//! tables in the same database, which is what lets a submit insert its build
//! row and push its job in one transaction.

pub mod builds;
pub mod deployments;
pub mod sboms;

use crate::config::Config;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

/// The database pool both binaries share.
pub type Db = sqlx::SqlitePool;
/// One connection, or a transaction deref'd to one.
pub type Conn = sqlx::SqliteConnection;

/// A storage failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database refused or could not be reached.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// Migrations could not run.
    #[error("database migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A stored value is not of the shape this version writes.
    #[error("stored data is malformed: {0}")]
    Corrupt(String),
    /// The job queue refused a push.
    #[error("job queue: {0}")]
    Queue(String),
    /// ST-3: the row kept changing under us; the caller may try again.
    #[error("{0} changed concurrently; try again")]
    Conflict(&'static str),
    /// `DATABASE_URL` names an engine this build cannot open.
    #[error("DATABASE_URL {0:?}: only sqlite:// is supported by this build")]
    UnsupportedUrl(String),
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}

/// Opens the database of `config`, creating the SQLite file (and its folder)
/// when missing, and runs pending migrations once (serialised across
/// processes by a lock file next to the database).
pub async fn open(config: &Config) -> Result<Db, StoreError> {
    let path = config.sqlite_path().ok_or_else(|| StoreError::UnsupportedUrl(config.database_url.clone()))?;
    open_sqlite(&path).await
}

/// Opens (and migrates) the SQLite database at `path`.
pub async fn open_sqlite(path: &Path) -> Result<Db, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Database(sqlx::Error::Io(e)))?;
    }
    let options = SqliteConnectOptions::from_str("sqlite://")?
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // Durable commits: an accepted submit survives a power cut.
        .synchronous(SqliteSynchronous::Full)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(10));
    let pool = SqlitePoolOptions::new().max_connections(8).connect_with(options).await?;
    migrate(&pool, path).await?;
    Ok(pool)
}

/// Runs apalis's migrations and ours, under an exclusive lock file so that an
/// api and a worker starting together do not race. Ours are recorded in their
/// own table, so the two histories never confuse each other.
async fn migrate(pool: &Db, path: &Path) -> Result<(), StoreError> {
    let lock_path = path.with_extension("migrate.lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| StoreError::Database(sqlx::Error::Io(e)))?;
    let lock = tokio::task::spawn_blocking(move || {
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a file descriptor we own; released when `lock` drops.
        let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            Ok(lock)
        } else {
            Err(std::io::Error::last_os_error())
        }
    })
    .await
    .map_err(|e| StoreError::Corrupt(e.to_string()))?
    .map_err(|e| StoreError::Database(sqlx::Error::Io(e)))?;

    // apalis's own tables. We do not call `SqliteStorage::setup`, which would
    // also set `synchronous = OFF` on one pooled connection.
    apalis_sqlite::SqliteStorage::<()>::migrations().run(pool).await?;
    let mut ours = sqlx::migrate!("../migrations/sqlite");
    ours.dangerous_set_table_name("_slipway_migrations");
    ours.run(pool).await?;
    drop(lock);
    Ok(())
}

/// Begins a write transaction that takes the write lock at once, so two
/// writers never deadlock upgrading read locks.
pub async fn begin_write(db: &Db) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, StoreError> {
    Ok(db.begin_with("BEGIN IMMEDIATE").await?)
}

pub(crate) fn json_col<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}
