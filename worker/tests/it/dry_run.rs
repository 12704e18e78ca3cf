//! Dry runs (PRODUCT.md §11): `PUT /deployments/{id}?dry_run=true` and
//! `slipway-worker run deploy --dry-run` evaluate and build every node and
//! say per node what a real run would change, and change nothing: not the
//! deployment's state, configuration, last build, SBOMs or readiness, not a
//! profile link, not a GC root of the provider state (the plan's own GC
//! roots sit in the worker's `plans/` folder). Real api and worker, real Nix. Polls with
//! deadlines; never sleeps to synchronise.

use crate::common;

use common::{binary, command, demo, free_port, start, wait_for, Api, ENDED};
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::TestDatabase;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// The demo with mastodon renamed, peertube disabled and pixelfed enabled.
fn changed() -> Value {
    let mut c = demo();
    c["applications"]["mastodon"]["subdomain"] = json!("chat");
    c["applications"]["peertube"]["enable"] = json!(false);
    c["applications"]["pixelfed"] =
        json!({ "enable": true, "adminEmail": "pixels@demo.example.org", "secretsSet": [], "secretsClear": [] });
    c
}

/// Every link under `dir` with its target, and every GC root of Nix that
/// points into `dir`.
fn links_and_roots(dir: &Path) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if let Ok(target) = std::fs::read_link(&path) {
                found.insert(path.display().to_string(), target.display().to_string());
            } else if path.is_dir() {
                stack.push(path);
            }
        }
    }
    let roots = std::path::Path::new(&std::env::var("NIX_STATE_DIR").unwrap_or_else(|_| "/nix/var/nix".into()))
        .join("gcroots/auto");
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    for entry in std::fs::read_dir(roots).into_iter().flatten().flatten() {
        if let Ok(target) = std::fs::read_link(entry.path()) {
            if target.starts_with(&dir) {
                found.insert(entry.path().display().to_string(), target.display().to_string());
            }
        }
    }
    found
}

/// What a front-end sees of a deployment, less the parts that age on their own.
async fn seen(api: &Api, id: &str) -> (Value, Value) {
    let (_, _, mut d) = api.get(&format!("/deployments/{id}")).await;
    for instance in d["deployed_instances"].as_array_mut().into_iter().flatten() {
        instance["readiness"] = json!(instance["readiness"]["state"]);
    }
    d["updated_at"] = Value::Null;
    let (_, _, sboms) = api.get(&format!("/sbom-list/{id}")).await;
    (d, sboms)
}

async fn a_dry_run_says_what_would_change_and_changes_nothing(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let mut worker = command(&binary("slipway-worker"), &db, port);
    worker.arg("work").env("READY_TIMEOUT", "1s");
    let _worker = start(worker, &db, "worker.log");
    let api = Api::connect(&db, port).await;

    // Unknown deployments have nothing to compare with.
    let body = json!({ "configuration": changed() });
    let (status, answer) = api.call(reqwest::Method::PUT, "/deployments/dry?dry_run=true", Some(&body)).await.unwrap();
    assert_eq!((status, answer["error"].as_str()), (404, Some("not_found")), "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("preview"), "{answer}");

    let (status, accepted) = api.submit("dry", &demo()).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    api.wait_state("dry", "active", Duration::from_secs(240)).await;
    // Readiness settles (no front door: not_ready after 1 s), so nothing moves on its own.
    wait_for("readiness to settle", Duration::from_secs(60), || async {
        let (_, _, d) = api.get("/deployments/dry").await;
        let states: Vec<&str> =
            d["deployed_instances"].as_array()?.iter().filter_map(|i| i["readiness"]["state"].as_str()).collect();
        (!states.is_empty() && states.iter().all(|s| *s == "not_ready" || *s == "ready")).then_some(())
    })
    .await;
    let state_dir = db.path("state").join("provider").join("dry");
    let before = (seen(&api, "dry").await, links_and_roots(&state_dir));

    let (status, accepted) =
        api.call(reqwest::Method::PUT, "/deployments/dry?dry_run=true", Some(&body)).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    assert_eq!(accepted["dry_run"], true, "{accepted}");
    assert_eq!(accepted["state"], "active", "a dry run changes the state: {accepted}");
    let path = format!("/builds/{}", accepted["build_id"].as_str().unwrap());
    let build = wait_for("the dry run to end", Duration::from_secs(240), || async {
        let (_, _, b) = api.get(&path).await;
        b["status"].as_str().is_some_and(|s| ENDED.contains(&s)).then_some(b)
    })
    .await;
    assert_eq!(build["status"], "succeeded", "{build}");
    let report = &build["report"];
    assert_eq!(report["dry_run"], true, "{report}");
    let actions: BTreeMap<&str, &str> = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["name"].as_str().unwrap(), n["change"]["action"].as_str().unwrap_or("none")))
        .collect();
    assert_eq!(actions["mastodon"], "update", "{report}");
    assert_eq!(actions["pixelfed"], "add", "{report}");
    assert_eq!(actions["peertube"], "remove", "{report}");
    let pixelfed = report["nodes"].as_array().unwrap().iter().find(|n| n["name"] == "pixelfed").unwrap();
    assert!(pixelfed["change"]["addLinks"][0].as_str().unwrap().ends_with("nodes/pixelfed/system"), "{pixelfed}");
    assert!(report["nodes"].as_array().unwrap().iter().all(|n| n["outcome"] == "planned" && n["sbom"].is_null()));
    // Each node's closure diff, and the plan's systems kept alive outside the provider state.
    let plan_roots = db.path("state").join("plans/dry").join(accepted["build_id"].as_str().unwrap());
    for node in report["nodes"].as_array().unwrap() {
        assert!(node["change"]["closure"]["size_delta"].is_i64(), "{node}");
        if let Some(system) = node["change"]["after"].as_str() {
            let root = std::fs::read_link(plan_roots.join(node["name"].as_str().unwrap())).unwrap();
            assert_eq!(root.to_str(), Some(system), "{node}");
        }
    }
    assert!(build["log"].as_str().unwrap().contains("dry run"), "{build}");

    let after = (seen(&api, "dry").await, links_and_roots(&state_dir));
    assert_eq!(before.0, after.0, "the deployment or its SBOMs changed");
    assert_eq!(before.1, after.1, "a profile link or a GC root changed");
    assert!(!state_dir.join("nodes/pixelfed").exists(), "a node folder was made");
    // The same dry run of the unchanged configuration: every node unchanged.
    let body = json!({ "configuration": demo() });
    let (_, accepted) = api.call(reqwest::Method::PUT, "/deployments/dry?dry_run=true", Some(&body)).await.unwrap();
    let path = format!("/builds/{}", accepted["build_id"].as_str().unwrap());
    let build = wait_for("the second dry run to end", Duration::from_secs(240), || async {
        let (_, _, b) = api.get(&path).await;
        b["status"].as_str().is_some_and(|s| ENDED.contains(&s)).then_some(b)
    })
    .await;
    assert!(
        build["report"]["nodes"].as_array().unwrap().iter().all(|n| n["change"]["action"] == "unchanged"),
        "{build}"
    );
}

slipway_jobs::on_both_engines!(a_dry_run_says_what_would_change_and_changes_nothing);

#[test]
fn a_local_dry_run_reports_the_plan_and_leaves_the_nodes_as_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!("path:{}", common::repo().join("nix").display());
    let run = |config: &Value, dry: bool| {
        let file = dir.path().join("config.json");
        std::fs::write(&file, config.to_string()).unwrap();
        let mut cmd = std::process::Command::new(binary("slipway-worker"));
        cmd.args(["run", "deploy", "--source", &source, "--config", file.to_str().unwrap(), "--output", "json"])
            .env("SLIPWAY_STATE_DIR", dir.path())
            .env_remove("SLIPWAY_CONFIG");
        if dry {
            cmd.arg("--dry-run");
        }
        let out = cmd.output().unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (out.status.code(), report, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, _, err) = run(&demo(), false);
    assert_eq!(code, Some(0), "{err}");
    let nodes = dir.path().join("provider/local");
    let before = links_and_roots(&nodes);
    let (code, report, err) = run(&changed(), true);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(report["dry_run"], true, "{report}");
    assert!(report["nodes"].as_array().unwrap().iter().any(|n| n["change"]["action"] == "add"), "{report}");
    assert_eq!(links_and_roots(&nodes), before, "a local dry run changed a link or a GC root");
    assert!(!dir.path().join("plans").exists(), "a local dry run left its plan's GC roots");
    let status = std::process::Command::new(binary("slipway-worker"))
        .args(["run", "destroy", "--dry-run", "--source", &source, "--config", "/dev/null"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(2), "--dry-run is for deploys only");
}

/// The GC roots of Nix (`gcroots/auto`) that point into `dir`, dangling or not.
fn roots_into(dir: &Path) -> Vec<String> {
    let roots = std::path::Path::new(&std::env::var("NIX_STATE_DIR").unwrap_or_else(|_| "/nix/var/nix".into()))
        .join("gcroots/auto");
    let canonical = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    std::fs::read_dir(roots)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .filter(|target| target.starts_with(dir) || target.starts_with(&canonical))
        .map(|target| target.display().to_string())
        .collect()
}

#[test]
fn a_local_dry_run_into_a_state_folder_that_did_not_exist_leaves_no_folder_lock_or_gc_root() {
    let dir = tempfile::tempdir().unwrap();
    // The run's temporary folders are the test's, so a root left into one is seen.
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let state = dir.path().join("state");
    let file = dir.path().join("config.json");
    std::fs::write(&file, demo().to_string()).unwrap();
    let source = format!("path:{}", common::repo().join("nix").display());
    let out = std::process::Command::new(binary("slipway-worker"))
        .args(["run", "deploy", "--dry-run", "--source", &source, "--config", file.to_str().unwrap()])
        .args(["--deployment", "fresh", "--output", "json"])
        .env("SLIPWAY_STATE_DIR", &state)
        .env("TMPDIR", &tmp)
        .env_remove("SLIPWAY_CONFIG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["dry_run"], true, "{report}");
    assert!(report["nodes"].as_array().unwrap().iter().all(|n| n["change"]["action"] == "add"), "{report}");
    let left: Vec<String> = walkdir(&state);
    assert!(!state.exists(), "the dry run left the state folder behind, holding {left:?}");
    assert_eq!(roots_into(dir.path()), Vec::<String>::new(), "the dry run left GC roots of Nix");
}

/// Every path under `dir`.
fn walkdir(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            found.push(entry.path().display().to_string());
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
        }
    }
    found
}
