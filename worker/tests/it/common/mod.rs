//! Helpers for tests that run the real binaries: processes killed when the
//! test ends, a free loopback port, polling with a deadline, and a small
//! HTTP client for the api.

use serde_json::{json, Value};
pub use slipway_jobs::test_support::{demo, free_port, newest, poll, repo, start, wait_for, Running};
use slipway_jobs::test_support::{slipway_command, TestDatabase};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub const SECRET: &str = "end-to-end-secret-at-least-32-bytes";

/// A binary of the workspace. `cargo test -p slipway-worker` builds only the
/// worker, so the api binary is checked for being older than its sources.
pub fn binary(name: &str) -> PathBuf {
    let worker = PathBuf::from(env!("CARGO_BIN_EXE_slipway-worker"));
    let path = worker.with_file_name(name);
    let hint = "build the workspace first: cargo build --workspace";
    let built = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| panic!("{} is missing: {hint}", path.display()));
    // Only the api binary can be stale (cargo rebuilt the worker for this
    // test); it is built from the api's sources and the crates it uses.
    if name == "slipway-api" {
        for sources in ["api/src", "jobs/src", "migrations"] {
            assert!(built >= newest(&repo().join(sources)), "{} is older than {sources}: {hint}", path.display());
        }
        static FAILPOINTS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let armed = *FAILPOINTS.get_or_init(|| {
            let bytes = std::fs::read(&path).unwrap();
            bytes.windows(b"slipway: failpoint".len()).any(|w| w == b"slipway: failpoint")
        });
        assert!(armed, "{} has no failpoints (a release build?): {hint}", path.display());
    }
    path
}

/// A command for `bin` on the test's database, with the api on `port`.
pub fn command(bin: &Path, db: &TestDatabase, port: u16) -> Command {
    slipway_command(bin, db, port, SECRET)
}

/// An error and its sources, `: `-separated (reqwest's own message omits the cause).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text = format!("{text}: {e}");
        source = e.source();
    }
    text
}

/// The api as a front-end sees it.
#[derive(Clone)]
pub struct Api {
    pub http: reqwest::Client,
    pub base: String,
    pub token: String,
}

impl Api {
    /// Mints a token for every deployment and waits for `/healthz`.
    pub async fn connect(db: &TestDatabase, port: u16) -> Self {
        let api = Self::new(db, port);
        api.wait_healthy().await;
        api
    }

    /// The api on `port` with a token for every deployment (valid 2 h), without waiting for it.
    pub fn new(db: &TestDatabase, port: u16) -> Self {
        let out = command(&binary("slipway-api"), db, port)
            .args(["token", "--deployments", "*", "--ttl", "2h"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        // reqwest is built without a TLS provider of its own (the
        // workspace's rustls uses ring): install it before any client.
        slipway_jobs::callback::install_crypto_provider();
        Self {
            http: reqwest::Client::new(),
            base: format!("http://127.0.0.1:{port}"),
            token: String::from_utf8(out.stdout).unwrap().trim().to_owned(),
        }
    }

    /// Any request, with the token: status and body (JSON; a body that is
    /// not JSON as a JSON string; none as null). `Err` when no whole answer
    /// came back: refused, reset, timed out or cut off mid-body.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), reqwest::Error> {
        let mut request = self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let r = request.send().await?;
        let status = r.status().as_u16();
        let bytes = r.bytes().await?;
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Ok((status, body))
    }

    /// Every build of deployment `id`, newest first, read page by page;
    /// `Err` says why a page could not be read.
    pub async fn builds(&self, id: &str) -> Result<Vec<Value>, String> {
        let mut builds = Vec::new();
        let mut path = format!("/deployments/{id}/builds");
        loop {
            let (status, page) = self
                .call(reqwest::Method::GET, &path, None)
                .await
                .map_err(|e| format!("GET {path}: {}", error_chain(&e)))?;
            if status != 200 {
                return Err(format!("GET {path} answered {status}: {page}"));
            }
            builds.extend(page["builds"].as_array().into_iter().flatten().cloned());
            match page["next"].as_str() {
                Some(next) => path = format!("/deployments/{id}/builds?before={next}"),
                None => return Ok(builds),
            }
        }
    }

    /// A token for every deployment that also carries the operator claim
    /// (the fleet: `GET /queues`, `GET /workers`, the dashboard's fleet
    /// view), valid 2 h, minted by `slipway-api token --operator`.
    pub fn operator_token(db: &TestDatabase, port: u16) -> String {
        let out = command(&binary("slipway-api"), db, port)
            .args(["token", "--deployments", "*", "--ttl", "2h", "--operator"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    pub async fn wait_healthy(&self) {
        wait_for("the api to serve", Duration::from_secs(30), || async {
            let r = self.http.get(format!("{}/healthz", self.base)).send().await.ok()?;
            r.status().is_success().then_some(())
        })
        .await
    }

    /// GET: status, content type and JSON body (null when not JSON).
    pub async fn get(&self, path: &str) -> (u16, String, Value) {
        let r = self.http.get(format!("{}{path}", self.base)).bearer_auth(&self.token).send().await.unwrap();
        let status = r.status().as_u16();
        let ctype = r.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
        (status, ctype, r.json::<Value>().await.unwrap_or(Value::Null))
    }

    /// PUT a configuration; the transport error when the api died.
    pub async fn submit(&self, id: &str, configuration: &Value) -> Result<(u16, Value), reqwest::Error> {
        let r = self
            .http
            .put(format!("{}/deployments/{id}", self.base))
            .bearer_auth(&self.token)
            .json(&json!({ "configuration": configuration }))
            .send()
            .await?;
        Ok((r.status().as_u16(), r.json().await.unwrap_or(Value::Null)))
    }

    pub async fn delete(&self, id: &str) -> (u16, Value) {
        let r =
            self.http.delete(format!("{}/deployments/{id}", self.base)).bearer_auth(&self.token).send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    /// Waits until deployment `id` is in state `want` (panics on `failed` unless wanted).
    pub async fn wait_state(&self, id: &str, want: &str, deadline: Duration) -> Value {
        wait_for(&format!("{id} to become {want}"), deadline, || async {
            let (_, _, d) = self.get(&format!("/deployments/{id}")).await;
            if want != "failed" {
                assert_ne!(d["state"], "failed", "the build failed: {d}");
            }
            (d["state"] == want).then_some(d)
        })
        .await
    }
}

/// A module source whose deploy takes `seconds` and reports one node, `web`,
/// with a tiny SBOM whose `serialNumber` names the attempt that wrote it
/// (attempt 1: `urn:uuid:00000000-0000-4000-8000-000000000001`, a serial
/// number CycloneDX's schema accepts).
/// Each effect records `start <attempt> <ns>` and `end <attempt> <ns>`
/// (the host's clock, in nanoseconds) in `$STATE_DIR/runs`; an effect that
/// starts while another of its deployment holds `$STATE_DIR/slot.lock` is
/// recorded in `$STATE_DIR/overlaps` ([`overlapping_runs`] compares the
/// runs of different deployments). An effect sees only its own
/// deployment's state folder, so that is where it leaves its traces; its
/// processes are found on the host by their `SLIPWAY_EFFECT*` markers
/// ([`effect_processes`]).
pub fn slow_source(root: &Path, seconds: u32) {
    use std::os::unix::fs::PermissionsExt;
    let effects = root.join("core/effects");
    std::fs::create_dir_all(&effects).unwrap();
    std::fs::write(root.join("core/default.nix"), "{ provider ? {} }: { }\n").unwrap();
    let deploy = format!(
        r#"#!/bin/sh
attempt=$SLIPWAY_EFFECT_ATTEMPT
echo "start $attempt $(date +%s%N)" >> "$STATE_DIR/runs"
exec 9>"$STATE_DIR/slot.lock"
flock -n 9 || echo "$BUILD_ID" >> "$STATE_DIR/overlaps"
echo "deploying (attempt $attempt of $BUILD_ID)"
sleep {seconds}
echo '{{"nodes": [{{"name": "web", "dnsNames": [], "outcome": "deployed", "system": null, "error": null}}]}}' > "$SBOM_OUT_DIR/nodes.json"
serial=$(printf 'urn:uuid:00000000-0000-4000-8000-%012x' "$attempt")
echo '{{"bomFormat": "CycloneDX", "specVersion": "1.5", "serialNumber": "'"$serial"'", "components": []}}' > "$SBOM_OUT_DIR/web.cdx.json"
echo "end $attempt $(date +%s%N)" >> "$STATE_DIR/runs"
"#
    );
    for (name, body) in [("deploy", deploy.as_str()), ("destroy", "#!/bin/sh\nexit 0\n")] {
        let path = effects.join(name);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// The processes on this host of attempt `attempt` of build `build_id`'s
/// effect (every process of an effect carries its markers).
pub fn effect_processes(build_id: &str, attempt: u32) -> Vec<u32> {
    let build = format!("SLIPWAY_EFFECT={build_id}\0");
    let attempt = format!("SLIPWAY_EFFECT_ATTEMPT={attempt}\0");
    slipway_jobs::test_support::processes_with(&build)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.windows(attempt.len()).any(|w| w == attempt.as_bytes()))
        })
        .collect()
}

/// Pairs of `slow_source` effects, of any deployments under `state`, that
/// ran at the same time (each as `<deployment> <attempt>`).
pub fn overlapping_runs(state: &Path) -> Vec<(String, String)> {
    let mut runs: Vec<(String, u128, u128)> = Vec::new();
    for deployment in std::fs::read_dir(state.join("provider")).into_iter().flatten().flatten() {
        let name = deployment.file_name().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(deployment.path().join("runs")).unwrap_or_default();
        let mut starts = std::collections::BTreeMap::new();
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields[..] {
                ["start", attempt, at] => {
                    starts.insert(attempt.to_owned(), at.parse::<u128>().unwrap());
                }
                ["end", attempt, at] => {
                    let end = at.parse::<u128>().unwrap();
                    runs.push((format!("{name} {attempt}"), starts[attempt], end));
                }
                _ => {}
            }
        }
    }
    let mut overlaps = Vec::new();
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            if a.1 < b.2 && b.1 < a.2 {
                overlaps.push((a.0.clone(), b.0.clone()));
            }
        }
    }
    overlaps
}

/// `slipway-worker work` on `source` (its built-in module source) with a 1 s heartbeat.
pub fn slow_worker(db: &TestDatabase, port: u16, source: &Path) -> Command {
    let mut cmd = command(&binary("slipway-worker"), db, port);
    cmd.args(["work"]).env("SLIPWAY_DEFAULT_SOURCE_DIR", source).env("SLIPWAY_HEARTBEAT", "1");
    cmd
}

/// Polls build `path` until its status is one of `statuses`, up to 60 s; returns it.
pub async fn wait_build(api: &Api, path: &str, what: &str, statuses: &[&str]) -> Value {
    wait_for(what, Duration::from_secs(60), || async {
        let (_, _, b) = api.get(path).await;
        b["status"].as_str().is_some_and(|s| statuses.contains(&s)).then_some(b)
    })
    .await
}

/// The statuses a build ends in when it ran.
pub const ENDED: &[&str] = &["succeeded", "failed"];

/// Sends `signal` to process `pid` (a process the test started).
pub fn signal(pid: u32, signal: i32) {
    // SAFETY: signals a process this test started.
    unsafe { libc::kill(pid as i32, signal) };
}

/// Stops process `pid` (SIGSTOP) at a moment it holds no database
/// transaction, as a `kill -STOP` that lands between two statements: a stop
/// that landed inside one is undone (SIGCONT), and the next stop waits until
/// the database has seen the process outside a transaction, so that a busy
/// machine that gives the resumed process no time cannot make every stop land
/// in the same transaction. (A process stopped inside a transaction holds its
/// locks until it resumes, on SQLite the write lock of the whole file: that
/// is another scenario.)
pub async fn pause_between_statements(pid: u32, db: &TestDatabase) {
    for _ in 0..20 {
        signal(pid, libc::SIGSTOP);
        wait_for("the process to stop", Duration::from_secs(10), || async { stopped(pid).then_some(()) }).await;
        if !db.holds_a_transaction(pid).await {
            return;
        }
        signal(pid, libc::SIGCONT);
        wait_for("the resumed process to leave its transaction", Duration::from_secs(30), || async {
            (!db.holds_a_transaction(pid).await).then_some(())
        })
        .await;
    }
    panic!("process {pid} was inside a transaction at each of 20 stops");
}

/// Whether process `pid` is stopped (`T` in `/proc/<pid>/stat`).
pub fn stopped(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')').next().and_then(|s| s.split_whitespace().next()) == Some("T")
}

/// Unix milliseconds now, to compare with the api's timestamps.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Unix milliseconds of an api timestamp (`2026-11-29T22:04:05.070Z`).
pub fn ms_of(rfc3339: &Value) -> i64 {
    let t =
        time::OffsetDateTime::parse(rfc3339.as_str().unwrap(), &time::format_description::well_known::Rfc3339).unwrap();
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

/// Waits up to `deadline` for `process` to exit and returns how it exited;
/// past it, fails naming `what` with the last lines of `log` (a hang is a
/// failure with its evidence, not a test that runs until CI's limit).
pub async fn wait_exit(process: Running, what: &str, deadline: Duration, log: &Path) -> std::process::ExitStatus {
    let mut process = process;
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = process.0.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > deadline {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "{what} did not exit within {deadline:?}; the last lines of {}:\n{}",
                log.display(),
                tail.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Stops `worker` at once, as an operator would: SIGTERM, and once its log
/// `log` says it is shutting down, a second SIGTERM. Returns how it exited.
pub async fn stop_at_once(worker: &mut Running, log: &Path) -> std::process::ExitStatus {
    signal(worker.0.id(), libc::SIGTERM);
    wait_for("the worker to start shutting down", Duration::from_secs(10), || async {
        std::fs::read_to_string(log).ok()?.contains("shutting down").then_some(())
    })
    .await;
    signal(worker.0.id(), libc::SIGTERM);
    worker.0.wait().unwrap()
}
