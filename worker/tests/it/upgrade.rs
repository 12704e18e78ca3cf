//! The upgrade test behind `scripts/upgrade-test`, ignored by a plain
//! `cargo test` (the script builds the previous release and runs it with
//! `--ignored --nocapture`).
//!
//! A fleet of the previous release (`SLIPWAY_PREVIOUS_BIN`: its
//! `slipway-api` and `slipway-worker`) on a PostgreSQL database of its own:
//! two apis, each on its own port, and two workers of two build slots. Its
//! deployments' deploys run a real `nix-build` of `UPGRADE_DEPLOY_SECONDS`
//! seconds (a derivation of each attempt's own, so never built before). With
//! builds running and others queued, the fleet is upgraded to this
//! checkout's binaries one process at a time, in the order
//! docs/OPERATOR-GUIDE.md gives ("Upgrading"):
//!
//! 1. each worker in turn: SIGTERM (it takes no new build and finishes its
//!    running ones), then the new binary started in its place; the first new
//!    worker runs the new migrations while the old apis and the other old
//!    worker keep working on the database;
//! 2. then each api in turn, the other one taking the submits meanwhile.
//!
//! Submits go on between the steps (`UPGRADE_DEPLOYMENTS` deployments in
//! all, every fourth submitted twice in a row). At the end:
//! - every accepted build exists and succeeded, or was superseded by a newer
//!   submit before it ran; each that ran did so once (`attempts` 1, one
//!   deploy recorded by the effect); every deployment is `active`;
//! - no two builds of one deployment ran at once (ST-2): by their start and
//!   finish times, and by the effect's own record (it holds a `flock` on
//!   `$STATE_DIR/effect.lock` for its whole run and writes any overlap to
//!   `$STATE_DIR/overlaps`);
//! - every process, old or new, started on its first try and the apis
//!   answered `GET /version` with the version of the binary they run;
//! - when the first worker stopped, builds were running and others queued.
//!
//! It prints `upgrade: …` lines (each step and how long it took), then
//! `N passed, M failed` (deployments plus run-wide checks), and keeps the
//! work folder (`processes.log`) and database when a check failed.

use crate::common;

use common::{binary, command, demo, error_chain, free_port, ms_of, poll, signal, start, Api, Running};
use reqwest::Method;
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::{process_runs, TestDatabase};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Every worker's `BUILD_SLOTS`.
const BUILD_SLOTS: usize = 2;
/// How long a process may take to start, or a worker to drain.
const STEP_DEADLINE: Duration = Duration::from_secs(180);

/// A module source whose deploy records `start <build> <attempt>` and
/// `end <build> <attempt>` in `$STATE_DIR/runs`, holds
/// `$STATE_DIR/effect.lock` for its whole run (an effect that finds it taken
/// writes itself to `$STATE_DIR/overlaps` and carries on), runs a real
/// `nix-build` of `seconds` seconds and reports one node.
fn upgrade_source(root: &Path, seconds: u64, run_id: &str) {
    use std::os::unix::fs::PermissionsExt;
    let effects = root.join("core/effects");
    std::fs::create_dir_all(&effects).unwrap();
    std::fs::write(root.join("core/default.nix"), "{ provider ? {} }: { }\n").unwrap();
    let deploy = format!(
        r##"#!/bin/sh
attempt=${{SLIPWAY_EFFECT_ATTEMPT:-0}}
echo "start $BUILD_ID $attempt" >> "$STATE_DIR/runs"
exec 9>>"$STATE_DIR/effect.lock"
if ! flock -n 9; then
  echo "$BUILD_ID (attempt $attempt) found the lock taken" >> "$STATE_DIR/overlaps"
fi
scratch=${{TMPDIR:-/tmp}}
cat > "$scratch/upgrade.nix" <<NIX
derivation {{
  name = "slipway-upgrade";
  system = builtins.currentSystem;
  builder = "/bin/sh";
  args = [ "-c" "sleep {seconds}; echo done > \$out" ];
  PATH = "/usr/bin:/bin";
  upgradeRun = "{run_id}";
  attempt = "$BUILD_ID.$attempt.$(date +%s%N)";
}}
NIX
nix-build -I "$scratch" "$scratch/upgrade.nix" --no-out-link || exit 1
echo '{{"nodes": [{{"name": "web", "dnsNames": [], "outcome": "deployed", "system": null, "error": null}}]}}' > "$SBOM_OUT_DIR/nodes.json"
echo '{{"bomFormat": "CycloneDX", "specVersion": "1.5", "components": []}}' > "$SBOM_OUT_DIR/web.cdx.json"
echo "end $BUILD_ID $attempt" >> "$STATE_DIR/runs"
"##
    );
    for (name, body) in [("deploy", deploy.as_str()), ("destroy", "#!/bin/sh\nexit 0\n")] {
        let path = effects.join(name);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// The run's size, from `UPGRADE_*` environment variables.
struct Params {
    deployments: usize,
    deploy_seconds: u64,
    /// The previous release's commit, for the log.
    previous: String,
    /// Where the previous release's binaries are.
    previous_bin: PathBuf,
}

impl Params {
    fn from_env() -> Self {
        let n = |key: &str, default: u64| match std::env::var(key) {
            Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("{key}={v:?} is not a whole number")),
            Err(_) => default,
        };
        let previous_bin = PathBuf::from(
            std::env::var_os("SLIPWAY_PREVIOUS_BIN")
                .expect("SLIPWAY_PREVIOUS_BIN names the previous release's binaries: scripts/upgrade-test sets it"),
        );
        for bin in ["slipway-api", "slipway-worker"] {
            assert!(previous_bin.join(bin).is_file(), "no {bin} in {} (SLIPWAY_PREVIOUS_BIN)", previous_bin.display());
        }
        let p = Self {
            deployments: n("UPGRADE_DEPLOYMENTS", 12) as usize,
            deploy_seconds: n("UPGRADE_DEPLOY_SECONDS", 4),
            previous: std::env::var("UPGRADE_PREVIOUS").unwrap_or_else(|_| "the previous release".into()),
            previous_bin,
        };
        assert!(p.deployments >= 6, "need UPGRADE_DEPLOYMENTS >= 6");
        p
    }
}

/// The fleet: `api-0`, `api-1`, `worker-0`, `worker-1`, each of the old or the new release.
struct Fleet {
    db: TestDatabase,
    source: PathBuf,
    ports: [u16; 2],
    old_bin: PathBuf,
    new_bin: PathBuf,
    processes: BTreeMap<String, Running>,
    /// `<name> <release>` of each process started, in order.
    started: Vec<String>,
}

impl Fleet {
    /// Starts process `name` from the `new` or the old release; returns its pid.
    fn spawn(&mut self, name: &str, new: bool) -> u32 {
        let dir = if new { &self.new_bin } else { &self.old_bin };
        let (bin, port) = match name.strip_prefix("api-") {
            Some(i) => ("slipway-api", self.ports[i.parse::<usize>().unwrap()]),
            None => ("slipway-worker", self.ports[0]),
        };
        let mut cmd = command(&dir.join(bin), &self.db, port);
        if bin == "slipway-worker" {
            cmd.arg("work");
        }
        cmd.env("SLIPWAY_DEFAULT_SOURCE_DIR", &self.source)
            .env("SLIPWAY_HEARTBEAT", "1")
            .env("BUILD_SLOTS", BUILD_SLOTS.to_string())
            .env("QUEUE_SIZE", "10000");
        let process = start(cmd, &self.db, "processes.log");
        let pid = process.0.id();
        self.processes.insert(name.to_owned(), process);
        self.started.push(format!("{name} {}", if new { "new" } else { "old" }));
        pid
    }

    /// Whether process `name` has exited.
    fn exited(&mut self, name: &str) -> bool {
        self.processes.get_mut(name).is_some_and(|p| matches!(p.0.try_wait(), Ok(Some(_))))
    }

    /// SIGTERMs process `name` and waits for it to exit; its exit status, or why not.
    async fn stop(&mut self, name: &str) -> Result<std::process::ExitStatus, String> {
        let mut process = self.processes.remove(name).expect("a process of the fleet");
        signal(process.0.id(), libc::SIGTERM);
        let deadline = Instant::now() + STEP_DEADLINE;
        loop {
            if let Some(status) = process.0.try_wait().map_err(|e| e.to_string())? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                process.kill();
                return Err(format!("{name} did not exit within {STEP_DEADLINE:?} of its SIGTERM"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERMs every process, waits up to 20 s for each, then SIGKILLs what is left.
    async fn stop_all(&mut self) {
        let mut processes = std::mem::take(&mut self.processes);
        for process in processes.values() {
            signal(process.0.id(), libc::SIGTERM);
        }
        for process in processes.values_mut() {
            let pid = process.0.id() as i32;
            poll(Duration::from_secs(20), || async { (!process_runs(pid)).then_some(()) }).await;
            process.kill();
        }
    }
}

/// What the submits met for one deployment.
#[derive(Default)]
struct Outcomes {
    /// Build ids of the submits answered 202.
    accepted: Vec<String>,
    /// Submits whose connection failed, so maybe accepted.
    transport: usize,
    problems: Vec<String>,
}

struct Run {
    fleet: Fleet,
    apis: [Api; 2],
    /// Whether each api is up now (submits go only to those).
    up: [bool; 2],
    operator: String,
    of: BTreeMap<String, Outcomes>,
    errors: Vec<String>,
    log: std::fs::File,
    began: Instant,
}

impl Run {
    fn line(&mut self, msg: impl std::fmt::Display) {
        use std::io::Write;
        let at = self.began.elapsed().as_secs_f64();
        println!("upgrade: [{at:6.1}s] {msg}");
        let _ = writeln!(self.log, "upgrade [{at:.1}s]: {msg}");
    }

    /// Submits deployment `d` once to an api that is up (the one `turn`
    /// picks first, the other when its connection fails), again after a 5xx
    /// or when both failed, for up to 120 s.
    async fn submit(&mut self, d: &str, turn: usize) {
        let body = json!({ "configuration": demo() });
        let deadline = Instant::now() + Duration::from_secs(120);
        for attempt in 0.. {
            let i = (turn + attempt) % 2;
            if !self.up[i] && self.up[1 - i] {
                continue; // only one api is down at a time
            }
            let answer = self.apis[i].call(Method::PUT, &format!("/deployments/{d}"), Some(&body)).await;
            let outcomes = self.of.entry(d.to_owned()).or_default();
            match answer {
                Ok((202, accepted)) => {
                    match accepted["build_id"].as_str() {
                        Some(build) => outcomes.accepted.push(build.to_owned()),
                        None => {
                            outcomes.problems.push(format!("a submit was answered 202 without a build id: {accepted}"))
                        }
                    }
                    return;
                }
                Err(e) => {
                    outcomes.transport += 1;
                    let why = format!("submit of {d} to api-{i}: {}", error_chain(&e));
                    self.line(why);
                }
                Ok((status, body)) if status >= 500 => {
                    let why = format!("submit of {d} to api-{i} answered {status}: {body}; submitting again");
                    self.line(why);
                }
                Ok((status, body)) => {
                    outcomes.problems.push(format!("a submit was answered {status}: {body}"));
                    return;
                }
            }
            if Instant::now() > deadline {
                self.of.entry(d.to_owned()).or_default().problems.push("no submit accepted within 120s".into());
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await; // back off before submitting again
        }
    }

    /// Submits each of `ids`, every fourth of the whole run twice in a row.
    async fn submit_wave(&mut self, ids: &[String]) {
        for (k, d) in ids.iter().enumerate() {
            let n: usize = d.rsplit('-').next().unwrap().parse().unwrap();
            for _ in 0..if n.is_multiple_of(4) { 2 } else { 1 } {
                self.submit(d, k).await;
            }
        }
        let listed = ids.join(", ");
        self.line(format_args!("submitted {listed}"));
    }

    /// Waits for api `i` to answer `/healthz`, then reads `GET /version`;
    /// the version, or why not.
    async fn api_version(&mut self, i: usize) -> Result<String, String> {
        let name = format!("api-{i}");
        let api = self.apis[i].clone();
        let mut exited = false;
        let up = poll(STEP_DEADLINE, || {
            exited = exited || self.fleet.exited(&name);
            let api = api.clone();
            let gone = exited;
            async move {
                if gone {
                    return Some(Err(()));
                }
                match api.call(Method::GET, "/healthz", None).await {
                    Ok((200, _)) => Some(Ok(())),
                    _ => None,
                }
            }
        })
        .await;
        match up {
            None => return Err(format!("{name} did not answer /healthz within {STEP_DEADLINE:?}")),
            Some(Err(())) => return Err(format!("{name} exited while starting (see processes.log)")),
            Some(Ok(())) => {}
        }
        match api.call(Method::GET, "/version", None).await {
            Ok((200, body)) => Ok(body["version"].as_str().unwrap_or("?").to_owned()),
            Ok((status, body)) => Err(format!("{name}: GET /version answered {status}: {body}")),
            Err(e) => Err(format!("{name}: GET /version: {}", error_chain(&e))),
        }
    }

    /// The workers `GET /workers` lists as alive, asked of an api that is up.
    async fn alive_workers(&self) -> Vec<Value> {
        for (i, api) in self.apis.iter().enumerate() {
            if !self.up[i] {
                continue;
            }
            let operator = Api { token: self.operator.clone(), ..api.clone() };
            if let Ok((200, body)) = operator.call(Method::GET, "/workers", None).await {
                return body["workers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|w| w["alive"] == true)
                    .cloned()
                    .collect();
            }
        }
        Vec::new()
    }

    /// Waits until worker process `pid` beats (its name carries `-<pid>-`); why not, if it did not.
    async fn worker_beats(&mut self, name: &str, pid: u32) -> Result<(), String> {
        let needle = format!("-{pid}-");
        let deadline = Instant::now() + STEP_DEADLINE;
        loop {
            if self.alive_workers().await.iter().any(|w| w["name"].as_str().is_some_and(|n| n.contains(&needle))) {
                return Ok(());
            }
            if self.fleet.exited(name) {
                return Err(format!("{name} (pid {pid}) exited while starting (see processes.log)"));
            }
            if Instant::now() > deadline {
                return Err(format!("{name} (pid {pid}) did not beat within {STEP_DEADLINE:?}"));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The newest build of each of `ids` (by any api that is up).
    async fn newest_builds(&self, ids: &[String]) -> Vec<Value> {
        let mut newest = Vec::new();
        for d in ids {
            for (i, api) in self.apis.iter().enumerate() {
                if !self.up[i] {
                    continue;
                }
                if let Ok(builds) = api.builds(d).await {
                    newest.extend(builds.into_iter().next());
                    break;
                }
            }
        }
        newest
    }
}

/// Text of an optional JSON field: strings unquoted, absent as `null`.
fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

/// Checks deployment `d`: its builds (submit order) against its submits,
/// the effect's records under its state folder, and its state.
fn check_deployment(d: &str, builds: &[Value], outcomes: &Outcomes, state: &str, work: &Path) -> Vec<String> {
    let mut problems = outcomes.problems.clone();
    let known: Vec<&str> = builds.iter().map(|b| b["id"].as_str().unwrap_or_default()).collect();
    for b in &outcomes.accepted {
        if !known.contains(&b.as_str()) {
            problems.push(format!("accepted build {b} is missing"));
        }
    }
    let extra = known.iter().filter(|b| !outcomes.accepted.iter().any(|a| a == *b)).count();
    if extra > outcomes.transport {
        problems.push(format!("{extra} build(s) no submit was seen accepted for"));
    }
    let runs = std::fs::read_to_string(work.join("state/provider").join(d).join("runs")).unwrap_or_default();
    for (i, b) in builds.iter().enumerate() {
        let id = text(&b["id"]);
        if b["status"] == "superseded" {
            if i == builds.len() - 1 || !b["started_at"].is_null() {
                problems.push(format!("build {id} was superseded although it was the newest or had started"));
            }
            continue;
        }
        if b["status"] != "succeeded" {
            problems.push(format!(
                "build {id} ended {} (reason {}, error {})",
                text(&b["status"]),
                text(&b["reason"]),
                text(&b["error"])
            ));
        }
        let attempts = b["attempts"].as_u64().unwrap_or(0);
        let deploys = runs.lines().filter(|l| l.starts_with(&format!("start {id} "))).count();
        if attempts != 1 || deploys != 1 {
            problems.push(format!("build {id} ran {deploys} time(s) in {attempts} attempt(s), not once"));
        }
    }
    let ran: Vec<&Value> = builds.iter().filter(|b| b["status"] != "superseded").collect();
    for pair in ran.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a["finished_at"].is_string()
            && b["started_at"].is_string()
            && ms_of(&b["started_at"]) < ms_of(&a["finished_at"])
        {
            problems.push(format!("build {} started before {} finished (ST-2)", text(&b["id"]), text(&a["id"])));
        }
    }
    let overlaps = std::fs::read_to_string(work.join("state/provider").join(d).join("overlaps")).unwrap_or_default();
    if !overlaps.trim().is_empty() {
        problems.push(format!("effects overlapped: {}", overlaps.trim().replace('\n', " | ")));
    }
    if state != "active" {
        problems.push(format!("state is {state}, expected active"));
    }
    problems
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "minutes long and needs the previous release built: scripts/upgrade-test runs it"]
async fn a_fleet_upgraded_one_process_at_a_time_loses_no_build_and_runs_none_twice() {
    let p = Params::from_env();
    let new_bin = binary("slipway-api").parent().unwrap().to_owned();
    let db = TestDatabase::new(Engine::Postgres).await;
    db.keep(true); // until every check passed
    let work = db.dir.path().to_owned();
    let run_id = format!("slipway-upgrade-{}", work.file_name().unwrap().to_string_lossy().trim_start_matches('.'));
    let source = work.join("source");
    upgrade_source(&source, p.deploy_seconds, &run_id);
    let ports = [free_port(), free_port()];
    let token = Api::new(&db, ports[0]).token;
    let operator = Api::operator_token(&db, ports[0]);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(0) // a new connection per request: none outlives an api's stop
        .no_proxy()
        .build()
        .unwrap();
    let apis =
        ports.map(|port| Api { http: http.clone(), base: format!("http://127.0.0.1:{port}"), token: token.clone() });
    let log = std::fs::OpenOptions::new().create(true).append(true).open(work.join("processes.log")).unwrap();
    let fleet = Fleet {
        db,
        source,
        ports,
        old_bin: p.previous_bin.clone(),
        new_bin,
        processes: BTreeMap::new(),
        started: Vec::new(),
    };
    let mut run = Run {
        fleet,
        apis,
        up: [false, false],
        operator,
        of: BTreeMap::new(),
        errors: Vec::new(),
        log,
        began: Instant::now(),
    };
    let new_version = env!("CARGO_PKG_VERSION");
    let url = run.fleet.db.url.clone();
    run.line(format_args!(
        "from {} ({}) to this checkout ({new_version}); work folder {}, database {url}",
        p.previous,
        p.previous_bin.display(),
        work.display(),
    ));

    // The old fleet: the first api runs the old migrations, then the rest.
    let mut old_version = String::new();
    for i in 0..2 {
        run.fleet.spawn(&format!("api-{i}"), false);
        match run.api_version(i).await {
            Ok(version) => {
                old_version = version;
                run.up[i] = true;
            }
            Err(why) => {
                run.fleet.stop_all().await;
                panic!("the previous release's {why}; see {}/processes.log", work.display());
            }
        }
    }
    for i in 0..2 {
        let name = format!("worker-{i}");
        let pid = run.fleet.spawn(&name, false);
        if let Err(why) = run.worker_beats(&name, pid).await {
            run.fleet.stop_all().await;
            panic!("the previous release's {why}; see {}/processes.log", work.display());
        }
    }
    if old_version == new_version {
        run.line(format_args!("note: the previous release also says version {old_version}"));
    }
    run.line(format_args!("old fleet up (version {old_version}): 2 apis, 2 workers of {BUILD_SLOTS} build slots"));

    // Half the deployments first, so that builds run and others wait; the
    // rest in four waves, one after each step.
    let ids: Vec<String> = (0..p.deployments).map(|i| format!("upgrade-{i}")).collect();
    let (first, rest) = ids.split_at(p.deployments / 2);
    run.submit_wave(first).await;
    let waves: Vec<Vec<String>> = (0..4).map(|w| rest.iter().skip(w).step_by(4).cloned().collect()).collect();

    // Wait until builds run and others wait, then upgrade.
    let busy = poll(STEP_DEADLINE, || async {
        let newest = run.newest_builds(first).await;
        let running = newest.iter().filter(|b| b["status"] == "running").count();
        let queued = newest.iter().filter(|b| b["status"] == "queued").count();
        (running > 0 && queued > 0).then_some((running, queued))
    })
    .await;
    match busy {
        Some((running, queued)) => run.line(format_args!("{running} build(s) running, {queued} queued: upgrading")),
        None => run.errors.push("no moment with builds both running and queued before the upgrade".into()),
    }

    let steps = ["worker-0", "worker-1", "api-0", "api-1"];
    for (step, (name, wave)) in steps.iter().zip(&waves).enumerate() {
        let began = Instant::now();
        let api = name.strip_prefix("api-").map(|i| i.parse::<usize>().unwrap());
        if let Some(i) = api {
            run.up[i] = false;
        } else {
            let slots: i64 = run.alive_workers().await.iter().map(|w| w["slots_in_use"].as_i64().unwrap_or(0)).sum();
            run.line(format_args!("stopping {name}: {slots} build slot(s) in use in the fleet"));
        }
        match run.fleet.stop(name).await {
            Ok(status) if status.success() => {}
            Ok(status) => run.errors.push(format!("the old {name} exited {status} on SIGTERM")),
            Err(why) => run.errors.push(why),
        }
        let stopped = began.elapsed();
        let pid = run.fleet.spawn(name, true);
        let started = match api {
            Some(i) => match run.api_version(i).await {
                Ok(version) if version == new_version => {
                    run.up[i] = true;
                    Ok(())
                }
                Ok(version) => Err(format!("the new {name} answers version {version}, not {new_version}")),
                Err(why) => Err(why),
            },
            None => run.worker_beats(name, pid).await,
        };
        if let Err(why) = started {
            run.errors.push(format!("step {}: {why}", step + 1));
        }
        run.line(format_args!(
            "step {}: {name} replaced by the new binary (stopped in {:.1}s, serving {:.1}s later)",
            step + 1,
            stopped.as_secs_f64(),
            (began.elapsed() - stopped).as_secs_f64()
        ));
        run.submit_wave(wave).await;
    }

    // Wait for every deployment to settle.
    let settle_by = Instant::now() + Duration::from_secs(600);
    let mut states: BTreeMap<String, String> = BTreeMap::new();
    loop {
        if let Ok((200, body)) =
            run.apis[0].call(Method::GET, &format!("/deployments?ids={}", ids.join(",")), None).await
        {
            for d in body["deployments"].as_array().into_iter().flatten() {
                states.insert(text(&d["id"]), text(&d["state"]));
            }
        }
        if states.len() == ids.len() && states.values().all(|s| s == "active" || s == "failed") {
            break;
        }
        if Instant::now() > settle_by {
            run.errors.push("the deployments did not settle within 600s of the last step".into());
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    run.line(format_args!("settled; upgrade and builds took {:.1}s", run.began.elapsed().as_secs_f64()));

    let mut builds_of = BTreeMap::new();
    for d in &ids {
        let builds = run.apis[0].builds(d).await.unwrap_or_else(|why| {
            run.of.entry(d.clone()).or_default().problems.push(why);
            Vec::new()
        });
        builds_of.insert(d.clone(), builds.into_iter().rev().collect::<Vec<_>>());
        // submit order
    }
    run.fleet.stop_all().await;

    let (mut passed, mut failed) = (0, 0);
    let (mut ran, mut superseded) = (0, 0);
    for d in &ids {
        let builds = &builds_of[d];
        ran += builds.iter().filter(|b| b["status"] != "superseded").count();
        superseded += builds.iter().filter(|b| b["status"] == "superseded").count();
        let outcomes = run.of.remove(d).unwrap_or_default();
        let state = states.get(d).cloned().unwrap_or_else(|| "unknown".into());
        let problems = check_deployment(d, builds, &outcomes, &state, &work);
        if problems.is_empty() {
            passed += 1;
        } else {
            failed += 1;
            run.line(format_args!("FAIL {d}: {}", problems.join("; ")));
        }
    }
    for problem in std::mem::take(&mut run.errors) {
        failed += 1;
        run.line(format_args!("FAIL run: {problem}"));
    }
    let order = run.fleet.started.join(", ");
    run.line(format_args!("processes started, in order: {order}"));
    run.line(format_args!("{ran} builds ran, {superseded} superseded"));
    if failed == 0 {
        run.fleet.db.keep(false);
    } else {
        run.line(format_args!("kept {} (processes.log) and database {url}", work.display()));
    }
    println!("{passed} passed, {failed} failed");
    assert_eq!(failed, 0, "{failed} check(s) of the upgrade failed: see the `upgrade: FAIL` lines");
}
