//! This host's processes as `/proc` shows them, and the Slipway binaries a
//! test starts (killed when dropped).

use super::{repo, TestDatabase};
use std::path::PathBuf;

/// A running process of this host, as `/proc` showed it when it was read.
#[derive(Debug, Clone)]
pub struct Process {
    /// Its pid, as this host numbers it.
    pub pid: u32,
    /// Its environment: `KEY=value` entries separated by NUL bytes (empty when unreadable).
    pub environ: Vec<u8>,
    /// Its command line, the arguments joined by spaces.
    pub cmdline: String,
    /// Its working folder (empty when unreadable; a deleted one keeps its old path).
    pub cwd: PathBuf,
    /// Its PID namespace, as `/proc/<pid>/ns/pid` names it (`pid:[4026531836]`).
    pub pid_namespace: String,
    /// When it started, in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub started: u64,
}

impl Process {
    /// Process `pid`, or `None` when it is gone, a zombie, or its PID namespace is unreadable.
    pub fn of(pid: u32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            return None;
        }
        let started = fields.get(19)?.parse().ok()?;
        let pid_namespace = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?.display().to_string();
        let read = |what: &str| std::fs::read(format!("/proc/{pid}/{what}")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&read("cmdline")).replace('\0', " ").trim().to_owned();
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_default().display().to_string();
        let cwd = PathBuf::from(cwd.strip_suffix(" (deleted)").unwrap_or(&cwd));
        Some(Self { pid, environ: read("environ"), cmdline, cwd, pid_namespace, started })
    }

    /// The value of environment variable `key`, if set.
    pub fn env(&self, key: &str) -> Option<String> {
        self.environ.split(|b| *b == 0).find_map(|entry| {
            let value = entry.strip_prefix(key.as_bytes())?.strip_prefix(b"=")?;
            Some(String::from_utf8_lossy(value).into_owned())
        })
    }

    /// Whether its environment or command line contains `needle`, or, when
    /// `needle` is an absolute path, it works in that folder or under it.
    pub fn mentions(&self, needle: &str) -> bool {
        if needle.is_empty() {
            return false;
        }
        let contains = |hay: &[u8]| hay.windows(needle.len()).any(|w| w == needle.as_bytes());
        contains(&self.environ)
            || self.cmdline.contains(needle)
            || (needle.starts_with('/') && self.cwd.starts_with(needle))
    }
}

/// Every running process of this host but this one, read from `/proc` in one pass.
pub fn processes() -> Vec<Process> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter_map(Process::of)
        .collect()
}

/// The running processes of this host (other than this one) that
/// [mention](Process::mentions) `needle`: what is left of an effect, Nix
/// builders included (they start with a clean environment, but with the
/// derivation's attributes and their build folder).
pub fn processes_with(needle: &str) -> Vec<u32> {
    processes().into_iter().filter(|p| p.mentions(needle)).map(|p| p.pid).collect()
}

/// The processes of this host in the PID namespace named `namespace`, as
/// `readlink /proc/self/ns/pid` prints it (`pid:[4026532291]`): an effect
/// records its namespace so a test finds every process it started, by
/// the kernel's own grouping, whatever they did to their environment,
/// session or parent (a sandboxed effect sees only its namespace's pids).
pub fn processes_in_pid_namespace(namespace: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/pid")).is_ok_and(|ns| ns.as_os_str() == namespace)
                && process_runs(*pid as i32)
        })
        .collect()
}

/// True while process `pid` runs (a zombie waiting to be reaped does not run).
pub fn process_runs(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit(')').next().and_then(|s| s.split_whitespace().next()).unwrap_or("gone");
    state != "gone" && state != "Z"
}

/// The newest modification time of the files under `dir` (to tell a
/// binary built before its sources changed).
pub fn newest(dir: &std::path::Path) -> std::time::SystemTime {
    let mut latest = std::time::SystemTime::UNIX_EPOCH;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        // Unit tests (`tests.rs`, `tests/`) are not in a binary: editing one leaves it current.
        if path.file_stem().is_some_and(|stem| stem == "tests") {
            continue;
        }
        let t =
            if path.is_dir() { newest(&path) } else { entry.metadata().and_then(|m| m.modified()).unwrap_or(latest) };
        latest = latest.max(t);
    }
    latest
}

/// A child process killed (SIGKILL) when dropped, however the test ends.
pub struct Running(pub std::process::Child);

impl Running {
    /// SIGKILLs the process now and reaps it.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback port free at the time of asking.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("its address").port()
}

/// A command for Slipway binary `bin` on `db`, the api on `port`, tokens
/// signed with `secret`, the built-in source of this repository and a 2 s
/// heartbeat; no configuration file and no failpoint from the caller's
/// environment.
pub fn slipway_command(bin: &std::path::Path, db: &TestDatabase, port: u16, secret: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(bin);
    cmd.env("DATABASE_URL", &db.url)
        .env("SLIPWAY_STATE_DIR", db.path("state"))
        .env("SLIPWAY_BIND", format!("127.0.0.1:{port}"))
        .env("SLIPWAY_JWT_SECRET", secret)
        .env("SLIPWAY_DEFAULT_SOURCE_DIR", repo().join("nix"))
        .env("SLIPWAY_HEARTBEAT", "2")
        .env_remove("SLIPWAY_CONFIG")
        .env_remove("SLIPWAY_FAILPOINTS");
    cmd
}

/// Starts `cmd` with no input and its stderr appended to `<test dir>/<log>`.
pub fn start(mut cmd: std::process::Command, db: &TestDatabase, log: &str) -> Running {
    use std::process::Stdio;
    let file = std::fs::OpenOptions::new().create(true).append(true).open(db.path(log)).expect("a log file");
    Running(
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::from(file)).spawn().expect("the process starts"),
    )
}
