//! The dashboard (`/ui`) in a real browser: the real api and worker on a
//! fresh SQLite database; headless Chromium (Debian's, driven by
//! playwright-core: `tests/browser/dashboard.mjs`) opens `/ui`, pastes a
//! token, submits the demo configuration from the page, and watches the
//! deployment go from `building` to `active` while the build's log streams
//! into the page; then it opens the queues and workers. No URL the page
//! requests carries the token (its streams are opened with tickets). The page's
//! screenshot of the finished deploy is saved as `docs/dashboard.png`.
//! Needs `scripts/install-deps --browser`. Polls with deadlines; never
//! sleeps to synchronise.

use crate::common;
use crate::tools;

use common::{binary, command, free_port, repo, start, wait_for, Api};
use reqwest::Method;
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::TestDatabase;
use std::time::Duration;
use tools::{browser_dir, require_the_browser_tools};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_headless_chromium_watches_a_deploy_go_from_building_to_active_with_its_log_streaming() {
    require_the_browser_tools();
    let db = TestDatabase::new(Engine::Sqlite).await;
    // Logs and database stay for a look when the test fails.
    db.keep(true);
    eprintln!("this test's folder (kept if it fails): {}", db.dir.path().display());
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let mut worker = command(&binary("slipway-worker"), &db, port);
    worker.arg("work");
    let _worker = start(worker, &db, "worker.log");
    let mut api = Api::connect(&db, port).await;
    // An operator's token: the page offers it the queues and workers too.
    api.token = Api::operator_token(&db, port);

    let id = "demo";
    let screenshot = repo().join("docs/dashboard.png");
    let driver = tokio::process::Command::new("node")
        .arg(browser_dir().join("dashboard.mjs"))
        .current_dir(browser_dir())
        .env("UI_URL", format!("{}/ui", api.base))
        .env("SLIPWAY_TOKEN", &api.token)
        .env("DEPLOYMENT_ID", id)
        .env("CONFIGURATION", repo().join("examples/demo.json"))
        .env("RESULT_TIMEOUT_MS", "150000")
        .env("SCREENSHOT", &screenshot)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(240), driver)
        .await
        .expect("dashboard.mjs did not end within 240 s")
        .expect("node runs dashboard.mjs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "dashboard.mjs failed ({}):\n{stderr}\n{stdout}", out.status);
    let page: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("dashboard.mjs printed no JSON ({e}):\n{stdout}\n{stderr}"));

    // Signed in: the token is in this tab's session storage, nowhere else.
    assert_eq!(page["empty_list"], true, "the list before the submit: {page:#}");
    assert_eq!(page["token_in_session"], true, "{page:#}");
    assert_eq!(page["token_in_local"], 0, "the token went to local storage: {page:#}");
    assert_eq!(page["fleet_link"], true, "an operator's token is offered the fleet: {page:#}");

    // The channel's states as the page saw them: building first (the
    // state when the page subscribed, right after its submit), active last.
    let states: Vec<&str> = page["seen"]["states"]
        .as_array()
        .unwrap_or_else(|| panic!("no states: {page:#}"))
        .iter()
        .map(|s| s["state"].as_str().unwrap_or_else(|| panic!("no state in {s}")))
        .collect();
    assert_eq!(states.first(), Some(&"building"), "the page saw {states:?}: {page:#}");
    assert_eq!(states.last(), Some(&"active"), "the page saw {states:?}: {page:#}");
    assert_eq!(page["state"], "active", "{page:#}");
    assert_eq!(page["forms_shown"], false, "the sign-in or submit form still shows over the deployment: {page:#}");
    let queued = page["status"].as_str().unwrap_or_default();
    assert!(queued.starts_with("Deploy queued: build "), "the page did not say the deploy was queued: {page:#}");

    // The log came over the stream while the build ran, and the page shows
    // the whole log the api stored.
    let chunks = page["seen"]["liveLogChunks"].as_u64().unwrap_or(0);
    assert!(chunks > 0, "no log chunk was streamed into the page: {page:#}");
    let build = page["build"].as_str().unwrap_or_else(|| panic!("no build shown: {page:#}"));
    let (status, _, stored) = api.get(&format!("/builds/{build}")).await;
    assert_eq!(status, 200, "{stored}");
    assert_eq!(stored["status"], "succeeded", "{stored}");
    let log = stored["log"].as_str().unwrap_or_default();
    assert!(!log.trim().is_empty(), "the build has no log: {stored}");
    assert_eq!(page["log"].as_str().map(str::trim), Some(log.trim()), "the page's log is not the build's");
    // Its run report and the deployment's instances.
    let nodes = page["report_nodes"].as_array().unwrap_or_else(|| panic!("no report: {page:#}"));
    assert!(!nodes.is_empty() && nodes.iter().all(|n| n.as_str().is_some_and(|t| t.contains("deployed"))), "{page:#}");
    let instances = page["instances"].as_array().unwrap_or_else(|| panic!("no instances: {page:#}"));
    assert!(!instances.is_empty(), "{page:#}");

    // The fleet: the worker, alive, serving the builds queue.
    let workers = page["fleet"]["workers"].as_array().unwrap_or_else(|| panic!("no workers: {page:#}"));
    assert!(
        workers.iter().any(|w| w.as_str().is_some_and(|t| t.contains("builds") && t.contains("alive"))),
        "{page:#}"
    );

    // The token never went into a URL: the streams were opened with tickets.
    let urls: Vec<&str> = page["request_urls"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let carrying: Vec<&&str> = urls.iter().filter(|u| u.contains(&api.token) || u.contains("access_token")).collect();
    assert!(carrying.is_empty(), "request URLs carried the token: {carrying:?}");
    for stream in ["/deployments/demo/events?ticket=", "/log?ticket="] {
        assert!(urls.iter().any(|u| u.contains(stream)), "no {stream} among the page's requests: {urls:?}");
    }

    // Nothing went wrong in the page, and the token was never logged.
    assert_eq!(page["page_errors"], Value::Array(vec![]), "{page:#}");
    assert_eq!(page["failed_requests"], Value::Array(vec![]), "{page:#}");
    let api_log = std::fs::read_to_string(db.path("api.log")).unwrap();
    assert!(!api_log.contains(&api.token), "the api's log holds the token");
    assert!(screenshot.exists(), "no screenshot at {}", screenshot.display());
    db.keep(false);
    let at_active = page["seen"]["states"].as_array().unwrap().last().unwrap()["liveLogChunks"].clone();
    eprintln!(
        "the page saw {states:?}; {chunks} log chunks streamed ({at_active} of them before active); screenshot: {}",
        screenshot.display()
    );
}

/// A token that expires while the dashboard follows a running build: the
/// api ends the page's streams with `token_expired`, and the page drops the
/// token, asks for a fresh one and says why, instead of reopening its
/// streams with tickets it can no longer mint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_asks_for_a_fresh_token_when_its_token_expires_while_it_follows_a_build() {
    require_the_browser_tools();
    let db = TestDatabase::new(Engine::Sqlite).await;
    let source = db.path("slow-source");
    common::slow_source(&source, 120);
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let _worker = start(common::slow_worker(&db, port, &source), &db, "worker.log");
    let api = Api::connect(&db, port).await;
    let (status, answer) = api.submit("slow", &common::demo()).await.unwrap();
    assert_eq!(status, 202, "{answer}");
    let build = format!("/builds/{}", answer["build_id"].as_str().unwrap());
    common::wait_build(&api, &build, "the slow build to start", &["running"]).await;
    let out = command(&binary("slipway-api"), &db, port)
        .args(["token", "--deployments", "slow", "--ttl", "15s"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let short = String::from_utf8(out.stdout).unwrap().trim().to_owned();

    let driver = tokio::process::Command::new("node")
        .arg(browser_dir().join("token_expiry.mjs"))
        .current_dir(browser_dir())
        .env("UI_URL", format!("{}/ui", api.base))
        .env("SLIPWAY_TOKEN", &short)
        .env("DEPLOYMENT_ID", "slow")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(180), driver)
        .await
        .expect("token_expiry.mjs did not end within 180 s")
        .expect("node runs token_expiry.mjs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "token_expiry.mjs failed ({}):\n{stderr}\n{stdout}", out.status);
    let page: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("token_expiry.mjs printed no JSON ({e}):\n{stdout}\n{stderr}"));
    assert_eq!(page["seen"]["tokenExpired"], true, "{page:#}");
    assert_eq!(page["token_form"], true, "the page did not ask for a fresh token: {page:#}");
    assert_eq!(page["token_in_session"], false, "the expired token was kept: {page:#}");
    assert!(page["status"].as_str().is_some_and(|s| s.contains("token expired")), "{page:#}");
    let after = page["requests_after"].as_array().unwrap();
    assert!(after.is_empty(), "the page kept asking the api with an expired token: {after:?}");
    let (_, _, b) = api.get(&build).await;
    assert_eq!(b["status"], "running", "the build goes on: {b}");
}

/// The dashboard's safe-change buttons in headless Chromium
/// (`tests/browser/safe_change.mjs`), against the real api and worker
/// building the reference source with real Nix: a deploy, then a plan of
/// another configuration. The page shows the plan's per-node diff; its
/// Apply queues an apply of that plan, which succeeds; Apply on the same
/// plan again shows the api's `plan_stale` refusal; Rollback on the first
/// deploy queues a rollback to it, which succeeds. Each build the page
/// queued is checked through the api: its trigger, what it is based on,
/// and who asked (the page's token's subject).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_applies_a_plan_and_rolls_back_to_an_older_deploy_from_their_buttons() {
    require_the_browser_tools();
    let db = TestDatabase::new(Engine::Sqlite).await;
    db.keep(true);
    eprintln!("this test's folder (kept if it fails): {}", db.dir.path().display());
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let mut worker = command(&binary("slipway-worker"), &db, port);
    worker.arg("work");
    let _worker = start(worker, &db, "worker.log");
    let api = Api::connect(&db, port).await;

    let id = "safe";
    let ended = |build: String| {
        let api = api.clone();
        async move {
            let path = format!("/builds/{build}");
            wait_for(&format!("build {build} to end"), Duration::from_secs(240), || async {
                let (_, _, b) = api.get(&path).await;
                b["status"].as_str().is_some_and(|s| common::ENDED.contains(&s)).then_some(b)
            })
            .await
        }
    };
    let (status, first) = api.submit(id, &common::demo()).await.unwrap();
    assert_eq!(status, 202, "{first}");
    let first = ended(first["build_id"].as_str().unwrap().to_owned()).await;
    assert_eq!(first["status"], "succeeded", "{first}");
    let mut changed = common::demo();
    changed["applications"]["mastodon"]["subdomain"] = json!("chat");
    let (status, plan) = api
        .call(Method::PUT, &format!("/deployments/{id}?dry_run=true"), Some(&json!({ "configuration": changed })))
        .await
        .unwrap();
    assert_eq!(status, 202, "{plan}");
    let plan = ended(plan["build_id"].as_str().unwrap().to_owned()).await;
    assert_eq!(plan["status"], "succeeded", "{plan}");
    let (plan_id, first_id) = (plan["id"].as_str().unwrap(), first["id"].as_str().unwrap());

    let out = command(&binary("slipway-api"), &db, port)
        .args(["token", "--deployments", id, "--ttl", "1h", "--sub", "dashboard-user"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let driver = tokio::process::Command::new("node")
        .arg(browser_dir().join("safe_change.mjs"))
        .current_dir(browser_dir())
        .env("UI_URL", format!("{}/ui", api.base))
        .env("SLIPWAY_TOKEN", &token)
        .env("DEPLOYMENT_ID", id)
        .env("PLAN_ID", plan_id)
        .env("TARGET_ID", first_id)
        .env("RESULT_TIMEOUT_MS", "200000")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(480), driver)
        .await
        .expect("safe_change.mjs did not end within 480 s")
        .expect("node runs safe_change.mjs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "safe_change.mjs failed ({}):\n{stderr}\n{stdout}", out.status);
    let page: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("safe_change.mjs printed no JSON ({e}):\n{stdout}\n{stderr}"));

    // The plan's view: every node of its report with its action; the
    // changed subdomain updates mastodon's node.
    let rows = page["plan_rows"].as_array().unwrap_or_else(|| panic!("no plan rows: {page:#}"));
    let nodes: Vec<(&str, &str)> = plan["report"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["name"].as_str().unwrap(), n["change"]["action"].as_str().unwrap()))
        .collect();
    let shown: Vec<(&str, &str)> =
        rows.iter().map(|r| (r["node"].as_str().unwrap_or("?"), r["action"].as_str().unwrap_or("?"))).collect();
    assert_eq!(shown, nodes, "{page:#}");
    assert!(nodes.contains(&("mastodon", "update")), "{nodes:?}");
    // The builds list: each build's trigger.
    let triggers: Vec<(&str, &str)> = page["builds_rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["build"].as_str().unwrap_or("?"), r["trigger"].as_str().unwrap_or("?")))
        .collect();
    assert_eq!(triggers, [(plan_id, "dry_run"), (first_id, "submit")], "{page:#}");

    // Apply: queued by the page, an apply of the plan asked by its token, succeeded.
    let applied = page["applied"]["build"].as_str().unwrap_or_else(|| panic!("no apply: {page:#}"));
    let (_, _, b) = api.get(&format!("/builds/{applied}")).await;
    assert_eq!(
        (&b["trigger"], &b["based_on"], &b["status"]),
        (&json!("apply"), &plan["id"], &json!("succeeded")),
        "{b}"
    );
    assert_eq!(b["requested_by"]["sub"], "dashboard-user", "{b}");
    // The stale plan: the page says the api's refusal, as an error.
    let stale = page["stale"]["status"].as_str().unwrap_or_default();
    assert!(stale.starts_with("Not applied: the plan is stale"), "{page:#}");
    assert_eq!(page["stale"]["error"], "error", "{page:#}");
    // Rollback: to the first deploy, asked by the page's token, succeeded.
    let rolled = page["rolled_back"]["build"].as_str().unwrap_or_else(|| panic!("no rollback: {page:#}"));
    let (_, _, b) = api.get(&format!("/builds/{rolled}")).await;
    assert_eq!(
        (&b["trigger"], &b["based_on"], &b["status"]),
        (&json!("rollback"), &first["id"], &json!("succeeded")),
        "{b}"
    );
    assert_eq!(b["requested_by"]["sub"], "dashboard-user", "{b}");
    let (_, page_of_rollbacks) =
        api.call(Method::GET, &format!("/deployments/{id}/builds?trigger=rollback"), None).await.unwrap();
    assert_eq!(page_of_rollbacks["builds"][0]["id"], rolled, "{page_of_rollbacks}");
    // The page shows who asked and why, in the list and the build's view.
    let row = page["rolled_back"]["row"].as_str().unwrap_or_default();
    assert!(row.contains("rollback") && row.contains("dashboard-user"), "{page:#}");
    let view = page["rolled_back"]["view"].as_str().unwrap_or_default();
    assert!(view.contains("Returns to") && view.contains(first_id), "{page:#}");
    // Each click was confirmed, and nothing went wrong in the page.
    assert_eq!(page["dialogs"].as_array().map(Vec::len), Some(3), "{page:#}");
    assert_eq!(page["page_errors"], Value::Array(vec![]), "{page:#}");
    assert_eq!(page["failed_requests"], Value::Array(vec![]), "{page:#}");
    db.keep(false);
}
