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
//!
//! And it removes the GC roots of plans (a dry run's
//! `<state dir>/plans/<deployment>/<build>`, [`Ctx::plan_roots_dir`])
//! older than `PLAN_TTL`, after which the plan can no longer be applied;
//! an applied plan's go at once ([`drop_plan_roots`]).
//!
//! And it deletes the `Idempotency-Key` rows past `SLIPWAY_IDEMPOTENCY_TTL`
//! ([`crate::store::idempotency::sweep`], IK-1).

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
    /// Plans' GC root folders older than `PLAN_TTL` removed from this host.
    pub plan_roots: u64,
    /// `Idempotency-Key` rows past `SLIPWAY_IDEMPOTENCY_TTL` deleted (IK-1).
    pub idempotency_keys: u64,
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
            plan_roots = swept.plan_roots,
            idempotency_keys = swept.idempotency_keys,
            "retention sweep"
        ),
        Err(e) => tracing::warn!(error = %e, "retention sweep failed; the next tick tries again"),
    }
    let before = now_ms() - i64::try_from(ctx.config.worker.retention.as_millis()).unwrap_or(i64::MAX);
    let swept = async {
        let mut tx = ctx.db.begin_write().await?;
        let n = crate::store::webhooks::sweep(&mut tx, before).await?;
        tx.commit().await?;
        Ok::<u64, StoreError>(n)
    };
    match swept.await {
        Ok(0) => {}
        Ok(n) => tracing::info!(deliveries = n, "swept webhook deliveries older than RETENTION"),
        Err(e) => tracing::warn!(error = %e, "could not sweep webhook deliveries; the next tick tries again"),
    }
    match super::webhook::restart_stalled(ctx).await {
        Ok(0) => {}
        Ok(n) => tracing::warn!(endpoints = n, "restarted webhook delivery jobs that had stopped"),
        Err(e) => {
            tracing::warn!(error = %e, "could not look for stopped webhook delivery jobs; the next tick tries again")
        }
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
    let plan_roots = sweep_plan_roots(ctx);
    let idempotency_keys = crate::store::idempotency::sweep(&mut conn, now_ms()).await?;
    Ok(Swept { logs, work_dirs, scratch_dirs, nix_results, plan_roots, idempotency_keys })
}

/// Removes the plans' GC root folders (`<state dir>/plans/<deployment>/<build>`)
/// last changed more than `PLAN_TTL` ago, with Nix's roots into them, and
/// a deployment's folder once it holds none. The folder is made, and its
/// roots added, when the dry run runs, after its plan's `expires_at` was
/// set: a plan's systems outlive the time it can be applied. Returns how
/// many it removed; one it cannot remove is logged and left to the next
/// sweep.
fn sweep_plan_roots(ctx: &Ctx) -> u64 {
    let ttl = ctx.config.safe_change.plan_ttl;
    let mut removed = 0;
    for deployment in std::fs::read_dir(ctx.plans_dir()).into_iter().flatten().flatten() {
        for plan in std::fs::read_dir(deployment.path()).into_iter().flatten().flatten() {
            let age = plan.metadata().and_then(|m| m.modified()).ok().and_then(|at| at.elapsed().ok());
            if age.is_none_or(|age| age <= ttl) {
                continue;
            }
            match crate::nix::output::remove_folder_and_roots(&plan.path()) {
                Ok(()) => removed += 1,
                Err(e) => tracing::warn!(plan = %plan.path().display(), error = %e, "cannot remove a plan's GC roots"),
            }
        }
        // Only an empty folder goes: a dry run may be making one in it now.
        let _ = std::fs::remove_dir(deployment.path());
    }
    removed
}

/// Removes the GC roots of the plan that build `build` of `deployment`
/// made on this host (its folder [`Ctx::plan_roots_dir`], with Nix's roots
/// into it), as an apply does once it activated the plan's systems, and
/// the deployment's plans folder when no other plan is left in it. A plan
/// that has none here (another host's, or already dropped) is fine.
/// `deployment` and `build` must be ids (ID-1, ST-4), never paths.
pub fn drop_plan_roots(ctx: &Ctx, deployment: &str, build: &str) -> std::io::Result<()> {
    let plain = |s: &str| !s.is_empty() && !s.starts_with('.') && !s.contains(['/', '\0']);
    if !plain(deployment) || !plain(build) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} or {} is not an id", crate::id::quoted(deployment), crate::id::quoted(build)),
        ));
    }
    crate::nix::output::remove_folder_and_roots(&ctx.plan_roots_dir(deployment, build))?;
    match std::fs::remove_dir(ctx.plans_dir().join(deployment)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound || e.kind() == std::io::ErrorKind::DirectoryNotEmpty => {
            Ok(())
        }
        other => other,
    }
}
