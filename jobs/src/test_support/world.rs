//! A job context on a database of its own ([`World`]), and builds moved
//! through their states the way a worker would.

use super::{checker, demo, repo, AnySource, TestDatabase};
use crate::store::Engine;

/// A job context on a fresh database of its own: what a worker's job
/// bodies see, for tests that run builds in-process.
pub struct World {
    /// The context the job bodies run with (worker `test-worker`).
    pub ctx: crate::jobs::Ctx,
    /// The test's database and temporary folder (state under `state/`).
    pub db: TestDatabase,
}

/// A [`World`] on `engine`, with the configuration keys `extra` on top of
/// a state folder in the test's temporary folder and the reference source.
pub async fn world(engine: Engine, extra: &[(&str, &str)]) -> World {
    let db = TestDatabase::new(engine).await;
    let mut keys = std::collections::BTreeMap::from([
        ("DATABASE_URL".to_owned(), db.url.clone()),
        ("SLIPWAY_STATE_DIR".to_owned(), db.path("state").display().to_string()),
        ("SLIPWAY_DEFAULT_SOURCE_DIR".to_owned(), repo().join("nix").display().to_string()),
    ]);
    keys.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let config = crate::config::Config::from_keys(&keys).expect("test configuration");
    let pool = crate::store::open(&config).await.expect("test database opens");
    World { ctx: crate::jobs::Ctx::new(pool, std::sync::Arc::new(config), "test-worker", false), db }
}

impl World {
    /// Checks the demo configuration and queues a build of `kind` for
    /// deployment `id` (module source `source`, or the built-in one).
    pub async fn queue(&self, id: &str, kind: crate::state::BuildKind, source: Option<&str>) -> String {
        self.queue_configuration(id, kind, source, demo()).await
    }

    /// [`World::queue`] with another configuration.
    pub async fn queue_configuration(
        &self,
        id: &str,
        kind: crate::state::BuildKind,
        source: Option<&str>,
        configuration: serde_json::Value,
    ) -> String {
        let request = crate::submit::SubmitRequest {
            deployment: crate::id::DeploymentId::parse(id).expect("a valid deployment id"),
            configuration,
            module_source: source.map(str::to_owned),
            queueing: crate::submit::Queueing { kind, limit: None },
            dry_run: false,
            requested_by: None,
            plan_ttl: std::time::Duration::from_secs(3600),
            health_gate: None,
        };
        crate::submit::submit(&self.ctx.db, &AnySource(checker()), None, request)
            .await
            .expect("the build is queued")
            .build_id
    }

    /// Runs build `build_id` in-process to its end and returns its report.
    pub async fn run(&self, build_id: &str) -> crate::jobs::report::Report {
        let job = crate::store::queue::BuildJob { build_id: build_id.into() };
        match crate::jobs::build_job::run(job, &self.ctx).await.expect("the build job runs") {
            crate::jobs::build_job::Ran::Finished(r) => *r,
            other => panic!("the build did not run: {other:?}"),
        }
    }

    /// Deployment `id`'s state (ST-1).
    pub async fn state(&self, id: &str) -> crate::state::DeploymentState {
        let mut conn = self.ctx.db.acquire().await.expect("connection");
        let deciding = crate::store::builds::deciding(&mut conn, id).await.expect("read");
        crate::state::DeploymentState::derive(deciding.map(|b| (b.kind, b.status)))
    }

    /// A build row.
    pub async fn build(&self, id: &str) -> crate::store::builds::BuildRow {
        let mut conn = self.ctx.db.acquire().await.expect("connection");
        crate::store::builds::get(&mut conn, id).await.expect("read").expect("the build exists")
    }

    /// Jobs pushed into apalis's table for any queue.
    pub async fn jobs(&self) -> i64 {
        let table = match self.ctx.db.engine() {
            Engine::Sqlite => "Jobs",
            Engine::Postgres => "apalis.jobs",
        };
        let mut conn = self.ctx.db.acquire().await.expect("connection");
        crate::store::Q::new(format!("SELECT COUNT(*) AS n FROM {table}"))
            .fetch_one(&mut conn)
            .await
            .expect("count")
            .int("n")
            .expect("n")
    }

    /// The builds whose job was pushed, in submit order.
    pub async fn dispatched(&self) -> Vec<String> {
        let mut conn = self.ctx.db.acquire().await.expect("connection");
        let rows = crate::store::Q::new("SELECT id FROM builds WHERE dispatched = 1 ORDER BY seq")
            .fetch_all(&mut conn)
            .await
            .expect("read");
        rows.iter().map(|r| r.text("id").expect("id")).collect()
    }
}

/// Records build `id` as run to success by worker `a-worker`, as if a
/// worker had claimed it and its effect had succeeded (no effect runs; the
/// deployment's next build is dispatched as after a real end).
pub async fn record_success(db: &crate::store::Db, id: &str) {
    use crate::store::builds;
    let now = crate::store::now_ms();
    let mut tx = db.begin_write().await.expect("transaction");
    let row = builds::get(&mut tx, id).await.expect("read").expect("the build exists");
    tx.lock_deployment(&row.deployment_id).await.expect("lock");
    assert!(builds::claim(&mut tx, &row, "a-worker", now).await.expect("claim"), "the build changed meanwhile");
    let claimed = builds::get(&mut tx, id).await.expect("read").expect("the build exists");
    let finish = builds::Finish {
        status: crate::state::BuildStatus::Succeeded,
        reason: None,
        error: None,
        report: serde_json::json!({}),
    };
    assert!(builds::finish(&mut tx, &claimed, &finish, now).await.expect("finish"), "the claim did not hold");
    builds::dispatch_next(&mut tx, &row.deployment_id).await.expect("dispatch");
    tx.commit().await.expect("commit");
}

/// Claims build `id` for worker `worker` as its next attempt, as a worker
/// would before it dies or is taken for dead; returns the claimed row.
pub async fn claim_as(db: &crate::store::Db, id: &str, worker: &str) -> crate::store::builds::BuildRow {
    use crate::store::builds;
    let mut tx = db.begin_write().await.expect("transaction");
    let row = builds::get(&mut tx, id).await.expect("read").expect("the build exists");
    assert!(builds::claim(&mut tx, &row, worker, crate::store::now_ms()).await.expect("claim"), "the build changed");
    let claimed = builds::get(&mut tx, id).await.expect("read").expect("the build exists");
    tx.commit().await.expect("commit");
    claimed
}

/// A submit of the demo configuration to deployment `id` through the
/// built-in source, within `queue_size`: what `PUT /deployments/{id}` does.
pub async fn submit_demo(
    db: &crate::store::Db,
    sources: &dyn crate::source::policy::Sources,
    id: &str,
    queue_size: u32,
) -> Result<crate::submit::Accepted, crate::submit::SubmitError> {
    submit_demo_if(db, sources, id, queue_size, None).await
}

/// [`submit_demo`] only if `precondition` holds ([`crate::submit::submit_if`]).
pub async fn submit_demo_if(
    db: &crate::store::Db,
    sources: &dyn crate::source::policy::Sources,
    id: &str,
    queue_size: u32,
    precondition: Option<&crate::precondition::Precondition>,
) -> Result<crate::submit::Accepted, crate::submit::SubmitError> {
    let request = crate::submit::SubmitRequest {
        deployment: crate::id::DeploymentId::parse(id).expect("a valid deployment id"),
        configuration: demo(),
        module_source: None,
        queueing: crate::submit::Queueing { kind: crate::state::BuildKind::Deploy, limit: Some(queue_size) },
        dry_run: false,
        requested_by: None,
        plan_ttl: std::time::Duration::from_secs(3600),
        health_gate: None,
    };
    crate::submit::submit_if(db, sources, None, request, precondition).await
}
