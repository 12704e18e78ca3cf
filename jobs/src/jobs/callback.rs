//! `reconcile_push` (DL-2, seed "Durability of the intent record"): when a
//! destroy reached `idle`, POST once to the callback URL its delete gave,
//! with the front-end's token as a bearer header, so that a front-end whose
//! browser tab closed between the phases of a delete can remove its intent
//! record.
//!
//! 1. Take the push: in one transaction the token leaves the build row and
//!    the outcome becomes `sending`. A job handed out twice (its worker died)
//!    finds nothing to take: the push is sent at most once, never retried;
//!    a push left `sending` by a dead worker becomes `failed` (`interrupted`).
//! 2. Send it with [`crate::callback::push`]: the URL checked again against
//!    this worker's `SLIPWAY_ALLOWED_ORIGINS`, the host resolved once and
//!    every address checked (`SLIPWAY_CALLBACK_ALLOW_PRIVATE`), the
//!    connection made to a checked address, no redirect followed, within
//!    [`PUSH_DEADLINE`].
//! 3. Record the outcome on the build (`GET /builds/{id}` shows it): the
//!    status, or the class of error, never the token.

use super::{Ctx, Job, JobError};
use crate::callback::{push, PushRequest, Resolve, SystemResolver, PUSH_DEADLINE};
use crate::store::builds::{self, callback_outcome, CallbackState};
use crate::store::queue::CallbackJob;
use crate::store::{now_ms, StoreError};
use secrecy::SecretString;
use serde_json::json;
use std::time::{Duration, Instant};
use tracing::Instrument;

/// How long the outcome is tried to be recorded while the database is away.
const RECORD_PATIENCE: Duration = Duration::from_secs(60);

/// The `callbacks` queue carries reconcile pushes and, with
/// [`CallbackJob::webhook`] set, webhook endpoints' delivery jobs
/// ([`super::webhook`]); the output counts the webhook deliveries.
impl Job for CallbackJob {
    type Output = crate::webhooks::Tally;
    const NAME: &'static str = "callback";

    async fn run(self, ctx: &Ctx) -> Result<crate::webhooks::Tally, JobError> {
        match self.webhook {
            Some(pump) => Ok(super::webhook::run(pump, ctx).await?),
            None => {
                run(self, ctx).await?;
                Ok(crate::webhooks::Tally::default())
            }
        }
    }

    fn span(&self, worker: &str) -> tracing::Span {
        match &self.webhook {
            Some(pump) => {
                tracing::info_span!("job", job.kind = "webhook", webhook.id = %pump.endpoint_id, worker.name = %worker)
            }
            None => {
                tracing::info_span!("job", job.kind = "reconcile_push", build.id = %self.build_id, worker.name = %worker)
            }
        }
    }
}

/// Runs one `reconcile_push` with the system's resolver.
pub async fn run(job: CallbackJob, ctx: &Ctx) -> Result<(), StoreError> {
    run_with(job, ctx, &SystemResolver).await
}

/// Runs one `reconcile_push`, resolving host names with `resolver`.
pub async fn run_with(job: CallbackJob, ctx: &Ctx, resolver: &dyn Resolve) -> Result<(), StoreError> {
    let span = tracing::info_span!("reconcile_push", build.id = %job.build_id, deployment.id = tracing::field::Empty);
    send(job, ctx, resolver).instrument(span).await
}

async fn send(job: CallbackJob, ctx: &Ctx, resolver: &dyn Resolve) -> Result<(), StoreError> {
    let taken = {
        let mut tx = ctx.db.begin_write().await?;
        let taken = builds::take_callback(&mut tx, &job.build_id, now_ms()).await?;
        tx.commit().await?;
        taken
    };
    let Some((deployment, url, token)) = taken else {
        // Handed out again after the worker that took it died: what it
        // sent is unknown, and nothing is sent twice.
        if builds::interrupt_callback(&mut ctx.db.acquire().await?, &job.build_id, now_ms()).await? {
            tracing::warn!("the push was interrupted by its worker's end; it is recorded as failed and not sent again");
        } else {
            tracing::debug!("no push to send: already taken or none queued");
        }
        return Ok(());
    };
    tracing::Span::current().record("deployment.id", deployment.as_str());
    let token = SecretString::from(token);
    let body = json!({ "deployment_id": deployment, "state": "idle", "build_id": job.build_id });
    let outcome = push(PushRequest {
        url: &url,
        token: &token,
        body: &body,
        origins: &ctx.config.allowed_origins,
        allow_private: ctx.config.callback_allow_private,
        resolver,
        deadline: PUSH_DEADLINE,
    })
    .await;
    drop(token);
    let state = if outcome.delivered { CallbackState::Delivered } else { CallbackState::Failed };
    let extra = json!({
        "status": outcome.status,
        "error": outcome.error.map(|e| e.as_str()),
        "address": outcome.address.map(|a| a.to_string()),
    });
    let stored = callback_outcome(state, &outcome.message, now_ms(), Some(&extra));
    tracing::info!(
        delivered = outcome.delivered,
        status = outcome.status,
        error = outcome.error.map(|e| e.as_str()),
        "reconcile push sent"
    );
    record(ctx, &job.build_id, &stored).await
}

/// Records the outcome, waiting out a database outage for a while.
async fn record(ctx: &Ctx, build: &str, outcome: &serde_json::Value) -> Result<(), StoreError> {
    let started = Instant::now();
    loop {
        let attempt = async { builds::record_callback(&mut ctx.db.acquire().await?, build, outcome).await };
        match attempt.await {
            Ok(()) => return Ok(()),
            Err(e) if e.is_unavailable() && started.elapsed() < RECORD_PATIENCE => {
                tracing::warn!(error = %e, "cannot record the push's outcome yet; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e),
        }
    }
}
