//! Q-2 with real Nix builders: a cancelled or timed-out build leaves no
//! process of its effect behind (its own processes end with its PID
//! namespace; its builders, which the Nix daemon runs in its sandbox, end
//! when the daemon sees their client gone) and no scratch folder.

use slipway_jobs::jobs::build_job::{self as build, Ran};
use slipway_jobs::jobs::report::Reason;
use slipway_jobs::state::{BuildKind, BuildStatus};
use slipway_jobs::store::queue::BuildJob;
use slipway_jobs::store::Engine;
use slipway_jobs::submit;
use slipway_jobs::test_support::{processes_with, sleepy_nix_source, wait_for, world, World};
use std::time::Duration;

/// A world whose deployment `demo` is queued on a copy of the reference
/// source whose node builders sleep; returns the build id and the token
/// every builder carries.
async fn sleepy_build(w: &World) -> (String, String) {
    let token = format!("slipway-sleepy-{}", w.db.dir.path().file_name().unwrap().to_string_lossy());
    let source = w.db.path("sleepy-source");
    sleepy_nix_source(&source, &token);
    let id = w.queue("demo", BuildKind::Deploy, Some(&format!("path:{}", source.display()))).await;
    (id, token)
}

/// Waits until a Nix builder carrying `token` runs.
async fn builder_runs(token: &str) {
    wait_for("a Nix builder of the build to run", Duration::from_secs(120), || async {
        (!processes_with(token).is_empty()).then_some(())
    })
    .await
}

/// The effect's processes are gone when it returns; its Nix builders, which
/// the Nix daemon runs, end as the daemon sees their client gone.
async fn assert_nothing_left(w: &World, id: &str, token: &str) {
    wait_for("the Nix daemon to end the effect's builders", Duration::from_secs(10), || async {
        processes_with(token).is_empty().then_some(())
    })
    .await;
    let scratch = w.ctx.attempt_dir(id, 1).join("tmp");
    assert!(!scratch.exists(), "the effect's scratch folder {} is left", scratch.display());
}

#[tokio::test]
async fn a_cancelled_deploy_leaves_no_nix_builder_and_no_scratch_folder() {
    let w = world(Engine::Sqlite, &[]).await;
    let (id, token) = sleepy_build(&w).await;
    let ctx = w.ctx.clone();
    let job = BuildJob { build_id: id.clone() };
    let running = tokio::spawn(async move { build::run(job, &ctx).await });
    builder_runs(&token).await;
    assert_eq!(submit::cancel(&w.ctx.db, &id).await.unwrap(), submit::Cancel::Requested);
    let report = match tokio::time::timeout(Duration::from_secs(60), running).await.unwrap().unwrap().unwrap() {
        Ran::Finished(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(report.status, BuildStatus::Cancelled, "{report:?}");
    assert_nothing_left(&w, &id, &token).await;
}

#[tokio::test]
async fn a_deploy_past_its_deadline_leaves_no_nix_builder_and_no_scratch_folder() {
    let w = world(Engine::Sqlite, &[("DEPLOY_TIMEOUT", "8s")]).await;
    let (id, token) = sleepy_build(&w).await;
    let report = w.run(&id).await;
    assert_eq!(report.reason.map(Reason::as_str), Some("timeout"), "{report:?}");
    assert_nothing_left(&w, &id, &token).await;
}
