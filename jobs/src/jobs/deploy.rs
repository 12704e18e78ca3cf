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
//!    names each failed node.

use super::build::{blank_report, cancelled, claim_lost, fail, resolve_source, Outcome, SbomChange};
use super::report::{NodeOutcome, NodeReport, Reason, Report};
use super::workspace::run_effect;
use super::Ctx;
use crate::effect::{EffectOutcome, Stop};
use crate::state::BuildStatus;
use crate::store::builds::BuildRow;
use crate::store::sboms::NodeSbom;
use serde::Deserialize;
use std::path::Path;

/// `$SBOM_OUT_DIR/nodes.json` as the deploy effect writes it (docs/MODULE-SOURCE.md).
#[derive(Debug, Deserialize)]
struct NodesFile {
    nodes: Vec<NodeEntry>,
}

/// One node of `nodes.json`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeEntry {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) dns_names: Vec<String>,
    #[serde(default)]
    pub(crate) system: Option<String>,
    #[serde(default)]
    pub(crate) outcome: Option<String>,
    #[serde(default)]
    pub(crate) error: Option<String>,
    /// A dry run's plan for the node (§11).
    #[serde(default)]
    pub(crate) change: Option<super::report::NodeChange>,
}

/// Runs a claimed deploy build.
pub async fn run(build: &BuildRow, ctx: &Ctx) -> Outcome {
    let report = blank_report(build);
    let no_change = Outcome::unchanged;
    let source = match resolve_source(build, ctx).await {
        Ok(dir) => dir,
        Err(e) => return no_change(fail(report, Reason::SourceUnavailable, e)),
    };
    let run = match run_effect(build, ctx, &source, "deploy", ctx.config.worker.deploy_timeout).await {
        Ok(run) => run,
        Err((reason, e)) => return no_change(fail(report, reason, e)),
    };
    let mut judged = judge(build, ctx, report, run.outcome, &run.work);
    if let Some(problem) = run.secrets_problem {
        if judged.report.status == BuildStatus::Succeeded {
            judged = no_change(fail(judged.report, Reason::OperatorSecrets, problem));
        }
    }
    judged.effect = Some(run.span);
    judged
}

/// The outcome of the deploy whose effect ended as `outcome`, from what it
/// left in the attempt's work folder `work`.
fn judge(build: &BuildRow, ctx: &Ctx, report: Report, outcome: EffectOutcome, work: &Path) -> Outcome {
    let no_change = Outcome::unchanged;
    let sbom_dir = work.join("sbom");
    let mut report = report;
    report.dry_run = build.dry_run;
    let (nodes, sboms) = if build.dry_run {
        (planned_nodes(&sbom_dir, &mut report.warnings), Vec::new())
    } else {
        read_sbom_dir(&sbom_dir, &mut report.warnings)
    };
    let reported = nodes.len();
    report.nodes = nodes;
    let failed: Vec<String> = report
        .nodes
        .iter()
        .filter(|n| n.outcome == NodeOutcome::Failed)
        .map(|n| format!("{} ({})", n.name, n.error.as_deref().unwrap_or("failed")))
        .collect();
    match outcome {
        EffectOutcome::TimedOut => no_change(fail(
            report,
            Reason::Timeout,
            format!(
                "the deploy ran past DEPLOY_TIMEOUT ({}s) and was killed",
                ctx.config.worker.deploy_timeout.as_secs()
            ),
        )),
        EffectOutcome::Stopped(Stop::Cancel) => no_change(cancelled(report)),
        EffectOutcome::Stopped(Stop::ClaimLost) => no_change(claim_lost(report)),
        EffectOutcome::Exited(code) => {
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
    }
}

/// Reads `$SBOM_OUT_DIR/nodes.json` (deploy and destroy write it);
/// `None` when it is missing or malformed (a malformed one is a warning).
pub(crate) fn read_nodes(dir: &Path, warnings: &mut Vec<String>) -> Option<Vec<NodeEntry>> {
    let text = match read_effect_file(dir, "nodes.json", NODES_LIMIT) {
        Ok(Some(text)) => text,
        Ok(None) => return None,
        Err(e) => {
            warnings.push(e);
            return None;
        }
    };
    match serde_json::from_slice::<NodesFile>(&text) {
        Ok(n) => Some(n.nodes),
        Err(e) => {
            warnings.push(format!("nodes.json is not of the documented shape: {e}"));
            None
        }
    }
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

/// The most `nodes.json` may hold, in bytes.
const NODES_LIMIT: u64 = 16 * 1024 * 1024;
/// The most one node's SBOM may hold, in bytes.
const SBOM_LIMIT: u64 = 64 * 1024 * 1024;
/// The most one node's `<node>.error` may hold, in bytes.
const ERROR_LIMIT: u64 = 64 * 1024;

/// The bytes of file `name` the effect left in its output folder `dir`
/// (SEC-3: the effect runs as the sandbox user and may have left links
/// anywhere). `Ok(None)` when there is no such file; an error, as a
/// sentence, when `name` is not a plain file name, when `dir` or the file
/// is a symbolic link or not what it should be, or when the file holds more
/// than `limit` bytes. Nothing outside `dir` is ever read.
pub(crate) fn read_effect_file(dir: &Path, name: &str, limit: u64) -> Result<Option<Vec<u8>>, String> {
    use crate::nix::output::Refused;
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && !name.contains(['/', '\0'])
        && name.chars().all(|c| !c.is_control());
    if !plain {
        return Err(format!("{name:?} is not a file name the effect may write"));
    }
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err("the effect's output folder was replaced by something that is not a folder".into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("the effect's output folder: {e}")),
    }
    let path = dir.join(name);
    if std::fs::symlink_metadata(&path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        return Ok(None);
    }
    match crate::nix::output::read_file(&path, limit) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(Refused::TooLarge { size }) => {
            Err(format!("{name} holds {size} bytes, more than the {limit} bytes allowed"))
        }
        Err(Refused::Unsafe(why)) => Err(why),
        Err(Refused::Unreadable(why)) => Err(format!("cannot read {why}")),
    }
}
