//! A submit's transaction in the fewest round trips (MG-7, Q-1, Q-3, ST-2,
//! Q-7, DL-3): what [`crate::submit`] stores, written as few statements as
//! keep every guarantee.
//!
//! On PostgreSQL, inside `BEGIN … COMMIT`, two statements:
//! 1. [`lock_and_upsert`]: the deployment's snapshot, inserted or replaced
//!    (`INSERT … ON CONFLICT DO UPDATE`, whose row lock serialises the
//!    deployment's writers, ST-2, ST-3), and in its `RETURNING` the
//!    `slipway.admission` advisory lock (shared or exclusive, Q-3), so the
//!    two locks are always taken in that order;
//! 2. [`write_build`]: one statement of data-modifying CTEs that supersedes
//!    the deployment's queued deploys, inserts the build, pushes its
//!    apalis job when its turn has come (ST-2, Q-1: same transaction),
//!    records the channel event (DL-3), and counts the queued builds for
//!    the admission. Its snapshot is taken after statement 1 holds
//!    both locks, so it sees every build of the deployment and, under the
//!    exclusive lock, every queued build. A submit without OpenBao also
//!    reads in it whether the deployment's earlier builds pin secrets
//!    OpenBao keeps (§8), instead of a read of its own before the
//!    transaction: one round trip and one pooled connection fewer. The
//!    wake-ups of the job and of the event are sent after the commit
//!    ([`Conn::notify`]), so that the submits' commits share their WAL
//!    flushes.
//!
//! On SQLite, whose `BEGIN IMMEDIATE` already holds the one write lock, the
//! same two steps: the upsert, then one round trip to the connection's
//! thread that runs the steps of statement 2 as plain statements in order
//! (SQLite has no data-modifying CTEs) and reads back what they did. Every
//! round trip is a hand-over between threads, taken while the process's
//! write turn is held, so fewer of them let more submits commit.

use super::queue::{BuildJob, JobKind as _, BUILDS_QUEUE};
use super::{builds, deployments, events, Conn, Engine, StoreError, Q};
use crate::precondition::Precondition;

/// The advisory lock that serialises the Q-3 count of queued builds with
/// the commit of the build it admits (PostgreSQL; a no-op on SQLite).
pub const ADMISSION_LOCK: &str = "slipway.admission";

/// How a submit's transaction takes [`ADMISSION_LOCK`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmissionLock {
    /// No bound (a local run): no lock.
    None,
    /// Shared: submits far from the bound run side by side.
    Shared,
    /// Exclusive: waits for every shared holder, so the count is complete.
    Exclusive,
}

/// Statement 1: takes the deployment's lock, writing its snapshot unless it
/// is `None` (a dry run changes nothing of it: the row is only locked), then
/// the admission lock. The first submits of a new deployment wait for each
/// other here, on its key. With a `precondition` (`If-Match`,
/// `If-None-Match`), the same statement replaces the row only when it
/// holds (`ON CONFLICT DO UPDATE … WHERE`, so the check and the write are
/// one, under the row lock), and answers the version it wrote: none when
/// the row was kept, 1 when it inserted a new one (a version that replaced
/// one is 2 or more). `Ok(false)` when the precondition does not hold; the
/// caller then rolls back what the statement may have inserted. A dry run
/// checks it with one read under the lock.
pub async fn lock_and_upsert(
    conn: &mut Conn,
    id: &str,
    snapshot: Option<deployments::Snapshot<'_>>,
    admission: AdmissionLock,
    precondition: Option<&Precondition>,
    now: i64,
) -> Result<bool, StoreError> {
    match (conn.engine(), snapshot) {
        (Engine::Postgres, Some(s)) => {
            let lock = match admission {
                AdmissionLock::None => "NULL",
                AdmissionLock::Shared => "pg_advisory_xact_lock_shared(hashtext($8))::text",
                AdmissionLock::Exclusive => "pg_advisory_xact_lock(hashtext($8))::text",
            };
            let row = upsert_query(s, now, precondition, &format!("RETURNING version, {lock} AS admission"))
                .text(ADMISSION_LOCK)
                .fetch_optional(conn)
                .await?;
            held(precondition, row)
        }
        (Engine::Sqlite, Some(s)) if precondition.is_some() => {
            let row = upsert_query(s, now, precondition, "RETURNING version").fetch_optional(conn).await?;
            held(precondition, row)
        }
        (Engine::Sqlite, Some(s)) => {
            upsert_query(s, now, None, "").execute(conn).await?;
            Ok(true)
        }
        (_, None) => {
            conn.lock_deployment(id).await?;
            match admission {
                AdmissionLock::None => {}
                AdmissionLock::Shared => conn.lock_name_shared(ADMISSION_LOCK).await?,
                AdmissionLock::Exclusive => conn.lock_name(ADMISSION_LOCK).await?,
            }
            match precondition {
                None => Ok(true),
                Some(p) => Ok(p.holds(deployments::get(conn, id).await?.map(|d| d.version))),
            }
        }
    }
}

/// Whether `precondition` held for the upsert that answered `row`.
fn held(precondition: Option<&Precondition>, row: Option<super::Row>) -> Result<bool, StoreError> {
    match (precondition, row) {
        (None, _) => Ok(true),
        (Some(_), None) => Ok(false),
        (Some(p), Some(row)) => Ok(!(p.needs_existing() && row.int("version")? == 1)),
    }
}

/// The deployment's insert-or-replace (ST-3: the version grows by one with
/// each change, under the row lock the statement itself takes), `$1`–`$7`
/// bound, `tail` appended; with a `precondition`, it replaces the row only
/// when that holds.
fn upsert_query(s: deployments::Snapshot<'_>, now: i64, precondition: Option<&Precondition>, tail: &str) -> Q {
    let only_if = precondition.map(|p| format!("WHERE {}", p.update_sql("deployments.version"))).unwrap_or_default();
    Q::new(format!(
        "INSERT INTO deployments (id, configuration, module_source, domain, instances, names, version, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $7)
         ON CONFLICT (id) DO UPDATE SET configuration = excluded.configuration,
             module_source = excluded.module_source, domain = excluded.domain, instances = excluded.instances,
             names = excluded.names, version = deployments.version + 1,
             updated_at = CASE WHEN excluded.updated_at > deployments.updated_at
                               THEN excluded.updated_at ELSE deployments.updated_at END
         {only_if}
         {tail}"
    ))
    .text(s.id)
    .text(s.configuration.to_string())
    .opt_text(s.module_source)
    .opt_text(s.domain)
    .text(serde_json::to_string(s.instances).expect("instances serialise"))
    .opt_text(s.names.map(serde_json::Value::to_string))
    .int(now)
}

/// What statement 2 wrote and counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Queued builds, this one included, counted up to the cap (+1).
    pub queued: i64,
    /// At most how many other transactions may be writing unseen beside
    /// this one: PostgreSQL's `max_connections`; 0 on SQLite.
    pub unseen: i64,
    /// Whether this build's job was pushed (its turn has come, ST-2).
    pub dispatched: bool,
    /// Asked for with [`WriteBuild::check_kept_secrets`]: whether the
    /// deployment's latest earlier build (not a dry run) pins operator
    /// secrets that OpenBao holds (a non-empty `set`, §8). Always `false`
    /// when not asked.
    pub secrets_kept: bool,
}

/// Statement 2 (see the module doc): supersedes `build`'s deployment's queued
/// deploys when `how.supersede`, inserts `build` queued, pushes its
/// job when no other build of its deployment is queued or running (ST-2),
/// records `how.event` (the deployment's state from this build on, DL-3;
/// `None` for a dry run, which changes no state) and counts the queued
/// builds up to `how.cap` others. Call holding the deployment's lock
/// ([`lock_and_upsert`]), with `now` read under it. Should the deployment hold an earlier waiting
/// build and none dispatched (a state no transaction leaves), that build is
/// dispatched instead, as [`builds::dispatch_next`] does. With
/// `how.check_kept_secrets`, the same statement also reads whether an earlier
/// build of the deployment pins secrets OpenBao keeps
/// ([`Written::secrets_kept`], as [`builds::latest_secret_pins`] reads it):
/// a submit without OpenBao then rolls back instead of a read of its own.
pub async fn write_build(
    conn: &mut Conn,
    build: builds::NewBuild<'_>,
    how: WriteBuild,
    now: i64,
) -> Result<Written, StoreError> {
    match conn.engine() {
        Engine::Postgres => write_build_postgres(conn, build, how, now).await,
        Engine::Sqlite => write_build_sqlite(conn, build, how, now).await,
    }
}

/// How [`write_build`] writes a submit's build besides the build itself.
#[derive(Debug, Clone, Copy)]
pub struct WriteBuild {
    /// Supersede the deployment's queued deploys.
    pub supersede: bool,
    /// The channel event to record (DL-3); `None` for a dry run.
    pub event: Option<crate::state::DeploymentState>,
    /// Count the other queued builds up to this many.
    pub cap: i64,
    /// Also read [`Written::secrets_kept`].
    pub check_kept_secrets: bool,
}

/// The column of statement 2 that gives the operator secrets the
/// deployment's latest earlier build pins (`kept_pins`), or `NULL` when not
/// asked for. `id <> $1`: on SQLite the statement reads after its insert.
fn kept_pins_column(check: bool) -> String {
    if check {
        format!("({}) AS kept_pins", builds::latest_secret_pins_sql("$2", Some("$1")))
    } else {
        "NULL AS kept_pins".to_owned()
    }
}

/// [`Written::secrets_kept`] from statement 2's `kept_pins`.
fn secrets_kept(row: &super::Row) -> Result<bool, StoreError> {
    let Some(pins) = row.opt_text("kept_pins")? else { return Ok(false) };
    let pins: crate::secrets::SecretPins = super::json_col(&pins, "builds.operator_secrets")?;
    Ok(pins.keeps_values())
}

/// An upper bound `b` on the queued builds a statement's snapshot holds, in
/// two index lookups whatever the number of builds: queued builds have
/// distinct `seq`s between the oldest queued one's and the newest build's.
/// Admission counts them (up to the bound) only when `b` comes near
/// `QUEUE_SIZE`; far from it, `b` suffices (Q-3 stays exact: the count is
/// never more than `b`). Tight while the queue flows; loose when an old
/// build waits behind many that ran.
///
/// The oldest queued build is read as `ORDER BY seq LIMIT 1`, not as
/// `MIN(seq)`: PostgreSQL plans `MIN(seq) … WHERE status = 'queued'` either
/// as one index probe or as an aggregate over every queued entry, and it
/// takes the aggregate when its statistics say about one build is queued
/// (a fresh database, or a queue that was drained when it last analysed).
/// Every pooled connection keeps that plan, so a burst of submits then
/// read the whole queue each (`docs/DECISIONS.md`: "The oldest queued
/// build is read as `ORDER BY seq LIMIT 1`").
const SPAN: &str = "(SELECT COALESCE((SELECT MAX(seq) FROM builds)
                                   - (SELECT seq FROM builds WHERE status = 'queued' ORDER BY seq LIMIT 1) + 1, 0)
                   AS b) AS span";

/// The statement of [`admission_count`] (`$1`: `QUEUE_SIZE`), as the
/// benchmarks explain it.
pub fn admission_count_sql() -> String {
    format!(
        "SELECT CASE WHEN b < $1 THEN b
                     ELSE (SELECT COUNT(*) FROM (SELECT 1 FROM builds WHERE status = 'queued' LIMIT $1) AS q)
                END AS n
         FROM {SPAN}"
    )
}

/// Q-3 before a submit's body is read: the builds waiting for a worker
/// when that is `limit` or more (counted up to `limit`), otherwise a number
/// below `limit` that is at least that many (the `SPAN` bound, or the
/// count). One statement.
pub async fn admission_count(conn: &mut Conn, limit: i64) -> Result<i64, StoreError> {
    Q::new(admission_count_sql()).int(limit).fetch_one(conn).await?.int("n")
}

/// Q-7 on PostgreSQL, inside statement 2: `$2` deployment, `$7` now,
/// `$11` the error the superseded builds get, `$12` whether to supersede.
const SUPERSEDE: &str = "UPDATE builds SET status = 'superseded', reason = 'superseded', error = $11, finished_at = $7,
           version = version + 1
    WHERE $12 = 1 AND deployment_id = $2 AND kind = 'deploy' AND status = 'queued' AND dry_run = 0
      AND seq > COALESCE((SELECT MAX(seq) FROM builds WHERE deployment_id = $2 AND kind = 'destroy'), 0)";

/// Binds statement 2's values on either engine: `$1`–`$10` the build
/// ([`builds::bind_new_build`]), `$11` the error the superseded builds get,
/// `$12` whether to supersede, `$13` the job's id, `$14` its queue, `$15`
/// its attempts, `$16` when it runs (seconds), `$17` the event's state,
/// `$18` the admission cap. The caller binds the job's payload as `$19`, in
/// its engine's type, then (PostgreSQL `$20`–`$22`, SQLite, after the job's
/// metadata `$20`, `$21`–`$23`) the build's trigger, provenance and tenant
/// (FS-1; its job's priority comes from [`super::fair::tag_sql`]).
fn bind_statement_2(q: Q, b: &builds::NewBuild<'_>, w: WriteBuild, now: i64) -> Q {
    let WriteBuild { supersede, event, cap, .. } = w;
    builds::bind_new_build(q, b, now)
        .text(format!("superseded by build {}, submitted before this one ran", b.id))
        .int(i64::from(supersede))
        .text(ulid::Ulid::generate().to_string())
        .text(BUILDS_QUEUE)
        .int(BuildJob::ATTEMPTS as i64)
        .int(now.div_euclid(1000))
        .opt_text(event.map(|e| e.as_str()))
        .int(cap)
}

async fn write_build_postgres(
    conn: &mut Conn,
    b: builds::NewBuild<'_>,
    w: WriteBuild,
    now: i64,
) -> Result<Written, StoreError> {
    // `blocked`: a build of the deployment is queued (waiting or
    // dispatched) or running, other than those superseded now; with none,
    // this build's turn has come (ST-2). `busy`: one of them is dispatched.
    // The job row is what apalis's own push writes (`push_tasks`; the test
    // `the_folded_job_push_writes_the_row_apalis_writes` compares them).
    let sql = format!(
        "WITH sup AS ({SUPERSEDE} RETURNING id),
         st AS (
           SELECT EXISTS (SELECT 1 FROM builds WHERE deployment_id = $2 AND status IN ('queued', 'running')
                            AND id NOT IN (SELECT id FROM sup)) AS blocked,
                  EXISTS (SELECT 1 FROM builds WHERE deployment_id = $2 AND status IN ('queued', 'running')
                            AND dispatched = 1 AND id NOT IN (SELECT id FROM sup)) AS busy
         ),
         tag AS (SELECT {tag} AS t),
         ins AS (
           INSERT INTO builds (id, deployment_id, kind, status, configuration, module_source, instances, queued_at,
                               operator_secrets, readiness, dry_run, trigger_kind, provenance, dispatched, version,
                               tenant, fair_tag)
           SELECT $1, $2, $3, 'queued', $4, $5, $6, $7, $8, $9, $10, $20, $21,
                  CASE WHEN blocked THEN 0 ELSE 1 END, CASE WHEN blocked THEN 0 ELSE 1 END,
                  $22, CASE WHEN blocked THEN NULL ELSE (SELECT t FROM tag) END
           FROM st
           RETURNING dispatched
         ),
         job AS (
           INSERT INTO apalis.jobs (id, job_type, job, status, attempts, max_attempts, run_at, priority, metadata,
                                    idempotency_key)
           SELECT $13, $14, convert_to($19, 'UTF8'), 'Pending', 0, $15::integer, to_timestamp($16),
                  GREATEST(-(SELECT t FROM tag), -2147483647)::integer, ''::hstore, NULL
           FROM st WHERE NOT blocked
           RETURNING id
         ),
         ev AS (
           INSERT INTO deployment_events (deployment_id, n, state, build_id, at)
           SELECT $2, COALESCE(MAX(n), 0) + 1, $17::text, $1, $7 FROM deployment_events WHERE deployment_id = $2
           HAVING $17::text IS NOT NULL
           RETURNING n
         )
         SELECT CASE WHEN (SELECT b FROM {SPAN}) + 1 + current_setting('max_connections')::bigint <= $18
                     THEN (SELECT b FROM {SPAN}) + 1
                     ELSE (SELECT COUNT(*) FROM (SELECT 1 FROM builds WHERE status = 'queued'
                                                   AND id NOT IN (SELECT id FROM sup) LIMIT $18) AS others) + 1
                END AS queued,
                current_setting('max_connections')::bigint AS unseen,
                (SELECT dispatched FROM ins) AS dispatched,
                (SELECT CASE WHEN busy THEN 1 ELSE 0 END FROM st)::bigint AS busy,
                (SELECT id FROM job) AS job_id,
                (SELECT n FROM ev) AS event,
                {kept}",
        kept = kept_pins_column(w.check_kept_secrets),
        tag = super::fair::tag_sql(Engine::Postgres, "$22")
    );
    let row = bind_statement_2(Q::new(sql), &b, w, now)
        .text(super::queue::build_job_payload(b.id))
        .text(b.trigger.as_str())
        .opt_text(builds::provenance_text(&b).as_deref())
        .text(super::fair::tenant_of(&b))
        .fetch_one(conn)
        .await?;
    crate::failpoint::hit("build_inserted");
    // Sent once the transaction has committed (`Conn::notify`).
    if let Some(job) = row.opt_text("job_id")? {
        conn.notify_new_job(BUILDS_QUEUE, &job).await?;
    }
    if row.opt_int("event")?.is_some() {
        conn.notify(events::NOTIFY_CHANNEL, b.deployment_id.to_owned()).await?;
    }
    let dispatched = row.int("dispatched")? == 1;
    if dispatched {
        crate::failpoint::hit("job_pushed");
    } else if row.int("busy")? == 0 {
        // An earlier build waits with none dispatched: its turn, not ours.
        builds::dispatch_next(conn, b.deployment_id).await?;
    }
    Ok(Written {
        queued: row.int("queued")?,
        unseen: row.int("unseen")?,
        dispatched,
        secrets_kept: secrets_kept(&row)?,
    })
}

async fn write_build_sqlite(
    conn: &mut Conn,
    b: builds::NewBuild<'_>,
    w: WriteBuild,
    now: i64,
) -> Result<Written, StoreError> {
    // One round trip to the connection's thread: the statements run in
    // order, each binding the numbered values it names, and the last one
    // reads back what they did. The build's turn has come when no other
    // build of the deployment is queued or running (ST-2); its job is then
    // the row apalis-sqlite's own push writes (`push_tasks`; the test
    // `the_folded_job_push_writes_the_row_apalis_writes` compares them).
    // The event's `HAVING` writes nothing for a dry run.
    let sql = format!(
        "{SUPERSEDE};
         INSERT INTO builds (id, deployment_id, kind, status, configuration, module_source, instances, queued_at,
                             operator_secrets, readiness, dry_run, trigger_kind, provenance, dispatched, version,
                             tenant, fair_tag)
         SELECT $1, $2, $3, 'queued', $4, $5, $6, $7, $8, $9, $10, $21, $22, turn, turn,
                $23, CASE WHEN turn = 1 THEN {tag} ELSE NULL END
         FROM (SELECT CASE WHEN EXISTS (SELECT 1 FROM builds WHERE deployment_id = $2
                                          AND status IN ('queued', 'running'))
                           THEN 0 ELSE 1 END AS turn) AS t;
         INSERT INTO Jobs (job, id, job_type, status, attempts, max_attempts, run_at, last_result, lock_at, lock_by,
                           done_at, priority, metadata, idempotency_key)
         SELECT $19, $13, $14, 'Pending', 0, $15, $16, NULL, NULL, NULL, NULL, -fair_tag, $20, NULL
         FROM builds WHERE id = $1 AND dispatched = 1;
         INSERT INTO deployment_events (deployment_id, n, state, build_id, at)
         SELECT $2, COALESCE(MAX(n), 0) + 1, $17, $1, $7 FROM deployment_events WHERE deployment_id = $2
         HAVING $17 IS NOT NULL;
         SELECT (SELECT dispatched FROM builds WHERE id = $1) AS dispatched,
                EXISTS (SELECT 1 FROM builds WHERE deployment_id = $2 AND status IN ('queued', 'running')
                          AND dispatched = 1) AS busy,
                CASE WHEN b <= $18 THEN b
                     ELSE (SELECT COUNT(*) FROM (SELECT 1 FROM builds WHERE status = 'queued' LIMIT $18 + 1) AS q)
                END AS queued,
                {kept}
         FROM {SPAN}",
        kept = kept_pins_column(w.check_kept_secrets),
        tag = super::fair::tag_sql(Engine::Sqlite, "$23")
    );
    let rows = bind_statement_2(Q::new(sql), &b, w, now)
        .bytes(super::queue::build_job_payload(b.id))
        .text(super::queue::SQLITE_JOB_METADATA)
        .text(b.trigger.as_str())
        .opt_text(builds::provenance_text(&b).as_deref())
        .text(super::fair::tenant_of(&b))
        .fetch_all(conn)
        .await?;
    let row = rows.last().ok_or_else(|| StoreError::Queue("the submit's statement read nothing back".to_owned()))?;
    crate::failpoint::hit("build_inserted");
    let dispatched = row.int("dispatched")? == 1;
    if dispatched {
        crate::failpoint::hit("job_pushed");
    } else if row.int("busy")? == 0 {
        // An earlier build waits with none dispatched: its turn, not ours.
        builds::dispatch_next(conn, b.deployment_id).await?;
    }
    Ok(Written { queued: row.int("queued")?, unseen: 0, dispatched, secrets_kept: secrets_kept(row)? })
}
