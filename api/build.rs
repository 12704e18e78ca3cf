//! Captures the git commit this api is built from, for `GET /version`:
//! `SLIPWAY_REVISION` is the commit id when building from a git checkout and
//! unset otherwise (a source tarball, a Nix build without `.git`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let Some(revision) = git(&dir, &["rev-parse", "--verify", "HEAD^{commit}"]) else { return };
    if revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit()) {
        println!("cargo:rustc-env=SLIPWAY_REVISION={revision}");
    }
    // Build again when HEAD moves: HEAD itself, the branch it names, packed refs.
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    watched.extend(git(&dir, &["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        if let Some(path) = git(&dir, &["rev-parse", "--git-path", &name]) {
            let path = dir.join(path);
            // Cargo would re-run the script on every build for a missing file.
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}
