//! Webhooks (WH-1) end to end: the real api and workers, on both engines,
//! delivering to a receiver on loopback (`worker/tests/webhook_receiver.py`)
//! that checks every request with the real Standard Webhooks verifier from
//! PyPI (`standardwebhooks`) before it records it. Polls with deadlines;
//! never sleeps to synchronise.

use crate::common;

use common::{binary, command, demo, free_port, slow_source, slow_worker, start, wait_exit, wait_for, Api, Running};
use reqwest::Method;
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::TestDatabase;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(120);

/// A receiver process on `port`, verifying with `secret`, recording to `record`.
async fn receiver(db: &TestDatabase, port: u16, secret: &str, record: &str, mode: &str) -> Running {
    let script = common::repo().join("worker/tests/webhook_receiver.py");
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(script).arg(port.to_string()).arg(db.path(record)).arg(mode).env("WEBHOOK_SECRET", secret);
    let running = start(cmd, db, &format!("{record}.log"));
    let address = format!("127.0.0.1:{port}");
    wait_for(&format!("the receiver on {address} to listen"), Duration::from_secs(30), || async {
        tokio::net::TcpStream::connect(&address).await.ok().map(|_| ())
    })
    .await;
    running
}

/// Every request a receiver recorded, in arrival order.
fn received(db: &TestDatabase, record: &str) -> Vec<Value> {
    std::fs::read_to_string(db.path(record))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Deployment → the states of its verified deliveries, each `webhook-id`
/// counted at its first arrival, and how many requests came in all.
fn states_by_deployment(records: &[Value]) -> (BTreeMap<String, Vec<(i64, String)>>, usize) {
    let mut seen = Vec::new();
    let mut by: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    for r in records {
        assert_eq!(r["verified"], true, "the Standard Webhooks verifier refused a delivery: {r}");
        let id = r["id"].as_str().unwrap().to_owned();
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        let data = &r["payload"]["data"];
        assert_eq!(r["payload"]["type"], format!("deployment.{}", data["state"].as_str().unwrap()), "{r}");
        by.entry(data["deployment_id"].as_str().unwrap().to_owned())
            .or_default()
            .push((data["n"].as_i64().unwrap(), data["state"].as_str().unwrap().to_owned()));
    }
    (by, records.len())
}

/// The api and workers of a test, with `origins` allowed.
struct Fleet {
    db: TestDatabase,
    api: Api,
    port: u16,
    source: PathBuf,
    env: Vec<(String, String)>,
    _api: Running,
}

impl Fleet {
    async fn new(engine: Engine, origins: &str, allow_private: bool, extra: &[(&str, &str)]) -> Fleet {
        let db = TestDatabase::new(engine).await;
        let source = db.path("slow-source");
        slow_source(&source, 0);
        let port = free_port();
        let mut env: Vec<(String, String)> = vec![
            ("SLIPWAY_ALLOWED_ORIGINS".into(), origins.into()),
            ("SLIPWAY_CALLBACK_ALLOW_PRIVATE".into(), allow_private.to_string()),
            ("WEBHOOK_POLL".into(), "1".into()),
        ];
        env.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        let mut api = command(&binary("slipway-api"), &db, port);
        api.envs(env.iter().cloned());
        let api_process = start(api, &db, "api.log");
        let mut api = Api::connect(&db, port).await;
        api.token = Api::operator_token(&db, port);
        Fleet { db, api, port, source, env, _api: api_process }
    }

    /// A worker serving `queues` (all when `None`), with `extra` settings.
    fn worker(&self, queues: Option<&str>, extra: &[(&str, &str)], log: &str) -> Running {
        let mut cmd = slow_worker(&self.db, self.port, &self.source);
        cmd.envs(self.env.iter().cloned()).env("SLIPWAY_HEARTBEAT", "1");
        if let Some(queues) = queues {
            cmd.env("SLIPWAY_QUEUES", queues);
        }
        cmd.envs(extra.iter().copied());
        start(cmd, &self.db, log)
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        self.api.call(method, path, body.as_ref()).await.unwrap()
    }

    /// Registers an endpoint; its id and secret.
    async fn register(&self, url: &str, events: Value) -> (String, String) {
        let (status, body) = self.call(Method::POST, "/webhooks", Some(json!({ "url": url, "events": events }))).await;
        assert_eq!(status, 201, "{body}");
        (body["id"].as_str().unwrap().to_owned(), body["secret"].as_str().unwrap().to_owned())
    }

    async fn deliveries(&self, id: &str) -> Vec<Value> {
        let (status, page) = self.call(Method::GET, &format!("/webhooks/{id}/deliveries?limit=100"), None).await;
        assert_eq!(status, 200, "{page}");
        page["deliveries"].as_array().unwrap().clone()
    }

    async fn deploy(&self, id: &str) {
        let (status, body) = self.api.submit(id, &demo()).await.unwrap();
        assert_eq!(status, 202, "{body}");
        self.api.wait_state(id, "active", LONG).await;
    }
}

/// Waits until the receiver recorded `want` (deployment → states, in order).
async fn wait_received(db: &TestDatabase, record: &str, want: &[(&str, &[&str])]) -> Vec<Value> {
    wait_for(&format!("the receiver to get {want:?}"), LONG, || async {
        let records = received(db, record);
        let (by, _) = states_by_deployment(&records);
        let all = want.iter().all(|(d, states)| {
            by.get(*d).is_some_and(|got| got.iter().map(|(_, s)| s.as_str()).collect::<Vec<_>>() == *states)
        });
        all.then_some(records)
    })
    .await
}

async fn every_event_reaches_an_endpoint_in_order_verified_by_the_standard_webhooks_library_through_an_outage(
    engine: Engine,
) {
    let port = free_port();
    let origin = format!("http://127.0.0.1:{port}");
    let fleet = Fleet::new(engine, &origin, true, &[]).await;
    let _worker = fleet.worker(None, &[], "worker.log");
    let (id, secret) = fleet.register(&format!("{origin}/hook"), json!(["*"])).await;
    assert!(secret.starts_with("whsec_"), "a generated secret is a whsec_ key");
    // The secret is shown once: never by a read.
    for path in [format!("/webhooks/{id}"), "/webhooks".to_owned()] {
        let (status, body) = fleet.call(Method::GET, &path, None).await;
        assert_eq!(status, 200, "{body}");
        assert!(!body.to_string().contains(&secret["whsec_".len()..]), "{path} shows the secret: {body}");
    }

    let mut up = receiver(&fleet.db, port, &secret, "received", "accept").await;
    fleet.deploy("wh-a").await;
    wait_received(&fleet.db, "received", &[("wh-a", &["building", "active"])]).await;

    // The endpoint goes away; events go on.
    up.kill();
    fleet.deploy("wh-b").await;
    let (status, body) = fleet.api.delete("wh-a").await;
    assert_eq!(status, 202, "{body}");
    fleet.api.wait_state("wh-a", "idle", LONG).await;
    wait_for("attempts that failed during the outage", LONG, || async {
        let log = fleet.deliveries(&id).await;
        log.iter()
            .any(|d| {
                d["status"] == "pending" && d["attempts"].as_i64() >= Some(1) && d["last_error"] == "connect_failed"
            })
            .then_some(())
    })
    .await;

    // Back: everything after the outage arrives, in order per deployment.
    let _up = receiver(&fleet.db, port, &secret, "received", "accept").await;
    let records = wait_received(
        &fleet.db,
        "received",
        &[("wh-a", &["building", "active", "destroying", "idle"]), ("wh-b", &["building", "active"])],
    )
    .await;
    let (by, _) = states_by_deployment(&records);
    for (deployment, events) in &by {
        let numbers: Vec<i64> = events.iter().map(|(n, _)| *n).collect();
        assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{deployment}: out of order: {events:?}");
    }
    let log = fleet.deliveries(&id).await;
    assert_eq!(log.len(), 6, "{log:?}");
    assert!(log.iter().all(|d| d["status"] == "delivered"), "{log:?}");
    let (_, endpoint) = fleet.call(Method::GET, &format!("/webhooks/{id}"), None).await;
    assert_eq!((&endpoint["enabled"], &endpoint["failing_since"]), (&json!(true), &Value::Null), "{endpoint}");
    // Neither the delivery log nor a log line carries the secret.
    let key = &secret["whsec_".len()..];
    assert!(!serde_json::to_string(&log).unwrap().contains(key));
    for file in ["api.log", "worker.log"] {
        assert!(!std::fs::read_to_string(fleet.db.path(file)).unwrap().contains(key), "{file} has the secret");
    }
}

slipway_jobs::on_both_engines!(
    every_event_reaches_an_endpoint_in_order_verified_by_the_standard_webhooks_library_through_an_outage
);

async fn a_worker_killed_between_sending_and_recording_a_delivery_loses_none(engine: Engine) {
    let port = free_port();
    let origin = format!("http://127.0.0.1:{port}");
    let fleet = Fleet::new(engine, &origin, true, &[]).await;
    let _builds = fleet.worker(Some("builds,nix,readiness,maintenance"), &[], "builds.log");
    let crashing = fleet.worker(Some("callbacks"), &[("SLIPWAY_FAILPOINTS", "webhook_after_send")], "crashing.log");
    let secret = "whsec_".to_owned() + &base64_of(&[42u8; 32]);
    let (status, body) = fleet
        .call(
            Method::POST,
            "/webhooks",
            Some(json!({ "url": format!("{origin}/hook"), "events": ["*"], "secret": secret })),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["secret"], secret.as_str(), "the secret given is the one answered");
    let _up = receiver(&fleet.db, port, &secret, "received", "accept").await;

    fleet.deploy("wh-k").await;
    let status =
        wait_exit(crashing, "the worker to abort after its first send", LONG, &fleet.db.path("crashing.log")).await;
    assert!(!status.success(), "the worker did not crash: {status}");
    let before = received(&fleet.db, "received");
    assert_eq!(before.len(), 1, "one delivery was sent before the crash: {before:?}");

    let _replacement = fleet.worker(Some("callbacks"), &[], "replacement.log");
    let records = wait_received(&fleet.db, "received", &[("wh-k", &["building", "active"])]).await;
    let first = before[0]["id"].as_str().unwrap();
    let again = records.iter().filter(|r| r["id"] == first).count();
    assert!(again >= 2, "the delivery cut by the crash was not sent again with its webhook-id: {records:?}");
}

slipway_jobs::on_both_engines!(a_worker_killed_between_sending_and_recording_a_delivery_loses_none);

/// PostgreSQL only (the outage switch is PostgreSQL's): the worker is
/// stopped (SIGSTOP, a failpoint) right after sending a delivery, the
/// database then drops every connection and refuses new ones for a while,
/// and the worker resumes into the outage: it cannot record the attempt,
/// waits the outage out, and every event still reaches the receiver, in
/// order, the interrupted one at least once.
#[tokio::test]
async fn a_database_outage_between_sending_and_recording_a_delivery_loses_none() {
    let port = free_port();
    let origin = format!("http://127.0.0.1:{port}");
    let fleet = Fleet::new(Engine::Postgres, &origin, true, &[]).await;
    let _builds = fleet.worker(Some("builds,nix,readiness,maintenance"), &[], "builds.log");
    let (_, secret) = fleet.register(&format!("{origin}/hook"), json!(["*"])).await;
    let _up = receiver(&fleet.db, port, &secret, "received", "accept").await;
    // The deploy ends before any delivery is sent: the outage is the
    // deliveries' alone.
    fleet.deploy("wh-p").await;
    let hooks = fleet.worker(Some("callbacks"), &[("SLIPWAY_FAILPOINTS", "webhook_after_send=stop")], "hooks.log");
    let pid = hooks.0.id();

    wait_for("the worker to stop after its first send", LONG, || async { common::stopped(pid).then_some(()) }).await;
    assert!(fleet.db.accept_connections(false).await > 0, "no connection of the fleet was dropped");
    common::signal(pid, libc::SIGCONT);
    let log = fleet.db.path("hooks.log");
    let waited = common::poll(LONG, || async {
        std::fs::read_to_string(&log).ok()?.contains("a webhook delivery job cannot reach the database").then_some(())
    })
    .await;
    assert!(waited.is_some(), "the delivery job did not wait out the outage:\n{}", tail(&fleet.db, "hooks.log"));
    // The outage's length (the scenario, not a wait for anything): longer
    // than the job's attempts and their backoff (1 + 2 + 4 s).
    tokio::time::sleep(Duration::from_secs(10)).await;
    fleet.db.accept_connections(true).await;

    // Each later send stops the worker again: resumed each time.
    let records = common::poll(LONG, || async {
        if common::stopped(pid) {
            common::signal(pid, libc::SIGCONT);
        }
        let records = received(&fleet.db, "received");
        let (by, _) = states_by_deployment(&records);
        let states: Vec<&str> = by.get("wh-p")?.iter().map(|(_, s)| s.as_str()).collect();
        (states == ["building", "active"]).then_some(records)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "not every event arrived: {:?}\n{}\n{}",
            received(&fleet.db, "received"),
            tail(&fleet.db, "hooks.log"),
            tail(&fleet.db, "builds.log")
        )
    });
    let first = records[0]["id"].clone();
    assert!(records.iter().filter(|r| r["id"] == first).count() >= 2, "the unrecorded delivery was not sent again");
    assert!(records.iter().all(|r| r["verified"] == true));
}

async fn an_endpoint_failing_for_its_retry_window_is_disabled_a_retry_after_is_honoured_and_a_redirect_never_followed(
    engine: Engine,
) {
    let (failing, redirecting, target, busy) = (free_port(), free_port(), free_port(), free_port());
    let origin = |port: u16| format!("http://127.0.0.1:{port}");
    let origins = format!("{},{},{},{}", origin(failing), origin(redirecting), origin(target), origin(busy));
    let fleet = Fleet::new(engine, &origins, true, &[("WEBHOOK_RETRY_WINDOW", "3s")]).await;
    let _worker = fleet.worker(None, &[], "worker.log");
    let (down, down_secret) = fleet.register(&format!("{}/hook", origin(failing)), json!(["*"])).await;
    let (moved, moved_secret) =
        fleet.register(&format!("{}/hook", origin(redirecting)), json!(["deployment.active"])).await;
    let _failing = receiver(&fleet.db, failing, &down_secret, "failing", "status:503").await;
    let stolen = format!("{}/stolen", origin(target));
    let _redirecting =
        receiver(&fleet.db, redirecting, &moved_secret, "redirecting", &format!("redirect:{stolen}")).await;
    let _target = receiver(&fleet.db, target, &moved_secret, "target", "accept").await;
    // A 429 asking for 30 s: honoured, though the backoff would try again within 2 s.
    let (slow, slow_secret) = fleet.register(&format!("{}/hook", origin(busy)), json!(["deployment.building"])).await;
    let _busy = receiver(&fleet.db, busy, &slow_secret, "busy", "retry-after:30").await;

    fleet.deploy("wh-d").await;
    let endpoint = wait_for("the failing endpoint to be disabled", LONG, || async {
        let (_, e) = fleet.call(Method::GET, &format!("/webhooks/{down}"), None).await;
        (e["enabled"] == false).then_some(e)
    })
    .await;
    let reason = endpoint["disabled_reason"].as_str().unwrap();
    assert!(reason.contains("HTTP 503") && reason.contains("WEBHOOK_RETRY_WINDOW"), "{endpoint}");
    assert!(endpoint["disabled_at"].is_string(), "{endpoint}");
    let log = fleet.deliveries(&down).await;
    let tried = log.iter().find(|d| d["attempts"].as_i64() >= Some(2)).unwrap_or_else(|| panic!("{log:?}"));
    // The oldest delivery was tried for the whole window, then given up;
    // the endpoint, failing as long, was disabled by that same attempt.
    let given_up = (&tried["status"], &tried["last_status_code"], &tried["last_error"]);
    assert_eq!(given_up, (&json!("failed"), &json!(503), &json!("retry_window_passed")), "{tried}");
    assert_eq!(tried["last_response_excerpt"], "failing on purpose", "{tried}");
    // Every attempt reached the receiver signed and verified.
    assert!(received(&fleet.db, "failing").iter().all(|r| r["verified"] == true));

    let asked = wait_for("the 429 to be recorded", LONG, || async {
        let log = fleet.deliveries(&slow).await;
        log.into_iter().find(|d| d["attempts"] == 1)
    })
    .await;
    assert_eq!((&asked["status"], &asked["last_status_code"]), (&json!("pending"), &json!(429)), "{asked}");
    let wait = common::ms_of(&asked["next_try_at"]) - common::ms_of(&asked["updated_at"]);
    assert!(wait >= 30_000, "Retry-After: 30 was not honoured: the next try is {wait} ms later");

    // Only the subscribed type went to the other endpoint; its redirect was not followed.
    let only = wait_for("the redirected delivery to fail", LONG, || async {
        let log = fleet.deliveries(&moved).await;
        (log.len() == 1 && log[0]["status"] == "failed").then(|| log[0].clone())
    })
    .await;
    assert_eq!(only["event_type"], "deployment.active", "{only}");
    assert_eq!((&only["last_status_code"], &only["last_error"]), (&json!(302), &json!("redirect")), "{only}");
    assert!(received(&fleet.db, "target").is_empty(), "a redirect was followed");

    // Redelivered by hand: the same webhook-id is sent again.
    let delivery = only["id"].as_str().unwrap();
    let (status, body) =
        fleet.call(Method::POST, &format!("/webhooks/{moved}/deliveries/{delivery}/redeliver"), None).await;
    assert_eq!(status, 202, "{body}");
    wait_for("the redelivery", LONG, || async {
        let ids: Vec<Value> = received(&fleet.db, "redirecting").iter().map(|r| r["id"].clone()).collect();
        (ids.iter().filter(|i| **i == json!(delivery)).count() == 2).then_some(())
    })
    .await;

    // Enabled again by the operator: the reason is cleared.
    let (status, body) =
        fleet.call(Method::PATCH, &format!("/webhooks/{down}"), Some(json!({ "enabled": true }))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((&body["enabled"], &body["disabled_reason"]), (&json!(true), &Value::Null), "{body}");
}

slipway_jobs::on_both_engines!(
    an_endpoint_failing_for_its_retry_window_is_disabled_a_retry_after_is_honoured_and_a_redirect_never_followed
);

async fn hostile_webhook_urls_are_refused_when_registered_and_when_delivered(engine: Engine) {
    let port = free_port();
    let named = format!("http://localhost:{port}");
    let origins =
        format!("{named},http://127.0.0.1:{port},http://10.0.0.1,http://169.254.169.254,https://panel.example");
    let fleet = Fleet::new(engine, &origins, false, &[]).await;
    for url in [
        format!("http://127.0.0.1:{port}/hook"),
        "http://10.0.0.1/hook".to_owned(),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "https://evil.example/hook".to_owned(),
        "https://user:pass@panel.example/hook".to_owned(),
        "https://panel.example/hook#fragment".to_owned(),
        "file:///etc/passwd".to_owned(),
        "http://[::ffff:a9fe:a9fe]/".to_owned(),
    ] {
        let (status, body) = fleet.call(Method::POST, "/webhooks", Some(json!({ "url": url, "events": ["*"] }))).await;
        assert_eq!((status, &body["error"]), (400, &json!("invalid_webhook_url")), "{url}: {body}");
    }
    for (body, what) in [
        (json!({ "url": "https://panel.example/hook", "events": ["deployment.exploded"] }), "an unknown event type"),
        (json!({ "url": "https://panel.example/hook", "events": [] }), "no event type"),
        (json!({ "url": "https://panel.example/hook", "events": ["*"], "secret": "whsec_c2hvcnQ=" }), "a short secret"),
        (
            json!({ "url": "https://panel.example/hook", "events": ["*"], "secret": "hunter2hunter2hunter2hunter2" }),
            "no whsec_",
        ),
    ] {
        let (status, answer) = fleet.call(Method::POST, "/webhooks", Some(body)).await;
        assert_eq!((status, &answer["error"]), (400, &json!("invalid_webhook")), "{what}: {answer}");
        assert!(!answer.to_string().contains("hunter2"), "{answer}");
    }
    let front = Api::new(&fleet.db, fleet.port);
    let (status, body) = front
        .call(Method::POST, "/webhooks", Some(&json!({ "url": "https://panel.example/hook", "events": ["*"] })))
        .await
        .unwrap();
    assert_eq!((status, &body["error"]), (403, &json!("forbidden")), "{body}");
    let (_, list) = fleet.call(Method::GET, "/webhooks", None).await;
    assert_eq!(list["webhooks"], json!([]), "a refused registration was stored: {list}");

    // A name is checked when delivering: localhost resolves to loopback, refused.
    let (id, secret) = fleet.register(&format!("{named}/hook"), json!(["*"])).await;
    let _up = receiver(&fleet.db, port, &secret, "received", "accept").await;
    let _worker = fleet.worker(None, &[], "worker.log");
    fleet.deploy("wh-h").await;
    let refused = wait_for("the deliveries to be refused", LONG, || async {
        let log = fleet.deliveries(&id).await;
        (log.len() == 2 && log.iter().all(|d| d["status"] == "failed")).then_some(log)
    })
    .await;
    assert!(refused.iter().all(|d| d["last_error"] == "refused_address"), "{refused:?}");
    assert!(received(&fleet.db, "received").is_empty(), "a refused address got a delivery");
}

slipway_jobs::on_both_engines!(hostile_webhook_urls_are_refused_when_registered_and_when_delivered);

/// The last 40 lines of a test's log, for a failure's message.
fn tail(db: &TestDatabase, log: &str) -> String {
    let text = std::fs::read_to_string(db.path(log)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    format!("--- {log} ---\n{}", lines[lines.len().saturating_sub(40)..].join("\n"))
}

/// Standard base64 with padding.
fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The dashboard's webhooks page in headless Chromium
/// (`tests/browser/webhooks.mjs`): an operator opens it from the
/// navigation and sees an endpoint disabled after its retry window, with
/// the reason, and its deliveries; the page carries no secret and no URL it
/// requests carries the token. SQLite only, as the other browser tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_an_operator_a_disabled_endpoint_with_its_reason_and_deliveries() {
    crate::tools::require_the_browser_tools();
    let port = free_port();
    let origin = format!("http://127.0.0.1:{port}");
    let fleet = Fleet::new(Engine::Sqlite, &origin, true, &[("WEBHOOK_RETRY_WINDOW", "2s")]).await;
    let _worker = fleet.worker(None, &[], "worker.log");
    let (id, secret) = fleet.register(&format!("{origin}/hook"), json!(["*"])).await;
    let _failing = receiver(&fleet.db, port, &secret, "failing", "status:503").await;
    fleet.deploy("wh-ui").await;
    wait_for("the endpoint to be disabled", LONG, || async {
        let (_, e) = fleet.call(Method::GET, &format!("/webhooks/{id}"), None).await;
        (e["enabled"] == false).then_some(())
    })
    .await;

    let browser = crate::tools::browser_dir();
    let driver = tokio::process::Command::new("node")
        .arg(browser.join("webhooks.mjs"))
        .current_dir(&browser)
        .env("UI_URL", format!("{}/ui", fleet.api.base))
        .env("SLIPWAY_TOKEN", &fleet.api.token)
        .env("WEBHOOK_ID", &id)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(180), driver)
        .await
        .expect("webhooks.mjs did not end within 180 s")
        .expect("node runs webhooks.mjs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "webhooks.mjs failed ({}):\n{stderr}\n{stdout}", out.status);
    let page: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("webhooks.mjs printed no JSON ({e}):\n{stdout}\n{stderr}"));
    assert_eq!(page["nav"], true, "an operator is offered the webhooks page: {page:#}");
    assert!(page["enabled"].as_str().is_some_and(|t| t.contains("disabled")), "{page:#}");
    let reason = page["disabled"].as_str().unwrap_or_default();
    assert!(reason.contains("HTTP 503") && reason.contains("WEBHOOK_RETRY_WINDOW"), "{page:#}");
    let deliveries = page["deliveries"].as_array().unwrap();
    let log = fleet.deliveries(&id).await;
    let shown: Vec<&str> = deliveries.iter().map(|d| d["id"].as_str().unwrap()).collect();
    let stored: Vec<&str> = log.iter().map(|d| d["id"].as_str().unwrap()).collect();
    assert_eq!(shown, stored, "the page shows the delivery log, newest first");
    assert!(deliveries.iter().any(|d| d["text"].as_str().unwrap().contains("retry_window_passed (503)")), "{page:#}");
    assert_eq!(page["page_errors"], json!([]), "{page:#}");
    let html = page["html"].as_str().unwrap();
    assert!(!html.contains(&secret["whsec_".len()..]), "the page shows the secret");
    let urls = page["request_urls"].as_array().unwrap();
    assert!(urls.iter().all(|u| !u.as_str().unwrap().contains(&fleet.api.token)), "a URL carries the token");
}

/// The rollout event types (RO-1), as an endpoint lists them.
fn rollout_types() -> Vec<&'static str> {
    slipway_jobs::webhooks::EVENT_TYPES.iter().copied().filter(|t| t.starts_with("rollout.")).collect()
}

/// Every verified request a receiver recorded, each `webhook-id` once:
/// (type, payload `data`).
fn events_received(db: &TestDatabase, record: &str) -> Vec<(String, Value)> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for r in received(db, record) {
        assert_eq!(r["verified"], true, "the Standard Webhooks verifier refused a delivery: {r}");
        let id = r["id"].as_str().unwrap().to_owned();
        if !seen.contains(&id) {
            seen.push(id);
            out.push((r["payload"]["type"].as_str().unwrap().to_owned(), r["payload"]["data"].clone()));
        }
    }
    out
}

/// A rollout's steps are webhook events (WH-1): an endpoint subscribed to
/// the rollout types receives a one-deployment rollout's steps in order,
/// each verified by the Standard Webhooks library, and nothing else; an
/// endpoint subscribed to the deployment types receives the rollout's
/// build but none of its steps; and neither receives the steps of a
/// rollout that ended before it was registered.
async fn a_rollouts_steps_reach_the_endpoints_subscribed_to_them_in_order_and_no_other(engine: Engine) {
    let (rollout_port, deployment_port) = (free_port(), free_port());
    let (rollout_origin, deployment_origin) =
        (format!("http://127.0.0.1:{rollout_port}"), format!("http://127.0.0.1:{deployment_port}"));
    let origins = format!("{rollout_origin},{deployment_origin}");
    let env = [
        ("SLIPWAY_ALLOWED_ORIGINS", origins.as_str()),
        ("SLIPWAY_CALLBACK_ALLOW_PRIVATE", "true"),
        ("WEBHOOK_POLL", "1"),
    ];
    let fleet = crate::rollouts::Fleet::new(engine, &env).await;
    fleet.deployed(&["wr-1"], &crate::rollouts::mastodon("approval")).await;
    fleet.target();
    let body = json!({ "module_source": fleet.source("ref=main"), "deployments": ["wr-1"], "waves": [1] });
    // A rollout that ends before the endpoints exist: old history.
    let old = fleet.start_rollout(&body).await;
    let old = old["id"].as_str().unwrap().to_owned();
    fleet.rollout_in(&old, "completed").await;

    let operator = &fleet.operator;
    let register = |url: String, events: Value| async move {
        let body = json!({ "url": url, "events": events });
        let (status, body) = operator.call(Method::POST, "/webhooks", Some(&body)).await.unwrap();
        assert_eq!(status, 201, "{body}");
        (body["id"].as_str().unwrap().to_owned(), body["secret"].as_str().unwrap().to_owned())
    };
    let deployment_types: Vec<&str> =
        slipway_jobs::webhooks::EVENT_TYPES.iter().copied().filter(|t| t.starts_with("deployment.")).collect();
    let (_, rollout_secret) = register(format!("{rollout_origin}/hook"), json!(rollout_types())).await;
    let (deployment_hook, deployment_secret) =
        register(format!("{deployment_origin}/hook"), json!(deployment_types)).await;
    let _r = receiver(&fleet.db, rollout_port, &rollout_secret, "rollout-hook", "accept").await;
    let _d = receiver(&fleet.db, deployment_port, &deployment_secret, "deployment-hook", "accept").await;

    let started = fleet.start_rollout(&body).await;
    let id = started["id"].as_str().unwrap().to_owned();
    fleet.rollout_in(&id, "completed").await;
    let steps = wait_for("the rollout endpoint to receive rollout.completed", LONG, || async {
        let steps = events_received(&fleet.db, "rollout-hook");
        steps.iter().any(|(t, _)| t == "rollout.completed").then_some(steps)
    })
    .await;
    let types: Vec<&str> = steps.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        types,
        ["rollout.started", "rollout.wave_started", "rollout.wave_completed", "rollout.completed"],
        "{steps:?}"
    );
    assert!(steps.iter().all(|(_, data)| data["rollout_id"] == id.as_str()), "a step of another rollout: {steps:?}");
    let numbers: Vec<i64> = steps.iter().map(|(_, data)| data["n"].as_i64().unwrap()).collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "out of order: {steps:?}");
    assert_eq!(steps[0].1["deployments"], 1, "{steps:?}");
    assert_eq!(steps[2].1["wave"], 1, "{steps:?}");

    // A later deployment event (the delete's `destroying`, recorded after
    // the rollout completed) reaches the deployment endpoint: every fan-out
    // before it has run, and none made a delivery of a rollout step.
    let (status, answer) = fleet.api.delete("wr-1").await;
    assert_eq!(status, 202, "{answer}");
    let got = wait_for("the deployment endpoint to receive wr-1's destroying", LONG, || async {
        let got = events_received(&fleet.db, "deployment-hook");
        got.iter().any(|(t, _)| t == "deployment.destroying").then_some(got)
    })
    .await;
    let types: Vec<&str> = got.iter().map(|(t, _)| t.as_str()).collect();
    // The destroy may be over already (`deployment.idle`).
    assert_eq!(types[..3], ["deployment.building", "deployment.active", "deployment.destroying"], "{got:?}");
    assert!(types.iter().all(|t| t.starts_with("deployment.")), "{got:?}");
    let (status, log) = fleet
        .operator
        .call(Method::GET, &format!("/webhooks/{deployment_hook}/deliveries?limit=100"), None)
        .await
        .unwrap();
    assert_eq!(status, 200, "{log}");
    assert!(log["deliveries"].as_array().unwrap().iter().all(|d| d["source"] == "deployment"), "{log}");
    let again = events_received(&fleet.db, "rollout-hook");
    assert_eq!(again.len(), 4, "the rollout endpoint got more than the rollout's steps: {again:?}");
}

slipway_jobs::on_both_engines!(a_rollouts_steps_reach_the_endpoints_subscribed_to_them_in_order_and_no_other);
