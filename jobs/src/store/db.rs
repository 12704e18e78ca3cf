//! One database handle over the two engines (PRODUCT.md §1): SQLite, the
//! embedded default, and PostgreSQL, the engine of a fleet.
//!
//! Store queries are written once, with `$n` placeholders that both engines
//! accept, through [`Q`]; [`Row`] reads columns by name with the few types
//! Slipway stores (integers as `BIGINT`/`INTEGER`, text, JSON as text). The
//! engine shows through only where it must: how a write transaction takes its
//! lock ([`Db::begin_write`], [`Conn::lock_deployment`]) and how a job is
//! pushed into apalis's tables in the caller's transaction
//! (`Conn::push_job`, which [`crate::store::queue::push`] calls), and how
//! PostgreSQL wake-ups are sent after the transaction commits
//! ([`Conn::notify`]).

mod query;

pub use query::{placeholders, Row, Q};

use super::StoreError;
use apalis::prelude::Task;
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres, Sqlite, SqliteConnection, SqlitePool, Transaction};
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Which engine a [`Db`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// One SQLite file.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

/// The database pool both binaries share.
#[derive(Debug, Clone)]
pub enum Db {
    /// SQLite.
    Sqlite(SqliteDb),
    /// PostgreSQL.
    Postgres(PgPool),
}

/// An SQLite pool, and its writers' turn and connection.
///
/// SQLite has one write lock per file. Writers that meet it held wait in
/// SQLite's busy handler, which sleeps in steps of up to 100 ms and so adds
/// tens to hundreds of milliseconds to a write that was next in line. The
/// write transactions of one process ([`Db::begin_write`]) take turns here
/// instead, woken the moment the one before them ends; only writers of other
/// processes (an api beside a worker) still meet in the busy handler.
///
/// They also write through one connection of their own. SQLite empties a
/// connection's page cache whenever another connection has written since
/// its last transaction; with the writes spread over the pool, every write
/// transaction began by reading its pages again. On one connection, its
/// cache holds while only this process writes.
///
/// Dereferences to the pool of the other connections (reads, and writes of
/// one statement).
#[derive(Debug, Clone)]
pub struct SqliteDb {
    pool: SqlitePool,
    writers: Arc<Semaphore>,
    writer: SqlitePool,
}

impl SqliteDb {
    /// Wraps `pool`, with a turn and a connection of its own for its write
    /// transactions (opened on first use, with `pool`'s options).
    pub fn new(pool: SqlitePool) -> Self {
        let writer = super::sqlite_pool_options(1).connect_lazy_with((*pool.connect_options()).clone());
        Self { pool, writers: Arc::new(Semaphore::new(1)), writer }
    }
}

impl std::ops::Deref for SqliteDb {
    type Target = SqlitePool;

    fn deref(&self) -> &SqlitePool {
        &self.pool
    }
}

/// What [`Db::hold_all`] holds, given back when dropped.
#[cfg(debug_assertions)]
#[derive(Debug)]
pub struct Held {
    /// SQLite's write turn.
    _turn: Option<OwnedSemaphorePermit>,
    _conns: Vec<Conn>,
}

/// A connection from the pool, or an open transaction.
#[derive(Debug)]
pub enum Conn {
    /// A pooled SQLite connection.
    Sqlite(PoolConnection<Sqlite>),
    /// An SQLite transaction: a write transaction holds its process's
    /// write turn ([`SqliteDb`]) until it ends; a read transaction
    /// ([`Db::begin_read`]) holds none.
    SqliteTx(Transaction<'static, Sqlite>, Option<OwnedSemaphorePermit>),
    /// A pooled PostgreSQL connection.
    Postgres(PoolConnection<Postgres>),
    /// A PostgreSQL transaction, and the notifications it sends once it
    /// has committed ([`Conn::notify`]).
    PostgresTx(Transaction<'static, Postgres>, Notices),
}

/// Whether SQLite's write lock is free with every connection of this
/// process held (`held`): each connection takes it (`BEGIN IMMEDIATE`) and
/// gives it back at once. A connection still inside a transaction (which
/// its pool did not see) is rolled back, with a warning. `false` when the
/// lock stayed taken for the busy timeout: then all are given back and
/// [`Db::hold_all`] starts again. In a run of the CI, a worker stopped by a
/// failpoint after holding every connection still held the write lock, and
/// the worker meant to take its build over could write nothing for three
/// minutes; this check makes the failpoint's promise hold.
#[cfg(debug_assertions)]
async fn sqlite_lock_free(held: &mut [Conn]) -> bool {
    for conn in held.iter_mut() {
        match Q::new("BEGIN IMMEDIATE").execute(conn).await {
            Ok(_) => {}
            Err(e) if e.to_string().contains("within a transaction") => {
                tracing::warn!("a pooled SQLite connection was still inside a transaction; rolled it back");
            }
            Err(e) => {
                tracing::warn!(error = %e, "SQLite's write lock stays taken; trying again");
                return false;
            }
        }
        if let Err(e) = Q::new("ROLLBACK").execute(conn).await {
            tracing::warn!(error = %e, "could not give SQLite's write lock back; trying again");
            return false;
        }
    }
    true
}

/// How [`Db::checkpoint_wal`] checkpoints (SQLite's `wal_checkpoint` modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointMode {
    /// Copy what can be copied now, waiting for nothing.
    Passive,
    /// Copy everything and reset the log to zero bytes, or answer `busy`.
    Truncate,
}

/// What one [`Db::checkpoint_wal`] did, as SQLite's `wal_checkpoint`
/// answers: whether it could not finish (`busy`), the frames in the log
/// (`log_frames`) and those written into the database (`checkpointed`);
/// both `-1` when it did not run (this process's write turn stayed taken).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// It could not finish: a writer or a reader of an older snapshot held on.
    pub busy: bool,
    /// Frames in the log (`0` once it was truncated).
    pub log_frames: i64,
    /// Frames written into the database file.
    pub checkpointed: i64,
}

impl Checkpoint {
    /// The log was checkpointed whole and reset.
    pub fn completed(&self) -> bool {
        !self.busy && self.checkpointed == self.log_frames
    }
}

/// The PostgreSQL notifications of one transaction, sent after its commit.
///
/// A transaction that sends `NOTIFY` itself holds PostgreSQL's notification
/// lock from its commit until its WAL is flushed, so every notifying
/// transaction commits alone and none shares a WAL flush with another.
/// Sent after the commit instead, in a statement of their own (a
/// transaction that writes nothing else flushes no WAL), they hold the lock
/// for microseconds (`docs/DECISIONS.md`: "PostgreSQL notifications go
/// out after the commit"). Listeners also learn of the change only once it
/// is visible. A notification lost to a
/// crash right after the commit delays a wake-up until the next poll (idle
/// workers poll every second; followers of the deployment channel re-read
/// on their next wake-up or reconnect).
#[derive(Debug)]
pub struct Notices {
    pool: PgPool,
    pending: Vec<(&'static str, String)>,
}

impl Notices {
    /// Sends the notifications on a connection of the pool; a failure is
    /// logged, not returned (the transaction has committed).
    async fn send(self) {
        if self.pending.is_empty() {
            return;
        }
        let sent = async {
            let mut conn = self.pool.acquire().await?;
            send_notices(&mut conn, &self.pending).await
        };
        if let Err(e) = sent.await {
            tracing::warn!(error = %e, "could not send the wake-ups of a committed change; idle workers and followers see it at their next look");
        }
    }
}

/// One statement, its own transaction: `pg_notify` for each of `notices`,
/// in their order.
async fn send_notices(conn: &mut PgConnection, notices: &[(&'static str, String)]) -> Result<(), sqlx::Error> {
    let calls: Vec<String> = (0..notices.len()).map(|i| format!("pg_notify(${}, ${})", 2 * i + 1, 2 * i + 2)).collect();
    let sql = format!("SELECT {}", calls.join(", "));
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
    for (channel, payload) in notices {
        q = q.bind(*channel).bind(payload.as_str());
    }
    q.execute(conn).await?;
    Ok(())
}

/// The notification channel apalis's PostgreSQL workers listen on for new
/// jobs; the payload is `{"job_type": <queue>, "id": <job id>}`.
const JOB_INSERT_CHANNEL: &str = "apalis::job::insert";

enum Target<'a> {
    Sqlite(&'a mut SqliteConnection),
    Postgres(&'a mut PgConnection),
}

impl Engine {
    /// `sqlite` or `postgres`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

impl Db {
    /// The engine.
    pub fn engine(&self) -> Engine {
        match self {
            Self::Sqlite(_) => Engine::Sqlite,
            Self::Postgres(_) => Engine::Postgres,
        }
    }

    /// A connection for reads and single-statement writes.
    pub async fn acquire(&self) -> Result<Conn, StoreError> {
        Ok(match self {
            Self::Sqlite(p) => Conn::Sqlite(p.acquire().await?),
            Self::Postgres(p) => Conn::Postgres(p.acquire().await?),
        })
    }

    /// A connection as [`Db::acquire`] gives it, waiting up to `patience`
    /// in all for one while the pool is busy: each attempt waits the pool's
    /// [`super::ACQUIRE_TIMEOUT`], and one that times out is tried again
    /// until `patience` has passed. Any other error at once.
    pub async fn acquire_within(&self, patience: std::time::Duration) -> Result<Conn, StoreError> {
        let started = std::time::Instant::now();
        loop {
            match self.acquire().await {
                Err(StoreError::Database(sqlx::Error::PoolTimedOut)) if started.elapsed() < patience => {}
                other => return other,
            }
        }
    }

    /// Begins a write transaction. On SQLite it takes the write lock at once
    /// (`BEGIN IMMEDIATE`), so two writers never deadlock upgrading read locks.
    pub async fn begin_write(&self) -> Result<Conn, StoreError> {
        Ok(match self {
            Self::Sqlite(p) => {
                // As long as SQLite would have waited for its lock; the
                // semaphore is never closed.
                let turn = tokio::time::timeout(super::SQLITE_BUSY_TIMEOUT, p.writers.clone().acquire_owned())
                    .await
                    .map_err(|_| StoreError::Database(sqlx::Error::PoolTimedOut))?
                    .expect("the write turn stays open");
                Conn::SqliteTx(p.writer.begin_with("BEGIN IMMEDIATE").await?, Some(turn))
            }
            Self::Postgres(p) => Conn::PostgresTx(p.begin().await?, Notices { pool: p.clone(), pending: Vec::new() }),
        })
    }

    /// Begins a read transaction: every statement in it sees the database
    /// as one moment left it, whatever commits in between. On PostgreSQL
    /// `REPEATABLE READ READ ONLY` (the snapshot is taken at its first
    /// statement, and a write in it fails); on SQLite a deferred `BEGIN` on
    /// a pooled connection, whose first read fixes the snapshot (WAL mode),
    /// without the write turn. End it with [`Conn::commit`]; dropped, it is
    /// rolled back. For views that add up several reads (the dashboard's
    /// fleet) and must not show one change half made.
    pub async fn begin_read(&self) -> Result<Conn, StoreError> {
        Ok(match self {
            Self::Sqlite(p) => Conn::SqliteTx(p.pool.begin().await?, None),
            Self::Postgres(p) => Conn::PostgresTx(
                p.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").await?,
                Notices { pool: p.clone(), pending: Vec::new() },
            ),
        })
    }

    /// Checkpoints SQLite's write-ahead log into the database file; `None`
    /// on PostgreSQL.
    ///
    /// [`CheckpointMode::Passive`] copies what it can on a pooled
    /// connection without waiting for any lock and without holding up a
    /// writer: a reader that holds a transaction open on an older snapshot
    /// leaves frames it could not copy (`checkpointed < log_frames`).
    /// [`CheckpointMode::Truncate`] also resets the log to zero bytes; it
    /// runs with this process's write turn (waiting at most `wait` for it)
    /// and does not wait for other processes at all (busy timeout 0), so it
    /// never stalls a writer: when anyone is in its way it answers `busy`.
    pub async fn checkpoint_wal(
        &self,
        mode: CheckpointMode,
        wait: std::time::Duration,
    ) -> Result<Option<Checkpoint>, StoreError> {
        let Self::Sqlite(p) = self else { return Ok(None) };
        let row = match mode {
            CheckpointMode::Passive => {
                Q::new("PRAGMA wal_checkpoint(PASSIVE)").fetch_one(&mut Conn::Sqlite(p.acquire().await?)).await?
            }
            CheckpointMode::Truncate => {
                let Ok(turn) = tokio::time::timeout(wait, p.writers.clone().acquire_owned()).await else {
                    return Ok(Some(Checkpoint { busy: true, log_frames: -1, checkpointed: -1 }));
                };
                let _turn = turn.expect("the write turn stays open");
                let mut conn = Conn::Sqlite(p.writer.acquire().await?);
                Q::new("PRAGMA busy_timeout = 0").execute(&mut conn).await?;
                let answer = Q::new("PRAGMA wal_checkpoint(TRUNCATE)").fetch_one(&mut conn).await;
                let restore = format!("PRAGMA busy_timeout = {}", super::SQLITE_BUSY_TIMEOUT.as_millis());
                if Q::new(restore).execute(&mut conn).await.is_err() {
                    // Not handed back to the pool without its busy timeout.
                    if let Conn::Sqlite(c) = conn {
                        drop(c.detach());
                    }
                }
                answer?
            }
        };
        Ok(Some(Checkpoint {
            busy: row.int("busy")? != 0,
            log_frames: row.int("log")?,
            checkpointed: row.int("checkpointed")?,
        }))
    }

    /// Holds every connection of the pool that is free, until no other task
    /// of this process is inside a statement or a transaction of this pool,
    /// so this process holds no database lock. On SQLite that is the write
    /// turn ([`SqliteDb`]) and every connection, each then shown to hold no
    /// transaction and the file's write lock shown free
    /// (`sqlite_lock_free`). On PostgreSQL a LISTEN
    /// of the job queues keeps a connection for itself, idle between
    /// notifications, so it takes what
    /// comes free within a short wait and then asks the server that every
    /// other session of this process (its `application_name`) is idle.
    /// Otherwise all are given back and it starts again; a closed pool ends
    /// the wait with what is held. For failpoints that stop the process
    /// between two statements ([`crate::failpoint::hit_between_statements`]).
    #[cfg(debug_assertions)]
    pub async fn hold_all(&self) -> Held {
        let turn = match self {
            Self::Sqlite(p) => Some(p.writers.clone().acquire_owned().await.expect("the write turn stays open")),
            Self::Postgres(_) => None,
        };
        Held { _turn: turn, _conns: self.hold_all_connections().await }
    }

    /// [`Db::hold_all`]'s connections.
    #[cfg(debug_assertions)]
    async fn hold_all_connections(&self) -> Vec<Conn> {
        const SHORT: std::time::Duration = std::time::Duration::from_millis(200);
        let size = match self {
            Self::Sqlite(p) => p.options().get_max_connections(),
            Self::Postgres(p) => p.options().get_max_connections(),
        } as usize;
        loop {
            let mut held: Vec<Conn> = Vec::with_capacity(size);
            while held.len() < size {
                let wait = if matches!(self, Self::Postgres(_)) { SHORT } else { super::ACQUIRE_TIMEOUT };
                match tokio::time::timeout(wait, self.acquire()).await {
                    Ok(Ok(conn)) => held.push(conn),
                    Ok(Err(e)) if e.is_closed() => return held,
                    Ok(Err(_)) | Err(_) => break,
                }
            }
            if held.len() == size {
                if matches!(self, Self::Sqlite(_)) && !sqlite_lock_free(&mut held).await {
                    continue;
                }
                return held;
            }
            if let (Self::Postgres(p), Some(conn)) = (self, held.first_mut()) {
                let Some(name) = p.connect_options().get_application_name().map(str::to_owned) else { continue };
                let busy = Q::new(
                    "SELECT COUNT(*) AS n FROM pg_stat_activity
                     WHERE application_name = $1 AND pid <> pg_backend_pid() AND state IS DISTINCT FROM 'idle'",
                )
                .text(name)
                .fetch_one(conn)
                .await
                .and_then(|row| row.int("n"));
                if matches!(busy, Ok(0)) {
                    return held;
                }
            }
        }
    }

    /// Closes every connection (tests drop their databases after this).
    pub async fn close(&self) {
        match self {
            Self::Sqlite(p) => {
                p.writer.close().await;
                p.pool.close().await;
            }
            Self::Postgres(p) => p.close().await,
        }
    }
}

impl Conn {
    /// The engine this connection talks to.
    pub fn engine(&self) -> Engine {
        match self {
            Self::Sqlite(_) | Self::SqliteTx(..) => Engine::Sqlite,
            Self::Postgres(_) | Self::PostgresTx(..) => Engine::Postgres,
        }
    }

    fn target(&mut self) -> Target<'_> {
        match self {
            Self::Sqlite(c) => Target::Sqlite(c),
            Self::SqliteTx(t, _) => Target::Sqlite(t),
            Self::Postgres(c) => Target::Postgres(c),
            Self::PostgresTx(t, _) => Target::Postgres(t),
        }
    }

    /// Commits a transaction (a pooled connection has nothing to commit),
    /// then sends its notifications ([`Conn::notify`]).
    pub async fn commit(self) -> Result<(), StoreError> {
        match self {
            Self::SqliteTx(t, _turn) => t.commit().await?,
            Self::PostgresTx(t, notices) => {
                t.commit().await?;
                notices.send().await;
            }
            Self::Sqlite(_) | Self::Postgres(_) => {}
        }
        Ok(())
    }

    /// Rolls a transaction back.
    pub async fn rollback(self) -> Result<(), StoreError> {
        match self {
            Self::SqliteTx(t, _turn) => t.rollback().await?,
            Self::PostgresTx(t, _) => t.rollback().await?,
            Self::Sqlite(_) | Self::Postgres(_) => {}
        }
        Ok(())
    }

    /// Serialises writers of one deployment until this transaction ends
    /// (ST-2, ST-3): on PostgreSQL a row lock on the deployment, taken
    /// before anything is read; SQLite's `BEGIN IMMEDIATE` already holds the
    /// one write lock. Returns whether the deployment exists.
    pub async fn lock_deployment(&mut self, id: &str) -> Result<bool, StoreError> {
        let sql = match self.target() {
            Target::Sqlite(_) => "SELECT id FROM deployments WHERE id = $1",
            Target::Postgres(_) => "SELECT id FROM deployments WHERE id = $1 FOR UPDATE",
        };
        Ok(Q::new(sql).text(id).fetch_optional(self).await?.is_some())
    }

    /// Serialises transactions that name the same `key` until this one ends:
    /// a transaction-scoped advisory lock on PostgreSQL; SQLite's
    /// `BEGIN IMMEDIATE` already holds the one write lock.
    pub async fn lock_name(&mut self, key: &str) -> Result<(), StoreError> {
        if let Target::Postgres(_) = self.target() {
            Q::new("SELECT pg_advisory_xact_lock(hashtext($1))::text AS locked").text(key).fetch_one(self).await?;
        }
        Ok(())
    }

    /// Like [`Conn::lock_name`], but shared: transactions that take `key`
    /// shared run side by side, and one that takes it with
    /// [`Conn::lock_name`] waits until none holds it (and new shared holders
    /// wait for it). A no-op on SQLite, whose writers are serialised anyway.
    pub async fn lock_name_shared(&mut self, key: &str) -> Result<(), StoreError> {
        if let Target::Postgres(_) = self.target() {
            Q::new("SELECT pg_advisory_xact_lock_shared(hashtext($1))::text AS locked")
                .text(key)
                .fetch_one(self)
                .await?;
        }
        Ok(())
    }

    /// Sends notification `payload` on PostgreSQL `channel` once this
    /// connection's transaction has committed ([`Notices`]); on a pooled
    /// connection at once, in a statement of its own. Nothing on SQLite,
    /// which has no notifications.
    pub async fn notify(&mut self, channel: &'static str, payload: String) -> Result<(), StoreError> {
        match self {
            Self::PostgresTx(_, notices) => notices.pending.push((channel, payload)),
            Self::Postgres(c) => send_notices(c, &[(channel, payload)]).await?,
            Self::Sqlite(_) | Self::SqliteTx(..) => {}
        }
        Ok(())
    }

    /// Wakes the idle PostgreSQL workers of `queue` for job `id` once this
    /// connection's transaction has committed, as apalis's insert trigger
    /// did from inside it ([`Conn::notify`]); nothing on SQLite.
    pub async fn notify_new_job(&mut self, queue: &str, id: &str) -> Result<(), StoreError> {
        let payload = serde_json::json!({ "job_type": queue, "id": id }).to_string();
        self.notify(JOB_INSERT_CHANNEL, payload).await
    }

    /// Pushes a job into apalis's table for `queue`, inside this connection's
    /// transaction, so the job commits with the rows that caused it.
    /// On PostgreSQL a job due now wakes the idle workers of `queue` once it
    /// has committed ([`Conn::notify`]; Slipway's migrations remove apalis's
    /// insert trigger, which notified inside the transaction).
    pub(crate) async fn push_job(&mut self, queue: &str, task: Task<Vec<u8>>) -> Result<(), StoreError> {
        match self.target() {
            Target::Sqlite(c) => apalis_sqlite::queries::push_tasks(c, queue, &[task])
                .await
                .map_err(|e| StoreError::Queue(e.to_string())),
            Target::Postgres(c) => {
                let now = super::now_ms().div_euclid(1000) as u64;
                let due = task.run_at().is_none_or(|at| at <= now);
                let id = task.task_id().map(ToString::to_string);
                apalis_postgres::queries::push_tasks(c, queue, vec![task])
                    .await
                    .map_err(|e| StoreError::Queue(e.to_string()))?;
                match id {
                    Some(id) if due => self.notify_new_job(queue, &id).await,
                    _ => Ok(()),
                }
            }
        }
    }
}

/// Asks the database for nothing: whether it answers at all (readiness).
pub async fn ping(conn: &mut Conn) -> Result<(), StoreError> {
    Q::new("SELECT 1 AS one").fetch_one(conn).await.map(|_| ())
}
