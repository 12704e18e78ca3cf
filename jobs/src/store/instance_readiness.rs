//! Instances' readiness (PRODUCT.md §10): `instance_readiness`, one row
//! per instance of a deployment's last successful deploy. A deploy's
//! success replaces the rows with `pending` ones ([`begin`]), in the
//! transaction that records it; the `readiness` job and `run wait-ready`
//! write what their probes find ([`record`], only while the rows still
//! belong to that deploy); a destroy's success removes them ([`clear`]).

use super::{Conn, Row, StoreError, Q};
use crate::probe::State;
use crate::source::outputs::Instance;

/// One instance's readiness, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadinessRow {
    /// The deployment.
    pub deployment_id: String,
    /// The instance's name (TF-1).
    pub instance: String,
    /// The deploy whose instances these are.
    pub build_id: String,
    /// The instance's URL.
    pub url: String,
    /// Its state.
    pub state: State,
    /// Why it is not ready (the last reason seen).
    pub reason: Option<String>,
    /// How many probes asked it.
    pub probes: i64,
    /// When the deploy that made it succeeded, Unix ms.
    pub since: i64,
    /// When it was last probed, Unix ms.
    pub checked_at: Option<i64>,
    /// When those not ready become `not_ready`, Unix ms.
    pub deadline_at: i64,
}

const COLUMNS: &str = "deployment_id, instance, build_id, url, state, reason, probes, since, checked_at, deadline_at";

fn from_row(r: &Row) -> Result<ReadinessRow, StoreError> {
    Ok(ReadinessRow {
        deployment_id: r.text("deployment_id")?,
        instance: r.text("instance")?,
        build_id: r.text("build_id")?,
        url: r.text("url")?,
        state: r
            .text("state")?
            .parse()
            .map_err(|e: String| StoreError::Corrupt(format!("instance_readiness.state: {e}")))?,
        reason: r.opt_text("reason")?,
        probes: r.int("probes")?,
        since: r.int("since")?,
        checked_at: r.opt_int("checked_at")?,
        deadline_at: r.int("deadline_at")?,
    })
}

/// A successful deploy `build_id` of `deployment` serves `instances`: they
/// become `pending`, to be probed until `deadline_at`; rows of instances it
/// no longer has go. Call in the transaction that records its success.
pub async fn begin(
    conn: &mut Conn,
    deployment: &str,
    build_id: &str,
    instances: &[Instance],
    now: i64,
    deadline_at: i64,
) -> Result<(), StoreError> {
    clear(conn, deployment).await?;
    for instance in instances {
        Q::new(format!(
            "INSERT INTO instance_readiness ({COLUMNS}) VALUES ($1, $2, $3, $4, 'pending', NULL, 0, $5, NULL, $6)"
        ))
        .text(deployment)
        .text(&instance.name)
        .text(build_id)
        .text(&instance.url)
        .int(now)
        .int(deadline_at)
        .execute(conn)
        .await?;
    }
    Ok(())
}

/// Removes `deployment`'s rows (a destroy succeeded: it serves nothing).
pub async fn clear(conn: &mut Conn, deployment: &str) -> Result<(), StoreError> {
    Q::new("DELETE FROM instance_readiness WHERE deployment_id = $1").text(deployment).execute(conn).await?;
    Ok(())
}

/// `deployment`'s rows, by instance name.
pub async fn of_deployment(conn: &mut Conn, deployment: &str) -> Result<Vec<ReadinessRow>, StoreError> {
    let rows = Q::new(format!("SELECT {COLUMNS} FROM instance_readiness WHERE deployment_id = $1 ORDER BY instance"))
        .text(deployment)
        .fetch_all(conn)
        .await?;
    rows.iter().map(from_row).collect()
}

/// [`of_deployments`]' statement for `n` deployments (`$1` … `$n`).
pub fn of_deployments_sql(n: usize) -> String {
    format!(
        "SELECT {COLUMNS} FROM instance_readiness WHERE deployment_id IN {} ORDER BY deployment_id, instance",
        super::placeholders(1, n)
    )
}

/// [`of_deployment`] for each of `deployments` at once, in one statement:
/// by deployment id, each list ordered by instance (a deployment with no
/// readiness rows is absent).
pub async fn of_deployments(
    conn: &mut Conn,
    deployments: &[String],
) -> Result<std::collections::HashMap<String, Vec<ReadinessRow>>, StoreError> {
    let mut out: std::collections::HashMap<String, Vec<ReadinessRow>> = Default::default();
    if deployments.is_empty() {
        return Ok(out);
    }
    let q = Q::new(of_deployments_sql(deployments.len()));
    for row in q.texts(deployments).fetch_all(conn).await? {
        let row = from_row(&row)?;
        out.entry(row.deployment_id.clone()).or_default().push(row);
    }
    Ok(out)
}

/// What a probe of one instance found.
#[derive(Debug, Clone)]
pub struct Found<'a> {
    /// The instance.
    pub instance: &'a str,
    /// Its state now.
    pub state: State,
    /// Why it is not ready.
    pub reason: Option<&'a str>,
    /// When, Unix ms.
    pub at: i64,
}

/// Records a probe of an instance of deploy `build_id`; `false`, changing
/// nothing, when the row belongs to another deploy now (or is gone), or is
/// final already (`ready`, or `not_ready` past its deadline) and `found`
/// is not `ready`: a late probe (`run wait-ready`'s, say) never undoes
/// ready, and never reopens an instance the deadline closed.
pub async fn record(conn: &mut Conn, deployment: &str, build_id: &str, found: &Found<'_>) -> Result<bool, StoreError> {
    let changed = Q::new(
        "UPDATE instance_readiness SET state = $1, reason = $2, checked_at = $3, probes = probes + 1
         WHERE deployment_id = $4 AND instance = $5 AND build_id = $6
           AND (state NOT IN ('ready', 'not_ready') OR $1 = 'ready')",
    )
    .text(found.state.as_str())
    .opt_text(found.reason)
    .int(found.at)
    .text(deployment)
    .text(found.instance)
    .text(build_id)
    .execute(conn)
    .await?;
    Ok(changed > 0)
}

/// Ends the probing of deploy `build_id`'s instances that are not ready:
/// they become `not_ready`, keeping their last reason. Returns how many.
pub async fn expire(conn: &mut Conn, deployment: &str, build_id: &str, now: i64) -> Result<u64, StoreError> {
    Q::new(
        "UPDATE instance_readiness SET state = 'not_ready', reason = COALESCE(reason, 'never probed'), checked_at = COALESCE(checked_at, $1)
         WHERE deployment_id = $2 AND build_id = $3 AND state NOT IN ('ready', 'not_ready')",
    )
    .int(now)
    .text(deployment)
    .text(build_id)
    .execute(conn)
    .await
}
