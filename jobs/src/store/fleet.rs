//! The fleet as an operator reads it (the dashboard's queues and workers
//! view): each queue's waiting, scheduled and running jobs with the age of
//! the oldest waiting one, and each worker process with the queues it
//! serves, its heartbeat and the builds it runs. Reads apalis's tables
//! (`Jobs`/`Workers` on SQLite, `apalis.jobs`/`apalis.workers` on
//! PostgreSQL) and `builds`; writes nothing.

use super::queue::SIBLING_SUFFIXES;
use super::{Conn, Engine, StoreError, Q};
use std::collections::BTreeMap;

/// One queue's jobs now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QueueLoad {
    /// The queue's name (`builds`, `nix`, `callbacks`, `readiness`).
    pub queue: String,
    /// Jobs due now and not yet taken by a worker.
    pub waiting: i64,
    /// Jobs not due yet (a readiness round's next pass, a build's recheck).
    pub scheduled: i64,
    /// Jobs a worker has taken and not finished.
    pub running: i64,
    /// How long the oldest waiting job has been due, in milliseconds
    /// (whole seconds on SQLite, whose queue keeps seconds); `None` when
    /// none waits.
    pub oldest_waiting_ms: Option<i64>,
}

/// Each of `queues` as [`QueueLoad`], in the order given.
pub async fn queue_loads(conn: &mut Conn, queues: &[&str]) -> Result<Vec<QueueLoad>, StoreError> {
    let sql = match conn.engine() {
        Engine::Sqlite => {
            "SELECT
               COUNT(*) FILTER (WHERE status = 'Pending' AND run_at <= strftime('%s', 'now')) AS waiting,
               COUNT(*) FILTER (WHERE status = 'Pending' AND run_at > strftime('%s', 'now')) AS scheduled,
               COUNT(*) FILTER (WHERE status IN ('Queued', 'Running')) AS running,
               (strftime('%s', 'now')
                 - MIN(run_at) FILTER (WHERE status = 'Pending' AND run_at <= strftime('%s', 'now'))) * 1000
                 AS oldest_ms
             FROM Jobs WHERE job_type = $1"
        }
        Engine::Postgres => {
            "SELECT
               COUNT(*) FILTER (WHERE status = 'Pending' AND run_at <= now()) AS waiting,
               COUNT(*) FILTER (WHERE status = 'Pending' AND run_at > now()) AS scheduled,
               COUNT(*) FILTER (WHERE status IN ('Queued', 'Running')) AS running,
               (EXTRACT(EPOCH FROM (now() - MIN(run_at) FILTER (WHERE status = 'Pending' AND run_at <= now())))
                 * 1000)::bigint AS oldest_ms
             FROM apalis.jobs WHERE job_type = $1"
        }
    };
    let mut out = Vec::with_capacity(queues.len());
    for queue in queues {
        let row = Q::new(sql).text(*queue).fetch_one(conn).await?;
        out.push(QueueLoad {
            queue: (*queue).to_owned(),
            waiting: row.int("waiting")?,
            scheduled: row.int("scheduled")?,
            running: row.int("running")?,
            oldest_waiting_ms: row.opt_int("oldest_ms")?.map(|ms| ms.max(0)),
        });
    }
    Ok(out)
}

/// One worker process: the apalis workers it runs (one per queue, named
/// `<name>` for `builds` and `<name>-nix`, `<name>-callbacks`,
/// `<name>-readiness` for the others) seen as one.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorkerSeen {
    /// The process's worker name (`<prefix>-<host>-<pid>-<random>`).
    pub name: String,
    /// The queues it serves, sorted.
    pub queues: Vec<String>,
    /// Milliseconds since its latest heartbeat (whole seconds on SQLite).
    pub heartbeat_age_ms: i64,
    /// Milliseconds since it started, when apalis recorded that.
    pub up_ms: Option<i64>,
    /// Whether it beat within the window asked for (alive).
    pub alive: bool,
    /// Builds it runs now: the build slots it has in use.
    pub builds_running: i64,
}

/// The worker processes that beat within the last `recent_ms` milliseconds,
/// newest heartbeat first (then by name), each `alive` when it beat within
/// `alive_ms`.
pub async fn workers_seen(conn: &mut Conn, recent_ms: i64, alive_ms: i64) -> Result<Vec<WorkerSeen>, StoreError> {
    let sql = match conn.engine() {
        Engine::Sqlite => {
            "SELECT id, worker_type, (strftime('%s', 'now') - last_seen) * 1000 AS age_ms,
                    (strftime('%s', 'now') - started_at) * 1000 AS up_ms
             FROM Workers WHERE last_seen >= strftime('%s', 'now') - $1 / 1000"
        }
        Engine::Postgres => {
            "SELECT id, worker_type, (EXTRACT(EPOCH FROM (now() - last_seen)) * 1000)::bigint AS age_ms,
                    (EXTRACT(EPOCH FROM (now() - started_at)) * 1000)::bigint AS up_ms
             FROM apalis.workers WHERE last_seen >= now() - make_interval(secs => $1::float8 / 1000.0)"
        }
    };
    let rows = Q::new(sql).int(recent_ms).fetch_all(conn).await?;
    let mut by_name: BTreeMap<String, WorkerSeen> = BTreeMap::new();
    for row in &rows {
        let id = row.text("id")?;
        let name = SIBLING_SUFFIXES.iter().find_map(|s| id.strip_suffix(s)).unwrap_or(&id).to_owned();
        let age = row.int("age_ms")?.max(0);
        let up = row.opt_int("up_ms")?;
        let seen = by_name.entry(name.clone()).or_insert_with(|| WorkerSeen {
            name,
            queues: Vec::new(),
            heartbeat_age_ms: age,
            up_ms: up,
            alive: false,
            builds_running: 0,
        });
        seen.queues.push(row.text("worker_type")?);
        seen.heartbeat_age_ms = seen.heartbeat_age_ms.min(age);
        seen.up_ms = seen.up_ms.max(up);
    }
    let running = Q::new(
        "SELECT worker, COUNT(*) AS n FROM builds WHERE status = 'running' AND worker IS NOT NULL GROUP BY worker",
    )
    .fetch_all(conn)
    .await?;
    for row in &running {
        if let Some(seen) = by_name.get_mut(&row.text("worker")?) {
            seen.builds_running = row.int("n")?;
        }
    }
    let mut out: Vec<WorkerSeen> = by_name.into_values().collect();
    for w in &mut out {
        w.queues.sort();
        w.queues.dedup();
        w.alive = w.heartbeat_age_ms <= alive_ms;
    }
    out.sort_by(|a, b| a.heartbeat_age_ms.cmp(&b.heartbeat_age_ms).then_with(|| a.name.cmp(&b.name)));
    Ok(out)
}

/// The ids of the deployments changed most recently (by their last
/// submit), newest first, at most `limit`: what a token for every
/// deployment sees listed.
pub async fn recent_deployment_ids(conn: &mut Conn, limit: i64) -> Result<Vec<String>, StoreError> {
    let rows =
        Q::new("SELECT id FROM deployments ORDER BY updated_at DESC, id LIMIT $1").int(limit).fetch_all(conn).await?;
    rows.iter().map(|r| r.text("id")).collect()
}
