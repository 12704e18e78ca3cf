//! Rollouts (RO-1) end to end: the real api and worker, a real git
//! repository over `file://` holding the reference module source at two
//! revisions, real Nix deploys, on both engines. Polls with deadlines;
//! never sleeps to synchronise.
//!
//! The target revision refuses `registrations: "open"` (so a deployment
//! stored with it is refused by the preflight) and its deploy effect fails
//! for deployments whose id starts with `broken` (so a wave can fail).

use crate::common;
use crate::sources::{commit, edit, reference_repository, wait_serving};

use common::{binary, command, free_port, start, wait_for, Api, Running};
use reqwest::Method;
use serde_json::{json, Value};
use slipway_jobs::store::{Engine, Q};
use slipway_jobs::test_support::TestDatabase;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

/// How long a whole rollout of these tests may take.
const ROLLOUT: Duration = Duration::from_secs(600);

/// A database, a repository, and the api and a worker on them (also the
/// webhook tests' rollouts, `worker/tests/it/webhooks.rs`).
pub(crate) struct Fleet {
    pub(crate) db: TestDatabase,
    /// A token for every deployment, without the operator claim.
    pub(crate) api: Api,
    /// The same api with an operator token.
    pub(crate) operator: Api,
    /// `file://` URL of the repository.
    url: String,
    /// The repository's folder.
    repo: std::path::PathBuf,
    /// Its first revision (every deployment is submitted at it).
    first: String,
    port: u16,
    _api: Running,
    worker: Option<Running>,
}

fn with_env(mut cmd: Command, url: &str, env: &[(&str, &str)]) -> Command {
    cmd.env("SLIPWAY_ALLOW_PATH_SOURCES", "true").env("SLIPWAY_TRUSTED_SOURCES", url);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

impl Fleet {
    pub(crate) async fn new(engine: Engine, env: &[(&str, &str)]) -> Fleet {
        let db = TestDatabase::new(engine).await;
        let repo = db.path("repo");
        reference_repository(&repo);
        // A deploy of a configuration naming `slowly` takes 12 s at every revision.
        edit(&repo, "core/effects/deploy", "set -u\n", "set -u\ngrep -q slowly \"$CONFIGURATION_FILE\" && sleep 12\n");
        let first = commit(&repo, "slow deploys on request");
        let url = format!("file://{}", repo.display());
        let port = free_port();
        let api_process = start(with_env(command(&binary("slipway-api"), &db, port), &url, env), &db, "api.log");
        let api = Api::connect(&db, port).await;
        let operator = Api { token: Api::operator_token(&db, port), ..api.clone() };
        let mut fleet = Fleet { db, api, operator, url, repo, first, port, _api: api_process, worker: None };
        fleet.start_worker(env, "worker.log");
        wait_serving(&fleet.api, "nix").await;
        fleet
    }

    fn start_worker(&mut self, env: &[(&str, &str)], log: &str) {
        let mut worker = with_env(command(&binary("slipway-worker"), &self.db, self.port), &self.url, env);
        worker.arg("work").env("READY_TIMEOUT", "1s");
        self.worker = Some(start(worker, &self.db, log));
    }

    pub(crate) fn source(&self, pin: &str) -> String {
        format!("git+{}?{pin}", self.url)
    }

    /// Submits `ids` with `config` at the first revision and waits until each is active.
    pub(crate) async fn deployed(&self, ids: &[&str], config: &Value) {
        let body = json!({ "configuration": config, "module_source": self.source(&format!("rev={}", self.first)) });
        for id in ids {
            let (status, answer) =
                self.api.call(Method::PUT, &format!("/deployments/{id}"), Some(&body)).await.unwrap();
            assert_eq!(status, 202, "{answer}");
        }
        for id in ids {
            self.api.wait_state(id, "active", ROLLOUT).await;
        }
    }

    /// The target revision (see the module doc), committed on `main`.
    pub(crate) fn target(&self) -> String {
        edit(
            &self.repo,
            "core/applications/mastodon.nix",
            "types.enum [ \"open\" \"approval\"",
            "types.enum [ \"approval\"",
        );
        edit(
            &self.repo,
            "core/effects/deploy",
            "set -u\n",
            "set -u\ncase \"${DEPLOYMENT_ID:-}\" in broken*) echo \"broken on purpose\" >&2; exit 1 ;; esac\n",
        );
        commit(&self.repo, "the target: registrations cannot be open; broken deployments fail")
    }

    pub(crate) async fn start_rollout(&self, body: &Value) -> Value {
        let (status, rollout) = self.operator.call(Method::POST, "/rollouts", Some(body)).await.unwrap();
        assert_eq!(status, 201, "{rollout}");
        rollout
    }

    /// `GET /rollouts/{id}`, again while the api answers `503` (the database was away).
    pub(crate) async fn rollout(&self, id: &str) -> Value {
        wait_for("the rollout", Duration::from_secs(60), || async {
            let (status, rollout) = self.operator.call(Method::GET, &format!("/rollouts/{id}"), None).await.ok()?;
            if status == 503 {
                return None;
            }
            assert_eq!(status, 200, "{rollout}");
            Some(rollout)
        })
        .await
    }

    /// Waits until rollout `id` is in `state`; the rollout.
    pub(crate) async fn rollout_in(&self, id: &str, state: &str) -> Value {
        wait_for(&format!("rollout {id} to be {state}"), ROLLOUT, || async {
            let rollout = self.rollout(id).await;
            (rollout["state"] == state).then_some(rollout)
        })
        .await
    }

    /// Deployment `id`'s builds with trigger `rollout`, newest first.
    async fn rollout_builds(&self, id: &str) -> Vec<Value> {
        let path = format!("/deployments/{id}/builds?trigger=rollout");
        let (status, page) = self.api.call(Method::GET, &path, None).await.unwrap();
        assert_eq!(status, 200, "{page}");
        page["builds"].as_array().unwrap().clone()
    }
}

/// The demo with only Mastodon (a small system) and its `registrations`.
pub(crate) fn mastodon(registrations: &str) -> Value {
    let mut c = common::demo();
    c["applications"]["peertube"]["enable"] = json!(false);
    c["applications"]["mastodon"]["registrations"] = json!(registrations);
    c
}

/// Mastodon only, with an admin address that makes its deploys slow.
fn slowly() -> Value {
    let mut c = mastodon("approval");
    c["applications"]["mastodon"]["adminEmail"] = json!("slowly@demo.example.org");
    c
}

/// Deployment → its entry of `rollout`.
fn entries(rollout: &Value) -> BTreeMap<String, Value> {
    rollout["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["deployment_id"].as_str().unwrap().to_owned(), e.clone()))
        .collect()
}

/// Unix ms of an api timestamp.
fn ms(v: &Value) -> i64 {
    common::ms_of(v)
}

/// Six deployments in waves of 1, up to 50 % and up to 100 %, the target
/// given by branch: the branch's revision is pinned when the rollout
/// starts and every build deploys it, although the branch moves on right
/// after; the deployment stored with a configuration the target refuses
/// is skipped, named with the reason and counted as a failure (within the
/// budget); each wave starts only after every build of the previous one
/// ended; every other deployment is deployed exactly once.
async fn a_rollout_completes_wave_by_wave_at_the_revision_pinned_when_it_started(engine: Engine) {
    let fleet = Fleet::new(engine, &[]).await;
    let ids = ["ro-1", "ro-2", "ro-3", "ro-4", "ro-5"];
    fleet.deployed(&ids, &mastodon("approval")).await;
    fleet.deployed(&["ro-6"], &mastodon("open")).await;
    let target = fleet.target();

    let body = json!({
        "module_source": fleet.source("ref=main"),
        "deployments": ["ro-1", "ro-2", "ro-3", "ro-4", "ro-5", "ro-6"],
        "waves": [1, "50%", "100%"],
        "max_failures": { "per_wave": 1, "total": 1 },
    });
    let started = fleet.start_rollout(&body).await;
    let pinned = fleet.source(&format!("rev={target}"));
    assert_eq!(started["module_source"], pinned, "{started}");
    // The branch moves on: the rollout keeps the revision it pinned.
    std::fs::write(fleet.repo.join("NOTES"), "a later revision\n").unwrap();
    commit(&fleet.repo, "a later revision");
    let sizes: Vec<u64> = started["waves"].as_array().unwrap().iter().map(|w| w["size"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [1, 2, 3], "{started}");
    let skipped = &entries(&started)["ro-6"];
    assert_eq!(skipped["status"], "skipped", "{started}");
    assert!(skipped["reason"].as_str().unwrap().contains("registrations"), "{skipped}");

    let id = started["id"].as_str().unwrap();
    let done = fleet.rollout_in(id, "completed").await;
    assert_eq!(done["failures"], 1, "{done}");
    let mut ended_by_wave: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    for (deployment, entry) in entries(&done) {
        if deployment == "ro-6" {
            assert_eq!(entry["status"], "skipped", "{done}");
            assert!(fleet.rollout_builds("ro-6").await.is_empty(), "a skipped deployment was deployed");
            continue;
        }
        assert_eq!(entry["status"], "succeeded", "{done}");
        let builds = fleet.rollout_builds(&deployment).await;
        assert_eq!(builds.len(), 1, "{deployment} was deployed {} times by the rollout", builds.len());
        assert_eq!(builds[0]["id"], entry["build_id"]);
        let (_, _, build) = fleet.api.get(&format!("/builds/{}", builds[0]["id"].as_str().unwrap())).await;
        assert_eq!(
            (&build["module_source"], &build["rollout"], &build["trigger"]),
            (&json!(pinned), &json!(id), &json!("rollout"))
        );
        let wave = entry["wave"].as_i64().unwrap();
        ended_by_wave.entry(wave).or_default().push((ms(&build["queued_at"]), ms(&build["finished_at"])));
    }
    for wave in 2..=3 {
        let last_end = ended_by_wave[&(wave - 1)].iter().map(|(_, end)| *end).max().unwrap();
        let first_queued = ended_by_wave[&wave].iter().map(|(queued, _)| *queued).min().unwrap();
        assert!(first_queued >= last_end, "wave {wave} was queued before wave {} ended: {ended_by_wave:?}", wave - 1);
    }
    let (_, _, deployed) = fleet.api.get("/deployments/ro-3").await;
    assert_eq!(deployed["module_source"], pinned, "{deployed}");
}

/// A wave past its failure budget halts the rollout, naming the failed
/// build, and nothing of the later waves is queued.
async fn a_wave_past_its_failure_budget_halts_the_rollout_and_queues_nothing_further(engine: Engine) {
    let fleet = Fleet::new(engine, &[]).await;
    let ids = ["canary", "fine", "broken-1", "later-1", "later-2"];
    fleet.deployed(&ids, &mastodon("approval")).await;
    let target = fleet.target();
    let body = json!({
        "module_source": fleet.source(&format!("rev={target}")),
        "deployments": ids,
        "waves": [1, 2, 2],
        "max_failures": 0,
    });
    let started = fleet.start_rollout(&body).await;
    let id = started["id"].as_str().unwrap();
    let halted = fleet.rollout_in(id, "halted").await;
    let by = entries(&halted);
    assert_eq!(by["canary"]["status"], "succeeded", "{halted}");
    assert_eq!(by["broken-1"]["status"], "failed", "{halted}");
    let broken_build = by["broken-1"]["build_id"].as_str().unwrap();
    assert!(halted["reason"].as_str().unwrap().contains(broken_build), "{halted}");
    assert_eq!(halted["wave"], 2, "{halted}");
    for later in ["later-1", "later-2"] {
        assert_eq!(by[later]["status"], "pending", "{halted}");
        assert!(fleet.rollout_builds(later).await.is_empty(), "{later} was queued after the halt");
    }
    // A halted rollout cannot be resumed.
    let (status, answer) = fleet.operator.call(Method::POST, &format!("/rollouts/{id}/resume"), None).await.unwrap();
    assert_eq!((status, answer["error"].as_str()), (409, Some("rollout_ended")), "{answer}");
    let (status, events) = fleet.operator.call(Method::GET, "/rollouts", None).await.unwrap();
    assert_eq!(status, 200, "{events}");
    assert_eq!(events["rollouts"][0]["id"], id);
    let halts = count(
        &fleet.db,
        &format!("SELECT COUNT(*) AS n FROM rollout_events WHERE rollout_id = '{id}' AND type = 'rollout.halted'"),
    )
    .await;
    assert_eq!(halts, 1);

    // The dashboard's view of it: operators only.
    let page = |token: String| {
        let url = format!("{}/ui/fragments/rollouts/{id}", fleet.operator.base);
        let http = fleet.operator.http.clone();
        async move {
            let r = http.get(&url).bearer_auth(token).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let (status, html) = page(fleet.operator.token.clone()).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains(r#"data-state="halted""#) && html.contains(broken_build), "{html}");
    assert!(html.contains(r#"data-deployment="later-1""#), "{html}");
    assert_eq!(page(fleet.api.token.clone()).await.0, 403);

    // The event stream: every step in order, ending once the rollout ended;
    // resumable with Last-Event-ID; nothing new after the end is a 204.
    let events = fleet.events(id, None).await;
    let types: Vec<&str> = events.iter().map(|(_, t, _)| t.as_str()).collect();
    assert_eq!(
        types,
        [
            "rollout.started",
            "rollout.wave_started",
            "rollout.wave_completed",
            "rollout.wave_started",
            "rollout.wave_completed",
            "rollout.halted"
        ],
        "{events:?}"
    );
    assert!(events.windows(2).all(|w| w[0].0 < w[1].0), "ids do not increase: {events:?}");
    assert_eq!(events[5].2["failed_builds"], json!([broken_build]), "{events:?}");
    assert_eq!((&events[3].2["wave"], &events[3].2["rollout_id"]), (&json!(2), &json!(id)));
    let resumed = fleet.events(id, Some(events[3].0)).await;
    assert_eq!(resumed, events[4..].to_vec());
    let url = format!("{}/rollouts/{id}/events", fleet.operator.base);
    let r = fleet
        .operator
        .http
        .get(&url)
        .bearer_auth(&fleet.operator.token)
        .header("Last-Event-ID", events[5].0.to_string());
    assert_eq!(r.send().await.unwrap().status().as_u16(), 204);
}

impl Fleet {
    /// The whole event stream of ended rollout `id` (after `last`): (id, type, data).
    async fn events(&self, id: &str, last: Option<i64>) -> Vec<(i64, String, Value)> {
        let url = format!("{}/rollouts/{id}/events", self.operator.base);
        let mut r = self.operator.http.get(&url).bearer_auth(&self.operator.token);
        if let Some(last) = last {
            r = r.header("Last-Event-ID", last.to_string());
        }
        let answer =
            tokio::time::timeout(Duration::from_secs(60), async { r.send().await.unwrap().text().await.unwrap() })
                .await
                .expect("the stream of an ended rollout ends");
        let mut out = Vec::new();
        for block in answer.split("\n\n") {
            let field =
                |name: &str| block.lines().find_map(|l| l.strip_prefix(name).map(|v| v.trim_start().to_owned()));
            if let (Some(n), Some(kind), Some(data)) = (field("id:"), field("event:"), field("data:")) {
                out.push((n.parse().unwrap(), kind, serde_json::from_str(&data).unwrap()));
            }
        }
        out
    }
}

/// A count from the test's database.
pub(crate) async fn count(db: &TestDatabase, sql: &str) -> i64 {
    let keys = BTreeMap::from([("DATABASE_URL".to_owned(), db.url.clone())]);
    let store = slipway_jobs::store::open(&slipway_jobs::config::Config::from_keys(&keys).unwrap()).await.unwrap();
    let n = Q::new(sql).fetch_one(&mut store.acquire().await.unwrap()).await.unwrap().int("n").unwrap();
    store.close().await;
    n
}

/// Hostile and malformed requests are refused with their codes, writing nothing.
async fn a_malformed_or_hostile_rollout_request_is_refused_and_writes_nothing(engine: Engine) {
    let fleet = Fleet::new(engine, &[("ROLLOUT_MAX_DEPLOYMENTS", "50")]).await;
    fleet.deployed(&["one"], &mastodon("approval")).await;
    let source = fleet.source(&format!("rev={}", fleet.first));
    let refused = |body: Value, code: &'static str| {
        let op = &fleet.operator;
        async move {
            let (status, answer) = op.call(Method::POST, "/rollouts", Some(&body)).await.unwrap();
            assert_eq!(answer["error"], code, "{body}: {answer}");
            assert_eq!(status, 400, "{answer}");
            answer
        }
    };
    refused(json!({ "module_source": source, "deployments": [], "waves": [1] }), "invalid_rollout").await;
    let unknown = refused(
        json!({ "module_source": source, "deployments": ["one", "nope"], "waves": [2] }),
        "unknown_deployments",
    )
    .await;
    assert_eq!(unknown["details"]["deployments"], json!(["nope"]));
    refused(json!({ "module_source": source, "deployments": ["one"], "waves": [2] }), "invalid_rollout").await;
    refused(json!({ "module_source": source, "deployments": ["one"], "waves": ["0%"] }), "invalid_rollout").await;
    refused(json!({ "module_source": source, "deployments": ["one", "one"], "waves": [2] }), "invalid_rollout").await;
    // 100k ids fit in the 1 MiB body; ROLLOUT_MAX_DEPLOYMENTS refuses them before any is looked up.
    let many: Vec<String> = (0..100_000).map(|i| format!("d{i}")).collect();
    let body = json!({ "module_source": source, "deployments": many, "waves": ["100%"] });
    let answer = refused(body, "too_many_deployments").await;
    assert_eq!((&answer["details"]["count"], &answer["details"]["limit"]), (&json!(100_000), &json!(50)));
    let over: Vec<String> = (0..51).map(|i| format!("d{i}")).collect();
    refused(json!({ "module_source": source, "deployments": over, "waves": ["100%"] }), "too_many_deployments").await;
    let (status, answer) = fleet
        .api
        .call(
            Method::POST,
            "/rollouts",
            Some(&json!({ "module_source": source, "deployments": ["one"], "waves": [1] })),
        )
        .await
        .unwrap();
    assert_eq!((status, answer["error"].as_str()), (403, Some("forbidden")), "{answer}");
    for path in ["/rollouts", "/rollouts/rollout-x"] {
        let (status, _) = fleet.api.call(Method::GET, path, None).await.unwrap();
        assert_eq!(status, 403, "{path}");
    }
    assert_eq!(count(&fleet.db, "SELECT COUNT(*) AS n FROM rollouts").await, 0);
}

impl Fleet {
    /// Replaces the worker with one that serves `queues`.
    fn replace_worker(&mut self, env: &[(&str, &str)], log: &str) {
        self.worker = None;
        self.start_worker(env, log);
    }

    /// A front-end's submit of `config` to `id` at the first revision; the build id.
    async fn submit(&self, id: &str, config: &Value) -> String {
        let body = json!({ "configuration": config, "module_source": self.source(&format!("rev={}", self.first)) });
        let (status, answer) = self.api.call(Method::PUT, &format!("/deployments/{id}"), Some(&body)).await.unwrap();
        assert_eq!(status, 202, "{answer}");
        answer["build_id"].as_str().unwrap().to_owned()
    }

    /// Waits until rollout `id`'s entry of `deployment` is `status`; the rollout.
    async fn entry_is(&self, id: &str, deployment: &str, status: &str) -> Value {
        wait_for(&format!("{deployment} to be {status} in {id}"), ROLLOUT, || async {
            let rollout = self.rollout(id).await;
            (entries(&rollout)[deployment]["status"] == status).then_some(rollout)
        })
        .await
    }

    async fn control(&self, id: &str, what: &str) -> (u16, Value) {
        self.operator.call(Method::POST, &format!("/rollouts/{id}/{what}"), None).await.unwrap()
    }

    /// Every listed deployment has exactly one rollout build, and it succeeded.
    async fn deployed_once(&self, rollout: &Value, ids: &[&str]) {
        let by = entries(rollout);
        for id in ids {
            let builds = self.rollout_builds(id).await;
            assert_eq!(builds.len(), 1, "{id} has {} rollout builds: {builds:?}", builds.len());
            assert_eq!(builds[0]["status"], "succeeded", "{builds:?}");
            assert_eq!(
                (&by[*id]["status"], &by[*id]["build_id"]),
                (&json!("succeeded"), &builds[0]["id"]),
                "{rollout}"
            );
        }
    }
}

/// A front-end's submit during a rollout wins: one that supersedes the
/// rollout's queued build, and one to a deployment of a later wave before
/// its wave is queued, each leave the deployment `overridden`, not failed
/// (the rollout completes with a failure budget of 0), and the rollout
/// queues nothing for the second.
async fn a_front_end_submit_during_a_rollout_wins_and_is_recorded_as_overridden(engine: Engine) {
    let fleet = Fleet::new(engine, &[]).await;
    let ids = ["d-a", "d-b", "d-c"];
    fleet.deployed(&ids, &mastodon("approval")).await;
    let target = fleet.target();
    // d-a is busy with a slow deploy, so the rollout's build of it waits its turn (ST-2).
    let slow = fleet.submit("d-a", &slowly()).await;
    wait_for("the slow deploy to run", ROLLOUT, || async {
        (fleet.api.get(&format!("/builds/{slow}")).await.2["status"] == "running").then_some(())
    })
    .await;
    let body = json!({ "module_source": fleet.source(&format!("rev={target}")), "deployments": ids, "waves": [1, 2] });
    let id = fleet.start_rollout(&body).await["id"].as_str().unwrap().to_owned();
    let queued = fleet.entry_is(&id, "d-a", "queued").await;
    let superseded = entries(&queued)["d-a"]["build_id"].as_str().unwrap().to_owned();
    let later = fleet.submit("d-c", &mastodon("closed")).await;
    let newer = fleet.submit("d-a", &mastodon("closed")).await;
    let done = fleet.rollout_in(&id, "completed").await;
    let by = entries(&done);
    assert_eq!((&by["d-a"]["status"], &by["d-c"]["status"]), (&json!("overridden"), &json!("overridden")), "{done}");
    assert_eq!(done["failures"], 0, "{done}");
    let (_, _, old) = fleet.api.get(&format!("/builds/{superseded}")).await;
    assert_eq!(old["status"], "superseded", "{old}");
    fleet.deployed_once(&done, &["d-b"]).await;
    assert!(fleet.rollout_builds("d-c").await.is_empty(), "the rollout deployed over a newer submit");
    for build in [newer, later] {
        let b = wait_for("the front-end's build to end", ROLLOUT, || async {
            let (_, _, b) = fleet.api.get(&format!("/builds/{build}")).await;
            (b["status"] == "succeeded").then_some(b)
        })
        .await;
        assert_eq!(b["trigger"], "submit", "{b}");
    }
}

/// Pause holds the next wave while the builds already queued run; a
/// second pause changes nothing; resume goes on; cancel during the pause
/// between waves queues nothing more, marks the deployments not reached
/// `cancelled`, and a cancelled rollout cannot be resumed.
async fn a_rollout_pauses_resumes_and_cancels(engine: Engine) {
    let fleet = Fleet::new(engine, &[]).await;
    let ids = ["p-1", "p-2", "p-3", "p-4"];
    fleet.deployed(&ids[1..], &mastodon("approval")).await;
    // The canary deploys slowly, so the pause lands while its build runs.
    fleet.deployed(&ids[..1], &slowly()).await;
    let target = fleet.target();
    let body = json!({
        "module_source": fleet.source(&format!("rev={target}")),
        "deployments": ids,
        "waves": [1, 1, 2],
        "pause": "1h",
    });
    let id = fleet.start_rollout(&body).await["id"].as_str().unwrap().to_owned();
    fleet.entry_is(&id, "p-1", "queued").await;
    for _ in 0..2 {
        let (status, paused) = fleet.control(&id, "pause").await;
        assert_eq!((status, &paused["state"]), (200, &json!("paused")), "{paused}");
    }
    // The build queued before the pause runs to its end; nothing more is queued.
    let build = entries(&fleet.rollout(&id).await)["p-1"]["build_id"].as_str().unwrap().to_owned();
    wait_for("the canary's build to end", ROLLOUT, || async {
        (fleet.api.get(&format!("/builds/{build}")).await.2["status"] == "succeeded").then_some(())
    })
    .await;
    let paused = fleet.rollout(&id).await;
    assert_eq!((&paused["state"], &paused["wave"]), (&json!("paused"), &json!(1)), "{paused}");
    for later in &ids[1..] {
        assert!(fleet.rollout_builds(later).await.is_empty(), "{later} was queued while paused");
    }
    let (status, resumed) = fleet.control(&id, "resume").await;
    assert_eq!((status, &resumed["state"]), (200, &json!("running")), "{resumed}");
    // Wave 1 is judged; wave 2 waits out the pause between waves.
    wait_for("wave 2 to start", ROLLOUT, || async { (fleet.rollout(&id).await["wave"] == 2).then_some(()) }).await;
    let (status, cancelled) = fleet.control(&id, "cancel").await;
    assert_eq!((status, &cancelled["state"]), (200, &json!("cancelled")), "{cancelled}");
    let by = entries(&cancelled);
    for later in &ids[1..] {
        assert_eq!(by[*later]["status"], "cancelled", "{cancelled}");
        assert!(fleet.rollout_builds(later).await.is_empty(), "{later} was queued");
    }
    let (status, answer) = fleet.control(&id, "resume").await;
    assert_eq!((status, answer["error"].as_str()), (409, Some("rollout_ended")), "{answer}");
    fleet.deployed_once(&cancelled, &["p-1"]).await;
}

/// A worker killed (abort, as `kill -9`) in the middle of queuing a wave,
/// before and after the commit of a deployment's build, and a database
/// outage mid-wave (PostgreSQL): the rollout resumes and every deployment
/// is deployed exactly once.
async fn a_rollout_resumes_after_a_worker_crash_mid_wave_deploying_each_deployment_once(engine: Engine) {
    let mut fleet = Fleet::new(engine, &[("SLIPWAY_HEARTBEAT", "1")]).await;
    let ids = ["k-1", "k-2", "k-3", "k-4", "k-5", "k-6"];
    fleet.deployed(&ids, &mastodon("approval")).await;
    let target = fleet.target();
    let source = fleet.source(&format!("rev={target}"));
    for (n, point) in ["rollout_build_uncommitted", "rollout_build_queued"].iter().enumerate() {
        fleet.replace_worker(&[("SLIPWAY_HEARTBEAT", "1"), ("SLIPWAY_FAILPOINTS", point)], &format!("crash-{n}.log"));
        let started =
            fleet.start_rollout(&json!({ "module_source": source, "deployments": ids, "waves": [3, 3] })).await;
        let id = started["id"].as_str().unwrap().to_owned();
        let crashed = fleet.worker.take().unwrap();
        let log = fleet.db.path(&format!("crash-{n}.log"));
        let status = common::wait_exit(crashed, "the worker to crash at the failpoint", ROLLOUT, &log).await;
        assert!(!status.success(), "{status}");
        fleet.start_worker(&[("SLIPWAY_HEARTBEAT", "1")], &format!("after-crash-{n}.log"));
        if engine == Engine::Postgres && n == 1 {
            // And the database goes away mid-wave, until the api answers 503 for it.
            fleet.entry_is(&id, "k-4", "queued").await;
            assert!(fleet.db.accept_connections(false).await > 0);
            wait_for("the api to see the outage", ROLLOUT, || async {
                let r = fleet.operator.call(Method::GET, &format!("/rollouts/{id}"), None).await.ok()?;
                (r.0 == 503).then_some(())
            })
            .await;
            fleet.db.accept_connections(true).await;
        }
        let done = fleet.rollout_in(&id, "completed").await;
        for deployment in ids {
            assert_eq!(entries(&done)[deployment]["status"], "succeeded", "{done}");
            let sql = format!(
                "SELECT COUNT(*) AS n FROM builds WHERE deployment_id = '{deployment}' AND trigger_kind = 'rollout' \
                 AND provenance LIKE '%\"rollout\":\"{id}\"%'"
            );
            assert_eq!(count(&fleet.db, &sql).await, 1, "{deployment} was not deployed exactly once by {id}");
        }
    }
}

/// The headline: 30 deployments in three waves (3 canaries, up to 50 %,
/// the rest), one deployment of the second wave broken, a budget of 0: the
/// canaries and the second wave's other deployments are deployed once each
/// at the pinned revision, the rollout halts after the second wave naming
/// the broken build, and none of the third wave's 15 is queued.
async fn thirty_deployments_in_three_waves_halt_at_the_wave_with_a_broken_deployment(engine: Engine) {
    let fleet = Fleet::new(engine, &[("BUILD_SLOTS", "6")]).await;
    let ids: Vec<String> =
        (1..=30).map(|n| if n == 7 { "broken-07".to_owned() } else { format!("fleet-{n:02}") }).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    fleet.deployed(&refs, &mastodon("approval")).await;
    let target = fleet.target();
    let body = json!({
        "module_source": fleet.source("ref=main"),
        "deployments": ids,
        "waves": [3, "50%", "100%"],
    });
    let started = fleet.start_rollout(&body).await;
    let sizes: Vec<u64> = started["waves"].as_array().unwrap().iter().map(|w| w["size"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [3, 12, 15], "{started}");
    let id = started["id"].as_str().unwrap();
    let halted = fleet.rollout_in(id, "halted").await;
    let by = entries(&halted);
    let broken = by["broken-07"]["build_id"].as_str().unwrap();
    assert_eq!(by["broken-07"]["status"], "failed", "{halted}");
    assert!(halted["reason"].as_str().unwrap().contains(broken), "{halted}");
    let pinned = fleet.source(&format!("rev={target}"));
    for (n, deployment) in refs.iter().enumerate() {
        let builds = fleet.rollout_builds(deployment).await;
        if n < 15 {
            assert_eq!(builds.len(), 1, "{deployment}: {builds:?}");
            if *deployment != "broken-07" {
                assert_eq!(by[*deployment]["status"], "succeeded", "{halted}");
                let (_, _, d) = fleet.api.get(&format!("/deployments/{deployment}")).await;
                assert_eq!(d["module_source"], pinned, "{d}");
            }
        } else {
            assert!(builds.is_empty(), "{deployment} of the third wave was queued: {builds:?}");
            assert_eq!(by[*deployment]["status"], "pending", "{halted}");
        }
    }
}

impl Fleet {
    /// `POST /rollouts` of `body` with `Idempotency-Key: key`: status,
    /// `Idempotency-Replayed`, body.
    async fn start_with_key(&self, key: &str, body: &Value) -> (u16, Option<String>, Value) {
        let url = format!("{}/rollouts", self.operator.base);
        let r = self
            .operator
            .http
            .post(&url)
            .bearer_auth(&self.operator.token)
            .header("Idempotency-Key", format!("\"{key}\""))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let replayed = r.headers().get("idempotency-replayed").map(|v| v.to_str().unwrap().to_owned());
        (status, replayed, r.json().await.unwrap())
    }
}

/// IK-1 on `POST /rollouts`: a start retried with the same
/// `Idempotency-Key` (its answer lost) answers the first answer, the same
/// rollout id, and starts one rollout, which deploys its deployment once;
/// the same key with another body is `422 idempotency_key_reused` and
/// starts nothing.
async fn a_rollout_start_retried_with_its_idempotency_key_starts_one_rollout(engine: Engine) {
    let fleet = Fleet::new(engine, &[]).await;
    fleet.deployed(&["ik-1"], &mastodon("approval")).await;
    fleet.target();
    let body = json!({ "module_source": fleet.source("ref=main"), "deployments": ["ik-1"], "waves": [1] });
    let key = "01JD7Q0R6Q3W6Y1B8Z2M4N5P7S";
    let (status, replayed, first) = fleet.start_with_key(key, &body).await;
    assert_eq!((status, replayed), (201, None), "{first}");
    let (status, replayed, again) = fleet.start_with_key(key, &body).await;
    assert_eq!((status, replayed.as_deref()), (201, Some("true")), "{again}");
    assert_eq!(again["id"], first["id"], "the retry answered another rollout: {again}");
    assert_eq!(again, first);
    assert_eq!(count(&fleet.db, "SELECT COUNT(*) AS n FROM rollouts").await, 1);

    let other = json!({ "module_source": fleet.source("ref=main"), "deployments": ["ik-1"], "waves": ["100%"] });
    let (status, _, refused) = fleet.start_with_key(key, &other).await;
    assert_eq!((status, refused["error"].as_str()), (422, Some("idempotency_key_reused")), "{refused}");
    assert_eq!(count(&fleet.db, "SELECT COUNT(*) AS n FROM rollouts").await, 1);

    let done = fleet.rollout_in(first["id"].as_str().unwrap(), "completed").await;
    fleet.deployed_once(&done, &["ik-1"]).await;
}

slipway_jobs::on_both_engines!(
    a_rollout_start_retried_with_its_idempotency_key_starts_one_rollout,
    a_rollout_completes_wave_by_wave_at_the_revision_pinned_when_it_started,
    a_wave_past_its_failure_budget_halts_the_rollout_and_queues_nothing_further,
    a_malformed_or_hostile_rollout_request_is_refused_and_writes_nothing,
    a_front_end_submit_during_a_rollout_wins_and_is_recorded_as_overridden,
    a_rollout_pauses_resumes_and_cancels,
    a_rollout_resumes_after_a_worker_crash_mid_wave_deploying_each_deployment_once,
    thirty_deployments_in_three_waves_halt_at_the_wave_with_a_broken_deployment,
);

/// The driver needs no other queue: with the `rollouts` queue served by a
/// worker of its own (`SLIPWAY_QUEUES=rollouts`) and every other queue by
/// another, a rollout runs its waves to the end.
#[tokio::test]
async fn a_worker_serving_only_the_rollouts_queue_drives_a_rollout() {
    let mut fleet = Fleet::new(Engine::Sqlite, &[]).await;
    let ids = ["s-1", "s-2", "s-3"];
    fleet.deployed(&ids, &mastodon("approval")).await;
    let target = fleet.target();
    fleet.replace_worker(&[("SLIPWAY_QUEUES", "builds,nix,callbacks,readiness,maintenance")], "others.log");
    let mut driver = with_env(command(&binary("slipway-worker"), &fleet.db, fleet.port), &fleet.url, &[]);
    driver.arg("work").env("SLIPWAY_QUEUES", "rollouts");
    let _driver = start(driver, &fleet.db, "rollouts-only.log");
    let body =
        json!({ "module_source": fleet.source(&format!("rev={target}")), "deployments": ids, "waves": [1, 1, 1] });
    let id = fleet.start_rollout(&body).await["id"].as_str().unwrap().to_owned();
    let done = fleet.rollout_in(&id, "completed").await;
    fleet.deployed_once(&done, &ids).await;
    let log = std::fs::read_to_string(fleet.db.path("rollouts-only.log")).unwrap();
    assert!(log.contains("rollout build queued"), "the rollouts-only worker did not drive it: {log}");
}
