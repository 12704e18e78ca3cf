//! Deployment rows (ID-1, ST-3, TF-1).

use super::{json_col, Conn, StoreError};
use crate::source::Instance;
use serde_json::Value;
use sqlx::Row;

/// A stored deployment: the snapshot of the last submit (seed 000 "Two-store model").
#[derive(Debug, Clone)]
pub struct DeploymentRow {
    /// The opaque id.
    pub id: String,
    /// Last submitted configuration (migrated, no secret values).
    pub configuration: Value,
    /// Its module source; `None` floats on the built-in source.
    pub module_source: Option<String>,
    /// TF-1 domain of the last submit.
    pub domain: Option<String>,
    /// TF-1 instances of the last submit.
    pub instances: Vec<Instance>,
    /// ST-3 version.
    pub version: i64,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub updated_at: i64,
}

const COLUMNS: &str = "id, configuration, module_source, domain, instances, version, created_at, updated_at";

fn from_row(r: &sqlx::sqlite::SqliteRow) -> Result<DeploymentRow, StoreError> {
    Ok(DeploymentRow {
        id: r.try_get("id")?,
        configuration: json_col(r.try_get::<&str, _>("configuration")?, "deployments.configuration")?,
        module_source: r.try_get("module_source")?,
        domain: r.try_get("domain")?,
        instances: json_col(r.try_get::<&str, _>("instances")?, "deployments.instances")?,
        version: r.try_get("version")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
    })
}

/// Reads one deployment.
pub async fn get(conn: &mut Conn, id: &str) -> Result<Option<DeploymentRow>, StoreError> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!("SELECT {COLUMNS} FROM deployments WHERE id = $1")))
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?;
    row.as_ref().map(from_row).transpose()
}

/// Reads the deployments among `ids` that exist, in the order given.
pub async fn get_many(conn: &mut Conn, ids: &[String]) -> Result<Vec<DeploymentRow>, StoreError> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(row) = get(conn, id).await? {
            out.push(row);
        }
    }
    Ok(out)
}

/// What a submit stores about its deployment.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    /// The deployment id.
    pub id: &'a str,
    /// Migrated configuration without secret values.
    pub configuration: &'a Value,
    /// Module source, if any.
    pub module_source: Option<&'a str>,
    /// TF-1 domain.
    pub domain: Option<&'a str>,
    /// TF-1 instances.
    pub instances: &'a [Instance],
}

/// Inserts the deployment or replaces its snapshot, as a conditional update on
/// the version read (ST-3): a lost race re-reads and tries again.
pub async fn upsert(conn: &mut Conn, s: Snapshot<'_>, now: i64) -> Result<(), StoreError> {
    let configuration = s.configuration.to_string();
    let instances = serde_json::to_string(s.instances).expect("instances serialise");
    for _ in 0..5 {
        let changed = match get(conn, s.id).await? {
            None => sqlx::query(
                "INSERT INTO deployments (id, configuration, module_source, domain, instances, version, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, 1, $6, $6) ON CONFLICT (id) DO NOTHING",
            )
            .bind(s.id)
            .bind(&configuration)
            .bind(s.module_source)
            .bind(s.domain)
            .bind(&instances)
            .bind(now)
            .execute(&mut *conn)
            .await?
            .rows_affected(),
            Some(row) => sqlx::query(
                "UPDATE deployments SET configuration = $1, module_source = $2, domain = $3, instances = $4,
                        version = version + 1, updated_at = $5
                 WHERE id = $6 AND version = $7",
            )
            .bind(&configuration)
            .bind(s.module_source)
            .bind(s.domain)
            .bind(&instances)
            .bind(now)
            .bind(s.id)
            .bind(row.version)
            .execute(&mut *conn)
            .await?
            .rows_affected(),
        };
        if changed == 1 {
            return Ok(());
        }
    }
    Err(StoreError::Conflict("deployment"))
}
