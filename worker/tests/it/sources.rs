//! Module sources on the `nix` queue (MS-6, MS-7, MG-7, EV-1, EV-2, Q-8)
//! with the real binaries, real `git` repositories over `file://` and real
//! Nix: `get_for` answers `202` then `200` on a cold source and each failure
//! by name; the allowlist is checked before anything is fetched; a full
//! slot pool answers `503 nix_busy` at once; a build past `NIX_TIMEOUT`
//! leaves no process behind; and a configuration written for a source's
//! first revision is migrated, name-evaluated and deployed from its second
//! by a worker that fetched it itself.

use crate::common;

use common::{binary, command, demo, free_port, start, wait_for, Api, Running};
use reqwest::Method;
use serde_json::{json, Value};
use slipway_jobs::store::{Engine, Q};
use slipway_jobs::test_support::{processes_with, TestDatabase};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Runs `git args…` in `dir`; panics with its output unless it succeeds.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Slipway tests",
            "-c",
            "user.email=tests@slipway.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Commits everything in `dir` and returns the commit id.
pub(crate) fn commit(dir: &Path, message: &str) -> String {
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", message]);
    git(dir, &["rev-parse", "HEAD"])
}

/// A repository at `dir` whose first commit is a copy of the reference source.
pub(crate) fn reference_repository(dir: &Path) -> String {
    let status = Command::new("cp").arg("-r").arg(common::repo().join("nix")).arg(dir).status().unwrap();
    assert!(status.success());
    git(dir, &["init", "-q"]);
    commit(dir, "the reference source")
}

/// Edits `file` under `dir`, asserting the edit changed it.
pub(crate) fn edit(dir: &Path, file: &str, from: &str, to: &str) {
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = text.replacen(from, to, 1);
    assert_ne!(edited, text, "{file} no longer holds {from:?}; update this test");
    std::fs::write(&path, edited).unwrap();
}

/// The reference source at two revisions: the second renames Mastodon's
/// `registrations` option to `signups` (an alias marker, so its renames
/// table moves stored values). Returns the `file://` URL and both commits.
fn two_revisions(dir: &Path) -> (String, String, String) {
    let first = reference_repository(dir);
    edit(
        dir,
        "core/applications/mastodon.nix",
        "    registrations = mkOption {",
        "    registrations = mkRenamedOption [ \"signups\" ];\n    signups = mkOption {",
    );
    let second = commit(dir, "rename registrations to signups");
    (format!("file://{}", dir.display()), first, second)
}

/// An api and a worker on `db`, with `env` on both and `worker_args` after `work`.
struct Fleet {
    api: Api,
    _api: Running,
    _worker: Running,
}

async fn fleet(db: &TestDatabase, env: &[(&str, &str)], worker_args: &[&str]) -> Fleet {
    let port = free_port();
    let with_env = |mut cmd: Command| {
        // The repositories of these tests are file:// ones.
        cmd.env("SLIPWAY_ALLOW_PATH_SOURCES", "true");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    };
    let api_process = start(with_env(command(&binary("slipway-api"), db, port)), db, "api.log");
    let mut worker = with_env(command(&binary("slipway-worker"), db, port));
    worker.arg("work").args(worker_args);
    let worker_process = start(worker, db, "worker.log");
    let api = Api::connect(db, port).await;
    Fleet { api, _api: api_process, _worker: worker_process }
}

impl Fleet {
    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.api.call(Method::POST, path, Some(body)).await.unwrap()
    }

    /// Repeats `POST path body` while it answers `202 computing`.
    async fn until_computed(&self, path: &str, body: &Value) -> (u16, Value) {
        wait_for("the source's outputs", Duration::from_secs(120), || async {
            let (status, answer) = self.post(path, body).await;
            if status == 202 {
                assert_eq!(answer["status"], "computing", "{answer}");
                return None;
            }
            Some((status, answer))
        })
        .await
    }
}

/// Waits until `/readyz` counts a live worker serving `queue` (a submit
/// that needs the `nix` queue is refused while none does).
pub(crate) async fn wait_serving(api: &Api, queue: &str) {
    wait_for(&format!("a live worker of the {queue} queue"), Duration::from_secs(30), || async {
        let (_, _, ready) = api.get("/readyz").await;
        let q = ready["queues"].as_array()?.iter().find(|q| q["queue"] == queue)?.clone();
        (q["workers"].as_i64()? > 0).then_some(())
    })
    .await
}

/// A count from the test's database.
async fn count(db: &TestDatabase, sqlite: &str, postgres: &str) -> i64 {
    let keys = std::collections::BTreeMap::from([("DATABASE_URL".to_owned(), db.url.clone())]);
    let store = slipway_jobs::store::open(&slipway_jobs::config::Config::from_keys(&keys).unwrap()).await.unwrap();
    let sql = if store.engine() == Engine::Sqlite { sqlite } else { postgres };
    let n = Q::new(sql).fetch_one(&mut store.acquire().await.unwrap()).await.unwrap().int("n").unwrap();
    store.close().await;
    n
}

async fn nix_jobs(db: &TestDatabase) -> i64 {
    count(
        db,
        "SELECT COUNT(*) AS n FROM Jobs WHERE job_type = 'nix'",
        "SELECT COUNT(*) AS n FROM apalis.jobs WHERE job_type = 'nix'",
    )
    .await
}

fn baked(file: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(common::repo().join("api/default-source").join(file)).unwrap())
        .unwrap()
}

/// Concurrent misses of one cold source run one build; each caller gets
/// `202 computing` until it is done, then the outputs: the whole schema,
/// one application's, the renames of one section.
async fn a_cold_source_answers_computing_then_its_outputs(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let (url, first, _) = two_revisions(&db.path("repo"));
    let fleet = fleet(&db, &[("SLIPWAY_TRUSTED_SOURCES", &url)], &[]).await;
    let source = format!("git+{url}?rev={first}");
    let body = json!({ "source": source });
    let calls: Vec<_> = (0..4).map(|_| fleet.post("/schema/get_for", &body)).collect();
    for (status, answer) in futures::future::join_all(calls).await {
        assert!(status == 202 || status == 200, "{status} {answer}");
    }
    let (status, schema) = fleet.until_computed("/schema/get_for", &body).await;
    assert_eq!((status, &schema), (200, &baked("schema.json")), "the first revision is the reference source");
    assert_eq!(nix_jobs(&db).await, 1, "concurrent misses of one source queue one build");
    let (status, app) = fleet.post("/schema/get_for", &json!({ "source": source, "application": "mastodon" })).await;
    assert_eq!((status, &app), (200, &baked("applications.json")["mastodon"]));
    let (status, missing) = fleet.post("/schema/get_for", &json!({ "source": source, "application": "nope" })).await;
    assert_eq!((status, missing["error"].as_str()), (404, Some("not_found")), "{missing}");
    let (status, renames) = fleet.post("/renames/get_for", &json!({ "source": source })).await;
    assert_eq!((status, &renames), (200, &baked("renames.json")));
    let (status, section) = fleet.post("/renames/get_for", &json!({ "source": source, "section": "mastodon" })).await;
    assert_eq!(status, 200, "{section}");
    assert!(section.as_array().unwrap().iter().any(|e| e["from"] == json!(["email"])), "relative paths: {section}");
    assert_eq!(nix_jobs(&db).await, 1, "every later call was a cache hit");
    // The token is required.
    let anonymous = reqwest::Client::new().post(format!("{}/schema/get_for", fleet.api.base)).json(&body).send().await;
    assert_eq!(anonymous.unwrap().status().as_u16(), 401);
}

/// MS-6: the allowlist is checked before anything is fetched: no cache
/// entry, no job, no `git` process. Malformed sources are `400`.
#[tokio::test]
async fn a_source_outside_the_allowlist_is_refused_before_anything_is_fetched() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let (url, first, _) = two_revisions(&db.path("repo"));
    let fleet = fleet(&db, &[("SLIPWAY_TRUSTED_SOURCES", "https://git.example.org/trusted/")], &[]).await;
    let source = format!("git+{url}?rev={first}");
    let (status, answer) = fleet.post("/schema/get_for", &json!({ "source": source })).await;
    assert_eq!((status, answer["error"].as_str()), (403, Some("source_not_allowed")), "{answer}");
    assert!(processes_with(&url).is_empty(), "a git process runs for the refused source");
    let (status, answer) = fleet.post("/renames/get_for", &json!({ "source": source })).await;
    assert_eq!((status, answer["error"].as_str()), (403, Some("source_not_allowed")), "{answer}");
    let submit = json!({ "configuration": demo(), "module_source": source });
    let (status, answer) = fleet.api.call(Method::PUT, "/deployments/demo", Some(&submit)).await.unwrap();
    assert_eq!((status, answer["error"].as_str()), (403, Some("source_not_allowed")), "{answer}");
    assert!(!db.path("state/sources").exists(), "the refused source was fetched");
    assert_eq!(count(&db, "SELECT COUNT(*) AS n FROM nix_results", "").await, 0);
    assert_eq!(nix_jobs(&db).await, 0);
    let (status, answer) =
        fleet.post("/schema/get_for", &json!({ "source": "git+https://git.example.org/trustedevil/x?ref=main" })).await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (403, Some("source_not_allowed")),
        "a prefix matches at a boundary: {answer}"
    );
    let mut malformed: Vec<String> = [
        "github:x/y",
        "git+https://example.org/x?rev=abc",
        "path:",
        "git+https://git.example.org/trusted/../evil?ref=main",
    ]
    .map(String::from)
    .to_vec();
    // Refs git refuses (jobs/src/source.rs holds the whole table, checked
    // against `git check-ref-format`), in an allowed repository.
    for name in ["-n", "main^", "x.lock", "a//b", "@{-1}", "@", ".x", "a..b", "a:b", "v1~1"] {
        malformed.push(format!("git+{url}?ref={name}"));
    }
    for source in &malformed {
        let (status, answer) = fleet.post("/schema/get_for", &json!({ "source": source })).await;
        assert_eq!((status, answer["error"].as_str()), (400, Some("invalid_module_source")), "{source}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().starts_with("a module source is git+<url>?rev="),
            "names the accepted forms: {answer}"
        );
        let submit = json!({ "configuration": demo(), "module_source": source });
        let (status, answer) = fleet.api.call(Method::PUT, "/deployments/demo", Some(&submit)).await.unwrap();
        assert_eq!((status, answer["error"].as_str()), (400, Some("invalid_module_source")), "{source}: {answer}");
    }
    assert!(processes_with(&url).is_empty(), "a git process runs for a refused ref");
    assert!(!db.path("state/sources").exists(), "a refused ref was fetched");
    assert_eq!(nix_jobs(&db).await, 0, "a refused ref queued a job");
}

/// Each failure says which output and why, with its own code and status:
/// a source without the output, one older than it, an unknown revision.
#[tokio::test]
async fn each_failure_of_a_source_names_its_output_and_why() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let old = db.path("old");
    reference_repository(&old);
    edit(&old, "core/default.nix", "  applicationSchemas = writeJSON", "  oldApplicationSchemas = writeJSON");
    let old_rev = commit(&old, "a core from before applicationSchemas");
    let empty = db.path("empty");
    std::fs::create_dir_all(empty.join("core")).unwrap();
    std::fs::write(empty.join("core/default.nix"), "{ ... }: { }\n").unwrap();
    git(&empty, &["init", "-q"]);
    let empty_rev = commit(&empty, "no outputs");
    let fleet = fleet(&db, &[("SLIPWAY_TRUSTED_SOURCES", "")], &[]).await;

    let too_old = format!("git+file://{}?rev={old_rev}", old.display());
    let (status, schema) = fleet.until_computed("/schema/get_for", &json!({ "source": too_old })).await;
    assert_eq!((status, &schema), (200, &baked("schema.json")), "the outputs it has are served");
    let (status, answer) =
        fleet.post("/schema/get_for", &json!({ "source": too_old, "application": "mastodon" })).await;
    assert_eq!((status, answer["error"].as_str()), (422, Some("source_too_old")), "{answer}");
    assert_eq!(answer["details"]["output"], "applicationSchemas");

    let no_outputs = format!("git+file://{}?rev={empty_rev}", empty.display());
    let (status, answer) = fleet.until_computed("/schema/get_for", &json!({ "source": no_outputs })).await;
    assert_eq!((status, answer["error"].as_str()), (422, Some("output_missing")), "{answer}");
    assert_eq!(answer["details"]["output"], "schema");

    // What the source names and the repository lacks is the request's
    // fault, not a gateway's: 422, naming it.
    let unknown = format!("git+file://{}?rev={}", empty.display(), "0".repeat(40));
    let (status, answer) = fleet.until_computed("/schema/get_for", &json!({ "source": unknown })).await;
    assert_eq!((status, answer["error"].as_str()), (422, Some("source_revision_not_found")), "{answer}");
    assert!(answer["message"].as_str().unwrap().contains(&format!("no commit {}", "0".repeat(40))), "{answer}");
    assert!(!answer.to_string().contains("fatal:"), "the git log reached the front-end: {answer}");
    let submit = json!({ "configuration": demo(), "module_source": unknown });
    let (status, answer) = fleet.api.call(Method::PUT, "/deployments/unknown-rev", Some(&submit)).await.unwrap();
    assert_eq!((status, answer["error"].as_str()), (422, Some("source_revision_not_found")), "{answer}");

    let no_branch = format!("git+file://{}?ref=no-such-branch", empty.display());
    let (status, answer) = fleet.until_computed("/schema/get_for", &json!({ "source": no_branch })).await;
    assert_eq!((status, answer["error"].as_str()), (422, Some("source_revision_not_found")), "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("no-such-branch"), "{answer}");

    for nowhere in [db.path("nowhere"), db.path("state")] {
        let source = format!("git+file://{}?ref=main", nowhere.display());
        let (status, answer) = fleet.until_computed("/schema/get_for", &json!({ "source": source })).await;
        assert_eq!((status, answer["error"].as_str()), (422, Some("source_repository_not_found")), "{answer}");
        assert!(!answer.to_string().contains("fatal:"), "the git log reached the front-end: {answer}");
    }
}

/// MS-7: with the one nix slot held by a build, a miss of another source is
/// refused at once; the build past `NIX_TIMEOUT` is killed with every
/// process it started (its Nix builder included) and answers `timeout`;
/// then the slot is free again.
#[tokio::test]
async fn a_full_slot_pool_answers_nix_busy_and_a_build_past_its_deadline_leaves_no_process() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let slow = db.path("slow");
    reference_repository(&slow);
    let token = format!("slipway-slow-schema-{}", std::process::id());
    edit(
        &slow,
        "core/default.nix",
        "  schema = writeJSON \"schema\" \"schema.json\" schemaDoc;",
        &format!(
            "  schema = lib.write.mkDerivation {{ name = \"slow-schema\"; slipwayTestToken = \"{token}\"; args = [ \"-c\" \"sleep 60\" ]; }};"
        ),
    );
    let slow_rev = commit(&slow, "a schema that takes a minute");
    let (url, first, _) = two_revisions(&db.path("repo"));
    let fleet = fleet(&db, &[("SLIPWAY_TRUSTED_SOURCES", ""), ("NIX_SLOTS", "1"), ("NIX_TIMEOUT", "6")], &[]).await;
    let slow_source = json!({ "source": format!("git+file://{}?rev={slow_rev}", slow.display()) });
    let (status, _) = fleet.post("/schema/get_for", &slow_source).await;
    assert_eq!(status, 202);
    wait_for("the slow schema's Nix builder to run", Duration::from_secs(60), || async {
        (!processes_with(&token).is_empty()).then_some(())
    })
    .await;
    let other = json!({ "source": format!("git+{url}?rev={first}") });
    let (status, answer) = fleet.post("/schema/get_for", &other).await;
    assert_eq!((status, answer["error"].as_str()), (503, Some("nix_busy")), "{answer}");
    let (status, answer) = fleet.until_computed("/schema/get_for", &slow_source).await;
    assert_eq!((status, answer["error"].as_str()), (504, Some("timeout")), "{answer}");
    assert_eq!(processes_with(&token), Vec::<u32>::new(), "a process of the timed-out build outlived it");
    let slow_path = slow.display().to_string();
    assert_eq!(processes_with(&slow_path), Vec::<u32>::new(), "a git or Nix process of the timed-out job outlived it");
    let (status, schema) = fleet.until_computed("/schema/get_for", &other).await;
    assert_eq!((status, &schema), (200, &baked("schema.json")), "the slot was freed");
}

/// Q-8: a worker serving only `builds` leaves `nix` jobs waiting; the
/// answer and `/readyz` say no live worker serves that queue.
#[tokio::test]
async fn a_job_on_a_queue_no_live_worker_serves_is_reported() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let (url, first, _) = two_revisions(&db.path("repo"));
    let fleet = fleet(&db, &[("SLIPWAY_TRUSTED_SOURCES", "")], &["--queues", "builds"]).await;
    let body = json!({ "source": format!("git+{url}?rev={first}") });
    let (status, _) = fleet.post("/schema/get_for", &body).await;
    assert_eq!(status, 202);
    let ready = wait_for("the builds worker to register", Duration::from_secs(30), || async {
        let (status, _, ready) = fleet.api.get("/readyz").await;
        assert_eq!(status, 200, "{ready}");
        let builds = ready["queues"].as_array()?.iter().find(|q| q["queue"] == "builds")?.clone();
        (builds["workers"].as_i64()? > 0).then_some(ready)
    })
    .await;
    let nix = ready["queues"].as_array().unwrap().iter().find(|q| q["queue"] == "nix").unwrap();
    assert_eq!((nix["waiting"].as_i64(), nix["workers"].as_i64()), (Some(1), Some(0)), "{ready}");
    let warning = ready["warnings"][0].as_str().unwrap_or_default();
    assert!(warning.contains("nix queue") && warning.contains("no live worker"), "{ready}");
    let (status, answer) = fleet.post("/schema/get_for", &body).await;
    assert_eq!(status, 202);
    assert!(answer["warnings"][0].as_str().unwrap_or_default().contains("nix queue"), "{answer}");
    let log = std::fs::read_to_string(db.path("api.log")).unwrap();
    assert_eq!(log.matches("jobs wait on a queue that no live worker serves").count(), 1, "logged once: {log}");
    // EV-1: a submit does not wait for a names eval no worker can run.
    let (status, accepted) = fleet.api.submit("demo", &demo()).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    assert!(accepted.get("names").is_none(), "{accepted}");
    assert!(accepted["names_skipped"].as_str().unwrap_or_default().contains("nix queue"), "{accepted}");
    // EV-2: a preview without the eval has no result.
    let draft = json!({ "configuration": demo() });
    let (status, answer) = fleet.api.call(Method::POST, "/deployments/draft/preview", Some(&draft)).await.unwrap();
    assert_eq!((status, answer["error"].as_str()), (503, Some("service_unavailable")), "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("nix queue"), "{answer}");
    // A cold source cannot be built: the submit is refused at once, not after NIX_TIMEOUT.
    let started = std::time::Instant::now();
    let cold = json!({ "configuration": demo(), "module_source": body["source"] });
    let (status, answer) = fleet.api.call(Method::PUT, "/deployments/cold", Some(&cold)).await.unwrap();
    assert_eq!((status, answer["error"].as_str()), (503, Some("service_unavailable")), "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("nix queue"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());
    let (status, _, _) = fleet.api.get("/deployments/cold").await;
    assert_eq!(status, 404, "a refused submit stored its deployment");
}

/// The end-to-end path of a fork: a configuration written for the first
/// revision (Mastodon's `registrations`) is submitted against the second
/// (`signups`) by branch; the api pins the branch's revision, migrates the
/// value, evaluates the names on an evaluation worker (`--queues nix`) and a
/// deploy worker with a state folder of its own (`--queues builds`) fetches
/// the revision itself and deploys it. A preview answers the same nodes.
async fn a_configuration_for_the_first_revision_is_deployed_from_the_second(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let (url, _, second) = two_revisions(&db.path("repo"));
    let port = free_port();
    let trusted = [("SLIPWAY_TRUSTED_SOURCES", url.as_str()), ("SLIPWAY_ALLOW_PATH_SOURCES", "true")];
    let mut api = command(&binary("slipway-api"), &db, port);
    api.envs(trusted);
    let _api = start(api, &db, "api.log");
    let mut evaluator = command(&binary("slipway-worker"), &db, port);
    evaluator.envs(trusted).args(["work", "--queues", "nix"]);
    let _evaluator = start(evaluator, &db, "evaluator.log");
    let deployer_state: PathBuf = db.path("deployer-state");
    let mut deployer = command(&binary("slipway-worker"), &db, port);
    deployer
        .envs(trusted)
        .env("SLIPWAY_STATE_DIR", &deployer_state)
        .env("SLIPWAY_QUEUES", "builds,maintenance")
        .arg("work");
    let _deployer = start(deployer, &db, "deployer.log");
    let api = Api::connect(&db, port).await;
    wait_serving(&api, "nix").await;

    let configuration = demo();
    assert!(configuration["applications"]["mastodon"]["registrations"].is_string(), "demo.json changed");
    let body = json!({ "configuration": configuration, "module_source": format!("git+{url}?ref=main") });
    let (status, preview) = api.call(Method::POST, "/deployments/fork/preview", Some(&body)).await.unwrap();
    assert_eq!(status, 200, "{preview}");
    assert_eq!(preview["module_source"], format!("git+{url}?rev={second}"));
    let (status, accepted) = api.call(Method::PUT, "/deployments/fork", Some(&body)).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    assert_eq!(accepted["names"]["nodes"], preview["nodes"], "a preview evaluates as the submit does");
    let mastodon = accepted["names"]["nodes"].as_array().unwrap().iter().find(|n| n["name"] == "mastodon").cloned();
    assert_eq!(mastodon.unwrap()["dnsNames"], json!(["social.demo.example.org"]), "{accepted}");
    assert_eq!(accepted["names"]["disabledApplications"], preview["disabled_applications"]);
    let deployed = api.wait_state("fork", "active", Duration::from_secs(180)).await;
    assert_eq!(deployed["module_source"], format!("git+{url}?rev={second}"), "the branch's revision is stored");
    let mastodon = &deployed["configuration"]["applications"]["mastodon"];
    assert_eq!(mastodon["signups"], configuration["applications"]["mastodon"]["registrations"], "{deployed}");
    assert!(mastodon.get("registrations").is_none(), "the old key stayed: {deployed}");
    assert_eq!(deployed["names"], accepted["names"]);
    assert!(
        deployer_state.join("sources/git").join(&second).join("core/default.nix").is_file(),
        "the deploy worker did not fetch the revision itself"
    );
}

/// EV-1's result is kept by (source revision, configuration): a second
/// submit of the same configuration at the same pinned revision, to another
/// deployment, queues no `names_eval` job and answers the same names; a
/// changed configuration, or the same one at another revision, is
/// evaluated again.
async fn a_repeated_configuration_at_the_same_revision_is_not_evaluated_again(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let dir = db.path("repo");
    let first = reference_repository(&dir);
    std::fs::write(dir.join("NOTES"), "a second revision, the same module\n").unwrap();
    let second = commit(&dir, "a second revision");
    let url = format!("file://{}", dir.display());
    let fleet = fleet(&db, &[("SLIPWAY_TRUSTED_SOURCES", url.as_str())], &["--queues", "nix"]).await;
    wait_serving(&fleet.api, "nix").await;
    let submit = |id: &'static str, configuration: Value, rev: &str| {
        let body = json!({ "configuration": configuration, "module_source": format!("git+{url}?rev={rev}") });
        let api = &fleet.api;
        async move {
            let (status, accepted) = api.call(Method::PUT, &format!("/deployments/{id}"), Some(&body)).await.unwrap();
            assert_eq!(status, 202, "{accepted}");
            assert!(accepted.get("names_skipped").is_none(), "the names eval did not run: {accepted}");
            accepted
        }
    };
    let names_evals = || {
        let sql = "SELECT COUNT(*) AS n FROM nix_results WHERE kind = 'names_eval'";
        count(&db, sql, sql)
    };
    let first_submit = submit("kept-1", demo(), &first).await;
    let jobs = nix_jobs(&db).await;
    assert_eq!((jobs, names_evals().await), (2, 1), "the schema build and one names eval");

    let repeated = submit("kept-2", demo(), &first).await;
    assert_eq!(nix_jobs(&db).await, jobs, "a repeated configuration was evaluated again");
    assert_eq!(repeated["names"], first_submit["names"]);

    let mut changed = demo();
    changed["applications"]["mastodon"]["subdomain"] = json!("toots");
    let changed = submit("kept-3", changed, &first).await;
    assert_eq!(nix_jobs(&db).await, jobs + 1, "a changed configuration was not evaluated");
    assert_ne!(changed["names"], first_submit["names"]);

    submit("kept-4", demo(), &second).await;
    assert_eq!(nix_jobs(&db).await, jobs + 3, "another revision: its schema build and its names eval");
    assert_eq!(names_evals().await, 3);
}

slipway_jobs::on_both_engines!(
    a_cold_source_answers_computing_then_its_outputs,
    a_configuration_for_the_first_revision_is_deployed_from_the_second,
    a_repeated_configuration_at_the_same_revision_is_not_evaluated_again,
);
