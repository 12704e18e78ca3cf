//! `slipway-worker run` refusing a configuration with very many problems
//! (issue 7 item 6): it prints the first ones and how many more there are,
//! never all of them.

use crate::common;

use common::{demo, repo};
use serde_json::Value;
use slipway_jobs::validate::MAX_PROBLEMS;
use std::process::Command;

#[test]
fn a_local_run_lists_the_first_problems_and_counts_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let items = 75_000;
    let mut config = demo();
    config["applications"]["peertube"]["transcoding"]["resolutions"] =
        Value::from((0..items).map(|i| format!("{i:09}")).collect::<Vec<_>>());
    let file = dir.path().join("many-problems.json");
    let text = config.to_string();
    std::fs::write(&file, &text).unwrap();
    let source = format!("path:{}", repo().join("nix").display());
    let out = Command::new(env!("CARGO_BIN_EXE_slipway-worker"))
        .args(["run", "deploy", "--source", &source, "--config", file.to_str().unwrap(), "--output", "json"])
        .env("SLIPWAY_STATE_DIR", dir.path())
        .env_remove("SLIPWAY_CONFIG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["error"], "invalid_configuration");
    assert_eq!(answer["details"]["problems"].as_array().unwrap().len(), MAX_PROBLEMS);
    assert_eq!(answer["details"]["omitted"], items - MAX_PROBLEMS);
    assert!(answer["message"].as_str().unwrap().contains("75000 problems"), "{answer}");
    assert!(stderr.contains(&format!("{} more problems", items - MAX_PROBLEMS)), "{stderr}");
    assert!(out.stdout.len() < text.len() / 10, "stdout is {} bytes", out.stdout.len());
    assert!(out.stderr.len() < text.len() / 10, "stderr is {} bytes", out.stderr.len());
}
