//! The fleet, read: how many jobs wait on each queue and for how long, and
//! which workers beat, on which host, serving which queues, with how many
//! builds. Read from apalis's job and worker tables, `builds` and
//! `nix_slots`; nothing here writes (heartbeats are written in
//! [`super::heartbeats`]). Three readers, three counts:
//!
//! - [`queue_loads`] for `GET /queues` and the dashboard ([`QueueLoad`]:
//!   due, scheduled, running, oldest due in ms),
//! - [`queue_states`] for `/readyz` and the warnings of `GET /schema/get_for`
//!   ([`QueueState`]: every pending job, due or not, and the live workers),
//! - [`fleet`] for `/metrics` ([`Fleet`], [`QueueDepth`]: due jobs and the
//!   oldest in whole seconds, from one grouped statement).

use super::heartbeats::live_workers;
use super::queue::SIBLING_SUFFIXES;
use super::{Conn, Engine, StoreError, Q};
use serde::Serialize;
use std::collections::BTreeMap;

/// One queue's jobs now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct QueueLoad {
    /// The queue's name (`builds`, `nix`, `callbacks`, `readiness`, `rollouts`).
    pub queue: String,
    /// Jobs due and waiting for a worker.
    pub waiting: i64,
    /// Jobs waiting for a later time (a retry's back-off, a readiness probe's next round).
    pub scheduled: i64,
    /// Jobs a worker has claimed and not finished, counting those it has
    /// fetched ahead (`BUILD_PREFETCH`) that still wait for one of its
    /// build slots.
    pub running: i64,
    /// How long the oldest due job has waited, in milliseconds (whole
    /// seconds on SQLite, whose queue keeps times in seconds); `None` when
    /// nothing waits.
    #[schema(required = true)]
    pub oldest_waiting_ms: Option<i64>,
}

/// The load of each of `queues` ([`super::queue::ALL_QUEUES`] less the
/// `maintenance` one, which runs from a timer and has no stored jobs).
pub async fn queue_loads(conn: &mut Conn, queues: &[&str]) -> Result<Vec<QueueLoad>, StoreError> {
    let sql = match conn.engine() {
        Engine::Sqlite => {
            "SELECT
               COALESCE(SUM(CASE WHEN status = 'Pending' AND run_at <= CAST(strftime('%s', 'now') AS INTEGER) THEN 1 ELSE 0 END), 0) AS waiting,
               COALESCE(SUM(CASE WHEN status = 'Pending' AND run_at > CAST(strftime('%s', 'now') AS INTEGER) THEN 1 ELSE 0 END), 0) AS scheduled,
               COALESCE(SUM(CASE WHEN status IN ('Queued', 'Running') THEN 1 ELSE 0 END), 0) AS running,
               (CAST(strftime('%s', 'now') AS INTEGER)
                 - MIN(CASE WHEN status = 'Pending' AND run_at <= CAST(strftime('%s', 'now') AS INTEGER) THEN run_at END)) * 1000
                 AS oldest_ms
             FROM Jobs WHERE job_type = $1"
        }
        Engine::Postgres => {
            "SELECT
               COUNT(*) FILTER (WHERE status = 'Pending' AND run_at <= now()) AS waiting,
               COUNT(*) FILTER (WHERE status = 'Pending' AND run_at > now()) AS scheduled,
               COUNT(*) FILTER (WHERE status IN ('Queued', 'Running')) AS running,
               (EXTRACT(EPOCH FROM (now() - MIN(run_at) FILTER (WHERE status = 'Pending' AND run_at <= now()))) * 1000)::bigint
                 AS oldest_ms
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
            oldest_waiting_ms: row.opt_int("oldest_ms")?,
        });
    }
    Ok(out)
}

/// One queue as the fleet serves it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct QueueState {
    /// The queue's name.
    pub queue: String,
    /// Jobs waiting for a worker.
    pub waiting: i64,
    /// Live workers serving it (beat within `window_s` seconds).
    pub workers: i64,
}

/// For each of `queues`: the jobs waiting on it and the live workers that
/// serve it (apalis's worker table, whose `worker_type` is the queue).
pub async fn queue_states(conn: &mut Conn, queues: &[&str], window_s: i64) -> Result<Vec<QueueState>, StoreError> {
    let waiting = match conn.engine() {
        Engine::Sqlite => "SELECT COUNT(*) AS n FROM Jobs WHERE job_type = $1 AND status = 'Pending'",
        Engine::Postgres => "SELECT COUNT(*) AS n FROM apalis.jobs WHERE job_type = $1 AND status = 'Pending'",
    };
    let workers = format!("SELECT ({}) AS n", live_workers(conn.engine()));
    let mut out = Vec::with_capacity(queues.len());
    for queue in queues {
        let w = Q::new(waiting).text(*queue).fetch_one(conn).await?.int("n")?;
        let live = Q::new(workers.as_str()).text(*queue).int(window_s).fetch_one(conn).await?.int("n")?;
        out.push(QueueState { queue: queue.to_string(), waiting: w, workers: live });
    }
    Ok(out)
}

/// One queue's waiting jobs, as [`fleet`] reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDepth {
    /// The queue (one of [`super::queue::ALL_QUEUES`] that lives in the database).
    pub queue: &'static str,
    /// Jobs due (`run_at` passed) that no worker has taken yet; jobs
    /// delayed into the future are not counted until they are due.
    pub waiting: i64,
    /// Seconds since the oldest of them became due; 0 when none waits.
    pub oldest_waiting_s: i64,
}

/// The fleet at one moment, for the metrics of docs/METRICS.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fleet {
    /// Every queue kept in the database, in [`super::queue::ALL_QUEUES`] order.
    pub queues: Vec<QueueDepth>,
    /// `(pool, slots held)`: `builds` (builds running) and `nix` (nix slot
    /// leases held and not expired).
    pub slots: Vec<(&'static str, i64)>,
    /// Worker processes with a heartbeat within the window (a process
    /// counts once, whichever queues it serves).
    pub workers_alive: i64,
}

/// Reads the [`Fleet`]: apalis's jobs and workers tables, `builds` and
/// `nix_slots`. `window_s` is the takeover window in seconds (a worker
/// silent longer is dead), `nix_slots` the fleet's `NIX_SLOTS`, `now` Unix
/// milliseconds. Four short statements on indexed columns.
pub async fn fleet(conn: &mut Conn, window_s: i64, nix_slots: u32, now: i64) -> Result<Fleet, StoreError> {
    use super::queue::DATABASE_QUEUES;
    let (waiting, live) = match conn.engine() {
        Engine::Sqlite => (
            "SELECT job_type, COUNT(*) AS n, CAST(strftime('%s', 'now') AS INTEGER) - MIN(run_at) AS oldest_s
             FROM Jobs WHERE status = 'Pending' AND run_at <= CAST(strftime('%s', 'now') AS INTEGER)
             GROUP BY job_type",
            "SELECT id FROM Workers WHERE last_seen >= CAST(strftime('%s', 'now') AS INTEGER) - $1",
        ),
        Engine::Postgres => (
            "SELECT job_type, COUNT(*) AS n, FLOOR(EXTRACT(EPOCH FROM (now() - MIN(run_at))))::bigint AS oldest_s
             FROM apalis.jobs WHERE status = 'Pending' AND run_at <= now() GROUP BY job_type",
            "SELECT id FROM apalis.workers WHERE last_seen >= now() - make_interval(secs => $1)",
        ),
    };
    let mut queues: Vec<QueueDepth> =
        DATABASE_QUEUES.iter().map(|q| QueueDepth { queue: q, waiting: 0, oldest_waiting_s: 0 }).collect();
    for row in Q::new(waiting).fetch_all(conn).await? {
        let job_type = row.text("job_type")?;
        // Only the known queues: a stray job type never becomes a label.
        if let Some(q) = queues.iter_mut().find(|q| q.queue == job_type) {
            q.waiting = row.int("n")?;
            q.oldest_waiting_s = row.opt_int("oldest_s")?.unwrap_or(0).max(0);
        }
    }
    let mut processes = std::collections::BTreeSet::new();
    for row in Q::new(live).int(window_s).fetch_all(conn).await? {
        let id = row.text("id")?;
        let base = SIBLING_SUFFIXES.iter().find_map(|s| id.strip_suffix(s)).unwrap_or(&id).to_owned();
        processes.insert(base);
    }
    let running =
        Q::new("SELECT COUNT(*) AS n FROM builds WHERE status = 'running'").fetch_one(conn).await?.int("n")?;
    let nix = super::nix_results::slots_held(conn, nix_slots, now).await?;
    Ok(Fleet { queues, slots: vec![("builds", running), ("nix", nix)], workers_alive: processes.len() as i64 })
}

/// One worker process as the database sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerView {
    /// The process's worker name (`<prefix>@<host>-<pid>-<random>`).
    pub name: String,
    /// The host it runs on, read from its name; `None` for a name of
    /// another shape (a worker of an older release).
    pub host: Option<String>,
    /// The queues it serves, sorted.
    pub queues: Vec<String>,
    /// Builds it runs now (each holds one of its build slots).
    pub slots_in_use: i64,
    /// Its latest heartbeat, in milliseconds since 1970-01-01 UTC (whole seconds).
    pub last_heartbeat_ms: i64,
    /// How long ago that was, in milliseconds.
    pub heartbeat_age_ms: i64,
}

/// The host part of worker name `name` (`<prefix>@<host>-<pid>-<random>`).
/// A host name has no `@`, so the last `@` ends the prefix whatever it holds.
pub fn host_of(name: &str) -> Option<String> {
    let (_, rest) = name.rsplit_once('@')?;
    let mut parts = rest.rsplitn(3, '-');
    let (_random, pid, host) = (parts.next()?, parts.next()?, parts.next()?);
    (pid.bytes().all(|b| b.is_ascii_digit()) && !host.is_empty()).then(|| host.to_owned())
}

/// The worker processes that beat within the last `within_s` seconds,
/// newest heartbeat first. A process's sibling apalis workers (its `nix`,
/// `callbacks` and `readiness` ones, named with [`SIBLING_SUFFIXES`]) are
/// folded into it: their queues are its queues.
pub async fn workers(conn: &mut Conn, within_s: i64) -> Result<Vec<WorkerView>, StoreError> {
    let sql = match conn.engine() {
        Engine::Sqlite => {
            "SELECT id, worker_type, last_seen * 1000 AS seen_ms,
                    (CAST(strftime('%s', 'now') AS INTEGER) - last_seen) * 1000 AS age_ms
             FROM Workers WHERE last_seen >= CAST(strftime('%s', 'now') AS INTEGER) - $1"
        }
        Engine::Postgres => {
            "SELECT id, worker_type, (EXTRACT(EPOCH FROM last_seen) * 1000)::bigint AS seen_ms,
                    (EXTRACT(EPOCH FROM (now() - last_seen)) * 1000)::bigint AS age_ms
             FROM apalis.workers WHERE last_seen >= now() - make_interval(secs => $1)"
        }
    };
    let rows = Q::new(sql).int(within_s).fetch_all(conn).await?;
    let mut by_name: BTreeMap<String, WorkerView> = BTreeMap::new();
    for row in rows {
        let id = row.text("id")?;
        let name = SIBLING_SUFFIXES.iter().find_map(|s| id.strip_suffix(s)).unwrap_or(&id).to_owned();
        let (seen, age) = (row.int("seen_ms")?, row.int("age_ms")?);
        let view = by_name.entry(name.clone()).or_insert_with(|| WorkerView {
            host: host_of(&name),
            name,
            queues: Vec::new(),
            slots_in_use: 0,
            last_heartbeat_ms: seen,
            heartbeat_age_ms: age,
        });
        view.queues.push(row.text("worker_type")?);
        view.queues.sort();
        view.queues.dedup();
        if seen > view.last_heartbeat_ms {
            (view.last_heartbeat_ms, view.heartbeat_age_ms) = (seen, age);
        }
    }
    let running = Q::new(
        "SELECT worker, COUNT(*) AS n FROM builds WHERE status = 'running' AND worker IS NOT NULL GROUP BY worker",
    )
    .fetch_all(conn)
    .await?;
    for row in running {
        if let Some(view) = by_name.get_mut(&row.text("worker")?) {
            view.slots_in_use = row.int("n")?;
        }
    }
    let mut out: Vec<WorkerView> = by_name.into_values().collect();
    out.sort_by(|a, b| b.last_heartbeat_ms.cmp(&a.last_heartbeat_ms).then_with(|| a.name.cmp(&b.name)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn the_host_is_read_from_a_worker_name_whatever_its_prefix_holds() {
        assert_eq!(host_of("worker@web-1.example-4242-abc123").as_deref(), Some("web-1.example"));
        assert_eq!(host_of("eval-pool@x@build-7-99-zz9zz9").as_deref(), Some("build-7"));
        assert_eq!(host_of("worker-oldhost-4242-abc123"), None);
        assert_eq!(host_of("worker@host-notapid-abc123"), None);
    }
}
