//! SBOM storage (seed 000 "SBOM of the deployed nodes", FR-017 of 001).
//!
//! Each CycloneDX component is kept once, keyed by the SHA-256 of its JSON
//! text; the rest of each document is kept with its node, and the document is
//! put together again on read with its components in their order. Nodes and
//! deployments that run the same packages share components; a component that
//! no SBOM uses any more is deleted.

use super::{json_col, Conn, StoreError};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use sqlx::Row;

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
    let existing: Vec<String> = sqlx::query_scalar("SELECT node FROM sboms WHERE deployment_id = $1")
        .bind(deployment)
        .fetch_all(&mut *conn)
        .await?;
    for gone in existing.iter().filter(|n| !keep.contains(&n.as_str())) {
        delete_node(conn, deployment, gone).await?;
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
        sqlx::query(
            "INSERT INTO sboms (deployment_id, node, build_id, status, reason, document, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(deployment)
        .bind(node)
        .bind(build_id)
        .bind(status)
        .bind(reason)
        .bind(document)
        .bind(now)
        .execute(&mut *conn)
        .await?;
        for (position, component) in components.iter().enumerate() {
            let text = component.to_string();
            let hash = hex::encode(Sha256::digest(text.as_bytes()));
            sqlx::query("INSERT INTO sbom_components (hash, component) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING")
                .bind(&hash)
                .bind(&text)
                .execute(&mut *conn)
                .await?;
            sqlx::query(
                "INSERT INTO sbom_node_components (deployment_id, node, position, hash) VALUES ($1, $2, $3, $4)",
            )
            .bind(deployment)
            .bind(node)
            .bind(position as i64)
            .bind(&hash)
            .execute(&mut *conn)
            .await?;
        }
    }
    collect_garbage(conn).await
}

/// Removes every SBOM of a deployment (a destroy succeeded).
pub async fn remove_all(conn: &mut Conn, deployment: &str) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM sbom_node_components WHERE deployment_id = $1")
        .bind(deployment)
        .execute(&mut *conn)
        .await?;
    sqlx::query("DELETE FROM sboms WHERE deployment_id = $1").bind(deployment).execute(&mut *conn).await?;
    collect_garbage(conn).await
}

async fn delete_node(conn: &mut Conn, deployment: &str, node: &str) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM sbom_node_components WHERE deployment_id = $1 AND node = $2")
        .bind(deployment)
        .bind(node)
        .execute(&mut *conn)
        .await?;
    sqlx::query("DELETE FROM sboms WHERE deployment_id = $1 AND node = $2")
        .bind(deployment)
        .bind(node)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Deletes components that no SBOM uses any more.
async fn collect_garbage(conn: &mut Conn) -> Result<(), StoreError> {
    sqlx::query(
        "DELETE FROM sbom_components WHERE NOT EXISTS
           (SELECT 1 FROM sbom_node_components c WHERE c.hash = sbom_components.hash)",
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Every node's SBOM state for a deployment, by node name.
pub async fn list(conn: &mut Conn, deployment: &str) -> Result<Vec<SbomEntry>, StoreError> {
    let rows = sqlx::query(
        "SELECT node, status, reason, build_id, created_at FROM sboms WHERE deployment_id = $1 ORDER BY node",
    )
    .bind(deployment)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(SbomEntry {
                node: r.try_get("node")?,
                status: r.try_get("status")?,
                reason: r.try_get("reason")?,
                build_id: r.try_get("build_id")?,
                created_at: r.try_get("created_at")?,
            })
        })
        .collect()
}

/// One node's SBOM, put together again (`None`: the node has no SBOM row).
pub async fn document(conn: &mut Conn, deployment: &str, node: &str) -> Result<Option<NodeSbom>, StoreError> {
    let row = sqlx::query("SELECT status, reason, document FROM sboms WHERE deployment_id = $1 AND node = $2")
        .bind(deployment)
        .bind(node)
        .fetch_optional(&mut *conn)
        .await?;
    let Some(row) = row else { return Ok(None) };
    if row.try_get::<&str, _>("status")? != "ready" {
        let reason: Option<String> = row.try_get("reason")?;
        return Ok(Some(NodeSbom::Unavailable(reason.unwrap_or_else(|| "unavailable".into()))));
    }
    let mut doc: Value = json_col(row.try_get::<&str, _>("document")?, "sboms.document")?;
    let texts: Vec<String> = sqlx::query_scalar(
        "SELECT c.component FROM sbom_node_components n JOIN sbom_components c ON c.hash = n.hash
         WHERE n.deployment_id = $1 AND n.node = $2 ORDER BY n.position",
    )
    .bind(deployment)
    .bind(node)
    .fetch_all(&mut *conn)
    .await?;
    let components =
        texts.iter().map(|t| json_col(t, "sbom_components.component")).collect::<Result<Vec<Value>, _>>()?;
    if let Some(obj) = doc.as_object_mut() {
        obj.insert("components".into(), Value::Array(components));
    }
    Ok(Some(NodeSbom::Ready(doc)))
}

/// How many distinct components are stored (for tests and metrics).
pub async fn component_count(conn: &mut Conn) -> Result<i64, StoreError> {
    Ok(sqlx::query("SELECT COUNT(*) AS n FROM sbom_components").fetch_one(&mut *conn).await?.try_get("n")?)
}
