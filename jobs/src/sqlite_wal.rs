//! SQLite's write-ahead log kept bounded. In WAL mode every commit appends
//! to `<database>-wal`, and a checkpoint copies the log into the database
//! file; the log can only start over from its beginning once no reader
//! still needs an older snapshot. A reader holding a transaction open (a
//! long read, a backup, a `sqlite3` shell left inside `BEGIN`) therefore
//! lets the log grow for as long as it stays, and SQLite keeps the file at
//! that size afterwards.
//!
//! Each process on SQLite runs a [`WalKeeper`]: every
//! `SLIPWAY_SQLITE_CHECKPOINT_EVERY` it reads the log's size and, past
//! `SLIPWAY_SQLITE_WAL_LIMIT`, checkpoints it
//! ([`crate::store::Db::checkpoint_wal`]): first a passive checkpoint,
//! which waits for nothing and holds up no writer; when that copied the
//! whole log, a truncating one that gives up at once if anyone is in its
//! way (the log then restarts on the next commit and SQLite cuts it back
//! to `journal_size_limit`). A passive checkpoint that could not copy the
//! whole log, because a reader holds an older snapshot, is logged once
//! when it starts and once when the log is checkpointed again, counted in
//! `slipway_sqlite_checkpoints_total{outcome="blocked"}`, and given as a
//! warning by [`WalKeeper::warning`] (the api's `/readyz`);
//! `slipway_sqlite_wal_bytes` is the log's size at the last look.

use crate::metrics::Metrics;
use crate::store::Db;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a truncating checkpoint waits for this process's own write
/// turn (it waits for no other process).
pub const CHECKPOINT_WAIT: Duration = Duration::from_secs(1);

/// The write-ahead log of one SQLite database, looked after from one
/// process. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct WalKeeper {
    wal: PathBuf,
    limit: u64,
    metrics: Metrics,
    blocked: Arc<Mutex<Option<Blocked>>>,
}

/// A stretch of checkpoints that could not complete.
#[derive(Debug, Clone, Copy)]
struct Blocked {
    since: Instant,
    bytes: u64,
}

/// What one [`WalKeeper::look`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// The log is within the limit; nothing was done.
    Within,
    /// The log was checkpointed and truncated.
    Truncated,
    /// The log was checkpointed whole but someone was in the way of its
    /// truncation: it restarts on the next commit (cut back to the limit).
    Checkpointed,
    /// The log is past the limit and could not be checkpointed whole.
    Blocked,
    /// The checkpoint failed with a database error (logged).
    Failed,
}

impl Look {
    /// The label value of `slipway_sqlite_checkpoints_total{outcome}`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Within => "within",
            Self::Truncated => "truncated",
            Self::Checkpointed => "checkpointed",
            Self::Blocked => "blocked",
            Self::Failed => "failed",
        }
    }
}

impl WalKeeper {
    /// The keeper of the log of the database file `database`, truncated
    /// past `limit` bytes, counted in `metrics`.
    pub fn new(database: &std::path::Path, limit: u64, metrics: Metrics) -> Self {
        let mut wal = database.as_os_str().to_owned();
        wal.push("-wal");
        metrics.register_sqlite_wal();
        Self { wal: PathBuf::from(wal), limit, metrics, blocked: Arc::default() }
    }

    /// The log's size now, in bytes (0 when there is none).
    pub fn wal_bytes(&self) -> u64 {
        std::fs::metadata(&self.wal).map_or(0, |m| m.len())
    }

    /// Looks every `every` until the process ends; spawn it.
    pub async fn run(self, db: Db, every: Duration) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.look(&db).await;
        }
    }

    /// One look: the log's size recorded and, past the limit, a truncating
    /// checkpoint.
    pub async fn look(&self, db: &Db) -> Look {
        let bytes = self.wal_bytes();
        self.metrics.sqlite_wal_bytes(bytes);
        if bytes <= self.limit {
            self.clear(bytes, None);
            return Look::Within;
        }
        let look = match self.checkpoint(db).await {
            Ok(look) => look,
            Err(e) => {
                tracing::warn!(error = %e, "the SQLite write-ahead log could not be checkpointed");
                Look::Failed
            }
        };
        self.metrics.sqlite_checkpoint(look.as_str());
        let after = self.wal_bytes();
        self.metrics.sqlite_wal_bytes(after);
        match look {
            Look::Truncated | Look::Checkpointed => self.clear(after, Some(bytes)),
            Look::Blocked => self.block(after),
            Look::Within | Look::Failed => {}
        }
        look
    }

    /// A passive checkpoint, then, when it copied the whole log, a
    /// truncating one that waits for no other process.
    async fn checkpoint(&self, db: &Db) -> Result<Look, crate::store::StoreError> {
        use crate::store::CheckpointMode;
        match db.checkpoint_wal(CheckpointMode::Passive, CHECKPOINT_WAIT).await? {
            Some(c) if c.completed() => {}
            _ => return Ok(Look::Blocked),
        }
        Ok(match db.checkpoint_wal(CheckpointMode::Truncate, CHECKPOINT_WAIT).await? {
            Some(c) if c.completed() => Look::Truncated,
            _ => Look::Checkpointed,
        })
    }

    /// A warning for readiness while checkpoints cannot complete: the log's
    /// size, the limit, for how long, and why that happens.
    pub fn warning(&self) -> Option<String> {
        let blocked = (*self.blocked.lock().unwrap_or_else(PoisonError::into_inner))?;
        Some(format!(
            "the SQLite write-ahead log is {}, past SLIPWAY_SQLITE_WAL_LIMIT ({}), and has not been checkpointed for \
             {} s: a reader holds a transaction open on an older snapshot (a long read, a backup, a sqlite3 shell \
             inside BEGIN); the log grows until it ends",
            mebibytes(blocked.bytes),
            crate::fetch::size_text(self.limit),
            blocked.since.elapsed().as_secs()
        ))
    }

    fn block(&self, bytes: u64) {
        let mut blocked = self.blocked.lock().unwrap_or_else(PoisonError::into_inner);
        match blocked.as_mut() {
            Some(b) => b.bytes = bytes,
            None => {
                tracing::warn!(
                    wal_bytes = bytes,
                    limit = self.limit,
                    "the SQLite write-ahead log is past SLIPWAY_SQLITE_WAL_LIMIT and cannot be checkpointed: a reader \
                     holds a transaction open on an older snapshot; it grows until that reader ends"
                );
                *blocked = Some(Blocked { since: Instant::now(), bytes });
            }
        }
    }

    fn clear(&self, bytes: u64, from: Option<u64>) {
        let was = self.blocked.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(b) = was {
            tracing::info!(
                wal_bytes = bytes,
                was_bytes = from.unwrap_or(b.bytes),
                blocked_secs = b.since.elapsed().as_secs(),
                "the SQLite write-ahead log was checkpointed again"
            );
        }
    }
}

/// `bytes` in MiB with one decimal (`103.4 MiB`).
fn mebibytes(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}
