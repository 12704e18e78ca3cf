//! Workers as the database sees them: apalis's table of workers, whose
//! heartbeat (`last_seen`) tells a live worker from a dead one, and the
//! claims a worker holds.

use super::{Conn, Engine, StoreError, Q};

/// Marks apalis worker `name` alive now. apalis only beats while its worker
/// polls for jobs, which a worker whose slots are all busy does not do; this
/// keeps a busy, live worker from being taken for dead.
pub async fn keep_alive(conn: &mut Conn, name: &str) -> Result<u64, StoreError> {
    let sql = match conn.engine() {
        Engine::Sqlite => "UPDATE Workers SET last_seen = strftime('%s', 'now') WHERE id = $1",
        Engine::Postgres => "UPDATE apalis.workers SET last_seen = now() WHERE id = $1",
    };
    Q::new(sql).text(name).execute(conn).await
}

/// How long ago worker `name` last beat, in milliseconds; `None` when it
/// never registered (apalis's worker table, fed by [`keep_alive`]).
pub async fn heartbeat_age_ms(conn: &mut Conn, name: &str) -> Result<Option<i64>, StoreError> {
    let sql = match conn.engine() {
        Engine::Sqlite => "SELECT (strftime('%s', 'now') - last_seen) * 1000 AS age_ms FROM Workers WHERE id = $1",
        Engine::Postgres => {
            "SELECT (EXTRACT(EPOCH FROM (now() - last_seen)) * 1000)::bigint AS age_ms FROM apalis.workers WHERE id = $1"
        }
    };
    match Q::new(sql).text(name).fetch_optional(conn).await? {
        Some(row) => row.opt_int("age_ms"),
        None => Ok(None),
    }
}

/// Hands back what worker `name` holds (a worker stopping at once, after it
/// killed its effects; call in a transaction): its running builds lose
/// their worker, so the next worker to see them takes them over without
/// waiting for the heartbeat to go stale, and the apalis jobs it had claimed
/// wait for another worker again. Returns how many jobs were handed back.
pub async fn release(conn: &mut Conn, name: &str) -> Result<u64, StoreError> {
    Q::new("UPDATE builds SET worker = NULL, version = version + 1 WHERE worker = $1 AND status = 'running'")
        .text(name)
        .execute(conn)
        .await?;
    Ok(match conn.engine() {
        Engine::Sqlite => {
            Q::new(
                "UPDATE Jobs SET status = 'Pending', lock_by = NULL, lock_at = NULL, attempts = attempts + 1
                 WHERE lock_by = $1 AND status IN ('Running', 'Queued')",
            )
            .text(name)
            .execute(conn)
            .await?
        }
        // Idle workers wake on the notification apalis's insert trigger sends.
        Engine::Postgres => Q::new(
            "WITH released AS (
                   UPDATE apalis.jobs SET status = 'Pending', lock_by = NULL, lock_at = NULL, attempts = attempts + 1
                   WHERE lock_by = $1 AND status IN ('Running', 'Queued') RETURNING id, job_type)
                 SELECT pg_notify('apalis::job::insert', json_build_object('job_type', job_type, 'id', id)::text)::text
                   AS notified FROM released",
        )
        .text(name)
        .fetch_all(conn)
        .await?
        .len() as u64,
    })
}
