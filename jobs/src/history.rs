//! The run history (PRODUCT.md §13 "Safe change"): what each build changed
//! and why a queued build waits.
//!
//! A build's changes are an RFC 6902 JSON Patch between two documents of
//! the same shape, `{"configuration": …, "secret_versions": {"<application>":
//! {"<field>": <KV version>}}}`: the previous build's (the newest earlier
//! build of the deployment that is not a dry run; an empty object for the
//! first) and this build's. Configurations are stored without secret
//! values, and a secret appears only as its version, so a patch never
//! carries a value: a new value of a secret is a `replace` of its version.

use crate::secrets::SecretPins;
use crate::state::BuildStatus;
use crate::store::builds::{self, BuildRow, Newest};
use crate::store::{Conn, StoreError};
use serde::Serialize;
use serde_json::{json, Map, Value};

/// A build's changes from the build before it (`GET /builds/{id}/diff`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BuildDiff {
    /// The build.
    pub build_id: String,
    /// The build the changes are counted from: the newest earlier build of
    /// the deployment that is not a dry run; `null` for the first.
    #[schema(required = true)]
    pub previous_build_id: Option<String>,
    /// RFC 6902 operations turning the previous build's document into this
    /// one's (paths under `/configuration` and `/secret_versions`).
    #[schema(value_type = Vec<Object>)]
    pub patch: Value,
    /// One line for people: how many paths were added, removed and
    /// replaced, and the first paths.
    pub summary: String,
}

/// The document a build's patch is taken over (see the module doc).
fn document(build: &BuildRow) -> Value {
    let mut secrets = Map::new();
    for pin in build.operator_secrets.as_ref().map_or(&[][..], |p: &SecretPins| &p.set) {
        let app = secrets.entry(pin.application.clone()).or_insert_with(|| json!({}));
        app[pin.field.as_str()] = json!(pin.version);
    }
    json!({ "configuration": build.configuration, "secret_versions": secrets })
}

/// `build`'s changes from `previous` (`None`: it is the first).
pub fn diff(build: &BuildRow, previous: Option<&BuildRow>) -> BuildDiff {
    let before = previous.map_or_else(|| json!({}), document);
    let patch = json_patch::diff(&before, &document(build));
    let patch = serde_json::to_value(&patch).expect("a patch serialises");
    BuildDiff {
        build_id: build.id.clone(),
        previous_build_id: previous.map(|p| p.id.clone()),
        summary: summary(&patch),
        patch,
    }
}

/// Reads `build`'s previous build and gives its [`diff`].
pub async fn diff_of(conn: &mut Conn, build: &BuildRow) -> Result<BuildDiff, StoreError> {
    let previous = builds::newest_before(conn, &build.deployment_id, Newest::Any, build.seq).await?;
    Ok(diff(build, previous.as_ref()))
}

/// How many paths were added, removed and replaced, and up to three of
/// them: `2 replaced, 1 added: /configuration/domain, …`; `no change`.
pub fn summary(patch: &Value) -> String {
    let ops = patch.as_array().map_or(&[][..], Vec::as_slice);
    if ops.is_empty() {
        return "no change".to_owned();
    }
    let count = |op: &str| ops.iter().filter(|o| o["op"] == op).count();
    let mut parts = Vec::new();
    for (op, word) in [("replace", "replaced"), ("add", "added"), ("remove", "removed")] {
        let n = count(op);
        if n > 0 {
            parts.push(format!("{n} {word}"));
        }
    }
    let mut paths: Vec<&str> = ops.iter().filter_map(|o| o["path"].as_str()).take(3).collect();
    if ops.len() > paths.len() {
        paths.push("…");
    }
    format!("{}: {}", parts.join(", "), paths.join(", "))
}

/// Why a queued build waits, and where (`waiting_for` of `GET /builds/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum WaitingFor {
    /// An earlier build of the same deployment runs or waits (ST-2).
    Deployment {
        /// That build.
        build_id: String,
    },
    /// Every build slot of the fleet is busy: it waits its turn.
    Slot {
        /// Its place among the builds handed to the queue, from 1.
        position: i64,
    },
    /// No live worker serves the `builds` queue.
    Worker,
}

/// Why `build` waits, when it is queued (`None` otherwise): one statement,
/// and, only when no earlier build of its deployment holds it, the live
/// workers of the `builds` queue (a heartbeat within `window_s` seconds).
pub async fn waiting_for(conn: &mut Conn, build: &BuildRow, window_s: i64) -> Result<Option<WaitingFor>, StoreError> {
    if build.status != BuildStatus::Queued {
        return Ok(None);
    }
    let (ahead, before) = builds::waiting_ahead(conn, build).await?;
    if let Some(build_id) = ahead {
        return Ok(Some(WaitingFor::Deployment { build_id }));
    }
    let builds_queue = [crate::store::queue::BUILDS_QUEUE];
    let workers = crate::store::fleet::queue_states(conn, &builds_queue, window_s).await?;
    Ok(Some(if workers.first().is_none_or(|q| q.workers == 0) {
        WaitingFor::Worker
    } else {
        WaitingFor::Slot { position: before + 1 }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_counts_each_kind_of_operation_and_names_the_first_paths() {
        let patch = json!([
            {"op": "replace", "path": "/configuration/domain", "value": "b"},
            {"op": "add", "path": "/configuration/applications/x", "value": {}},
            {"op": "replace", "path": "/secret_versions/mastodon/key", "value": 2},
            {"op": "remove", "path": "/configuration/old"},
        ]);
        assert_eq!(
            summary(&patch),
            "2 replaced, 1 added, 1 removed: /configuration/domain, /configuration/applications/x, \
             /secret_versions/mastodon/key, …"
        );
        assert_eq!(summary(&json!([])), "no change");
    }
}
