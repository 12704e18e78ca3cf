//! Every script of `scripts/` and `scripts/lib/` answers `--help` and `-h`
//! with a help that stands on its own, and does nothing else: no file of
//! the checkout changes and no process it started is left
//! (`scripts/lib/check-help` checks each; this runs it). The api binary
//! names every setting it reads in its own `--help`.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn every_script_answers_help_without_doing_its_work() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("bash").arg(root.join("scripts/lib/check-help")).current_dir(&root).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "check-help failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}

/// `slipway-api --help` names where settings come from and every key.
#[test]
fn the_api_s_help_names_every_setting() {
    let out = Command::new(env!("CARGO_BIN_EXE_slipway-api")).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for key in slipway_jobs::config::KEYS.iter().chain(&["SLIPWAY_CONFIG", "SLIPWAY_LOG", "SLIPWAY_LOG_FORMAT"]) {
        assert!(help.contains(key), "{key} is not in the help:\n{help}");
    }
}
