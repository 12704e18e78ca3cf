//! Running an effect (MS-3, Q-2, Q-4): an executable of the module source,
//! its stdout and stderr streamed into a log sink while it runs, and every
//! process it started ended with it, whatever those processes do to their
//! session, environment or parentage.
//!
//! Containment is the kernel's, not a scan: each effect runs as the first
//! process of a PID namespace of its own (`unshare --pid --fork
//! --kill-child`). When that process ends, or is killed, the kernel kills
//! every other process of the namespace (Nix builders included, which start
//! in a session of their own with a clean environment) and the namespace's
//! first process only finishes exiting once they are all gone. The process
//! holding the namespace (the *holder*, our direct child) gets `SIGKILL` when
//! the worker process dies (`PR_SET_PDEATHSIG`), so a worker killed with
//! `kill -9` takes its effects with it. The holder first takes an exclusive
//! `flock` on the deployment's lock file and keeps it for the effect's life:
//! two effects of one deployment never run at once on a host, even when a
//! paused worker resumes after its build was taken over.
//!
//! The holder carries `SLIPWAY_EFFECT=<build id>`, `SLIPWAY_EFFECT_ATTEMPT=<n>`
//! and `SLIPWAY_EFFECT_OWNER=<worker>` in its environment, so a worker that
//! takes a build over finds the older attempts' effects on its host
//! ([`kill_stale`]), and a stopping worker finds its own ([`kill_own`]). A
//! worker only ever kills its own attempt's effect by process id, or older
//! attempts' by marker: never a newer attempt's.

use futures::future::BoxFuture;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Where an effect's output goes while it runs.
pub trait LogSink: Send + Sync {
    /// Appends a chunk of complete lines (each ending in `\n`).
    fn append<'a>(&'a self, chunk: &'a str) -> BoxFuture<'a, ()>;
}

/// One effect run.
#[derive(Debug, Clone)]
pub struct EffectSpec {
    /// The executable (`<source>/core/effects/deploy`, …, or a tool such as
    /// `git` or `nix-build`, looked up on `PATH`).
    pub program: PathBuf,
    /// Its arguments (none for an effect of MS-3).
    pub args: Vec<String>,
    /// Working directory: the attempt's work folder.
    pub dir: PathBuf,
    /// The environment the effect gets besides the sandbox's
    /// ([`crate::sandbox::Policy::env`]) and the markers (nothing else of
    /// the worker's is inherited, so no credential of the worker leaks into it).
    pub env: Vec<(String, String)>,
    /// Wall-clock deadline, counted from the start (waiting for the
    /// deployment's lock included).
    pub deadline: Duration,
    /// The build id (`SLIPWAY_EFFECT`).
    pub build: String,
    /// Which attempt of the build this is (`SLIPWAY_EFFECT_ATTEMPT`).
    pub attempt: i64,
    /// The deployment's lock file on this host, held by the effect for its life.
    pub lock: PathBuf,
    /// The effect's scratch folder, its `/tmp` (and `TMPDIR` and `HOME`)
    /// inside the sandbox: created before it starts, removed with
    /// everything in it once every process of the effect is gone.
    pub scratch: PathBuf,
    /// Who the effect runs as and what of the host it sees (SEC-3).
    pub sandbox: crate::sandbox::Sandbox,
}

/// Why an effect was stopped before it ended on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Someone asked to cancel the build.
    Cancel,
    /// The worker no longer holds the build's claim (another worker took it
    /// over): this attempt's effect must not go on.
    ClaimLost,
}

/// How an effect ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffectOutcome {
    /// It exited on its own with this code (a signal counts as `-signal`).
    Exited(i32),
    /// It ran past its deadline; all its processes were killed.
    TimedOut,
    /// It was stopped (see [`Stop`]); all its processes were killed.
    Stopped(Stop),
}

/// The effect could not be started at all.
#[derive(Debug, thiserror::Error)]
#[error("cannot start {program}: {source}")]
pub struct SpawnError {
    /// The executable.
    pub program: String,
    /// Why.
    pub source: std::io::Error,
}

/// How long output may sit in memory before it is flushed to the sink.
const FLUSH_EVERY: Duration = Duration::from_millis(200);

/// The variable naming the build an effect belongs to.
pub const MARKER_ENV: &str = "SLIPWAY_EFFECT";

/// The variable naming which attempt of the build the effect runs.
pub const ATTEMPT_ENV: &str = "SLIPWAY_EFFECT_ATTEMPT";

/// The variable naming the worker process that started an effect:
/// `<pid>.<start time in clock ticks>` (see [`owner`]), so a worker can tell
/// the effects of a dead worker on its host (orphans) from those of a live one.
pub const OWNER_ENV: &str = "SLIPWAY_EFFECT_OWNER";

/// This process as an effect owner: its pid and its start time (field 22
/// of `/proc/<pid>/stat`), which together never name another process.
pub fn owner() -> &'static str {
    static OWNER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    OWNER.get_or_init(|| {
        let pid = std::process::id();
        format!("{pid}.{}", stat(pid).map_or(0, |s| s.start))
    })
}

/// What Slipway reads of `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy)]
struct Stat {
    /// Parent process id.
    ppid: u32,
    /// Start time in clock ticks since boot.
    start: u64,
    /// A zombie: it has exited and holds nothing but its pid.
    zombie: bool,
}

fn stat(pid: u32) -> Option<Stat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after it are plain.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Field 3 (state) is the first after the name; field 4 the parent; field 22 is 19 later.
    Some(Stat {
        zombie: fields.first() == Some(&"Z"),
        ppid: fields.get(1)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// Whether process `pid` runs (a zombie does not: it holds no file, lock or port).
fn runs(pid: u32) -> bool {
    stat(pid).is_some_and(|s| !s.zombie)
}

/// Whether the owner `<pid>.<start time>` still runs.
fn owner_alive(owner: &str) -> bool {
    let Some((pid, started)) = owner.split_once('.') else { return false };
    match (pid.parse::<u32>(), started.parse::<u64>()) {
        (Ok(pid), Ok(started)) => stat(pid).is_some_and(|s| !s.zombie && s.start == started),
        _ => false,
    }
}

/// The running children of process `pid`.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| stat(*child).is_some_and(|s| s.ppid == pid && !s.zombie))
        .collect()
}

/// How long output may still arrive after the effect ended or was killed.
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// The command line that contains an effect: the deployment's lock, then a
/// PID namespace whose first process is the sandbox (`bwrap`) holding the
/// effect ([`crate::sandbox::Policy::command`]).
fn contained(spec: &EffectSpec) -> (String, Vec<std::ffi::OsString>) {
    let mut args: Vec<std::ffi::OsString> = vec!["--exclusive".into(), "--no-fork".into(), spec.lock.clone().into()];
    args.extend(["unshare", "--pid", "--fork", "--kill-child", "--"].map(Into::into));
    let (sandbox, sandbox_args) = spec.sandbox.command(&spec.scratch, &spec.dir, &spec.program, &spec.args);
    args.push(sandbox.into());
    args.extend(sandbox_args);
    ("flock".to_owned(), args)
}

/// Checks that this host can contain effects: `flock` and `unshare` from
/// util-linux are on `PATH`, and this process may create PID namespaces
/// (root, or `CAP_SYS_ADMIN`). The worker refuses to start otherwise.
pub fn check_containment() -> Result<(), String> {
    let out = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--kill-child", "--", "flock", "--version"])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run unshare (util-linux): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "effects run in a PID namespace of their own, and this host refuses one: {} \
             (run the worker as root or with CAP_SYS_ADMIN, with util-linux's unshare and flock on PATH)",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Runs `spawn` on a thread that lives as long as the process. The holder
/// of an effect gets `SIGKILL` when the *thread* that started it ends
/// (`PR_SET_PDEATHSIG` follows threads), so holders are started from a
/// thread that never ends before the process does.
fn on_keeper_thread<T: Send + 'static>(spawn: impl FnOnce() -> T + Send + 'static) -> T {
    type Job = Box<dyn FnOnce() + Send>;
    static KEEPER: std::sync::OnceLock<std::sync::mpsc::Sender<Job>> = std::sync::OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("slipway-effects".into())
            .spawn(move || rx.into_iter().for_each(|job| job()))
            .expect("the effect keeper thread starts");
        tx
    });
    let (done_tx, done_rx) = std::sync::mpsc::sync_channel(1);
    keeper
        .send(Box::new(move || {
            let _ = done_tx.send(spawn());
        }))
        .expect("the effect keeper thread runs");
    done_rx.recv().expect("the effect keeper thread answers")
}

/// Runs the effect to its end, its deadline, or until `stop` names a reason,
/// streaming output to `log`. However it ends, every process it started is
/// gone when this returns, and so is its scratch folder.
pub async fn run(
    spec: &EffectSpec,
    log: &dyn LogSink,
    mut stop: tokio::sync::watch::Receiver<Option<Stop>>,
) -> Result<EffectOutcome, SpawnError> {
    let spawn_error = |source| SpawnError { program: spec.program.display().to_string(), source };
    let prepare = || -> std::io::Result<()> {
        std::fs::create_dir_all(&spec.scratch)?;
        spec.sandbox.policy.give(&spec.scratch)?;
        if let Some(dir) = spec.lock.parent() {
            std::fs::create_dir_all(dir)?;
        }
        Ok(())
    };
    prepare().map_err(spawn_error)?;
    let mut env = spec.sandbox.policy.env();
    env.extend(spec.env.iter().cloned());
    env.push((MARKER_ENV.to_owned(), spec.build.clone()));
    env.push((ATTEMPT_ENV.to_owned(), spec.attempt.to_string()));
    env.push((OWNER_ENV.to_owned(), owner().to_owned()));
    let (program, args) = contained(spec);
    let memory = spec.sandbox.policy.memory as libc::rlim_t;
    let file_size = spec.sandbox.policy.file_size.map(|bytes| bytes as libc::rlim_t);
    let expression =
        duct::cmd(program, args).dir(&spec.dir).full_env(env).stdin_null().stderr_to_stdout().unchecked().before_spawn(
            move |cmd| {
                use std::os::unix::process::CommandExt;
                let parent = std::process::id() as libc::pid_t;
                cmd.process_group(0);
                // SAFETY: only async-signal-safe calls between fork and exec.
                unsafe {
                    cmd.pre_exec(move || {
                        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        // The worker died between fork and prctl: go with it.
                        if libc::getppid() != parent {
                            libc::_exit(1);
                        }
                        // The sandbox makes the folders leading to what it shows
                        // (0755, by the umask): the worker's own 077 would
                        // close them to the sandbox user. What the effect
                        // writes stays in folders that are the sandbox user's alone.
                        libc::umask(0o022);
                        // NIX_MEMORY_LIMIT: each process of the effect, Nix's evaluator included.
                        let limit = libc::rlimit { rlim_cur: memory, rlim_max: memory };
                        if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        if let Some(bytes) = file_size {
                            let limit = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
                            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                                return Err(std::io::Error::last_os_error());
                            }
                        }
                        Ok(())
                    });
                }
                Ok(())
            },
        );
    let reader = on_keeper_thread(move || expression.reader()).map_err(spawn_error)?;
    let reader = Arc::new(reader);
    let holder = reader.pids().first().copied().expect("a spawned command has a pid");

    // A thread reads the pipe. Every writer is in the namespace, so the pipe
    // closes when the effect is gone; the grace below only bounds the wait
    // for output still in flight.
    let (lines_tx, mut lines_rx) = mpsc::channel::<String>(1024);
    let pump_reader = Arc::clone(&reader);
    std::thread::spawn(move || {
        let mut buf = BufReader::new(&*pump_reader);
        let mut line = Vec::new();
        loop {
            line.clear();
            match buf.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let mut text = String::from_utf8_lossy(&line).into_owned();
                    if !text.ends_with('\n') {
                        text.push('\n');
                    }
                    if lines_tx.blocking_send(text).is_err() {
                        break;
                    }
                }
            }
        }
    });

    let deadline = tokio::time::sleep(spec.deadline);
    tokio::pin!(deadline);
    let grace = tokio::time::sleep(Duration::MAX / 4);
    tokio::pin!(grace);
    let mut pending = String::new();
    let mut tick = tokio::time::interval(FLUSH_EVERY);
    let (mut timed_out, mut stopped, mut exited) = (false, None, None);
    let mut over = false;
    loop {
        tokio::select! {
            line = lines_rx.recv() => match line {
                Some(l) => pending.push_str(&l),
                None => break,
            },
            _ = tick.tick() => {
                if !pending.is_empty() {
                    log.append(&pending).await;
                    pending.clear();
                }
                if exited.is_none() {
                    if let Ok(Some(out)) = reader.try_wait() {
                        // The holder ends after the namespace is empty.
                        exited = Some(exit_code(&out.status));
                        over = true;
                        grace.as_mut().reset(tokio::time::Instant::now() + DRAIN_GRACE);
                    }
                }
            }
            _ = &mut deadline, if !over => {
                (timed_out, over) = (true, true);
                kill_holder(holder);
                grace.as_mut().reset(tokio::time::Instant::now() + DRAIN_GRACE);
            }
            changed = stop.changed(), if !over => {
                let reason = if changed.is_ok() { *stop.borrow() } else { None };
                if let Some(reason) = reason {
                    (stopped, over) = (Some(reason), true);
                    kill_holder(holder);
                    grace.as_mut().reset(tokio::time::Instant::now() + DRAIN_GRACE);
                }
            }
            _ = &mut grace => break,
        }
    }
    let code = match exited {
        Some(code) => code,
        None => {
            // The output closed first: every process of the effect let go of
            // it, so the holder is exiting. Its status follows within moments;
            // waiting for it (up to the drain grace) spares the kill below a
            // scan of every process on the host.
            if !over {
                let until = std::time::Instant::now() + DRAIN_GRACE;
                while !matches!(reader.try_wait(), Ok(Some(_))) && std::time::Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            // Killed above (or it did not end after its output): make sure, and reap.
            if !matches!(reader.try_wait(), Ok(Some(_))) {
                kill_holder(holder);
                reader.kill().ok();
            }
            match reader.try_wait() {
                Ok(Some(out)) => exit_code(&out.status),
                _ => -libc::SIGKILL,
            }
        }
    };
    if let Err(e) = std::fs::remove_dir_all(&spec.scratch) {
        if e.kind() != std::io::ErrorKind::NotFound {
            pending.push_str(&format!("slipway: could not remove the effect's scratch folder: {e}\n"));
        }
    }
    if timed_out {
        pending.push_str(&format!(
            "slipway: the effect ran past its deadline of {}s; every process it started was killed\n",
            spec.deadline.as_secs()
        ));
    }
    match stopped {
        Some(Stop::Cancel) => {
            pending.push_str("slipway: the build was cancelled; every process the effect started was killed\n")
        }
        Some(Stop::ClaimLost) => {
            pending.push_str("slipway: another worker took this build over; this attempt's effect was stopped\n")
        }
        None => {}
    }
    if !pending.is_empty() {
        log.append(&pending).await;
    }
    Ok(match (timed_out, stopped) {
        (true, _) => EffectOutcome::TimedOut,
        (false, Some(reason)) => EffectOutcome::Stopped(reason),
        (false, None) => EffectOutcome::Exited(code),
    })
}

/// How long a kill waits for the processes it killed to be gone.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// Kills an effect's holder (our own child, not yet reaped, so its pid is
/// still its own) and the first process of its namespace, and returns once
/// that process is gone: the kernel ends it only after every other process
/// of the namespace.
fn kill_holder(holder: u32) {
    kill_and_wait(&[holder]);
}

/// SIGKILLs each of `pids` and its children (the first process of an
/// effect's namespace is its holder's child), then waits up to [`KILL_WAIT`]
/// until none of them runs. Returns how many processes were signalled.
fn kill_and_wait(pids: &[u32]) -> usize {
    let mut killed: Vec<u32> = Vec::new();
    for &pid in pids {
        killed.extend(children(pid));
        killed.push(pid);
    }
    killed.sort_unstable();
    killed.dedup();
    for pid in &killed {
        // SAFETY: signals a process we selected as part of an effect; ESRCH is harmless.
        unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
    }
    let deadline = std::time::Instant::now() + KILL_WAIT;
    while killed.iter().any(|pid| runs(*pid)) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    killed.len()
}

/// Kills the effects of build `build` on this host that belong to attempts
/// before `attempt` (a worker that died or was taken for dead left them),
/// and returns once they are gone. Never touches `attempt`'s own effect or
/// a later one. Returns how many processes were killed.
pub fn kill_stale(build: &str, attempt: i64) -> usize {
    kill_where(|env| {
        var(env, MARKER_ENV) == Some(build.as_bytes())
            && var(env, ATTEMPT_ENV)
                .and_then(|a| std::str::from_utf8(a).ok()?.parse::<i64>().ok())
                .is_none_or(|a| a < attempt)
    })
}

/// Kills the effect processes on this host whose worker died.
/// Holders die with their worker, so this only finds what a worker started
/// before that was so; every worker still does it when it starts and on
/// each sweep. Effects of live workers (and of this process) are left alone.
pub fn kill_orphans() -> usize {
    kill_where(|env| {
        var(env, OWNER_ENV).is_some_and(|owner| {
            let owner = String::from_utf8_lossy(owner);
            owner != self::owner() && !owner_alive(&owner)
        })
    })
}

/// Kills every effect this process started (a worker told to stop at once)
/// and returns once they are gone.
pub fn kill_own() -> usize {
    kill_where(|env| var(env, OWNER_ENV) == Some(owner().as_bytes()))
}

/// The value of `name` among `NAME=value` entries.
fn var<'a>(env: &[&'a [u8]], name: &str) -> Option<&'a [u8]> {
    env.iter().find_map(|entry| entry.strip_prefix(name.as_bytes())?.strip_prefix(b"="))
}

/// Kills every other process of this host whose environment satisfies
/// `select`, with its children, and returns once they are gone.
fn kill_where(select: impl Fn(&[&[u8]]) -> bool) -> usize {
    let me = std::process::id();
    let mut selected = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        let vars: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
        if select(&vars) {
            selected.push(pid);
        }
    }
    if selected.is_empty() {
        return 0;
    }
    kill_and_wait(&selected)
}

fn exit_code(status: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().unwrap_or_else(|| -status.signal().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// `sleep 60` carrying an effect's markers, returned once its
    /// environment is readable in `/proc` (the parent may resume while the
    /// child's exec is still setting it up).
    fn sleeper(owner: &str, build: &str, attempt: i64) -> std::process::Child {
        let child = std::process::Command::new("sleep")
            .arg("60")
            .env(MARKER_ENV, build)
            .env(ATTEMPT_ENV, attempt.to_string())
            .env(OWNER_ENV, owner)
            .spawn()
            .expect("sleep starts");
        let needle = format!("{OWNER_ENV}={owner}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !std::fs::read(format!("/proc/{}/environ", child.id()))
            .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == needle.as_bytes()))
        {
            assert!(std::time::Instant::now() < deadline, "the sleeper's environment never showed");
            std::thread::yield_now();
        }
        child
    }

    #[test]
    fn effects_of_a_dead_worker_are_killed_and_those_of_live_workers_are_not() {
        // Linux pids never exceed 2^22, so this owner is certainly dead.
        let mut orphan = sleeper("4194305.1", "orphan-test", 1);
        let mut ours = sleeper(owner(), "orphan-test", 1);
        let init = format!("1.{}", stat(1).expect("pid 1 runs").start);
        let mut live = sleeper(&init, "orphan-test", 1);
        let mut reused = sleeper(&format!("1.{}", stat(1).unwrap().start + 1), "orphan-test", 1);
        assert!(kill_orphans() >= 2);
        assert_eq!(orphan.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert_eq!(reused.wait().unwrap().signal(), Some(libc::SIGKILL), "a reused pid is not the owner");
        assert!(ours.try_wait().unwrap().is_none(), "this process's own effect was killed");
        assert!(live.try_wait().unwrap().is_none(), "a live worker's effect was killed");
        for mut child in [ours, live] {
            child.kill().ok();
            child.wait().ok();
        }
    }

    #[test]
    fn a_takeover_kills_older_attempts_of_the_build_and_never_its_own_or_a_later_one() {
        // Owned by this process, so the orphan test beside it leaves them alone.
        let build = format!("stale-test-{}", std::process::id());
        let mut first = sleeper(owner(), &build, 1);
        let mut second = sleeper(owner(), &build, 2);
        let mut third = sleeper(owner(), &build, 3);
        let mut other = sleeper(owner(), "another-build", 1);
        assert_eq!(kill_stale(&build, 2), 1);
        assert_eq!(first.wait().unwrap().signal(), Some(libc::SIGKILL));
        for (child, what) in
            [(&mut second, "its own attempt"), (&mut third, "a later attempt"), (&mut other, "another build")]
        {
            assert!(child.try_wait().unwrap().is_none(), "{what} was killed");
        }
        for mut child in [second, third, other] {
            child.kill().ok();
            child.wait().ok();
        }
    }
}

/// Output of a contained tool, kept in memory: the last [`TOOL_LOG_BYTES`]
/// bytes (a `git` or `nix-build` run of the `nix` queue).
#[derive(Debug, Default)]
pub struct MemoryLog(std::sync::Mutex<String>);

/// How much of a tool's output [`MemoryLog`] keeps: its last 64 KiB.
pub const TOOL_LOG_BYTES: usize = 64 * 1024;

impl MemoryLog {
    /// What was kept.
    pub fn text(&self) -> String {
        self.0.lock().expect("memory log lock").clone()
    }
}

impl LogSink for MemoryLog {
    fn append<'a>(&'a self, chunk: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let mut text = self.0.lock().expect("memory log lock");
            text.push_str(chunk);
            if text.len() > TOOL_LOG_BYTES {
                let mut cut = text.len() - TOOL_LOG_BYTES;
                while !text.is_char_boundary(cut) {
                    cut += 1;
                }
                text.drain(..cut);
            }
        })
    }
}

/// How a contained tool run ended.
#[derive(Debug)]
pub struct ToolRun {
    /// How it ended ([`EffectOutcome::TimedOut`] past the deadline).
    pub outcome: EffectOutcome,
    /// Its output, stdout and stderr interleaved (the last [`TOOL_LOG_BYTES`]).
    pub output: String,
}

impl ToolRun {
    /// Whether it exited 0.
    pub fn succeeded(&self) -> bool {
        self.outcome == EffectOutcome::Exited(0)
    }
}

/// Runs `program args…` in `dir` with the same containment as an effect
/// (its own PID namespace, killed with the worker, in `sandbox`) until it exits or `deadline` passes; every process
/// it started is gone when this returns. `marker` tags its processes
/// (`SLIPWAY_EFFECT`) so a sweep can tell whose they were; `env` comes on
/// top of the sandbox's ([`crate::sandbox::Policy::env`]). Used for the
/// `git` and Nix runs of the `nix` queue (MS-7).
pub async fn run_tool(
    sandbox: crate::sandbox::Sandbox,
    dir: &std::path::Path,
    program: &str,
    args: &[String],
    env: &[(&str, &str)],
    marker: &str,
    deadline: Duration,
) -> Result<ToolRun, SpawnError> {
    let (_keep, stop) = tokio::sync::watch::channel(None);
    run_tool_until(sandbox, dir, program, args, env, marker, deadline, stop).await
}

/// [`run_tool`], also stopped (as [`EffectOutcome::Stopped`]) when `stop`
/// names a reason: a fetch whose folder passed `SLIPWAY_SOURCE_LIMIT`.
#[allow(clippy::too_many_arguments)]
pub async fn run_tool_until(
    sandbox: crate::sandbox::Sandbox,
    dir: &std::path::Path,
    program: &str,
    args: &[String],
    env: &[(&str, &str)],
    marker: &str,
    deadline: Duration,
    stop: tokio::sync::watch::Receiver<Option<Stop>>,
) -> Result<ToolRun, SpawnError> {
    let run_id = ulid::Ulid::generate().to_string().to_lowercase();
    let spec = EffectSpec {
        program: PathBuf::from(program),
        args: args.to_vec(),
        dir: dir.to_path_buf(),
        env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        deadline,
        build: marker.to_owned(),
        attempt: 1,
        lock: std::env::temp_dir().join(format!("slipway-tool-{run_id}.lock")),
        scratch: std::env::temp_dir().join(format!("slipway-tool-{run_id}")),
        sandbox,
    };
    let log = MemoryLog::default();
    let outcome = run(&spec, &log, stop).await;
    let _ = std::fs::remove_file(&spec.lock);
    Ok(ToolRun { outcome: outcome?, output: log.text() })
}
