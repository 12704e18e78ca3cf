//! `slipway rollout start|status|pause|resume|cancel [--follow]` against the
//! real api and worker, a real git repository over `file://` holding the
//! reference source, and real Nix deploys.

use crate::common;

use common::{demo_file, Fleet};
use serde_json::Value;
use slipway_jobs::store::Engine;
use std::path::Path;
use std::process::Command;

/// `git args…` in `dir`; its output.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Slipway tests",
            "-c",
            "user.email=tests@slipway.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn a_rollout_started_with_follow_shows_its_progress_and_ends_completed_and_its_status_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    assert!(Command::new("cp").arg("-r").arg(common::repo().join("nix")).arg(&repo).status().unwrap().success());
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "the reference source"]);
    let rev = git(&repo, &["rev-parse", "HEAD"]);
    let url = format!("file://{}", repo.display());
    let fleet =
        Fleet::start_both(Engine::Sqlite, &[("SLIPWAY_ALLOW_PATH_SOURCES", "true"), ("SLIPWAY_TRUSTED_SOURCES", &url)])
            .await;
    let user = fleet.token(false);
    let operator = fleet.token(true);
    let demo = demo_file();
    let source = format!("git+{url}?rev={rev}");
    for id in ["cli-1", "cli-2", "cli-3"] {
        let deploy = fleet
            .slipway(&user, &["deploy", id, "-f", demo.to_str().unwrap(), "--module-source", &source, "--follow"])
            .await;
        assert_eq!(deploy.code, 0, "{deploy:#?}");
    }
    // Not an operator: refused with the api's words.
    let refused = fleet
        .slipway(&user, &["rollout", "start", "--source", &source, "--deployments", "cli-1", "--waves", "1"])
        .await;
    assert_ne!(refused.code, 0, "{refused:#?}");
    assert!(refused.stderr.contains("operator"), "{refused:#?}");

    let started = fleet
        .slipway(
            &operator,
            &[
                "rollout",
                "start",
                "--source",
                &format!("git+{url}?ref=main"),
                "--deployments",
                "cli-1,cli-2,cli-3",
                "--waves",
                "1,100%",
                "--follow",
            ],
        )
        .await;
    assert_eq!(started.code, 0, "{started:#?}");
    let first = started.stdout.lines().next().unwrap();
    assert!(
        first.starts_with("rollout rollout-") && first.ends_with(&format!("to git+{url}?rev={rev}")),
        "{started:#?}"
    );
    let id = first.split_whitespace().nth(1).unwrap().trim_end_matches(':').to_owned();
    assert!(started.stdout.contains(&format!("rollout {id}: completed (wave 2 of 2), 0 failures")), "{started:#?}");

    let status = fleet.slipway(&operator, &["--output", "json", "rollout", "status", &id]).await;
    assert_eq!(status.code, 0, "{status:#?}");
    let rollout: Value = status.json();
    assert_eq!(rollout["state"], "completed");
    let statuses: Vec<&str> =
        rollout["deployments"].as_array().unwrap().iter().map(|d| d["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["succeeded", "succeeded", "succeeded"], "{rollout}");
    let list = fleet.slipway(&operator, &["rollout", "status"]).await;
    assert!(list.stdout.starts_with(&id) && list.stdout.contains("completed"), "{list:#?}");
    // An ended rollout cannot be paused: the api's refusal, exit non-zero.
    let pause = fleet.slipway(&operator, &["rollout", "pause", &id]).await;
    assert_ne!(pause.code, 0, "{pause:#?}");
    assert!(pause.stderr.contains("rollout_ended"), "{pause:#?}");
}
