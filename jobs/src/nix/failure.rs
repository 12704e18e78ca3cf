//! Why a `nix`-queue job, or one output of it, has no result (MS-6), and
//! how a Nix run that failed is read: a run that reached
//! `NIX_MEMORY_LIMIT` is told apart from one the source's own code failed
//! (SEC-3), so it is reported as such and never run again.

use crate::effect::EffectOutcome;
use serde::{Deserialize, Serialize};

/// Why a `nix`-queue job, or one output of it, has no result (MS-6). The
/// code is stable (`GET`-able by front-ends); the message says which output
/// and why, never the build log, which stays on the job for operators.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct NixFailure {
    /// `output_missing`, `source_too_old`, `build_failed`, `fetch_failed`,
    /// `source_repository_not_found`, `source_revision_not_found`,
    /// `timeout`, `out_of_memory`, `output_too_large`, `source_too_large`
    /// `source_unsafe` or `storage_unavailable`.
    pub code: FailureCode,
    /// The output concerned (`schema`, `names`, …), when one is.
    pub output: Option<String>,
    /// What went wrong, for the front-end.
    pub message: String,
}

/// The stable codes of [`NixFailure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCode {
    /// The source's `core` has no such output at all (it has no `schema`).
    OutputMissing,
    /// The source's `core` has a `schema` but is older than this output.
    SourceTooOld,
    /// Nix could not evaluate or build the output.
    BuildFailed,
    /// The source could not be fetched: its server could not be reached,
    /// or failed (`5xx`), or `git` failed otherwise.
    FetchFailed,
    /// The source's URL names no repository, or one that refuses this
    /// service (HTTP `401`, `403`, `404`, a refused key).
    SourceRepositoryNotFound,
    /// The repository has no such commit, or no such branch or tag; the
    /// message names it.
    SourceRevisionNotFound,
    /// The fetch and build ran past `NIX_TIMEOUT` and were killed.
    Timeout,
    /// A Nix or git process of the job reached `NIX_MEMORY_LIMIT` (SEC-3).
    OutOfMemory,
    /// A document output (or a `names` output's node count) is larger than
    /// `SLIPWAY_OUTPUT_LIMIT` (`SLIPWAY_NODE_LIMIT`); it was not read.
    OutputTooLarge,
    /// The fetched source is larger than `SLIPWAY_SOURCE_LIMIT`; it was not kept.
    SourceTooLarge,
    /// The source holds, or would build, something a source may not: a
    /// symbolic link leaving its tree, a document output that is a
    /// symbolic link, or a derivation that would reach the network while
    /// it builds (SEC-3); the message names it.
    SourceUnsafe,
    /// The worker could not write to its own storage (its state folder or
    /// the Nix store: full, over quota, read-only or failing): a fault of
    /// the worker's host, not of the source or the configuration. Never
    /// kept as the source's answer: the next request tries again.
    StorageUnavailable,
}

impl FailureCode {
    /// The code of a worker's write into its own state folder that failed
    /// with `e`: `storage_unavailable` for a full, read-only or failing
    /// disk ([`crate::storage::is_storage_fault`]), `build_failed` otherwise.
    pub fn of_write(e: &std::io::Error) -> Self {
        if crate::storage::is_storage_fault(e) {
            Self::StorageUnavailable
        } else {
            Self::BuildFailed
        }
    }

    /// The code as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OutputMissing => "output_missing",
            Self::SourceTooOld => "source_too_old",
            Self::BuildFailed => "build_failed",
            Self::FetchFailed => "fetch_failed",
            Self::SourceRepositoryNotFound => "source_repository_not_found",
            Self::SourceRevisionNotFound => "source_revision_not_found",
            Self::Timeout => "timeout",
            Self::OutOfMemory => "out_of_memory",
            Self::OutputTooLarge => "output_too_large",
            Self::SourceTooLarge => "source_too_large",
            Self::SourceUnsafe => "source_unsafe",
            Self::StorageUnavailable => "storage_unavailable",
        }
    }
}

impl NixFailure {
    pub(crate) fn new(code: FailureCode, output: Option<&str>, message: impl Into<String>) -> Self {
        Self { code, output: output.map(str::to_owned), message: message.into() }
    }

    /// A fetch that failed or timed out.
    pub fn from_fetch(e: &crate::fetch::FetchError) -> Self {
        use crate::fetch::FetchError;
        let code = match e {
            FetchError::Timeout { .. } => FailureCode::Timeout,
            FetchError::Unsafe { .. } => FailureCode::SourceUnsafe,
            FetchError::TooLarge { .. } => FailureCode::SourceTooLarge,
            FetchError::NoRepository { .. } => FailureCode::SourceRepositoryNotFound,
            FetchError::NoSuchRef { .. } | FetchError::NoSuchRevision { .. } => FailureCode::SourceRevisionNotFound,
            _ => FailureCode::FetchFailed,
        };
        Self::new(code, None, e.to_string())
    }

    /// A Nix run that reached `NIX_MEMORY_LIMIT` (`limit` bytes), SEC-3.
    pub fn out_of_memory(output: Option<&str>, limit: u64) -> Self {
        Self::new(
            FailureCode::OutOfMemory,
            output,
            format!(
                "the evaluation ran out of memory: a Nix process reached NIX_MEMORY_LIMIT ({}) and was stopped; \
                 it is not run again",
                human_size(limit)
            ),
        )
    }
}

/// Whether a Nix run that ended with `outcome` and printed `output` (its
/// stdout and stderr) failed for want of memory (SEC-3): Nix's own
/// `error: out of memory`, the Boehm collector's `GC Warning: Out of
/// Memory`, `std::bad_alloc`, or a death by `SIGABRT`, `SIGSEGV` or
/// `SIGKILL` (which the sandbox reports as exit code 128 + the signal), as
/// an allocation past `RLIMIT_AS` or the kernel's OOM killer ends it. A run
/// that exited 0 or timed out never is.
pub fn ran_out_of_memory(outcome: &EffectOutcome, output: &str) -> bool {
    let EffectOutcome::Exited(code) = *outcome else { return false };
    if code == 0 {
        return false;
    }
    let signalled = [libc::SIGABRT, libc::SIGSEGV, libc::SIGKILL].iter().any(|s| code == -s || code == 128 + s);
    signalled
        || output.lines().map(str::trim).any(|line| {
            line == "error: out of memory"
                || line.starts_with("GC Warning: Out of Memory")
                || line.starts_with("error: std::bad_alloc")
        })
}

/// `bytes` for a message: `1 GiB`, `512 MiB`, `4096 KiB`, or bytes.
pub fn human_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_out_of_memory_by_what_nix_says_or_the_signal_it_died_of() {
        let failed = EffectOutcome::Exited(1);
        let boehm = "GC Warning: Failed to expand heap by 800133120 bytes\n\
                     GC Warning: Out of Memory! Heap size: 384 MiB. Returning NULL!\nerror: out of memory\n";
        assert!(ran_out_of_memory(&failed, boehm));
        assert!(ran_out_of_memory(&failed, "error: std::bad_alloc\n"));
        for code in [134, 137, 139, -6, -9, -11] {
            assert!(ran_out_of_memory(&EffectOutcome::Exited(code), ""), "{code}");
        }
        assert!(!ran_out_of_memory(&failed, "error: attribute 'exec' missing\n"));
        assert!(!ran_out_of_memory(&failed, "trace: nothing here is out of memory\n"));
        assert!(!ran_out_of_memory(&EffectOutcome::Exited(100), "builder failed\n"));
        assert!(!ran_out_of_memory(&EffectOutcome::Exited(0), "error: out of memory\n"));
        assert!(!ran_out_of_memory(&EffectOutcome::TimedOut, "error: out of memory\n"));
    }

    #[test]
    fn an_out_of_memory_failure_names_the_setting_and_its_value() {
        let f = NixFailure::out_of_memory(Some("names"), 1 << 30);
        assert_eq!((f.code.as_str(), f.output.as_deref()), ("out_of_memory", Some("names")));
        assert!(f.message.contains("NIX_MEMORY_LIMIT (1 GiB)"), "{}", f.message);
        assert_eq!(human_size(512 << 20), "512 MiB");
        assert_eq!(human_size(1_500_000), "1500000 bytes");
    }
}
