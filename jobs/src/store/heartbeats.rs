//! Worker heartbeats as the database keeps them: apalis's table of
//! workers, whose `last_seen` tells a live worker from a dead one, the
//! claims a worker holds and hands back, and the live-worker count a names
//! eval asks before it queues one. The fleet as a whole is read in
//! [`super::fleet`].

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

/// Counts the apalis workers of queue `$1` with a heartbeat within the last
/// `$2` seconds, on `engine`.
pub(super) fn live_workers(engine: Engine) -> &'static str {
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
