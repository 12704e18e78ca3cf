//! Where webhook events come from (WH-1): the one place that lists the
//! event sources ([`fan_out`]). Each source is a table of events with an
//! increasing number across the table (its cursor) and, within a subject
//! (a deployment, a rollout), a number that orders its events; a source
//! turns its new events into delivery rows of an endpoint
//! ([`crate::store::webhooks::insert_delivery`]), keyed by
//! `(endpoint, source, subject, n)` so a second fan-out of the same event
//! creates nothing.
//!
//! Deliveries are made per subject from the subject's last delivered
//! number on, never from the cursor alone: on PostgreSQL an event's `seq`
//! can commit after a higher one, so the cursor is read again from
//! [`LOOKBACK`] numbers back, and a subject found there is caught up from
//! its own last number, in order (docs/DECISIONS.md, "Webhook fan-out").
//!
//! The sources: the deployment channel ([`deployment_events`]) and the
//! rollouts' steps ([`rollout_events`]). To add one: write its
//! `async fn <name>(conn, endpoint, now) -> Result<usize, StoreError>` as
//! those are written (its own `SOURCE` name for the cursor and the
//! deliveries, its subjects and numbers, a floor below which an endpoint
//! gets no old history), set its starting cursor where an endpoint is
//! registered (`api/src/routes/webhooks.rs::create`), add its event types
//! to [`super::EVENT_TYPES`], and call it in [`fan_out`].

use super::{rfc3339, subscribes};
use crate::store::webhooks::{self as rows, Endpoint, NewDelivery};
use crate::store::{events, rollouts, Conn, StoreError};
use serde_json::json;

/// How many cursor numbers back each fan-out reads again, for events whose
/// number committed after a higher one's.
pub const LOOKBACK: i64 = 1000;
/// The most event rows one fan-out reads from a source.
pub const READ_LIMIT: i64 = 2000;
/// The most events of one subject one fan-out turns into deliveries.
pub const SUBJECT_LIMIT: i64 = 500;

/// Creates `endpoint`'s deliveries of every source's events since its
/// cursors, in `conn`'s transaction; returns how many were created.
pub async fn fan_out(conn: &mut Conn, endpoint: &Endpoint, now: i64) -> Result<usize, StoreError> {
    let mut created = deployment_events(conn, endpoint, now).await?;
    created += rollout_events(conn, endpoint, now).await?;
    Ok(created)
}

/// The deployment channel (DL-3, `deployment_events`): one event per
/// change of a deployment's derived state, type `deployment.<state>`,
/// subject the deployment, ordered by its number `n`. Only events recorded
/// after the endpoint was registered (`start_seq`) are delivered.
///
/// The body: `{"type": "deployment.active", "timestamp": RFC 3339 of the
/// event, "data": {"deployment_id", "n", "state", "build_id", "trigger",
/// "at"}}`.
pub async fn deployment_events(conn: &mut Conn, endpoint: &Endpoint, now: i64) -> Result<usize, StoreError> {
    const SOURCE: &str = "deployment";
    let cursor = rows::cursor(conn, &endpoint.id, SOURCE).await?.unwrap_or(endpoint.start_seq);
    let from = (cursor - LOOKBACK).max(endpoint.start_seq);
    let (subjects, newest) = events::deployments_after(conn, from, READ_LIMIT).await?;
    let mut created = 0;
    // Ids made in this call increase in the order of the deliveries, also
    // within one millisecond (the delivery log lists them by id).
    let mut ids = ulid::Generator::new();
    for deployment in &subjects {
        let last = rows::last_fanned_out(conn, &endpoint.id, SOURCE, deployment).await?;
        for event in events::since_above_seq(conn, deployment, last, endpoint.start_seq, SUBJECT_LIMIT).await? {
            let event_type = format!("deployment.{}", event.state.as_str());
            if !subscribes(&endpoint.events, &event_type) {
                continue;
            }
            let body = json!({
                "type": event_type,
                "timestamp": rfc3339(event.at),
                "data": {
                    "deployment_id": event.deployment_id,
                    "n": event.n,
                    "state": event.state.as_str(),
                    "build_id": event.build_id,
                    "trigger": event.trigger.map(|t| t.as_str()),
                    "at": rfc3339(event.at),
                },
            })
            .to_string();
            let id = format!("msg_{}", ids.generate().unwrap_or_else(|_| ulid::Ulid::generate()));
            let new = NewDelivery {
                id: &id,
                endpoint_id: &endpoint.id,
                source: SOURCE,
                subject: deployment,
                n: event.n,
                event_type: &event_type,
                body: &body,
                now,
            };
            if rows::insert_delivery(conn, &new).await? {
                created += 1;
            }
        }
    }
    if newest > cursor {
        rows::set_cursor(conn, &endpoint.id, SOURCE, newest).await?;
    }
    Ok(created)
}

/// The name of the rollout source's cursor and deliveries.
pub const ROLLOUT_SOURCE: &str = "rollout";
/// The name of the cursor row that keeps, unchanged, where an endpoint
/// started reading the rollout source: its floor (the moving cursor
/// cannot be it, since each fan-out reads [`LOOKBACK`] ids below it).
pub const ROLLOUT_START: &str = "rollout.start";

/// Sets where endpoint `id` starts reading the rollout source: at `last`,
/// the highest `rollout_events.id` when it is registered
/// ([`rollouts::last_event_id`]), so it gets no older step.
pub async fn start_rollout_cursor(conn: &mut Conn, id: &str, last: i64) -> Result<(), StoreError> {
    rows::set_cursor(conn, id, ROLLOUT_SOURCE, last).await?;
    rows::set_cursor(conn, id, ROLLOUT_START, last).await
}

/// The rollouts' steps (RO-1, `rollout_events`): `rollout.started`,
/// `rollout.wave_started`, `rollout.wave_completed`, `rollout.paused`,
/// `rollout.resumed`, `rollout.cancelled`, `rollout.halted`,
/// `rollout.completed`; subject the rollout, ordered by the event's id
/// `n`. Only events with an id above the endpoint's start
/// ([`start_rollout_cursor`]) are delivered; an endpoint without one (none
/// is registered so since the rollout source exists) starts at the
/// newest event when first fanned out.
///
/// The body: `{"type": "rollout.wave_completed", "timestamp": RFC 3339 of
/// the event, "data": {"rollout_id", "n", "at", …}}`, `data` being the
/// event as the rollout's own stream (`GET /rollouts/{id}/events`) shows
/// it, without its `type`, with `n` and `at` added.
pub async fn rollout_events(conn: &mut Conn, endpoint: &Endpoint, now: i64) -> Result<usize, StoreError> {
    let (cursor, floor) = match (
        rows::cursor(conn, &endpoint.id, ROLLOUT_SOURCE).await?,
        rows::cursor(conn, &endpoint.id, ROLLOUT_START).await?,
    ) {
        (Some(cursor), Some(floor)) => (cursor, floor),
        _ => {
            let last = rollouts::last_event_id(conn).await?;
            start_rollout_cursor(conn, &endpoint.id, last).await?;
            (last, last)
        }
    };
    let from = (cursor - LOOKBACK).max(floor);
    let (subjects, newest) = rollouts::with_events_after(conn, from, READ_LIMIT).await?;
    let mut created = 0;
    let mut ids = ulid::Generator::new();
    for rollout in &subjects {
        let last = rows::last_fanned_out(conn, &endpoint.id, ROLLOUT_SOURCE, rollout).await?;
        for event in rollouts::events_after(conn, rollout, last.max(floor), SUBJECT_LIMIT).await? {
            if !subscribes(&endpoint.events, &event.kind) {
                continue;
            }
            let mut data = match event.body {
                serde_json::Value::Object(map) => map,
                _ => serde_json::Map::new(),
            };
            data.remove("type");
            data.insert("rollout_id".into(), json!(rollout));
            data.insert("n".into(), json!(event.id));
            data.insert("at".into(), json!(rfc3339(event.at)));
            let body = json!({ "type": event.kind, "timestamp": rfc3339(event.at), "data": data }).to_string();
            let id = format!("msg_{}", ids.generate().unwrap_or_else(|_| ulid::Ulid::generate()));
            let new = NewDelivery {
                id: &id,
                endpoint_id: &endpoint.id,
                source: ROLLOUT_SOURCE,
                subject: rollout,
                n: event.id,
                event_type: &event.kind,
                body: &body,
                now,
            };
            if rows::insert_delivery(conn, &new).await? {
                created += 1;
            }
        }
    }
    if newest > cursor {
        rows::set_cursor(conn, &endpoint.id, ROLLOUT_SOURCE, newest).await?;
    }
    Ok(created)
}
