//! A webhook endpoint's delivery job (WH-1), on the `callbacks` queue: one
//! chain of jobs per enabled endpoint, each run:
//!
//! 1. stops at once when the endpoint is gone, disabled, or its chain
//!    moved to another generation (`pump`: the api starts a new one on a
//!    create, an enable or a redelivery; a worker's sweep restarts one
//!    whose job stopped, [`restart_stalled`]);
//! 2. fans the endpoint's new events out into delivery rows
//!    ([`crate::webhooks::sources::fan_out`]), in one transaction;
//! 3. sends the due deliveries, the oldest pending one of each subject
//!    only, so each subject's events arrive in order
//!    ([`crate::store::webhooks::due`]), at most [`BATCH`] at once, each
//!    recorded as soon as its attempt ended: delivered, tried again after
//!    [`crate::outbound::backoff`] (honouring `Retry-After`; a `500` or
//!    `502` once more at once), or failed (refused, a redirect, a URL or
//!    address refused now, or failing for `WEBHOOK_RETRY_WINDOW`);
//! 4. disables the endpoint when it failed every attempt for the retry
//!    window, saying why;
//! 5. pushes its successor, due at the next retry or after `WEBHOOK_POLL`.
//!
//! A worker killed after sending and before recording leaves the delivery
//! pending: it is sent again (at least once), with the same `webhook-id`.

use super::Ctx;
use crate::callback::{Resolve, SystemResolver};
use crate::outbound::{backoff, Class};
use crate::store::queue::{self, CallbackJob, WebhookPump};
use crate::store::webhooks::{self as rows, Attempted, Delivery, Endpoint};
use crate::store::{now_ms, StoreError};
use crate::webhooks::send::{attempt, Attempt, Sent};
use crate::webhooks::{rfc3339, sources, Tally};
use secrecy::SecretString;
use std::time::Duration;

/// The most deliveries one run sends at once (each of another subject).
pub const BATCH: i64 = 16;

/// A chain whose job was due this long ago and did not run is restarted
/// by [`restart_stalled`].
pub const STALLED_AFTER: Duration = Duration::from_secs(300);

/// The first pause before a retry; it doubles up to
/// [`crate::config::WebhooksConfig::max_backoff`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// Runs one job of endpoint `pump.endpoint_id`'s chain with the system's resolver.
pub async fn run(pump: WebhookPump, ctx: &Ctx) -> Result<Tally, StoreError> {
    run_with(pump, ctx, &SystemResolver).await
}

/// How long a job waits out a database outage (trying again every second)
/// before it fails its attempt: a chain whose job failed every attempt
/// would wait for a sweep ([`restart_stalled`]).
pub const DATABASE_PATIENCE: Duration = Duration::from_secs(120);

/// Runs one job of an endpoint's chain, resolving host names with
/// `resolver`; a database outage is waited out for [`DATABASE_PATIENCE`]
/// (the run starts again: what it sent and did not record is sent again).
pub async fn run_with(pump: WebhookPump, ctx: &Ctx, resolver: &dyn Resolve) -> Result<Tally, StoreError> {
    let started = std::time::Instant::now();
    let mut tally = Tally::default();
    loop {
        match run_once(pump.clone(), ctx, resolver, &mut tally).await {
            Err(e) if e.is_unavailable() && started.elapsed() < DATABASE_PATIENCE => {
                tracing::warn!(error = %e, "a webhook delivery job cannot reach the database; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e),
            Ok(()) => return Ok(tally),
        }
    }
}

async fn run_once(pump: WebhookPump, ctx: &Ctx, resolver: &dyn Resolve, tally: &mut Tally) -> Result<(), StoreError> {
    // Handed out before it was due: back until then.
    if let Some(early) = pump.not_before_ms.map(|at| at - now_ms()).filter(|ms| *ms > 0) {
        let mut tx = ctx.db.begin_write().await?;
        let left = Duration::from_millis(u64::try_from(early).unwrap_or(0));
        queue::push(&mut tx, &CallbackJob::webhook(pump), Some(left)).await?;
        tx.commit().await?;
        return Ok(());
    }
    let endpoint = rows::get(&mut ctx.db.acquire().await?, &pump.endpoint_id).await?;
    let Some(endpoint) = endpoint.filter(|e| e.enabled && e.pump == pump.pump) else {
        tracing::debug!("the endpoint is gone, disabled, or served by a newer job: this chain stops");
        return Ok(());
    };
    let now = now_ms();
    {
        let mut tx = ctx.db.begin_write().await?;
        let created = sources::fan_out(&mut tx, &endpoint, now).await?;
        tx.commit().await?;
        if created > 0 {
            tracing::debug!(deliveries = created, "events fanned out");
        }
    }
    let (due, secret) = {
        let mut conn = ctx.db.acquire().await?;
        let due = rows::due(&mut conn, &endpoint.id, now, BATCH).await?;
        let secret = rows::secret_of(&mut conn, &endpoint.id).await?;
        (due, secret)
    };
    if let (false, Some(secret)) = (due.is_empty(), secret) {
        let sends = due.iter().map(|d| deliver(ctx, &endpoint, d, &secret, resolver));
        for outcome in futures::future::join_all(sends).await {
            match outcome? {
                Outcome::Delivered => tally.delivered += 1,
                Outcome::Retrying => tally.retrying += 1,
                Outcome::Failed => tally.failed += 1,
            }
        }
    }
    successor(ctx, &endpoint, &pump, due.len() as i64 == BATCH).await
}

enum Outcome {
    Delivered,
    Retrying,
    Failed,
}

/// Sends one delivery and records what it gave, on the delivery and on
/// the endpoint (disabling it past the retry window).
async fn deliver(
    ctx: &Ctx,
    endpoint: &Endpoint,
    d: &Delivery,
    secret: &SecretString,
    resolver: &dyn Resolve,
) -> Result<Outcome, StoreError> {
    let settings = &ctx.config.webhooks;
    let sent = attempt(Attempt {
        url: &endpoint.url,
        id: &d.id,
        body: &d.body,
        secret,
        origins: &ctx.config.allowed_origins,
        allow_private: ctx.config.callback_allow_private,
        resolver,
        deadline: settings.attempt_timeout,
        timestamp: now_ms() / 1000,
    })
    .await;
    // A crash here (sent, not recorded) sends the delivery again.
    crate::failpoint::hit("webhook_after_send");
    let now = now_ms();
    let window = i64::try_from(settings.retry_window.as_millis()).unwrap_or(i64::MAX);
    let out_of_window = d.first_try_at.unwrap_or(now).saturating_add(window) <= now;
    let (status, next, outcome) = match &sent.class {
        Class::Success => ("delivered", None, Outcome::Delivered),
        Class::Refused => ("failed", None, Outcome::Failed),
        _ if out_of_window => ("failed", None, Outcome::Failed),
        Class::RetryOnce if d.attempts == 0 => ("pending", Some(now), Outcome::Retrying),
        Class::RetryOnce => ("pending", Some(now + pause(d, settings.max_backoff(), None)), Outcome::Retrying),
        Class::RetryLater { after } => {
            ("pending", Some(now + pause(d, settings.max_backoff(), *after)), Outcome::Retrying)
        }
    };
    let error = match (&sent.class, out_of_window) {
        (Class::Success, _) => None,
        (Class::Refused, _) => sent.error,
        (_, true) => Some("retry_window_passed"),
        _ => sent.error,
    };
    let mut tx = ctx.db.begin_write().await?;
    rows::record_attempt(
        &mut tx,
        &Attempted {
            id: &d.id,
            status,
            next_try_at: next,
            error,
            http_status: sent.status,
            excerpt: sent.excerpt.as_deref(),
            now,
        },
    )
    .await?;
    let success = matches!(sent.class, Class::Success);
    let failing_since = rows::record_endpoint_outcome(&mut tx, &endpoint.id, success, now).await?;
    if let Some(since) = failing_since.filter(|since| since.saturating_add(window) <= now) {
        let reason = disabled_reason(&sent, since, settings.retry_window);
        rows::disable(&mut tx, &endpoint.id, &reason, now).await?;
        tracing::warn!(
            webhook.id = %endpoint.id,
            error = sent.error,
            status = sent.status,
            "a webhook endpoint failed every attempt for its retry window: disabled"
        );
    }
    tx.commit().await?;
    tracing::info!(
        webhook.id = %endpoint.id,
        delivery.id = %d.id,
        event = %d.event_type,
        outcome = status,
        http.status = sent.status,
        error = error,
        "webhook delivery attempted"
    );
    Ok(outcome)
}

/// The pause before delivery `d`'s next attempt.
fn pause(d: &Delivery, most: Duration, after: Option<Duration>) -> i64 {
    let attempt = u32::try_from(d.attempts + 1).unwrap_or(u32::MAX);
    i64::try_from(backoff(attempt, FIRST_BACKOFF, most, after).as_millis()).unwrap_or(i64::MAX / 2)
}

/// Why an endpoint was disabled, as `GET /webhooks/{id}` says it.
fn disabled_reason(sent: &Sent, since: i64, window: Duration) -> String {
    let last = match (sent.status, sent.error) {
        (Some(status), _) => format!("the last answer was HTTP {status}"),
        (None, Some(error)) => format!("the last attempt failed: {error}"),
        (None, None) => "the last attempt failed".to_owned(),
    };
    format!(
        "every delivery attempt failed since {} for the whole retry window (WEBHOOK_RETRY_WINDOW, {} s); {last}",
        rfc3339(since),
        window.as_secs()
    )
}

/// Pushes the chain's next job, unless the endpoint was disabled or its
/// chain moved on meanwhile: at once when the batch was full, else at the
/// next retry due or after `WEBHOOK_POLL`, whichever comes first.
async fn successor(ctx: &Ctx, endpoint: &Endpoint, pump: &WebhookPump, more: bool) -> Result<(), StoreError> {
    let poll = i64::try_from(ctx.config.webhooks.poll.as_millis()).unwrap_or(2000);
    let mut tx = ctx.db.begin_write().await?;
    let now = now_ms();
    let still = rows::get(&mut tx, &endpoint.id).await?.filter(|e| e.enabled && e.pump == pump.pump);
    if still.is_none() {
        tx.commit().await?;
        return Ok(());
    }
    let wait = if more {
        0
    } else {
        let next = rows::next_due(&mut tx, &endpoint.id).await?.map_or(poll, |at| at - now);
        next.clamp(0, poll)
    };
    let due = now + wait;
    if let Some(generation) = rows::next_pump(&mut tx, &endpoint.id, due, Some(pump.pump)).await? {
        let next = WebhookPump { endpoint_id: endpoint.id.clone(), pump: generation, not_before_ms: Some(due) };
        let delay = Duration::from_millis(u64::try_from(wait).unwrap_or(0));
        queue::push(&mut tx, &CallbackJob::webhook(next), (wait > 0).then_some(delay)).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Starts endpoint `id`'s chain anew, due now, in `tx` (the api's create,
/// enable, secret rotation and redelivery; [`restart_stalled`]).
pub async fn start_chain(tx: &mut crate::store::Conn, id: &str) -> Result<(), StoreError> {
    let now = now_ms();
    if let Some(generation) = rows::next_pump(tx, id, now, None).await? {
        let pump = WebhookPump { endpoint_id: id.to_owned(), pump: generation, not_before_ms: None };
        queue::push(tx, &CallbackJob::webhook(pump), None).await?;
    }
    Ok(())
}

/// Restarts the chains of enabled endpoints whose job was due more than
/// [`STALLED_AFTER`] ago (every attempt of it failed, the database away
/// too long); run by each worker's sweep. Returns how many.
pub async fn restart_stalled(ctx: &Ctx) -> Result<usize, StoreError> {
    let before = now_ms() - i64::try_from(STALLED_AFTER.as_millis()).unwrap_or(300_000);
    let mut tx = ctx.db.begin_write().await?;
    let stalled = rows::stalled(&mut tx, before).await?;
    for id in &stalled {
        start_chain(&mut tx, id).await?;
    }
    tx.commit().await?;
    Ok(stalled.len())
}
