//! `slipway-worker run` (§11): one job in-process with real Nix, its run
//! report in text or JSON, and clear refusals.

use crate::common;

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
    // Where its time went: the effect's Nix evaluation and builds apart from Slipway's share.
    let t = &report["timings"];
    for part in ["nix_eval_ms", "nix_build_ms", "slipway_ms", "wall_ms"] {
        assert!(t[part].as_f64().is_some_and(|ms| ms > 0.0), "{part} in {report}");
    }
    let deployed: Vec<&str> = nodes.iter().map(|n| n["name"].as_str().unwrap()).collect();
    let (code, report, out) =
        run(dir.path(), &["destroy", "--source", &source, "--config", config, "--output", "json"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(report["status"], "succeeded");
    assert!(!dir.path().join("provider/local/nodes").exists());
    // The destroy reports each node it removed.
    let destroyed = report["nodes"].as_array().unwrap();
    assert_eq!(destroyed.iter().map(|n| n["name"].as_str().unwrap()).collect::<Vec<_>>(), deployed, "{report}");
    assert!(destroyed.iter().all(|n| n["outcome"] == "destroyed"), "{report}");
    assert_eq!(report["summary"]["nodes"], deployed.len());
}

/// SEC-3: an effect gets the operator's Nix settings that choose where
/// store paths come from, and the sandbox's own that keep an evaluation
/// restricted; an operator's setting that would weaken them never reaches it.
#[test]
fn an_effect_gets_the_operators_cache_settings_but_never_one_that_weakens_an_evaluation() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source");
    let status = Command::new("cp").arg("-r").arg(repo().join("nix")).arg(&source).status().unwrap();
    assert!(status.success());
    std::fs::write(
        source.join("core/effects/deploy"),
        r#"#!/bin/sh
printf '%s' "${NIX_CONFIG-unset}" > "$STATE_DIR/nix-config"
printf '%s' "${NIX_PATH-unset}" > "$STATE_DIR/nix-path"
echo '{"nodes": [{"name": "web", "dnsNames": [], "outcome": "deployed"}]}' > "$SBOM_OUT_DIR/nodes.json"
echo '{"bomFormat": "CycloneDX", "specVersion": "1.5", "components": []}' > "$SBOM_OUT_DIR/web.cdx.json"
"#,
    )
    .unwrap();
    let source = format!("path:{}", source.display());
    let config = repo().join("examples/demo.json");
    let args = ["deploy", "--source", &source, "--config", config.to_str().unwrap()];
    let seen = |file: &str| std::fs::read_to_string(dir.path().join("provider/local").join(file)).unwrap();
    let operators = "substituters =\nmax-jobs = 3\nallow-unsafe-native-code-during-evaluation = true\n\
                     restrict-eval = false\nextra-allowed-uris = file:///";
    let out = Command::new(env!("CARGO_BIN_EXE_slipway-worker"))
        .arg("run")
        .args(args)
        .env("SLIPWAY_STATE_DIR", dir.path())
        .env("NIX_CONFIG", operators)
        .env("NIX_PATH", "nixpkgs=/etc")
        .env_remove("SLIPWAY_CONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let nix_config = seen("nix-config");
    let lines: Vec<&str> = nix_config.lines().collect();
    for kept in ["substituters =", "max-jobs = 3", "restrict-eval = true", "allow-import-from-derivation = false"] {
        assert!(lines.contains(&kept), "{kept:?} is not in the effect's NIX_CONFIG: {nix_config}");
    }
    assert!(lines.contains(&"allow-unsafe-native-code-during-evaluation = false"), "{nix_config}");
    for dropped in ["allow-unsafe-native-code-during-evaluation = true", "restrict-eval = false", "file:///"] {
        assert!(!nix_config.contains(dropped), "{dropped:?} reached the effect: {nix_config}");
    }
    assert_eq!(seen("nix-path"), "", "the host's NIX_PATH reached the effect");
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

/// The default state folder is relative (`.slipway`): a run started in
/// some folder keeps its state there, and its effect (which runs in a
/// folder of its own) still finds its lock and folders.
#[test]
fn a_local_deploy_with_a_relative_state_folder_works() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!("path:{}", repo().join("nix").display());
    let config = repo().join("examples/demo.json");
    let out = Command::new(env!("CARGO_BIN_EXE_slipway-worker"))
        .args(["run", "deploy", "--source", &source, "--config", config.to_str().unwrap(), "--output", "json"])
        .current_dir(dir.path())
        .env("SLIPWAY_STATE_DIR", "relative-state")
        .env_remove("SLIPWAY_CONFIG")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert!(out.status.success(), "{report}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(report["status"], "succeeded");
    assert!(dir.path().join("relative-state/provider/local/nodes").is_dir());
}

fn nix_source() -> String {
    format!("path:{}", repo().join("nix").display())
}

fn baked(file: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(repo().join("api/default-source").join(file)).unwrap()).unwrap()
}

/// `run schema` builds every output of a source as the fleet's schema
/// build does: the reference source's equal the api's baked copies.
#[test]
fn run_schema_prints_every_output_of_a_source_with_its_timings() {
    let dir = tempfile::tempdir().unwrap();
    let (code, built, out) = run(dir.path(), &["schema", "--source", &nix_source(), "--output", "json"]);
    assert_eq!(code, 0, "{out}");
    for (attribute, file) in [
        ("schema", "schema.json"),
        ("applicationSchemas", "applications.json"),
        ("renames", "renames.json"),
        ("meta", "meta.json"),
    ] {
        assert_eq!(built["documents"][attribute], baked(file), "{attribute}");
    }
    assert_eq!(built["failures"], serde_json::json!({}));
    for step in ["fetch", "eval", "build"] {
        assert!(built["timings_ms"][step].is_u64(), "{step}: {built}");
    }
    let (code, _, text) = run(dir.path(), &["schema", "--source", &nix_source()]);
    assert_eq!(code, 0, "{text}");
    assert!(text.lines().any(|l| l.starts_with("names") && l.ends_with("ok")), "{text}");
    let (code, error, out) = run(dir.path(), &["schema", "--source", "github:x/y", "--output", "json"]);
    assert_eq!((code, error["error"].as_str()), (2, Some("invalid_module_source")), "{out}");
}

/// `run names` evaluates a configuration's nodes and DNS names (EV-1).
#[test]
fn run_names_prints_the_nodes_and_dns_names_of_a_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let config = repo().join("examples/demo.json");
    let (code, names, out) = run(
        dir.path(),
        &["names", "--source", &nix_source(), "--config", config.to_str().unwrap(), "--output", "json"],
    );
    assert_eq!(code, 0, "{out}");
    let demo = demo();
    let domain = demo["domain"].as_str().unwrap();
    let mastodon = names["nodes"].as_array().unwrap().iter().find(|n| n["name"] == "mastodon").unwrap();
    let subdomain = demo["applications"]["mastodon"]["subdomain"].as_str().unwrap();
    assert_eq!(mastodon["dnsNames"], serde_json::json!([format!("{subdomain}.{domain}")]), "{names}");
    let disabled: Vec<&str> = demo["applications"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, app)| app["enable"] == false)
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(names["disabledApplications"], serde_json::json!(disabled));
}

/// Nix builds as its build users under the run's scratch folder: a worker
/// started with a strict umask (0077, as many service managers set) still
/// evaluates a configuration nothing in the store has seen.
#[test]
fn a_names_eval_works_under_a_strict_umask() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = demo();
    // A subdomain no earlier run evaluated, so Nix builds rather than reuses.
    let fresh = format!("umask-{}.example.org", tempfile_suffix(dir.path()));
    config["domain"] = Value::from(fresh.clone());
    let file = dir.path().join("config.json");
    std::fs::write(&file, config.to_string()).unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 077; exec \"$0\" run names --source \"$1\" --config \"$2\" --output json")
        .arg(env!("CARGO_BIN_EXE_slipway-worker"))
        .arg(nix_source())
        .arg(&file)
        .env("SLIPWAY_STATE_DIR", dir.path())
        .env_remove("SLIPWAY_CONFIG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&fresh), "{stdout}");
}

/// The last path component of a temporary folder, lower-cased to a DNS label.
fn tempfile_suffix(dir: &std::path::Path) -> String {
    let name = dir.file_name().unwrap().to_string_lossy().to_lowercase();
    name.chars().filter(|c| c.is_ascii_alphanumeric()).collect()
}
