//! Fault injection for durability tests: `SLIPWAY_FAILPOINTS=a,b=stop`
//! makes the process abort, as a crash would, when it reaches point `a`, and
//! stop itself with `SIGSTOP`, as `kill -STOP` would, at point `b` (a test
//! resumes it with `SIGCONT`). Read once from the environment.
//!
//! Compiled only into debug builds (`debug_assertions`: every build of the
//! tests, `cargo build`); in a release build (`cargo build --release`)
//! [`hit`] and [`hit_between_statements`] are empty and the variable is
//! ignored.

use crate::store::Db;
#[cfg(debug_assertions)]
use std::sync::OnceLock;

/// What the process does at an armed point.
#[cfg(debug_assertions)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Abort: no unwinding, no cleanup.
    Abort,
    /// Stop the whole process until someone sends `SIGCONT`.
    Stop,
}

/// The points this process acts at.
#[cfg(debug_assertions)]
fn armed() -> &'static [(String, Action)] {
    static POINTS: OnceLock<Vec<(String, Action)>> = OnceLock::new();
    POINTS.get_or_init(|| {
        std::env::var("SLIPWAY_FAILPOINTS")
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| match s.split_once('=') {
                        Some((name, "stop")) => (name.to_owned(), Action::Stop),
                        Some((name, _)) => (name.to_owned(), Action::Abort),
                        None => (s.to_owned(), Action::Abort),
                    })
                    .collect()
            })
            .unwrap_or_default()
    })
}

/// Aborts the process, or stops it, when `name` is armed. A stop holds
/// whatever locks the caller's transaction (and any other task's) holds.
#[cfg(debug_assertions)]
pub fn hit(name: &str) {
    match armed().iter().find(|(p, _)| p == name).map(|(_, action)| *action) {
        None => {}
        Some(Action::Abort) => {
            eprintln!("slipway: failpoint {name}: aborting");
            std::process::abort();
        }
        Some(Action::Stop) => {
            eprintln!("slipway: failpoint {name}: stopping (SIGSTOP) until SIGCONT");
            // SAFETY: stops this process, as `kill -STOP` would; SIGCONT resumes it here.
            unsafe { libc::kill(std::process::id() as libc::pid_t, libc::SIGSTOP) };
        }
    }
}

/// Like [`hit`], but a stop lands between two statements: it first takes
/// every connection of `db` ([`Db::hold_all`]), so no task of this process
/// is inside a statement or a transaction, holds them while stopped, and
/// gives them back once resumed. The caller must hold no connection itself.
#[cfg(debug_assertions)]
pub async fn hit_between_statements(name: &str, db: &Db) {
    match armed().iter().find(|(p, _)| p == name).map(|(_, action)| *action) {
        Some(Action::Stop) => {
            let held = db.hold_all().await;
            hit(name);
            drop(held);
        }
        _ => hit(name),
    }
}

/// In a release build: nothing.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn hit(_name: &str) {}

/// In a release build: nothing.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub async fn hit_between_statements(_name: &str, _db: &Db) {}
