//! A front-end's delete in a real browser (seed 000 "Browser-orchestrated
//! delete", DL-1..3): the real api and worker on a fresh SQLite database;
//! a page served from an origin of the test's own (allowed by
//! `SLIPWAY_ALLOWED_ORIGINS`) deletes a deployment from headless Chromium
//! with a cross-origin `fetch` (a real CORS preflight) carrying a callback
//! URL and token, follows the deployment's channel with an `EventSource`
//! (opened with a single-use ticket minted by a cross-origin
//! `POST …/events/ticket`; no request URL carries the token) until it is
//! idle, and the origin receives the reconcile push. Needs `scripts/install-deps --browser` (Debian's
//! Chromium, Node.js, playwright-core). Polls with deadlines; never sleeps
//! to synchronise.

use crate::common;
use crate::origin;
use crate::tools;

use common::{binary, command, demo, free_port, start, wait_for, Api};
use origin::Origin;
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::TestDatabase;
use std::time::Duration;
use tools::{browser_dir, require_the_browser_tools};

/// A token for `deployments` only, valid 1 h, minted by `slipway-api token`.
fn token_for(db: &TestDatabase, port: u16, deployments: &str) -> String {
    let out = command(&binary("slipway-api"), db, port)
        .args(["token", "--deployments", deployments, "--ttl", "1h"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A random token of the front-end's for the reconcile push.
fn callback_token() -> String {
    use rand::Rng;
    let bytes: [u8; 24] = rand::rng().random();
    format!("cb-{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_deletes_from_headless_chromium_follows_the_channel_to_idle_and_its_origin_gets_one_reconcile_push() {
    require_the_browser_tools();
    let db = TestDatabase::new(Engine::Sqlite).await;
    // Logs, database and the page's screenshot stay for a look when the test fails.
    db.keep(true);
    eprintln!("this test's folder (kept if it fails): {}", db.dir.path().display());
    let origin = Origin::start(Some(browser_dir())).await;
    let port = free_port();
    let with_origins = |bin: &str| {
        let mut cmd = command(&binary(bin), &db, port);
        cmd.env("SLIPWAY_ALLOWED_ORIGINS", &origin.base).env("SLIPWAY_CALLBACK_ALLOW_PRIVATE", "true");
        cmd
    };
    let _api = start(with_origins("slipway-api"), &db, "api.log");
    let mut worker = with_origins("slipway-worker");
    worker.arg("work");
    let _worker = start(worker, &db, "worker.log");
    let api = Api::connect(&db, port).await;

    let id = "demo";
    let (status, accepted) = api.submit(id, &demo()).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    api.wait_state(id, "active", Duration::from_secs(180)).await;

    // The page, in Chromium, with a token scoped to this deployment.
    let token = token_for(&db, port, id);
    let cb_token = callback_token();
    let screenshot = db.path("page.png");
    let driver = tokio::process::Command::new("node")
        .arg(browser_dir().join("driver.mjs"))
        .current_dir(browser_dir())
        .env("PAGE_URL", format!("{}/page.html", origin.base))
        .env("API_URL", &api.base)
        .env("SLIPWAY_TOKEN", &token)
        .env("DEPLOYMENT_ID", id)
        .env("CALLBACK_URL", origin.reconcile_url())
        .env("CALLBACK_TOKEN", &cb_token)
        .env("RESULT_TIMEOUT_MS", "150000")
        .env("SCREENSHOT", &screenshot)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(200), driver)
        .await
        .expect("driver.mjs did not end within 200 s")
        .expect("node runs driver.mjs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "driver.mjs failed ({}):\n{stderr}\n{stdout}", out.status);
    let seen: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("driver.mjs printed no JSON ({e}):\n{stdout}\n{stderr}"));
    let page = &seen["result"];
    assert_eq!(page["error"], Value::Null, "the page reports an error: {seen:#}");

    // Phase 1: the delete, accepted with its callback.
    assert_eq!(page["delete"]["status"], 202, "{seen:#}");
    let answer = &page["delete"]["body"];
    assert_eq!(answer["deployment_id"], id, "{answer}");
    assert_eq!(answer["state"], "destroying", "{answer}");
    let build = answer["build_id"].as_str().unwrap_or_else(|| panic!("no build_id in {answer}")).to_owned();
    assert_eq!(answer["callback"], json!({"accepted": true, "reason": null}), "{answer}");

    // The wait: the channel's states in event-id order, from the current
    // state (destroying, or idle when the destroy was already done) to idle.
    let events = page["events"].as_array().unwrap_or_else(|| panic!("no events: {seen:#}"));
    let ids: Vec<u64> = events
        .iter()
        .map(|e| e["id"].as_str().and_then(|i| i.parse().ok()).unwrap_or_else(|| panic!("event id not a number: {e}")))
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "event ids out of order: {ids:?} in {seen:#}");
    let mut states: Vec<&str> =
        events.iter().map(|e| e["state"].as_str().unwrap_or_else(|| panic!("no state in {e}"))).collect();
    states.dedup();
    assert!(
        states == ["destroying", "idle"] || states == ["idle"],
        "the page saw {states:?}, not destroying then idle: {seen:#}"
    );
    let last = &events[events.len() - 1]["data"];
    assert_eq!(last["deployment_id"], id, "{last}");
    assert_eq!(last["build_id"], build.as_str(), "{last}");

    // The reconcile push: once, with the callback token, naming the deployment.
    let pushes = wait_for("the reconcile push", Duration::from_secs(30), || async {
        let pushes = origin.pushes();
        (!pushes.is_empty()).then_some(pushes)
    })
    .await;
    let push = &pushes[0];
    assert_eq!(push.header("authorization"), Some(format!("Bearer {cb_token}").as_str()), "{push:?}");
    assert!(push.header("content-type").is_some_and(|c| c.starts_with("application/json")), "{push:?}");
    let body = push.json();
    assert_eq!(body["deployment_id"], id, "{push:?}");
    assert_eq!(body["state"], "idle", "{push:?}");
    assert_eq!(body["build_id"], build.as_str(), "{push:?}");

    // The build shows the outcome, never the token; no second push came.
    let build_path = format!("/builds/{build}");
    // The origin may have the push before the worker records its outcome
    // (`sending` until then): wait for a state past it.
    let shown = wait_for("the build to show the push's outcome", Duration::from_secs(30), || async {
        let (_, _, b) = api.get(&build_path).await;
        (b["callback"].is_object() && b["callback"]["state"] != "sending").then_some(b)
    })
    .await;
    assert_eq!(
        shown["callback"]["state"], "delivered",
        "the build does not show a delivered push: {}",
        shown["callback"]
    );
    assert_eq!(shown["callback"]["status"], 204, "{}", shown["callback"]);
    assert!(!shown.to_string().contains(&cb_token), "GET {build_path} shows the callback token: {shown}");
    assert_eq!(origin.pushes().len(), 1, "more than one push: {:?}", origin.pushes());

    // The token never went into a URL: the channel was opened with a ticket.
    let urls: Vec<&str> = seen["request_urls"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let carrying: Vec<&&str> = urls.iter().filter(|u| u.contains(&token) || u.contains("access_token")).collect();
    assert!(carrying.is_empty(), "request URLs carried the token: {carrying:?}");
    assert!(urls.iter().any(|u| u.contains("/events?ticket=")), "the channel was not opened with a ticket: {urls:?}");

    // The cross-origin DELETE went through a real CORS preflight (the access log names each request).
    let api_log = std::fs::read_to_string(db.path("api.log")).unwrap();
    assert!(
        api_log.lines().any(|l| l.contains("method=OPTIONS") && l.contains("/deployments/{id}")),
        "the api's log shows no preflight (OPTIONS /deployments/{{id}}):\n{api_log}"
    );
    db.keep(false);
    eprintln!("the page saw {states:?} (event ids {ids:?}); the push: {body}; the build shows {}", shown["callback"]);
}
