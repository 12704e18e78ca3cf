//! The chaos run behind `scripts/chaos`, ignored by a plain `cargo test`
//! (the script runs it with `--ignored --nocapture`). A fleet on PostgreSQL:
//! `CHAOS_APIS` api replicas, each on its own port, and `CHAOS_WORKERS`
//! workers; `CHAOS_DEPLOYMENTS` deployments whose deploys run a real
//! `nix-build` of `CHAOS_DEPLOY_SECONDS` seconds (its builder starts in a
//! session of its own with a clean environment, so it outlives a killed
//! worker unless the effect is contained), submitted in waves round-robin
//! over the apis while the chaos happens: `CHAOS_KILLS` workers SIGKILLed at
//! random and restarted, one api SIGKILLed while a submit to it is in flight
//! and restarted on its port, PostgreSQL restarted `CHAOS_PG_RESTARTS`
//! times, and OpenBao (a private server of the run's own, keeping its data
//! in files) SIGKILLed and restarted `CHAOS_OPENBAO_RESTARTS` times while
//! deploys run: every submit carries an operator secret value, which the
//! api writes to OpenBao and the worker reads back for the deploy. At the
//! end:
//! - every accepted build exists and has succeeded, or was superseded by a
//!   newer submit before it ran; no deployment is stuck; an extra build is
//!   allowed only for a submit whose connection failed;
//! - builds of one deployment did not overlap (ST-2), by their timestamps and
//!   by the test source's own record: its deploy holds a `flock` on
//!   `$STATE_DIR/effect.lock` for its whole run and records any overlap in
//!   `$STATE_DIR/overlaps` (a stray effect left by a killed worker holds the
//!   lock); a self-test first proves that record works;
//! - no process the run started outlives the fleet ([`strays`]);
//! - build re-runs (attempts beyond the first) <= worker kills × BUILD_SLOTS;
//! - the deploy of every build that succeeded was handed the secret's value
//!   (the test source's deploy records what `OPERATOR_SECRETS_FILE` gave it
//!   in `$STATE_DIR/secrets`).
//!
//! It prints `chaos: …` lines (the kills, re-runs, superseded builds,
//! overlaps and strays), then `N passed, M failed` (deployments plus
//! run-wide checks), and fails when M > 0, keeping the work folder
//! (`processes.log`) and the database for inspection. `CHAOS_SEED` repeats a
//! run's choices; `CHAOS_DEADLINE` (seconds, 900) bounds the submits, and
//! then the settling. `SLIPWAY_BIN_DIR` takes the binaries from that folder.
//!
//! Tasks: the test's own task runs the chaos (worker kills and PostgreSQL
//! restarts); a submitter task sends the submits wave by wave, four at a
//! time, and SIGKILLs an api while one of its submits is in flight. Every
//! check runs at the end on what the api, the provider state folders and
//! `/proc` say; none depends on a sleep.

use crate::common;

use common::{binary, command, demo, error_chain, free_port, ms_of, poll, signal, start, Api, Running};
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::{process_runs, processes, Process, TestDatabase, TestOpenBao};
use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Every worker's `BUILD_SLOTS`: one worker kill re-runs at most this many builds.
const BUILD_SLOTS: u64 = 4;
/// The variable every effect process carries, set to its build id.
const MARKER: &str = "SLIPWAY_EFFECT";
/// The operator secret every submit carries: PeerTube's SMTP password.
const SECRET_APP: &str = "peertube";
const SECRET_FIELD: &str = "smtpPassword";
const SECRET_VALUE: &str = "chaos-smtp-password";

/// The run's size, from `CHAOS_*` environment variables (an ignored test takes no arguments).
#[derive(Debug)]
struct Params {
    deployments: usize,
    /// Worker SIGKILLs.
    kills: u64,
    /// PostgreSQL restarts, spread over the kills.
    pg_restarts: u64,
    /// OpenBao restarts, spread over the kills.
    openbao_restarts: u64,
    workers: usize,
    /// Api replicas, each on its own port.
    apis: usize,
    deploy_seconds: u64,
    /// For the submits to end, and again for every deployment to settle.
    deadline: Duration,
    /// `CHAOS_SEED`, by default the Unix time in seconds.
    seed: u64,
}

impl Params {
    fn from_env() -> Self {
        let n = |key: &str, default: u64| match std::env::var(key) {
            Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("{key}={v:?} is not a whole number")),
            Err(_) => default,
        };
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let p = Self {
            deployments: n("CHAOS_DEPLOYMENTS", 50) as usize,
            kills: n("CHAOS_KILLS", 10),
            pg_restarts: n("CHAOS_PG_RESTARTS", 1),
            openbao_restarts: n("CHAOS_OPENBAO_RESTARTS", 2),
            workers: n("CHAOS_WORKERS", 3) as usize,
            apis: n("CHAOS_APIS", 2) as usize,
            deploy_seconds: n("CHAOS_DEPLOY_SECONDS", 3),
            deadline: Duration::from_secs(n("CHAOS_DEADLINE", 900)),
            seed: n("CHAOS_SEED", now),
        };
        assert!(
            p.deployments >= 2 && p.workers >= 1 && p.apis >= 1,
            "need CHAOS_DEPLOYMENTS >= 2, CHAOS_WORKERS >= 1, CHAOS_APIS >= 1: {p:?}"
        );
        p
    }
}

/// The run's own lines: `chaos: …` on stdout, and `chaos HH:MM:SS: …` (UTC)
/// in `processes.log`, among the fleet's lines.
struct Log(Mutex<std::fs::File>);

impl Log {
    fn line(&self, msg: impl std::fmt::Display) {
        let mut events = self.0.lock().unwrap();
        println!("chaos: {msg}");
        let format = time::macros::format_description!("[hour]:[minute]:[second]");
        let now = time::OffsetDateTime::now_utc().format(format).unwrap();
        let _ = writeln!(events, "chaos {now}: {msg}");
    }
}

/// A module source whose deploy takes `deploy_seconds` and reports one
/// node; returns its deploy effect.
///
/// The deploy holds `$STATE_DIR/effect.lock` (`flock`, on fd 9) for its
/// whole run; everything it starts inherits fd 9, so a process left behind
/// by a killed worker keeps holding it. A deploy that finds the lock taken
/// records itself (and the holder) in `$STATE_DIR/overlaps` and carries on,
/// so the build still succeeds and only the overlap is recorded.
///
/// Its time is spent in a real `nix-build` of a derivation of its own (one
/// per build attempt, so it is never already built) whose builder waits:
/// Nix starts the builder in a session of its own with a clean environment,
/// so it outlives a killed worker unless the effect is contained, and then
/// it runs on for an hour. The builder's environment carries `run_id`
/// (`chaosRun`), so [`strays`] finds it.
fn chaos_source(root: &Path, deploy_seconds: u64, run_id: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let effects = root.join("core/effects");
    std::fs::create_dir_all(&effects).unwrap();
    std::fs::write(root.join("core/default.nix"), "{ provider ? {} }: { }\n").unwrap();
    // The builder's work runs in a process of its own for deploy_seconds
    // while the builder lives; once orphaned (its parent changed: the build
    // was killed and nothing contained it) it turns into a runaway that
    // sleeps for an hour, which only containment ends: it is no child of
    // anything that carries the effect's marker.
    let builder = effects.join("chaos-builder.sh");
    std::fs::write(
        &builder,
        format!(
            r##"(
  read -r _ _ _ parent _ < /proc/self/stat
  end=$(( $(date +%s) + {deploy_seconds} ))
  while [ "$(date +%s)" -lt "$end" ]; do
    read -r _ _ _ now _ < /proc/self/stat
    [ "$now" = "$parent" ] || exec sleep 3600
    sleep 0.2
  done
  echo done > "$out"
) &
wait
"##
        ),
    )
    .unwrap();
    let builder = builder.display();
    let deploy = format!(
        r##"#!/bin/sh
exec 9>>"$STATE_DIR/effect.lock"
if flock -n 9; then
  echo "$BUILD_ID pid $$" > "$STATE_DIR/holder"
else
  echo "$BUILD_ID (pid $$) found $STATE_DIR/effect.lock taken; last holder: $(cat "$STATE_DIR/holder" 2>/dev/null)" >> "$STATE_DIR/overlaps"
  echo "deploy $BUILD_ID: another effect of this deployment holds the lock"
fi
echo "deploy $BUILD_ID starting"
# The Nix daemon's build sandbox shows no file of the source: the builder's
# script goes into the derivation as text, read under restricted evaluation
# from the one folder -I allows.
scratch=${{TMPDIR:-/tmp}}
cp "{builder}" "$scratch/chaos-builder.sh"
cat > "$scratch/chaos.nix" <<NIX
derivation {{
  name = "slipway-chaos";
  system = builtins.currentSystem;
  builder = "/bin/sh";
  args = [ "-c" (builtins.readFile $scratch/chaos-builder.sh) ];
  PATH = "/usr/bin:/bin";
  chaosRun = "{run_id}";
  attempt = "$BUILD_ID.${{SLIPWAY_EFFECT_ATTEMPT:-0}}.$(date +%s%N)";
}}
NIX
nix-build -I "$scratch" "$scratch/chaos.nix" --no-out-link || exit 1
# The operator secret's value, as the worker handed it: recorded per attempt.
seen=0
if [ -n "${{OPERATOR_SECRETS_FILE:-}}" ]; then
  while IFS="$(printf '\t')" read -r _app _instance field _entry _version file; do
    if [ "$field" = "{SECRET_FIELD}" ] && [ -n "$file" ] && [ "$(cat "$file")" = "{SECRET_VALUE}" ]; then
      seen=$((seen + 1))
    fi
  done < "$OPERATOR_SECRETS_FILE"
fi
echo "$BUILD_ID $seen" >> "$STATE_DIR/secrets"
echo '{{"nodes": [{{"name": "web", "dnsNames": [], "outcome": "deployed", "system": null, "error": null}}]}}' > "$SBOM_OUT_DIR/nodes.json"
echo '{{"bomFormat": "CycloneDX", "specVersion": "1.5", "components": []}}' > "$SBOM_OUT_DIR/web.cdx.json"
echo "deploy $BUILD_ID done"
"##
    );
    for (name, body) in [("deploy", deploy.as_str()), ("destroy", "#!/bin/sh\nsleep 1\n")] {
        let path = effects.join(name);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    effects.join("deploy")
}

/// The deploy effect run once, outside the fleet, while the test holds its
/// lock: it must record an overlap, which proves the detection works before
/// its silence is trusted.
struct LockSelfTest {
    effect: tokio::process::Child,
    /// The lock the effect finds taken, held until the effect ended.
    held: std::fs::File,
    state: PathBuf,
    /// The effect's stdout and stderr.
    output: PathBuf,
}

impl LockSelfTest {
    fn start(deploy: &Path, work: &Path) -> Self {
        use std::os::fd::AsRawFd;
        let dir = work.join("selftest");
        let (state, sbom, scratch, output) = (dir.join("state"), dir.join("sbom"), dir.join("tmp"), dir.join("output"));
        for folder in [&state, &sbom, &scratch] {
            std::fs::create_dir_all(folder).unwrap();
        }
        let held = std::fs::OpenOptions::new().create(true).append(true).open(state.join("effect.lock")).unwrap();
        // SAFETY: flock on a descriptor this value owns.
        let locked = unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_eq!(locked, 0, "cannot take the self-test's lock");
        let out = std::fs::File::create(&output).unwrap();
        let effect = tokio::process::Command::new(deploy)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()))
            .env("STATE_DIR", &state)
            .env("SBOM_OUT_DIR", &sbom)
            .env("BUILD_ID", "selftest")
            .env("TMPDIR", &scratch)
            .env("NIX_CONFIG", std::env::var("NIX_CONFIG").unwrap_or_default())
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .expect("the deploy effect starts");
        Self { effect, held, state, output }
    }

    /// Waits (up to 120 s) for the effect to end, then lets the lock go; the problem found, if any.
    async fn result(mut self) -> Option<String> {
        let ended = tokio::time::timeout(Duration::from_secs(120), self.effect.wait()).await;
        drop(self.held);
        let out = std::fs::read_to_string(&self.output).unwrap_or_default().trim().to_owned();
        let recorded = std::fs::read_to_string(self.state.join("overlaps")).unwrap_or_default();
        match ended {
            Err(_) => Some(format!("the deploy effect did not end within 120s in the lock self-test: {out}")),
            Ok(Err(e)) => Some(format!("waiting for the deploy effect of the lock self-test: {e}")),
            Ok(Ok(status)) if !status.success() => Some(format!(
                "the deploy effect exited {} in the lock self-test: {out}",
                status.code().map_or_else(|| status.to_string(), |c| c.to_string())
            )),
            Ok(Ok(_)) if !recorded.contains("selftest") => Some(format!(
                "the deploy effect did not record an overlap while its lock was held, \
                 so overlaps would go unseen (output: {out:?})"
            )),
            Ok(Ok(_)) => None,
        }
    }
}

/// Settings of a process: `(key, value)` pairs for its environment.
type Settings = Vec<(&'static str, String)>;

/// The api replicas (`api-<i>`, on `ports[i]`) and workers (`worker-<i>`) of the run.
struct Fleet {
    db: Arc<TestDatabase>,
    /// Where `slipway-api` and `slipway-worker` are.
    bin_dir: PathBuf,
    /// The module source every worker runs ([`chaos_source`]).
    source: PathBuf,
    /// The `OPENBAO_*` settings of an api and of a worker.
    openbao: (Settings, Settings),
    ports: Vec<u16>,
    processes: Mutex<BTreeMap<String, Running>>,
}

impl Fleet {
    /// Starts process `name` (again), its stderr in `processes.log`; returns its pid.
    fn spawn(&self, name: &str) -> u32 {
        let (bin, port) = match name.strip_prefix("api-") {
            Some(i) => ("slipway-api", self.ports[i.parse::<usize>().unwrap()]),
            None => ("slipway-worker", self.ports[0]),
        };
        let mut cmd = command(&self.bin_dir.join(bin), &self.db, port);
        if bin == "slipway-worker" {
            cmd.arg("work");
        }
        cmd.env("SLIPWAY_DEFAULT_SOURCE_DIR", &self.source)
            .env("SLIPWAY_HEARTBEAT", "1")
            .env("BUILD_SLOTS", BUILD_SLOTS.to_string())
            .env("QUEUE_SIZE", "10000");
        let openbao = if bin == "slipway-worker" { &self.openbao.1 } else { &self.openbao.0 };
        cmd.envs(openbao.iter().map(|(k, v)| (*k, v.as_str())));
        let process = start(cmd, &self.db, "processes.log");
        let pid = process.0.id();
        self.processes.lock().unwrap().insert(name.to_owned(), process);
        pid
    }

    /// SIGKILLs process `name` and reaps it; returns its pid.
    fn sigkill(&self, name: &str) -> u32 {
        let mut processes = self.processes.lock().unwrap();
        let process = processes.get_mut(name).expect("a process of the fleet");
        process.kill();
        process.0.id()
    }

    /// Whether process `name` has exited.
    fn exited(&self, name: &str) -> bool {
        let mut processes = self.processes.lock().unwrap();
        processes.get_mut(name).is_some_and(|p| matches!(p.0.try_wait(), Ok(Some(_))))
    }

    /// The workers' names.
    fn workers(&self) -> Vec<String> {
        self.processes.lock().unwrap().keys().filter(|n| n.starts_with("worker-")).cloned().collect()
    }

    /// SIGTERMs every process, waits up to 20 s for each to exit, then SIGKILLs what is left.
    async fn stop_all(&self) {
        let mut processes = std::mem::take(&mut *self.processes.lock().unwrap());
        for process in processes.values_mut() {
            if matches!(process.0.try_wait(), Ok(None)) {
                signal(process.0.id(), libc::SIGTERM);
            }
        }
        for (_, mut process) in processes {
            let pid = process.0.id() as i32;
            poll(Duration::from_secs(20), || async { (!process_runs(pid)).then_some(()) }).await;
            process.kill();
        }
    }
}

/// One api replica: its name in the fleet, its port and a client for it.
struct Replica {
    name: String,
    port: u16,
    api: Api,
}

/// What the submits met for one deployment.
#[derive(Default)]
struct Outcomes {
    /// Build ids of the submits answered 202.
    accepted: Vec<String>,
    /// Submits whose connection failed, so maybe accepted: `<api>: <error>`.
    transport: Vec<String>,
    /// 5xx answers (not accepted; submitted again): `<api>: <status> <body>`.
    refused: Vec<String>,
    /// What went wrong for good.
    problems: Vec<String>,
}

/// The submitter's books.
#[derive(Default)]
struct Submits {
    /// Submits in flight, per api replica.
    inflight: Vec<usize>,
    /// The replica the next deployment's submits go to first.
    next_api: usize,
    /// Per deployment.
    of: BTreeMap<String, Outcomes>,
    /// Run-wide problems of the submitter.
    errors: Vec<String>,
    /// Which api was killed mid-submit, and how, once one was.
    api_kill_note: Option<String>,
}

/// What the chaos and the submitter share.
struct Run {
    log: Log,
    fleet: Fleet,
    apis: Vec<Replica>,
    /// What every submit sends: `examples/demo.json` with an operator secret's value.
    configuration: Value,
    /// The run's own OpenBao, restarted by the chaos.
    openbao: tokio::sync::Mutex<TestOpenBao>,
    submits: Mutex<Submits>,
    /// Set once the api kill is over, done or not.
    api_killed: watch::Sender<bool>,
    /// Set once every PostgreSQL restart was tried.
    pg_restarted: watch::Sender<bool>,
}

/// Whether `flag` is set within `deadline`.
async fn set_within(flag: &watch::Sender<bool>, deadline: Duration) -> bool {
    matches!(tokio::time::timeout(deadline, flag.subscribe().wait_for(|set| *set)).await, Ok(Ok(_)))
}

/// Polls `api`'s `/healthz` for up to 60 s, starting it again whenever it
/// has exited (it may have started while PostgreSQL restarted); the problem, if any.
async fn wait_healthy(run: &Run, api: &Replica) -> Option<String> {
    let up = poll(Duration::from_secs(60), || async {
        if let Ok((200, _)) = api.api.call(Method::GET, "/healthz", None).await {
            return Some(());
        }
        if run.fleet.exited(&api.name) {
            run.log.line(format_args!("{} exited while starting; starting it again", api.name));
            run.fleet.spawn(&api.name);
        }
        None
    })
    .await;
    up.is_none().then(|| format!("{} on :{} did not answer /healthz within 60s", api.name, api.port))
}

/// Submits deployment `d` until an api accepts it: first to the next api in
/// turn, at once to the next one when a connection fails, after a 0.2 s
/// back-off once every api failed or after a 5xx; gives up on any other
/// answer or after 300 s.
async fn submit(run: &Run, d: &str) {
    let n = run.apis.len();
    let first = {
        let mut submits = run.submits.lock().unwrap();
        let first = submits.next_api;
        submits.next_api = (first + 1) % n;
        first
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    let body = json!({ "configuration": run.configuration });
    for attempt in 0.. {
        let i = (first + attempt) % n;
        let api = &run.apis[i];
        run.submits.lock().unwrap().inflight[i] += 1;
        let answer = api.api.call(Method::PUT, &format!("/deployments/{d}"), Some(&body)).await;
        {
            let mut submits = run.submits.lock().unwrap();
            submits.inflight[i] -= 1;
            let outcomes = submits.of.entry(d.to_owned()).or_default();
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
                    outcomes.transport.push(format!("{}: {}", api.name, error_chain(&e)));
                    if (attempt + 1) % n != 0 {
                        continue; // try the next api at once
                    }
                }
                Ok((status, body)) if status >= 500 => outcomes.refused.push(format!("{}: {status} {body}", api.name)),
                Ok((status, body)) => {
                    outcomes.problems.push(format!("a submit was answered {status}: {body}"));
                    return;
                }
            }
            if Instant::now() > deadline {
                outcomes.problems.push("a submit was not accepted within 300s".into());
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await; // back off before submitting again
    }
}

/// Waits (up to 60 s) for a submit in flight, SIGKILLs that api while it is
/// (under the submits' lock, so no submit starts or ends meanwhile) and
/// starts it again on the same port.
async fn kill_api_mid_submit(run: Arc<Run>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let killed = loop {
        {
            let submits = run.submits.lock().unwrap();
            if let Some((i, &inflight)) = submits.inflight.iter().enumerate().find(|(_, n)| **n > 0) {
                break Some((i, inflight, run.fleet.sigkill(&run.apis[i].name)));
            }
        }
        if Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    match killed {
        None => {
            run.submits.lock().unwrap().errors.push("no submit was in flight within 60s to kill an api under".into())
        }
        Some((i, inflight, pid)) => {
            let api = &run.apis[i];
            let note = format!("{} (pid {pid}, :{}) with {inflight} submit(s) in flight", api.name, api.port);
            run.log.line(format_args!("SIGKILLed {note}; restarting it on the same port"));
            run.submits.lock().unwrap().api_kill_note = Some(note);
            run.fleet.spawn(&api.name);
            match wait_healthy(&run, api).await {
                Some(problem) => run.submits.lock().unwrap().errors.push(format!("after its SIGKILL, {problem}")),
                None => run.log.line(format_args!("{} is back on :{}", api.name, api.port)),
            }
        }
    }
    run.api_killed.send_replace(true);
}

/// Sends every submit of `waves` (deployment, how many submits in a row),
/// wave by wave, four deployments at a time; SIGKILLs an api mid-submit
/// during wave `kill_wave`, and holds the last wave until PostgreSQL has
/// been restarted, so the chaos happens while submits still arrive.
async fn submit_waves(run: Arc<Run>, waves: Vec<Vec<(String, usize)>>, kill_wave: usize, mut rng: StdRng) {
    let mut killer = None;
    for (w, wave) in waves.iter().enumerate() {
        if w == waves.len() - 1 && w > 0 && !set_within(&run.pg_restarted, Duration::from_secs(300)).await {
            let mut submits = run.submits.lock().unwrap();
            submits.errors.push("PostgreSQL was not restarted before the last wave of submits".into());
        }
        if w == kill_wave {
            killer = Some(tokio::spawn(kill_api_mid_submit(run.clone())));
        }
        futures::stream::iter(wave)
            .for_each_concurrent(4, |(d, count)| {
                let run = &run;
                async move {
                    for _ in 0..*count {
                        submit(run, d).await;
                    }
                }
            })
            .await;
        let submits: usize = wave.iter().map(|(_, count)| count).sum();
        run.log.line(format_args!("wave {}/{} submitted ({submits} submits)", w + 1, waves.len()));
        if w + 1 < waves.len() {
            let pause = rng.random_range(0.3..1.2);
            tokio::time::sleep(Duration::from_secs_f64(pause)).await; // pacing between waves, not a check
        }
    }
    if let Some(Err(e)) = match killer {
        Some(killer) => Some(killer.await),
        None => None,
    } {
        run.submits.lock().unwrap().errors.push(format!("the api kill failed: {e}"));
    }
}

/// Asks the apis in turn until one answers (with any status): its answer, or why none did.
async fn ask(run: &Run, path: &str) -> Result<(u16, Value), String> {
    let mut why = String::from("no api answered");
    for api in &run.apis {
        match api.api.call(Method::GET, path, None).await {
            Ok(answer) => return Ok(answer),
            Err(e) => why = format!("no api answered GET {path} ({}: {})", api.name, error_chain(&e)),
        }
    }
    Err(why)
}

/// Each listed deployment's state, as the apis say (missing when none could).
async fn states(run: &Run, ids: &[String]) -> BTreeMap<String, String> {
    let mut states = BTreeMap::new();
    for chunk in ids.chunks(100) {
        if let Ok((200, body)) = ask(run, &format!("/deployments?ids={}", chunk.join(","))).await {
            for d in body["deployments"].as_array().into_iter().flatten() {
                if let (Some(id), Some(state)) = (d["id"].as_str(), d["state"].as_str()) {
                    states.insert(id.to_owned(), state.to_owned());
                }
            }
        }
    }
    states
}

/// Every process still running that the run left: one that carries a build
/// id of ours (as `SLIPWAY_EFFECT` or `BUILD_ID`), the run id or the work
/// folder in its environment or command line (Nix builders carry the run id
/// as a derivation attribute), or works under the work folder; or one that
/// lives in a PID namespace other than this test's, started after the run
/// did, in a namespace holding such a process (an effect's namespace: its
/// first process carries the build id, and the kernel ends the namespace
/// with it). Other tests on this host run effects in namespaces of their
/// own, so a foreign namespace alone does not make a process ours.
fn strays(work: &Path, build_ids: &HashSet<String>, run_id: &str, run_started: u64) -> Vec<Process> {
    let mine = Process::of(std::process::id()).expect("this process").pid_namespace;
    let real = work.canonicalize().unwrap_or_else(|_| work.to_owned());
    let work = work.display().to_string();
    let ours = |p: &Process| {
        [MARKER, "BUILD_ID"].iter().any(|k| p.env(k).is_some_and(|id| build_ids.contains(&id)))
            || p.mentions(run_id)
            || p.mentions(&work)
            || p.cwd.starts_with(&real)
    };
    let all = processes();
    let our_namespaces: HashSet<&str> =
        all.iter().filter(|p| p.pid_namespace != mine && ours(p)).map(|p| p.pid_namespace.as_str()).collect();
    let contained = |p: &Process| p.started >= run_started && our_namespaces.contains(p.pid_namespace.as_str());
    all.iter().filter(|p| ours(p) || contained(p)).cloned().collect()
}

/// What the deployment checks counted over the run.
#[derive(Default)]
struct Tally {
    /// Overlaps the test source recorded.
    overlaps: usize,
    superseded: usize,
    /// Attempts beyond the first, and the builds that had them (`<id> x<attempts>`).
    reruns: u64,
    rerun_builds: Vec<String>,
    /// Builds no submit was seen accepted for.
    extras: Vec<String>,
    /// Builds whose deploy was handed the secret's value.
    secrets_handed: usize,
}

/// Checks deployment `d`: its `builds` (submit order) against what its
/// submits met, the deployment as the api shows it, and the overlaps its
/// provider state recorded. Returns `problems` with what it found added.
fn check_deployment(
    d: &str,
    builds: &[Value],
    outcomes: &Outcomes,
    deployment: &Result<Value, String>,
    work: &Path,
    mut problems: Vec<String>,
    tally: &mut Tally,
) -> Vec<String> {
    let known: Vec<&str> = builds.iter().map(|b| b["id"].as_str().unwrap_or_default()).collect();
    for b in &outcomes.accepted {
        if !known.contains(&b.as_str()) {
            problems.push(format!("accepted build {b} is missing"));
        }
    }
    let extra: Vec<&str> = known.iter().copied().filter(|b| !outcomes.accepted.iter().any(|a| a == b)).collect();
    tally.extras.extend(extra.iter().map(|b| b.to_string()));
    let transport = &outcomes.transport;
    if extra.len() > transport.len() {
        let why = if transport.is_empty() {
            "no submit of it failed at the transport level".to_owned()
        } else {
            format!("{} submit(s) of it failed at the transport level ({})", transport.len(), transport.join("; "))
        };
        let refused = if outcomes.refused.is_empty() {
            String::new()
        } else {
            format!("; 5xx answers: {}", outcomes.refused.join("; "))
        };
        problems.push(format!("{} build(s) not seen accepted ({}) but {why}{refused}", extra.len(), extra.join(", ")));
    }
    for (i, b) in builds.iter().enumerate() {
        let (id, attempts) = (text(&b["id"]), b["attempts"].as_u64().unwrap_or(0));
        tally.reruns += attempts.saturating_sub(1);
        if attempts > 1 {
            tally.rerun_builds.push(format!("{id} x{attempts}"));
        }
        if b["status"] == "superseded" {
            // Q-7: a queued deploy a newer submit made pointless; never the newest, never started.
            tally.superseded += 1;
            let newest = i == builds.len() - 1;
            if newest || !b["started_at"].is_null() {
                let why = if newest { "is the newest" } else { "had started" };
                problems.push(format!("build {id} was superseded although it {why}"));
            }
        } else if b["status"] != "succeeded" {
            problems.push(format!(
                "build {id} ended {} (reason {}, error {}, attempts {attempts})",
                text(&b["status"]),
                text(&b["reason"]),
                text(&b["error"])
            ));
        }
    }
    let ran: Vec<&Value> = builds.iter().filter(|b| b["status"] != "superseded").collect();
    for pair in ran.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a["finished_at"].is_string()
            && b["started_at"].is_string()
            && ms_of(&b["started_at"]) < ms_of(&a["finished_at"])
        {
            problems.push(format!(
                "build {} started at {}, before {} finished at {} (ST-2)",
                text(&b["id"]),
                text(&b["started_at"]),
                text(&a["id"]),
                text(&a["finished_at"])
            ));
        }
    }
    match deployment {
        Err(why) => problems.push(format!("GET /deployments/{d} {why}")),
        Ok(deployment) if deployment["state"] != "active" => {
            problems.push(format!("state is {}, expected active", text(&deployment["state"])))
        }
        Ok(_) => {}
    }
    // The last attempt of each build that succeeded was handed the secret.
    let handed = std::fs::read_to_string(work.join("state/provider").join(d).join("secrets")).unwrap_or_default();
    for b in builds.iter().filter(|b| b["status"] == "succeeded") {
        let id = text(&b["id"]);
        let last = handed.lines().filter_map(|l| l.split_once(' ')).rfind(|(build, _)| *build == id);
        if !last.is_some_and(|(_, seen)| seen.trim().parse::<u32>().is_ok_and(|n| n >= 1)) {
            problems.push(format!("the deploy of build {id} was not handed the secret's value ({last:?})"));
        } else {
            tally.secrets_handed += 1;
        }
    }
    let recorded = std::fs::read_to_string(work.join("state/provider").join(d).join("overlaps")).unwrap_or_default();
    let recorded: Vec<&str> = recorded.lines().filter(|l| !l.trim().is_empty()).collect();
    if !recorded.is_empty() {
        tally.overlaps += recorded.len();
        problems.push(format!("effects overlapped: {}", recorded.join(" | ")));
    }
    problems
}

/// A chaos action.
#[derive(Clone, Copy)]
enum Chaos {
    KillWorker,
    RestartPostgres,
    RestartOpenBao,
}

/// The newest PostgreSQL cluster version under `/etc/postgresql`.
fn postgres_version() -> String {
    let numbers = |v: &str| v.split('.').filter_map(|x| x.parse::<u32>().ok()).collect::<Vec<_>>();
    std::fs::read_dir("/etc/postgresql")
        .expect("/etc/postgresql (Debian's PostgreSQL)")
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .max_by_key(|v| numbers(v))
        .expect("a PostgreSQL cluster")
}

/// What the chaos did.
struct ChaosDone {
    /// Worker SIGKILLs.
    kills: u64,
    /// PostgreSQL restarts that succeeded.
    pg_restarts: u64,
    /// OpenBao restarts, and the longest time it was away.
    openbao_restarts: u64,
    openbao_away: Duration,
    /// What went wrong.
    errors: Vec<String>,
}

/// The chaos: worker kills every 1–2.5 s, the PostgreSQL restarts spread
/// evenly among them (the first after the api kill, the last before the
/// last wave of submits), and the OpenBao restarts spread evenly among those.
async fn chaos(run: &Run, p: &Params, rng: &mut StdRng) -> ChaosDone {
    let mut actions = vec![Chaos::KillWorker; p.kills as usize];
    for i in (1..=p.pg_restarts).rev() {
        let at = (i as f64 * p.kills as f64 / (p.pg_restarts + 1) as f64).round_ties_even() as usize;
        actions.insert(at, Chaos::RestartPostgres);
    }
    let len = actions.len();
    for i in (1..=p.openbao_restarts).rev() {
        let at = (i as f64 * len as f64 / (p.openbao_restarts + 1) as f64).round_ties_even() as usize;
        actions.insert(at.max(1), Chaos::RestartOpenBao);
    }
    let (mut openbao_restarts, mut openbao_away) = (0u64, Duration::ZERO);
    let (mut kills, mut pg_tries, mut pg_restarts) = (0u64, 0u64, 0u64);
    let mut errors: Vec<String> = Vec::new();
    if p.pg_restarts == 0 {
        run.pg_restarted.send_replace(true);
    }
    for action in actions {
        let pause = rng.random_range(1.0..2.5);
        tokio::time::sleep(Duration::from_secs_f64(pause)).await; // pacing of the chaos, not a check
        match action {
            Chaos::RestartPostgres => {
                if !set_within(&run.api_killed, Duration::from_secs(300)).await {
                    errors.push("the api kill was not over 300s after a PostgreSQL restart was due".into());
                }
                let version = postgres_version();
                pg_tries += 1;
                run.log.line(format_args!("restarting PostgreSQL {version} ({pg_tries}/{})", p.pg_restarts));
                let restart = tokio::process::Command::new("pg_ctlcluster")
                    .args(["--skip-systemctl-redirect", &version, "main", "restart"])
                    .status()
                    .await;
                match restart {
                    Ok(status) if status.success() => {
                        pg_restarts += 1;
                        run.log.line("PostgreSQL is back");
                    }
                    other => errors.push(format!("pg_ctlcluster {version} main restart: {other:?}")),
                }
                if pg_tries == p.pg_restarts {
                    run.pg_restarted.send_replace(true);
                }
            }
            Chaos::RestartOpenBao => {
                openbao_restarts += 1;
                run.log.line(format_args!("restarting OpenBao ({openbao_restarts}/{})", p.openbao_restarts));
                let away = run.openbao.lock().await.restart().await;
                openbao_away = openbao_away.max(away);
                run.log.line(format_args!("OpenBao is back after {:.1}s", away.as_secs_f64()));
            }
            Chaos::KillWorker => {
                let workers = run.fleet.workers();
                let name = &workers[rng.random_range(0..workers.len())];
                let pid = run.fleet.sigkill(name);
                run.fleet.spawn(name);
                kills += 1;
                run.log.line(format_args!("SIGKILLed {name} (pid {pid}) and restarted it ({kills}/{})", p.kills));
            }
        }
    }
    ChaosDone { kills, pg_restarts, openbao_restarts, openbao_away, errors }
}

/// Whether `tool` is an executable on `PATH`.
fn on_path(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .any(|dir| std::fs::metadata(dir.join(tool)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// Text of an optional JSON field: strings unquoted, absent as `null`.
fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "minutes long and restarts PostgreSQL: scripts/chaos runs it"]
async fn the_fleet_loses_nothing_under_worker_kills_an_api_kill_and_database_restarts() {
    let p = Params::from_env();
    for tool in ["flock", "pg_ctlcluster"] {
        assert!(on_path(tool), "`{tool}` is not on PATH (flock comes with util-linux, pg_ctlcluster with PostgreSQL)");
    }
    let bin_dir = match std::env::var_os("SLIPWAY_BIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => binary("slipway-api").parent().unwrap().to_owned(),
    };
    for bin in ["slipway-api", "slipway-worker"] {
        assert!(bin_dir.join(bin).is_file(), "no {bin} in {} (SLIPWAY_BIN_DIR)", bin_dir.display());
    }
    let mut rng = StdRng::seed_from_u64(p.seed);

    let db = Arc::new(TestDatabase::new(Engine::Postgres).await);
    db.keep(true); // until every check passed
    let openbao = TestOpenBao::persistent().await;
    let work = db.dir.path().to_owned();
    // Nix's build users read the builder script under it.
    std::fs::set_permissions(&work, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let run_id = format!("slipway-chaos-{}", work.file_name().unwrap().to_string_lossy().trim_start_matches('.'));
    let run_started = Process::of(std::process::id()).expect("this process").started;
    let source = work.join("source");
    let deploy = chaos_source(&source, p.deploy_seconds, &run_id);
    let selftest = LockSelfTest::start(&deploy, &work);
    let events = std::fs::OpenOptions::new().create(true).append(true).open(work.join("processes.log")).unwrap();
    let log = Log(Mutex::new(events));
    log.line(format_args!(
        "seed {} (CHAOS_SEED), binaries from {}, work folder {}",
        p.seed,
        bin_dir.display(),
        work.display()
    ));

    let ports: Vec<u16> = (0..p.apis).map(|_| free_port()).collect();
    let token = Api::new(&db, ports[0]).token;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .pool_max_idle_per_host(0) // a new connection per request: none outlives an api kill
        .no_proxy()
        .build()
        .unwrap();
    let apis = ports
        .iter()
        .enumerate()
        .map(|(i, port)| Replica {
            name: format!("api-{i}"),
            port: *port,
            api: Api { http: http.clone(), base: format!("http://127.0.0.1:{port}"), token: token.clone() },
        })
        .collect();
    let ids: Vec<String> = (0..p.deployments).map(|i| format!("chaos-{i}")).collect();
    let run = Arc::new(Run {
        log,
        fleet: Fleet {
            db: db.clone(),
            bin_dir,
            source,
            openbao: (openbao.keys(false), openbao.keys(true)),
            ports: ports.clone(),
            processes: Default::default(),
        },
        apis,
        configuration: {
            let mut configuration = demo();
            configuration["applications"][SECRET_APP][SECRET_FIELD] = json!(SECRET_VALUE);
            configuration
        },
        openbao: tokio::sync::Mutex::new(openbao),
        submits: Mutex::new(Submits {
            inflight: vec![0; p.apis],
            of: ids.iter().map(|d| (d.clone(), Outcomes::default())).collect(),
            ..Default::default()
        }),
        api_killed: watch::channel(false).0,
        pg_restarted: watch::channel(false).0,
    });

    // The first api runs the migrations; the others start once it is up.
    run.fleet.spawn("api-0");
    for (i, api) in run.apis.iter().enumerate() {
        if i > 0 {
            run.fleet.spawn(&api.name);
        }
        if let Some(problem) = wait_healthy(&run, api).await {
            run.fleet.stop_all().await;
            panic!("{problem}; see {}/processes.log", work.display());
        }
    }
    for i in 0..p.workers {
        run.fleet.spawn(&format!("worker-{i}"));
    }
    let listening: Vec<String> = ports.iter().map(|port| format!(":{port}")).collect();
    run.log.line(format_args!("apis on {}, {} workers", listening.join(", "), p.workers));

    // Every deployment gets a deploy; every fifth a second one right after
    // (ST-2: they run one after the other, in submit order; the second may
    // supersede the first). The deployments go out in waves with pauses
    // between them.
    let plan: Vec<(String, usize)> =
        ids.iter().enumerate().map(|(i, d)| (d.clone(), if i % 5 == 0 { 2 } else { 1 })).collect();
    let n_waves = (p.deployments / 2).clamp(2, 10);
    let waves = (0..n_waves).map(|w| plan.iter().skip(w).step_by(n_waves).cloned().collect()).collect();
    let submitter_rng = StdRng::seed_from_u64(rng.random());
    let mut submitter = tokio::spawn(submit_waves(run.clone(), waves, (n_waves - 1) / 2, submitter_rng));

    let ChaosDone { kills, pg_restarts, openbao_restarts, openbao_away, errors: mut chaos_errors } =
        chaos(&run, &p, &mut rng).await;
    match tokio::time::timeout(p.deadline, &mut submitter).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => chaos_errors.push(format!("the submitter failed: {e}")),
        Err(_) => {
            chaos_errors.push(format!("the submits did not end within {}s", p.deadline.as_secs()));
            submitter.abort();
        }
    }
    let submits = std::mem::take(&mut *run.submits.lock().unwrap());
    let sum = |count: fn(&Outcomes) -> usize| submits.of.values().map(count).sum::<usize>();
    run.log.line(format_args!(
        "{} submits accepted for {} deployments, {} failed at the transport level, {} answered 5xx",
        sum(|o| o.accepted.len()),
        ids.len(),
        sum(|o| o.transport.len()),
        sum(|o| o.refused.len()),
    ));

    // Wait for every deployment to settle.
    let settle_by = Instant::now() + p.deadline;
    loop {
        let states = states(&run, &ids).await;
        if states.len() == ids.len() && states.values().all(|s| s == "active" || s == "failed") {
            break;
        }
        if Instant::now() >= settle_by {
            let unsettled: Vec<&str> = ids
                .iter()
                .filter(|d| !matches!(states.get(*d).map(String::as_str), Some("active" | "failed")))
                .map(String::as_str)
                .collect();
            run.log.line(format_args!("not settled after {}s: {}", p.deadline.as_secs(), unsettled.join(", ")));
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // What the api says, read before the processes stop.
    let mut problems: BTreeMap<&str, Vec<String>> =
        ids.iter().map(|d| (d.as_str(), submits.of[d].problems.clone())).collect();
    let mut builds_of: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    let mut deployment_of: BTreeMap<&str, Result<Value, String>> = BTreeMap::new();
    for d in &ids {
        let mut listed = Err(String::from("no api"));
        for api in &run.apis {
            listed = api.api.builds(d).await;
            if listed.is_ok() {
                break;
            }
        }
        let builds = listed.unwrap_or_else(|why| {
            problems.get_mut(d.as_str()).unwrap().push(why);
            Vec::new()
        });
        builds_of.insert(d, builds.into_iter().rev().collect()); // submit order
        let deployment = match ask(&run, &format!("/deployments/{d}")).await {
            Ok((200, body)) => Ok(body),
            Ok((status, body)) => Err(format!("answered {status}: {body}")),
            Err(why) => Err(why),
        };
        deployment_of.insert(d, deployment);
    }
    let build_ids: HashSet<String> = builds_of
        .values()
        .flatten()
        .filter_map(|b| b["id"].as_str().map(str::to_owned))
        .chain(submits.of.values().flat_map(|o| o.accepted.iter().cloned()))
        .collect();

    run.fleet.stop_all().await;
    let left = strays(&work, &build_ids, &run_id, run_started);
    let marker = |p: &Process| p.env(MARKER).unwrap_or_else(|| "None".into());
    for stray in &left {
        run.log.line(format_args!(
            "stray process: pid {} `{}` ({MARKER}={}, cwd {}) still runs after every api and worker stopped; killing it",
            stray.pid,
            stray.cmdline,
            marker(stray),
            stray.cwd.display()
        ));
        signal(stray.pid, libc::SIGKILL);
    }
    let selftest_problem = selftest.result().await;

    // Per deployment.
    let (mut passed, mut failed, mut tally) = (0, 0, Tally::default());
    for d in &ids {
        let problems = problems.remove(d.as_str()).unwrap();
        let problems = check_deployment(
            d,
            &builds_of[d.as_str()],
            &submits.of[d],
            &deployment_of[d.as_str()],
            &work,
            problems,
            &mut tally,
        );
        if problems.is_empty() {
            passed += 1;
        } else {
            failed += 1;
            run.log.line(format_args!("FAIL {d}: {}", problems.join("; ")));
        }
    }

    // The run as a whole.
    let bound = kills * BUILD_SLOTS;
    let mut run_problems = Vec::new();
    if kills < p.kills {
        run_problems.push(format!("only {kills} of {} worker kills happened", p.kills));
    }
    if openbao_restarts < p.openbao_restarts {
        run_problems.push(format!("OpenBao was restarted {openbao_restarts} of {} times", p.openbao_restarts));
    }
    if pg_restarts < p.pg_restarts {
        run_problems.push(format!("PostgreSQL was restarted {pg_restarts} of {} times", p.pg_restarts));
    }
    if submits.api_kill_note.is_none() {
        run_problems.push("no api was killed mid-submit".into());
    }
    run_problems.extend(submits.errors.iter().cloned().chain(chaos_errors));
    run_problems.extend(selftest_problem);
    let Tally { overlaps, superseded, reruns, rerun_builds, extras, secrets_handed } = tally;
    if reruns > bound {
        run_problems.push(format!(
            "{reruns} build re-runs exceed {kills} worker kills x BUILD_SLOTS {BUILD_SLOTS} = {bound}: \
             builds were re-run that no kill explains"
        ));
    }
    if !left.is_empty() {
        let listed: Vec<String> =
            left.iter().map(|s| format!("pid {} {MARKER}={} `{}`", s.pid, marker(s), s.cmdline)).collect();
        run_problems.push(format!("{} stray process(es) outlived the fleet: {}", left.len(), listed.join("; ")));
    }
    for problem in &run_problems {
        failed += 1;
        run.log.line(format_args!("FAIL run: {problem}"));
    }

    let api_killed = submits.api_kill_note.as_deref().unwrap_or("no");
    run.log.line(format_args!(
        "{kills} worker kills, api killed: {api_killed}, PostgreSQL restarts: {pg_restarts}, \
         OpenBao restarts: {openbao_restarts} (away up to {:.1}s), builds handed the secret: {secrets_handed}",
        openbao_away.as_secs_f64()
    ));
    run.log.line(format_args!(
        "re-runs: {reruns} over {} builds (at most {bound} = kills x BUILD_SLOTS), superseded: {superseded}, \
         overlaps: {overlaps}, stray processes: {}",
        rerun_builds.len(),
        left.len()
    ));
    if !extras.is_empty() {
        run.log
            .line(format_args!("builds of submits whose connection failed (not seen accepted): {}", extras.join(", ")));
    }
    if !rerun_builds.is_empty() && (failed > 0 || reruns > bound) {
        run.log.line(format_args!("builds re-run (attempts): {}", rerun_builds.join(", ")));
    }
    if failed == 0 {
        db.keep(false);
    } else {
        run.log.line(format_args!("kept {} (processes.log) and database {} for inspection", work.display(), db.url));
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        panic!("{failed} check(s) of the chaos run failed: see the `chaos: FAIL` lines");
    }
}
