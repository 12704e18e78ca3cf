//! Fetching a module source (MS-1) into this host's source cache.
//!
//! A git source is fetched with the real `git` binary into a
//! content-addressed cache: `<SLIPWAY_STATE_DIR>/sources/git/<revision>/`
//! holds the tree of that commit (no `.git`), one folder per revision,
//! whichever URL it came from (a commit id names its content). A `ref`
//! source is first resolved to the commit its branch or tag names now
//! (`git ls-remote`); that revision is what gets built, stored and deployed
//! ([`Fetched::pinned`]).
//!
//! Two processes fetching one revision at once take turns on
//! `<revision>.lock` beside the folder; each fetch writes into a folder of
//! its own and renames it into place, so a reader never sees half a tree,
//! and the second process finds the first one's tree and fetches nothing.
//! Every `git` runs contained like an effect ([`crate::effect::run_tool`])
//! under one deadline: past it, every process of the fetch is killed and the
//! fetch is [`FetchError::Timeout`]. A `path:` source is used where it is.
//!
//! A source is untrusted (SEC-3). Only the `https` and `ssh` transports
//! are fetched (`file` with `SLIPWAY_ALLOW_PATH_SOURCES`), refused before any
//! `git` runs; `git` runs with Slipway's settings only (`jobs/src/fetch/git.rs`); and every
//! tree, fetched, found in the cache or named by `path:`, is inspected
//! before it is used ([`tree::inspect`]): a link leading out of the tree is
//! [`FetchError::Unsafe`], more than `SLIPWAY_SOURCE_LIMIT` bytes is
//! [`FetchError::TooLarge`]. A refused git tree is removed: nothing of it is
//! kept.

mod git;
pub mod tree;

use crate::config::Config;
use crate::sandbox::Policy;
use crate::source::{GitPin, ModuleSource, SourceError};
use git::{Git, Keys};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A fetched source: its tree on this host, and the reference that pins it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The folder holding `core/default.nix`.
    pub dir: PathBuf,
    /// The commit fetched (40 hex), for a git source.
    pub revision: Option<String>,
    /// The source as it is stored and deployed: `git+<url>?rev=<revision>`
    /// for a git source (a `ref` is replaced by the commit it resolved to),
    /// the `path:` reference itself otherwise.
    pub pinned: String,
}

/// Why a source could not be fetched. Messages name the source and the step;
/// the tool's own output is in [`FetchError::log`], for operators.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// `git` failed: an unreachable URL, an unknown commit, a refused login.
    #[error("fetching {source_ref} failed: {step}")]
    Failed {
        /// The source as requested.
        source_ref: String,
        /// Which step failed and how (`git fetch exited with 128`, …).
        step: String,
        /// The tool's output.
        log: String,
    },
    /// The URL names no repository, or one this host may not read (git's
    /// or the server's words, `git::NO_REPOSITORY`): a refusal, not worth
    /// a later try.
    #[error(
        "{source_ref}: there is no repository at this URL, or it refuses this service (a private repository needs \
         SLIPWAY_GIT_CREDENTIALS or SLIPWAY_GIT_SSH_KEY)"
    )]
    NoRepository {
        /// The source as requested.
        source_ref: String,
        /// The tool's output.
        log: String,
    },
    /// The ref names no branch or tag of the repository.
    #[error("{source_ref}: the repository has no branch or tag {name:?}")]
    NoSuchRef {
        /// The source as requested.
        source_ref: String,
        /// The ref.
        name: String,
    },
    /// The fetch ran past its deadline; every process it started was killed.
    #[error("fetching {source_ref} ran past its deadline of {}s and was stopped", .deadline.as_secs())]
    Timeout {
        /// The source as requested.
        source_ref: String,
        /// The deadline it had.
        deadline: Duration,
    },
    /// The repository has no such commit (on any branch or tag), or the
    /// id is not a commit's (a tag object's, a tree's).
    #[error("{source_ref}: the repository has no commit {revision} on any branch or tag")]
    NoSuchRevision {
        /// The source as requested.
        source_ref: String,
        /// The commit asked for.
        revision: String,
    },
    /// The tree has no `core/default.nix`: not a module source.
    #[error("{source_ref} has no core/default.nix, so it is not a module source")]
    NotASource {
        /// The source as requested.
        source_ref: String,
    },
    /// The source's transport is not one Slipway fetches over (SEC-3);
    /// nothing ran.
    #[error(transparent)]
    Transport(#[from] SourceError),
    /// The tree holds something a source may not (SEC-3): a link leading
    /// out of the tree, a fifo. A git tree was removed.
    #[error("{source_ref}: {path} {reason}")]
    Unsafe {
        /// The source as requested.
        source_ref: String,
        /// The entry, relative to the tree (`core/schema.json`).
        path: String,
        /// What it is (`is a link to /etc/passwd, outside the source`).
        reason: String,
    },
    /// The download or the tree is larger than `SLIPWAY_SOURCE_LIMIT`
    /// (SEC-3); nothing of a git source was kept.
    #[error("{source_ref} is larger than SLIPWAY_SOURCE_LIMIT ({}): {what}; nothing of it was kept", size_text(*.limit))]
    TooLarge {
        /// The source as requested.
        source_ref: String,
        /// The limit, in bytes.
        limit: u64,
        /// What passed it (`its download passed it and was stopped`,
        /// `its files hold 4194304 bytes`).
        what: String,
    },
    /// The cache folder could not be written, or `git` could not start.
    #[error("fetching {source_ref}: {reason}")]
    Local {
        /// The source as requested.
        source_ref: String,
        /// What failed on this host.
        reason: String,
    },
}

impl FetchError {
    /// How the failure classifies ([`crate::outbound`]): a repository,
    /// commit, ref or tree that is not there, or a local failure, is refused; a deadline
    /// passed is worth a later try; `git`'s own failure is read from its
    /// output ([`crate::outbound::classify_git`]).
    pub fn class(&self) -> crate::outbound::Class {
        match self {
            Self::Failed { log, .. } => crate::outbound::classify_git(log),
            Self::Timeout { .. } => crate::outbound::classify_no_answer(),
            _ => crate::outbound::Class::Refused,
        }
    }

    /// The output of the tool that failed, if any (never shown to front-ends).
    pub fn log(&self) -> &str {
        match self {
            Self::Failed { log, .. } | Self::NoRepository { log, .. } => log,
            _ => "",
        }
    }
}

/// The folder of the source cache under a state folder.
pub fn cache_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("sources").join("git")
}

/// The cached tree of `revision`, if this host has fetched it.
pub fn cached(state_dir: &Path, revision: &str) -> Option<PathBuf> {
    let dir = cache_dir(state_dir).join(revision);
    dir.join("core/default.nix").is_file().then_some(dir)
}

/// The pause before a fetch that the server answered `500` or `502` is
/// tried once more (seed 004).
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Fetches `source` (resolving a `ref` first) unless this host has it, all
/// within `deadline` from now. See the module doc. A fetch the server
/// answered `500` or `502` ([`crate::outbound::Class::RetryOnce`]) is tried
/// once more after `RETRY_PAUSE`, within the same deadline; any other
/// failure is returned at once, classified by [`FetchError::class`].
pub async fn fetch(config: &Config, source: &ModuleSource, deadline: Duration) -> Result<Fetched, FetchError> {
    let until = Instant::now() + deadline;
    match fetch_once(config, source, deadline).await {
        Err(e) if e.class() == crate::outbound::Class::RetryOnce && Instant::now() + RETRY_PAUSE < until => {
            tracing::warn!(source = %source, error = %e, "the git server answered 500 or 502; fetching once more");
            tokio::time::sleep(RETRY_PAUSE).await;
            fetch_once(config, source, until.saturating_duration_since(Instant::now())).await
        }
        other => other,
    }
}

/// One try of [`fetch`].
async fn fetch_once(config: &Config, source: &ModuleSource, deadline: Duration) -> Result<Fetched, FetchError> {
    let until = Instant::now() + deadline;
    let state_dir = &config.state_dir;
    let limit = config.sandbox.source_limit;
    let source_ref = source.to_string();
    source.check_transport(config.sources.allow_path_sources)?;
    let (url, pin) = match source {
        ModuleSource::Path(dir) => {
            // Nix takes absolute paths only.
            let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
            if !dir.is_dir() {
                return Err(FetchError::NotASource { source_ref });
            }
            inspect(&dir, limit, &source_ref)?;
            if !dir.join("core/default.nix").is_file() {
                return Err(FetchError::NotASource { source_ref });
            }
            return Ok(Fetched { dir, revision: None, pinned: source_ref });
        }
        ModuleSource::Git { url, pin } => (url, pin),
    };
    let local = |reason: String| FetchError::Local { source_ref: source_ref.clone(), reason };
    let cache = cache_dir(state_dir);
    std::fs::create_dir_all(&cache).map_err(|e| local(format!("cannot create {}: {e}", cache.display())))?;
    let mut policy = Policy::new(config).map_err(local)?;
    // RLIMIT_FSIZE: no file of a fetch (its pack above all) past the limit.
    policy.file_size = Some(limit);
    let url_dir = url.strip_prefix("file://").map(PathBuf::from);
    // The sandbox shows git a `file://` repository's folder: one that is
    // not there is no repository, and git never runs.
    if url_dir.as_deref().is_some_and(|dir| !dir.is_dir()) {
        return Err(FetchError::NoRepository { source_ref, log: String::new() });
    }
    // The first `git` run of the fetch makes its settings and copies its keys.
    let start_git = || start(config, &policy, &source_ref, url_dir.clone(), until, deadline);
    let mut git = None;
    let revision = match pin {
        GitPin::Rev(rev) => rev.clone(),
        GitPin::Ref(name) => git.insert(start_git()?).resolve(url, name).await?,
    };
    let pinned = format!("git+{url}?rev={revision}");
    let lock_path = cache.join(format!("{revision}.lock"));
    if let Some(dir) = cached(state_dir, &revision) {
        if inspect(&dir, limit, &source_ref).is_ok() {
            return Ok(Fetched { dir, revision: Some(revision), pinned });
        }
    }
    let lock_file = lock(&lock_path, until).await.map_err(|e| match e {
        None => FetchError::Timeout { source_ref: source_ref.clone(), deadline },
        Some(e) => local(format!("cannot lock the source cache: {e}")),
    })?;
    // Another process may have fetched it while this one waited; a tree
    // kept by an earlier Slipway, or under a larger limit, is judged again.
    if let Some(dir) = cached(state_dir, &revision) {
        return match inspect(&dir, limit, &source_ref) {
            Ok(()) => Ok(Fetched { dir, revision: Some(revision), pinned }),
            Err(e @ FetchError::Local { .. }) => Err(e),
            Err(refused) => {
                tracing::warn!(source = %source_ref, error = %refused, "a cached source tree is refused; removing it");
                let _ = std::fs::remove_dir_all(&dir);
                forget(&lock_path, lock_file);
                Err(refused)
            }
        };
    }
    let work = cache.join(format!(".fetch-{revision}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)
        .and_then(|()| policy.give(&work))
        .map_err(|e| local(format!("cannot create {}: {e}", work.display())))?;
    let git = match git {
        Some(git) => git,
        None => start_git()?,
    };
    let result = git.checkout(&work, url, &revision).await;
    drop(git);
    let result = result.and_then(|()| {
        let _ = std::fs::remove_dir_all(work.join(".git"));
        inspect(&work, limit, &source_ref)?;
        if !work.join("core/default.nix").is_file() {
            return Err(FetchError::NotASource { source_ref: source_ref.clone() });
        }
        let dir = cache.join(&revision);
        std::fs::rename(&work, &dir).map_err(|e| local(format!("cannot move the tree into {}: {e}", dir.display())))?;
        Ok(dir)
    });
    match result {
        Ok(dir) => Ok(Fetched { dir, revision: Some(revision), pinned }),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&work);
            if matches!(e, FetchError::Unsafe { .. } | FetchError::TooLarge { .. }) {
                forget(&lock_path, lock_file);
            }
            Err(e)
        }
    }
}

/// The `git` runs of a fetch of `source_ref` (a `file://` repository's
/// folder `local_repo`, shown to git read-only): Slipway's settings, and
/// its copies of the `SLIPWAY_GIT_*` files ([`git`]).
fn start<'a>(
    config: &Config,
    policy: &Policy,
    source_ref: &'a str,
    local_repo: Option<PathBuf>,
    until: Instant,
    deadline: Duration,
) -> Result<Git<'a>, FetchError> {
    let local = |reason: String| FetchError::Local { source_ref: source_ref.to_owned(), reason };
    let keys = Keys::copy(&config.git, policy, &config.state_dir.join("sources")).map_err(local)?;
    let options = git::options(keys.as_ref(), config.sources.allow_path_sources).map_err(local)?;
    let env = git::environment(&config.git, keys.as_ref()).map_err(local)?;
    Ok(Git {
        source_ref,
        until,
        deadline,
        policy: policy.clone(),
        local_repo,
        limit: config.sandbox.source_limit,
        options,
        env,
        keys,
    })
}

/// Inspects the tree at `dir` ([`tree::inspect`]) as a fetch's error.
fn inspect(dir: &Path, limit: u64, source_ref: &str) -> Result<(), FetchError> {
    match tree::inspect(dir, limit) {
        Ok(_) => Ok(()),
        Err(tree::Refusal::Unsafe { path, reason }) => {
            Err(FetchError::Unsafe { source_ref: source_ref.to_owned(), path, reason })
        }
        Err(tree::Refusal::TooLarge(bytes)) => Err(FetchError::TooLarge {
            source_ref: source_ref.to_owned(),
            limit,
            what: format!("its files hold more than {bytes} bytes"),
        }),
        Err(tree::Refusal::Unreadable(reason)) => Err(FetchError::Local {
            source_ref: source_ref.to_owned(),
            reason: format!("cannot read the tree: {reason}"),
        }),
    }
}

/// Removes the lock file of a refused revision while holding it, so the
/// cache keeps nothing of it. (A process that waits on the removed file
/// and one that creates it anew may then fetch at once, each into a folder
/// of its own: both refuse the same tree.)
fn forget(lock_path: &Path, lock: std::fs::File) {
    let _ = std::fs::remove_file(lock_path);
    drop(lock);
}

/// `bytes` as a setting's size is written: `1 MiB`, `256 MiB`, `2 GiB`, or
/// bytes when it is no whole number of KiB.
pub fn size_text(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    UNITS
        .iter()
        .find(|(unit, _)| bytes >= *unit && bytes.is_multiple_of(*unit))
        .map(|(unit, name)| format!("{} {name}", bytes / unit))
        .unwrap_or_else(|| format!("{bytes} bytes"))
}

/// Takes an exclusive `flock` on `path`, trying until `until`: `Err(None)`
/// when the time is up, `Err(Some(e))` when the file cannot be opened.
async fn lock(path: &Path, until: Instant) -> Result<std::fs::File, Option<std::io::Error>> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path).map_err(Some)?;
    loop {
        // SAFETY: flock on a file descriptor we own; released when `file` drops.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(file);
        }
        if Instant::now() >= until {
            return Err(None);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
