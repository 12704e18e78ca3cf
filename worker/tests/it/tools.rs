//! What the browser tests need on the machine: Debian's Chromium, Node.js
//! and playwright-core (`scripts/install-deps --browser`).

use std::path::PathBuf;

/// The folder of the pages, the drivers and their `node_modules`.
pub fn browser_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// Fails, with what to run, when the browser, Node.js or playwright-core is missing.
pub fn require_the_browser_tools() {
    let fix = "run `scripts/install-deps --browser` (as root) to install Debian's chromium, Node.js and \
               playwright-core; this test does not pass without them";
    assert!(std::path::Path::new("/usr/bin/chromium").exists(), "/usr/bin/chromium is missing: {fix}");
    let node = std::process::Command::new("node").arg("--version").output();
    assert!(node.as_ref().is_ok_and(|o| o.status.success()), "node does not run ({node:?}): {fix}");
    let playwright = browser_dir().join("node_modules/playwright-core/package.json");
    assert!(playwright.exists(), "{} is missing: {fix}", playwright.display());
}
