//! End to end: the real `slipway-api` and `slipway-worker` processes on a
//! fresh database of each engine, real HTTP over loopback, real Nix builds of
//! the reference source. Polls with deadlines; never sleeps to synchronise.

use crate::common;

use common::{binary, command, demo, free_port, start, Api};
use serde_json::json;
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::TestDatabase;
use std::time::Duration;

async fn the_example_deploys_with_an_sbom_per_node_and_destroys_to_idle(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let mut worker = command(&binary("slipway-worker"), &db, port);
    worker.arg("work");
    let _worker = start(worker, &db, "worker.log");
    let api = Api::connect(&db, port).await;

    let (status, accepted) = api.submit("demo", &demo()).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    let deployment = api.wait_state("demo", "active", Duration::from_secs(120)).await;
    assert_eq!(deployment["last_build"]["id"], accepted["build_id"]);
    // The instances of the last submit are deployed, each with its readiness.
    let mut deployed = deployment["deployed_instances"].clone();
    for instance in deployed.as_array_mut().unwrap() {
        let readiness = instance.as_object_mut().unwrap().remove("readiness");
        assert!(readiness.is_some_and(|r| r["state"].is_string()), "{deployment}");
    }
    assert_eq!(deployed, deployment["instances"]);

    let (status, _, build) = api.get(&format!("/builds/{}", accepted["build_id"].as_str().unwrap())).await;
    assert_eq!(status, 200);
    assert!(!build["log"].as_str().unwrap().is_empty());
    let nodes: Vec<String> =
        build["report"]["nodes"].as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap().to_owned()).collect();
    assert!(!nodes.is_empty());

    let (_, _, list) = api.get("/sbom-list/demo").await;
    let listed: Vec<&str> = list["nodes"].as_array().unwrap().iter().map(|n| n["node"].as_str().unwrap()).collect();
    assert_eq!(listed.len(), nodes.len(), "{list}");
    for node in &nodes {
        assert!(listed.contains(&node.as_str()), "{node} missing from {list}");
        let (status, ctype, sbom) = api.get(&format!("/sbom/demo?node={node}")).await;
        assert_eq!(status, 200, "{sbom}");
        assert_eq!(ctype, "application/vnd.cyclonedx+json");
        assert_eq!(sbom["bomFormat"], "CycloneDX");
        assert!(!sbom["components"].as_array().unwrap().is_empty(), "{node} has no components");
    }
    // A node the deployment does not have is named as such, with those it has.
    let (status, _, body) = api.get("/sbom/demo?node=no-such-node").await;
    assert_eq!(status, 404, "{body}");
    assert!(body["message"].as_str().unwrap().contains("has no node no-such-node"), "{body}");
    assert_eq!(body["details"]["nodes"].as_array().map(Vec::len), Some(nodes.len()), "{body}");

    let (status, _) = api.delete("demo").await;
    assert_eq!(status, 202);
    api.wait_state("demo", "idle", Duration::from_secs(120)).await;
    let (_, _, list) = api.get("/sbom-list/demo").await;
    assert_eq!(list["nodes"], json!([]));
    for node in &nodes {
        let (status, _, body) = api.get(&format!("/sbom/demo?node={node}")).await;
        assert_eq!(status, 404, "{body}");
    }
}

slipway_jobs::on_both_engines!(the_example_deploys_with_an_sbom_per_node_and_destroys_to_idle);
