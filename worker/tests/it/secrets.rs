//! Operator secrets end to end (PRODUCT.md §8): the real api and worker,
//! each with its own OpenBao token and policy (`docs/openbao/`), a real
//! `bao server -dev`, real Nix builds of the reference source. The deploy
//! effect reads each node's secrets from OpenBao at the versions its build
//! pinned, never from the stored configuration, and deletes a cleared
//! secret's entry with every version once the nodes run without it. Polls
//! with deadlines; never sleeps to synchronise.

use crate::common;

use common::{binary, command, demo, free_port, start, wait_build, wait_for, Api, Running, ENDED};
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::{closed_loopback_port, TestDatabase, TestOpenBao};
use std::path::PathBuf;
use std::time::Duration;

const DEPLOYED: Duration = Duration::from_secs(180);
const MASTODON: &str = "mastodon-operator-secrets";
const PEERTUBE: &str = "peertube-operator-secrets";

/// The api with the api's OpenBao token (or `openbao` keys of its own).
fn api_with(db: &TestDatabase, port: u16, keys: &[(&str, String)], failpoint: Option<&str>) -> Running {
    let mut cmd = command(&binary("slipway-api"), db, port);
    for (k, v) in keys {
        cmd.env(k, v);
    }
    if let Some(point) = failpoint {
        cmd.env("SLIPWAY_FAILPOINTS", point);
    }
    start(cmd, db, "api.log")
}

/// A worker with the workers' OpenBao token (no OpenBao at all for `None`).
fn worker_with(db: &TestDatabase, port: u16, bao: Option<&TestOpenBao>) -> Running {
    let mut cmd = command(&binary("slipway-worker"), db, port);
    cmd.arg("work");
    for (k, v) in bao.map(|b| b.keys(true)).unwrap_or_default() {
        cmd.env(k, v);
    }
    start(cmd, db, "worker.log")
}

/// The demo configuration with `values` set: `(application, field, value)`.
fn with_secrets(values: &[(&str, &str, Value)]) -> Value {
    let mut config = demo();
    for (app, field, value) in values {
        config["applications"][*app][*field] = value.clone();
    }
    config
}

/// Where the local provider's node `node` of deployment `id` keeps secret `field` of `instance`.
fn node_secret(db: &TestDatabase, id: &str, node: &str, instance: &str, field: &str) -> PathBuf {
    db.path("state").join("provider").join(id).join("nodes").join(node).join("secrets").join(instance).join(field)
}

/// Submits `config` to `id` and waits until its build ended; the build.
async fn deploy(api: &Api, id: &str, config: &Value) -> Value {
    let (status, accepted) = api.submit(id, config).await.expect("the api answers");
    assert_eq!(status, 202, "{accepted}");
    let path = format!("/builds/{}", accepted["build_id"].as_str().unwrap());
    let build = wait_for("the deploy to end", DEPLOYED, || async {
        let (_, _, b) = api.get(&path).await;
        b["status"].as_str().is_some_and(|s| ENDED.contains(&s)).then_some(b)
    })
    .await;
    assert_eq!(build["status"], "succeeded", "{build}");
    build
}

/// The stored configuration's `secretsSet` and `secretsClear` of `app`.
async fn lists(api: &Api, id: &str, app: &str) -> (Value, Value) {
    let (_, _, d) = api.get(&format!("/deployments/{id}")).await;
    let settings = &d["configuration"]["applications"][app];
    (settings["secretsSet"].clone(), settings["secretsClear"].clone())
}

/// A database of `engine`, a root in the development OpenBao, and the api
/// and a worker on them, each with its own token.
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
    let processes = (api_with(&db, port, &bao.keys(false), None), worker_with(&db, port, Some(&bao)));
    let api = Api::connect(&db, port).await;
    Fleet { db, bao, api, _processes: processes }
}

fn read(path: &PathBuf) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

async fn each_node_gets_its_secrets_from_openbao_and_the_stored_configuration_holds_only_names(engine: Engine) {
    let Fleet { db, api, .. } = &fleet(engine).await;

    let config = with_secrets(&[
        ("mastodon", "translationApiKey", json!("translation-key-one")),
        ("peertube", "smtpPassword", json!("smtp-password-one")),
    ]);
    let build = deploy(api, "demo", &config).await;
    for (node, instance, field, value) in [
        ("mastodon", MASTODON, "translationApiKey", "translation-key-one"),
        ("peertube", PEERTUBE, "smtpPassword", "smtp-password-one"),
    ] {
        let file = node_secret(db, "demo", node, instance, field);
        assert_eq!(read(&file).as_deref(), Some(value), "{}", file.display());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{} is readable by others", file.display());
    }
    assert_eq!(lists(api, "demo", "mastodon").await.0, json!(["translationApiKey"]));
    assert_eq!(lists(api, "demo", "peertube").await.0, json!(["smtpPassword"]));
    for place in [build.to_string(), api.get("/deployments/demo").await.2.to_string()] {
        assert!(!place.contains("translation-key-one") && !place.contains("smtp-password-one"), "{place}");
    }

    // The next submit gives no value: the node keeps the pinned one.
    let build = deploy(api, "demo", &demo()).await;
    let file = node_secret(db, "demo", "mastodon", MASTODON, "translationApiKey");
    assert_eq!(read(&file).as_deref(), Some("translation-key-one"), "{build}");
}

async fn a_cleared_secret_leaves_openbao_with_every_version_once_its_node_runs_without_it(engine: Engine) {
    let Fleet { db, bao, api, .. } = &fleet(engine).await;

    let entry = format!("clears/secret/{PEERTUBE}/smtpPassword");
    for value in ["smtp-version-one", "smtp-version-two"] {
        deploy(api, "clears", &with_secrets(&[("peertube", "smtpPassword", json!(value))])).await;
    }
    assert_eq!(bao.value_at(&entry).await.as_deref(), Some("smtp-version-two"));
    let file = node_secret(db, "clears", "peertube", PEERTUBE, "smtpPassword");
    assert_eq!(read(&file).as_deref(), Some("smtp-version-two"));

    let build = deploy(api, "clears", &with_secrets(&[("peertube", "secretsClear", json!(["smtpPassword"]))])).await;
    assert_eq!(lists(api, "clears", "peertube").await, (json!([]), json!(["smtpPassword"])));
    assert!(!bao.entries().await.contains(&entry), "the cleared entry is still there: {:?}", bao.entries().await);
    assert_eq!(bao.api().current_version("clears", PEERTUBE, "smtpPassword").await.unwrap(), None, "versions left");
    assert!(!file.exists(), "the node still has the cleared secret");
    let log = build["log"].as_str().unwrap_or_default();
    assert!(log.contains("cleared operator secret smtpPassword"), "{build}");
}

async fn a_crash_between_the_openbao_write_and_the_commit_never_reaches_a_node(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let bao = TestOpenBao::new().await;
    let port = free_port();
    let mut first_api = api_with(&db, port, &bao.keys(false), None);
    let _worker = worker_with(&db, port, Some(&bao));
    let api = Api::connect(&db, port).await;
    let entry = format!("crash/secret/{MASTODON}/translationApiKey");
    deploy(&api, "crash", &with_secrets(&[("mastodon", "translationApiKey", json!("accepted-value"))])).await;
    let builds_before = api.builds("crash").await.unwrap().len();

    // An api that dies right after writing to OpenBao, before its commit.
    first_api.kill();
    let crashing = api_with(&db, port, &bao.keys(false), Some("secrets_written"));
    api.wait_healthy().await;
    let refused = with_secrets(&[("mastodon", "translationApiKey", json!("never-committed-value"))]);
    assert!(api.submit("crash", &refused).await.is_err(), "the api answered although it crashed");
    drop(crashing);
    assert_eq!(bao.value_at(&entry).await.as_deref(), Some("never-committed-value"), "the write happened");

    let _api = api_with(&db, port, &bao.keys(false), None);
    api.wait_healthy().await;
    assert_eq!(api.builds("crash").await.unwrap().len(), builds_before, "a build of the crashed submit exists");
    // A submit that keeps the secret deploys the version the last accepted submit wrote.
    deploy(&api, "crash", &demo()).await;
    let file = node_secret(&db, "crash", "mastodon", MASTODON, "translationApiKey");
    assert_eq!(read(&file).as_deref(), Some("accepted-value"), "the crashed submit's value reached the node");
}

#[tokio::test]
async fn a_preview_neither_reads_nor_writes_openbao() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let port = free_port();
    // Any request to this OpenBao fails: a submit answers 503, a preview must not notice.
    let keys = [
        ("OPENBAO_ADDR", format!("http://{}", closed_loopback_port())),
        ("OPENBAO_TOKEN", "token-of-nobody".to_owned()),
    ];
    let _api = api_with(&db, port, &keys, None);
    let _worker = worker_with(&db, port, None);
    let api = Api::connect(&db, port).await;
    // The preview's names eval runs on the worker's nix queue: wait until
    // the worker serves it (as the api counts live workers).
    let keys = std::collections::BTreeMap::from([("DATABASE_URL".to_owned(), db.url.clone())]);
    let store = slipway_jobs::store::open(&slipway_jobs::config::Config::from_keys(&keys).unwrap()).await.unwrap();
    wait_for("the worker to serve the nix queue", Duration::from_secs(60), || async {
        let mut conn = store.acquire().await.ok()?;
        let states = slipway_jobs::store::fleet::queue_states(&mut conn, &["nix"], 60).await.ok()?;
        (states.first()?.workers > 0).then_some(())
    })
    .await;
    let body = json!({ "configuration": with_secrets(&[("mastodon", "translationApiKey", json!("preview-value"))]) });
    let (status, preview) = api.call(reqwest::Method::POST, "/deployments/demo/preview", Some(&body)).await.unwrap();
    assert_eq!(status, 200, "{preview}");
    let mastodon = &preview["configuration"]["applications"]["mastodon"];
    assert_eq!(mastodon["secretsSet"], json!(["translationApiKey"]), "{preview}");
    assert!(!preview.to_string().contains("preview-value"), "{preview}");
    let (status, refused) = api.submit("demo", &body["configuration"]).await.unwrap();
    assert_eq!(status, 503, "{refused}");
    assert_eq!(refused["error"], "service_unavailable");
}

#[tokio::test]
async fn a_worker_without_openbao_fails_a_build_with_secrets_and_says_why() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let bao = TestOpenBao::new().await;
    let port = free_port();
    let _api = api_with(&db, port, &bao.keys(false), None);
    let _worker = worker_with(&db, port, None);
    let api = Api::connect(&db, port).await;
    let config = with_secrets(&[("peertube", "smtpPassword", json!("unused-value"))]);
    let (status, accepted) = api.submit("nobao", &config).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    let build = format!("/builds/{}", accepted["build_id"].as_str().unwrap());
    let build = wait_build(&api, &build, "the deploy to end", ENDED).await;
    assert_eq!(build["status"], "failed", "{build}");
    assert!(build["error"].as_str().unwrap_or_default().contains("OPENBAO_ADDR"), "{build}");
}

#[tokio::test]
async fn a_worker_waits_for_a_sealed_openbao_and_the_build_succeeds_once_it_is_unsealed() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let bao = TestOpenBao::private().await;
    let port = free_port();
    let _api = api_with(&db, port, &bao.keys(false), None);
    let api = Api::connect(&db, port).await;
    let config = with_secrets(&[("mastodon", "translationApiKey", json!("sealed-then-unsealed-value"))]);
    let (status, accepted) = api.submit("sealed", &config).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    // Sealed before any worker runs: the deploy meets it when it reads.
    bao.seal().await;
    let _worker = worker_with(&db, port, Some(&bao));
    wait_for("the worker to wait for OpenBao", DEPLOYED, || async {
        std::fs::read_to_string(db.path("worker.log")).ok().filter(|l| l.contains("waiting for OpenBao")).map(|_| ())
    })
    .await;
    bao.unseal().await;
    let path = format!("/builds/{}", accepted["build_id"].as_str().unwrap());
    let build = wait_for("the deploy to end", DEPLOYED, || async {
        let (_, _, b) = api.get(&path).await;
        b["status"].as_str().is_some_and(|s| ENDED.contains(&s)).then_some(b)
    })
    .await;
    assert_eq!(build["status"], "succeeded", "{build}");
    let file = node_secret(&db, "sealed", "mastodon", MASTODON, "translationApiKey");
    assert_eq!(read(&file).as_deref(), Some("sealed-then-unsealed-value"));
}

slipway_jobs::on_both_engines!(
    each_node_gets_its_secrets_from_openbao_and_the_stored_configuration_holds_only_names,
    a_crash_between_the_openbao_write_and_the_commit_never_reaches_a_node,
);

#[tokio::test]
async fn a_cleared_secret_leaves_openbao_with_every_version_once_its_node_runs_without_it_sqlite() {
    a_cleared_secret_leaves_openbao_with_every_version_once_its_node_runs_without_it(Engine::Sqlite).await
}

/// `slipway-worker run deploy` with `env` on top of a clean environment:
/// exit code, stdout and stderr.
fn local_run(state: &std::path::Path, config: &Value, env: &[(&str, String)]) -> (i32, String) {
    let file = state.join("configuration.json");
    std::fs::write(&file, config.to_string()).unwrap();
    let source = format!("path:{}", common::repo().join("nix").display());
    let mut cmd = std::process::Command::new(binary("slipway-worker"));
    cmd.args(["run", "deploy", "--source", &source, "--config", file.to_str().unwrap(), "--output", "json"])
        .env("SLIPWAY_STATE_DIR", state)
        .env_remove("SLIPWAY_CONFIG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[tokio::test]
async fn a_local_run_keeps_its_secrets_in_openbao_and_its_deploy_reads_them_back() {
    use secrecy::ExposeSecret as _;
    let bao = TestOpenBao::new().await;
    // One process both submits and deploys: its token has both policies.
    let both = [format!("slipway-api-{}", bao.root), format!("slipway-worker-{}", bao.root)];
    let token = bao.mint_token(&[&both[0], &both[1]]).await;
    let mut env = bao.keys(true);
    env.retain(|(k, _)| *k != "OPENBAO_TOKEN");
    env.push(("OPENBAO_TOKEN", token.expose_secret().to_owned()));
    let state = tempfile::tempdir().unwrap();
    let config = with_secrets(&[("peertube", "smtpPassword", json!("local-run-password"))]);
    let (code, out) = local_run(state.path(), &config, &env);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("local-run-password"), "{out}");
    let entries = bao.entries().await;
    let entry = entries.iter().find(|e| e.ends_with(&format!("/secret/{PEERTUBE}/smtpPassword"))).cloned();
    let entry = entry.unwrap_or_else(|| panic!("no entry for the secret: {entries:?}"));
    assert_eq!(bao.value_at(&entry).await.as_deref(), Some("local-run-password"));
    let id = entry.split('/').next().unwrap();
    let nodes = state.path().join("provider").join(id).join("nodes");
    let file = nodes.join("peertube/secrets").join(PEERTUBE).join("smtpPassword");
    assert_eq!(read(&file).as_deref(), Some("local-run-password"));
}

#[tokio::test]
async fn a_local_run_without_openbao_refuses_a_secret_value_naming_its_field() {
    let state = tempfile::tempdir().unwrap();
    let config = with_secrets(&[("peertube", "smtpPassword", json!("nowhere-to-keep-it"))]);
    let (code, out) = local_run(state.path(), &config, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("/applications/peertube/smtpPassword") && out.contains("OPENBAO_ADDR"), "{out}");
    assert!(!out.contains("nowhere-to-keep-it"), "{out}");
}
