//! Module sources for tests: the built-in source's checker, a source that
//! serves any reference, and copies of the reference source with effects
//! or builders of the test's own.

use super::repo;

/// How long the node builders of [`sleepy_nix_source`] sleep, in seconds.
pub const SLEEPY_BUILDER_SECS: u64 = 12;

/// A copy of the reference module source at `dest` whose node builders
/// first sleep [`SLEEPY_BUILDER_SECS`]: a real builder that outlives its
/// `nix-build` unless the build is ended with it. (They sleep whatever
/// happens: a builder runs in the Nix daemon's sandbox and sees nothing of
/// the host a test could use as a switch.) Every builder carries `token`
/// in its environment (a derivation attribute, which also makes its
/// derivations this copy's own, never built before), so
/// [`processes_with`] finds it and whatever it started.
pub fn sleepy_nix_source(dest: &std::path::Path, token: &str) {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../nix");
    let status = std::process::Command::new("cp").arg("-r").arg(&repo).arg(dest).status().expect("cp runs");
    assert!(status.success(), "cannot copy {} to {}", repo.display(), dest.display());
    let nodes = dest.join("core/nodes/default.nix");
    let text = std::fs::read_to_string(&nodes).expect("nodes/default.nix");
    let marked = text.replacen(
        "system = lib.write.mkDerivation {",
        &format!("system = lib.write.mkDerivation {{\n        slipwayTestToken = \"{token}\";"),
        1,
    );
    assert_ne!(marked, text, "the reference source's node derivation moved; update this helper");
    std::fs::write(&nodes, marked).expect("write nodes/default.nix");
    let builder = dest.join("core/nodes/system-builder.sh");
    let text = std::fs::read_to_string(&builder).expect("system-builder.sh");
    let sleepy = text.replacen("set -eu\n", &format!("set -eu\nsleep {SLEEPY_BUILDER_SECS}\n"), 1);
    assert_ne!(sleepy, text, "the reference source's system builder changed; update this helper");
    std::fs::write(&builder, sleepy).expect("write system-builder.sh");
}

/// A checker of the built-in source's baked outputs (`api/default-source`).
pub fn checker() -> std::sync::Arc<crate::validate::Checker> {
    let outputs =
        crate::source::outputs::SourceOutputs::read_dir(&repo().join("api/default-source")).expect("baked outputs");
    std::sync::Arc::new(crate::validate::Checker::new(outputs).expect("the baked schema compiles"))
}

/// Any module source a test names, checked against the built-in source's
/// schema (tests run their own effects with it), or the built-in one.
pub struct AnySource(pub std::sync::Arc<crate::validate::Checker>);

impl crate::source::policy::Sources for AnySource {
    fn checker_for<'a>(
        &'a self,
        requested: Option<&'a str>,
    ) -> futures::future::BoxFuture<
        'a,
        Result<(std::sync::Arc<crate::validate::Checker>, Option<String>), crate::submit::SubmitError>,
    > {
        Box::pin(async move { Ok((std::sync::Arc::clone(&self.0), requested.map(str::to_owned))) })
    }

    fn names<'a>(
        &'a self,
        _: Option<&'a str>,
        _: &'a serde_json::Value,
    ) -> futures::future::BoxFuture<'a, Result<crate::source::policy::NamesEval, crate::submit::SubmitError>> {
        Box::pin(async { Ok(crate::source::policy::NamesEval::Skipped("tests run no names eval".into())) })
    }
}

/// A module source at `root` whose deploy effect is the shell script
/// `script` (and whose destroy succeeds); returns its `path:` reference.
pub fn source_with_deploy(root: &std::path::Path, script: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let effects = root.join("core/effects");
    std::fs::create_dir_all(&effects).expect("effects folder");
    std::fs::write(root.join("core/default.nix"), "{ provider ? {} }: { }\n").expect("default.nix");
    for (name, body) in [("deploy", script), ("destroy", "#!/bin/sh\nexit 0\n")] {
        let path = effects.join(name);
        std::fs::write(&path, body).expect("effect");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    format!("path:{}", root.display())
}
