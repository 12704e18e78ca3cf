//! A build's reconcile-push columns (DL-2): the callback a delete gave, its
//! state, and the outcome of the push, as the destroy's build row keeps them.

use super::{json_col, Conn, StoreError, Q};
use serde_json::Value;

/// Where a destroy's reconcile push is (DL-2), as stored in the outcome's
/// `state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CallbackState {
    /// Accepted with the delete; the destroy has not ended.
    Waiting,
    /// The destroy reached `idle`; the push is queued.
    Queued,
    /// A worker took the push (and the token) and is sending it; it stays
    /// so when the worker died meanwhile (the push is never sent twice).
    Sending,
    /// The front-end answered 2xx.
    Delivered,
    /// Sent or tried, and not delivered (see `status` or `error`).
    Failed,
    /// Never sent: the destroy did not reach `idle`.
    NotSent,
}

/// A callback outcome to store: `{state, message, at, ...extra}`.
pub fn callback_outcome(state: CallbackState, message: &str, at: i64, extra: Option<&Value>) -> Value {
    let mut v = serde_json::json!({ "state": state, "message": message, "at": at });
    if let Some(Value::Object(extra)) = extra {
        for (k, x) in extra {
            v[k] = x.clone();
        }
    }
    v
}

/// Stores an accepted callback on destroy build `id` (DL-2), replacing one
/// an earlier delete gave, while the build has not ended. Returns whether
/// it was stored. Call in the delete's transaction.
pub async fn set_callback(conn: &mut Conn, id: &str, url: &str, token: &str, now: i64) -> Result<bool, StoreError> {
    let waiting = callback_outcome(CallbackState::Waiting, "the push is sent when the destroy reaches idle", now, None);
    let changed = Q::new(
        "UPDATE builds SET callback_url = $1, callback_token = $2, callback = $3, version = version + 1
         WHERE id = $4 AND kind = 'destroy' AND status IN ('queued', 'running')",
    )
    .text(url)
    .text(token)
    .text(waiting.to_string())
    .text(id)
    .execute(conn)
    .await?;
    Ok(changed == 1)
}

/// Settles destroy build `id`'s callback when the build ends, in the
/// transaction that ends it: when it reached `idle` the push is marked
/// queued and `true` is returned (the caller pushes the job in the same
/// transaction); otherwise the token is dropped and the outcome says no
/// push comes. A build without a callback answers `false`.
pub async fn settle_callback(conn: &mut Conn, id: &str, idle: bool, ended: &str, now: i64) -> Result<bool, StoreError> {
    if idle {
        let queued = callback_outcome(CallbackState::Queued, "the destroy reached idle; the push is queued", now, None);
        let changed = Q::new(
            "UPDATE builds SET callback = $1 WHERE id = $2 AND callback_token IS NOT NULL AND callback_url IS NOT NULL",
        )
        .text(queued.to_string())
        .text(id)
        .execute(conn)
        .await?;
        return Ok(changed == 1);
    }
    let message = format!("the destroy ended {ended} without reaching idle; no push is sent");
    let not_sent = callback_outcome(CallbackState::NotSent, &message, now, None);
    Q::new("UPDATE builds SET callback_token = NULL, callback = $1 WHERE id = $2 AND callback_token IS NOT NULL")
        .text(not_sent.to_string())
        .text(id)
        .execute(conn)
        .await?;
    Ok(false)
}

/// Takes build `id`'s queued push: returns `(deployment, url, token)` and,
/// in the same statement's transaction, drops the token and marks the push
/// `sending`, so it is sent at most once whatever happens next. `None`:
/// no push is queued (already taken, or none).
pub async fn take_callback(
    conn: &mut Conn,
    id: &str,
    now: i64,
) -> Result<Option<(String, String, String)>, StoreError> {
    let Some(row) = Q::new(
        "SELECT deployment_id, callback_url, callback_token, callback FROM builds
         WHERE id = $1 AND callback_token IS NOT NULL AND callback_url IS NOT NULL",
    )
    .text(id)
    .fetch_optional(conn)
    .await?
    else {
        return Ok(None);
    };
    let outcome: Value = json_col(&row.opt_text("callback")?.unwrap_or_else(|| "null".into()), "builds.callback")?;
    if outcome.get("state").and_then(Value::as_str) != Some("queued") {
        return Ok(None);
    }
    let sending = callback_outcome(CallbackState::Sending, "a worker is sending the push", now, None);
    // Conditional on the token still being there: of two workers handed
    // the same job, one takes it.
    let taken =
        Q::new("UPDATE builds SET callback_token = NULL, callback = $1 WHERE id = $2 AND callback_token IS NOT NULL")
            .text(sending.to_string())
            .text(id)
            .execute(conn)
            .await?;
    if taken != 1 {
        return Ok(None);
    }
    Ok(Some((row.text("deployment_id")?, row.text("callback_url")?, row.text("callback_token")?)))
}

/// Ends build `id`'s push that a worker took and never recorded (it died
/// while sending): the outcome becomes `failed` with error `interrupted`,
/// since the push may or may not have arrived and is not sent again.
/// Conditional on the outcome read still being `sending`; returns whether
/// it changed.
pub async fn interrupt_callback(conn: &mut Conn, id: &str, now: i64) -> Result<bool, StoreError> {
    let Some(row) = Q::new("SELECT callback FROM builds WHERE id = $1").text(id).fetch_optional(conn).await? else {
        return Ok(false);
    };
    let Some(text) = row.opt_text("callback")? else { return Ok(false) };
    let outcome: Value = json_col(&text, "builds.callback")?;
    if outcome.get("state").and_then(Value::as_str) != Some("sending") {
        return Ok(false);
    }
    let message = "the worker sending the push stopped before it recorded the answer; the push may or may not have \
                   arrived, and it is not sent again";
    let interrupted =
        callback_outcome(CallbackState::Failed, message, now, Some(&serde_json::json!({ "error": "interrupted" })));
    let changed = Q::new("UPDATE builds SET callback = $1 WHERE id = $2 AND callback = $3")
        .text(interrupted.to_string())
        .text(id)
        .text(text)
        .execute(conn)
        .await?;
    Ok(changed == 1)
}

/// Records the push's outcome on build `id`.
pub async fn record_callback(conn: &mut Conn, id: &str, outcome: &Value) -> Result<(), StoreError> {
    Q::new("UPDATE builds SET callback = $1 WHERE id = $2").text(outcome.to_string()).text(id).execute(conn).await?;
    Ok(())
}
