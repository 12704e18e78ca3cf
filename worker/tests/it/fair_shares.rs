//! Fair shares per tenant (FS-1) with real processes on both engines: a
//! tenant's backlog does not keep another tenant's build waiting behind
//! it, and `TENANT_BUILD_SLOTS` keeps one tenant to its running builds
//! while another tenant's run beside them.

use crate::common;

use common::{
    binary, command, demo, free_port, overlapping_runs, slow_source, slow_worker, start, wait_build, Api, ENDED,
};
use serde_json::Value;
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::TestDatabase;

/// The api on `port` with a token for every deployment whose `sub` is `sub`
/// (its tenant, as no `SLIPWAY_TENANT_CLAIM` is set).
fn as_tenant(api: &Api, db: &TestDatabase, port: u16, sub: &str) -> Api {
    let out = command(&binary("slipway-api"), db, port)
        .args(["token", "--deployments", "*", "--ttl", "2h", "--sub", sub])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Api { token: String::from_utf8(out.stdout).unwrap().trim().to_owned(), ..api.clone() }
}

async fn submit(api: &Api, id: &str) -> String {
    let (status, body) = api.submit(id, &demo()).await.unwrap();
    assert_eq!(status, 202, "{id}: {body}");
    body["build_id"].as_str().unwrap().to_owned()
}

/// Tenant A queues six builds across six deployments, then tenant B one;
/// a worker with one build slot starts B's before A's backlog (start
/// order, not time), and A's in the order they were queued.
async fn a_tenants_backlog_does_not_hold_another_tenants_build_behind_it(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let source = db.path("slow-source");
    slow_source(&source, 0);
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let api = Api::connect(&db, port).await;
    let (a, b) = (as_tenant(&api, &db, port, "tenant-a"), as_tenant(&api, &db, port, "tenant-b"));
    let mut queued = Vec::new();
    for n in 1..=6 {
        queued.push(submit(&a, &format!("a-{n}")).await);
    }
    let b_build = submit(&b, "b-1").await;
    queued.push(b_build.clone());
    let mut worker = slow_worker(&db, port, &source);
    worker.env("BUILD_SLOTS", "1");
    let _worker = start(worker, &db, "worker.log");
    let mut started: Vec<(String, String)> = Vec::new();
    for id in &queued {
        let build: Value = wait_build(&api, &format!("/builds/{id}"), id, ENDED).await;
        assert_eq!(build["status"], "succeeded", "{build}");
        started.push((build["started_at"].as_str().unwrap().to_owned(), id.clone()));
    }
    started.sort();
    let order: Vec<&str> = started.iter().map(|(_, id)| id.as_str()).collect();
    let b_rank = order.iter().position(|id| *id == b_build).unwrap();
    assert!(b_rank <= 1, "tenant B's build started after {b_rank} of tenant A's: {order:?}");
    let a_order: Vec<&str> = order.iter().copied().filter(|id| *id != b_build).collect();
    assert_eq!(a_order, queued[..6].iter().map(String::as_str).collect::<Vec<_>>(), "tenant A's builds out of order");
}

/// `TENANT_BUILD_SLOTS=1` on a worker with two slots: tenant A's two builds
/// never run at once, and tenant B's runs beside A's first.
async fn tenant_build_slots_keep_a_tenant_to_its_running_builds_while_another_runs(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let source = db.path("slow-source");
    slow_source(&source, 3);
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let api = Api::connect(&db, port).await;
    let (a, b) = (as_tenant(&api, &db, port, "tenant-a"), as_tenant(&api, &db, port, "tenant-b"));
    let builds = [submit(&a, "a-1").await, submit(&a, "a-2").await, submit(&b, "b-1").await];
    let mut worker = slow_worker(&db, port, &source);
    worker.env("BUILD_SLOTS", "2").env("TENANT_BUILD_SLOTS", "1");
    let _worker = start(worker, &db, "worker.log");
    for id in &builds {
        let build = wait_build(&api, &format!("/builds/{id}"), id, ENDED).await;
        assert_eq!(build["status"], "succeeded", "{build}");
    }
    let overlaps = overlapping_runs(&db.path("state"));
    let names: Vec<String> = overlaps.iter().map(|(x, y)| format!("{} {}", x, y)).collect();
    assert!(
        !overlaps.iter().any(|(x, y)| x.starts_with("a-") && y.starts_with("a-")),
        "tenant A ran two builds at once: {names:?}"
    );
    assert!(
        overlaps.iter().any(|(x, y)| x.starts_with("b-") || y.starts_with("b-")),
        "tenant B's build did not run beside tenant A's: {names:?}"
    );
}

slipway_jobs::on_both_engines!(
    a_tenants_backlog_does_not_hold_another_tenants_build_behind_it,
    tenant_build_slots_keep_a_tenant_to_its_running_builds_while_another_runs,
);
