//! The operator guide's systemd units (docs/systemd/) are units systemd
//! accepts, with the binaries this workspace builds: `systemd-analyze
//! verify` reports nothing on them. Also what the guide promises of them: a
//! stop reaches the worker alone first (its builds finish), and whatever is
//! left of its effects is killed with it once the stop times out.

use crate::common;

use common::{binary, repo};
use std::collections::BTreeMap;
use std::process::Command;

/// The folder the units name their binaries in.
const INSTALLED: &str = "/usr/local/bin/";

/// The `key=value` settings of `section` in unit file `text` (last one wins).
fn settings(text: &str, section: &str) -> BTreeMap<String, String> {
    let mut current = String::new();
    let mut found = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = name.to_owned();
        } else if current == section {
            let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("not key=value: {line}"));
            found.insert(key.trim().to_owned(), value.trim().to_owned());
        }
    }
    found
}

/// Runs `systemd-analyze verify` on `unit` with its binaries taken from
/// this workspace's build (the only change made to the unit's text).
fn verify(unit: &str) {
    let text = std::fs::read_to_string(repo().join("docs/systemd").join(unit)).unwrap();
    let built = binary("slipway-worker");
    let built = format!("{}/", built.parent().unwrap().display());
    assert!(text.contains(INSTALLED), "{unit} does not start a binary from {INSTALLED}");
    binary("slipway-api");
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join(unit);
    std::fs::write(&copy, text.replace(INSTALLED, &built)).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .unwrap_or_else(|e| panic!("systemd-analyze does not run ({e}): it comes with Debian's systemd package"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify {unit}: {:?}\n{stderr}",
        out.status
    );
}

#[test]
fn systemd_accepts_the_api_unit() {
    verify("slipway-api.service");
}

#[test]
fn systemd_accepts_the_worker_unit() {
    verify("slipway-worker.service");
}

/// Seconds of a systemd time span such as `3660s`, `30min` or `1h`.
fn seconds(span: &str) -> u64 {
    let digits: String = span.chars().take_while(char::is_ascii_digit).collect();
    let n: u64 = digits.parse().unwrap_or_else(|_| panic!("not a time span: {span}"));
    match &span[digits.len()..] {
        "" | "s" => n,
        "min" | "m" => n * 60,
        "h" => n * 3600,
        other => panic!("unit {other} of {span} is not read here"),
    }
}

#[test]
fn stopping_the_worker_unit_lets_builds_finish_then_kills_its_effects_with_it() {
    let text = std::fs::read_to_string(repo().join("docs/systemd/slipway-worker.service")).unwrap();
    let service = settings(&text, "Service");
    // mixed: SIGTERM to the worker alone (it drains), SIGKILL to the whole
    // cgroup, effects and Nix builders included, when the stop times out.
    assert_eq!(service.get("KillMode").map(String::as_str), Some("mixed"), "{service:?}");
    let default_deploy_timeout =
        slipway_jobs::config::Config::from_keys(&BTreeMap::new()).unwrap().worker.deploy_timeout.as_secs();
    let stop = seconds(service.get("TimeoutStopSec").expect("TimeoutStopSec"));
    assert!(stop > default_deploy_timeout, "TimeoutStopSec={stop}s cuts builds short of DEPLOY_TIMEOUT");
    assert_eq!(service.get("User").map(String::as_str), Some("root"), "effects need root for their PID namespace");
}

#[test]
fn neither_unit_restarts_a_binary_that_exits_78_for_a_database_it_cannot_use() {
    for unit in ["slipway-api.service", "slipway-worker.service"] {
        let text = std::fs::read_to_string(repo().join("docs/systemd").join(unit)).unwrap();
        let service = settings(&text, "Service");
        assert_eq!(service.get("Restart").map(String::as_str), Some("on-failure"), "{unit}");
        let prevented = service.get("RestartPreventExitStatus").map(|v| v.split_whitespace().collect::<Vec<_>>());
        assert_eq!(prevented, Some(vec![slipway_jobs::EX_CONFIG.to_string().as_str()]), "{unit}: {service:?}");
    }
}

/// Settings read from the environment only, never from the TOML file.
const ENVIRONMENT_ONLY: &[&str] = &["SLIPWAY_LOG", "RUST_LOG", "SLIPWAY_LOG_FORMAT", "SLIPWAY_CONFIG"];

#[test]
fn the_example_environment_files_set_only_settings_slipway_reads() {
    for file in ["api.env.example", "worker.env.example"] {
        let text = std::fs::read_to_string(repo().join("docs/systemd").join(file)).unwrap();
        for key in settings(&text, "").keys() {
            let read = slipway_jobs::config::KEYS.contains(&key.as_str()) || ENVIRONMENT_ONLY.contains(&key.as_str());
            assert!(read, "{file} sets {key}, which Slipway does not read");
        }
        assert!(!settings(&text, "").is_empty(), "{file} sets nothing");
    }
}
