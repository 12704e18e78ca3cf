//! Running an effect (MS-3, Q-2, Q-4): an executable of the module source,
//! started through duct in a process group of its own, its stdout and stderr
//! streamed into a log sink while it runs, and the whole group killed on its
//! deadline so no stray `nix` process outlives the build.

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
    /// The executable (`<source>/core/effects/deploy`, …).
    pub program: PathBuf,
    /// Working directory.
    pub dir: PathBuf,
    /// The whole environment the effect gets (nothing else is inherited, so
    /// no credential of the worker leaks into it).
    pub env: Vec<(String, String)>,
    /// Wall-clock deadline.
    pub deadline: Duration,
    /// What identifies the effect's processes (`SLIPWAY_EFFECT`): the build id.
    pub marker: String,
}

/// How an effect ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffectOutcome {
    /// It exited on its own with this code (a signal counts as `-signal`).
    Exited(i32),
    /// It ran past its deadline; its process group was killed.
    TimedOut,
    /// It was cancelled on request; its process group was killed.
    Cancelled,
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

/// The environment variables an effect inherits from the worker; everything
/// else it gets is set explicitly in [`EffectSpec::env`].
pub const INHERITED_ENV: &[&str] =
    &["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "USER", "NIX_REMOTE", "NIX_STATE_DIR", "NIX_STORE_DIR"];

/// The variable naming the build an effect process belongs to. Every
/// process the effect starts inherits it, also those that leave its process
/// group, so [`kill_marked`] finds them all.
pub const MARKER_ENV: &str = "SLIPWAY_EFFECT";

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
        format!("{pid}.{}", start_time(pid).unwrap_or(0))
    })
}

/// Start time of process `pid` in clock ticks since boot, if it runs.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after it are plain.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Field 3 (state) is the first after the name; field 22 is 19 later.
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// Whether the owner `<pid>.<start time>` still runs.
fn owner_alive(owner: &str) -> bool {
    let Some((pid, started)) = owner.split_once('.') else { return false };
    match (pid.parse::<u32>(), started.parse::<u64>()) {
        (Ok(pid), Ok(started)) => start_time(pid) == Some(started),
        _ => false,
    }
}

/// How long output may still arrive after the effect ended or was killed.
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// Runs the effect to its end, its deadline, or until `cancel` turns true,
/// streaming output to `log`. When it ends, or is killed, every process it
/// started goes with it: its process group, and any process that left the
/// group but still carries its marker.
pub async fn run(
    spec: &EffectSpec,
    log: &dyn LogSink,
    mut cancel: tokio::sync::watch::Receiver<bool>,
) -> Result<EffectOutcome, SpawnError> {
    let mut env: Vec<(String, String)> =
        INHERITED_ENV.iter().filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v))).collect();
    env.extend(spec.env.iter().cloned());
    env.push((MARKER_ENV.to_owned(), spec.marker.clone()));
    env.push((OWNER_ENV.to_owned(), owner().to_owned()));
    let expression = duct::cmd(&spec.program, std::iter::empty::<&str>())
        .dir(&spec.dir)
        .full_env(env)
        .stdin_null()
        .stderr_to_stdout()
        .unchecked()
        .before_spawn(|cmd| {
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
            Ok(())
        });
    let reader = Arc::new(
        expression.reader().map_err(|source| SpawnError { program: spec.program.display().to_string(), source })?,
    );
    let pgid = reader.pids().first().copied().expect("a spawned command has a pid") as i32;

    // A thread reads the pipe; it may stay blocked on a process that escaped
    // and holds the pipe open, so the loop below never waits on it for more
    // than DRAIN_GRACE once the effect is over.
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
    let (mut timed_out, mut cancelled, mut over) = (false, false, false);
    let stop = |marker: &str| {
        kill_group(pgid);
        kill_marked(marker);
    };
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
                if !over && matches!(reader.try_wait(), Ok(Some(_))) {
                    // The effect exited: whatever it left behind goes too.
                    over = true;
                    stop(&spec.marker);
                    grace.as_mut().reset(tokio::time::Instant::now() + DRAIN_GRACE);
                }
            }
            _ = &mut deadline, if !over => {
                (timed_out, over) = (true, true);
                stop(&spec.marker);
                grace.as_mut().reset(tokio::time::Instant::now() + DRAIN_GRACE);
            }
            changed = cancel.changed(), if !over => {
                if changed.is_ok() && *cancel.borrow() {
                    (cancelled, over) = (true, true);
                    stop(&spec.marker);
                    grace.as_mut().reset(tokio::time::Instant::now() + DRAIN_GRACE);
                }
            }
            _ = &mut grace => break,
        }
    }
    stop(&spec.marker);
    let code = match reader.try_wait() {
        Ok(Some(out)) => exit_code(&out.status),
        _ => {
            // Killed above; reap it.
            reader.kill().ok();
            -9
        }
    };
    if timed_out {
        pending.push_str(&format!(
            "slipway: the effect ran past its deadline of {}s; its processes were killed\n",
            spec.deadline.as_secs()
        ));
    }
    if cancelled {
        pending.push_str("slipway: the build was cancelled; the effect's processes were killed\n");
    }
    if !pending.is_empty() {
        log.append(&pending).await;
    }
    Ok(if timed_out {
        EffectOutcome::TimedOut
    } else if cancelled {
        EffectOutcome::Cancelled
    } else {
        EffectOutcome::Exited(code)
    })
}

/// Kills every process of this host whose environment carries
/// `SLIPWAY_EFFECT=<marker>`: what an effect started, wherever it went.
pub fn kill_marked(marker: &str) -> usize {
    let needle = format!("{MARKER_ENV}={marker}");
    kill_where(|env| env.contains(&needle.as_bytes()))
}

/// Kills the effect processes on this host whose worker died: a
/// worker killed with SIGKILL cannot stop its effects, so every worker does
/// this when it starts and on each sweep. Effects of live workers (and of
/// this process) are left alone. Returns how many processes were killed.
pub fn kill_orphans() -> usize {
    let prefix = format!("{OWNER_ENV}=");
    kill_where(|env| {
        env.iter().filter_map(|var| var.strip_prefix(prefix.as_bytes())).any(|owner| {
            let owner = String::from_utf8_lossy(owner);
            owner != self::owner() && !owner_alive(&owner)
        })
    })
}

/// Kills every effect process this process started (a worker told to stop
/// at once).
pub fn kill_own() -> usize {
    let needle = format!("{OWNER_ENV}={}", owner());
    kill_where(|env| env.contains(&needle.as_bytes()))
}

/// How long [`kill_where`] waits for the processes it killed to be gone.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// SIGKILLs every other process of this host whose environment (its
/// `NAME=value` entries) satisfies `select`, and returns once they are gone
/// (exited or zombies, which hold no file, lock or port), or after
/// [`KILL_WAIT`]: a re-run never starts beside its killed predecessor.
fn kill_where(select: impl Fn(&[&[u8]]) -> bool) -> usize {
    let me = std::process::id();
    let mut killed = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        let vars: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
        if select(&vars) {
            // SAFETY: signals a process whose environment marks it as an effect's.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            killed.push(pid);
        }
    }
    let deadline = std::time::Instant::now() + KILL_WAIT;
    while killed.iter().any(|pid| start_time(*pid).is_some()) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    killed.len()
}

fn exit_code(status: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().unwrap_or_else(|| -status.signal().unwrap_or(0))
}

/// Kills process group `pgid`.
pub fn kill_group(pgid: i32) {
    // SAFETY: sends a signal to the process group we created; ESRCH (already
    // gone) is harmless.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// `sleep 60` carrying an effect's marker and `owner`, returned once its
    /// environment is readable in `/proc` (the parent may resume while the
    /// child's exec is still setting it up).
    fn sleeper(owner: &str) -> std::process::Child {
        let child = std::process::Command::new("sleep")
            .arg("60")
            .env(MARKER_ENV, "orphan-test")
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
        let mut orphan = sleeper("4194305.1");
        let mut ours = sleeper(owner());
        let init = format!("1.{}", start_time(1).expect("pid 1 runs"));
        let mut live = sleeper(&init);
        let mut reused = sleeper(&format!("1.{}", start_time(1).unwrap() + 1));
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
}
