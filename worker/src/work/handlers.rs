//! The apalis handlers: each adapts a queued job to its body ([`Job`]) and
//! runs it in a task of its own, so that a restart of the apalis worker
//! (the database dropped its connections) does not drop it. No apalis
//! timeout or catch-panic layer is used: deadlines live in the job body,
//! which always records an outcome.

use super::shutdown::Gate;
use apalis::prelude::{Attempt, BoxDynError, Data};
use apalis_cron::{timezone::Utc, Tick};
use slipway_jobs::jobs::build_job::Ran;
use slipway_jobs::jobs::{retry_backoff, sweep, Ctx, Job};
use slipway_jobs::metrics::Metrics;
use slipway_jobs::store::queue::{BuildJob, CallbackJob, Concurrency, NixJob, ReadinessJob, RolloutJob};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// The builds this process runs at most at once (`BUILD_SLOTS`), counted
/// by the build tasks themselves rather than by apalis (see [`handle`]).
#[derive(Clone)]
pub(crate) struct Slots(pub(crate) Arc<tokio::sync::Semaphore>);

/// What the worker does once a job body ended without an error.
pub(crate) enum Ended {
    /// Acknowledge the job: it is done.
    Done,
    /// Never acknowledge it: this process exits at once, and another
    /// worker takes the job over.
    Left,
}

/// How the worker adapts one job kind's end ([`handle`]).
pub(crate) trait Handled: Job {
    /// What the worker does with a run's output (`metrics`: the worker's own).
    fn ended(_output: Self::Output, _metrics: &Metrics) -> Ended {
        Ended::Done
    }
}

/// A build that ran to an end this worker recorded is counted in its
/// metrics (kind, outcome, how long the effect ran); one this process
/// abandoned (stopping at once) is never acknowledged.
impl Handled for BuildJob {
    fn ended(ran: Ran, metrics: &Metrics) -> Ended {
        match ran {
            Ran::Abandoned => Ended::Left,
            Ran::Finished(report) => {
                let ran = Duration::from_millis(report.duration_ms.max(0) as u64);
                metrics.build_finished(report.kind, report.status, ran);
                Ended::Done
            }
            _ => Ended::Done,
        }
    }
}

impl Handled for NixJob {}

/// The push itself is never retried (DL-2); only a job that could not take
/// or record it goes back. A webhook delivery job's attempts are counted.
impl Handled for CallbackJob {
    fn ended(tally: slipway_jobs::webhooks::Tally, metrics: &Metrics) -> Ended {
        metrics.webhook_deliveries(&tally);
        Ended::Done
    }
}

impl Handled for ReadinessJob {}

impl Handled for RolloutJob {}

/// The apalis handler of every queue: adapts a queued `J` to [`Job::run`],
/// run in [`Job::span`] in a task of its own, holding a share of `gate`
/// until it ends; once the gate is closing it does not start.
///
/// A build ([`Concurrency::BuildSlots`]) first takes one of the process's
/// `slots` (a build waiting for a slot has not started: a rolling stop
/// hands it back); when the database drops its connections (a restart, a
/// failover) apalis ends the worker's stream and the monitor starts it
/// again, dropping this future; the build task goes on, waits the outage
/// out and records its end, so a database restart re-runs no effect.
///
/// A body that could not record its end waits its backoff, then goes back
/// to the queue ([`give_back`]), since apalis re-queues at once; its own
/// failures are its result.
pub(crate) async fn handle<J: Handled>(
    job: J,
    ctx: Data<Ctx>,
    slots: Data<Slots>,
    metrics: Data<Metrics>,
    gate: Data<Gate>,
    attempt: Attempt,
) -> Result<(), BoxDynError> {
    let (permit, share) = if matches!(J::CONCURRENCY, Concurrency::BuildSlots) {
        let permit = Arc::clone(&(*slots).0).acquire_owned().await.expect("the slot semaphore is never closed");
        let Some(share) = gate.try_enter() else {
            drop(permit);
            return std::future::pending().await;
        };
        (Some(permit), share)
    } else {
        (None, gate.enter().await)
    };
    let ctx = (*ctx).clone();
    let span = job.span(&ctx.worker);
    let task = tokio::spawn(
        async move {
            let result = job.run(&ctx).await;
            drop(permit);
            drop(share);
            result
        }
        .instrument(span),
    );
    match task.await {
        Ok(Ok(output)) => match J::ended(output, &metrics) {
            Ended::Done => Ok(()),
            // The process exits at once: the job must not be acknowledged,
            // so that another worker takes it over.
            Ended::Left => std::future::pending().await,
        },
        Ok(Err(e)) => give_back(e, &attempt, J::NAME).await,
        Err(e) => Err(Box::new(e)),
    }
}

/// A job that could not record its end waits its backoff, then fails its
/// attempt so apalis hands it out again (apalis itself re-queues at once).
async fn give_back<E>(e: E, attempt: &Attempt, kind: &str) -> Result<(), BoxDynError>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let wait = retry_backoff(attempt.current());
    tracing::error!(error = %e, retry_in_s = wait.as_secs(), "{kind} job could not record its end; it will be handed out again");
    tokio::time::sleep(wait).await;
    Err(Box::new(e))
}

/// The sweep job on apalis-cron ([`sweep::tick`]): a failed sweep waits for
/// the next tick (§6: "next tick").
pub(crate) async fn sweep_tick(_tick: Tick<Utc>, ctx: Data<Ctx>, gate: Data<Gate>) -> Result<(), BoxDynError> {
    let _share = gate.enter().await;
    sweep::tick(&ctx).await;
    Ok(())
}
