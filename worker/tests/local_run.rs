//! `slipway-worker run` (§11): one job in-process with real Nix, its run
//! report in text or JSON, and clear refusals.

mod common;

use common::{demo, repo};
use serde_json::Value;
use std::process::Command;

fn run(state: &std::path::Path, args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_slipway-worker"))
        .arg("run")
        .args(args)
        .env("SLIPWAY_STATE_DIR", state)
        .env_remove("SLIPWAY_CONFIG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), json, stdout + &String::from_utf8_lossy(&out.stderr))
}

#[test]
fn a_local_deploy_and_destroy_report_every_node_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!("path:{}", repo().join("nix").display());
    let config = repo().join("examples/demo.json");
    let config = config.to_str().unwrap();
    let (code, report, out) = run(dir.path(), &["deploy", "--source", &source, "--config", config, "--output", "json"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(report["status"], "succeeded");
    let nodes = report["nodes"].as_array().unwrap();
    assert!(!nodes.is_empty());
    assert!(nodes.iter().all(|n| n["outcome"] == "deployed" && n["sbom"] == "ready"), "{report}");
    let (code, report, out) =
        run(dir.path(), &["destroy", "--source", &source, "--config", config, "--output", "json"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(report["status"], "succeeded");
    assert!(!dir.path().join("provider/local/nodes").exists());
}

#[test]
fn an_invalid_configuration_is_refused_with_every_problem_and_exit_code_two() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = demo();
    config["stray"] = serde_json::json!(1);
    config["domain"] = serde_json::json!(7);
    let file = dir.path().join("bad.json");
    std::fs::write(&file, config.to_string()).unwrap();
    let source = format!("path:{}", repo().join("nix").display());
    let (code, answer, out) =
        run(dir.path(), &["deploy", "--source", &source, "--config", file.to_str().unwrap(), "--output", "json"]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(answer["error"], "invalid_configuration");
    let paths: Vec<&str> =
        answer["details"]["problems"].as_array().unwrap().iter().map(|p| p["path"].as_str().unwrap()).collect();
    assert!(paths.contains(&"/stray") && paths.contains(&"/domain"), "{paths:?}");
}

#[test]
fn a_missing_configuration_file_or_source_folder_is_named_in_the_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!("path:{}", repo().join("nix").display());
    let (code, answer, out) =
        run(dir.path(), &["deploy", "--source", &source, "--config", "/nonexistent.json", "--output", "json"]);
    assert_eq!(code, 2, "{out}");
    assert!(answer["message"].as_str().unwrap().contains("/nonexistent.json"), "{answer}");
    let config = repo().join("examples/demo.json");
    let (code, _, out) =
        run(dir.path(), &["deploy", "--source", "path:/nonexistent", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(out.contains("/nonexistent"), "{out}");
}
