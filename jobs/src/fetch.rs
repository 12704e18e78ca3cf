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

use crate::config::Config;
use crate::effect::{run_tool, EffectOutcome, ToolRun};
use crate::sandbox::{Policy, Sandbox, View};
use crate::source::{GitPin, ModuleSource};
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
    /// The repository has no such commit (on any branch or tag).
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
    /// How the failure classifies ([`crate::outbound`]): a commit, ref or
    /// tree that is not there, or a local failure, is refused; a deadline
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
            Self::Failed { log, .. } => log,
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
/// once more after [`RETRY_PAUSE`], within the same deadline; any other
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
    let source_ref = source.to_string();
    let (url, pin) = match source {
        ModuleSource::Path(dir) => {
            // Nix takes absolute paths only.
            let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
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
    let policy = Policy::new(config).map_err(local)?;
    // A `file://` repository (SLIPWAY_ALLOW_PATH_SOURCES) is shown to git read-only.
    let local_repo = url.strip_prefix("file://").map(PathBuf::from);
    let git = Git { source_ref: &source_ref, until, deadline, policy, local_repo };
    let revision = match pin {
        GitPin::Rev(rev) => rev.clone(),
        GitPin::Ref(name) => git.resolve(url, name).await?,
    };
    let pinned = format!("git+{url}?rev={revision}");
    if let Some(dir) = cached(state_dir, &revision) {
        return Ok(Fetched { dir, revision: Some(revision), pinned });
    }
    let _lock = lock(&cache.join(format!("{revision}.lock")), until).await.map_err(|e| match e {
        None => FetchError::Timeout { source_ref: source_ref.clone(), deadline },
        Some(e) => local(format!("cannot lock the source cache: {e}")),
    })?;
    // Another process may have fetched it while this one waited.
    if let Some(dir) = cached(state_dir, &revision) {
        return Ok(Fetched { dir, revision: Some(revision), pinned });
    }
    let work = cache.join(format!(".fetch-{revision}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)
        .and_then(|()| git.policy.give(&work))
        .map_err(|e| local(format!("cannot create {}: {e}", work.display())))?;
    let result = git.checkout(&work, url, &revision).await;
    let result = result.and_then(|()| {
        let _ = std::fs::remove_dir_all(work.join(".git"));
        if !work.join("core/default.nix").is_file() {
            return Err(FetchError::NotASource { source_ref: source_ref.clone() });
        }
        let dir = cache.join(&revision);
        std::fs::rename(&work, &dir).map_err(|e| local(format!("cannot move the tree into {}: {e}", dir.display())))?;
        Ok(dir)
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&work);
    }
    Ok(Fetched { dir: result?, revision: Some(revision), pinned })
}

/// The `git` runs of one fetch, sharing its deadline.
struct Git<'a> {
    source_ref: &'a str,
    until: Instant,
    deadline: Duration,
    /// The sandbox every `git` of the fetch runs in.
    policy: Policy,
    /// The folder of a `file://` repository, which git may read.
    local_repo: Option<PathBuf>,
}

impl Git<'_> {
    /// Runs `git args…` in `dir` (the fetch's own folder, which it may
    /// write, or `None`: its scratch folder), with the host's network; an
    /// error unless it exits 0.
    async fn run(&self, dir: Option<&Path>, step: &str, args: &[&str]) -> Result<ToolRun, FetchError> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(FetchError::Timeout { source_ref: self.source_ref.to_owned(), deadline: self.deadline });
        }
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        if self.local_repo.is_some() && matches!(args.first().map(String::as_str), Some("fetch" | "ls-remote")) {
            // A `file://` repository is not the sandbox user's: its
            // upload-pack reads it anyway (a `-c` of ours does not reach it).
            args.insert(1, "--upload-pack=git -c 'safe.directory=*' upload-pack".to_owned());
        }
        // No prompt for credentials: a fetch that needs them fails at once.
        let env = [("GIT_TERMINAL_PROMPT", "0"), ("GIT_ASKPASS", "/bin/false"), ("SSH_ASKPASS", "/bin/false")];
        let view = View {
            read: self.local_repo.iter().cloned().collect(),
            write: dir.map(Path::to_path_buf).into_iter().collect(),
            network: true,
        };
        let sandbox = Sandbox { policy: self.policy.clone(), view };
        let dir = dir.unwrap_or(Path::new("/tmp"));
        let run = run_tool(sandbox, dir, "git", &args, &env, &format!("slipway-fetch:{}", self.source_ref), left)
            .await
            .map_err(|e| FetchError::Local { source_ref: self.source_ref.to_owned(), reason: e.to_string() })?;
        match run.outcome {
            EffectOutcome::Exited(0) => Ok(run),
            EffectOutcome::TimedOut => {
                Err(FetchError::Timeout { source_ref: self.source_ref.to_owned(), deadline: self.deadline })
            }
            other => Err(FetchError::Failed {
                source_ref: self.source_ref.to_owned(),
                step: format!("{step} {}", ended(other)),
                log: run.output,
            }),
        }
    }

    /// The commit `name` (a branch, else a tag) names in the repository now.
    async fn resolve(&self, url: &str, name: &str) -> Result<String, FetchError> {
        let run = self.run(None, "git ls-remote", &["ls-remote", "--", url, name]).await?;
        let refs: Vec<(&str, &str)> = run.output.lines().filter_map(|l| l.split_once('\t')).collect();
        let find = |full: &str| refs.iter().find(|(_, r)| *r == full).map(|(rev, _)| rev.to_string());
        find(name)
            .filter(|_| name.starts_with("refs/"))
            .or_else(|| find(&format!("refs/heads/{name}")))
            .or_else(|| find(&format!("refs/tags/{name}^{{}}")))
            .or_else(|| find(&format!("refs/tags/{name}")))
            .filter(|rev| rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| FetchError::NoSuchRef { source_ref: self.source_ref.to_owned(), name: name.to_owned() })
    }

    /// Checks `revision` of `url` out into the empty folder `work`.
    async fn checkout(&self, work: &Path, url: &str, revision: &str) -> Result<(), FetchError> {
        self.run(Some(work), "git init", &["init", "-q"]).await?;
        // Most servers hand out a commit by id; those that do not get every
        // branch and tag fetched, and the commit looked up among them.
        let by_id = self.run(Some(work), "git fetch", &["fetch", "-q", "--depth", "1", "--", url, revision]).await;
        match by_id {
            Ok(_) => {}
            Err(FetchError::Timeout { .. }) => return by_id.map(|_| ()),
            Err(_) => {
                self.run(
                    Some(work),
                    "git fetch",
                    &["fetch", "-q", "--", url, "+refs/heads/*:refs/h/*", "+refs/tags/*:refs/t/*"],
                )
                .await?;
            }
        }
        let commit = format!("{revision}^{{commit}}");
        if self.run(Some(work), "git cat-file", &["cat-file", "-e", &commit]).await.is_err() {
            return Err(FetchError::NoSuchRevision {
                source_ref: self.source_ref.to_owned(),
                revision: revision.to_owned(),
            });
        }
        self.run(Some(work), "git checkout", &["-c", "advice.detachedHead=false", "checkout", "-q", revision]).await?;
        Ok(())
    }
}

/// How a tool that did not exit 0 ended, for a message.
fn ended(outcome: EffectOutcome) -> String {
    match outcome {
        EffectOutcome::Exited(code) if code < 0 => format!("was killed by signal {}", -code),
        EffectOutcome::Exited(code) => format!("exited with {code}"),
        EffectOutcome::TimedOut => "ran past its deadline".into(),
        EffectOutcome::Stopped(_) => "was stopped".into(),
    }
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
