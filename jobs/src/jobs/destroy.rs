//! The destroy job (§6 `destroy`, MS-3; seed 000 "Two-store model and deletion").
//!
//! Runs `core/effects/destroy` of the build's module source under
//! `DESTROY_TIMEOUT` and reports the nodes it removed (`$SBOM_OUT_DIR/nodes.json`,
//! when the effect writes it). On success every SBOM of the deployment is removed (in
//! the transaction that marks the build succeeded) and the deployment is
//! `idle`; a failed destroy changes nothing and leaves it `failed`, so the
//! front-end keeps its intent record and the operator can try again.

use super::effect_output::read_nodes;
use super::outcome::{fail, Outcome, SbomChange};
use super::report::{NodeOutcome, NodeReport, Reason, Report};
use super::workspace::{run_kind, EffectRun, Kind};
use super::Ctx;
use crate::config::Config;
use crate::state::BuildStatus;
use crate::store::builds::{self, BuildRow};
use crate::store::queue::{self, CallbackJob};
use crate::store::{instance_readiness, Conn, StoreError};
use std::path::Path;
use std::time::Duration;

/// Runs a claimed destroy build (`workspace::run_kind` with what a destroy adds).
pub async fn run(build: &BuildRow, ctx: &Ctx) -> Outcome {
    run_kind::<Destroy>(build, ctx).await
}

/// What a destroy adds to the run of every build.
struct Destroy;

impl Kind for Destroy {
    const EFFECT: &'static str = "destroy";
    const TIMEOUT_SETTING: &'static str = "DESTROY_TIMEOUT";
    type Read = ();

    fn deadline(config: &Config) -> Duration {
        config.worker.destroy_timeout
    }

    /// The nodes the effect removed, when it says (`nodes.json`, optional).
    fn read(_: &BuildRow, report: &mut Report, sbom_dir: &Path) {
        if let Some(nodes) = read_nodes(sbom_dir, &mut report.warnings) {
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
    }

    /// Succeeded when the effect exited 0: then every SBOM of the deployment goes.
    fn exited(_: &BuildRow, report: Report, code: i32, (): ()) -> Outcome {
        let mut report = report;
        report.exit_code = Some(code);
        if code == 0 {
            report.status = BuildStatus::Succeeded;
            Outcome { report, sboms: SbomChange::RemoveAll, effect: None }
        } else {
            Outcome::unchanged(fail(
                report,
                Reason::EffectFailed,
                format!("the destroy effect exited with code {code}; see the build log"),
            ))
        }
    }

    /// A destroy that succeeded removes the deployment's state folder; one
    /// that cannot be removed is a warning of the report.
    fn after(build: &BuildRow, ctx: &Ctx, judged: Outcome, _: &EffectRun) -> Outcome {
        let mut judged = judged;
        if judged.report.status == BuildStatus::Succeeded {
            let state = ctx.provider_state_dir(&build.deployment_id);
            if let Err(e) = remove_state(&state) {
                judged.report.warnings.push(format!("the deployment's state folder could not be removed: {e}"));
            }
        }
        judged
    }
}

/// What a destroy's end adds to the transaction that records it: a
/// successful one clears the deployment's readiness rows (§10); either
/// settles the deletion's callback (DL-2) and, when it is to be sent,
/// queues its `callbacks` job.
pub(crate) async fn record_end(
    tx: &mut Conn,
    build: &BuildRow,
    status: BuildStatus,
    now: i64,
) -> Result<(), StoreError> {
    let idle = status == BuildStatus::Succeeded;
    if idle {
        instance_readiness::clear(tx, &build.deployment_id).await?;
    }
    if builds::settle_callback(tx, &build.id, idle, status.as_str(), now).await? {
        queue::push(tx, &CallbackJob::reconcile(build.id.clone()), None).await?;
    }
    Ok(())
}

/// Removes a destroyed deployment's state folder (its effect, which runs as
/// the sandbox user, empties it but may not remove the folder itself), and
/// every indirect GC root of Nix that still points into it: the effect
/// cannot remove those (SEC-3), and Nix would keep what they name until
/// its next garbage collection.
fn remove_state(state: &Path) -> std::io::Result<()> {
    crate::nix::output::remove_folder_and_roots(state)
}
