//! What a build's run gives the frame to record ([`Outcome`]), and the
//! report helpers every kind uses to fill it in.

use super::report::{Reason, Report};
use super::timing::EffectSpan;
use crate::state::BuildStatus;
use crate::store::builds::BuildRow;
use crate::store::sboms::NodeSbom;

/// What a finished effect changes besides the build row.
#[derive(Debug, Clone)]
pub enum SbomChange {
    /// Nothing (a failed build changes no SBOM).
    None,
    /// A successful deploy: these nodes' SBOMs replace the deployment's.
    Replace(Vec<(String, NodeSbom)>),
    /// A successful destroy: every SBOM of the deployment goes.
    RemoveAll,
}

/// A job body's result: the report and the SBOM change it implies.
#[derive(Debug)]
pub struct Outcome {
    /// The run report (its status decides the build's).
    pub report: Report,
    /// SBOM change to store with the build's end.
    pub sboms: SbomChange,
    /// When the effect ran, if it did (for the report's `timings`).
    pub effect: Option<EffectSpan>,
}

impl Outcome {
    /// An outcome that changes no SBOM.
    pub(crate) fn unchanged(report: Report) -> Self {
        Self { report, sboms: SbomChange::None, effect: None }
    }
}

/// A report to start from, filled in by the job bodies.
pub(crate) fn blank_report(build: &BuildRow) -> Report {
    Report {
        build_id: build.id.clone(),
        deployment_id: build.deployment_id.clone(),
        kind: build.kind,
        status: BuildStatus::Failed,
        reason: None,
        error: None,
        attempt: build.attempts,
        exit_code: None,
        duration_ms: 0,
        nodes: Vec::new(),
        warnings: Vec::new(),
        summary: Default::default(),
        dry_run: build.dry_run,
        timings: None,
        health_gate: None,
    }
}

/// Marks `report` failed with `reason` and a sentence.
pub(crate) fn fail(mut report: Report, reason: Reason, error: impl Into<String>) -> Report {
    report.status = BuildStatus::Failed;
    report.reason = Some(reason);
    report.error = Some(error.into());
    report
}

/// Marks `report` cancelled.
pub(crate) fn cancelled(mut report: Report) -> Report {
    report.status = BuildStatus::Cancelled;
    report.reason = Some(Reason::Cancelled);
    report.error = Some("cancelled on request; every process of the effect was killed".to_owned());
    report
}

/// Marks `report` as the run of an attempt whose claim another worker took
/// (never stored: recording it fails on the claim).
pub(crate) fn claim_lost(report: Report) -> Report {
    fail(report, Reason::ClaimLost, "another worker took this build over; this attempt stopped")
}
