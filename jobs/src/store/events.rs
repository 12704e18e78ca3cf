//! The deployment channel's events (DL-3): `deployment_events`.
//!
//! A deployment's state is derived, never stored (ST-1), but a client that
//! follows it needs each change once, in order, resumable after a
//! reconnect. So every transaction that can change the derived state (a
//! submit, a delete, a cancel, a build's end) calls [`record`] before it
//! commits, holding the deployment's lock: when the state or the build it
//! comes from differs from the deployment's last event, a new event is
//! written, numbered `n` = the previous one's + 1. Events of one deployment
//! therefore commit in the order of their numbers, on both engines, and a
//! client that has seen event `n` has seen every event before it.
//!
//! On PostgreSQL `NOTIFY slipway_events` with the deployment id follows
//! the transaction's commit ([`Conn::notify`]); on SQLite, whose writers
//! are serialised, [`after`] finds what committed since a `seq`.

use super::{builds, Conn, StoreError, Q};
use crate::state::DeploymentState;

/// The PostgreSQL notification channel of new events; the payload is the
/// deployment id.
pub const NOTIFY_CHANNEL: &str = "slipway_events";

/// One event of a deployment's channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The deployment.
    pub deployment_id: String,
    /// Its number within the deployment, from 1: the server-sent event id.
    pub n: i64,
    /// The derived state from this event on.
    pub state: DeploymentState,
    /// The build that state comes from (`None`: no build counts yet).
    pub build_id: Option<String>,
    /// When it was recorded, Unix ms.
    pub at: i64,
    /// Why that build was queued (`None`: no build). An `apply`,
    /// `rollback` or `auto_rollback` replaced the deployment's stored
    /// configuration: a front-end reads it again.
    pub trigger: Option<crate::provenance::Trigger>,
}

/// The columns of an event read with its build's trigger, as the run
/// history names it ([`builds::TRIGGER_SQL`])
/// (`deployment_events e LEFT JOIN builds b ON b.id = e.build_id`).
fn event_columns() -> String {
    format!(
        "e.deployment_id, e.n, e.state, e.build_id, e.at, \
         CASE WHEN b.id IS NULL THEN NULL ELSE {} END AS trigger_kind",
        builds::TRIGGER_SQL
    )
}

fn from_row(r: &super::Row) -> Result<Event, StoreError> {
    Ok(Event {
        deployment_id: r.text("deployment_id")?,
        n: r.int("n")?,
        state: r
            .text("state")?
            .parse()
            .map_err(|e: String| StoreError::Corrupt(format!("deployment_events.state: {e}")))?,
        build_id: r.opt_text("build_id")?,
        at: r.int("at")?,
        trigger: r
            .opt_text("trigger_kind")?
            .map(|t| t.parse().map_err(|e: String| StoreError::Corrupt(format!("builds.trigger_kind: {e}"))))
            .transpose()?,
    })
}

/// Records deployment `id`'s current state as an event when it differs
/// from the last one (state or build). Call at the end of a transaction
/// that changed the deployment's builds, after [`Conn::lock_deployment`].
/// Returns the event written, if any.
pub async fn record(conn: &mut Conn, id: &str, now: i64) -> Result<Option<Event>, StoreError> {
    let deciding = builds::deciding(conn, id).await?;
    let state = DeploymentState::derive(deciding.as_ref().map(|b| (b.kind, b.status)));
    let trigger = deciding.as_ref().map(|b| b.trigger);
    let build_id = deciding.map(|b| b.id);
    let last = latest(conn, id).await?;
    if last.as_ref().is_some_and(|e| e.state == state && e.build_id == build_id) {
        return Ok(None);
    }
    let n = last.map_or(1, |e| e.n + 1);
    let event = Event { deployment_id: id.to_owned(), n, state, build_id, at: now, trigger };
    Q::new("INSERT INTO deployment_events (deployment_id, n, state, build_id, at) VALUES ($1, $2, $3, $4, $5)")
        .text(id)
        .int(event.n)
        .text(state.as_str())
        .opt_text(event.build_id.clone())
        .int(now)
        .execute(conn)
        .await?;
    conn.notify(NOTIFY_CHANNEL, id.to_owned()).await?;
    Ok(Some(event))
}

/// The last event of deployment `id`, if any.
pub async fn latest(conn: &mut Conn, id: &str) -> Result<Option<Event>, StoreError> {
    let row = Q::new(format!(
        "SELECT {} FROM deployment_events e LEFT JOIN builds b ON b.id = e.build_id
         WHERE e.deployment_id = $1 ORDER BY e.n DESC LIMIT 1",
        event_columns()
    ))
    .text(id)
    .fetch_optional(conn)
    .await?;
    row.as_ref().map(from_row).transpose()
}

/// The events of deployment `id` numbered after `n`, oldest first, at most
/// `limit`.
pub async fn since(conn: &mut Conn, id: &str, n: i64, limit: i64) -> Result<Vec<Event>, StoreError> {
    Q::new(format!(
        "SELECT {} FROM deployment_events e LEFT JOIN builds b ON b.id = e.build_id
         WHERE e.deployment_id = $1 AND e.n > $2 ORDER BY e.n LIMIT $3",
        event_columns()
    ))
    .text(id)
    .int(n)
    .int(limit)
    .fetch_all(conn)
    .await?
    .iter()
    .map(from_row)
    .collect()
}

/// The newest `seq` of any event (0 before any): where a poll of [`after`] starts.
pub async fn last_seq(conn: &mut Conn) -> Result<i64, StoreError> {
    Q::new("SELECT COALESCE(MAX(seq), 0) AS seq FROM deployment_events").fetch_one(conn).await?.int("seq")
}

/// The deployments with events committed after `seq`, and the newest
/// `seq` seen (`seq` itself when none). Exact on SQLite, whose writers are
/// serialised; on PostgreSQL a sequence number can commit after a higher
/// one, so there [`NOTIFY_CHANNEL`] is what tells of new events.
pub async fn after(conn: &mut Conn, seq: i64) -> Result<(Vec<String>, i64), StoreError> {
    let rows = Q::new("SELECT seq, deployment_id FROM deployment_events WHERE seq > $1 ORDER BY seq LIMIT 1000")
        .int(seq)
        .fetch_all(conn)
        .await?;
    let mut ids: Vec<String> = Vec::new();
    let mut newest = seq;
    for r in &rows {
        newest = newest.max(r.int("seq")?);
        let id = r.text("deployment_id")?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok((ids, newest))
}

/// For the webhook fan-out (WH-1): the deployments with events whose
/// `seq` is above `seq`, oldest first, with the highest `seq` read; at
/// most `limit` rows read.
pub async fn deployments_after(conn: &mut Conn, seq: i64, limit: i64) -> Result<(Vec<String>, i64), StoreError> {
    let rows = Q::new("SELECT seq, deployment_id FROM deployment_events WHERE seq > $1 ORDER BY seq LIMIT $2")
        .int(seq)
        .int(limit)
        .fetch_all(conn)
        .await?;
    let mut ids: Vec<String> = Vec::new();
    let mut newest = seq;
    for r in &rows {
        newest = newest.max(r.int("seq")?);
        let id = r.text("deployment_id")?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok((ids, newest))
}

/// For the webhook fan-out (WH-1): deployment `id`'s events numbered
/// after `n` whose `seq` is above `min_seq`, oldest first, at most `limit`.
pub async fn since_above_seq(
    conn: &mut Conn,
    id: &str,
    n: i64,
    min_seq: i64,
    limit: i64,
) -> Result<Vec<Event>, StoreError> {
    Q::new(format!(
        "SELECT {} FROM deployment_events e LEFT JOIN builds b ON b.id = e.build_id
         WHERE e.deployment_id = $1 AND e.n > $2 AND e.seq > $3 ORDER BY e.n LIMIT $4",
        event_columns()
    ))
    .text(id)
    .int(n)
    .int(min_seq)
    .int(limit)
    .fetch_all(conn)
    .await?
    .iter()
    .map(from_row)
    .collect()
}
