//! The retention sweep (§6 `sweep`, Q-6; seed 001 "Completed records retain
//! … until retention elapses"): finished builds older than `RETENTION` lose
//! their work folder and their log; the build rows stay, with status, reason,
//! timings and report. Every worker host sweeps its own work folders; the
//! log clearing is the same statement everywhere, so sweeping twice is harmless.
//!
//! It also removes, at once, the scratch folders (`attempt-<n>/tmp`, an
//! effect's `TMPDIR`) and the operator secrets handed to an effect
//! (`attempt-<n>/secrets`) of attempts that can no longer run: their build has
//! finished or moved on to a later attempt. An effect removes its own
//! scratch folder however it ends; this catches a worker killed with it.

use super::Ctx;
use crate::store::{builds, now_ms, StoreError};
use serde::Serialize;

/// What one sweep removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Swept {
    /// Build logs emptied.
    pub logs: u64,
    /// Work folders removed from this host.
    pub work_dirs: u64,
    /// Scratch and handed-secrets folders of attempts that can no longer
    /// run, removed from this host.
    pub scratch_dirs: u64,
    /// `nix`-queue rows deleted: names evals and failed builds that ended
    /// more than [`NIX_RESULTS_KEPT`] ago (their waiters have read them).
    pub nix_results: u64,
}

/// How long the row of a names eval, or of a failed schema build, is kept
/// after it ended. Built outputs are kept: they are the cache.
pub const NIX_RESULTS_KEPT: std::time::Duration = std::time::Duration::from_secs(3600);

/// One sweep, as every worker runs it at start and each worker serving
/// `maintenance` on every tick: stops the effects that dead workers left
/// running on this host ([`crate::effect::kill_orphans`]), then [`run`],
/// and logs what both did. A failed sweep is logged and left to the next
/// tick (§6: "next tick").
pub async fn tick(ctx: &Ctx) {
    let orphans = crate::effect::kill_orphans();
    if orphans > 0 {
        tracing::warn!(processes = orphans, "stopped effects that a dead worker on this host left running");
    }
    match run(ctx).await {
        Ok(swept) => tracing::info!(
            logs = swept.logs,
            work_dirs = swept.work_dirs,
            scratch_dirs = swept.scratch_dirs,
            nix_results = swept.nix_results,
            "retention sweep"
        ),
        Err(e) => tracing::warn!(error = %e, "retention sweep failed; the next tick tries again"),
    }
}

/// Sweeps builds that finished before `now_ms - RETENTION`.
pub async fn run(ctx: &Ctx) -> Result<Swept, StoreError> {
    let cutoff = now_ms() - ctx.config.worker.retention.as_millis() as i64;
    let mut conn = ctx.db.acquire().await?;
    let logs = builds::clear_logs_finished_before(&mut conn, cutoff).await?;
    let (mut work_dirs, mut scratch_dirs) = (0, 0);
    let root = ctx.config.state_dir.join("builds");
    for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        let Some(build_id) = entry.file_name().to_str().map(str::to_owned) else { continue };
        // Unknown ids (another database's builds) are left alone.
        let Some((finished, attempts)) = builds::ending(&mut conn, &build_id).await? else { continue };
        if finished.is_some_and(|at| at < cutoff) {
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => work_dirs += 1,
                Err(e) => tracing::warn!(build.id = %build_id, error = %e, "cannot remove a swept work folder"),
            }
            continue;
        }
        for attempt in std::fs::read_dir(entry.path()).into_iter().flatten().flatten() {
            let n = attempt.file_name().to_str().and_then(|n| n.strip_prefix("attempt-")?.parse::<i64>().ok());
            let over = finished.is_some() || n.is_some_and(|n| n < attempts);
            for folder in super::DISPOSABLE {
                let scratch = attempt.path().join(folder);
                if over && scratch.exists() {
                    match std::fs::remove_dir_all(&scratch) {
                        Ok(()) => scratch_dirs += 1,
                        Err(e) => tracing::warn!(build.id = %build_id, error = %e, "cannot remove a scratch folder"),
                    }
                }
            }
        }
    }
    // A `nix` job's folder is `<state>/nix/<key hash>-<pid>`; a worker killed
    // mid-job leaves it behind.
    for entry in std::fs::read_dir(ctx.config.state_dir.join("nix")).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.rsplit_once('-').and_then(|(_, pid)| pid.parse::<i32>().ok()) else { continue };
        if pid != std::process::id() as i32 && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            match crate::nix::output::remove_folder_and_roots(&entry.path()) {
                Ok(()) => scratch_dirs += 1,
                Err(e) => tracing::warn!(folder = %name, error = %e, "cannot remove a dead worker's nix folder"),
            }
        }
    }
    let nix_results =
        crate::store::nix_results::sweep(&mut conn, now_ms() - NIX_RESULTS_KEPT.as_millis() as i64).await?;
    Ok(Swept { logs, work_dirs, scratch_dirs, nix_results })
}
