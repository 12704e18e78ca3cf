//! Safe change (plans, apply, rollback and the run history) end to end:
//! the real api and worker, a real `bao server -dev`, real Nix builds of
//! the reference source, on both engines. Polls with deadlines; never
//! sleeps to synchronise.

use crate::common;

use common::{binary, command, demo, free_port, start, wait_for, Api, Running, ENDED};
use reqwest::Method;
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::{Reply, StubServer, TestDatabase, TestOpenBao};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

const ENDS: Duration = Duration::from_secs(240);
const MASTODON: &str = "mastodon-operator-secrets";

/// A database, OpenBao, and the api and a worker on them.
struct Fleet {
    db: TestDatabase,
    bao: TestOpenBao,
    api: Api,
    _processes: (Running, Running),
}

async fn fleet(engine: Engine) -> Fleet {
    let db = TestDatabase::new(engine).await;
    let bao = TestOpenBao::new().await;
    let port = free_port();
    let mut api = command(&binary("slipway-api"), &db, port);
    api.envs(bao.keys(false));
    let mut worker = command(&binary("slipway-worker"), &db, port);
    worker.arg("work").env("READY_TIMEOUT", "1s").envs(bao.keys(true));
    let processes = (start(api, &db, "api.log"), start(worker, &db, "worker.log"));
    let api = Api::connect(&db, port).await;
    Fleet { db, bao, api, _processes: processes }
}

/// The demo with mastodon's translation key set to `key` and its subdomain `subdomain`.
fn config(key: &str, subdomain: &str) -> Value {
    let mut c = demo();
    c["applications"]["mastodon"]["translationApiKey"] = json!(key);
    c["applications"]["mastodon"]["subdomain"] = json!(subdomain);
    c
}

/// Waits until build `id` ended; the build.
async fn ended(api: &Api, id: &str) -> Value {
    let path = format!("/builds/{id}");
    wait_for("the build to end", ENDS, || async {
        let (_, _, b) = api.get(&path).await;
        b["status"].as_str().is_some_and(|s| ENDED.contains(&s)).then_some(b)
    })
    .await
}

/// Submits `config` (a plan with `dry_run`) and waits until its build succeeded; the build.
async fn submitted(api: &Api, id: &str, config: &Value, dry_run: bool) -> Value {
    let path = format!("/deployments/{id}{}", if dry_run { "?dry_run=true" } else { "" });
    let (status, accepted) = api.call(Method::PUT, &path, Some(&json!({ "configuration": config }))).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    let build = ended(api, accepted["build_id"].as_str().unwrap()).await;
    assert_eq!(build["status"], "succeeded", "{build}");
    build
}

/// Node → the system its report names.
fn systems(build: &Value) -> BTreeMap<String, String> {
    build["report"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| Some((n["name"].as_str()?.to_owned(), n["system"].as_str()?.to_owned())))
        .collect()
}

/// Node → the system its profile link activates now.
fn active_systems(db: &TestDatabase, id: &str) -> BTreeMap<String, String> {
    let nodes = db.path("state").join("provider").join(id).join("nodes");
    std::fs::read_dir(&nodes)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let target = std::fs::read_link(e.path().join("system")).ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), target.display().to_string()))
        })
        .collect()
}

fn secret_file(db: &TestDatabase, id: &str) -> PathBuf {
    let node = db.path("state").join("provider").join(id).join("nodes/mastodon");
    node.join("secrets").join(MASTODON).join("translationApiKey")
}

async fn post(api: &Api, path: &str, body: Option<Value>) -> (u16, Value) {
    api.call(Method::POST, path, body.as_ref()).await.unwrap()
}

async fn a_rollback_returns_every_node_to_its_old_system_and_its_old_secret_version(engine: Engine) {
    let Fleet { db, api, .. } = &fleet(engine).await;

    let first = submitted(api, "back", &config("key-of-the-first-deploy", "social"), false).await;
    let first_systems = systems(&first);
    assert_eq!(active_systems(db, "back"), first_systems);
    let (_, _, first_snapshot) = api.get("/deployments/back").await;
    let second = submitted(api, "back", &config("key-of-the-second-deploy", "chat"), false).await;
    assert_ne!(active_systems(db, "back")["mastodon"], first_systems["mastodon"], "the change changed no system");
    assert_eq!(std::fs::read_to_string(secret_file(db, "back")).unwrap(), "key-of-the-second-deploy");

    // The history says who asked, why, and what changed, by secret version only.
    let (_, diff) =
        api.call(Method::GET, &format!("/builds/{}/diff", second["id"].as_str().unwrap()), None).await.unwrap();
    assert_eq!(diff["previous_build_id"], first["id"], "{diff}");
    let ops: Vec<(&str, &str)> = diff["patch"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["op"].as_str().unwrap(), o["path"].as_str().unwrap()))
        .collect();
    assert!(ops.contains(&("replace", "/configuration/applications/mastodon/subdomain")), "{diff}");
    assert!(ops.contains(&("replace", "/secret_versions/mastodon/translationApiKey")), "{diff}");
    assert_eq!(second["trigger"], "submit", "{second}");
    assert!(second["requested_by"]["sub"].is_string(), "{second}");
    assert_eq!(second["changes"], diff);

    // Roll back to the build before the active one (the default target).
    let (status, accepted) = post(api, "/deployments/back/rollback", None).await;
    assert_eq!(status, 202, "{accepted}");
    let rollback = ended(api, accepted["build_id"].as_str().unwrap()).await;
    assert_eq!(rollback["status"], "succeeded", "{rollback}");
    assert_eq!((&rollback["trigger"], &rollback["based_on"]), (&json!("rollback"), &first["id"]), "{rollback}");
    assert_eq!(active_systems(db, "back"), first_systems, "a node did not return to its old system");
    assert_eq!(std::fs::read_to_string(secret_file(db, "back")).unwrap(), "key-of-the-first-deploy");
    let (_, _, now) = api.get("/deployments/back").await;
    assert_eq!(now["configuration"], first_snapshot["configuration"], "the stored snapshot is not the target's");
    assert_eq!((&now["state"], &now["last_build"]["id"]), (&json!("active"), &accepted["build_id"]), "{now}");

    // The channel records the rollback: a front-end learns its snapshot changed.
    let (_, body) = api.call(Method::GET, "/deployments/back/events", None).await.unwrap();
    let events = body.as_str().unwrap_or_default();
    assert!(events.contains("\"trigger\":\"rollback\""), "{events}");

    // The history filters by trigger, and no secret value is anywhere in it.
    let (_, page) = api.call(Method::GET, "/deployments/back/builds?trigger=rollback", None).await.unwrap();
    let ids: Vec<&Value> = page["builds"].as_array().unwrap().iter().map(|b| &b["id"]).collect();
    assert_eq!(ids, vec![&accepted["build_id"]], "{page}");
    let (_, all) = api.call(Method::GET, "/deployments/back/builds", None).await.unwrap();
    for place in [all.to_string(), diff.to_string(), rollback.to_string()] {
        assert!(!place.contains("key-of-the-"), "a secret value leaked: {place}");
    }
    assert!(all["builds"][0]["changes"].as_str().unwrap().contains("/configuration/applications/mastodon/subdomain"));
}

async fn a_plan_applies_exactly_and_a_stale_or_expired_plan_changes_nothing(engine: Engine) {
    let Fleet { db, bao, api, .. } = &fleet(engine).await;

    submitted(api, "plans", &config("plan-key", "social"), false).await;
    let mut changed = demo();
    changed["applications"]["mastodon"]["subdomain"] = json!("chat");
    let plan = submitted(api, "plans", &changed, true).await;
    assert_eq!(plan["trigger"], "dry_run", "{plan}");
    assert!(plan["plan"]["expires_at"].is_string() && plan["plan"]["deployment_version"].is_i64(), "{plan}");
    let planned = systems(&plan);

    // A plan made before another submit is stale, and nothing is queued.
    let stale = submitted(api, "plans", &changed, true).await;
    submitted(api, "plans", &config("plan-key", "social"), false).await;
    let before = api.builds("plans").await.unwrap().len();
    let (status, refused) = post(api, "/deployments/plans/apply", Some(json!({ "plan": stale["id"] }))).await;
    assert_eq!((status, refused["error"].as_str()), (409, Some("plan_stale")), "{refused}");
    assert!(refused["details"]["moved"][0].as_str().unwrap().contains("version"), "{refused}");
    assert_eq!(api.builds("plans").await.unwrap().len(), before, "a refused apply queued a build");

    // A fresh plan applies: every node's system link resolves to the planned path.
    let plan = submitted(api, "plans", &changed, true).await;
    let planned_again = systems(&plan);
    assert_eq!(planned_again, planned, "the same configuration planned other systems");
    let (status, accepted) = post(api, "/deployments/plans/apply", Some(json!({ "plan": plan["id"] }))).await;
    assert_eq!(status, 202, "{accepted}");
    let applied = ended(api, accepted["build_id"].as_str().unwrap()).await;
    assert_eq!(applied["status"], "succeeded", "{applied}");
    assert_eq!((&applied["trigger"], &applied["based_on"]), (&json!("apply"), &plan["id"]), "{applied}");
    assert_eq!(active_systems(db, "plans"), planned, "the apply activated other systems than planned");
    assert_eq!(std::fs::read_to_string(secret_file(db, "plans")).unwrap(), "plan-key");
    // Applied once, the plan is stale.
    let (status, again) = post(api, "/deployments/plans/apply", Some(json!({ "plan": plan["id"] }))).await;
    assert_eq!((status, again["error"].as_str()), (409, Some("plan_stale")), "{again}");

    // A build that is no plan of the deployment is 404; a plan with a secret value cannot be applied.
    let (status, refused) = post(api, "/deployments/plans/apply", Some(json!({ "plan": applied["id"] }))).await;
    assert_eq!((status, refused["error"].as_str()), (404, Some("not_found")), "{refused}");
    let with_value = submitted(api, "plans", &config("a-value-no-plan-keeps", "chat"), true).await;
    let (status, refused) = post(api, "/deployments/plans/apply", Some(json!({ "plan": with_value["id"] }))).await;
    assert_eq!((status, refused["error"].as_str()), (409, Some("plan_not_appliable")), "{refused}");
    assert!(!refused.to_string().contains("a-value-no-plan-keeps"), "{refused}");

    // A plan past PLAN_TTL (an api whose plans live one second) is 410.
    let short_port = free_port();
    let mut short = command(&binary("slipway-api"), db, short_port);
    short.envs(bao.keys(false)).env("PLAN_TTL", "1s");
    let _short = start(short, db, "short-api.log");
    let short_api = Api::connect(db, short_port).await;
    let expiring = submitted(&short_api, "plans", &changed, true).await;
    let expires = common::ms_of(&expiring["plan"]["expires_at"]);
    wait_for("the plan to expire", Duration::from_secs(30), || async { (common::now_ms() > expires).then_some(()) })
        .await;
    let (status, refused) = post(api, "/deployments/plans/apply", Some(json!({ "plan": expiring["id"] }))).await;
    assert_eq!((status, refused["error"].as_str()), (410, Some("plan_expired")), "{refused}");
}

async fn a_rollback_that_cannot_be_exact_is_refused_naming_why(engine: Engine) {
    let Fleet { api, .. } = &fleet(engine).await;

    // Nothing to return to yet.
    let (status, refused) = post(api, "/deployments/gone/rollback", None).await;
    assert_eq!((status, refused["error"].as_str()), (404, Some("not_found")), "{refused}");
    let first = submitted(api, "gone", &config("key-that-is-cleared-later", "social"), false).await;
    let (status, refused) = post(api, "/deployments/gone/rollback", None).await;
    assert_eq!((status, refused["error"].as_str()), (409, Some("invalid_rollback_target")), "{refused}");

    // A plan is not a target; an unknown build is 404.
    let plan = submitted(api, "gone", &demo(), true).await;
    let (status, refused) = post(api, "/deployments/gone/rollback", Some(json!({ "to": plan["id"] }))).await;
    assert_eq!((status, refused["error"].as_str()), (409, Some("invalid_rollback_target")), "{refused}");
    let (status, refused) = post(api, "/deployments/gone/rollback", Some(json!({ "to": "gone.nothing" }))).await;
    assert_eq!((status, refused["error"].as_str()), (404, Some("not_found")), "{refused}");
    // Another deployment's successful deploy is answered as unknown, telling nothing of it.
    let other = submitted(api, "other", &demo(), false).await;
    let (status, refused) = post(api, "/deployments/gone/rollback", Some(json!({ "to": other["id"] }))).await;
    assert_eq!((status, refused["error"].as_str()), (404, Some("not_found")), "{refused}");
    assert!(!refused["message"].as_str().unwrap().contains("succeeded"), "{refused}");

    // A later clear deleted every version the first build read.
    let mut cleared = demo();
    cleared["applications"]["mastodon"]["secretsClear"] = json!(["translationApiKey"]);
    submitted(api, "gone", &cleared, false).await;
    let before = api.builds("gone").await.unwrap().len();
    let (status, refused) = post(api, "/deployments/gone/rollback", Some(json!({ "to": first["id"] }))).await;
    assert_eq!((status, refused["error"].as_str()), (409, Some("secret_gone")), "{refused}");
    assert_eq!(refused["details"]["field"], "mastodon.translationApiKey", "{refused}");
    assert!(!refused.to_string().contains("key-that-is-cleared-later"), "{refused}");
    assert_eq!(api.builds("gone").await.unwrap().len(), before, "a refused rollback queued a build");

    // A deployment being destroyed is not rolled back.
    let (status, _) = api.delete("gone").await;
    assert_eq!(status, 202);
    let (status, refused) = post(api, "/deployments/gone/rollback", None).await;
    assert_eq!((status, refused["error"].as_str()), (409, Some("deployment_destroyed")), "{refused}");
}

slipway_jobs::on_both_engines!(
    a_rollback_returns_every_node_to_its_old_system_and_its_old_secret_version,
    a_plan_applies_exactly_and_a_stale_or_expired_plan_changes_nothing,
    a_rollback_that_cannot_be_exact_is_refused_naming_why,
);

/// A fleet whose module source sends its readiness probes to a front door
/// that answers for every instance but those named `broken.…`, which it
/// answers as another host (`wrong_host`).
struct Gated {
    db: TestDatabase,
    bao: TestOpenBao,
    api: Api,
    port: u16,
    door: StubServer,
    /// The module source, as submitted.
    source: String,
    _api: Running,
}

async fn gated_fleet(engine: Engine) -> (Gated, Running) {
    let door = StubServer::start(Arc::new(|_, host: &str| {
        let host = host.split(':').next().unwrap_or_default().to_owned();
        if host.starts_with("broken.") {
            Reply::Answer(200, vec![("X-Instance-Host", "elsewhere.example.org".into())])
        } else {
            Reply::Answer(200, vec![("X-Instance-Host", host)])
        }
    }))
    .await;
    let db = TestDatabase::new(engine).await;
    let bao = TestOpenBao::new().await;
    let source = crate::readiness::source_probing(db.dir.path(), door.addr);
    let port = free_port();
    let mut api = command(&binary("slipway-api"), &db, port);
    api.envs(bao.keys(false)).env("SLIPWAY_ALLOW_PATH_SOURCES", "true");
    let api_process = start(api, &db, "api.log");
    let api = Api::connect(&db, port).await;
    let gated = Gated { db, bao, api, port, door, source, _api: api_process };
    let worker = gated.worker(None, "worker.log");
    (gated, worker)
}

impl Gated {
    /// A worker of this fleet, crashing at `failpoint` when given.
    fn worker(&self, failpoint: Option<&str>, log: &str) -> Running {
        let mut worker = command(&binary("slipway-worker"), &self.db, self.port);
        worker
            .arg("work")
            .envs(self.bao.keys(true))
            .env("SLIPWAY_ALLOW_PATH_SOURCES", "true")
            .env("SLIPWAY_READINESS_CONNECT", format!("http://{}", self.door.addr));
        if let Some(point) = failpoint {
            worker.env("SLIPWAY_FAILPOINTS", point);
        }
        start(worker, &self.db, log)
    }
}

/// Submits `config` from `source` with a health gate; the accepted answer.
async fn gated(api: &Api, id: &str, source: &str, config: &Value, timeout: &str, rollback: bool) -> Value {
    let body = json!({
        "configuration": config,
        "module_source": source,
        "health_gate": { "timeout": timeout, "rollback": rollback },
    });
    // Until the worker is seen alive on the nix queue, a cold source is refused (503).
    let (status, accepted) = wait_for("the worker to serve the nix queue", Duration::from_secs(60), || async {
        let answer = api.call(Method::PUT, &format!("/deployments/{id}"), Some(&body)).await.unwrap();
        (answer.0 != 503).then_some(answer)
    })
    .await;
    assert_eq!(status, 202, "{accepted}");
    accepted
}

/// Every event of deployment `id`'s channel so far, as `(state, build, trigger)`.
async fn channel(api: &Api, id: &str) -> Vec<(String, String, String)> {
    let r = api
        .http
        .get(format!("{}/deployments/{id}/events", api.base))
        .bearer_auth(&api.token)
        .header("Last-Event-ID", "0")
        .send()
        .await
        .unwrap();
    let text = r.text().await.unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (s("state"), s("build_id"), s("trigger"))
        })
        .collect()
}

async fn a_deploy_whose_instances_fail_the_health_gate_is_rolled_back_to_the_old_build(engine: Engine) {
    let (fleet, _worker) = gated_fleet(engine).await;
    let Gated { db, api, source, .. } = &fleet;

    let first = gated(api, "gate", source, &demo(), "60s", true).await;
    let first = ended(api, first["build_id"].as_str().unwrap()).await;
    assert_eq!(first["status"], "succeeded", "{first}");
    assert_eq!(first["report"]["health_gate"]["verdict"], "passed", "{first}");
    let first_systems = active_systems(db, "gate");

    // mastodon moves to a name the front door does not serve.
    let mut broken = demo();
    broken["applications"]["mastodon"]["subdomain"] = json!("broken");
    let accepted = gated(api, "gate", source, &broken, "3s", true).await;
    let path = format!("/builds/{}", accepted["build_id"].as_str().unwrap());
    // While it verifies, the build runs with phase `verifying` and the deployment is building.
    let seen = wait_for("the build to verify", ENDS, || async {
        let (_, _, b) = api.get(&path).await;
        let (_, _, d) = api.get("/deployments/gate").await;
        (b["phase"] == "verifying").then_some((b, d))
    })
    .await;
    assert_eq!((&seen.0["status"], &seen.1["state"]), (&json!("running"), &json!("building")), "{seen:?}");
    let failed = ended(api, accepted["build_id"].as_str().unwrap()).await;
    assert_eq!((&failed["status"], &failed["reason"]), (&json!("failed"), &json!("health_gate")), "{failed}");
    let error = failed["error"].as_str().unwrap();
    assert!(error.contains("broken.demo.example.org") && error.contains("wrong_host"), "{error}");
    assert_eq!(failed["report"]["health_gate"]["verdict"], "failed", "{failed}");

    // The failure's transaction queued the rollback; the deployment ends active on it.
    let (_, page) = api.call(Method::GET, "/deployments/gate/builds?trigger=auto_rollback", None).await.unwrap();
    let rollback = page["builds"][0].clone();
    assert_eq!(rollback["based_on"], first["id"], "{page}");
    let rollback = ended(api, rollback["id"].as_str().unwrap()).await;
    assert_eq!(rollback["status"], "succeeded", "{rollback}");
    let (_, _, d) = api.get("/deployments/gate").await;
    assert_eq!((&d["state"], &d["last_build"]["id"]), (&json!("active"), &rollback["id"]), "{d}");
    assert_eq!(active_systems(db, "gate"), first_systems, "a node did not return to its old system");
    assert_eq!(d["configuration"]["applications"]["mastodon"]["subdomain"], "social", "{d}");

    // The channel carries both: the failure, then the rollback.
    let events = channel(api, "gate").await;
    let failed_at = events.iter().position(|e| e.0 == "failed" && e.1 == failed["id"].as_str().unwrap());
    let rolled_at = events.iter().position(|e| e.0 == "active" && e.2 == "auto_rollback");
    assert!(failed_at.is_some() && rolled_at.is_some() && failed_at < rolled_at, "{events:?}");

    // Without rollback, a failed gate leaves the deployment failed.
    let accepted = gated(api, "gate", source, &broken, "2s", false).await;
    let failed = ended(api, accepted["build_id"].as_str().unwrap()).await;
    assert_eq!(failed["reason"], "health_gate", "{failed}");
    let (_, _, d) = api.get("/deployments/gate").await;
    assert_eq!(d["state"], "failed", "{d}");
}

async fn a_cancel_while_verifying_stops_the_gate_and_keeps_the_activation(engine: Engine) {
    let (fleet, _worker) = gated_fleet(engine).await;
    let Gated { db, api, source, .. } = &fleet;
    let mut broken = demo();
    broken["applications"]["mastodon"]["subdomain"] = json!("broken");
    let accepted = gated(api, "cancel-gate", source, &broken, "10m", true).await;
    let id = accepted["build_id"].as_str().unwrap();
    wait_for("the build to verify", ENDS, || async {
        let (_, _, b) = api.get(&format!("/builds/{id}")).await;
        (b["phase"] == "verifying").then_some(())
    })
    .await;
    let (status, answer) = post(api, &format!("/builds/{id}/cancel"), None).await;
    assert_eq!(status, 202, "{answer}");
    let build = ended(api, id).await;
    assert_eq!(build["status"], "succeeded", "{build}");
    assert_eq!(build["report"]["health_gate"]["verdict"], "cancelled", "{build}");
    assert!(build["report"]["warnings"].to_string().contains("not verified"), "{build}");
    assert_eq!(systems(&build), active_systems(db, "cancel-gate"), "the activation was undone");
    let (_, _, d) = api.get("/deployments/cancel-gate").await;
    assert_eq!(d["state"], "active", "{d}");

    // A plan of a source that does not declare the plan capability cannot be applied.
    let plain = db.dir.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let status =
        std::process::Command::new("cp").arg("-r").arg(source.trim_start_matches("path:")).arg(&plain).status();
    assert!(status.unwrap().success());
    let meta = plain.join("nix/core/meta.nix");
    let text = std::fs::read_to_string(&meta).unwrap();
    assert!(text.contains("capabilities = [ \"plan\" ];"), "the reference meta changed");
    std::fs::write(&meta, text.replace("capabilities = [ \"plan\" ];", "capabilities = [ ];")).unwrap();
    let plain = format!("path:{}", plain.join("nix").display());
    gated(api, "plain", &plain, &demo(), "60s", false).await;
    let body = json!({ "configuration": demo(), "module_source": plain });
    let (status, accepted) = api.call(Method::PUT, "/deployments/plain?dry_run=true", Some(&body)).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    let plan = ended(api, accepted["build_id"].as_str().unwrap()).await;
    assert_eq!(plan["plan"]["source_supports_plans"], false, "{plan}");
    let (status, refused) = post(api, "/deployments/plain/apply", Some(json!({ "plan": plan["id"] }))).await;
    assert_eq!((status, refused["error"].as_str()), (409, Some("plan_not_appliable")), "{refused}");
    assert!(refused["message"].as_str().unwrap().contains("capability"), "{refused}");

    // A first deploy that fails its gate has nothing to roll back to: it ends failed.
    let accepted = gated(api, "first-gate", source, &broken, "2s", true).await;
    let failed = ended(api, accepted["build_id"].as_str().unwrap()).await;
    assert_eq!(failed["reason"], "health_gate", "{failed}");
    let (_, _, d) = api.get("/deployments/first-gate").await;
    assert_eq!((&d["state"], &d["last_build"]["id"]), (&json!("failed"), &failed["id"]), "{d}");
    assert_eq!(api.builds("first-gate").await.unwrap().len(), 1, "a rollback was queued with nothing to return to");
}

/// What a crashed worker was doing.
#[derive(Debug, Clone, Copy)]
enum Crash {
    /// Verifying a failing gate.
    Verifying,
    /// Recording the gate's failure (and queuing its rollback).
    RecordingTheFailure,
    /// Running a rollback's build, its effect just ended.
    RollingBack,
}

async fn a_worker_killed_during_a_gate_or_a_rollback_leaves_the_deployment_consistent(engine: Engine) {
    let (fleet, worker) = gated_fleet(engine).await;
    let Gated { db, api, source, .. } = &fleet;
    let mut worker = Some(worker);
    let mut broken = demo();
    broken["applications"]["mastodon"]["subdomain"] = json!("broken");
    for (i, crash) in [Crash::Verifying, Crash::RecordingTheFailure, Crash::RollingBack].into_iter().enumerate() {
        let id = format!("crash-{i}");
        if worker.is_none() {
            worker = Some(fleet.worker(None, &format!("worker-{i}.log")));
        }
        let first = gated(api, &id, source, &demo(), "60s", true).await;
        let first = ended(api, first["build_id"].as_str().unwrap()).await;
        assert_eq!(first["status"], "succeeded", "{crash:?}: {first}");
        let first_systems = active_systems(db, &id);
        if let Crash::RollingBack = crash {
            submitted(api, &id, &config("", "chat"), false).await;
        }
        // The crashing worker takes over from here.
        drop(worker.take());
        let point = match crash {
            Crash::Verifying => "gate_verifying",
            Crash::RecordingTheFailure => "build_finishing",
            Crash::RollingBack => "effect_ended",
        };
        let log = format!("crashing-{i}.log");
        let crashing = fleet.worker(Some(point), &log);
        let crashed_build = match crash {
            Crash::RollingBack => post(api, &format!("/deployments/{id}/rollback"), None).await.1,
            _ => gated(api, &id, source, &broken, "3s", true).await,
        };
        let status = common::wait_exit(crashing, "the crashing worker", ENDS, &db.path(&log)).await;
        assert!(!status.success(), "{crash:?}: the worker did not crash at {point}");
        worker = Some(fleet.worker(None, &format!("worker-{i}-after.log")));

        // After the takeover, the deployment is active on the first build's systems, once.
        let crashed = ended(api, crashed_build["build_id"].as_str().unwrap()).await;
        assert_eq!(crashed["attempts"], 2, "{crash:?}: {crashed}");
        let active = wait_for("the deployment to settle", ENDS, || async {
            let (_, _, d) = api.get(&format!("/deployments/{id}")).await;
            (d["state"] == "active").then_some(d)
        })
        .await;
        assert_eq!(active_systems(db, &id), first_systems, "{crash:?}: the nodes do not run the first build's systems");
        let history = api.builds(&id).await.unwrap();
        let rollbacks: Vec<&Value> =
            history.iter().filter(|b| b["trigger"] == "auto_rollback" || b["trigger"] == "rollback").collect();
        assert_eq!(rollbacks.len(), 1, "{crash:?}: {history:?}");
        assert_eq!(rollbacks[0]["based_on"], first["id"], "{crash:?}");
        assert_eq!(active["last_build"]["id"], rollbacks[0]["id"], "{crash:?}: {active}");
        if !matches!(crash, Crash::RollingBack) {
            assert_eq!((&crashed["status"], &crashed["reason"]), (&json!("failed"), &json!("health_gate")));
        }
    }
}

async fn a_queued_build_says_why_it_waits(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let api = Api::connect(&db, port).await;
    let waiting = |accepted: Value| {
        let api = &api;
        async move {
            let (_, _, b) = api.get(&format!("/builds/{}", accepted["build_id"].as_str().unwrap())).await;
            b["waiting_for"].clone()
        }
    };

    // No worker serves the builds queue.
    let (_, first) = api.submit("wait-a", &demo()).await.unwrap();
    assert_eq!(waiting(first.clone()).await, json!({ "reason": "worker" }));

    // One worker with one slot, busy with wait-a's build for a while.
    let source = db.path("slow-source");
    // Long enough that it still runs however slowly the submits below are answered.
    common::slow_source(&source, 120);
    let mut worker = common::slow_worker(&db, port, &source);
    worker.env("BUILD_SLOTS", "1");
    let _worker = start(worker, &db, "worker.log");
    let path = format!("/builds/{}", first["build_id"].as_str().unwrap());
    common::wait_build(&api, &path, "wait-a's build to run", &["running"]).await;
    let (_, second) = api.submit("wait-a", &demo()).await.unwrap();
    assert_eq!(waiting(second).await, json!({ "reason": "deployment", "build_id": first["build_id"] }));
    let (_, other) = api.submit("wait-b", &demo()).await.unwrap();
    assert_eq!(waiting(other).await, json!({ "reason": "slot", "position": 1 }));
}

slipway_jobs::on_both_engines!(
    a_queued_build_says_why_it_waits,
    a_deploy_whose_instances_fail_the_health_gate_is_rolled_back_to_the_old_build,
    a_cancel_while_verifying_stops_the_gate_and_keeps_the_activation,
    a_worker_killed_during_a_gate_or_a_rollback_leaves_the_deployment_consistent,
);
