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
//! To add a source (the rollouts' `rollout_events`): write its
//! `async fn <name>(conn, endpoint, now) -> Result<usize, StoreError>` as
//! [`deployment_events`] is written (its own `SOURCE` name for the cursor
//! and the deliveries, its subjects and numbers), add its event types to
//! [`super::EVENT_TYPES`], and call it in [`fan_out`].

use super::{rfc3339, subscribes};
use crate::store::webhooks::{self as rows, Endpoint, NewDelivery};
use crate::store::{events, Conn, StoreError};
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
    // Rollout steps (`rollout_events`) are added here, as another source:
    // `created += rollout_events(conn, endpoint, now).await?;`
    let created = deployment_events(conn, endpoint, now).await?;
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
