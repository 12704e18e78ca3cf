//! SBOMs that real CycloneDX producers write now, of each supported version
//! (1.3 to 1.6), through the check a deploy runs before it stores one
//! (`slipway_jobs::sbom::check`) and through the store, on both engines:
//! each passes, and comes back as the accepted document's canonical form
//! (docs/SBOM.md).
//!
//! The tools are pinned in `jobs/tests/sbom-tools/` and installed by
//! `scripts/install-deps --browser`: cyclonedx-py (PyPI `cyclonedx-bom`, in
//! the `python3` on the PATH) writes the SBOM of a virtual environment this
//! test makes (`python3 -m venv`: pip and setuptools, from the Python's own
//! bundled wheels, nothing fetched) and of a pinned requirements file;
//! cyclonedx-npm (npm `@cyclonedx/cyclonedx-npm`, in that folder's
//! `node_modules`) writes the SBOM of that folder, its own 150-odd packages
//! as the lock file pins them. Both tools validate what they write against
//! the official schema. A tool that is missing fails the test, saying how
//! to install it.

use serde_json::Value;
use slipway_jobs::sbom::{check, SUPPORTED};
use slipway_jobs::store::sboms::{self, NodeSbom, SbomText};
use slipway_jobs::store::{Engine, Q};
use slipway_jobs::test_support::{repo, TestDatabase};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

const INSTALL: &str = "run scripts/install-deps --browser to install it";

fn tools() -> PathBuf {
    repo().join("jobs/tests/sbom-tools")
}

/// The version `requirements.txt` pins for `package`.
fn pinned_pypi(package: &str) -> String {
    let text = std::fs::read_to_string(tools().join("requirements.txt")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{package}==")))
        .unwrap_or_else(|| panic!("requirements.txt pins no {package}"))
        .trim()
        .to_owned()
}

/// The version `package-lock.json` pins for `package`.
fn pinned_npm(package: &str) -> String {
    let lock: Value =
        serde_json::from_str(&std::fs::read_to_string(tools().join("package-lock.json")).unwrap()).unwrap();
    lock["packages"][format!("node_modules/{package}")]["version"].as_str().unwrap().to_owned()
}

/// Runs `cmd`; its stdout, or a panic naming what failed and how to install
/// the tool when `tool` is not there.
fn run(cmd: &mut Command, what: &str) -> String {
    let output = cmd.output().unwrap_or_else(|e| panic!("{what}: {cmd:?} did not start ({e}): {INSTALL}"));
    assert!(
        output.status.success(),
        "{what}: {cmd:?} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Checks that the pinned tools are installed, or fails saying how.
fn require_tools() {
    let want = pinned_pypi("cyclonedx-bom");
    let have = Command::new("python3").args(["-m", "cyclonedx_py", "--version"]).output();
    let have = have.ok().filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    assert_eq!(
        have.as_deref(),
        Some(want.as_str()),
        "cyclonedx-py {want} (PyPI cyclonedx-bom) is not what `python3 -m cyclonedx_py` runs: {INSTALL}"
    );
    let want = pinned_npm("@cyclonedx/cyclonedx-npm");
    let manifest = tools().join("node_modules/@cyclonedx/cyclonedx-npm/package.json");
    let have = std::fs::read_to_string(&manifest)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v["version"].as_str().map(str::to_owned));
    assert_eq!(
        have.as_deref(),
        Some(want.as_str()),
        "@cyclonedx/cyclonedx-npm {want} is not installed in jobs/tests/sbom-tools/node_modules: {INSTALL}"
    );
}

/// Every document the tools write, `(what wrote it, the document)`: per
/// version, cyclonedx-py of the venv and of the requirements file, and
/// cyclonedx-npm of the tools' folder. Made once per test binary, the tools
/// run side by side.
fn documents() -> &'static [(String, Value)] {
    static DOCUMENTS: OnceLock<Vec<(String, Value)>> = OnceLock::new();
    DOCUMENTS.get_or_init(|| {
        require_tools();
        let scratch = tempfile::tempdir().unwrap();
        let venv = scratch.path().join("venv");
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv), "making a virtual environment");
        let python = venv.join("bin/python");
        let mut jobs: Vec<(String, Command, PathBuf)> = Vec::new();
        for version in SUPPORTED {
            let out = |name: &str| scratch.path().join(format!("{name}-{version}.cdx.json"));
            let py = |mode: &str| {
                let mut cmd = Command::new("python3");
                cmd.args(["-m", "cyclonedx_py", mode, "--sv", version, "--of", "JSON", "--output-reproducible"]);
                cmd
            };
            let (mut env, mut requirements) = (py("environment"), py("requirements"));
            let env_out = out("py-environment");
            env.arg("-o").arg(&env_out).arg(&python);
            let req_out = out("py-requirements");
            requirements.arg("-o").arg(&req_out).arg(tools().join("requirements.txt"));
            let mut npm = Command::new("node");
            let npm_out = out("npm");
            npm.arg(tools().join("node_modules/@cyclonedx/cyclonedx-npm/bin/cyclonedx-npm-cli.js"))
                .args(["--spec-version", version, "--output-format", "JSON", "--output-reproducible"])
                .arg("--output-file")
                .arg(&npm_out)
                .current_dir(tools());
            jobs.push((format!("cyclonedx-py environment {version}"), env, env_out));
            jobs.push((format!("cyclonedx-py requirements {version}"), requirements, req_out));
            jobs.push((format!("cyclonedx-npm {version}"), npm, npm_out));
        }
        let written: Vec<(String, PathBuf)> = std::thread::scope(|s| {
            let running: Vec<_> = jobs
                .into_iter()
                .map(|(what, mut cmd, out)| {
                    s.spawn(move || {
                        run(&mut cmd, &what);
                        (what, out)
                    })
                })
                .collect();
            running.into_iter().map(|h| h.join().unwrap()).collect()
        });
        written
            .into_iter()
            .map(|(what, out)| {
                let text = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{what} wrote no {out:?}: {e}"));
                let doc = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: not JSON: {e}"));
                (what, doc)
            })
            .collect()
    })
}

#[test]
fn documents_that_cyclonedx_py_and_cyclonedx_npm_write_now_pass_for_each_version_from_1_3_to_1_6() {
    let documents = documents();
    assert_eq!(documents.len(), 3 * SUPPORTED.len());
    for (what, doc) in documents {
        let version = what.rsplit(' ').next().unwrap();
        assert_eq!(doc["specVersion"], version, "{what}");
        assert_eq!(check(doc), Ok(()), "{what}");
        let components = doc["components"].as_array().map_or(0, Vec::len);
        let least = if what.starts_with("cyclonedx-npm") { 100 } else { 2 };
        assert!(components >= least, "{what}: {components} components");
    }
}

async fn documents_that_real_tools_write_come_back_from_the_store_as_accepted(engine: Engine) {
    let documents = documents();
    let test_db = TestDatabase::new(engine).await;
    let db = match engine {
        Engine::Sqlite => slipway_jobs::store::open_sqlite(&test_db.dir.path().join("slipway.db")).await.unwrap(),
        Engine::Postgres => slipway_jobs::store::open_postgres(&test_db.url).await.unwrap(),
    };
    let mut conn = db.acquire().await.unwrap();
    for version in SUPPORTED {
        Q::new(
            "INSERT INTO deployments (id, configuration, instances, version, created_at, updated_at)
             VALUES ($1, '{}', '[]', 0, 0, 0)",
        )
        .text(format!("v{}", version.replace('.', "-")))
        .execute(&mut conn)
        .await
        .unwrap();
    }
    // One deployment per version, a node per document: the versions' and
    // tools' documents share components where they describe the same package.
    for version in SUPPORTED {
        let deployment = format!("v{}", version.replace('.', "-"));
        let nodes: Vec<(String, NodeSbom)> = documents
            .iter()
            .filter(|(what, _)| what.ends_with(version))
            .map(|(what, doc)| {
                assert_eq!(check(doc), Ok(()), "{what}");
                (node_name(what), NodeSbom::Ready(doc.clone()))
            })
            .collect();
        assert_eq!(nodes.len(), 3);
        sboms::replace(&mut conn, &deployment, "build", &nodes, 1).await.unwrap();
    }
    for (what, doc) in documents {
        let deployment = format!("v{}", what.rsplit(' ').next().unwrap().replace('.', "-"));
        match sboms::document_text(&mut conn, &deployment, &node_name(what)).await.unwrap() {
            Some(SbomText::Ready(text)) => assert!(text == sboms::canonical_text(doc), "{what} came back changed"),
            other => panic!("{what}: {other:?}"),
        }
    }
}

/// The node a document is stored under: the tool and its input.
fn node_name(what: &str) -> String {
    what.rsplit_once(' ').unwrap().0.replace(' ', "-")
}

slipway_jobs::on_both_engines!(documents_that_real_tools_write_come_back_from_the_store_as_accepted);
