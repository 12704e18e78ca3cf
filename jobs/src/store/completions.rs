//! apalis's job rows marked started and ended many at a time (PostgreSQL):
//! the statement behind the worker's completer
//! (`slipway_worker::completer`), which gathers what every queue worker of
//! a process started and ended and writes it in one statement, off the
//! workers' own path between two fetches.
//!
//! Each row is written as apalis-postgres 1.0 writes it one worker at a
//! time (its `lock_by_id.sql` and `handle_result.sql`): a start makes a job
//! this worker holds `Running`; an end sets its status, attempts, result
//! and `done_at`. Both apply only while the job is still locked by the
//! worker that ran it, so a job handed out again (its worker's heartbeat
//! went stale, or a stop handed it back) is left to its new holder.

use super::{Conn, Engine, StoreError, Q};
use serde::Serialize;

/// What became of one job a worker was handed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobEvent {
    /// The job (`apalis.jobs.id`).
    pub id: String,
    /// The apalis worker that was handed it (`lock_by`).
    pub worker: String,
    /// `Running` when its handler started, else the status its handler
    /// ended with (`Done`, `Failed`, `Killed`, `Pending`: apalis's names).
    pub status: String,
    /// The attempt that ended (apalis's count, the first is 1); `None` for
    /// a start.
    pub attempt: Option<i64>,
    /// What the attempt gave, as apalis stores it (`{"Ok": …}` or
    /// `{"Err": "…"}`); `None` for a start.
    pub result: Option<serde_json::Value>,
}

impl JobEvent {
    /// Whether it is a start (`Running`), not an end.
    pub fn is_start(&self) -> bool {
        self.status == "Running"
    }
}

/// The statement of [`record`] (`$1`: the events as a JSON array).
const RECORD: &str = "WITH e AS (
        SELECT * FROM jsonb_to_recordset($1::jsonb)
            AS e(id text, worker text, status text, attempt integer, result jsonb)
    ), locked AS (
        SELECT jobs.id FROM apalis.jobs AS jobs
        JOIN e ON e.id = jobs.id AND jobs.lock_by = e.worker
        WHERE e.status <> 'Running' OR jobs.status = 'Queued'
        ORDER BY jobs.id
        FOR UPDATE OF jobs
    )
    UPDATE apalis.jobs AS jobs
    SET status = e.status,
        attempts = COALESCE(e.attempt, jobs.attempts),
        last_result = CASE WHEN e.status = 'Running' THEN jobs.last_result ELSE e.result END,
        done_at = CASE WHEN e.status = 'Running' THEN jobs.done_at ELSE now() END,
        lock_at = CASE WHEN e.status = 'Running' THEN now() ELSE jobs.lock_at END
    FROM e JOIN locked ON locked.id = e.id
    WHERE jobs.id = locked.id";

/// Records `events` in one statement on `conn` (PostgreSQL only): each
/// job's start or end, in the order apalis-postgres would have written
/// them one worker at a time. At most one event per job: a start and an
/// end of the same job are given as the end alone. Rows no longer locked
/// by the event's worker are left alone. Returns the rows written.
///
/// The rows are locked in id order, as apalis's own acknowledgement does,
/// so two of these statements never wait for each other in a cycle.
///
/// # Errors
/// [`StoreError::Queue`] on SQLite, where apalis-sqlite writes its own
/// rows; a database error otherwise.
pub async fn record(conn: &mut Conn, events: &[JobEvent]) -> Result<u64, StoreError> {
    if conn.engine() != Engine::Postgres {
        return Err(StoreError::Queue("job events are recorded in batches on PostgreSQL only".into()));
    }
    if events.is_empty() {
        return Ok(0);
    }
    let payload = serde_json::to_string(events).expect("job events serialise");
    Q::new(RECORD).text(payload).execute(conn).await
}
