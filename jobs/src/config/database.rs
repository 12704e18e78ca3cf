//! The database both binaries open, and how its engine is kept.

use std::path::PathBuf;
use std::time::Duration;

/// The database ([`super::Config::database`]).
#[derive(Debug, Clone)]
pub struct DatabaseConfig {
    /// `DATABASE_URL`: `sqlite://<file>` (created if missing) or `postgres://…`.
    pub url: String,
    /// `SLIPWAY_POSTGRES_POLL`: on PostgreSQL, how often an idle worker
    /// looks for jobs besides the notifications of new ones (default 1 s).
    /// The poll finds what no notification announces (a job handed out
    /// again after its worker died, a delayed job coming due) and bounds
    /// the wait while the worker's LISTEN connects again after an outage.
    pub postgres_poll: Duration,
    /// `SLIPWAY_SQLITE_WAL_LIMIT`: the size past which a process on SQLite
    /// checkpoints the write-ahead log and truncates it, and the size SQLite
    /// cuts the log back to after any checkpoint (`journal_size_limit`);
    /// default 64 MiB, at least 1 MiB. Ignored on PostgreSQL.
    pub sqlite_wal_limit: u64,
    /// `SLIPWAY_SQLITE_CHECKPOINT_EVERY`: how often a process on SQLite
    /// looks at the write-ahead log's size (and checkpoints it past
    /// `SLIPWAY_SQLITE_WAL_LIMIT`), default 30 s. Ignored on PostgreSQL.
    pub sqlite_checkpoint_every: Duration,
}

impl DatabaseConfig {
    /// The SQLite file of a `sqlite://` database URL, if it is one.
    pub fn sqlite_path(&self) -> Option<PathBuf> {
        let rest = self.url.strip_prefix("sqlite://").or_else(|| self.url.strip_prefix("sqlite:"))?;
        let rest = rest.split('?').next().unwrap_or(rest);
        Some(PathBuf::from(rest))
    }
}
