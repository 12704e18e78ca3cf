//! Webhook endpoints, their cursors and their deliveries (WH-1, migration
//! 0023): `webhook_endpoints`, `webhook_cursors`, `webhook_deliveries`.
//! The secret is read only by [`secret_of`] (for signing); every other
//! read leaves it out.

use super::{Conn, StoreError, Q};
use secrecy::SecretString;

/// An endpoint as the api shows it: everything but its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Its id (`wh_` and a ULID).
    pub id: String,
    /// Where deliveries go.
    pub url: String,
    /// The event types it subscribes to, or `["*"]`.
    pub events: Vec<String>,
    /// The operator's note.
    pub description: Option<String>,
    /// Whether deliveries are sent.
    pub enabled: bool,
    /// Why it was disabled (by the operator, or after failing a whole retry window).
    pub disabled_reason: Option<String>,
    /// When it was disabled, Unix ms.
    pub disabled_at: Option<i64>,
    /// The first failed attempt since the last success, Unix ms.
    pub failing_since: Option<i64>,
    /// The channel's newest event `seq` at registration: later ones are delivered.
    pub start_seq: i64,
    /// The generation of its delivery job chain.
    pub pump: i64,
    /// When its current delivery job is due, Unix ms.
    pub pump_at: i64,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub updated_at: i64,
}

const ENDPOINT_COLUMNS: &str = "id, url, events, description, enabled, disabled_reason, disabled_at, failing_since, \
                                start_seq, pump, pump_at, created_at, updated_at";

fn endpoint(r: &super::Row) -> Result<Endpoint, StoreError> {
    let events = r.text("events")?;
    Ok(Endpoint {
        id: r.text("id")?,
        url: r.text("url")?,
        events: serde_json::from_str(&events)
            .map_err(|e| StoreError::Corrupt(format!("webhook_endpoints.events: {e}")))?,
        description: r.opt_text("description")?,
        enabled: r.int("enabled")? != 0,
        disabled_reason: r.opt_text("disabled_reason")?,
        disabled_at: r.opt_int("disabled_at")?,
        failing_since: r.opt_int("failing_since")?,
        start_seq: r.int("start_seq")?,
        pump: r.int("pump")?,
        pump_at: r.int("pump_at")?,
        created_at: r.int("created_at")?,
        updated_at: r.int("updated_at")?,
    })
}

fn events_json(events: &[String]) -> String {
    serde_json::to_string(events).expect("a list of strings serialises")
}

/// A new endpoint, enabled, delivering the channel's events after
/// `start_seq`.
pub struct NewEndpoint<'a> {
    /// Its id.
    pub id: &'a str,
    /// Its checked URL.
    pub url: &'a str,
    /// Its checked event types.
    pub events: &'a [String],
    /// The operator's note.
    pub description: Option<&'a str>,
    /// The checked `whsec_` secret.
    pub secret: &'a str,
    /// The channel's newest event `seq` now.
    pub start_seq: i64,
    /// Unix ms.
    pub now: i64,
}

/// Inserts an endpoint (pump generation 0, due now).
pub async fn insert(conn: &mut Conn, new: &NewEndpoint<'_>) -> Result<(), StoreError> {
    Q::new(
        "INSERT INTO webhook_endpoints (id, url, events, description, secret, enabled, start_seq, pump, pump_at, \
         created_at, updated_at) VALUES ($1, $2, $3, $4, $5, 1, $6, 0, $7, $7, $7)",
    )
    .text(new.id)
    .text(new.url)
    .text(events_json(new.events))
    .opt_text(new.description)
    .text(new.secret)
    .int(new.start_seq)
    .int(new.now)
    .execute(conn)
    .await?;
    Ok(())
}

/// Endpoint `id`, without its secret.
pub async fn get(conn: &mut Conn, id: &str) -> Result<Option<Endpoint>, StoreError> {
    let row = Q::new(format!("SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE id = $1"))
        .text(id)
        .fetch_optional(conn)
        .await?;
    row.as_ref().map(endpoint).transpose()
}

/// Every endpoint, oldest first, at most `limit` after id `after`.
pub async fn list(conn: &mut Conn, after: Option<&str>, limit: i64) -> Result<Vec<Endpoint>, StoreError> {
    Q::new(format!("SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE id > $1 ORDER BY id LIMIT $2"))
        .text(after.unwrap_or(""))
        .int(limit)
        .fetch_all(conn)
        .await?
        .iter()
        .map(endpoint)
        .collect()
}

/// The secret of endpoint `id`, to sign with; never shown.
pub async fn secret_of(conn: &mut Conn, id: &str) -> Result<Option<SecretString>, StoreError> {
    let row = Q::new("SELECT secret FROM webhook_endpoints WHERE id = $1").text(id).fetch_optional(conn).await?;
    row.map(|r| r.text("secret").map(SecretString::from)).transpose()
}

/// What a `PATCH /webhooks/{id}` changes; `None` leaves a field as it is.
#[derive(Default)]
pub struct Change<'a> {
    /// A new checked URL.
    pub url: Option<&'a str>,
    /// New checked event types.
    pub events: Option<&'a [String]>,
    /// A new description (`Some(None)` clears it).
    pub description: Option<Option<&'a str>>,
    /// Enable (clearing why it was disabled and its failures) or disable.
    pub enabled: Option<bool>,
    /// A new checked secret.
    pub secret: Option<&'a str>,
}

/// Applies `change` to endpoint `id` at `now`; `false` when there is no
/// such endpoint. Disabling records `disabled by an operator`.
pub async fn update(conn: &mut Conn, id: &str, change: &Change<'_>, now: i64) -> Result<bool, StoreError> {
    if get(conn, id).await?.is_none() {
        return Ok(false);
    }
    if let Some(url) = change.url {
        Q::new("UPDATE webhook_endpoints SET url = $2 WHERE id = $1").text(id).text(url).execute(conn).await?;
    }
    if let Some(events) = change.events {
        Q::new("UPDATE webhook_endpoints SET events = $2 WHERE id = $1")
            .text(id)
            .text(events_json(events))
            .execute(conn)
            .await?;
    }
    if let Some(description) = change.description {
        Q::new("UPDATE webhook_endpoints SET description = $2 WHERE id = $1")
            .text(id)
            .opt_text(description)
            .execute(conn)
            .await?;
    }
    if let Some(secret) = change.secret {
        Q::new("UPDATE webhook_endpoints SET secret = $2 WHERE id = $1").text(id).text(secret).execute(conn).await?;
    }
    match change.enabled {
        Some(true) => {
            Q::new(
                "UPDATE webhook_endpoints SET enabled = 1, disabled_reason = NULL, disabled_at = NULL, \
                 failing_since = NULL WHERE id = $1 AND enabled = 0",
            )
            .text(id)
            .execute(conn)
            .await?;
        }
        Some(false) => {
            disable(conn, id, "disabled by an operator", now).await?;
        }
        None => {}
    }
    Q::new("UPDATE webhook_endpoints SET updated_at = $2 WHERE id = $1").text(id).int(now).execute(conn).await?;
    Ok(true)
}

/// Disables endpoint `id` for `reason` (when it is enabled).
pub async fn disable(conn: &mut Conn, id: &str, reason: &str, now: i64) -> Result<(), StoreError> {
    Q::new(
        "UPDATE webhook_endpoints SET enabled = 0, disabled_reason = $2, disabled_at = $3, updated_at = $3 \
         WHERE id = $1 AND enabled = 1",
    )
    .text(id)
    .text(reason)
    .int(now)
    .execute(conn)
    .await?;
    Ok(())
}

/// Deletes endpoint `id` with its cursors and deliveries; `false` when
/// there was none.
pub async fn delete(conn: &mut Conn, id: &str) -> Result<bool, StoreError> {
    Q::new("DELETE FROM webhook_deliveries WHERE endpoint_id = $1").text(id).execute(conn).await?;
    Q::new("DELETE FROM webhook_cursors WHERE endpoint_id = $1").text(id).execute(conn).await?;
    Ok(Q::new("DELETE FROM webhook_endpoints WHERE id = $1").text(id).execute(conn).await? > 0)
}

/// Starts a new generation of endpoint `id`'s delivery job chain, due at
/// `due`: a job of an older generation finds itself outdated and stops.
/// With `expected`, only when the current generation is that one (a
/// chain's job handing over to its successor). Returns the new
/// generation, `None` when there is no such endpoint (or another
/// generation took over).
pub async fn next_pump(conn: &mut Conn, id: &str, due: i64, expected: Option<i64>) -> Result<Option<i64>, StoreError> {
    let row = match expected {
        Some(pump) => Q::new(
            "UPDATE webhook_endpoints SET pump = pump + 1, pump_at = $2 WHERE id = $1 AND pump = $3 RETURNING pump",
        )
        .text(id)
        .int(due)
        .int(pump),
        None => Q::new("UPDATE webhook_endpoints SET pump = pump + 1, pump_at = $2 WHERE id = $1 RETURNING pump")
            .text(id)
            .int(due),
    }
    .fetch_optional(conn)
    .await?;
    row.map(|r| r.int("pump")).transpose()
}

/// The enabled endpoints whose delivery job was due before `before` (a
/// chain that stopped: its job failed every attempt), with their generation.
pub async fn stalled(conn: &mut Conn, before: i64) -> Result<Vec<String>, StoreError> {
    Q::new("SELECT id FROM webhook_endpoints WHERE enabled = 1 AND pump_at < $1 ORDER BY id LIMIT 1000")
        .int(before)
        .fetch_all(conn)
        .await?
        .iter()
        .map(|r| r.text("id"))
        .collect()
}

/// How far event source `source` was read for endpoint `id`.
pub async fn cursor(conn: &mut Conn, id: &str, source: &str) -> Result<Option<i64>, StoreError> {
    let row = Q::new("SELECT seq FROM webhook_cursors WHERE endpoint_id = $1 AND source = $2")
        .text(id)
        .text(source)
        .fetch_optional(conn)
        .await?;
    row.map(|r| r.int("seq")).transpose()
}

/// Records how far event source `source` was read for endpoint `id`.
pub async fn set_cursor(conn: &mut Conn, id: &str, source: &str, seq: i64) -> Result<(), StoreError> {
    Q::new(
        "INSERT INTO webhook_cursors (endpoint_id, source, seq) VALUES ($1, $2, $3) \
         ON CONFLICT (endpoint_id, source) DO UPDATE SET seq = excluded.seq",
    )
    .text(id)
    .text(source)
    .int(seq)
    .execute(conn)
    .await?;
    Ok(())
}

/// The highest event number fanned out to endpoint `id` for `subject` of
/// `source` (0: none).
pub async fn last_fanned_out(conn: &mut Conn, id: &str, source: &str, subject: &str) -> Result<i64, StoreError> {
    Q::new(
        "SELECT COALESCE(MAX(n), 0) AS n FROM webhook_deliveries \
         WHERE endpoint_id = $1 AND source = $2 AND subject = $3",
    )
    .text(id)
    .text(source)
    .text(subject)
    .fetch_one(conn)
    .await?
    .int("n")
}

/// A delivery to create.
pub struct NewDelivery<'a> {
    /// Its `webhook-id` (`msg_` and a ULID).
    pub id: &'a str,
    /// The endpoint.
    pub endpoint_id: &'a str,
    /// The event source (`deployment`).
    pub source: &'a str,
    /// The subject within it (a deployment id).
    pub subject: &'a str,
    /// The event's number within its subject: the order of delivery.
    pub n: i64,
    /// The event type.
    pub event_type: &'a str,
    /// The exact body to send.
    pub body: &'a str,
    /// Unix ms.
    pub now: i64,
}

/// Creates a pending delivery, due now; nothing when the endpoint already
/// has one for that event. Returns whether one was created.
pub async fn insert_delivery(conn: &mut Conn, new: &NewDelivery<'_>) -> Result<bool, StoreError> {
    let n = Q::new(
        "INSERT INTO webhook_deliveries (id, endpoint_id, source, subject, n, event_type, body, status, attempts, \
         next_try_at, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', 0, $8, $8, $8) \
         ON CONFLICT (endpoint_id, source, subject, n) DO NOTHING",
    )
    .text(new.id)
    .text(new.endpoint_id)
    .text(new.source)
    .text(new.subject)
    .int(new.n)
    .text(new.event_type)
    .text(new.body)
    .int(new.now)
    .execute(conn)
    .await?;
    Ok(n > 0)
}

/// One delivery, as its log shows it (the body only where it is sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Its `webhook-id`.
    pub id: String,
    /// The endpoint.
    pub endpoint_id: String,
    /// The event source.
    pub source: String,
    /// The subject (a deployment id).
    pub subject: String,
    /// The event's number within its subject.
    pub n: i64,
    /// The event type.
    pub event_type: String,
    /// The exact body sent.
    pub body: String,
    /// `pending`, `delivered` or `failed`.
    pub status: String,
    /// Attempts made.
    pub attempts: i64,
    /// The first attempt since it was created or redelivered by hand, Unix ms.
    pub first_try_at: Option<i64>,
    /// When it is tried next, Unix ms (`None`: never again).
    pub next_try_at: Option<i64>,
    /// The class of the last failure (`status`, `timeout`, `connect_failed`, …).
    pub last_error: Option<String>,
    /// The HTTP status of the last answer.
    pub last_status: Option<i64>,
    /// At most 256 bytes of the last answer's body, the secret taken out.
    pub last_excerpt: Option<String>,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub updated_at: i64,
    /// Unix ms.
    pub delivered_at: Option<i64>,
}

const DELIVERY_COLUMNS: &str = "id, endpoint_id, source, subject, n, event_type, body, status, attempts, first_try_at, \
                                next_try_at, last_error, last_status, last_excerpt, created_at, updated_at, delivered_at";

fn delivery(r: &super::Row) -> Result<Delivery, StoreError> {
    Ok(Delivery {
        id: r.text("id")?,
        endpoint_id: r.text("endpoint_id")?,
        source: r.text("source")?,
        subject: r.text("subject")?,
        n: r.int("n")?,
        event_type: r.text("event_type")?,
        body: r.text("body")?,
        status: r.text("status")?,
        attempts: r.int("attempts")?,
        first_try_at: r.opt_int("first_try_at")?,
        next_try_at: r.opt_int("next_try_at")?,
        last_error: r.opt_text("last_error")?,
        last_status: r.opt_int("last_status")?,
        last_excerpt: r.opt_text("last_excerpt")?,
        created_at: r.int("created_at")?,
        updated_at: r.int("updated_at")?,
        delivered_at: r.opt_int("delivered_at")?,
    })
}

/// The deliveries of endpoint `id` to send now: of each subject, its
/// oldest pending one, when it is due; at most `limit`, oldest first.
pub async fn due(conn: &mut Conn, id: &str, now: i64, limit: i64) -> Result<Vec<Delivery>, StoreError> {
    Q::new(format!(
        "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries d \
         WHERE d.endpoint_id = $1 AND d.status = 'pending' AND d.next_try_at <= $2 \
         AND NOT EXISTS (SELECT 1 FROM webhook_deliveries p WHERE p.endpoint_id = d.endpoint_id \
           AND p.source = d.source AND p.subject = d.subject AND p.status = 'pending' AND p.n < d.n) \
         ORDER BY d.created_at, d.n LIMIT $3"
    ))
    .text(id)
    .int(now)
    .int(limit)
    .fetch_all(conn)
    .await?
    .iter()
    .map(delivery)
    .collect()
}

/// The earliest next try of endpoint `id`'s pending deliveries.
pub async fn next_due(conn: &mut Conn, id: &str) -> Result<Option<i64>, StoreError> {
    Q::new("SELECT MIN(next_try_at) AS at FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'pending'")
        .text(id)
        .fetch_one(conn)
        .await?
        .opt_int("at")
}

/// What one attempt of a delivery ended in, to record.
pub struct Attempted<'a> {
    /// The delivery.
    pub id: &'a str,
    /// `pending` (tried again at `next_try_at`), `delivered` or `failed`.
    pub status: &'a str,
    /// When it is tried next (with `pending`).
    pub next_try_at: Option<i64>,
    /// The class of the failure.
    pub error: Option<&'a str>,
    /// The answer's status.
    pub http_status: Option<u16>,
    /// The start of the answer's body, the secret taken out.
    pub excerpt: Option<&'a str>,
    /// Unix ms.
    pub now: i64,
}

/// Records one attempt of a delivery that is still pending.
pub async fn record_attempt(conn: &mut Conn, a: &Attempted<'_>) -> Result<(), StoreError> {
    Q::new(
        "UPDATE webhook_deliveries SET status = $2, next_try_at = $3, last_error = $4, last_status = $5, \
         last_excerpt = $6, attempts = attempts + 1, updated_at = $7, first_try_at = COALESCE(first_try_at, $7), \
         delivered_at = CASE WHEN $2 = 'delivered' THEN $7 ELSE delivered_at END \
         WHERE id = $1 AND status = 'pending'",
    )
    .text(a.id)
    .text(a.status)
    .opt_int(a.next_try_at)
    .opt_text(a.error)
    .opt_int(a.http_status.map(i64::from))
    .opt_text(a.excerpt)
    .int(a.now)
    .execute(conn)
    .await?;
    Ok(())
}

/// Records the outcome of an attempt on the endpoint: a success clears
/// its failures; a failure starts them (`failing_since`) when none were.
/// Returns since when it fails (`None` after a success).
pub async fn record_endpoint_outcome(
    conn: &mut Conn,
    id: &str,
    success: bool,
    now: i64,
) -> Result<Option<i64>, StoreError> {
    if success {
        Q::new("UPDATE webhook_endpoints SET failing_since = NULL WHERE id = $1").text(id).execute(conn).await?;
        return Ok(None);
    }
    Q::new("UPDATE webhook_endpoints SET failing_since = COALESCE(failing_since, $2) WHERE id = $1")
        .text(id)
        .int(now)
        .execute(conn)
        .await?;
    Ok(get(conn, id).await?.and_then(|e| e.failing_since))
}

/// Endpoint `id`'s deliveries, newest first, at most `limit`, those
/// created before delivery `before` (its id) when given.
pub async fn deliveries(
    conn: &mut Conn,
    id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<Delivery>, StoreError> {
    let q = match before {
        Some(before) => Q::new(format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE endpoint_id = $1 AND id < $2 \
             ORDER BY id DESC LIMIT $3"
        ))
        .text(id)
        .text(before),
        None => Q::new(format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE endpoint_id = $1 AND id > $2 \
             ORDER BY id DESC LIMIT $3"
        ))
        .text(id)
        .text(""),
    };
    q.int(limit).fetch_all(conn).await?.iter().map(delivery).collect()
}

/// Delivery `delivery` of endpoint `id`.
pub async fn delivery_of(conn: &mut Conn, id: &str, delivery_id: &str) -> Result<Option<Delivery>, StoreError> {
    let row = Q::new(format!("SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE endpoint_id = $1 AND id = $2"))
        .text(id)
        .text(delivery_id)
        .fetch_optional(conn)
        .await?;
    row.as_ref().map(delivery).transpose()
}

/// Queues delivery `delivery_id` of endpoint `id` again, due now, with the
/// same `webhook-id` and body; `false` when there is no such delivery.
pub async fn redeliver(conn: &mut Conn, id: &str, delivery_id: &str, now: i64) -> Result<bool, StoreError> {
    let n = Q::new(
        "UPDATE webhook_deliveries SET status = 'pending', next_try_at = $3, updated_at = $3, first_try_at = NULL \
         WHERE endpoint_id = $1 AND id = $2",
    )
    .text(id)
    .text(delivery_id)
    .int(now)
    .execute(conn)
    .await?;
    Ok(n > 0)
}

/// Removes the deliveries that ended (`delivered`, `failed`) before
/// `before`, Unix ms, but the newest of each (endpoint, source, subject):
/// the fan-out continues a subject from its newest delivery's number, so
/// that one stays whatever its age. Returns how many were removed.
pub async fn sweep(conn: &mut Conn, before: i64) -> Result<u64, StoreError> {
    Q::new(
        "DELETE FROM webhook_deliveries WHERE status <> 'pending' AND updated_at < $1 \
         AND EXISTS (SELECT 1 FROM webhook_deliveries l WHERE l.endpoint_id = webhook_deliveries.endpoint_id \
           AND l.source = webhook_deliveries.source AND l.subject = webhook_deliveries.subject \
           AND l.n > webhook_deliveries.n)",
    )
    .int(before)
    .execute(conn)
    .await
}
