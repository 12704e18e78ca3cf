//! The deploy job (§6 `deploy`, MS-3, Q-4, Q-5; seed 000 "SBOM of the deployed nodes").
//!
//! 1. Resolve the build's module source to a folder holding `core/`.
//! 2. Write the configuration snapshot to the build's work folder and run
//!    `core/effects/deploy` with the environment of Q-4 under `DEPLOY_TIMEOUT`.
//! 3. Read `$SBOM_OUT_DIR/nodes.json` and each node's `<node>.cdx.json` or
//!    `<node>.error`; report every node's outcome.
//! 4. Succeeded only when the effect exited 0 and every node deployed; then
//!    the SBOMs replace the deployment's (stored in the transaction that marks
//!    the build succeeded). A failed build changes no SBOM, and its error
//!    names each failed node. An apply's deploy that found the systems
//!    differ from its plan's (exit 3 with `plan-mismatch.json`) fails
//!    `plan_mismatch`, naming each differing node.

use super::effect_output::{read_effect_file, read_nodes, read_plan_mismatch, PlanMismatch};
use super::outcome::{fail, Outcome, SbomChange};
use super::report::{NodeOutcome, NodeReport, Reason, Report};
use super::workspace::{run_kind, EffectRun, Kind};
use super::Ctx;
use crate::config::Config;
use crate::provenance::Trigger;
use crate::state::BuildStatus;
use crate::store::builds::BuildRow;
use crate::store::queue::{self, ReadinessJob};
use crate::store::sboms::NodeSbom;
use crate::store::{instance_readiness, Conn, StoreError};
use std::path::Path;
use std::time::Duration;

/// Runs a claimed deploy build (`workspace::run_kind` with what a deploy adds).
pub async fn run(build: &BuildRow, ctx: &Ctx) -> Outcome {
    run_kind::<Deploy>(build, ctx).await
}

/// What a deploy adds to the run of every build.
struct Deploy;

impl Kind for Deploy {
    const EFFECT: &'static str = "deploy";
    const TIMEOUT_SETTING: &'static str = "DEPLOY_TIMEOUT";
    type Read = DeployRead;

    fn deadline(config: &Config) -> Duration {
        config.worker.deploy_timeout
    }

    /// A dry run's planned nodes, or each deployed node and its SBOM, and
    /// the nodes an apply found differing from its plan.
    fn read(build: &BuildRow, report: &mut Report, sbom_dir: &Path) -> Self::Read {
        report.dry_run = build.dry_run;
        let (nodes, sboms) = if build.dry_run {
            (planned_nodes(sbom_dir, &mut report.warnings), Vec::new())
        } else {
            read_sbom_dir(sbom_dir, &mut report.warnings)
        };
        report.nodes = nodes;
        let mismatch = if build.dry_run { None } else { read_plan_mismatch(sbom_dir, &mut report.warnings) };
        DeployRead { sboms, mismatch }
    }

    /// Succeeded only when the effect exited 0 and every node it reported
    /// deployed (or, for a dry run, was planned); then the SBOMs replace
    /// the deployment's, except for a dry run. An exit 3 with the nodes
    /// that differ from the plan is `plan_mismatch`.
    fn exited(build: &BuildRow, report: Report, code: i32, read: Self::Read) -> Outcome {
        let no_change = Outcome::unchanged;
        let DeployRead { sboms, mismatch } = read;
        let mut report = report;
        if let (PLAN_MISMATCH_EXIT, Some(differing)) = (code, mismatch) {
            report.exit_code = Some(code);
            return no_change(fail(report, Reason::PlanMismatch, mismatch_error(&differing)));
        }
        let reported = report.nodes.len();
        let failed: Vec<String> = report
            .nodes
            .iter()
            .filter(|n| n.outcome == NodeOutcome::Failed)
            .map(|n| format!("{} ({})", n.name, n.error.as_deref().unwrap_or("failed")))
            .collect();
        report.exit_code = Some(code);
        if !failed.is_empty() {
            no_change(fail(
                report,
                Reason::NodesFailed,
                format!("{} of {} nodes failed: {}", failed.len(), reported, failed.join("; ")),
            ))
        } else if code != 0 {
            no_change(fail(
                report,
                Reason::EffectFailed,
                format!("the deploy effect exited with code {code}; see the build log"),
            ))
        } else if reported == 0 {
            no_change(fail(
                report,
                Reason::EffectFailed,
                "the deploy effect exited 0 but reported no nodes in nodes.json",
            ))
        } else if build.dry_run {
            // A dry run stores no SBOM and changes nothing.
            report.status = BuildStatus::Succeeded;
            no_change(report)
        } else {
            report.status = BuildStatus::Succeeded;
            Outcome { report, sboms: SbomChange::Replace(sboms), effect: None }
        }
    }

    /// §8: a deploy whose cleared operator secrets could not be deleted
    /// from OpenBao fails with `operator_secrets`. A dry run that failed
    /// or was cancelled is no plan to apply: its GC roots go at once
    /// (unless another attempt takes the build over: a lost claim, or this
    /// process stopping at once).
    fn after(build: &BuildRow, ctx: &Ctx, judged: Outcome, run: &EffectRun) -> Outcome {
        let ended = matches!(judged.report.status, BuildStatus::Failed | BuildStatus::Cancelled)
            && judged.report.reason != Some(Reason::ClaimLost)
            && !ctx.process.abandoned();
        if build.dry_run && ended {
            if let Err(e) = super::sweep::drop_plan_roots(ctx, &build.deployment_id, &build.id) {
                tracing::warn!(build.id = %build.id, error = %e, "cannot remove a failed plan's GC roots; the sweep tries again");
            }
        }
        match &run.secrets_problem {
            Some(problem) if judged.report.status == BuildStatus::Succeeded => {
                Outcome::unchanged(fail(judged.report, Reason::OperatorSecrets, problem.clone()))
            }
            _ => judged,
        }
    }
}

/// What a deploy's end adds to the transaction that records it: a
/// successful deploy's instances are probed until ready or the deadline
/// (§10: their readiness rows, and the first `readiness` job when it has
/// any); a dry run changes nothing (§11); a failed health gate that asked
/// for it queues a rollback to the previous successful deploy (trigger
/// `auto_rollback`), after the failure's own event, unless a newer build
/// of the deployment already waits (a newer submit wins).
pub(crate) async fn record_end(
    tx: &mut Conn,
    ctx: &Ctx,
    build: &BuildRow,
    report: &Report,
    now: i64,
) -> Result<(), StoreError> {
    let gate_rollback = build.provenance.health_gate.is_some_and(|g| g.rollback);
    if report.reason == Some(Reason::HealthGate) && gate_rollback {
        return auto_rollback(tx, build, now).await;
    }
    if report.status != BuildStatus::Succeeded || build.dry_run {
        return Ok(());
    }
    if let (Trigger::Apply, Some(plan)) = (build.trigger, &build.provenance.based_on) {
        // The plan's systems are this build's now, kept by its generations.
        if let Err(e) = super::sweep::drop_plan_roots(ctx, &build.deployment_id, plan) {
            tracing::warn!(plan = %plan, error = %e, "the applied plan's GC roots could not be removed; the sweep removes them after PLAN_TTL");
        }
    }
    let deadline = now + ctx.config.worker.ready_timeout.as_millis() as i64;
    instance_readiness::begin(tx, &build.deployment_id, &build.id, &build.instances, now, deadline).await?;
    if !build.instances.is_empty() {
        let job = ReadinessJob {
            deployment_id: build.deployment_id.clone(),
            build_id: build.id.clone(),
            not_before_ms: None,
        };
        queue::push(tx, &job, None).await?;
    }
    Ok(())
}

/// Queues the rollback of a deploy whose health gate failed (see
/// [`record_end`]). A rollback that cannot be made (no earlier successful
/// deploy, a secret version cleared since) leaves the deployment `failed`,
/// logged.
async fn auto_rollback(tx: &mut Conn, build: &BuildRow, now: i64) -> Result<(), StoreError> {
    use crate::safe_change::{rollback_in, ChangeError, RollbackRequest};
    if crate::store::builds::newer_waiting(tx, build).await? {
        tracing::warn!("the health gate failed, but a newer build of the deployment waits: it is not rolled back");
        return Ok(());
    }
    // The failure is the channel's event before the rollback's.
    crate::store::events::record(tx, &build.deployment_id, now).await?;
    let request = RollbackRequest {
        deployment: crate::id::DeploymentId::parse(&build.deployment_id)
            .map_err(|e| StoreError::Corrupt(format!("builds.deployment_id: {e}")))?,
        to: None,
        requested_by: build.provenance.requested_by.clone(),
        trigger: crate::provenance::Trigger::AutoRollback,
    };
    match rollback_in(tx, &request).await {
        Ok(accepted) => {
            tracing::warn!(rollback.build = %accepted.build_id, "the health gate failed: rolling back to the previous successful deploy");
            Ok(())
        }
        Err(ChangeError::Store(e)) => Err(e),
        Err(refused) => {
            tracing::warn!(reason = %refused, "the health gate failed and the deployment cannot be rolled back");
            Ok(())
        }
    }
}

/// What a deploy reads from its effect's output folder.
pub(crate) struct DeployRead {
    /// The nodes' SBOMs (none for a dry run).
    sboms: Vec<(String, NodeSbom)>,
    /// The nodes whose systems differ from the plan's, when an apply's
    /// effect wrote `plan-mismatch.json`.
    mismatch: Option<Vec<PlanMismatch>>,
}

/// The exit code of a deploy that found the systems differ from the ones
/// expected of it (`EXPECTED_SYSTEMS_FILE`) and activated nothing.
const PLAN_MISMATCH_EXIT: i32 = 3;

/// The error of a `plan_mismatch` build: each differing node, its
/// expected and its actual system.
fn mismatch_error(differing: &[PlanMismatch]) -> String {
    let none = |path: &Option<String>, why: &str| path.clone().unwrap_or_else(|| format!("none ({why})"));
    let nodes: Vec<String> = differing
        .iter()
        .map(|m| {
            format!(
                "{}: expected {}, actual {}",
                m.node,
                none(&m.expected, "not in the plan"),
                none(&m.actual, "not built by this configuration")
            )
        })
        .collect();
    format!("the systems differ from the plan's, so nothing was activated: {}", nodes.join("; "))
}

/// A dry run's nodes (§11): each node's outcome (`planned`, or `failed`
/// when its system did not evaluate or build) and its `change`; no SBOM.
fn planned_nodes(dir: &Path, warnings: &mut Vec<String>) -> Vec<NodeReport> {
    let Some(nodes) = read_nodes(dir, warnings) else { return Vec::new() };
    nodes
        .into_iter()
        .map(|node| {
            let failed = node.outcome.as_deref() == Some("failed");
            if node.change.is_none() && !failed {
                warnings.push(format!("node {}: the dry run did not say what would change", node.name));
            }
            NodeReport {
                name: node.name,
                outcome: if failed { NodeOutcome::Failed } else { NodeOutcome::Planned },
                dns_names: node.dns_names,
                system: node.system,
                sbom: None,
                error: if failed { node.error.or(Some("failed".into())) } else { None },
                change: node.change,
            }
        })
        .collect()
}

/// Reads `nodes.json` and each node's SBOM or error from the deploy's output folder.
fn read_sbom_dir(dir: &Path, warnings: &mut Vec<String>) -> (Vec<NodeReport>, Vec<(String, NodeSbom)>) {
    let Some(nodes) = read_nodes(dir, warnings) else { return (Vec::new(), Vec::new()) };
    let mut reports = Vec::new();
    let mut sboms = Vec::new();
    for node in nodes {
        let sbom = read_node_sbom(dir, &node.name);
        let failed = node.outcome.as_deref() == Some("failed");
        let (sbom_state, sbom_error) = match &sbom {
            NodeSbom::Ready(_) => ("ready", None),
            NodeSbom::Unavailable(r) => ("unavailable", Some(r.clone())),
        };
        if let Some(r) = &sbom_error {
            if !failed {
                warnings.push(format!("node {}: SBOM unavailable: {r}", node.name));
            }
        }
        reports.push(NodeReport {
            name: node.name.clone(),
            outcome: if failed { NodeOutcome::Failed } else { NodeOutcome::Deployed },
            dns_names: node.dns_names,
            system: node.system,
            sbom: Some(sbom_state.into()),
            error: if failed { node.error.or(Some("failed".into())) } else { sbom_error },
            change: None,
        });
        sboms.push((node.name, sbom));
    }
    (reports, sboms)
}

/// A node's SBOM as the effect left it: a document that passes
/// [`crate::sbom::check`] (its version's CycloneDX schema and the ref rules,
/// docs/SBOM.md), or why there is none.
fn read_node_sbom(dir: &Path, node: &str) -> NodeSbom {
    match read_effect_file(dir, &format!("{node}.cdx.json"), SBOM_LIMIT) {
        Ok(Some(text)) => {
            return match serde_json::from_slice::<serde_json::Value>(&text) {
                Ok(doc) => match crate::sbom::check(&doc) {
                    Ok(()) => NodeSbom::Ready(doc),
                    Err(problem) => NodeSbom::Unavailable(problem.to_string()),
                },
                Err(e) => NodeSbom::Unavailable(format!("the SBOM is not valid JSON: {e}")),
            };
        }
        Ok(None) => {}
        Err(e) => return NodeSbom::Unavailable(e),
    }
    match read_effect_file(dir, &format!("{node}.error"), ERROR_LIMIT) {
        Ok(Some(reason)) => NodeSbom::Unavailable(String::from_utf8_lossy(&reason).trim().to_owned()),
        Ok(None) => NodeSbom::Unavailable("the deploy wrote no SBOM for this node".into()),
        Err(e) => NodeSbom::Unavailable(e),
    }
}

/// The most one node's SBOM may hold, in bytes.
const SBOM_LIMIT: u64 = 64 * 1024 * 1024;
/// The most one node's `<node>.error` may hold, in bytes.
const ERROR_LIMIT: u64 = 64 * 1024;
