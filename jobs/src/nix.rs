//! Building a module source's outputs with Nix (MS-2), for the worker's
//! local runs and the default-source parity check. Only workers run Nix.

use crate::source::{OutputError, SourceOutputs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A Nix build that failed, timed out, or produced no such output.
#[derive(Debug, thiserror::Error)]
pub enum NixError {
    /// `nix-build` could not start (is Nix installed?).
    #[error("cannot run nix-build: {0}")]
    Spawn(std::io::Error),
    /// The build failed; the last lines of its log.
    #[error("nix-build -A {attribute} failed: {log}")]
    Failed {
        /// The attribute built.
        attribute: String,
        /// The tail of its stderr.
        log: String,
    },
    /// The build ran past its deadline (MS-7) and was killed.
    #[error("nix-build -A {0} ran past its deadline and was killed")]
    Timeout(String),
    /// An output file is missing or malformed.
    #[error(transparent)]
    Output(#[from] OutputError),
}

/// Builds `core/default.nix` attribute `attribute` of the source at `dir` and
/// returns its out path. Runs with the process's own Nix settings
/// (`NIX_CONFIG` and the rest of the environment), in its own process
/// group, killed at `deadline`.
pub fn build(dir: &Path, attribute: &str, args: &[&str], deadline: Duration) -> Result<PathBuf, NixError> {
    let mut argv: Vec<String> =
        vec![dir.join("core").display().to_string(), "-A".into(), attribute.into(), "--no-out-link".into()];
    argv.extend(args.iter().map(|s| s.to_string()));
    let handle = duct::cmd("nix-build", &argv)
        .stdout_capture()
        .stderr_capture()
        .unchecked()
        .before_spawn(|cmd| {
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
            Ok(())
        })
        .start()
        .map_err(NixError::Spawn)?;
    let started = Instant::now();
    let output = loop {
        if let Some(out) = handle.try_wait().map_err(NixError::Spawn)? {
            break out.clone();
        }
        if started.elapsed() > deadline {
            if let Some(pid) = handle.pids().first() {
                // SAFETY: signals the process group this build runs in.
                unsafe { libc::kill(-(*pid as i32), libc::SIGKILL) };
            }
            let _ = handle.wait();
            return Err(NixError::Timeout(attribute.into()));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if !output.status.success() {
        let log = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        return Err(NixError::Failed {
            attribute: attribute.into(),
            log: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        });
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()))
}

/// The four outputs validation needs (`schema`, `applicationSchemas`,
/// `renames`, `meta`), each built with one `nix-build`.
pub fn build_outputs(dir: &Path, deadline: Duration) -> Result<SourceOutputs, NixError> {
    let read = |attr: &str, file: &str| -> Result<String, NixError> {
        let out = build(dir, attr, &[], deadline)?;
        std::fs::read_to_string(out.join(file))
            .map_err(|e| NixError::Output(OutputError { file: file.into(), reason: e.to_string() }))
    };
    Ok(SourceOutputs::from_texts(
        &read("schema", "schema.json")?,
        &read("applicationSchemas", "applications.json")?,
        &read("renames", "renames.json")?,
        &read("meta", "meta.json")?,
    )?)
}
