//! The `nix` queue's rows (MS-6, MS-7, EV-1): `nix_results`, one row per
//! schema build of a (source, provider) or names eval of a configuration,
//! and `nix_slots`, the fleet-wide `NIX_SLOTS` lease pool. Every function
//! runs on the caller's connection or transaction.

use super::{Conn, Engine, StoreError, Q};

/// The kinds of `nix`-queue job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NixKind {
    /// All document outputs of one (source, provider) (MS-2, MS-6).
    SchemaBuild,
    /// The `names` function on one configuration (EV-1).
    NamesEval,
}

impl NixKind {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SchemaBuild => "schema_build",
            Self::NamesEval => "names_eval",
        }
    }

    fn parse(s: &str) -> Result<Self, StoreError> {
        match s {
            "schema_build" => Ok(Self::SchemaBuild),
            "names_eval" => Ok(Self::NamesEval),
            other => Err(StoreError::Corrupt(format!("nix_results.kind {other:?}"))),
        }
    }
}

/// Where a `nix`-queue job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NixStatus {
    /// Queued or running.
    Computing,
    /// Ended with a result.
    Done,
    /// Ended without one (`failure` says why).
    Failed,
}

impl NixStatus {
    fn as_str(self) -> &'static str {
        match self {
            Self::Computing => "computing",
            Self::Done => "done",
            Self::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Result<Self, StoreError> {
        match s {
            "computing" => Ok(Self::Computing),
            "done" => Ok(Self::Done),
            "failed" => Ok(Self::Failed),
            other => Err(StoreError::Corrupt(format!("nix_results.status {other:?}"))),
        }
    }
}

/// One row of `nix_results`.
#[derive(Debug, Clone)]
pub struct NixRow {
    /// `schema <provider> <source>` or `names <sha-256 of the input>`.
    pub key: String,
    /// The job kind.
    pub kind: NixKind,
    /// The source as requested (`""` for the built-in one).
    pub source: String,
    /// The provider whose outputs are built.
    pub provider: String,
    /// A names eval's configuration (JSON text, without secrets).
    pub input: Option<String>,
    /// Where it stands.
    pub status: NixStatus,
    /// The result (JSON text) when done.
    pub result: Option<String>,
    /// The failure (JSON text) when failed.
    pub failure: Option<String>,
    /// The tools' output, for operators.
    pub log: Option<String>,
    /// The worker that ran it.
    pub worker: Option<String>,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms, once a worker started it.
    pub started_at: Option<i64>,
    /// Unix ms, once it ended.
    pub finished_at: Option<i64>,
}

const COLUMNS: &str =
    "key, kind, source, provider, input, status, result, failure, log, worker, created_at, started_at, finished_at";

fn row_of(row: &super::Row) -> Result<NixRow, StoreError> {
    Ok(NixRow {
        key: row.text("key")?,
        kind: NixKind::parse(&row.text("kind")?)?,
        source: row.text("source")?,
        provider: row.text("provider")?,
        input: row.opt_text("input")?,
        status: NixStatus::parse(&row.text("status")?)?,
        result: row.opt_text("result")?,
        failure: row.opt_text("failure")?,
        log: row.opt_text("log")?,
        worker: row.opt_text("worker")?,
        created_at: row.int("created_at")?,
        started_at: row.opt_int("started_at")?,
        finished_at: row.opt_int("finished_at")?,
    })
}

/// The row of `key`, if any.
pub async fn find(conn: &mut Conn, key: &str) -> Result<Option<NixRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM nix_results WHERE key = $1");
    Q::new(sql).text(key).fetch_optional(conn).await?.as_ref().map(row_of).transpose()
}

/// What a new job is for.
#[derive(Debug, Clone)]
pub struct NewNixJob<'a> {
    /// Its key.
    pub key: &'a str,
    /// Its kind.
    pub kind: NixKind,
    /// The source as requested.
    pub source: &'a str,
    /// The provider.
    pub provider: &'a str,
    /// A names eval's configuration.
    pub input: Option<&'a str>,
}

/// Makes `job`'s row `computing` anew (created now, no result), replacing an
/// older row of the same key (a stale or expired one: the caller decides).
pub async fn start_over(conn: &mut Conn, job: &NewNixJob<'_>, now: i64) -> Result<(), StoreError> {
    Q::new("DELETE FROM nix_results WHERE key = $1").text(job.key).execute(conn).await?;
    Q::new(
        "INSERT INTO nix_results (key, kind, source, provider, input, status, created_at)
         VALUES ($1, $2, $3, $4, $5, 'computing', $6)",
    )
    .text(job.key)
    .text(job.kind.as_str())
    .text(job.source)
    .text(job.provider)
    .opt_text(job.input)
    .int(now)
    .execute(conn)
    .await?;
    Ok(())
}

/// Marks `key` started by `worker`; false when the row is not `computing`.
pub async fn mark_started(conn: &mut Conn, key: &str, worker: &str, now: i64) -> Result<bool, StoreError> {
    let n = Q::new("UPDATE nix_results SET worker = $2, started_at = $3 WHERE key = $1 AND status = 'computing'")
        .text(key)
        .text(worker)
        .int(now)
        .execute(conn)
        .await?;
    Ok(n == 1)
}

/// Withdraws job `key` if no worker has started it: its row goes and its
/// slot is freed (the queued job then finds no row and does nothing).
/// False when a worker started it meanwhile. Call in a write transaction.
pub async fn withdraw(conn: &mut Conn, key: &str) -> Result<bool, StoreError> {
    let n = Q::new("DELETE FROM nix_results WHERE key = $1 AND status = 'computing' AND started_at IS NULL")
        .text(key)
        .execute(conn)
        .await?;
    if n == 1 {
        release_slot(conn, key).await?;
    }
    Ok(n == 1)
}

/// Records how job `key` (created at `created_at`) ended: `Ok(result)` or
/// `Err(failure)` (JSON texts), with the tools' log. Writes nothing when the
/// row was replaced meanwhile (returns false).
pub async fn finish(
    conn: &mut Conn,
    key: &str,
    created_at: i64,
    outcome: Result<&str, &str>,
    log: &str,
    now: i64,
) -> Result<bool, StoreError> {
    let (status, result, failure) = match outcome {
        Ok(result) => (NixStatus::Done, Some(result), None),
        Err(failure) => (NixStatus::Failed, None, Some(failure)),
    };
    let n = Q::new(
        "UPDATE nix_results SET status = $3, result = $4, failure = $5, log = $6, finished_at = $7
         WHERE key = $1 AND created_at = $2 AND status = 'computing'",
    )
    .text(key)
    .int(created_at)
    .text(status.as_str())
    .opt_text(result)
    .opt_text(failure)
    .text(log)
    .int(now)
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// Deletes names-eval rows that ended before `before` (their waiter has
/// read them) and schema-build rows that failed before it. Returns how many.
pub async fn sweep(conn: &mut Conn, before: i64) -> Result<u64, StoreError> {
    Q::new("DELETE FROM nix_results WHERE finished_at < $1 AND (kind = 'names_eval' OR status = 'failed')")
        .int(before)
        .execute(conn)
        .await
}

/// Reserves one of the first `slots` fleet-wide nix slots for job `key`
/// until `expires_at` (MS-7): false when every slot is held by a lease that
/// has not expired. Call in a write transaction.
pub async fn reserve_slot(
    conn: &mut Conn,
    key: &str,
    slots: u32,
    now: i64,
    expires_at: i64,
) -> Result<bool, StoreError> {
    for slot in 0..i64::from(slots) {
        Q::new("INSERT INTO nix_slots (slot) VALUES ($1) ON CONFLICT (slot) DO NOTHING")
            .int(slot)
            .execute(conn)
            .await?;
    }
    let pick = match conn.engine() {
        Engine::Sqlite => {
            "SELECT slot FROM nix_slots WHERE slot < $1 AND (holder IS NULL OR expires_at < $2)
                           ORDER BY slot LIMIT 1"
        }
        Engine::Postgres => {
            "SELECT slot FROM nix_slots WHERE slot < $1 AND (holder IS NULL OR expires_at < $2)
                             ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED"
        }
    };
    let Some(row) = Q::new(pick).int(i64::from(slots)).int(now).fetch_optional(conn).await? else {
        return Ok(false);
    };
    Q::new("UPDATE nix_slots SET holder = $2, expires_at = $3 WHERE slot = $1")
        .int(row.int("slot")?)
        .text(key)
        .int(expires_at)
        .execute(conn)
        .await?;
    Ok(true)
}

/// Extends the lease job `key` holds to `expires_at`; false when it holds
/// none any more (it expired and was taken).
pub async fn extend_slot(conn: &mut Conn, key: &str, now: i64, expires_at: i64) -> Result<bool, StoreError> {
    let n = Q::new("UPDATE nix_slots SET expires_at = $3 WHERE holder = $1 AND expires_at >= $2")
        .text(key)
        .int(now)
        .int(expires_at)
        .execute(conn)
        .await?;
    Ok(n >= 1)
}

/// Frees the slot job `key` holds, if any.
pub async fn release_slot(conn: &mut Conn, key: &str) -> Result<(), StoreError> {
    Q::new("UPDATE nix_slots SET holder = NULL, expires_at = 0 WHERE holder = $1").text(key).execute(conn).await?;
    Ok(())
}

/// Counts the nix slots among the first `slots` whose lease is held at
/// `now` (ms), both given as placeholders (`"$1"`): [`slots_held`], and a
/// submit's names-eval check.
pub(super) fn slots_held_sql(slots: &str, now: &str) -> String {
    format!("SELECT COUNT(*) FROM nix_slots WHERE slot < {slots} AND holder IS NOT NULL AND expires_at >= {now}")
}

/// The nix slots held now (leases not expired) among the first `slots`.
pub async fn slots_held(conn: &mut Conn, slots: u32, now: i64) -> Result<i64, StoreError> {
    Q::new(format!("SELECT ({}) AS n", slots_held_sql("$1", "$2")))
        .int(i64::from(slots))
        .int(now)
        .fetch_one(conn)
        .await?
        .int("n")
}
