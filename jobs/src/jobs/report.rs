//! Run reports (seed 001 "Run Reports"): the structured result of a build;
//! the text and JSON outputs of `slipway-worker run` are two projections of it.

use crate::state::{BuildKind, BuildStatus};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Why a build failed, or ended without running (`builds.reason`): the
/// `reason` of a build in the api's answers, listed as an enum in its
/// OpenAPI document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = BuildReason)]
pub enum Reason {
    /// The effect exited non-zero (or did not report its nodes).
    EffectFailed,
    /// One or more nodes failed to deploy; the error names each.
    NodesFailed,
    /// The effect ran past `DEPLOY_TIMEOUT` / `DESTROY_TIMEOUT`.
    Timeout,
    /// The build's module source could not be found or used.
    SourceUnavailable,
    /// The worker could not run the effect (its work folder, its start).
    WorkerError,
    /// §8: the worker could not hand the effect its operator secrets (no
    /// OpenBao, OpenBao away, a pinned version gone), or could not delete
    /// a cleared one afterwards.
    OperatorSecrets,
    /// The health gate failed: an instance was not `ready` within the
    /// gate's timeout (the error names each, with its last probe's state
    /// and reason). Its systems were activated.
    HealthGate,
    /// Cancelled on request.
    Cancelled,
    /// Another worker took the build over; this attempt's outcome is never stored.
    ClaimLost,
    /// An apply's deploy found that the configuration no longer builds the
    /// systems its plan recorded (the effect's exit 3 with
    /// `plan-mismatch.json`): nothing was activated; the error names each
    /// differing node, expected and actual.
    PlanMismatch,
    /// A newer submit made the queued build pointless: written by the
    /// store, never by a worker's report.
    Superseded,
}

impl Reason {
    /// The stored spelling (`nodes_failed`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EffectFailed => "effect_failed",
            Self::NodesFailed => "nodes_failed",
            Self::Timeout => "timeout",
            Self::SourceUnavailable => "source_unavailable",
            Self::WorkerError => "worker_error",
            Self::OperatorSecrets => "operator_secrets",
            Self::HealthGate => "health_gate",
            Self::Cancelled => "cancelled",
            Self::ClaimLost => "claim_lost",
            Self::PlanMismatch => "plan_mismatch",
            Self::Superseded => "superseded",
        }
    }
}

/// What happened to one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeOutcome {
    /// Its system was built and activated.
    Deployed,
    /// It failed to deploy (its previous system, if any, stays).
    Failed,
    /// A destroy removed it.
    Destroyed,
    /// A dry run (§11) built what it needs and changed nothing; its
    /// `change` says what a real run would do.
    Planned,
}

impl NodeOutcome {
    /// The spelling in reports and `nodes.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deployed => "deployed",
            Self::Failed => "failed",
            Self::Destroyed => "destroyed",
            Self::Planned => "planned",
        }
    }
}

/// The result of one build.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// The build.
    pub build_id: String,
    /// Its deployment.
    pub deployment_id: String,
    /// Deploy or destroy.
    pub kind: BuildKind,
    /// How it ended.
    pub status: BuildStatus,
    /// Machine-readable reason of a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// The aggregated error (names each failed node, Q-5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Which start of the build this was (1 unless a worker died).
    pub attempt: i64,
    /// The effect's exit code, when it exited on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Wall-clock milliseconds of the effect.
    pub duration_ms: i64,
    /// Every node's outcome.
    pub nodes: Vec<NodeReport>,
    /// Things worth a look that did not fail the build.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Counters.
    pub summary: Summary,
    /// A dry run (§11): nothing was activated or stored.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// Where the build's wall time went (Slipway's parts, Nix evaluation,
    /// Nix builds, the effect's own work), from the moments the worker took
    /// while it ran ([`super::timing`]); absent in reports stored before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<super::timing::Timings>,
    /// The health gate's verdict, when the deploy had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_gate: Option<super::health_gate::GateReport>,
}

/// One node's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeReport {
    /// Node name.
    pub name: String,
    /// What happened to it.
    pub outcome: NodeOutcome,
    /// Its DNS names.
    #[serde(default)]
    pub dns_names: Vec<String>,
    /// The activated system's store path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// `ready` or `unavailable` (deploys only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sbom: Option<String>,
    /// Why the SBOM is unavailable, or why the node failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A dry run's plan for the node (§11).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<NodeChange>,
}

/// What a real run would change on a node, as a dry run found it (§11;
/// `nodes.json`'s `change`, docs/MODULE-SOURCE.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeChange {
    /// `add` (a new node), `update` (a new system), `unchanged`, or
    /// `remove` (the deployment no longer has it).
    pub action: String,
    /// The system active now, if any.
    #[serde(default)]
    pub before: Option<String>,
    /// The system a real run would activate (built), if any.
    #[serde(default)]
    pub after: Option<String>,
    /// Links (profile links, GC roots) a real run would make.
    #[serde(default)]
    pub add_links: Vec<String>,
    /// Links a real run would remove.
    #[serde(default)]
    pub remove_links: Vec<String>,
    /// The packages a real run would add, remove or change on the node,
    /// and the change of its closure's size; absent when the source did
    /// not say (one without the `plan` capability).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closure: Option<Closure>,
}

/// The diff of a node's closure before and after a change, as
/// `nix store diff-closures` groups it: by package name (a store path's
/// name less its hash, split into name and version at the first `-`
/// followed by a digit). Read from `nodes.json` (`sizeDelta`), written
/// in reports as `size_delta`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Closure {
    /// Packages only the new closure has.
    #[serde(default)]
    pub added: Vec<Package>,
    /// Packages only the old closure has.
    #[serde(default)]
    pub removed: Vec<Package>,
    /// Packages both have, with other versions.
    #[serde(default)]
    pub changed: Vec<ChangedPackage>,
    /// The new closure's NAR size less the old one's, in bytes.
    #[serde(default, alias = "sizeDelta")]
    pub size_delta: i64,
}

/// A package added or removed: its name and its versions (sorted,
/// `, `-separated; `""` for a store path without a version).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Package {
    /// The package's name.
    pub name: String,
    /// Its versions.
    #[serde(default)]
    pub version: String,
}

/// A package whose versions changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedPackage {
    /// The package's name.
    pub name: String,
    /// Its versions before.
    #[serde(default)]
    pub before: String,
    /// Its versions after.
    #[serde(default)]
    pub after: String,
}

impl Closure {
    /// The diff in plain words: `+3 −1 ~2 packages, +1.2 MiB`.
    pub fn to_text(&self) -> String {
        format!(
            "+{} \u{2212}{} ~{} packages, {}",
            self.added.len(),
            self.removed.len(),
            self.changed.len(),
            signed_size(self.size_delta)
        )
    }
}

/// A size change in bytes in plain words, signed (`+1.2 MiB`, `−512 B`).
fn signed_size(bytes: i64) -> String {
    let sign = if bytes < 0 { "\u{2212}" } else { "+" };
    let magnitude = bytes.unsigned_abs();
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if magnitude < 1024 {
        return format!("{sign}{magnitude} B");
    }
    let mut value = magnitude as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{sign}{value:.1} {}", UNITS[unit])
}

/// Counters of a report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Summary {
    /// Nodes in the report.
    pub nodes: usize,
    /// Nodes that failed.
    pub failed: usize,
    /// SBOMs stored ready.
    pub sboms_ready: usize,
}

impl Report {
    /// Recomputes the counters from the nodes.
    pub fn summarise(&mut self) {
        self.summary = Summary {
            nodes: self.nodes.len(),
            failed: self.nodes.iter().filter(|n| n.outcome == NodeOutcome::Failed).count(),
            sboms_ready: self.nodes.iter().filter(|n| n.sbom.as_deref() == Some("ready")).count(),
        };
    }

    /// The text projection (`--output text`).
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let dry = if self.dry_run { " (dry run: nothing was changed)" } else { "" };
        let _ = writeln!(
            s,
            "{} {} of {}: {}{dry}",
            self.kind.as_str(),
            self.build_id,
            self.deployment_id,
            self.status.as_str()
        );
        for n in &self.nodes {
            let _ = write!(s, "  node {:<12} {:<9}", n.name, n.outcome.as_str());
            if let Some(sbom) = &n.sbom {
                let _ = write!(s, " sbom {sbom}");
            }
            if !n.dns_names.is_empty() {
                let _ = write!(s, " {}", n.dns_names.join(" "));
            }
            if let Some(e) = &n.error {
                let _ = write!(s, " ({e})");
            }
            if let Some(c) = &n.change {
                match c.action.as_str() {
                    "unchanged" => s.push_str(" unchanged"),
                    action => {
                        let _ = write!(s, " would {action}");
                    }
                }
                match (&c.before, &c.after) {
                    (Some(b), Some(a)) if b != a => {
                        let _ = write!(s, ": {b} -> {a}");
                    }
                    (None, Some(a)) => {
                        let _ = write!(s, ": {a}");
                    }
                    _ => {}
                }
                if let Some(closure) = c.closure.as_ref().filter(|_| c.action != "unchanged") {
                    let _ = write!(s, "\n      {}", closure.to_text());
                }
                for l in &c.add_links {
                    let _ = write!(s, "\n      + link {l}");
                }
                for l in &c.remove_links {
                    let _ = write!(s, "\n      - link {l}");
                }
            }
            s.push('\n');
        }
        for w in &self.warnings {
            let _ = writeln!(s, "  warning: {w}");
        }
        if let Some(e) = &self.error {
            let _ = writeln!(s, "  error ({}): {e}", self.reason.map_or("failed", Reason::as_str));
        }
        let _ = writeln!(
            s,
            "  {} nodes, {} failed, {} SBOMs ready, {:.1}s",
            self.summary.nodes,
            self.summary.failed,
            self.summary.sboms_ready,
            self.duration_ms as f64 / 1000.0
        );
        if let Some(t) = &self.timings {
            let _ = writeln!(s, "  {}", t.to_text());
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planned(name: &str, action: &str, before: Option<&str>, after: Option<&str>) -> NodeReport {
        NodeReport {
            name: name.into(),
            outcome: NodeOutcome::Planned,
            dns_names: Vec::new(),
            system: None,
            sbom: None,
            error: None,
            change: Some(NodeChange {
                action: action.into(),
                before: before.map(str::to_owned),
                after: after.map(str::to_owned),
                add_links: Vec::new(),
                remove_links: Vec::new(),
                closure: None,
            }),
        }
    }

    #[test]
    fn a_closure_is_read_as_the_effect_writes_it_and_reported_with_size_delta() {
        let written = serde_json::json!({
            "action": "update", "before": "/nix/store/a", "after": "/nix/store/b",
            "closure": {
                "added": [{"name": "php", "version": "8.3.8"}],
                "removed": [{"name": "configuration.nix", "version": ""}],
                "changed": [{"name": "nodejs", "before": "20.15.0", "after": "20.16.0"}],
                "sizeDelta": -2048
            }
        });
        let change: NodeChange = serde_json::from_value(written).unwrap();
        let closure = change.closure.clone().unwrap();
        assert_eq!(closure.size_delta, -2048);
        assert_eq!(closure.changed[0].after, "20.16.0");
        let reported = serde_json::to_value(&change).unwrap();
        assert_eq!(reported["closure"]["size_delta"], -2048, "{reported}");
        assert!(reported["closure"].get("sizeDelta").is_none(), "{reported}");
        // Read back from a stored report.
        assert_eq!(serde_json::from_value::<NodeChange>(reported).unwrap(), change);
        assert_eq!(serde_json::to_value(planned("x", "add", None, None).change).unwrap().get("closure"), None);
    }

    #[test]
    fn a_closure_is_said_in_plain_words_with_its_size_in_binary_units() {
        let package = |name: &str| Package { name: name.into(), version: "1".into() };
        let closure = Closure {
            added: vec![package("a"), package("b"), package("c")],
            removed: vec![package("d")],
            changed: vec![
                ChangedPackage { name: "e".into(), before: "1".into(), after: "2".into() },
                ChangedPackage { name: "f".into(), before: "1".into(), after: "2".into() },
            ],
            size_delta: 1_258_291,
        };
        assert_eq!(closure.to_text(), "+3 \u{2212}1 ~2 packages, +1.2 MiB");
        let shrunk = Closure { size_delta: -512, ..Closure::default() };
        assert_eq!(shrunk.to_text(), "+0 \u{2212}0 ~0 packages, \u{2212}512 B");
        assert_eq!(signed_size(0), "+0 B");
        assert_eq!(signed_size(3 * 1024 * 1024 * 1024), "+3.0 GiB");
    }

    #[test]
    fn a_dry_run_report_says_what_would_change_and_what_stays_unchanged_in_plain_words() {
        let mut report = Report {
            build_id: "b".into(),
            deployment_id: "d".into(),
            kind: BuildKind::Deploy,
            status: BuildStatus::Succeeded,
            reason: None,
            error: None,
            attempt: 1,
            exit_code: Some(0),
            duration_ms: 10,
            nodes: vec![
                planned("same", "unchanged", Some("/nix/store/a"), Some("/nix/store/a")),
                planned("moved", "update", Some("/nix/store/a"), Some("/nix/store/b")),
            ],
            warnings: Vec::new(),
            summary: Summary::default(),
            dry_run: true,
            timings: None,
            health_gate: None,
        };
        report.summarise();
        let text = report.to_text();
        let same = text.lines().find(|l| l.contains("node same")).unwrap();
        assert!(same.ends_with(" unchanged") && !same.contains("would"), "{text}");
        let moved = text.lines().find(|l| l.contains("node moved")).unwrap();
        assert!(moved.contains(" would update: /nix/store/a -> /nix/store/b"), "{text}");
        assert!(!text.contains("packages"), "a plan without closures has none to tell: {text}");
        if let Some(change) = report.nodes[1].change.as_mut() {
            change.closure = Some(Closure { size_delta: 4096, ..Closure::default() });
        }
        let text = report.to_text();
        assert!(text.contains("\n      +0 \u{2212}0 ~0 packages, +4.0 KiB\n"), "{text}");
    }
}
