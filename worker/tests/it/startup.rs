//! What `slipway-worker work` checks before it takes any build, and what
//! `slipway-worker --help` says of the settings.

use crate::common;

use common::{binary, command, free_port};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::TestDatabase;

#[tokio::test]
async fn a_worker_without_its_built_in_source_refuses_to_start() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let missing = db.path("no-such-source");
    let out = command(&binary("slipway-worker"), &db, free_port())
        .arg("work")
        .env("SLIPWAY_DEFAULT_SOURCE_DIR", &missing)
        .output()
        .unwrap();
    assert!(!out.status.success(), "the worker started without its built-in source");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("SLIPWAY_DEFAULT_SOURCE_DIR"), "{stderr}");
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
}

/// `slipway-worker --help` names where settings come from and every key.
#[test]
fn the_worker_s_help_names_every_setting() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_slipway-worker")).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for key in slipway_jobs::config::KEYS.iter().chain(&["SLIPWAY_CONFIG", "SLIPWAY_LOG", "SLIPWAY_LOG_FORMAT"]) {
        assert!(help.contains(key), "{key} is not in the help:\n{help}");
    }
}
