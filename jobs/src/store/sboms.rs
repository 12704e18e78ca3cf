//! SBOM storage (seed 000 "SBOM of the deployed nodes", FR-017 of 001).
//!
//! Each CycloneDX component is kept once, keyed by the SHA-256 of its
//! canonical JSON text ([`canonical_text`]); the rest of each document is
//! kept with its node, and the document is put together again on read with
//! its components in their order. Nodes and deployments that run the same
//! packages share components; a component that no SBOM uses any more is
//! deleted. docs/SBOM.md states the canonical form and why.

use super::{json_col, Conn, StoreError, Q};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// What a deploy produced for one node.
#[derive(Debug, Clone)]
pub enum NodeSbom {
    /// A CycloneDX document.
    Ready(Value),
    /// Why there is none (the node's `<node>.error`).
    Unavailable(String),
}

/// One node's SBOM state, as `GET /sbom-list/{id}` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SbomEntry {
    /// Node name.
    pub node: String,
    /// `ready` or `unavailable`.
    pub status: String,
    /// Why it is unavailable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The deploy that produced it.
    pub build_id: String,
    /// Unix ms.
    pub created_at: i64,
}

/// Replaces a deployment's SBOMs with those of a successful deploy: nodes it
/// names get their new SBOM, nodes it no longer has lose theirs.
pub async fn replace(
    conn: &mut Conn,
    deployment: &str,
    build_id: &str,
    nodes: &[(String, NodeSbom)],
    now: i64,
) -> Result<(), StoreError> {
    let keep: Vec<&str> = nodes.iter().map(|(n, _)| n.as_str()).collect();
    let existing = Q::new("SELECT node FROM sboms WHERE deployment_id = $1").text(deployment).fetch_all(conn).await?;
    for row in existing {
        let node = row.text("node")?;
        if !keep.contains(&node.as_str()) {
            delete_node(conn, deployment, &node).await?;
        }
    }
    for (node, sbom) in nodes {
        delete_node(conn, deployment, node).await?;
        let (status, reason, document, components) = match sbom {
            NodeSbom::Unavailable(reason) => ("unavailable", Some(reason.as_str()), None, Vec::new()),
            NodeSbom::Ready(doc) => {
                let mut doc = doc.clone();
                let components = match doc.as_object_mut().and_then(|o| o.remove("components")) {
                    Some(Value::Array(c)) => c,
                    Some(_) => {
                        return Err(StoreError::Corrupt(format!("SBOM of node {node}: components is not a list")))
                    }
                    None => Vec::new(),
                };
                ("ready", None, Some(doc.to_string()), components)
            }
        };
        Q::new(
            "INSERT INTO sboms (deployment_id, node, build_id, status, reason, document, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .text(deployment)
        .text(node)
        .text(build_id)
        .text(status)
        .opt_text(reason)
        .opt_text(document)
        .int(now)
        .execute(conn)
        .await?;
        for (position, component) in components.iter().enumerate() {
            let text = canonical_text(component);
            let hash = hex::encode(Sha256::digest(text.as_bytes()));
            Q::new("INSERT INTO sbom_components (hash, component) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING")
                .text(&hash)
                .text(&text)
                .execute(conn)
                .await?;
            Q::new("INSERT INTO sbom_node_components (deployment_id, node, position, hash) VALUES ($1, $2, $3, $4)")
                .text(deployment)
                .text(node)
                .int(position as i64)
                .text(&hash)
                .execute(conn)
                .await?;
        }
    }
    collect_garbage(conn).await
}

/// A component's canonical JSON text, the text stored and hashed: compact (no
/// whitespace), every object's keys in ascending byte order at every depth,
/// strings and numbers as `serde_json` writes them (the shortest escapes,
/// non-ASCII as UTF-8; an integer without a fraction, a float with one).
/// Nothing is left out: `bom-ref` is part of the text (docs/SBOM.md).
///
/// Keys are sorted here, not by `serde_json`'s map, so the text does not
/// change if a dependency turns on its `preserve_order` feature; with the
/// default map it is byte for byte `Value::to_string`, the text stored
/// before this function existed.
pub fn canonical_text(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(object) => {
            let mut entries: Vec<(&String, &Value)> = object.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (key, child)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(child, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, child) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(child, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Removes every SBOM of a deployment (a destroy succeeded).
pub async fn remove_all(conn: &mut Conn, deployment: &str) -> Result<(), StoreError> {
    Q::new("DELETE FROM sbom_node_components WHERE deployment_id = $1").text(deployment).execute(conn).await?;
    Q::new("DELETE FROM sboms WHERE deployment_id = $1").text(deployment).execute(conn).await?;
    collect_garbage(conn).await
}

async fn delete_node(conn: &mut Conn, deployment: &str, node: &str) -> Result<(), StoreError> {
    Q::new("DELETE FROM sbom_node_components WHERE deployment_id = $1 AND node = $2")
        .text(deployment)
        .text(node)
        .execute(conn)
        .await?;
    Q::new("DELETE FROM sboms WHERE deployment_id = $1 AND node = $2")
        .text(deployment)
        .text(node)
        .execute(conn)
        .await?;
    Ok(())
}

/// Deletes components that no SBOM uses any more.
async fn collect_garbage(conn: &mut Conn) -> Result<(), StoreError> {
    Q::new(
        "DELETE FROM sbom_components WHERE NOT EXISTS
           (SELECT 1 FROM sbom_node_components c WHERE c.hash = sbom_components.hash)",
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Every node's SBOM state for a deployment, by node name.
pub async fn list(conn: &mut Conn, deployment: &str) -> Result<Vec<SbomEntry>, StoreError> {
    let rows =
        Q::new("SELECT node, status, reason, build_id, created_at FROM sboms WHERE deployment_id = $1 ORDER BY node")
            .text(deployment)
            .fetch_all(conn)
            .await?;
    rows.iter()
        .map(|r| {
            Ok(SbomEntry {
                node: r.text("node")?,
                status: r.text("status")?,
                reason: r.opt_text("reason")?,
                build_id: r.text("build_id")?,
                created_at: r.int("created_at")?,
            })
        })
        .collect()
}

/// One node's SBOM, put together again (`None`: the node has no SBOM row).
pub async fn document(conn: &mut Conn, deployment: &str, node: &str) -> Result<Option<NodeSbom>, StoreError> {
    let row = Q::new("SELECT status, reason, document FROM sboms WHERE deployment_id = $1 AND node = $2")
        .text(deployment)
        .text(node)
        .fetch_optional(conn)
        .await?;
    let Some(row) = row else { return Ok(None) };
    if row.text("status")? != "ready" {
        let reason = row.opt_text("reason")?;
        return Ok(Some(NodeSbom::Unavailable(reason.unwrap_or_else(|| "unavailable".into()))));
    }
    let mut doc: Value = json_col(&row.opt_text("document")?.unwrap_or_default(), "sboms.document")?;
    let rows = Q::new(
        "SELECT c.component AS component FROM sbom_node_components n JOIN sbom_components c ON c.hash = n.hash
         WHERE n.deployment_id = $1 AND n.node = $2 ORDER BY n.position",
    )
    .text(deployment)
    .text(node)
    .fetch_all(conn)
    .await?;
    let components = rows
        .iter()
        .map(|r| json_col(&r.text("component")?, "sbom_components.component"))
        .collect::<Result<Vec<Value>, _>>()?;
    if let Some(obj) = doc.as_object_mut() {
        obj.insert("components".into(), Value::Array(components));
    }
    Ok(Some(NodeSbom::Ready(doc)))
}

/// How many distinct components are stored (for tests and metrics).
pub async fn component_count(conn: &mut Conn) -> Result<i64, StoreError> {
    Q::new("SELECT COUNT(*) AS n FROM sbom_components").fetch_one(conn).await?.int("n")
}
