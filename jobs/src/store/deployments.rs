//! Deployment rows (ID-1, ST-3, TF-1).

use super::{json_col, Conn, Row, StoreError, Q};
use crate::source::outputs::Instance;
use serde_json::Value;

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
    /// EV-1: the last submit's names eval (`nodes.json`: nodes with their
    /// DNS names, disabled applications); `None` when it stored without one.
    pub names: Option<Value>,
    /// ST-3 version.
    pub version: i64,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub updated_at: i64,
}

const COLUMNS: &str = "id, configuration, module_source, domain, instances, names, version, created_at, updated_at";

fn from_row(r: &Row) -> Result<DeploymentRow, StoreError> {
    Ok(DeploymentRow {
        id: r.text("id")?,
        configuration: json_col(&r.text("configuration")?, "deployments.configuration")?,
        module_source: r.opt_text("module_source")?,
        domain: r.opt_text("domain")?,
        instances: json_col(&r.text("instances")?, "deployments.instances")?,
        names: r.opt_text("names")?.map(|t| json_col(&t, "deployments.names")).transpose()?,
        version: r.int("version")?,
        created_at: r.int("created_at")?,
        updated_at: r.int("updated_at")?,
    })
}

/// Reads one deployment.
pub async fn get(conn: &mut Conn, id: &str) -> Result<Option<DeploymentRow>, StoreError> {
    let row = Q::new(format!("SELECT {COLUMNS} FROM deployments WHERE id = $1")).text(id).fetch_optional(conn).await?;
    row.as_ref().map(from_row).transpose()
}

/// The stored deployments among `ids`, by id, in one statement.
pub async fn get_many(
    conn: &mut Conn,
    ids: &[String],
) -> Result<std::collections::HashMap<String, DeploymentRow>, StoreError> {
    if ids.is_empty() {
        return Ok(Default::default());
    }
    let q = Q::new(get_many_sql(ids.len()));
    let rows = q.texts(ids).fetch_all(conn).await?;
    rows.iter().map(|r| from_row(r).map(|d| (d.id.clone(), d))).collect()
}

/// [`get_many`]'s statement for `n` ids (`$1` … `$n`).
pub fn get_many_sql(n: usize) -> String {
    format!("SELECT {COLUMNS} FROM deployments WHERE id IN {}", super::placeholders(1, n))
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
    /// EV-1 names eval, if it ran.
    pub names: Option<&'a Value>,
}

/// Inserts the deployment or replaces its snapshot, as a conditional update on
/// the version read (ST-3): a lost race re-reads and tries again.
pub async fn upsert(conn: &mut Conn, s: Snapshot<'_>, now: i64) -> Result<(), StoreError> {
    let configuration = s.configuration.to_string();
    let instances = serde_json::to_string(s.instances).expect("instances serialise");
    let names = s.names.map(Value::to_string);
    for _ in 0..5 {
        let changed = match get(conn, s.id).await? {
            None => {
                Q::new(
                    "INSERT INTO deployments (id, configuration, module_source, domain, instances, names, version, created_at, updated_at)
                     VALUES ($1, $2, $3, $4, $5, $7, 1, $6, $6) ON CONFLICT (id) DO NOTHING",
                )
                .text(s.id)
                .text(&configuration)
                .opt_text(s.module_source)
                .opt_text(s.domain)
                .text(&instances)
                .int(now)
                .opt_text(names.as_deref())
                .execute(conn)
                .await?
            }
            Some(row) => {
                Q::new(
                    "UPDATE deployments SET configuration = $1, module_source = $2, domain = $3, instances = $4,
                        version = version + 1, updated_at = $5, names = $8
                     WHERE id = $6 AND version = $7",
                )
                .text(&configuration)
                .opt_text(s.module_source)
                .opt_text(s.domain)
                .text(&instances)
                .int(now)
                .text(s.id)
                .int(row.version)
                .opt_text(names.as_deref())
                .execute(conn)
                .await?
            }
        };
        if changed == 1 {
            return Ok(());
        }
    }
    Err(StoreError::Conflict("deployment"))
}

/// The ids of the deployments changed most recently (by their last
/// submit), newest first, at most `limit`: what a token for every
/// deployment sees listed.
pub async fn recent_deployment_ids(conn: &mut Conn, limit: i64) -> Result<Vec<String>, StoreError> {
    let rows =
        Q::new("SELECT id FROM deployments ORDER BY updated_at DESC, id LIMIT $1").int(limit).fetch_all(conn).await?;
    rows.iter().map(|r| r.text("id")).collect()
}
