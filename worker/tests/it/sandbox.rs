//! SEC-3, the sandbox itself, with the real binaries, the real Nix daemon
//! and real Nix: Slipway's own files are private whatever the umask it is
//! started with, and a worker refuses to start on a Nix daemon that builds
//! outside Nix's sandbox (unless told to run anyway). Polls with
//! deadlines; never sleeps to synchronise.

use crate::common;

use common::{binary, command, demo, free_port, start, wait_exit, Api};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::TestDatabase;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// `cmd`, started with file mode mask `mask`.
fn with_umask(mut cmd: Command, mask: libc::mode_t) -> Command {
    // SAFETY: umask is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            libc::umask(mask);
            Ok(())
        });
    }
    cmd
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o7777
}

/// SEC-3: an api and a worker started with umask 022 (as many shells and
/// service managers start them) still keep the state folder, its folders
/// and the database to themselves: a build user of Nix or the sandbox
/// user can neither list nor enter them.
#[tokio::test]
async fn slipways_own_files_are_private_whatever_the_umask_it_starts_with() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let port = free_port();
    let _api = start(with_umask(command(&binary("slipway-api"), &db, port), 0o022), &db, "api.log");
    let mut worker = command(&binary("slipway-worker"), &db, port);
    worker.arg("work").env("READY_TIMEOUT", "1s");
    let _worker = start(with_umask(worker, 0o022), &db, "worker.log");
    let api = Api::connect(&db, port).await;
    let (status, accepted) = api.submit("private", &demo()).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    api.wait_state("private", "active", Duration::from_secs(240)).await;

    let state = db.path("state");
    let build = state.join("builds").join(accepted["build_id"].as_str().unwrap());
    for folder in [
        state.clone(),
        state.join("builds"),
        build.clone(),
        state.join("locks"),
        state.join("provider"),
        state.join("provider/private"),
    ] {
        assert_eq!(mode(&folder), 0o700, "{} is open to others", folder.display());
    }
    assert_eq!(std::fs::metadata(&state).unwrap().uid(), 0, "the state folder is not the worker's");
    for file in ["slipway.db", "slipway.db-wal", "slipway.db-shm"] {
        let path = db.path(file);
        if path.exists() {
            assert_eq!(mode(&path), 0o600, "{} is readable by others", path.display());
        }
    }
    // Every attempt folder is closed to others too (its owner is the
    // sandbox user while its effect runs).
    for attempt in std::fs::read_dir(&build).unwrap().flatten() {
        assert_eq!(mode(&attempt.path()) & 0o077, 0, "{} is open to others", attempt.path().display());
    }
}

/// A Nix daemon of the test's own, on a socket of its own, started with
/// `sandbox` as given; killed when dropped.
struct Daemon {
    process: std::process::Child,
    socket: std::path::PathBuf,
}

impl Daemon {
    async fn start(dir: &Path, sandbox: bool) -> Self {
        let socket = dir.join("daemon/socket");
        std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
        std::fs::set_permissions(socket.parent().unwrap(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let process = Command::new("nix-daemon")
            .env("NIX_DAEMON_SOCKET_PATH", &socket)
            .env("NIX_CONFIG", format!("substituters =\nsandbox = {sandbox}\nsandbox-paths = /bin /usr /lib /lib64"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nix-daemon starts");
        common::wait_for("the test's Nix daemon to listen", Duration::from_secs(20), || async {
            socket.exists().then_some(())
        })
        .await;
        Self { process, socket }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.process.kill().ok();
        self.process.wait().ok();
    }
}

/// SEC-3: a worker whose Nix daemon builds outside Nix's sandbox (where a
/// source's builders would see the host and its network) refuses to start
/// and says why; told `SLIPWAY_NIX_REQUIRE_SANDBOX=false`, it starts and
/// warns. On a daemon that sandboxes, it starts.
#[tokio::test]
async fn a_worker_refuses_to_start_on_a_nix_daemon_that_builds_outside_its_sandbox() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let port = free_port();
    let unsandboxed = Daemon::start(&db.path("unsandboxed"), false).await;
    let worker = |daemon: &Daemon, log: &str, extra: &[(&str, &str)]| {
        let mut cmd = command(&binary("slipway-worker"), &db, port);
        cmd.arg("work").env("NIX_DAEMON_SOCKET_PATH", &daemon.socket).envs(extra.iter().copied());
        start(cmd, &db, log)
    };
    let refused = worker(&unsandboxed, "refused.log", &[]);
    let status =
        wait_exit(refused, "the worker to refuse to start", Duration::from_secs(60), &db.path("refused.log")).await;
    let log = std::fs::read_to_string(db.path("refused.log")).unwrap();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("outside Nix's sandbox") && log.contains("SLIPWAY_NIX_REQUIRE_SANDBOX"), "{log}");

    let warned = worker(&unsandboxed, "warned.log", &[("SLIPWAY_NIX_REQUIRE_SANDBOX", "false")]);
    common::wait_for("the worker to start with a warning", Duration::from_secs(60), || async {
        let log = std::fs::read_to_string(db.path("warned.log")).unwrap_or_default();
        (log.contains("outside Nix's sandbox") && log.contains("WARN")).then_some(())
    })
    .await;
    drop(warned);

    let sandboxed = Daemon::start(&db.path("sandboxed"), true).await;
    let _started = worker(&sandboxed, "started.log", &[]);
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let api = Api::connect(&db, port).await;
    let (status, accepted) = api.submit("sandboxed", &demo()).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    api.wait_state("sandboxed", "active", Duration::from_secs(240)).await;
    let log = std::fs::read_to_string(db.path("started.log")).unwrap();
    assert!(!log.contains("outside Nix's sandbox"), "{log}");
}
