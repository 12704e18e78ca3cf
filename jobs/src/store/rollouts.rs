//! Rollout rows (RO-1): `rollouts`, `rollout_deployments` and
//! `rollout_events` (migrations `0024_rollouts.sql`). The driver and the
//! api's routes are [`crate::rollout`]'s.

use super::{json_col, Conn, Row, StoreError, Q};
use serde_json::Value;

/// A stored rollout.
#[derive(Debug, Clone)]
pub struct RolloutRow {
    /// Its id (`rollout-<ulid>`).
    pub id: String,
    /// `running`, `paused`, `halted`, `cancelled` or `completed`.
    pub state: String,
    /// The target module source, pinned to one revision.
    pub module_source: String,
    /// The target as it was asked for (a `ref` or a `rev`).
    pub requested_source: String,
    /// Each wave's number of deployments.
    pub waves: Vec<u64>,
    /// Failures (failed builds and preflight skips) one wave may have.
    pub max_failures_per_wave: i64,
    /// Failures the whole rollout may have.
    pub max_failures: i64,
    /// The pause between waves, ms.
    pub pause_ms: i64,
    /// The health gate each build waits for; `None`: readiness.
    pub health_gate: Option<crate::provenance::HealthGate>,
    /// The wave under way, 0-based.
    pub wave: i64,
    /// Unix ms before which the wave under way queues nothing (the pause).
    pub next_at: i64,
    /// The driver's generation: only the job carrying it acts.
    pub tick: i64,
    /// Why it halted or was cancelled.
    pub reason: Option<String>,
    /// Who started it.
    pub requested_by: Option<crate::provenance::RequestedBy>,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub updated_at: i64,
}

const COLUMNS: &str = "id, state, module_source, requested_source, waves, max_failures_per_wave, max_failures, \
                       pause_ms, health_gate, wave, next_at, tick, reason, requested_by, created_at, updated_at";

fn from_row(r: &Row) -> Result<RolloutRow, StoreError> {
    Ok(RolloutRow {
        id: r.text("id")?,
        state: r.text("state")?,
        module_source: r.text("module_source")?,
        requested_source: r.text("requested_source")?,
        waves: json_col(&r.text("waves")?, "rollouts.waves")?,
        max_failures_per_wave: r.int("max_failures_per_wave")?,
        max_failures: r.int("max_failures")?,
        pause_ms: r.int("pause_ms")?,
        health_gate: r.opt_text("health_gate")?.map(|t| json_col(&t, "rollouts.health_gate")).transpose()?,
        wave: r.int("wave")?,
        next_at: r.int("next_at")?,
        tick: r.int("tick")?,
        reason: r.opt_text("reason")?,
        requested_by: r.opt_text("requested_by")?.map(|t| json_col(&t, "rollouts.requested_by")).transpose()?,
        created_at: r.int("created_at")?,
        updated_at: r.int("updated_at")?,
    })
}

/// Inserts `row` (a new rollout).
pub async fn insert(conn: &mut Conn, row: &RolloutRow) -> Result<(), StoreError> {
    Q::new(format!(
        "INSERT INTO rollouts ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)"
    ))
    .text(&row.id)
    .text(&row.state)
    .text(&row.module_source)
    .text(&row.requested_source)
    .text(serde_json::to_string(&row.waves).expect("waves serialise"))
    .int(row.max_failures_per_wave)
    .int(row.max_failures)
    .int(row.pause_ms)
    .opt_text(row.health_gate.map(|g| serde_json::to_string(&g).expect("gate serialises")))
    .int(row.wave)
    .int(row.next_at)
    .int(row.tick)
    .opt_text(row.reason.as_deref())
    .opt_text(row.requested_by.as_ref().map(|r| serde_json::to_string(r).expect("requester serialises")))
    .int(row.created_at)
    .int(row.updated_at)
    .execute(conn)
    .await?;
    Ok(())
}

/// Reads one rollout.
pub async fn get(conn: &mut Conn, id: &str) -> Result<Option<RolloutRow>, StoreError> {
    let row = Q::new(format!("SELECT {COLUMNS} FROM rollouts WHERE id = $1")).text(id).fetch_optional(conn).await?;
    row.as_ref().map(from_row).transpose()
}

/// Reads one rollout holding its row until the transaction ends (on
/// PostgreSQL a row lock; SQLite's `BEGIN IMMEDIATE` holds the one write
/// lock): a driver step and a pause, resume or cancel never interleave.
pub async fn lock(conn: &mut Conn, id: &str) -> Result<Option<RolloutRow>, StoreError> {
    let sql = match conn.engine() {
        super::Engine::Sqlite => format!("SELECT {COLUMNS} FROM rollouts WHERE id = $1"),
        super::Engine::Postgres => format!("SELECT {COLUMNS} FROM rollouts WHERE id = $1 FOR UPDATE"),
    };
    let row = Q::new(sql).text(id).fetch_optional(conn).await?;
    row.as_ref().map(from_row).transpose()
}

/// The rollouts, newest first, at most `limit`; with `before` (a
/// `created_at`, id pair), only older ones (keyset paging).
pub async fn list(conn: &mut Conn, before: Option<(i64, &str)>, limit: i64) -> Result<Vec<RolloutRow>, StoreError> {
    let (at, id) = before.unwrap_or((i64::MAX, ""));
    let rows = Q::new(format!(
        "SELECT {COLUMNS} FROM rollouts WHERE created_at < $1 OR (created_at = $1 AND id < $2)
         ORDER BY created_at DESC, id DESC LIMIT $3"
    ))
    .int(at)
    .text(id)
    .int(limit)
    .fetch_all(conn)
    .await?;
    rows.iter().map(from_row).collect()
}

/// Sets what a driver step or a pause, resume or cancel changes.
pub async fn update(conn: &mut Conn, row: &RolloutRow, now: i64) -> Result<(), StoreError> {
    Q::new(
        "UPDATE rollouts SET state = $1, wave = $2, next_at = $3, tick = $4, reason = $5, updated_at = $6
         WHERE id = $7",
    )
    .text(&row.state)
    .int(row.wave)
    .int(row.next_at)
    .int(row.tick)
    .opt_text(row.reason.as_deref())
    .int(now)
    .text(&row.id)
    .execute(conn)
    .await?;
    Ok(())
}

/// One deployment of a rollout.
#[derive(Debug, Clone)]
pub struct EntryRow {
    /// Its place in the rollout's list, 0-based.
    pub position: i64,
    /// The deployment.
    pub deployment_id: String,
    /// Its wave, 0-based.
    pub wave: i64,
    /// `pending`, `queued`, `succeeded`, `failed`, `overridden`, `skipped`
    /// or `cancelled`.
    pub status: String,
    /// The build the rollout queued for it, once queued.
    pub build_id: Option<String>,
    /// Why it failed, was skipped or overridden.
    pub reason: Option<String>,
    /// The deployment's version the preflight checked (ST-3).
    pub version: i64,
    /// What the preflight made of its stored configuration (see
    /// [`crate::rollout::Prepared`]); `None` for a skipped one, and in
    /// listings.
    pub prepared: Option<Value>,
    /// The build's status now (joined), once queued.
    pub build_status: Option<String>,
    /// The build's error now (joined), once queued.
    pub build_error: Option<String>,
}

fn entry_from_row(r: &Row, prepared: bool) -> Result<EntryRow, StoreError> {
    Ok(EntryRow {
        position: r.int("position")?,
        deployment_id: r.text("deployment_id")?,
        wave: r.int("wave")?,
        status: r.text("status")?,
        build_id: r.opt_text("build_id")?,
        reason: r.opt_text("reason")?,
        version: r.int("version")?,
        prepared: if prepared {
            r.opt_text("prepared")?.map(|t| json_col(&t, "rollout_deployments.prepared")).transpose()?
        } else {
            None
        },
        build_status: r.opt_text("build_status")?,
        build_error: r.opt_text("build_error")?,
    })
}

/// A new entry: (deployment, wave, status, reason, version, prepared).
pub type NewEntry = (String, i64, &'static str, Option<String>, i64, Option<Value>);

/// Inserts rollout `id`'s entries, positions from 0, a few hundred rows a statement.
pub async fn insert_entries(conn: &mut Conn, id: &str, entries: &[NewEntry]) -> Result<(), StoreError> {
    const CHUNK: usize = 200;
    for (c, chunk) in entries.chunks(CHUNK).enumerate() {
        let values: Vec<String> = (0..chunk.len())
            .map(|i| {
                let b = i * 8;
                format!(
                    "(${}, ${}, ${}, ${}, ${}, ${}, ${}, ${})",
                    b + 1,
                    b + 2,
                    b + 3,
                    b + 4,
                    b + 5,
                    b + 6,
                    b + 7,
                    b + 8
                )
            })
            .collect();
        let mut q = Q::new(format!(
            "INSERT INTO rollout_deployments (rollout_id, position, deployment_id, wave, status, reason, version, prepared) VALUES {}",
            values.join(", ")
        ));
        for (i, (deployment, wave, status, reason, version, prepared)) in chunk.iter().enumerate() {
            q = q
                .text(id)
                .int((c * CHUNK + i) as i64)
                .text(deployment)
                .int(*wave)
                .text(*status)
                .opt_text(reason.as_deref())
                .int(*version)
                .opt_text(prepared.as_ref().map(Value::to_string));
        }
        q.execute(conn).await?;
    }
    Ok(())
}

const ENTRY_COLUMNS: &str = "e.position, e.deployment_id, e.wave, e.status, e.build_id, e.reason, e.version, \
                             b.status AS build_status, b.error AS build_error";

/// Rollout `id`'s entries in order, with their builds' status (without
/// what the preflight prepared); with `wave`, that wave's only and with
/// what was prepared.
pub async fn entries(conn: &mut Conn, id: &str, wave: Option<i64>) -> Result<Vec<EntryRow>, StoreError> {
    let rows = match wave {
        None => {
            Q::new(format!(
                "SELECT {ENTRY_COLUMNS} FROM rollout_deployments e LEFT JOIN builds b ON b.id = e.build_id
                 WHERE e.rollout_id = $1 ORDER BY e.position"
            ))
            .text(id)
            .fetch_all(conn)
            .await?
        }
        Some(w) => {
            Q::new(format!(
                "SELECT {ENTRY_COLUMNS}, e.prepared FROM rollout_deployments e LEFT JOIN builds b ON b.id = e.build_id
                 WHERE e.rollout_id = $1 AND e.wave = $2 ORDER BY e.position"
            ))
            .text(id)
            .int(w)
            .fetch_all(conn)
            .await?
        }
    };
    rows.iter().map(|r| entry_from_row(r, wave.is_some())).collect()
}

/// Sets entry `position` of rollout `id`: its status, build and reason.
pub async fn set_entry(
    conn: &mut Conn,
    id: &str,
    position: i64,
    status: &str,
    build_id: Option<&str>,
    reason: Option<&str>,
) -> Result<(), StoreError> {
    Q::new("UPDATE rollout_deployments SET status = $1, build_id = $2, reason = $3 WHERE rollout_id = $4 AND position = $5")
        .text(status)
        .opt_text(build_id)
        .opt_text(reason)
        .text(id)
        .int(position)
        .execute(conn)
        .await?;
    Ok(())
}

/// Records event `kind` (`rollout.wave_started`, …) of rollout `id`, its
/// body a self-describing JSON object.
pub async fn record_event(conn: &mut Conn, id: &str, kind: &str, body: &Value, now: i64) -> Result<(), StoreError> {
    Q::new("INSERT INTO rollout_events (rollout_id, type, body, at) VALUES ($1, $2, $3, $4)")
        .text(id)
        .text(kind)
        .text(body.to_string())
        .int(now)
        .execute(conn)
        .await?;
    Ok(())
}

/// A recorded rollout event.
#[derive(Debug, Clone)]
pub struct EventRow {
    /// Increasing id (the stream's `id:` and `Last-Event-ID`).
    pub id: i64,
    /// The event type.
    pub kind: String,
    /// Its JSON body.
    pub body: Value,
    /// Unix ms.
    pub at: i64,
}

/// Rollout `id`'s events after event `after`, oldest first, at most `limit`.
pub async fn events_after(conn: &mut Conn, id: &str, after: i64, limit: i64) -> Result<Vec<EventRow>, StoreError> {
    let rows =
        Q::new("SELECT id, type, body, at FROM rollout_events WHERE rollout_id = $1 AND id > $2 ORDER BY id LIMIT $3")
            .text(id)
            .int(after)
            .int(limit)
            .fetch_all(conn)
            .await?;
    rows.iter()
        .map(|r| {
            Ok(EventRow {
                id: r.int("id")?,
                kind: r.text("type")?,
                body: json_col(&r.text("body")?, "rollout_events.body")?,
                at: r.int("at")?,
            })
        })
        .collect()
}

/// The live deployments (whose latest build that is not a dry run is not a
/// destroy) with a stored module source, as (id, module source), by id.
pub async fn live_sources(conn: &mut Conn) -> Result<Vec<(String, String)>, StoreError> {
    let rows = Q::new(
        "SELECT d.id, d.module_source FROM deployments d WHERE d.module_source IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM builds b WHERE b.deployment_id = d.id AND b.kind = 'destroy' AND b.seq = (
                SELECT MAX(l.seq) FROM builds l WHERE l.deployment_id = d.id AND l.dry_run = 0))
         ORDER BY d.id",
    )
    .fetch_all(conn)
    .await?;
    rows.iter().map(|r| Ok((r.text("id")?, r.text("module_source")?))).collect()
}

/// The highest `rollout_events.id` recorded (0: none): where a webhook
/// endpoint registered now starts reading the rollout source (WH-1).
pub async fn last_event_id(conn: &mut Conn) -> Result<i64, StoreError> {
    Q::new("SELECT COALESCE(MAX(id), 0) AS id FROM rollout_events").fetch_one(conn).await?.int("id")
}

/// For the webhook fan-out (WH-1): the rollouts with events whose id is
/// above `after`, oldest first, with the highest id read (`after` when
/// none); at most `limit` rows read.
pub async fn with_events_after(conn: &mut Conn, after: i64, limit: i64) -> Result<(Vec<String>, i64), StoreError> {
    let rows = Q::new("SELECT id, rollout_id FROM rollout_events WHERE id > $1 ORDER BY id LIMIT $2")
        .int(after)
        .int(limit)
        .fetch_all(conn)
        .await?;
    let mut ids: Vec<String> = Vec::new();
    let mut newest = after;
    for r in &rows {
        newest = newest.max(r.int("id")?);
        let id = r.text("rollout_id")?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok((ids, newest))
}
