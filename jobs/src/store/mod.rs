//! Storage: every query Slipway makes lives here (STYLE.md "Database").
//!
//! `DATABASE_URL` chooses the engine: `sqlite://<file>` (the embedded
//! default; the file is created when missing) or `postgres://…` (the fleet).
//! Queries are written once through [`db::Q`]; functions take a `&mut Conn`
//! so the caller decides transaction bounds. Tables: `migrations/sqlite/` and
//! `migrations/postgres/`, recorded in `_slipway_migrations`; apalis keeps its
//! job tables beside them, which is what lets a submit insert its build row
//! and push its job in one transaction.

pub mod builds;
pub mod completions;
pub mod db;
pub mod deployments;
pub mod events;
pub mod fair;
pub mod fleet;
pub mod heartbeats;
pub mod idempotency;
pub mod instance_readiness;
pub mod listen;
pub mod nix_results;
pub mod nodelay;
pub mod queue;
pub mod rollouts;
pub mod sboms;
pub mod submit;
pub mod tickets;
pub mod webhooks;

#[cfg(debug_assertions)]
pub use db::Held;
pub use db::{ping, placeholders, Checkpoint, CheckpointMode, Conn, Db, Engine, Row, SqliteDb, Q};

use crate::config::Config;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::Connection as _;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

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
    /// `DATABASE_URL` reaches PostgreSQL through a pooler in transaction
    /// (or statement) mode, such as PgBouncer with `pool_mode =
    /// transaction`: one client's statements run on different server
    /// sessions, which prepared statements, `LISTEN` and session locks
    /// cannot survive ([`refuse_transaction_pooler`]).
    #[error(
        "DATABASE_URL reaches PostgreSQL through a connection pooler in transaction mode (such as PgBouncer with \
         pool_mode = transaction), which Slipway cannot use: point DATABASE_URL at PostgreSQL directly or at a pool in \
         session mode (docs/OPERATOR-GUIDE.md, \"Connection poolers\")"
    )]
    TransactionPooler,
    /// The database was migrated by a newer release: it records a migration
    /// this binary does not have (`table` is `_slipway_migrations`, or the
    /// job queue's `_sqlx_migrations`).
    #[error(
        "the database was migrated by a newer Slipway release: its migration {version} ({description}, in {table}) is \
         unknown to this binary (version {binary}, whose last migration is {latest}); run that newer release or a \
         later one instead of this binary (a database is never migrated back)"
    )]
    NewerDatabase {
        /// The version of the first unknown migration.
        version: i64,
        /// Its description as recorded, or `unrecorded`.
        description: String,
        /// The table that records it.
        table: &'static str,
        /// This binary's package version.
        binary: &'static str,
        /// The last migration of that table this binary knows.
        latest: i64,
    },
    /// `DATABASE_URL` is neither `sqlite://…` nor `postgres://…` (only its
    /// scheme is kept: the URL may hold a password).
    #[error("DATABASE_URL with scheme {0}: expected sqlite://<file> or postgres://…")]
    UnsupportedUrl(String),
}

impl StoreError {
    /// Whether the database is away for now rather than refusing this
    /// request (answered `503`, tried again later): no connection came free,
    /// the pool is closed, the connection broke, SQLite could not write
    /// ([`SQLITE_UNAVAILABLE`]: locked past the busy timeout, read-only, a
    /// disk I/O error, a full disk), or PostgreSQL refuses or
    /// drops connections (SQLSTATE classes 08 connection exception, 53
    /// insufficient resources, 57 operator intervention such as a shutdown,
    /// and 55000 for a database that does not accept connections now).
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Database(e) => match e {
                sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::Io(_)
                | sqlx::Error::WorkerCrashed => true,
                sqlx::Error::Database(d) if sqlite_code(d.as_ref()).is_some() => {
                    sqlite_code(d.as_ref()).is_some_and(|c| SQLITE_UNAVAILABLE.contains(&(c & 0xff)))
                }
                sqlx::Error::Database(d) => d
                    .code()
                    .is_some_and(|c| c.starts_with("08") || c.starts_with("53") || c.starts_with("57") || c == "55000"),
                _ => false,
            },
            _ => false,
        }
    }

    /// Whether the database could not write for want of space: SQLite's
    /// `SQLITE_FULL` (13, "database or disk is full"), PostgreSQL's
    /// `disk_full` (SQLSTATE 53100), or a write of the driver's own that
    /// failed with a storage fault ([`crate::storage::is_storage_fault`]).
    /// A fault of the database's host, answered `503 storage_unavailable`,
    /// never the request's.
    pub fn is_storage_full(&self) -> bool {
        match self {
            Self::Database(sqlx::Error::Io(e)) => crate::storage::is_storage_fault(e),
            Self::Database(sqlx::Error::Database(d)) => match sqlite_code(d.as_ref()) {
                Some(code) => code & 0xff == 13,
                None => d.code().is_some_and(|c| c == "53100"),
            },
            _ => false,
        }
    }

    /// Whether restarting cannot help: the database or its URL must change
    /// first ([`Self::TransactionPooler`], [`Self::NewerDatabase`],
    /// [`Self::UnsupportedUrl`]). The
    /// binaries then exit with [`crate::EX_CONFIG`] (78), which the shipped
    /// systemd units do not restart (`RestartPreventExitStatus=78`).
    pub fn is_configuration(&self) -> bool {
        matches!(self, Self::TransactionPooler | Self::NewerDatabase { .. } | Self::UnsupportedUrl(_))
    }

    /// Whether the pool was closed (the process is stopping).
    pub fn is_closed(&self) -> bool {
        matches!(self, Self::Database(sqlx::Error::PoolClosed))
    }

    /// Why the database did not answer, in words that never carry its URL.
    pub fn why_unavailable(&self) -> String {
        match self {
            Self::Database(sqlx::Error::PoolTimedOut) => "no connection came free in time".to_owned(),
            Self::Database(sqlx::Error::PoolClosed) => "its connection pool is closed".to_owned(),
            Self::Database(sqlx::Error::Io(io)) => format!("connection: {}", io.kind()),
            Self::Database(sqlx::Error::Database(d)) if d.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() => {
                format!("SQLite: {}", d.message())
            }
            _ => "it answered with an error".to_owned(),
        }
    }
}

/// The result code of an SQLite error (extended: the primary code is its
/// low byte); `None` for another engine's.
fn sqlite_code(d: &dyn sqlx::error::DatabaseError) -> Option<i32> {
    d.try_downcast_ref::<sqlx::sqlite::SqliteError>()?;
    d.code()?.parse().ok()
}

/// SQLite's primary result codes that mean "the database cannot take this
/// write now", not a fault of the request or of Slipway: `SQLITE_BUSY` (5),
/// `SQLITE_LOCKED` (6), `SQLITE_READONLY` (8), `SQLITE_IOERR` (10),
/// `SQLITE_FULL` (13) and `SQLITE_CANTOPEN` (14)
/// (<https://www.sqlite.org/rescode.html>). An extended code is matched by
/// its low byte.
pub const SQLITE_UNAVAILABLE: [i32; 6] = [5, 6, 8, 10, 13, 14];

/// Unix milliseconds now, on the fleet's clock ([`crate::clock::now_ms`]:
/// the database's, advanced on the monotonic clock).
pub fn now_ms() -> i64 {
    crate::clock::now_ms()
}

/// The database's clock, Unix milliseconds: PostgreSQL's
/// `clock_timestamp()` (the server's clock at this statement, not the
/// transaction's start); SQLite's `julianday('now')` (this host's clock,
/// which every process on the file shares).
pub async fn db_now_ms(conn: &mut Conn) -> Result<i64, StoreError> {
    let sql = match conn.engine() {
        Engine::Sqlite => "SELECT CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) AS ms",
        Engine::Postgres => "SELECT FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint AS ms",
    };
    Q::new(sql).fetch_one(conn).await?.int("ms")
}

/// How long a caller waits for a pooled connection (connecting included)
/// before it gets [`sqlx::Error::PoolTimedOut`]: the readiness budget. While
/// the database is away (stopped, restarting, unreachable) every request that
/// needs it answers `503` within this time, as `GET /readyz` does, instead of
/// waiting for sqlx to retry a refused connection.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long an SQLite write waits for the file's write lock (SQLite's busy
/// timeout), and a write transaction for its process's turn
/// ([`SqliteDb`]), before it is refused as unavailable.
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Each pooled SQLite connection's page cache, in SQLite's `cache_size`
/// form (negative: KiB): 16 MiB, filled only as pages are read, where
/// SQLite's default is 2 MiB.
pub const SQLITE_CACHE_SIZE: &str = "-16384";

/// How long a pooled PostgreSQL connection may have been idle and still be
/// handed out without a ping first. sqlx pings before every use by default,
/// one more round trip to the server per statement or transaction (four in
/// a submit); a connection used within the last second is taken as alive.
/// Should the server have dropped it within that second (a restart), the
/// request that gets it fails as the database being unavailable, and the
/// connection is closed when it comes back.
pub const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// Opens the database of `config` and runs pending migrations once.
pub async fn open(config: &Config) -> Result<Db, StoreError> {
    if let Some(path) = config.database.sqlite_path() {
        return open_sqlite_bounded(&path, config.database.sqlite_wal_limit).await;
    }
    let url = &config.database.url;
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return open_postgres(url).await;
    }
    Err(StoreError::UnsupportedUrl(match url.split_once("://") {
        // Only a scheme-like prefix is shown; anything else may be a secret.
        Some((scheme, _))
            if !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c)) =>
        {
            format!("{scheme}://")
        }
        _ => "(none)".to_owned(),
    }))
}

/// How Slipway pools SQLite connections, `max` of them: what
/// [`open_sqlite`] uses for its reads and [`SqliteDb`] for its one writer.
pub(crate) fn sqlite_pool_options(max: u32) -> SqlitePoolOptions {
    SqlitePoolOptions::new()
        .max_connections(max)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        // A file connection does not drop away as a server's can: no ping
        // before each use (sqlx's default), a round trip to the
        // connection's thread.
        .test_before_acquire(false)
        // A connection whose COMMIT or ROLLBACK failed (a disk I/O error, a
        // full disk) comes back still counted as inside a transaction, and
        // every `BEGIN` on it would fail from then on: it is closed instead
        // of pooled. One counted inside may only have its rollback pending
        // (a transaction dropped unfinished): the ping waits for it first.
        // One counted outside has nothing pending that could change that.
        .after_release(|conn, _meta| {
            Box::pin(async move {
                use sqlx::Connection as _;
                if conn.is_in_transaction() {
                    conn.ping().await?;
                }
                Ok(!conn.is_in_transaction())
            })
        })
}

/// Makes the SQLite file and its WAL and shared-memory files readable by
/// their owner only (`0600`), whatever mode an older release or another
/// umask gave them (SEC-3: no build user reads another tenant's rows).
fn private_files(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        match std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// The default of `SLIPWAY_SQLITE_WAL_LIMIT`: 64 MiB.
pub const SQLITE_WAL_LIMIT: u64 = 64 << 20;

/// Opens (and migrates) the SQLite database at `path`, creating the file and
/// its folder when missing; the file is its owner's alone (`private_files`).
/// Its write-ahead log is cut back to [`SQLITE_WAL_LIMIT`] after each
/// checkpoint ([`open_sqlite_bounded`]).
pub async fn open_sqlite(path: &Path) -> Result<Db, StoreError> {
    open_sqlite_bounded(path, SQLITE_WAL_LIMIT).await
}

/// [`open_sqlite`], with every connection's `journal_size_limit` at
/// `wal_limit` bytes: after a checkpoint that resets the write-ahead log,
/// SQLite truncates the file to at most that size instead of keeping
/// whatever size a long reader once let it grow to.
pub async fn open_sqlite_bounded(path: &Path, wal_limit: u64) -> Result<Db, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Database(sqlx::Error::Io(e)))?;
    }
    let options = SqliteConnectOptions::from_str("sqlite://")?
        .filename(path)
        .create_if_missing(true)
        // Durable commits: an accepted submit survives a power cut.
        .synchronous(SqliteSynchronous::Full)
        .foreign_keys(true)
        .pragma("cache_size", SQLITE_CACHE_SIZE)
        .pragma("journal_size_limit", wal_limit.to_string())
        .busy_timeout(SQLITE_BUSY_TIMEOUT);
    // Processes opening the file at once (an api and a worker started
    // together) take turns: switching a new file to WAL needs an exclusive
    // lock that SQLite does not wait for (it answers "database is locked" at
    // once), so it is done here, once, under this lock. WAL stays with the
    // file; pooled connections leave the journal mode alone.
    let _lock = lock_file(&path.with_extension("migrate.lock")).await?;
    sqlx::SqliteConnection::connect_with(&options.clone().journal_mode(SqliteJournalMode::Wal)).await?.close().await?;
    private_files(path).map_err(|e| StoreError::Database(sqlx::Error::Io(e)))?;
    let pool = sqlite_pool_options(8).connect_with(options).await?;
    // apalis's own tables. We do not call `SqliteStorage::setup`, which would
    // also set `synchronous = OFF` on one pooled connection.
    let apalis = apalis_sqlite::SqliteStorage::<()>::migrations();
    run_migrations(&apalis, APALIS_MIGRATIONS, &pool).await?;
    let mut ours = sqlx::migrate!("../migrations/sqlite");
    ours.dangerous_set_table_name(OUR_MIGRATIONS);
    run_migrations(&ours, OUR_MIGRATIONS, &pool).await?;
    Ok(Db::Sqlite(db::SqliteDb::new(pool)))
}

/// Opens (and migrates) a PostgreSQL database. A pooler in transaction mode
/// in front of it is refused first ([`refuse_transaction_pooler`]).
/// Migrations run under a transaction-scoped advisory lock
/// ([`migrate_postgres`]), so api replicas and workers starting together
/// wait for one another instead of racing, and a process that dies (or a
/// pooler that drops it) never leaves the lock behind.
pub async fn open_postgres(url: &str) -> Result<Db, StoreError> {
    let mut options = PgConnectOptions::from_str(url)?;
    if options.get_application_name().is_none() {
        options = options.application_name(&application_name());
    }
    // One plain connection first: a server that is down or a database that
    // does not exist is reported at once and by name, not as a pool timeout.
    sqlx::PgConnection::connect_with(&options).await?.close().await?;
    refuse_transaction_pooler(&options).await?;
    // Over TCP (not a Unix socket), each new connection gets TCP_NODELAY.
    let tcp_port = options.get_socket().is_none().then(|| options.get_port());
    let pool = PgPoolOptions::new()
        .max_connections(POSTGRES_POOL_SIZE)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                use sqlx::Connection as _;
                if meta.idle_for >= PING_AFTER_IDLE {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
        .after_connect(move |_conn, _meta| {
            Box::pin(async move {
                if let Some(port) = tcp_port {
                    nodelay::set_on_connections_to(port);
                }
                Ok(())
            })
        })
        .connect_with(options)
        .await?;
    migrate_postgres(&pool).await?;
    Ok(Db::Postgres(pool))
}

/// The table that records Slipway's own migrations.
const OUR_MIGRATIONS: &str = "_slipway_migrations";

/// The table that records the job queue's (apalis's) migrations.
const APALIS_MIGRATIONS: &str = "_sqlx_migrations";

/// How many connections each process pools to PostgreSQL at most (besides
/// a connection per `LISTEN` and, at start, one for the migration lock and
/// two for the pooler check; docs/OPERATOR-GUIDE.md sizes a fleet with it).
pub const POSTGRES_POOL_SIZE: u32 = 16;

/// How often a process waiting for another's migration lock tries it again.
pub const MIGRATION_LOCK_POLL: Duration = Duration::from_millis(250);

/// How often the wait for the migration lock is logged again.
const MIGRATION_WAIT_LOG_EVERY: Duration = Duration::from_secs(10);

/// Runs the job queue's migrations, then Slipway's, while holding the
/// migration lock: `pg_try_advisory_xact_lock` in a transaction of one
/// pooled connection, tried every [`MIGRATION_LOCK_POLL`], logged (with the
/// holder's pid, `application_name` and state, from `pg_locks`) when it has
/// to wait and every `MIGRATION_WAIT_LOG_EVERY` after. The lock is the
/// one sqlx's own migrator takes as a session lock (its key from the
/// database's name), so a process of an older release and this one still
/// exclude each other; sqlx's locking is turned off. Being
/// transaction-scoped, the lock ends with the transaction: a process that
/// dies, or a connection a pooler hands to someone else, cannot keep it.
pub async fn migrate_postgres(pool: &sqlx::PgPool) -> Result<(), StoreError> {
    let mut holder = pool.begin().await?;
    let database: String = sqlx::query_scalar("SELECT current_database()").fetch_one(&mut *holder).await?;
    let key = migration_lock_key(&database);
    let started = std::time::Instant::now();
    let mut logged: Option<std::time::Instant> = None;
    loop {
        let taken: bool =
            sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)").bind(key).fetch_one(&mut *holder).await?;
        if taken {
            break;
        }
        if logged.is_none_or(|at| at.elapsed() >= MIGRATION_WAIT_LOG_EVERY) {
            let holders: Vec<(i32, String, String)> = sqlx::query_as(
                "SELECT a.pid, coalesce(a.application_name, ''), coalesce(a.state, '') \
                 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
                 AND ((l.classid::bigint << 32) | l.objid::bigint) = $1",
            )
            .bind(key)
            .fetch_all(&mut *holder)
            .await?;
            let held_by = holders
                .iter()
                .map(|(pid, name, state)| format!("pid {pid} ({name:?}, {state})"))
                .collect::<Vec<_>>()
                .join(", ");
            tracing::warn!(
                waited_s = started.elapsed().as_secs(),
                held_by = %held_by,
                "waiting for another process's database migrations (the migration lock is held); an idle holder \
                 that never lets go can be ended with pg_terminate_backend(pid)"
            );
            logged = Some(std::time::Instant::now());
        }
        tokio::time::sleep(MIGRATION_LOCK_POLL).await;
    }
    if logged.is_some() {
        tracing::info!(waited_ms = started.elapsed().as_millis() as u64, "took the database migration lock");
    }
    let mut apalis = apalis_postgres::PostgresStorage::<()>::migrations();
    apalis.set_locking(false);
    run_pg_migrations(&apalis, APALIS_MIGRATIONS, pool).await?;
    let mut ours = sqlx::migrate!("../migrations/postgres");
    ours.dangerous_set_table_name(OUR_MIGRATIONS);
    ours.set_locking(false);
    run_pg_migrations(&ours, OUR_MIGRATIONS, pool).await?;
    holder.commit().await?;
    Ok(())
}

/// How long the pooler check waits for a statement a direct connection
/// answers at once ([`refuse_transaction_pooler`]).
const POOLER_CHECK_WAIT: Duration = Duration::from_secs(3);

/// Refuses a pooler in transaction or statement mode in front of PostgreSQL
/// ([`StoreError::TransactionPooler`]). Over a direct connection, or a pool
/// in session mode, one client connection is one server session for its
/// whole life; in transaction mode a client gets a server session per
/// transaction. So: a first connection reads its `pg_backend_pid()`, a
/// second opens a transaction (in transaction mode it takes a server
/// session, by PgBouncer's default the one just released), and the first
/// reads its pid again. A different pid, or no answer within
/// `POOLER_CHECK_WAIT` (a pool of one session, held by the second), is a
/// pooler; so is a `BEGIN` refused (statement mode). Only the simple query
/// protocol is used, which every pool mode passes.
pub async fn refuse_transaction_pooler(options: &PgConnectOptions) -> Result<(), StoreError> {
    async fn pid(conn: &mut sqlx::PgConnection) -> Result<i32, sqlx::Error> {
        use sqlx::Row as _;
        sqlx::raw_sql("SELECT pg_backend_pid()").fetch_one(conn).await?.try_get(0)
    }
    let mut probe = sqlx::PgConnection::connect_with(options).await?;
    let mut holder = sqlx::PgConnection::connect_with(options).await?;
    let first = pid(&mut probe).await?;
    if sqlx::raw_sql("BEGIN").execute(&mut holder).await.is_err() {
        return Err(StoreError::TransactionPooler);
    }
    pid(&mut holder).await?;
    let again = tokio::time::timeout(POOLER_CHECK_WAIT, pid(&mut probe)).await;
    let pooled = match again {
        Err(_) => true,
        Ok(again) => again? != first,
    };
    if pooled {
        return Err(StoreError::TransactionPooler);
    }
    sqlx::raw_sql("ROLLBACK").execute(&mut holder).await?;
    holder.close().await?;
    probe.close().await?;
    Ok(())
}

/// The key of the migration lock on `database`: sqlx's (its
/// `generate_lock_id`), so that this lock and the session lock of a
/// migrator of sqlx (an older release of Slipway) exclude each other.
pub fn migration_lock_key(database: &str) -> i64 {
    const CRC_IEEE: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);
    0x3d32ad9e * (CRC_IEEE.checksum(database.as_bytes()) as i64)
}

/// Runs `migrator`, whose migrations `table` records, on the SQLite
/// `pool`; a migration the database records and this binary lacks is
/// [`StoreError::NewerDatabase`] ([`newer_database`]).
async fn run_migrations(
    migrator: &sqlx::migrate::Migrator,
    table: &'static str,
    pool: &sqlx::SqlitePool,
) -> Result<(), StoreError> {
    match migrator.run(pool).await {
        Err(sqlx::migrate::MigrateError::VersionMissing(version)) => {
            let recorded = sqlx::query_scalar(sqlx::AssertSqlSafe(recorded_migration_sql(table, version)))
                .fetch_optional(pool)
                .await;
            Err(newer_database(migrator, table, version, recorded.ok().flatten()))
        }
        other => Ok(other?),
    }
}

/// [`run_migrations`] on a PostgreSQL `pool`.
async fn run_pg_migrations(
    migrator: &sqlx::migrate::Migrator,
    table: &'static str,
    pool: &sqlx::PgPool,
) -> Result<(), StoreError> {
    match migrator.run(pool).await {
        Err(sqlx::migrate::MigrateError::VersionMissing(version)) => {
            let recorded = sqlx::query_scalar(sqlx::AssertSqlSafe(recorded_migration_sql(table, version)))
                .fetch_optional(pool)
                .await;
            Err(newer_database(migrator, table, version, recorded.ok().flatten()))
        }
        other => Ok(other?),
    }
}

/// The description `table` records for migration `version` (both engines;
/// `version` is a number, `table` one of ours).
fn recorded_migration_sql(table: &str, version: i64) -> String {
    format!("SELECT description FROM {table} WHERE version = {version}")
}

/// The error of a database that records migration `version` of `table`,
/// which `migrator` (this binary) lacks: a newer release migrated it.
fn newer_database(
    migrator: &sqlx::migrate::Migrator,
    table: &'static str,
    version: i64,
    description: Option<String>,
) -> StoreError {
    StoreError::NewerDatabase {
        version,
        description: description.unwrap_or_else(|| "unrecorded".to_owned()),
        table,
        binary: env!("CARGO_PKG_VERSION"),
        latest: migrator.iter().map(|m| m.version).max().unwrap_or(0),
    }
}

/// What this process calls itself to PostgreSQL (`application_name`, shown
/// by `pg_stat_activity`) unless the URL names it: its program and pid, such
/// as `slipway-worker 4242`, so an operator sees which process holds what.
pub fn application_name() -> String {
    let program = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "slipway".to_owned());
    format!("{program} {}", std::process::id())
}

/// Takes an exclusive lock on `path` (created if missing) until the guard drops.
async fn lock_file(path: &Path) -> Result<std::fs::File, StoreError> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| StoreError::Database(sqlx::Error::Io(e)))?;
    tokio::task::spawn_blocking(move || {
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a file descriptor we own; released when `file` drops.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            Ok(file)
        } else {
            Err(std::io::Error::last_os_error())
        }
    })
    .await
    .map_err(|e| StoreError::Corrupt(e.to_string()))?
    .map_err(|e| StoreError::Database(sqlx::Error::Io(e)))
}

pub(crate) fn json_col<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

#[cfg(test)]
mod tests;
