//! The destroy job (§6 `destroy`, MS-3; seed 000 "Two-store model and deletion").
//!
//! Runs `core/effects/destroy` of the build's module source under
//! `DESTROY_TIMEOUT` and reports the nodes it removed (`$SBOM_OUT_DIR/nodes.json`,
//! when the effect writes it). On success every SBOM of the deployment is removed (in
//! the transaction that marks the build succeeded) and the deployment is
//! `idle`; a failed destroy changes nothing and leaves it `failed`, so the
//! front-end keeps its intent record and the operator can try again.

use super::build::{blank_report, cancelled, claim_lost, fail, resolve_source, Outcome, SbomChange};
use super::deploy::read_nodes;
use super::report::{NodeOutcome, NodeReport, Reason, Report};
use super::workspace::run_effect;
use super::Ctx;
use crate::effect::{EffectOutcome, Stop};
use crate::state::BuildStatus;
use crate::store::builds::BuildRow;
use std::path::Path;

/// Runs a claimed destroy build.
pub async fn run(build: &BuildRow, ctx: &Ctx) -> Outcome {
    let report = blank_report(build);
    let no_change = Outcome::unchanged;
    let source = match resolve_source(build, ctx).await {
        Ok(dir) => dir,
        Err(e) => return no_change(fail(report, Reason::SourceUnavailable, e)),
    };
    let run = match run_effect(build, ctx, &source, "destroy", ctx.config.worker.destroy_timeout).await {
        Ok(run) => run,
        Err((reason, e)) => return no_change(fail(report, reason, e)),
    };
    let (outcome, work, span) = (run.outcome, run.work, run.span);
    let mut judged = judge(ctx, report, outcome, &work);
    if judged.report.status == BuildStatus::Succeeded {
        let state = ctx.provider_state_dir(&build.deployment_id);
        if let Err(e) = remove_state(&state) {
            judged.report.warnings.push(format!("the deployment's state folder could not be removed: {e}"));
        }
    }
    judged.effect = Some(span);
    judged
}

/// Removes a destroyed deployment's state folder (its effect, which runs as
/// the sandbox user, empties it but may not remove the folder itself), and
/// every indirect GC root of Nix that still points into it: the effect
/// cannot remove those (SEC-3), and Nix would keep what they name until
/// its next garbage collection.
fn remove_state(state: &Path) -> std::io::Result<()> {
    crate::nix::output::remove_folder_and_roots(state)
}

/// The outcome of the destroy whose effect ended as `outcome`, from what it
/// left in the attempt's work folder `work`.
fn judge(ctx: &Ctx, report: Report, outcome: EffectOutcome, work: &Path) -> Outcome {
    let no_change = Outcome::unchanged;
    let mut report = report;
    // The nodes the effect removed, when it says (`nodes.json`, optional).
    if let Some(nodes) = read_nodes(&work.join("sbom"), &mut report.warnings) {
        report.nodes = nodes
            .into_iter()
            .map(|n| NodeReport {
                name: n.name,
                outcome: match n.outcome.as_deref() {
                    Some("failed") => NodeOutcome::Failed,
                    _ => NodeOutcome::Destroyed,
                },
                dns_names: n.dns_names,
                system: n.system,
                sbom: None,
                error: n.error,
                change: None,
            })
            .collect();
    }
    match outcome {
        EffectOutcome::TimedOut => no_change(fail(
            report,
            Reason::Timeout,
            format!(
                "the destroy ran past DESTROY_TIMEOUT ({}s) and was killed",
                ctx.config.worker.destroy_timeout.as_secs()
            ),
        )),
        EffectOutcome::Stopped(Stop::Cancel) => no_change(cancelled(report)),
        EffectOutcome::Stopped(Stop::ClaimLost) => no_change(claim_lost(report)),
        EffectOutcome::Exited(0) => {
            report.exit_code = Some(0);
            report.status = BuildStatus::Succeeded;
            Outcome { report, sboms: SbomChange::RemoveAll, effect: None }
        }
        EffectOutcome::Exited(code) => {
            report.exit_code = Some(code);
            no_change(fail(
                report,
                Reason::EffectFailed,
                format!("the destroy effect exited with code {code}; see the build log"),
            ))
        }
    }
}
