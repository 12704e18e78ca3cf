//! Workers as the database sees them: apalis's table of workers, whose
//! heartbeat (`last_seen`) tells a live worker from a dead one, and the
//! claims a worker holds.

use super::{placeholders, Conn, Engine, StoreError, Q};

/// The apalis workers of worker process `name`: its `builds`-queue
/// worker, named `name`, then its siblings, named with
/// [`super::queue::SIBLING_SUFFIXES`] (beaten and handed back together).
pub fn apalis_names(name: &str) -> Vec<String> {
    std::iter::once(name.to_owned())
        .chain(super::queue::SIBLING_SUFFIXES.iter().map(|suffix| format!("{name}{suffix}")))
        .collect()
}

/// Marks the apalis workers of worker process `name` ([`apalis_names`])
/// alive now, all but those in `rejoining`. apalis only beats while its
/// worker polls for jobs, which a worker whose slots are all busy does not
/// do; this keeps a busy, live worker from being taken for dead. A
/// queue worker that registers again after a failure is left out (its row
/// must look old for apalis to take the name again:
/// [`make_registrable`]). Returns how many rows it marked.
pub async fn keep_alive(conn: &mut Conn, name: &str, rejoining: &[String]) -> Result<u64, StoreError> {
    let names: Vec<String> = apalis_names(name).into_iter().filter(|n| !rejoining.contains(n)).collect();
    if names.is_empty() {
        return Ok(0);
    }
    let sql = match conn.engine() {
        Engine::Sqlite => "UPDATE Workers SET last_seen = strftime('%s', 'now') WHERE id IN",
        Engine::Postgres => "UPDATE apalis.workers SET last_seen = now() WHERE id IN",
    };
    Q::new(format!("{sql} {}", placeholders(1, names.len()))).texts(names).execute(conn).await
}

/// Lets apalis register worker `name` again after the worker failed (call
/// with it left out of [`keep_alive`]). On SQLite apalis refuses a name
/// whose row beat within its heartbeat interval (`apalis_heartbeat`, whole
/// seconds), so the row's last beat is set just past that interval: still
/// far inside the missed-beat window, so neither Slipway nor apalis takes
/// the name's jobs for orphans. On PostgreSQL apalis takes a name again
/// whenever no live session holds it: nothing to do. Returns whether a row
/// was changed.
pub async fn make_registrable(
    conn: &mut Conn,
    name: &str,
    apalis_heartbeat: std::time::Duration,
) -> Result<bool, StoreError> {
    match conn.engine() {
        Engine::Sqlite => {
            let changed = Q::new(
                "UPDATE Workers SET last_seen = strftime('%s', 'now') - $2 - 1
                 WHERE id = $1 AND last_seen > strftime('%s', 'now') - $2 - 1",
            )
            .text(name)
            .int(apalis_heartbeat.as_secs() as i64)
            .execute(conn)
            .await?;
            Ok(changed > 0)
        }
        Engine::Postgres => Ok(false),
    }
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
    let names = apalis_names(name);
    Ok(match conn.engine() {
        Engine::Sqlite => {
            let q = Q::new(format!(
                "UPDATE Jobs SET status = 'Pending', lock_by = NULL, lock_at = NULL, attempts = attempts + 1
                 WHERE lock_by IN {} AND status IN ('Running', 'Queued')",
                placeholders(1, names.len())
            ));
            q.texts(names).execute(conn).await?
        }
        // Idle workers wake on the notification a new job sends, once this commits.
        Engine::Postgres => {
            let q = Q::new(format!(
                "UPDATE apalis.jobs SET status = 'Pending', lock_by = NULL, lock_at = NULL, attempts = attempts + 1
                 WHERE lock_by IN {} AND status IN ('Running', 'Queued') RETURNING id, job_type",
                placeholders(1, names.len())
            ));
            let released = q.texts(names).fetch_all(conn).await?;
            for job in &released {
                conn.notify_new_job(&job.text("job_type")?, &job.text("id")?).await?;
            }
            released.len() as u64
        }
    })
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

/// Counts the apalis workers of queue `$1` with a heartbeat within the last
/// `$2` seconds, on `engine`.
fn live_workers(engine: Engine) -> &'static str {
    match engine {
        Engine::Sqlite => {
            "SELECT COUNT(*) FROM Workers WHERE worker_type = $1 AND last_seen >= strftime('%s', 'now') - $2"
        }
        Engine::Postgres => {
            "SELECT COUNT(*) FROM apalis.workers WHERE worker_type = $1 AND last_seen >= now() - make_interval(secs => $2)"
        }
    }
}

/// The live workers of `queue` (a heartbeat within `window_s` seconds) and
/// the nix slots below `slots` held at `now` (ms) by an unexpired lease, in
/// one statement: what a submit's names eval asks before it queues one
/// (Q-8, EV-1).
pub async fn served_and_slots_held(
    conn: &mut Conn,
    queue: &str,
    window_s: i64,
    slots: u32,
    now: i64,
) -> Result<(i64, i64), StoreError> {
    let row = Q::new(format!(
        "SELECT ({}) AS workers, ({}) AS held",
        live_workers(conn.engine()),
        super::nix_results::slots_held_sql("$3", "$4")
    ))
    .text(queue)
    .int(window_s)
    .int(i64::from(slots))
    .int(now)
    .fetch_one(conn)
    .await?;
    Ok((row.int("workers")?, row.int("held")?))
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
    use super::queue::{ALL_QUEUES, MAINTENANCE_QUEUE, SIBLING_SUFFIXES};
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
    let mut queues: Vec<QueueDepth> = ALL_QUEUES
        .iter()
        .filter(|q| **q != MAINTENANCE_QUEUE)
        .map(|q| QueueDepth { queue: q, waiting: 0, oldest_waiting_s: 0 })
        .collect();
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
