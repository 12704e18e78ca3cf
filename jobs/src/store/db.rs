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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{oneshot, Mutex, OwnedMutexGuard};

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
/// And they commit in groups (group commit): a write transaction is a
/// `SAVEPOINT` inside one `BEGIN IMMEDIATE … COMMIT` on that connection.
/// When one ends while others wait for the turn, it releases its savepoint
/// and hands the turn on with the transaction still open; the next one
/// joins the same transaction. The last of them (none waiting, or
/// [`MAX_GROUP`] joined) commits it, one `fsync` for all of them, and only
/// then is each told its commit returned: [`Conn::commit`] never answers
/// before the transaction holding its writes is durable
/// (`synchronous = FULL`). A transaction that fails or is rolled back goes
/// back to its own savepoint and takes nothing else with it; a commit that
/// fails fails every transaction of its group, and a crash before it loses
/// them all, none of them answered.
///
/// Dereferences to the pool of the other connections (reads, and writes of
/// one statement).
#[derive(Debug, Clone)]
pub struct SqliteDb {
    pool: SqlitePool,
    writer: SqlitePool,
    turn: Arc<WriteTurn>,
}

/// At most this many write transactions share one SQLite commit
/// ([`SqliteDb`]'s group commit); the next one starts a new group.
pub const MAX_GROUP: usize = 64;

/// The savepoint each write transaction of a group runs in.
const MEMBER: &str = "slipway_write";

/// SQLite's write turn, with the group of write transactions that share
/// the open transaction on the writer connection ([`SqliteDb`]).
#[derive(Debug, Default)]
struct WriteTurn {
    /// Held by whoever writes; the group inside is what is open.
    group: Arc<Mutex<Group>>,
    /// Write transactions waiting for the turn (the one holding it hands
    /// its open transaction on to them instead of committing).
    waiting: AtomicUsize,
    /// Write transactions that asked for the turn and ended with a commit.
    committed: AtomicU64,
    /// `COMMIT`s of groups, each one `fsync` of the log.
    commits: AtomicU64,
}

/// The open transaction on SQLite's writer connection and the write
/// transactions in it that wait for its commit.
#[derive(Debug, Default)]
struct Group {
    /// The writer connection, kept from one group to the next (its page
    /// cache); `None` until first used and after an error on it.
    conn: Option<PoolConnection<Sqlite>>,
    /// `BEGIN IMMEDIATE` ran and neither `COMMIT` nor `ROLLBACK` since.
    open: bool,
    /// The transactions whose savepoints were released into the open one:
    /// each is told how its commit ended.
    members: Vec<oneshot::Sender<Result<(), Arc<sqlx::Error>>>>,
    /// Grows by one each time a group ends, so a finisher knows whether
    /// its group is still the open one.
    generation: u64,
}

impl Group {
    /// The writer connection, opened from `writer` when there is none.
    async fn connection(&mut self, writer: &SqlitePool) -> Result<&mut SqliteConnection, sqlx::Error> {
        if self.conn.is_none() {
            self.conn = Some(writer.acquire().await?);
        }
        Ok(&mut **self.conn.as_mut().expect("just opened"))
    }

    /// The open transaction's connection (a member holds the turn).
    fn open_connection(&mut self) -> &mut SqliteConnection {
        self.conn.as_mut().expect("an open group keeps its connection")
    }

    /// Commits the open transaction and tells every member how it ended.
    async fn commit(&mut self, turn: &WriteTurn) {
        if self.members.len() > 1 {
            crate::failpoint::hit("sqlite_group_commit");
        }
        let result = sqlx::raw_sql("COMMIT").execute(self.open_connection()).await.map(|_| ());
        turn.commits.fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(()) => {
                self.open = false;
                turn.committed.fetch_add(self.members.len() as u64, Ordering::Relaxed);
                self.end(Ok(())).await;
            }
            Err(e) => self.end(Err(Arc::new(e))).await,
        }
    }

    /// Ends the group with `outcome`: after a failure the transaction is
    /// rolled back (what is left of it) and the connection given back to
    /// the pool, which tests it. Every member is told.
    async fn end(&mut self, outcome: Result<(), Arc<sqlx::Error>>) {
        if outcome.is_err() {
            if let Some(conn) = self.conn.as_mut() {
                // Fails harmlessly when SQLite already rolled it back.
                let _ = sqlx::raw_sql("ROLLBACK").execute(&mut **conn).await;
            }
            self.conn = None;
            self.open = false;
        }
        self.generation += 1;
        for member in self.members.drain(..) {
            let _ = member.send(outcome.clone());
        }
    }

    /// Ends an open transaction that holds no member's writes.
    async fn close_empty(&mut self) {
        if self.open {
            self.open = false;
            self.generation += 1;
            if sqlx::raw_sql("ROLLBACK").execute(self.open_connection()).await.is_err() {
                self.conn = None;
            }
        }
    }
}

impl WriteTurn {
    /// What follows a member's end, holding the turn: with no member
    /// waiting for the commit, the transaction ends; with write
    /// transactions waiting for the turn and room in the group, the turn
    /// goes on to them with the transaction open (and a finisher queues
    /// behind them, to commit it should none of them); otherwise it
    /// commits.
    async fn pass_or_commit(self: Arc<Self>, mut group: OwnedMutexGuard<Group>) {
        if group.members.is_empty() {
            group.close_empty().await;
        } else if self.waiting.load(Ordering::SeqCst) > 0 && group.members.len() < MAX_GROUP {
            let generation = group.generation;
            drop(group);
            tokio::spawn(self.finish(generation));
        } else {
            group.commit(&self).await;
        }
    }

    /// Commits group `generation` if it is still open when the turn comes.
    async fn finish(self: Arc<Self>, generation: u64) {
        let mut group = self.group.clone().lock_owned().await;
        if group.generation == generation && !group.members.is_empty() {
            group.commit(&self).await;
        }
    }

    /// The turn for work that is no write transaction (a checkpoint, a
    /// failpoint's hold): an open group is committed first.
    async fn take_clean(&self) -> OwnedMutexGuard<Group> {
        let mut group = self.group.clone().lock_owned().await;
        if !group.members.is_empty() {
            group.commit(self).await;
        }
        group.close_empty().await;
        group
    }
}

/// A write transaction on SQLite ([`Db::begin_write`]): a savepoint in its
/// group's transaction, holding the write turn until it ends. Dropped
/// without [`Conn::commit`] or [`Conn::rollback`], it rolls back to its
/// savepoint on a task of its own.
#[derive(Debug)]
pub struct GroupMember {
    turn: Arc<WriteTurn>,
    group: Option<OwnedMutexGuard<Group>>,
}

impl GroupMember {
    fn connection(&mut self) -> &mut SqliteConnection {
        self.group.as_mut().expect("a member holds the turn until it ends").open_connection()
    }

    /// Releases the savepoint into the group and waits for the group's
    /// commit (run on a task of its own, so a caller that gives up waiting
    /// cannot leave the group half ended).
    async fn commit(mut self) -> Result<(), StoreError> {
        let mut group = self.group.take().expect("a member holds the turn until it ends");
        let turn = self.turn.clone();
        let (told, outcome) = oneshot::channel();
        tokio::spawn(async move {
            let released =
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("RELEASE {MEMBER}"))).execute(group.open_connection()).await;
            group.members.push(told);
            match released {
                Ok(_) => turn.pass_or_commit(group).await,
                // The transaction is gone (SQLite rolls some errors back
                // whole): so are the writes of every member in it.
                Err(e) => group.end(Err(Arc::new(e))).await,
            }
        });
        match outcome.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StoreError::Database(copy_error(&e))),
            Err(_) => Err(StoreError::Database(sqlx::Error::WorkerCrashed)),
        }
    }

    /// Rolls back to the savepoint; the group's other transactions stay.
    async fn rollback(mut self) -> Result<(), StoreError> {
        let group = self.group.take().expect("a member holds the turn until it ends");
        tokio::spawn(undo(self.turn.clone(), group)).await.map_err(|_| StoreError::Database(sqlx::Error::WorkerCrashed))
    }
}

impl Drop for GroupMember {
    fn drop(&mut self) {
        if let Some(group) = self.group.take() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(undo(self.turn.clone(), group));
            }
        }
    }
}

/// A member's savepoint rolled back and released, holding the turn, then
/// [`WriteTurn::pass_or_commit`]; when that fails the group's transaction
/// is gone, and with it every member's writes.
async fn undo(turn: Arc<WriteTurn>, mut group: OwnedMutexGuard<Group>) {
    let sql = format!("ROLLBACK TO {MEMBER}; RELEASE {MEMBER}");
    match sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(group.open_connection()).await {
        Ok(_) => turn.pass_or_commit(group).await,
        Err(e) => group.end(Err(Arc::new(e))).await,
    }
}

/// A group's failure as each of its members returns it: the same kind of
/// error for [`StoreError::is_unavailable`] and
/// [`StoreError::is_storage_full`], its words kept.
fn copy_error(e: &sqlx::Error) -> sqlx::Error {
    use std::io;
    match e {
        sqlx::Error::Io(io) => sqlx::Error::Io(match io.raw_os_error() {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::new(io.kind(), io.to_string()),
        }),
        sqlx::Error::Database(d) => match super::sqlite_code(d.as_ref()).map(|c| c & 0xff) {
            Some(13) => sqlx::Error::Io(io::Error::from_raw_os_error(libc::ENOSPC)),
            Some(c) if super::SQLITE_UNAVAILABLE.contains(&c) => {
                sqlx::Error::Io(io::Error::other(d.message().to_owned()))
            }
            _ => sqlx::Error::Protocol(e.to_string()),
        },
        sqlx::Error::PoolTimedOut => sqlx::Error::PoolTimedOut,
        sqlx::Error::PoolClosed => sqlx::Error::PoolClosed,
        sqlx::Error::WorkerCrashed => sqlx::Error::WorkerCrashed,
        other => sqlx::Error::Protocol(other.to_string()),
    }
}

impl SqliteDb {
    /// Wraps `pool`, with a turn and a connection of its own for its write
    /// transactions (opened on first use, with `pool`'s options).
    pub fn new(pool: SqlitePool) -> Self {
        let writer = super::sqlite_pool_options(1).connect_lazy_with((*pool.connect_options()).clone());
        Self { pool, writer, turn: Arc::default() }
    }

    /// Write transactions that ended with a commit, and the `COMMIT`s that
    /// made them durable (fewer when they shared one; [`SqliteDb`]).
    pub fn group_commits(&self) -> (u64, u64) {
        (self.turn.committed.load(Ordering::Relaxed), self.turn.commits.load(Ordering::Relaxed))
    }

    /// Write transactions of this process waiting for the write turn now.
    pub fn waiting_writers(&self) -> usize {
        self.turn.waiting.load(Ordering::SeqCst)
    }

    /// [`Db::begin_write`] on SQLite: waits for the write turn (as long as
    /// SQLite would have waited for its lock), joins the open group or
    /// begins one (`BEGIN IMMEDIATE`), and opens its savepoint.
    async fn begin_member(&self) -> Result<Conn, StoreError> {
        self.turn.waiting.fetch_add(1, Ordering::SeqCst);
        let got = tokio::time::timeout(super::SQLITE_BUSY_TIMEOUT, self.turn.group.clone().lock_owned()).await;
        self.turn.waiting.fetch_sub(1, Ordering::SeqCst);
        let mut group = got.map_err(|_| StoreError::Database(sqlx::Error::PoolTimedOut))?;
        if !group.open {
            let begun = match group.connection(&self.writer).await {
                Ok(conn) => sqlx::raw_sql("BEGIN IMMEDIATE").execute(conn).await,
                Err(e) => Err(e),
            };
            if let Err(e) = begun {
                // Given back to the pool, which tests it.
                group.conn = None;
                return Err(e.into());
            }
            group.open = true;
        }
        let savepoint = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("SAVEPOINT {MEMBER}")));
        if let Err(e) = savepoint.execute(group.open_connection()).await {
            let e = Arc::new(e);
            group.end(Err(e.clone())).await;
            return Err(StoreError::Database(copy_error(&e)));
        }
        Ok(Conn::SqliteWrite(GroupMember { turn: self.turn.clone(), group: Some(group) }))
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
    /// SQLite's write turn, no group open.
    _turn: Option<OwnedMutexGuard<Group>>,
    _conns: Vec<Conn>,
}

/// A connection from the pool, or an open transaction.
#[derive(Debug)]
pub enum Conn {
    /// A pooled SQLite connection.
    Sqlite(PoolConnection<Sqlite>),
    /// An SQLite read transaction ([`Db::begin_read`]).
    SqliteTx(Transaction<'static, Sqlite>),
    /// An SQLite write transaction ([`Db::begin_write`]): it holds its
    /// process's write turn until it ends, and commits with its group
    /// ([`SqliteDb`]).
    SqliteWrite(GroupMember),
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
    /// (`BEGIN IMMEDIATE`), so two writers never deadlock upgrading read
    /// locks, and it commits with the write transactions that wait for it
    /// (group commit, [`SqliteDb`]).
    pub async fn begin_write(&self) -> Result<Conn, StoreError> {
        Ok(match self {
            Self::Sqlite(p) => p.begin_member().await?,
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
            Self::Sqlite(p) => Conn::SqliteTx(p.pool.begin().await?),
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
                let Ok(mut group) = tokio::time::timeout(wait, p.turn.take_clean()).await else {
                    return Ok(Some(Checkpoint { busy: true, log_frames: -1, checkpointed: -1 }));
                };
                let conn = group.connection(&p.writer).await?;
                sqlx::raw_sql("PRAGMA busy_timeout = 0").execute(&mut *conn).await?;
                let answer =
                    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").fetch_one(&mut *conn).await.map(Row::Sqlite);
                let restore = format!("PRAGMA busy_timeout = {}", super::SQLITE_BUSY_TIMEOUT.as_millis());
                if sqlx::raw_sql(sqlx::AssertSqlSafe(restore)).execute(&mut *conn).await.is_err() {
                    // Not kept without its busy timeout.
                    if let Some(c) = group.conn.take() {
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
            Self::Sqlite(p) => Some(p.turn.take_clean().await),
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
                // The writer connection goes back to its pool first.
                p.turn.take_clean().await.conn = None;
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
            Self::Sqlite(_) | Self::SqliteTx(_) | Self::SqliteWrite(_) => Engine::Sqlite,
            Self::Postgres(_) | Self::PostgresTx(..) => Engine::Postgres,
        }
    }

    fn target(&mut self) -> Target<'_> {
        match self {
            Self::Sqlite(c) => Target::Sqlite(c),
            Self::SqliteTx(t) => Target::Sqlite(t),
            Self::SqliteWrite(m) => Target::Sqlite(m.connection()),
            Self::Postgres(c) => Target::Postgres(c),
            Self::PostgresTx(t, _) => Target::Postgres(t),
        }
    }

    /// Commits a transaction (a pooled connection has nothing to commit),
    /// then sends its notifications ([`Conn::notify`]).
    pub async fn commit(self) -> Result<(), StoreError> {
        match self {
            Self::SqliteTx(t) => t.commit().await?,
            Self::SqliteWrite(m) => m.commit().await?,
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
            Self::SqliteTx(t) => t.rollback().await?,
            Self::SqliteWrite(m) => m.rollback().await?,
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
            Self::Sqlite(_) | Self::SqliteTx(_) | Self::SqliteWrite(_) => {}
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
