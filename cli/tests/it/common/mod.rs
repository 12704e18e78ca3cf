//! Helpers for the CLI's tests: the real `slipway-api` and `slipway-worker`
//! binaries on a fresh database and a free loopback port, tokens minted by
//! `slipway-api token`, and runs of the built `slipway` binary with a
//! deadline. Processes are killed when the test ends, however it ends.

pub mod pty;

use serde_json::Value;
use slipway_jobs::store::Engine;
pub use slipway_jobs::test_support::{free_port, newest, repo, start, wait_for, Running};
use slipway_jobs::test_support::{slipway_command, TestDatabase};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The api's token secret in these tests.
pub const SECRET: &str = "cli-end-to-end-secret-of-32-bytes-or-more";

/// How long one run of `slipway` may take (a real Nix deploy included).
pub const RUN_DEADLINE: Duration = Duration::from_secs(300);

/// `examples/demo.json`, the demo deployment's configuration.
pub fn demo_file() -> PathBuf {
    repo().join("examples/demo.json")
}

/// A binary of the workspace beside `slipway`, checked to be newer than its
/// sources (`cargo test -p slipway-cli` builds only the CLI).
pub fn binary(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_slipway")).with_file_name(name);
    let hint = "build the workspace first: cargo build --workspace";
    let built = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| panic!("{} is missing: {hint}", path.display()));
    let crate_dir = if name == "slipway-api" { "api/src" } else { "worker/src" };
    for sources in [crate_dir, "jobs/src", "migrations"] {
        assert!(built >= newest(&repo().join(sources)), "{} is older than {sources}: {hint}", path.display());
    }
    path
}

/// A command for `bin` on the test's database, the api on `port`.
pub fn command(bin: &Path, db: &TestDatabase, port: u16) -> Command {
    slipway_command(bin, db, port, SECRET)
}

/// An api and a worker on a fresh SQLite database; the worker deploys
/// from `source` (default: the built-in module source, `nix/`).
pub struct Fleet {
    pub db: TestDatabase,
    pub url: String,
    port: u16,
    api_env: Vec<(String, String)>,
    _api: Running,
    _worker: Option<Running>,
}

/// Waits until the api on `port` serves requests: it listens before its
/// database is open and answers `503` until then, so listening is not enough.
async fn serving(what: &str, port: u16) {
    slipway_jobs::callback::install_crypto_provider();
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/healthz");
    wait_for(&format!("{what} to serve requests"), Duration::from_secs(60), || {
        let request = client.get(&url).send();
        async move { request.await.is_ok_and(|r| r.status().is_success()).then_some(()) }
    })
    .await;
}

impl Fleet {
    pub async fn start(source: Option<&Path>) -> Self {
        Self::start_with(source, &[], true).await
    }

    /// An api with the settings `api_env` (`QUEUE_SIZE`, …), and a worker
    /// deploying from `source` when `worker`.
    pub async fn start_with(source: Option<&Path>, api_env: &[(&str, &str)], worker: bool) -> Self {
        let db = TestDatabase::new(Engine::Sqlite).await;
        let port = free_port();
        let api_env: Vec<(String, String)> = api_env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut api = command(&binary("slipway-api"), &db, port);
        api.envs(api_env.iter().map(|(k, v)| (k, v)));
        let api = start(api, &db, "api.log");
        let worker = worker.then(|| {
            let mut worker = command(&binary("slipway-worker"), &db, port);
            worker.arg("work");
            if let Some(source) = source {
                worker.env("SLIPWAY_DEFAULT_SOURCE_DIR", source);
            }
            start(worker, &db, "worker.log")
        });
        let url = format!("http://127.0.0.1:{port}");
        let fleet = Self { db, url, port, api_env, _api: api, _worker: worker };
        serving("the api", fleet.port).await;
        fleet
    }

    /// An api and a worker on a fresh `engine` database, both with `env`
    /// (a worker fetching `file://` sources needs the same allowlist).
    pub async fn start_both(engine: Engine, env: &[(&str, &str)]) -> Self {
        let db = TestDatabase::new(engine).await;
        let port = free_port();
        let api_env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut api = command(&binary("slipway-api"), &db, port);
        api.envs(api_env.iter().map(|(k, v)| (k, v)));
        let api = start(api, &db, "api.log");
        let mut worker = command(&binary("slipway-worker"), &db, port);
        worker.arg("work").env("READY_TIMEOUT", "1s").envs(api_env.iter().map(|(k, v)| (k, v)));
        let worker = start(worker, &db, "worker.log");
        let url = format!("http://127.0.0.1:{port}");
        let fleet = Self { db, url, port, api_env, _api: api, _worker: Some(worker) };
        serving("the api", fleet.port).await;
        fleet
    }

    /// Kills the api (SIGKILL), leaves it down for `outage` (the length of
    /// the scenario, not a wait for anything), then starts another on the
    /// same port and database, returning once it listens.
    pub async fn restart_api(&mut self, outage: Duration) {
        self._api.kill();
        tokio::time::sleep(outage).await;
        let mut api = command(&binary("slipway-api"), &self.db, self.port);
        api.envs(self.api_env.iter().map(|(k, v)| (k, v)));
        self._api = start(api, &self.db, "api.log");
        serving("the restarted api", self.port).await;
    }

    /// A token from `slipway-api token`: for every deployment, with the
    /// operator claim when `operator`.
    pub fn token(&self, operator: bool) -> String {
        self.token_for(operator, "1h")
    }

    /// A token like [`Fleet::token`]'s that expires after `ttl` (`5s`, `1h`).
    pub fn token_for(&self, operator: bool, ttl: &str) -> String {
        let mut cmd = command(&binary("slipway-api"), &self.db, self.port);
        cmd.args(["token", "--deployments", "*", "--ttl", ttl]);
        if operator {
            cmd.arg("--operator");
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "slipway-api token: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// Runs `slipway args…` against this fleet with `token`.
    pub async fn slipway(&self, token: &str, args: &[&str]) -> Out {
        slipway(&[("SLIPWAY_URL", &self.url), ("SLIPWAY_TOKEN", token)], args).await
    }

    /// `slipway args…` against this fleet with `token`, not yet started
    /// (standard input closed, output for the caller to set).
    pub fn command(&self, token: &str, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_slipway"));
        cmd.args(args).env("SLIPWAY_URL", &self.url).env("SLIPWAY_TOKEN", token).stdin(Stdio::null());
        cmd
    }
}

/// What a run of `slipway` gave.
#[derive(Debug)]
pub struct Out {
    /// The exit code.
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    /// Standard output as one JSON document; panics naming the run otherwise.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:#?}"))
    }

    /// Standard output as JSON lines.
    pub fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("a line is not JSON ({e}): {l:?} in {self:#?}")))
            .collect()
    }
}

/// Runs the built `slipway` with `env` (and no other `SLIPWAY_*`), within [`RUN_DEADLINE`].
pub async fn slipway(env: &[(&str, &str)], args: &[&str]) -> Out {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_slipway"));
    cmd.env_remove("SLIPWAY_URL").env_remove("SLIPWAY_TOKEN").args(args).stdin(Stdio::null()).kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(RUN_DEADLINE, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("slipway {args:?} did not end within {RUN_DEADLINE:?}"))
        .unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A built-in module source whose deploy fails, after a minute for a
/// deployment called `slow` (to be cancelled while it runs) and at once for
/// any other; its destroy succeeds.
pub fn failing_source(root: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let effects = root.join("core/effects");
    std::fs::create_dir_all(&effects).unwrap();
    std::fs::write(root.join("core/default.nix"), "{ provider ? {} }: { }\n").unwrap();
    let deploy = r#"#!/bin/sh
echo "deploying $BUILD_ID"
case "$BUILD_ID" in
  slow.*) echo "a long deploy starts"; sleep 60 ;;
esac
echo "this deploy fails on purpose" >&2
exit 1
"#;
    for (name, body) in [("deploy", deploy), ("destroy", "#!/bin/sh\nexit 0\n")] {
        let path = effects.join(name);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// A built-in module source whose deploy prints `body` (shell) and then
/// succeeds, reporting one node `web`; its destroy succeeds.
pub fn printing_source(root: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let effects = root.join("core/effects");
    std::fs::create_dir_all(&effects).unwrap();
    std::fs::write(root.join("core/default.nix"), "{ provider ? {} }: { }\n").unwrap();
    let deploy = format!(
        "#!/bin/sh\nset -eu\n{body}\ncat > \"$SBOM_OUT_DIR/nodes.json\" <<'EOF'\n\
         {{\"nodes\": [{{\"name\": \"web\", \"dnsNames\": [], \"outcome\": \"deployed\", \"system\": null, \"error\": null}}]}}\nEOF\n"
    );
    for (name, body) in [("deploy", deploy.as_str()), ("destroy", "#!/bin/sh\nexit 0\n")] {
        let path = effects.join(name);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}
