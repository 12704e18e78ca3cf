//! What a deployment is now (ST-1, TF-1): the one read of a deployment that
//! the api's `GET /deployments/{id}` and `GET /deployments?ids=`, the local
//! CLI and the tests share, so the state is derived in one place.

use crate::source::outputs::Instance;
use crate::state::{BuildKind, DeploymentState};
use crate::store::builds::{self, BuildRow, Newest};
use crate::store::deployments::{self, DeploymentRow};
use crate::store::instance_readiness::{self, ReadinessRow};
use crate::store::{Conn, StoreError};

/// A deployment as a front-end reads it.
#[derive(Debug, Clone)]
pub struct DeploymentRead {
    /// The stored snapshot of its last submit: configuration, module
    /// source, domain and instances (seed 000: the intent of the last submit).
    pub deployment: DeploymentRow,
    /// Its state, derived from [`DeploymentRead::state_build`] (ST-1).
    pub state: DeploymentState,
    /// The build the state comes from: the latest that ran or may still run
    /// ([`builds::deciding`]); `None` before any.
    pub state_build: Option<BuildRow>,
    /// Its newest build, which may be newer than the state's: cancelled
    /// before it ran, or superseded.
    pub last_build: Option<BuildRow>,
    /// Instances of the last successful build (TF-1); none after a destroy.
    pub deployed_instances: Vec<Instance>,
    /// The readiness of those instances (§10), by instance name.
    pub readiness: Vec<ReadinessRow>,
}

/// Reads deployment `id`; `None` when it was never submitted.
pub async fn deployment(conn: &mut Conn, id: &str) -> Result<Option<DeploymentRead>, StoreError> {
    let Some(deployment) = deployments::get(conn, id).await? else { return Ok(None) };
    let last_build = builds::latest(conn, id).await?;
    let state_build = builds::deciding(conn, id).await?;
    let succeeded = builds::latest_succeeded(conn, id).await?;
    let readiness = instance_readiness::of_deployment(conn, id).await?;
    Ok(Some(assemble(deployment, last_build, state_build, succeeded, readiness)))
}

/// Reads the deployments among `ids` that exist, in the order given (an
/// id given twice is read twice). Five statements whatever the number of
/// ids (the api takes at most 100), each as [`deployment`] reads one.
pub async fn deployments(conn: &mut Conn, ids: &[String]) -> Result<Vec<DeploymentRead>, StoreError> {
    let found = deployments::get_many(conn, ids).await?;
    if found.is_empty() {
        return Ok(Vec::new());
    }
    let stored: Vec<String> = found.keys().cloned().collect();
    let latest = builds::newest_of_each(conn, &stored, Newest::Any).await?;
    let deciding = builds::newest_of_each(conn, &stored, Newest::Deciding).await?;
    let succeeded = builds::newest_of_each(conn, &stored, Newest::Succeeded).await?;
    let readiness = instance_readiness::of_deployments(conn, &stored).await?;
    Ok(ids
        .iter()
        .filter_map(|id| {
            Some(assemble(
                found.get(id)?.clone(),
                latest.get(id).cloned(),
                deciding.get(id).cloned(),
                succeeded.get(id).cloned(),
                readiness.get(id).cloned().unwrap_or_default(),
            ))
        })
        .collect())
}

/// A [`DeploymentRead`] from its rows: its state from the deciding build
/// (ST-1), its deployed instances from the latest succeeded build when that
/// is a deploy (TF-1).
fn assemble(
    deployment: DeploymentRow,
    last_build: Option<BuildRow>,
    state_build: Option<BuildRow>,
    succeeded: Option<BuildRow>,
    readiness: Vec<ReadinessRow>,
) -> DeploymentRead {
    let deployed_instances = match succeeded {
        Some(b) if b.kind == BuildKind::Deploy => b.instances,
        _ => Vec::new(),
    };
    DeploymentRead {
        state: DeploymentState::derive(state_build.as_ref().map(|b| (b.kind, b.status))),
        deployment,
        state_build,
        last_build,
        deployed_instances,
        readiness,
    }
}
