//! `scripts/quickstart` refuses to start beside a running one before it
//! installs, builds or removes anything: its work folder (database, key)
//! stays as it was.

use std::io::Read as _;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/quickstart")
}

/// A work folder holding what a running quickstart keeps there.
fn work_folder(dir: &Path) -> PathBuf {
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("slipway.db"), "the running demo's database").unwrap();
    std::fs::write(work.join("dev-jwt-secret"), "the running demo's key").unwrap();
    work
}

fn assert_untouched(work: &Path) {
    assert_eq!(std::fs::read_to_string(work.join("slipway.db")).unwrap(), "the running demo's database");
    assert_eq!(std::fs::read_to_string(work.join("dev-jwt-secret")).unwrap(), "the running demo's key");
}

/// Runs `scripts/quickstart --once` on `work` and `bind`, waiting at most
/// 60 s (a refusal takes well under a second; a build would take minutes).
fn quickstart(work: &Path, bind: &str) -> Output {
    let mut child = Command::new("bash")
        .arg(script())
        .arg("--once")
        .env("SLIPWAY_QUICKSTART_DIR", work)
        .env("SLIPWAY_BIND", bind)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("scripts/quickstart did not refuse within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    child.stdout.take().unwrap().read_to_end(&mut stdout).unwrap();
    child.stderr.take().unwrap().read_to_end(&mut stderr).unwrap();
    Output { status, stdout, stderr }
}

#[test]
fn a_second_quickstart_on_a_busy_port_refuses_before_it_removes_anything() {
    let dir = tempfile::tempdir().unwrap();
    let work = work_folder(dir.path());
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let bind = busy.local_addr().unwrap().to_string();
    let out = quickstart(&work, &bind);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("{bind} is in use")) && stderr.contains("SLIPWAY_BIND"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("building"), "it built before it checked");
    assert_untouched(&work);
}

#[test]
fn a_second_quickstart_refuses_while_another_holds_its_work_folder() {
    let dir = tempfile::tempdir().unwrap();
    let work = work_folder(dir.path());
    // The first quickstart holds the lock beside its folder while it runs.
    let lock = std::fs::File::create(dir.path().join("work.lock")).unwrap();
    // SAFETY: flock on a descriptor we own; released when `lock` drops.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let out = quickstart(&work, &free);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("another quickstart is running with"), "{stderr}");
    assert_untouched(&work);
}
