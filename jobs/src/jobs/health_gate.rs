//! The health gate (PRODUCT.md §13 "Safe change"): a deploy that asked for
//! one is not `succeeded` until every instance it deployed is `ready` by
//! the readiness probes (§10, [`crate::probe`]). While it waits the build
//! stays `running` with phase `verifying` (so its deployment reads
//! `building`). Past the gate's timeout, the instances not ready fail the
//! build `health_gate`; with `rollback` the transaction that records that
//! failure queues a rollback to the previous successful deploy
//! (`deploy::record_end`, trigger `auto_rollback`).
//!
//! A cancel while verifying stops the gate, not the activation: the build
//! ends `succeeded` with a warning that its instances were not verified
//! (the nodes run its systems), and the usual readiness probes follow.

use super::outcome::{claim_lost, fail, Outcome};
use super::report::Reason;
use super::Ctx;
use crate::probe::{self, State};
use crate::provenance::HealthGate;
use crate::state::BuildStatus;
use crate::store::builds::{self, BuildRow};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::time::Instant;

/// How the gate ended (the report's `health_gate`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateReport {
    /// `passed`, `failed` or `cancelled`.
    pub verdict: String,
    /// How long it waited, in milliseconds.
    pub waited_ms: u64,
    /// Each instance's last probe: `{name, state, reason?}`.
    pub instances: Vec<GateInstance>,
}

/// One instance as the gate last saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateInstance {
    /// The instance.
    pub name: String,
    /// `ready`, or its last state (`pending`, `wrong_host`, `not_found`),
    /// `not_ready` once the gate's time ran out.
    pub state: State,
    /// Why it is not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// How often the claim and a cancel request are looked at while verifying.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Runs `build`'s gate on a deploy that succeeded (`judged`), when the
/// build has one; gives the outcome to record. Never fails: a database
/// that does not answer is waited for within the gate's time.
pub(crate) async fn verify(build: &BuildRow, ctx: &Ctx, judged: Outcome) -> Outcome {
    let Some(gate) = build.provenance.health_gate else { return judged };
    if build.dry_run || judged.report.status != BuildStatus::Succeeded {
        return judged;
    }
    let mut judged = judged;
    let started = Instant::now();
    let timeout = Duration::from_millis(gate.timeout_ms);
    let deadline = started + timeout;
    if let Ok(mut conn) = ctx.db.acquire().await {
        let _ = builds::set_phase(&mut conn, build, Some("verifying")).await;
    }
    crate::failpoint::hit("gate_verifying");
    tracing::info!(
        timeout_ms = gate.timeout_ms,
        instances = build.instances.len(),
        "verifying: the health gate waits for every instance to be ready"
    );
    let Some(settings) = build.readiness.clone() else {
        judged.report.health_gate = Some(GateReport { verdict: "passed".into(), waited_ms: 0, instances: Vec::new() });
        return judged;
    };
    let allowed = ctx.config.worker.readiness_connect.clone();
    let mut last: Vec<GateInstance> = build
        .instances
        .iter()
        .map(|i| GateInstance { name: i.name.clone(), state: State::Pending, reason: Some("not probed yet".into()) })
        .collect();
    let mut probes = 0u32;
    let mut next_probe = started;
    loop {
        if Instant::now() >= next_probe {
            probes += 1;
            let mut pause = Duration::ZERO;
            for (instance, seen) in build.instances.iter().zip(last.iter_mut()) {
                if seen.state == State::Ready {
                    continue;
                }
                let found = probe::probe(instance, &settings, &allowed).await;
                pause = pause.max(probe::pause(probes, &found.class));
                seen.state = found.state;
                seen.reason = found.reason;
            }
            if last.iter().all(|i| i.state == State::Ready) {
                judged.report.health_gate = Some(report("passed", started, last));
                return judged;
            }
            next_probe = Instant::now() + pause;
        }
        if Instant::now() >= deadline {
            return failed(judged, gate, started, last);
        }
        let status = async { builds::claim_status(&mut ctx.db.acquire().await?, build).await };
        match status.await {
            Ok(s) if !s.held => return Outcome::unchanged(claim_lost(judged.report)),
            Ok(s) if s.cancel_requested => {
                judged.report.warnings.push(
                    "the health gate was cancelled by request: the systems are active, but their instances were not \
                     verified"
                        .into(),
                );
                judged.report.health_gate = Some(report("cancelled", started, last));
                return judged;
            }
            _ => {}
        }
        let wake = next_probe.min(deadline).min(Instant::now() + LOOK_EVERY);
        tokio::time::sleep_until(wake).await;
    }
}

fn report(verdict: &str, started: Instant, instances: Vec<GateInstance>) -> GateReport {
    GateReport { verdict: verdict.into(), waited_ms: started.elapsed().as_millis() as u64, instances }
}

/// The gate's time ran out with instances not ready: the build fails
/// `health_gate`, naming each with its last state and reason. The SBOMs
/// still replace the deployment's: the nodes run these systems.
fn failed(judged: Outcome, gate: HealthGate, started: Instant, mut last: Vec<GateInstance>) -> Outcome {
    let mut named = Vec::new();
    for i in last.iter_mut().filter(|i| i.state != State::Ready) {
        named.push(format!("{} ({}: {})", i.name, i.state.as_str(), i.reason.as_deref().unwrap_or("no reason given")));
        if i.state == State::Pending {
            i.state = State::NotReady;
        }
    }
    let error = format!(
        "{} of {} instances were not ready within the health gate's {} s: {}",
        named.len(),
        last.len(),
        gate.timeout_ms / 1000,
        named.join("; ")
    );
    let mut report = fail(judged.report, Reason::HealthGate, error);
    report.health_gate = Some(self::report("failed", started, last));
    Outcome { report, ..judged }
}
