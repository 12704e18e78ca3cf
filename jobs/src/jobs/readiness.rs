//! The `readiness` job (PRODUCT.md §10): after a deploy succeeded, probe
//! its instances ([`crate::probe::probe`], all at once, 5 s each), and
//! record what each answered, as long as the rows still belong to that
//! deploy. While some are not ready and the deployment's deadline has not
//! passed, the job pushes itself again after a pause that grows with the
//! probes made ([`crate::probe::pause`]: 1 s doubling to 30 s, with
//! jitter, never less than a `Retry-After`), or at the deadline if that
//! comes first; the job carries the end of its pause (`not_before_ms`) and,
//! handed out earlier, puts itself back unprobed. Once the deadline passed,
//! the instances not ready become `not_ready`, keeping their last reason.

use super::{Ctx, Job, JobError};
use crate::probe::{self, State};
use crate::source::outputs::{Instance, ReadinessMeta};
use crate::store::builds;
use crate::store::instance_readiness::{self as rows, Found, ReadinessRow};
use crate::store::queue::{self, ReadinessJob};
use crate::store::{now_ms, StoreError};
use tracing::Instrument;

impl Job for ReadinessJob {
    type Output = ();
    const NAME: &'static str = "readiness";

    async fn run(self, ctx: &Ctx) -> Result<(), JobError> {
        Ok(run(self, ctx).await?)
    }

    fn span(&self, worker: &str) -> tracing::Span {
        tracing::info_span!(
            "job",
            job.kind = "readiness",
            build.id = %self.build_id,
            deployment.id = %self.deployment_id,
            worker.name = %worker
        )
    }
}

/// Runs one round of probes of `job`'s deploy.
pub async fn run(job: ReadinessJob, ctx: &Ctx) -> Result<(), StoreError> {
    let span = tracing::info_span!("readiness", deployment.id = %job.deployment_id, build.id = %job.build_id);
    round(job, ctx).instrument(span).await
}

async fn round(job: ReadinessJob, ctx: &Ctx) -> Result<(), StoreError> {
    // Handed out before the end of its pause: back until then, unprobed.
    if let Some(early) = job.not_before_ms.map(|at| at - now_ms()).filter(|ms| *ms > 0) {
        let mut tx = ctx.db.begin_write().await?;
        let left = std::time::Duration::from_millis(u64::try_from(early).unwrap_or(0));
        queue::push(&mut tx, &job, Some(left)).await?;
        tx.commit().await?;
        return Ok(());
    }
    let (waiting, settings) = {
        let mut conn = ctx.db.acquire().await?;
        let rows = rows::of_deployment(&mut conn, &job.deployment_id).await?;
        let waiting: Vec<ReadinessRow> =
            rows.into_iter().filter(|r| r.build_id == job.build_id && !r.state.is_final()).collect();
        if waiting.is_empty() {
            return Ok(()); // all ready, expired, or a newer deploy took over
        }
        let build = builds::get(&mut conn, &job.build_id).await?;
        let settings = build.and_then(|b| b.readiness).unwrap_or_default();
        (waiting, settings)
    };
    let Some(deadline) = waiting.iter().map(|r| r.deadline_at).min() else { return Ok(()) };
    let probes = probe_all(&waiting, &settings, &ctx.config.worker.readiness_connect).await;
    let at = now_ms();
    let mut tx = ctx.db.begin_write().await?;
    let mut next_pause = None;
    for (row, probe) in waiting.iter().zip(&probes) {
        let found = Found { instance: &row.instance, state: probe.state, reason: probe.reason.as_deref(), at };
        rows::record(&mut tx, &job.deployment_id, &job.build_id, &found).await?;
        if probe.state != State::Ready {
            let pause = probe::pause(u32::try_from(row.probes + 1).unwrap_or(u32::MAX), &probe.class);
            next_pause = Some(next_pause.map_or(pause, |p: std::time::Duration| p.min(pause)));
        }
    }
    match next_pause {
        None => tracing::info!(instances = waiting.len(), "every instance is ready"),
        Some(_) if at >= deadline => {
            let expired = rows::expire(&mut tx, &job.deployment_id, &job.build_id, at).await?;
            tracing::warn!(instances = expired, "the readiness deadline passed: instances not ready are not_ready");
        }
        Some(pause) => {
            // The pause holds to the end: the next round is after it, or
            // at the deadline if that comes first, and the round at the
            // deadline is the last (its job never runs before its
            // `not_before_ms`, nor apalis's second before it).
            let left = std::time::Duration::from_millis(u64::try_from(deadline - at).unwrap_or(0));
            queue::push(&mut tx, &job, Some(pause.min(left))).await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// Probes every row's instance at once, in the rows' order.
pub async fn probe_all(
    waiting: &[ReadinessRow],
    settings: &ReadinessMeta,
    allowed_connect: &[String],
) -> Vec<probe::Probe> {
    let probes = waiting.iter().map(|row| {
        let instance = instance_of(row);
        async move { probe::probe(&instance, settings, allowed_connect).await }
    });
    futures::future::join_all(probes).await
}

/// The instance a row is about.
fn instance_of(row: &ReadinessRow) -> Instance {
    let domain = url::Url::parse(&row.url).ok().and_then(|u| u.host_str().map(str::to_owned)).unwrap_or_default();
    Instance { name: row.instance.clone(), domain, url: row.url.clone(), section: None }
}
