//! Build rows and their dispatch to the job queue (Q-1, ST-2, ST-3).
//!
//! A build is inserted `queued`. Its job is pushed by [`dispatch_next`], in
//! the caller's transaction, only when it is the earliest waiting build of
//! its deployment and no other build of that deployment is dispatched and
//! unfinished; the transaction that ends a build dispatches the next one. So
//! one build per deployment runs at a time, fleet-wide, in submit order,
//! without workers polling for their turn.
//!
//! Every function runs on the caller's connection or transaction and opens
//! none of its own; changes that must hold together (a build and its job, a
//! build's end and the next dispatch) are the caller's transaction.

mod callback_columns;

pub use callback_columns::{
    callback_outcome, interrupt_callback, record_callback, set_callback, settle_callback, take_callback, CallbackState,
};

use super::queue::{push, BuildJob};
use super::{json_col, Conn, Engine, Row, StoreError, Q};
use crate::provenance::{Provenance, Trigger};
use crate::source::outputs::Instance;
use crate::state::{BuildKind, BuildStatus};
use serde_json::Value;

/// A stored build (without its log, which [`log`] reads).
#[derive(Debug, Clone)]
pub struct BuildRow {
    /// ST-4 id.
    pub id: String,
    /// Submit order.
    pub seq: i64,
    /// Its deployment.
    pub deployment_id: String,
    /// Deploy or destroy.
    pub kind: BuildKind,
    /// Where it is.
    pub status: BuildStatus,
    /// Why it failed (`effect_failed`, `nodes_failed`, `timeout`, `source_unavailable`, …).
    pub reason: Option<String>,
    /// A sentence for people.
    pub error: Option<String>,
    /// Configuration snapshot the effect runs on.
    pub configuration: Value,
    /// Its module source.
    pub module_source: Option<String>,
    /// TF-1 instances of this build's configuration.
    pub instances: Vec<Instance>,
    /// The run report, once finished.
    pub report: Option<Value>,
    /// How many times a worker started it.
    pub attempts: i64,
    /// Someone asked to cancel it while it ran.
    pub cancel_requested: bool,
    /// The worker that runs or ran it.
    pub worker: Option<String>,
    /// ST-3 version.
    pub version: i64,
    /// Unix ms.
    pub queued_at: i64,
    /// Unix ms of the latest start.
    pub started_at: Option<i64>,
    /// Unix ms.
    pub finished_at: Option<i64>,
    /// A destroy's reconcile push URL (DL-2), when the delete gave one that was accepted.
    pub callback_url: Option<String>,
    /// The push's outcome ([`CallbackState`] and more, as JSON), once a
    /// callback was accepted. The callback token is never read into a row.
    pub callback: Option<Value>,
    /// The operator secrets its deploy reads and clears, pinned at its
    /// submit (§8); `None` when it has none.
    pub operator_secrets: Option<crate::secrets::SecretPins>,
    /// How its instances are probed once it succeeds (§10), from its module
    /// source's meta; `None` for a destroy.
    pub readiness: Option<crate::source::outputs::ReadinessMeta>,
    /// A dry run (§11): evaluates and builds, changes nothing, and never
    /// counts for the deployment's state.
    pub dry_run: bool,
    /// Why it was queued (a build stored before triggers were recorded:
    /// [`Trigger::of_legacy`]).
    pub trigger: Trigger,
    /// Who asked, what it was made from and what it must activate
    /// (empty on older builds).
    pub provenance: Provenance,
    /// Where a running build is beyond its effect: `verifying` while its
    /// health gate waits for its instances; `None` otherwise.
    pub phase: Option<String>,
}

const COLUMNS: &str = "id, seq, deployment_id, kind, status, reason, error, configuration, module_source, instances, \
                       report, attempts, cancel_requested, worker, version, queued_at, started_at, finished_at, \
                       callback_url, callback, operator_secrets, readiness, dry_run, trigger_kind, provenance, phase";

fn parse<T: std::str::FromStr<Err = String>>(col: &str, v: String) -> Result<T, StoreError> {
    v.parse().map_err(|e: String| StoreError::Corrupt(format!("builds.{col}: {e}")))
}

fn from_row(r: &Row) -> Result<BuildRow, StoreError> {
    let kind: BuildKind = parse("kind", r.text("kind")?)?;
    let dry_run = r.int("dry_run")? != 0;
    let trigger = match r.opt_text("trigger_kind")? {
        Some(t) => parse("trigger_kind", t)?,
        None => Trigger::of_legacy(kind, dry_run),
    };
    Ok(BuildRow {
        id: r.text("id")?,
        seq: r.int("seq")?,
        deployment_id: r.text("deployment_id")?,
        kind,
        status: parse("status", r.text("status")?)?,
        reason: r.opt_text("reason")?,
        error: r.opt_text("error")?,
        configuration: json_col(&r.text("configuration")?, "builds.configuration")?,
        module_source: r.opt_text("module_source")?,
        instances: json_col(&r.text("instances")?, "builds.instances")?,
        report: r.opt_text("report")?.map(|t| json_col(&t, "builds.report")).transpose()?,
        attempts: r.int("attempts")?,
        cancel_requested: r.int("cancel_requested")? != 0,
        worker: r.opt_text("worker")?,
        version: r.int("version")?,
        queued_at: r.int("queued_at")?,
        started_at: r.opt_int("started_at")?,
        finished_at: r.opt_int("finished_at")?,
        callback_url: r.opt_text("callback_url")?,
        callback: r.opt_text("callback")?.map(|t| json_col(&t, "builds.callback")).transpose()?,
        operator_secrets: r
            .opt_text("operator_secrets")?
            .map(|t| json_col(&t, "builds.operator_secrets"))
            .transpose()?,
        readiness: r.opt_text("readiness")?.map(|t| json_col(&t, "builds.readiness")).transpose()?,
        dry_run,
        trigger,
        provenance: r
            .opt_text("provenance")?
            .map(|t| json_col(&t, "builds.provenance"))
            .transpose()?
            .unwrap_or_default(),
        phase: r.opt_text("phase")?,
    })
}

/// Reads one build.
pub async fn get(conn: &mut Conn, id: &str) -> Result<Option<BuildRow>, StoreError> {
    let row = Q::new(format!("SELECT {COLUMNS} FROM builds WHERE id = $1")).text(id).fetch_optional(conn).await?;
    row.as_ref().map(from_row).transpose()
}

/// The build log so far (streamed in while the build runs, Q-4); `None`
/// when there is no such build.
pub async fn log(conn: &mut Conn, id: &str) -> Result<Option<String>, StoreError> {
    if Q::new("SELECT id FROM builds WHERE id = $1").text(id).fetch_optional(conn).await?.is_none() {
        return Ok(None);
    }
    let chunks =
        Q::new("SELECT chunk FROM build_log_chunks WHERE build_id = $1 ORDER BY seq").text(id).fetch_all(conn).await?;
    let mut log = String::new();
    for c in chunks {
        log.push_str(&c.text("chunk")?);
    }
    Ok(Some(log))
}

/// A build's log chunks numbered after `after`, oldest first, at most
/// `limit`: `(number, text)`. Numbers grow within a build (each attempt
/// starts at [`log_base`]), so they serve as the log stream's event ids.
pub async fn log_since(conn: &mut Conn, id: &str, after: i64, limit: i64) -> Result<Vec<(i64, String)>, StoreError> {
    Q::new("SELECT seq, chunk FROM build_log_chunks WHERE build_id = $1 AND seq > $2 ORDER BY seq LIMIT $3")
        .text(id)
        .int(after)
        .int(limit)
        .fetch_all(conn)
        .await?
        .iter()
        .map(|r| Ok((r.int("seq")?, r.text("chunk")?)))
        .collect()
}

/// The number of a build's last log chunk; `None` without a log.
pub async fn log_last(conn: &mut Conn, id: &str) -> Result<Option<i64>, StoreError> {
    Q::new("SELECT MAX(seq) AS last FROM build_log_chunks WHERE build_id = $1")
        .text(id)
        .fetch_one(conn)
        .await?
        .opt_int("last")
}

/// The first chunk number of `attempt`'s log: each attempt numbers its
/// chunks from `attempt << 32`, so two attempts that overlap (a worker taken
/// for dead that still runs) never collide, and chunks read in attempt order.
pub fn log_base(attempt: i64) -> i64 {
    attempt << 32
}

/// Where attempt `attempt` of a build's log ends: its next chunk number,
/// and the bytes stored over all attempts (the limit is per build).
pub async fn log_end(conn: &mut Conn, id: &str, attempt: i64) -> Result<(i64, i64), StoreError> {
    let row = Q::new(
        "SELECT COALESCE(MAX(CASE WHEN seq >= $2 THEN seq END), $2) AS last, COALESCE(SUM(LENGTH(chunk)), 0) AS bytes
         FROM build_log_chunks WHERE build_id = $1",
    )
    .text(id)
    .int(log_base(attempt))
    .fetch_one(conn)
    .await?;
    Ok((row.int("last")? + 1, row.int("bytes")?))
}

/// The latest build of a deployment that is not a dry run.
pub async fn latest(conn: &mut Conn, deployment: &str) -> Result<Option<BuildRow>, StoreError> {
    newest(conn, deployment, Newest::Any).await
}

/// The build that decides a deployment's state (ST-1): its latest build
/// that ran or may still run. A build cancelled before it started, or
/// superseded by a newer submit, changed nothing and does not count;
/// nor does a dry run (§11).
pub async fn deciding(conn: &mut Conn, deployment: &str) -> Result<Option<BuildRow>, StoreError> {
    newest(conn, deployment, Newest::Deciding).await
}

/// Which build of a deployment [`newest`] and [`newest_of_each`] read:
/// the newest (highest `seq`) of the deployment's builds that are not dry
/// runs and meet the condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Newest {
    /// Any build ([`latest`]).
    Any,
    /// One that ran or may still run ([`deciding`]).
    Deciding,
    /// One that succeeded ([`latest_succeeded`]).
    Succeeded,
    /// A deploy that succeeded: the active build, or a rollback's target.
    SucceededDeploy,
}

impl Newest {
    /// The condition on a build aliased `b`.
    fn condition(self) -> &'static str {
        match self {
            Newest::Any => "b.dry_run = 0",
            Newest::Deciding => {
                "b.dry_run = 0 AND (b.status NOT IN ('cancelled', 'superseded') OR b.started_at IS NOT NULL)"
            }
            Newest::Succeeded => "b.dry_run = 0 AND b.status = 'succeeded'",
            Newest::SucceededDeploy => "b.dry_run = 0 AND b.status = 'succeeded' AND b.kind = 'deploy'",
        }
    }
}

/// The newest build of `deployment` that `which` picks; `None` when none.
/// One statement on `builds_by_deployment`, read backwards.
pub async fn newest(conn: &mut Conn, deployment: &str, which: Newest) -> Result<Option<BuildRow>, StoreError> {
    let row = Q::new(newest_sql(which)).text(deployment).fetch_optional(conn).await?;
    row.as_ref().map(from_row).transpose()
}

/// [`newest`]'s statement: the deployment is `$1`.
pub fn newest_sql(which: Newest) -> String {
    format!(
        "SELECT {COLUMNS} FROM builds b WHERE b.deployment_id = $1 AND {} ORDER BY b.seq DESC LIMIT 1",
        which.condition()
    )
}

/// [`newest_of_each`]'s statement for `n` deployments (`$1` … `$n`).
pub fn newest_of_each_sql(which: Newest, n: usize) -> String {
    format!(
        "SELECT {COLUMNS} FROM builds WHERE seq IN (
           SELECT (SELECT b.seq FROM builds b WHERE b.deployment_id = d.id AND {} ORDER BY b.seq DESC LIMIT 1)
           FROM deployments d WHERE d.id IN {})",
        which.condition(),
        super::placeholders(1, n)
    )
}

/// [`newest`] for each of `deployments` at once, by deployment id (those
/// with no such build, or not stored, are absent): one statement, which
/// looks up each deployment's newest build as [`newest`] does.
pub async fn newest_of_each(
    conn: &mut Conn,
    deployments: &[String],
    which: Newest,
) -> Result<std::collections::HashMap<String, BuildRow>, StoreError> {
    if deployments.is_empty() {
        return Ok(Default::default());
    }
    let q = Q::new(newest_of_each_sql(which, deployments.len()));
    let rows = q.texts(deployments).fetch_all(conn).await?;
    rows.iter().map(|r| from_row(r).map(|b| (b.deployment_id.clone(), b))).collect()
}

/// The latest succeeded build of a deployment (TF-1: instances of the last successful build).
pub async fn latest_succeeded(conn: &mut Conn, deployment: &str) -> Result<Option<BuildRow>, StoreError> {
    newest(conn, deployment, Newest::Succeeded).await
}

/// What a new build carries.
#[derive(Debug, Clone, Copy)]
pub struct NewBuild<'a> {
    /// ST-4 id.
    pub id: &'a str,
    /// Its deployment (must exist).
    pub deployment_id: &'a str,
    /// Deploy or destroy.
    pub kind: BuildKind,
    /// Snapshot the effect runs on.
    pub configuration: &'a Value,
    /// Module source, if any.
    pub module_source: Option<&'a str>,
    /// TF-1 instances.
    pub instances: &'a [Instance],
    /// The operator secrets it reads and clears (§8), pinned; `None`: none.
    pub operator_secrets: Option<&'a crate::secrets::SecretPins>,
    /// How its instances are probed (§10); `None` for a destroy.
    pub readiness: Option<&'a crate::source::outputs::ReadinessMeta>,
    /// A dry run (§11).
    pub dry_run: bool,
    /// Why it is queued.
    pub trigger: Trigger,
    /// Who asked and what it was made from; `None`: nothing recorded.
    pub provenance: Option<&'a Provenance>,
}

/// The pins of `deployment`'s latest build that has operator secrets
/// (§8): the versions its latest accepted submit read from or wrote to
/// OpenBao. `None` when no build of it has any.
pub async fn latest_secret_pins(
    conn: &mut Conn,
    deployment: &str,
) -> Result<Option<crate::secrets::SecretPins>, StoreError> {
    let row = Q::new(latest_secret_pins_sql("$1", None)).text(deployment).fetch_optional(conn).await?;
    row.map(|r| json_col(&r.text("operator_secrets")?, "builds.operator_secrets")).transpose()
}

/// The statement of [`latest_secret_pins`]: the `operator_secrets` of the
/// newest build (not a dry run) that has them of the deployment whose id
/// is bound at placeholder `deployment` (such as `$1`), leaving out the
/// build whose id is bound at `excluding`. Also a column of a submit's
/// statement 2 ([`super::submit::write_build`]).
pub(crate) fn latest_secret_pins_sql(deployment: &str, excluding: Option<&str>) -> String {
    let excluding = excluding.map(|id| format!(" AND id <> {id}")).unwrap_or_default();
    format!(
        "SELECT operator_secrets FROM builds WHERE deployment_id = {deployment}{excluding}
           AND operator_secrets IS NOT NULL AND dry_run = 0 ORDER BY seq DESC LIMIT 1"
    )
}

/// The `(application, field)` pairs that builds of `deployment` submitted
/// after `seq` set (§8): a deploy submitted earlier must not clear them,
/// since a value given later wins over its clear.
pub async fn secrets_set_after(
    conn: &mut Conn,
    deployment: &str,
    seq: i64,
) -> Result<Vec<(String, String)>, StoreError> {
    let rows = Q::new(
        "SELECT operator_secrets FROM builds WHERE deployment_id = $1 AND seq > $2 AND operator_secrets IS NOT NULL",
    )
    .text(deployment)
    .int(seq)
    .fetch_all(conn)
    .await?;
    let mut set = Vec::new();
    for r in rows {
        let pins: crate::secrets::SecretPins = json_col(&r.text("operator_secrets")?, "builds.operator_secrets")?;
        set.extend(pins.set.into_iter().map(|p| (p.application, p.field)));
    }
    Ok(set)
}

/// Inserts a queued build (its job is pushed by [`dispatch_next`]). Call
/// inside the transaction that caused it, after [`Conn::lock_deployment`].
pub async fn insert(conn: &mut Conn, b: NewBuild<'_>, now: i64) -> Result<(), StoreError> {
    bind_new_build(
        Q::new(
            "INSERT INTO builds (id, deployment_id, kind, status, configuration, module_source, instances, queued_at,
                                 operator_secrets, readiness, dry_run, trigger_kind, provenance, tenant)
             VALUES ($1, $2, $3, 'queued', $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        ),
        &b,
        now,
    )
    .text(b.trigger.as_str())
    .opt_text(provenance_text(&b).as_deref())
    .text(super::fair::tenant_of(&b))
    .execute(conn)
    .await?;
    Ok(())
}

/// Binds a new build's columns as `$1`–`$10`: id, deployment, kind,
/// configuration, module source, instances, `now` (its `queued_at`), its
/// secret pins (absent when none), readiness settings, dry run. Every
/// statement that inserts a build ([`insert`], the submit's folded
/// statements in `store::submit`) binds them so.
pub(crate) fn bind_new_build(q: Q, b: &NewBuild<'_>, now: i64) -> Q {
    q.text(b.id)
        .text(b.deployment_id)
        .text(b.kind.as_str())
        .text(b.configuration.to_string())
        .opt_text(b.module_source)
        .text(serde_json::to_string(b.instances).expect("instances serialise"))
        .int(now)
        .opt_text(
            b.operator_secrets
                .filter(|p| !p.is_empty())
                .map(|p| serde_json::to_string(p).expect("pins serialise"))
                .as_deref(),
        )
        .opt_text(b.readiness.map(|r| serde_json::to_string(r).expect("readiness settings serialise")).as_deref())
        .int(i64::from(b.dry_run))
}

/// The `provenance` column of a new build: its JSON, `None` when nothing
/// is recorded. Every statement that inserts a build binds it after the
/// trigger's name (`trigger_kind`).
pub(crate) fn provenance_text(b: &NewBuild<'_>) -> Option<String> {
    b.provenance.filter(|p| !p.is_empty()).map(|p| serde_json::to_string(p).expect("provenance serialises"))
}

/// ST-2: when no build of `deployment` is dispatched and unfinished, pushes
/// the job of its earliest waiting build (same transaction as the caller,
/// which holds the deployment's lock).
pub async fn dispatch_next(conn: &mut Conn, deployment: &str) -> Result<(), StoreError> {
    let busy = Q::new(
        "SELECT id FROM builds WHERE deployment_id = $1 AND dispatched = 1 AND status IN ('queued', 'running') LIMIT 1",
    )
    .text(deployment)
    .fetch_optional(conn)
    .await?;
    if busy.is_some() {
        return Ok(());
    }
    // FS-1: its place in the fair order, from its tenant's outstanding builds.
    let next = Q::new(format!(
        "SELECT id, {tag} AS tag FROM builds AS next
         WHERE deployment_id = $1 AND status = 'queued' AND dispatched = 0 ORDER BY seq LIMIT 1",
        tag = super::fair::tag_sql(conn.engine(), "COALESCE(next.tenant, '')")
    ))
    .text(deployment)
    .fetch_optional(conn)
    .await?;
    let Some(next) = next else { return Ok(()) };
    let build_id = next.text("id")?;
    let tag = next.int("tag")?;
    super::queue::push_with_priority(
        conn,
        &BuildJob { build_id: build_id.clone() },
        None,
        super::fair::task_priority(tag),
    )
    .await?;
    crate::failpoint::hit("job_pushed");
    Q::new("UPDATE builds SET dispatched = 1, fair_tag = $2, version = version + 1 WHERE id = $1")
        .text(&build_id)
        .int(tag)
        .execute(conn)
        .await?;
    Ok(())
}

/// Queues another job for a dispatched build, to run after `delay`: a
/// worker found the build held by a live worker and looks again later
/// (the job it holds is then acknowledged).
pub async fn push_recheck(conn: &mut Conn, id: &str, delay: std::time::Duration) -> Result<(), StoreError> {
    push(conn, &BuildJob { build_id: id.to_owned() }, Some(delay)).await
}

/// Marks build `row` (as read) `running` for `worker` as its next attempt:
/// a conditional update on the version read (ST-3). `false`: the row changed
/// since it was read; read it again and decide again.
pub async fn claim(conn: &mut Conn, row: &BuildRow, worker: &str, now: i64) -> Result<bool, StoreError> {
    let changed = Q::new(
        "UPDATE builds SET status = 'running', attempts = attempts + 1, worker = $1, started_at = $2,
                phase = NULL, version = version + 1
         WHERE id = $3 AND version = $4",
    )
    .text(worker)
    .int(now)
    .text(&row.id)
    .int(row.version)
    .execute(conn)
    .await?;
    Ok(changed == 1)
}

/// Sets the phase of `build` (`verifying`, or `None`), only while its
/// claim holds (same worker, same attempt, still running); whether it did.
pub async fn set_phase(conn: &mut Conn, build: &BuildRow, phase: Option<&str>) -> Result<bool, StoreError> {
    let changed = Q::new(
        "UPDATE builds SET phase = $1, version = version + 1
         WHERE id = $2 AND status = 'running' AND worker = $3 AND attempts = $4",
    )
    .opt_text(phase)
    .text(&build.id)
    .opt_text(build.worker.clone())
    .int(build.attempts)
    .execute(conn)
    .await?;
    Ok(changed == 1)
}

/// Appends chunk number `seq` to a build's log (Q-4: readable while it
/// runs), only while `build`'s claim holds (same worker, same attempt, still
/// running): a worker whose build was taken over writes nothing more.
/// Returns whether the chunk was stored.
pub async fn append_log(conn: &mut Conn, build: &BuildRow, seq: i64, chunk: &str) -> Result<bool, StoreError> {
    let stored = Q::new(
        "INSERT INTO build_log_chunks (build_id, seq, chunk)
         SELECT id, $2, $3 FROM builds WHERE id = $1 AND status = 'running' AND worker = $4 AND attempts = $5",
    )
    .text(&build.id)
    .int(seq)
    .text(chunk)
    .opt_text(build.worker.clone())
    .int(build.attempts)
    .execute(conn)
    .await?;
    Ok(stored == 1)
}

/// How a build ended.
#[derive(Debug, Clone)]
pub struct Finish {
    /// `Succeeded`, `Failed` or `Cancelled`.
    pub status: BuildStatus,
    /// Machine-readable reason of a failure.
    pub reason: Option<String>,
    /// A sentence for people.
    pub error: Option<String>,
    /// The run report.
    pub report: Value,
}

/// Records how `build` ended, conditional on the claim it was run under
/// (same worker, same attempt, still running): when another worker took
/// the build over, nothing is written (`Ok(false)`). A cancel request
/// changes the row's version but not the claim, so it does not stop the
/// worker from recording the end.
pub async fn finish(conn: &mut Conn, build: &BuildRow, outcome: &Finish, now: i64) -> Result<bool, StoreError> {
    let changed = Q::new(
        "UPDATE builds SET status = $1, reason = $2, error = $3, report = $4, finished_at = $5, phase = NULL,
                           version = version + 1
         WHERE id = $6 AND status = 'running' AND worker = $7 AND attempts = $8",
    )
    .text(outcome.status.as_str())
    .opt_text(outcome.reason.clone())
    .opt_text(outcome.error.clone())
    .text(outcome.report.to_string())
    .int(now)
    .text(&build.id)
    .opt_text(build.worker.clone())
    .int(build.attempts)
    .execute(conn)
    .await?;
    Ok(changed == 1)
}

/// The stored trigger of a build aliased `b`, with the one a build made
/// before triggers were recorded has ([`Trigger::of_legacy`]).
pub(crate) const TRIGGER_SQL: &str = "COALESCE(b.trigger_kind, CASE WHEN b.kind = 'destroy' THEN 'delete' \
                           WHEN b.dry_run = 1 THEN 'dry_run' ELSE 'submit' END)";

/// A deployment's builds, newest first, at most `limit`; with `before`
/// (a `seq`), only those submitted before it (keyset paging); with
/// `trigger`, only those it made.
pub async fn list(
    conn: &mut Conn,
    deployment: &str,
    before: Option<i64>,
    limit: i64,
    trigger: Option<Trigger>,
) -> Result<Vec<BuildRow>, StoreError> {
    let filter = if trigger.is_some() { format!(" AND {TRIGGER_SQL} = $4") } else { String::new() };
    let mut q = Q::new(format!(
        "SELECT {COLUMNS} FROM builds b WHERE deployment_id = $1 AND seq < $2{filter} ORDER BY seq DESC LIMIT $3"
    ))
    .text(deployment)
    .int(before.unwrap_or(i64::MAX))
    .int(limit);
    if let Some(t) = trigger {
        q = q.text(t.as_str());
    }
    let rows = q.fetch_all(conn).await?;
    rows.iter().map(from_row).collect()
}

/// [`newest`] among the builds of `deployment` submitted before `seq`:
/// with [`Newest::Any`], what a build's changes are counted from (the run
/// history); with [`Newest::SucceededDeploy`], a rollback's default target.
pub async fn newest_before(
    conn: &mut Conn,
    deployment: &str,
    which: Newest,
    seq: i64,
) -> Result<Option<BuildRow>, StoreError> {
    let row = Q::new(format!(
        "SELECT {COLUMNS} FROM builds b WHERE b.deployment_id = $1 AND b.seq < $2 AND {} ORDER BY b.seq DESC LIMIT 1",
        which.condition()
    ))
    .text(deployment)
    .int(seq)
    .fetch_optional(conn)
    .await?;
    row.as_ref().map(from_row).transpose()
}

/// The `(application, field, build id)` of each OpenBao entry a successful
/// build of `deployment` submitted after `seq` cleared (§8: a clear
/// deletes every version), so that no build before it can read them again.
pub async fn cleared_after_by(
    conn: &mut Conn,
    deployment: &str,
    seq: i64,
) -> Result<Vec<(String, String, String)>, StoreError> {
    let rows = Q::new(
        "SELECT id, operator_secrets FROM builds WHERE deployment_id = $1 AND seq > $2 AND status = 'succeeded'
           AND dry_run = 0 AND operator_secrets IS NOT NULL",
    )
    .text(deployment)
    .int(seq)
    .fetch_all(conn)
    .await?;
    let mut cleared = Vec::new();
    for r in rows {
        let pins: crate::secrets::SecretPins = json_col(&r.text("operator_secrets")?, "builds.operator_secrets")?;
        let id = r.text("id")?;
        cleared.extend(pins.clear.into_iter().map(|c| (c.application, c.field, id.clone())));
    }
    Ok(cleared)
}

/// Whether a build of `build`'s deployment submitted after it (not a dry
/// run) is queued: a newer submit, which an automatic rollback must not
/// supersede.
pub async fn newer_waiting(conn: &mut Conn, build: &BuildRow) -> Result<bool, StoreError> {
    let row = Q::new(
        "SELECT id FROM builds WHERE deployment_id = $1 AND seq > $2 AND status = 'queued' AND dry_run = 0 LIMIT 1",
    )
    .text(&build.deployment_id)
    .int(build.seq)
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
}

/// Why queued build `build` waits, as two counts read in one statement:
/// the oldest other build of its deployment submitted before it that is
/// queued or running (ST-2: it waits for that one), and the queued builds
/// already handed to the queue before it (its position among those
/// waiting for a build slot).
pub async fn waiting_ahead(conn: &mut Conn, build: &BuildRow) -> Result<(Option<String>, i64), StoreError> {
    let row = Q::new(
        "SELECT (SELECT id FROM builds WHERE deployment_id = $1 AND seq < $2 AND status IN ('queued', 'running')
                 ORDER BY seq LIMIT 1) AS ahead,
                (SELECT COUNT(*) FROM builds WHERE status = 'queued' AND dispatched = 1 AND seq < $2) AS before",
    )
    .text(&build.deployment_id)
    .int(build.seq)
    .fetch_one(conn)
    .await?;
    Ok((row.opt_text("ahead")?, row.int("before")?))
}

/// How many builds wait for a worker, counted up to `cap` (Q-3 admission
/// only asks whether the queue is full, so a long queue costs no more to
/// check than `cap` index entries). Tests only: the submit counts with
/// [`queued_up_to_and_unseen`].
#[cfg(any(test, feature = "test-support"))]
pub async fn queued_up_to(conn: &mut Conn, cap: i64) -> Result<i64, StoreError> {
    Ok(queued_up_to_and_unseen(conn, cap).await?.0)
}

/// How many builds wait for a worker, counted up to `cap`, and at
/// most how many other transactions may be writing beside this one, unseen
/// by its count: PostgreSQL's
/// `max_connections` (each needs a connection); 0 on SQLite, where
/// `BEGIN IMMEDIATE` lets one writer in at a time. One statement.
pub async fn queued_up_to_and_unseen(conn: &mut Conn, cap: i64) -> Result<(i64, i64), StoreError> {
    let unseen = match conn.engine() {
        Engine::Sqlite => "0",
        Engine::Postgres => "current_setting('max_connections')::bigint",
    };
    let row = Q::new(format!(
        "SELECT COUNT(*) AS n, {unseen} AS unseen FROM (SELECT 1 FROM builds WHERE status = 'queued' LIMIT $1) AS queued"
    ))
    .int(cap)
    .fetch_one(conn)
    .await?;
    Ok((row.int("n")?, row.int("unseen")?))
}

/// Cancels queued build `build` (as read): it never runs. Conditional on
/// the version read (ST-3); `false` when the row changed since.
pub async fn cancel_queued(conn: &mut Conn, build: &BuildRow, now: i64) -> Result<bool, StoreError> {
    let changed = Q::new(
        "UPDATE builds SET status = 'cancelled', reason = 'cancelled', error = 'cancelled before it ran',
                finished_at = $1, version = version + 1 WHERE id = $2 AND version = $3",
    )
    .int(now)
    .text(&build.id)
    .int(build.version)
    .execute(conn)
    .await?;
    Ok(changed == 1)
}

/// Asks the worker of running build `build` (as read) to stop it.
/// Conditional on the version read (ST-3); `false` when the row changed since.
pub async fn request_cancel(conn: &mut Conn, build: &BuildRow) -> Result<bool, StoreError> {
    let changed =
        Q::new("UPDATE builds SET cancel_requested = 1, version = version + 1 WHERE id = $1 AND version = $2")
            .text(&build.id)
            .int(build.version)
            .execute(conn)
            .await?;
    Ok(changed == 1)
}

/// Where a running build stands for the worker that claimed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimStatus {
    /// The claim is still this worker's: same worker, same attempt, still running.
    pub held: bool,
    /// Someone asked to cancel the build.
    pub cancel_requested: bool,
}

/// Whether `build`'s claim (worker and attempt, as claimed) still holds,
/// and whether someone asked to cancel it. A build that is gone or
/// finished counts as not held.
pub async fn claim_status(conn: &mut Conn, build: &BuildRow) -> Result<ClaimStatus, StoreError> {
    let row = Q::new("SELECT status, worker, attempts, cancel_requested FROM builds WHERE id = $1")
        .text(&build.id)
        .fetch_optional(conn)
        .await?;
    let Some(row) = row else { return Ok(ClaimStatus { held: false, cancel_requested: false }) };
    let held = row.text("status")? == BuildStatus::Running.as_str()
        && row.opt_text("worker")? == build.worker
        && row.int("attempts")? == build.attempts;
    Ok(ClaimStatus { held, cancel_requested: row.int("cancel_requested")? != 0 })
}

/// Empties the logs of builds that finished before `cutoff` (Unix ms; Q-6)
/// and returns how many builds had a log to empty.
pub async fn clear_logs_finished_before(conn: &mut Conn, cutoff: i64) -> Result<u64, StoreError> {
    let old = "SELECT id FROM builds WHERE finished_at < $1";
    let logs = Q::new(format!("SELECT COUNT(DISTINCT build_id) AS n FROM build_log_chunks WHERE build_id IN ({old})"))
        .int(cutoff)
        .fetch_one(conn)
        .await?
        .int("n")? as u64;
    Q::new(format!("DELETE FROM build_log_chunks WHERE build_id IN ({old})")).int(cutoff).execute(conn).await?;
    Ok(logs)
}

/// When build `id` finished (Unix ms; `None` while it has not) and how many
/// attempts it has had; `None` for a build this database does not have.
pub async fn ending(conn: &mut Conn, id: &str) -> Result<Option<(Option<i64>, i64)>, StoreError> {
    let row = Q::new("SELECT finished_at, attempts FROM builds WHERE id = $1").text(id).fetch_optional(conn).await?;
    row.map(|r| Ok((r.opt_int("finished_at")?, r.int("attempts")?))).transpose()
}
