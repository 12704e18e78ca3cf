//! What an effect leaves in its output folder (`$SBOM_OUT_DIR`), read only
//! as bounded regular files of that folder (SEC-3): `nodes.json`, which
//! deploy and destroy write, an apply's `plan-mismatch.json`, and any
//! other file by name.

use super::report::NodeChange;
use super::timing::EffectTimes;
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
    pub(crate) change: Option<NodeChange>,
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

/// One node whose system differs from its plan's, as an apply's deploy
/// reports it in `$SBOM_OUT_DIR/plan-mismatch.json` (docs/MODULE-SOURCE.md).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct PlanMismatch {
    /// The node.
    pub(crate) node: String,
    /// The system the plan recorded; `None`: the plan has no such node.
    #[serde(default)]
    pub(crate) expected: Option<String>,
    /// The system the configuration builds now; `None`: no such node, or
    /// its system did not evaluate.
    #[serde(default)]
    pub(crate) actual: Option<String>,
}

/// Reads `$SBOM_OUT_DIR/plan-mismatch.json`, which an apply's deploy
/// writes before it exits 3; `None` when it is missing, malformed or
/// empty (a malformed one is a warning).
pub(crate) fn read_plan_mismatch(dir: &Path, warnings: &mut Vec<String>) -> Option<Vec<PlanMismatch>> {
    let text = match read_effect_file(dir, "plan-mismatch.json", NODES_LIMIT) {
        Ok(Some(text)) => text,
        Ok(None) => return None,
        Err(e) => {
            warnings.push(e);
            return None;
        }
    };
    match serde_json::from_slice::<Vec<PlanMismatch>>(&text) {
        Ok(list) if !list.is_empty() => Some(list),
        Ok(_) => None,
        Err(e) => {
            warnings.push(format!("plan-mismatch.json is not of the documented shape: {e}"));
            None
        }
    }
}

/// Reads `timings.json` from the effect's output folder `dir`, the
/// effect's own account of its Nix time; `None` when the effect wrote
/// none or one of another shape (not worth a warning: the file is optional
/// and only splits the effect's time); never through a link, and at most
/// 64 KiB.
pub(crate) fn read_times(dir: &Path) -> Option<EffectTimes> {
    let text = read_effect_file(dir, "timings.json", 64 * 1024).ok()??;
    let times: EffectTimes = serde_json::from_slice(&text).ok()?;
    let fine = |v: f64| v.is_finite() && v >= 0.0;
    (fine(times.nix_eval_ms) && fine(times.nix_build_ms)).then_some(times)
}

/// The most `nodes.json` may hold, in bytes.
const NODES_LIMIT: u64 = 16 * 1024 * 1024;

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
