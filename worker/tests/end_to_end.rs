//! End to end: the real `slipway-api` and `slipway-worker` processes on a
//! temporary SQLite file, real HTTP over loopback, real Nix builds of the
//! reference source. Polls with deadlines; never sleeps to synchronise.

use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::TestDatabase;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SECRET: &str = "end-to-end-secret-at-least-32-bytes";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn binary(name: &str) -> PathBuf {
    let worker = PathBuf::from(env!("CARGO_BIN_EXE_slipway-worker"));
    let path = worker.with_file_name(name);
    assert!(path.exists(), "{} is missing: build the workspace first (cargo build --workspace)", path.display());
    path
}

/// A child process killed when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn command(bin: &Path, db: &TestDatabase, port: u16) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env("DATABASE_URL", &db.url)
        .env("SLIPWAY_STATE_DIR", db.path("state"))
        .env("SLIPWAY_BIND", format!("127.0.0.1:{port}"))
        .env("SLIPWAY_JWT_SECRET", SECRET)
        .env("SLIPWAY_DEFAULT_SOURCE_DIR", repo().join("nix"))
        .env("SLIPWAY_HEARTBEAT", "2")
        .env_remove("SLIPWAY_CONFIG");
    cmd
}

async fn wait_for<F, Fut>(what: &str, deadline: Duration, mut check: F) -> Value
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<Value>>,
{
    let start = Instant::now();
    let mut every = Duration::from_millis(20);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < deadline, "timed out after {deadline:?} waiting for {what}");
        tokio::time::sleep(every).await;
        every = (every * 2).min(Duration::from_millis(250));
    }
}

async fn the_example_deploys_with_an_sbom_per_node_and_destroys_to_idle(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let port = free_port();
    let log = |name: &str| Stdio::from(std::fs::File::create(db.path(name)).unwrap());
    let _api = Running(command(&binary("slipway-api"), &db, port).stderr(log("api.log")).spawn().unwrap());
    let _worker =
        Running(command(&binary("slipway-worker"), &db, port).arg("work").stderr(log("worker.log")).spawn().unwrap());
    let out = command(&binary("slipway-api"), &db, port)
        .args(["token", "--deployments", "demo", "--ttl", "10m"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let token = String::from_utf8(out.stdout).unwrap().trim().to_owned();

    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    wait_for("the api to serve", Duration::from_secs(30), || async {
        let r = http.get(format!("{base}/healthz")).send().await.ok()?;
        r.status().is_success().then_some(json!(null))
    })
    .await;

    let get = |path: String| {
        let (http, token, base) = (http.clone(), token.clone(), base.clone());
        async move {
            let r = http.get(format!("{base}{path}")).bearer_auth(token).send().await.unwrap();
            let status = r.status().as_u16();
            let ctype = r.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
            (status, ctype, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let state_is = |want: &'static str| {
        move || async move {
            let (_, _, d) = get("/deployments/demo".into()).await;
            assert_ne!(d["state"], "failed", "the build failed: {d}");
            (d["state"] == want).then_some(d)
        }
    };

    let demo: Value =
        serde_json::from_str(&std::fs::read_to_string(repo().join("examples/demo.json")).unwrap()).unwrap();
    let r = http
        .put(format!("{base}/deployments/demo"))
        .bearer_auth(&token)
        .json(&json!({ "configuration": demo }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    let accepted: Value = r.json().await.unwrap();

    let deployment = wait_for("the deployment to become active", Duration::from_secs(120), state_is("active")).await;
    assert_eq!(deployment["last_build"]["id"], accepted["build_id"]);
    assert_eq!(deployment["deployed_instances"], deployment["instances"]);

    let (status, _, build) = get(format!("/builds/{}", accepted["build_id"].as_str().unwrap())).await;
    assert_eq!(status, 200);
    assert!(!build["log"].as_str().unwrap().is_empty());
    let nodes: Vec<String> =
        build["report"]["nodes"].as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap().to_owned()).collect();
    assert!(!nodes.is_empty());

    let (_, _, list) = get("/sbom-list/demo".into()).await;
    let listed: Vec<&str> = list["nodes"].as_array().unwrap().iter().map(|n| n["node"].as_str().unwrap()).collect();
    assert_eq!(listed.len(), nodes.len(), "{list}");
    for node in &nodes {
        assert!(listed.contains(&node.as_str()), "{node} missing from {list}");
        let (status, ctype, sbom) = get(format!("/sbom/demo?node={node}")).await;
        assert_eq!(status, 200, "{sbom}");
        assert_eq!(ctype, "application/vnd.cyclonedx+json");
        assert_eq!(sbom["bomFormat"], "CycloneDX");
        assert!(!sbom["components"].as_array().unwrap().is_empty(), "{node} has no components");
    }

    let r = http.delete(format!("{base}/deployments/demo")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 202);
    wait_for("the deployment to become idle", Duration::from_secs(120), state_is("idle")).await;
    let (_, _, list) = get("/sbom-list/demo".into()).await;
    assert_eq!(list["nodes"], json!([]));
    for node in &nodes {
        let (status, _, body) = get(format!("/sbom/demo?node={node}")).await;
        assert_eq!(status, 404, "{body}");
    }
}

slipway_jobs::on_both_engines!(the_example_deploys_with_an_sbom_per_node_and_destroys_to_idle);
