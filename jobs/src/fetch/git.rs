//! The `git` runs of one fetch (SEC-3): only Slipway's settings apply.
//!
//! Every `git` runs in the fetch's sandbox with no system or global
//! configuration ([`environment`]: `GIT_CONFIG_NOSYSTEM`,
//! `GIT_CONFIG_GLOBAL=/dev/null`, no system attributes), so nothing of the
//! host's `/etc/gitconfig` or of any `~/.gitconfig` (an `insteadOf`, a hook
//! folder, a proxy, a credential helper, git-lfs's filter) reaches it, and
//! with the fixed `-c` options of [`options`]: no hooks, no fsmonitor, no
//! credential helper but Slipway's own store, TLS verified against
//! `SLIPWAY_GIT_CA_FILE` or the host's authorities, only the `https` and
//! `ssh` transports (`file` with `SLIPWAY_ALLOW_PATH_SOURCES`), no
//! submodules, objects checked as they arrive, the download kept as one
//! pack; and the proxy of `SLIPWAY_GIT_PROXY` or none, whatever the host's
//! proxy variables say. `git init --template=` copies no
//! template hooks, and the new repository's `info/attributes` unsets every
//! attribute that would run a filter or convert a file, so the tree is
//! checked out byte for byte whatever its own `.gitattributes` say.
//!
//! The files `SLIPWAY_GIT_CREDENTIALS`, `SLIPWAY_GIT_SSH_KEY`,
//! `SLIPWAY_GIT_KNOWN_HOSTS` and `SLIPWAY_GIT_CA_FILE` name are copied into a
//! folder of the fetch's own ([`Keys`]), shown only to the fetch's own `git`
//! runs and removed when the fetch ends: an evaluation or an effect never
//! sees them.
//!
//! The size of a fetch is bounded three ways by `SLIPWAY_SOURCE_LIMIT`: each
//! `git` may write no file larger (`RLIMIT_FSIZE`: the download is one pack);
//! while `git fetch` runs, a watcher measures the fetch's folder every
//! [`WATCH_EVERY`] and stops the fetch past the limit; and before the
//! checkout the files of the tree are summed from git's own listing, so a
//! small pack that would unpack into a large tree writes nothing.

use super::FetchError;
use crate::config::GitConfig;
use crate::effect::{run_tool_until, EffectOutcome, Stop, ToolRun};
use crate::sandbox::{Policy, Sandbox, View};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the watcher of a running `git fetch` measures its folder.
pub const WATCH_EVERY: Duration = Duration::from_millis(100);

/// What the new repository's `info/attributes` says of every path: no
/// filter (git-lfs's included), no end-of-line conversion, no `$Id$`
/// expansion, no encoding conversion. It wins over the tree's own
/// `.gitattributes`.
const ATTRIBUTES: &str = "* -text -filter -ident -working-tree-encoding\n";

/// The shell script that sums the sizes of a commit's files from
/// `git ls-tree -r -l` (its arguments are git's), printing the sum, and
/// fails when git does.
const SUM_FILES: &str = r#"{ git "$@" || echo failed; } | awk '$1 == "failed" { bad = 1 } $2 == "blob" { sum += $4 } END { if (bad) exit 1; printf "%.0f\n", sum }'"#;

/// Slipway's copies of the `SLIPWAY_GIT_*` files for one fetch: a folder of
/// its own under the state folder (`0700`, each file `0600`, the sandbox
/// user's), shown only to the fetch's `git` runs that talk to the server,
/// and removed with this value.
#[derive(Debug)]
pub struct Keys {
    dir: PathBuf,
    credentials: Option<PathBuf>,
    ssh_key: Option<PathBuf>,
    known_hosts: Option<PathBuf>,
    ca_file: Option<PathBuf>,
}

impl Keys {
    /// Copies the files `settings` names into a new folder under `parent`;
    /// `None` when it names none. An error names the setting and its file,
    /// never what the file holds.
    pub fn copy(settings: &GitConfig, policy: &Policy, parent: &Path) -> Result<Option<Self>, String> {
        let files = [
            ("SLIPWAY_GIT_CREDENTIALS", &settings.credentials, "credentials"),
            ("SLIPWAY_GIT_SSH_KEY", &settings.ssh_key, "ssh-key"),
            ("SLIPWAY_GIT_KNOWN_HOSTS", &settings.known_hosts, "known_hosts"),
            ("SLIPWAY_GIT_CA_FILE", &settings.ca_file, "ca.pem"),
        ];
        if files.iter().all(|(_, file, _)| file.is_none()) {
            return Ok(None);
        }
        let dir = parent.join(format!("keys-{}", ulid::Ulid::generate().to_string().to_lowercase()));
        crate::sandbox::private_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let mut keys = Self { dir, credentials: None, ssh_key: None, known_hosts: None, ca_file: None };
        let mut copies = Vec::new();
        for (key, file, name) in files {
            let Some(file) = file else {
                copies.push(None);
                continue;
            };
            let copy = keys.dir.join(name);
            std::fs::copy(file, &copy).map_err(|e| format!("{key}: cannot read {}: {e}", file.display()))?;
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| format!("cannot make {} private: {e}", copy.display()))?;
            copies.push(Some(copy));
        }
        let mut copies = copies.into_iter();
        keys.credentials = copies.next().flatten();
        keys.ssh_key = copies.next().flatten();
        keys.known_hosts = copies.next().flatten();
        keys.ca_file = copies.next().flatten();
        policy.give(&keys.dir).map_err(|e| format!("cannot give {} to the sandbox user: {e}", keys.dir.display()))?;
        Ok(Some(keys))
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `path` quoted for the shell git runs a helper or `ssh` through.
fn quoted(path: &Path) -> Result<String, String> {
    let text = path.to_str().ok_or_else(|| format!("{} is not UTF-8", path.display()))?;
    shlex::try_quote(text).map(|q| q.into_owned()).map_err(|_| format!("{} cannot be quoted", path.display()))
}

/// The `-c name=value` options ahead of every `git` subcommand of a fetch
/// (see the module doc). `allow_file` adds the `file` transport.
pub fn options(keys: Option<&Keys>, allow_file: bool) -> Result<Vec<String>, String> {
    let mut set: Vec<String> = [
        "core.hooksPath=/dev/null",
        "core.fsmonitor=false",
        "core.attributesFile=/dev/null",
        "core.autocrlf=false",
        "core.symlinks=true",
        // An empty value empties the list of helpers.
        "credential.helper=",
        "http.sslVerify=true",
        "protocol.allow=never",
        "protocol.https.allow=always",
        "protocol.ssh.allow=always",
        "submodule.recurse=false",
        "fetch.recurseSubmodules=false",
        "fetch.unpackLimit=1",
        "transfer.unpackLimit=1",
        "transfer.fsckObjects=true",
        "gc.auto=0",
        "maintenance.auto=false",
        "advice.detachedHead=false",
    ]
    .map(String::from)
    .to_vec();
    if allow_file {
        set.push("protocol.file.allow=always".into());
    }
    if let Some(credentials) = keys.and_then(|k| k.credentials.as_deref()) {
        set.push(format!("credential.helper=store --file={}", quoted(credentials)?));
    }
    if let Some(ca) = keys.and_then(|k| k.ca_file.as_deref()) {
        let ca = ca.to_str().ok_or_else(|| format!("{} is not UTF-8", ca.display()))?;
        set.push(format!("http.sslCAInfo={ca}"));
    }
    Ok(set.into_iter().flat_map(|option| ["-c".to_owned(), option]).collect())
}

/// The environment of every `git` of a fetch besides the sandbox's: no
/// system or global configuration or attributes, no prompt, no LFS smudge,
/// `ssh` with no configuration but Slipway's (its key, its `known_hosts`,
/// checked strictly; none: every host is unknown), and `http.proxy` (set
/// here rather than with `-c`: a proxy's URL may hold a password, and a
/// process's arguments are open to every user of the host).
pub fn environment(settings: &GitConfig, keys: Option<&Keys>) -> Result<Vec<(String, String)>, String> {
    let known_hosts = match keys.and_then(|k| k.known_hosts.as_deref()) {
        Some(file) => quoted(file)?,
        None => "/dev/null".to_owned(),
    };
    let mut ssh = format!(
        "ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o IdentityAgent=none \
         -o StrictHostKeyChecking=yes -o GlobalKnownHostsFile=/dev/null -o UserKnownHostsFile={known_hosts}"
    );
    if let Some(key) = keys.and_then(|k| k.ssh_key.as_deref()) {
        ssh.push_str(&format!(" -i {}", quoted(key)?));
    }
    Ok([
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_CONFIG_SYSTEM", "/dev/null"),
        ("GIT_CONFIG_GLOBAL", "/dev/null"),
        ("GIT_ATTR_NOSYSTEM", "1"),
        ("GIT_TERMINAL_PROMPT", "0"),
        ("GIT_ASKPASS", "/bin/false"),
        ("SSH_ASKPASS", "/bin/false"),
        ("GIT_LFS_SKIP_SMUDGE", "1"),
        ("GIT_SSH_VARIANT", "ssh"),
        ("GIT_SSH_COMMAND", ssh.as_str()),
        // An empty proxy also overrides the proxy variables of the environment.
        ("GIT_CONFIG_COUNT", "1"),
        ("GIT_CONFIG_KEY_0", "http.proxy"),
        ("GIT_CONFIG_VALUE_0", settings.proxy.as_deref().unwrap_or("")),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect())
}

/// The `git` runs of one fetch, sharing its deadline, settings and keys.
pub struct Git<'a> {
    /// The source as requested, for messages.
    pub source_ref: &'a str,
    /// When the fetch's deadline passes.
    pub until: Instant,
    /// The fetch's whole deadline, for messages.
    pub deadline: Duration,
    /// The sandbox every `git` of the fetch runs in (with `RLIMIT_FSIZE`
    /// at the limit).
    pub policy: Policy,
    /// The folder of a `file://` repository, which git may read.
    pub local_repo: Option<PathBuf>,
    /// `SLIPWAY_SOURCE_LIMIT`, in bytes.
    pub limit: u64,
    /// [`options`].
    pub options: Vec<String>,
    /// [`environment`].
    pub env: Vec<(String, String)>,
    /// The fetch's copies of Slipway's git files, if any.
    pub keys: Option<Keys>,
}

impl Git<'_> {
    /// Runs `git <options> args…` (see [`Git::run`]).
    async fn git(&self, dir: Option<&Path>, step: &str, args: &[&str]) -> Result<ToolRun, FetchError> {
        let mut argv = self.options.clone();
        let mut args = args.iter().map(|a| a.to_string());
        let subcommand = args.next().unwrap_or_default();
        let remote = matches!(subcommand.as_str(), "fetch" | "ls-remote");
        argv.push(subcommand);
        if self.local_repo.is_some() && remote {
            // A `file://` repository is not the sandbox user's: its
            // upload-pack reads it anyway (a `-c` of ours does not reach it).
            argv.push("--upload-pack=git -c 'safe.directory=*' upload-pack".to_owned());
        }
        argv.extend(args);
        self.run(dir, step, "git", &argv, remote).await
    }

    /// Runs `program args…` in `dir` (the fetch's own folder, which it may
    /// write, or `None`: its scratch folder) with the host's network, the
    /// keys shown when `remote`; an error unless it exits 0. A `git fetch`
    /// (`remote` in a folder) is watched and stopped once the folder passes
    /// the limit, and one that failed writing a file past the limit is
    /// [`FetchError::TooLarge`] too.
    async fn run(
        &self,
        dir: Option<&Path>,
        step: &str,
        program: &str,
        args: &[String],
        remote: bool,
    ) -> Result<ToolRun, FetchError> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(FetchError::Timeout { source_ref: self.source_ref.to_owned(), deadline: self.deadline });
        }
        let mut write: Vec<PathBuf> = dir.map(Path::to_path_buf).into_iter().collect();
        if remote {
            // The credential store rewrites its file: it is the fetch's own copy.
            write.extend(self.keys.as_ref().map(|k| k.dir.clone()));
        }
        let view = View { read: self.local_repo.iter().cloned().collect(), write, network: true };
        let sandbox = Sandbox { policy: self.policy.clone(), view };
        let env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let (stop_tx, stop) = tokio::sync::watch::channel(None);
        let watcher = match dir {
            Some(dir) if remote => Some(tokio::spawn(watch(dir.to_path_buf(), self.limit, stop_tx))),
            _ => None,
        };
        let marker = format!("slipway-fetch:{}", self.source_ref);
        let run = run_tool_until(sandbox, dir.unwrap_or(Path::new("/tmp")), program, args, &env, &marker, left, stop)
            .await
            .map_err(|e| FetchError::Local { source_ref: self.source_ref.to_owned(), reason: e.to_string() });
        if let Some(watcher) = watcher {
            watcher.abort();
        }
        let run = run?;
        let xfsz = format!("signal {}", libc::SIGXFSZ);
        let passed = if remote {
            "its download passed it and was stopped".to_owned()
        } else {
            format!("{step} wrote a file past it and was stopped")
        };
        match run.outcome {
            EffectOutcome::Exited(0) => Ok(run),
            EffectOutcome::TimedOut => {
                Err(FetchError::Timeout { source_ref: self.source_ref.to_owned(), deadline: self.deadline })
            }
            // Only the watcher stops a run.
            EffectOutcome::Stopped(_) => Err(self.too_large(passed)),
            // Killed by SIGXFSZ (as the sandbox reports a signal, or as
            // git reports its child's), or a file left at the limit (git
            // fetch names only the pack it could not index).
            EffectOutcome::Exited(code)
                if code == -libc::SIGXFSZ
                    || code == 128 + libc::SIGXFSZ
                    || run.output.contains(&xfsz)
                    || dir.is_some_and(|d| folder_bytes(d) >= self.limit) =>
            {
                Err(self.too_large(passed))
            }
            EffectOutcome::Exited(_) if remote && no_repository(&run.output) => {
                Err(FetchError::NoRepository { source_ref: self.source_ref.to_owned(), log: run.output })
            }
            other => Err(FetchError::Failed {
                source_ref: self.source_ref.to_owned(),
                step: format!("{step} {}", ended(other)),
                log: run.output,
            }),
        }
    }

    /// [`FetchError::TooLarge`] for this fetch.
    fn too_large(&self, what: String) -> FetchError {
        FetchError::TooLarge { source_ref: self.source_ref.to_owned(), limit: self.limit, what }
    }

    /// The commit `name` names in the repository now: the branch
    /// `refs/heads/<name>`, else the tag `refs/tags/<name>` (a full name
    /// `refs/…` first as it is). An annotated tag is peeled to the commit it
    /// points at (`ls-remote`'s `<ref>^{}` line), never its tag object's id.
    pub async fn resolve(&self, url: &str, name: &str) -> Result<String, FetchError> {
        let peeled = format!("{name}^{{}}");
        // ls-remote lists a tag's peeled line only when a pattern matches it.
        let run = self.git(None, "git ls-remote", &["ls-remote", "--", url, name, &peeled]).await?;
        let refs: Vec<(&str, &str)> = run.output.lines().filter_map(|l| l.split_once('\t')).collect();
        let find = |full: &str| refs.iter().find(|(_, r)| *r == full).map(|(rev, _)| rev.to_string());
        let mut candidates = Vec::new();
        if name.starts_with("refs/") {
            candidates.push(name.to_owned());
        }
        candidates.extend([format!("refs/heads/{name}"), format!("refs/tags/{name}")]);
        candidates
            .iter()
            .find_map(|full| find(&format!("{full}^{{}}")).or_else(|| find(full)))
            .filter(|rev| rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| FetchError::NoSuchRef { source_ref: self.source_ref.to_owned(), name: name.to_owned() })
    }

    /// Checks `revision` of `url` out into the empty folder `work` (the
    /// sandbox user's), refusing a tree whose files sum past the limit
    /// before it is written.
    pub async fn checkout(&self, work: &Path, url: &str, revision: &str) -> Result<(), FetchError> {
        self.git(Some(work), "git init", &["init", "-q", "--template="]).await?;
        let info = work.join(".git/info");
        std::fs::create_dir_all(&info)
            .and_then(|()| std::fs::write(info.join("attributes"), ATTRIBUTES))
            .and_then(|()| self.policy.give(&info))
            .map_err(|e| FetchError::Local {
                source_ref: self.source_ref.to_owned(),
                reason: format!("cannot write {}: {e}", info.display()),
            })?;
        // Most servers hand out a commit by id; those that do not get every
        // branch and tag fetched, and the commit looked up among them.
        let by_id = self.git(Some(work), "git fetch", &["fetch", "-q", "--depth", "1", "--", url, revision]).await;
        match by_id {
            Ok(_) => {}
            Err(FetchError::Timeout { .. } | FetchError::TooLarge { .. }) => return by_id.map(|_| ()),
            Err(_) => {
                self.git(
                    Some(work),
                    "git fetch",
                    &["fetch", "-q", "--", url, "+refs/heads/*:refs/h/*", "+refs/tags/*:refs/t/*"],
                )
                .await?;
            }
        }
        // The revision must be a commit itself: a tag object's id (which
        // `^{commit}` would peel) is not the commit that gets deployed.
        let commit = format!("{revision}^{{commit}}");
        let found = self.git(Some(work), "git rev-parse", &["rev-parse", "--verify", "--quiet", &commit]).await;
        if !found.is_ok_and(|run| run.output.lines().any(|line| line.trim() == revision)) {
            return Err(FetchError::NoSuchRevision {
                source_ref: self.source_ref.to_owned(),
                revision: revision.to_owned(),
            });
        }
        let bytes = self.tree_bytes(work, revision).await?;
        if bytes > self.limit {
            return Err(self.too_large(format!("its files hold {bytes} bytes")));
        }
        self.git(Some(work), "git checkout", &["checkout", "-q", revision]).await?;
        Ok(())
    }

    /// The bytes the files of `revision`'s tree hold, from git's listing.
    async fn tree_bytes(&self, work: &Path, revision: &str) -> Result<u64, FetchError> {
        let mut args: Vec<String> = vec!["-c".into(), SUM_FILES.into(), "sh".into()];
        args.extend(self.options.iter().cloned());
        args.extend(["ls-tree", "-r", "-l", "--full-tree", revision].map(String::from));
        let run = self.run(Some(work), "git ls-tree", "sh", &args, false).await?;
        run.output.lines().rev().find_map(|l| l.trim().parse::<u64>().ok()).ok_or_else(|| FetchError::Failed {
            source_ref: self.source_ref.to_owned(),
            step: "git ls-tree gave no size".into(),
            log: run.output.clone(),
        })
    }
}

/// What git (and the server through it) says when the URL names no
/// repository, or none this host may read: git's own words for a folder or
/// path that is no repository, an HTTP `401`, `403` or `404`, a login
/// refused or asked for (no prompt is given), a key refused, and the words
/// the common hosting services use over `ssh`. (Over `https`, git reports
/// a `404` as `repository '<url>' not found`, which [`no_repository`]
/// reads too.) A server that cannot be reached, or answers `5xx`, says
/// none of these.
pub const NO_REPOSITORY: [&str; 11] = [
    "does not appear to be a git repository",
    "returned error: 401",
    "returned error: 403",
    "returned error: 404",
    "Authentication failed for",
    "could not read Username for",
    "could not read Password for",
    "Permission denied (publickey",
    "Repository not found",
    "could not be found or you don't have permission",
    "The project you were looking for could not be found",
];

/// Whether a remote `git`'s `output` says the repository is not there, or
/// refuses this host ([`NO_REPOSITORY`]).
pub fn no_repository(output: &str) -> bool {
    NO_REPOSITORY.iter().any(|words| output.contains(words))
        || output.lines().any(|line| line.starts_with("fatal: repository '") && line.ends_with("' not found"))
}

/// Measures `dir` every [`WATCH_EVERY`] and stops its run (`stop`) once it
/// holds more than `limit` bytes. Runs until aborted or it stops the run.
pub async fn watch(dir: PathBuf, limit: u64, stop: tokio::sync::watch::Sender<Option<Stop>>) {
    let mut every = tokio::time::interval(WATCH_EVERY);
    loop {
        every.tick().await;
        let measured = dir.clone();
        let bytes = tokio::task::spawn_blocking(move || folder_bytes(&measured)).await.unwrap_or(0);
        if bytes > limit {
            let _ = stop.send(Some(Stop::Cancel));
            return;
        }
    }
}

/// The bytes the files under `dir` hold now (those that vanish while it is
/// measured count nothing).
pub fn folder_bytes(dir: &Path) -> u64 {
    let mut bytes = 0u64;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => pending.push(entry.path()),
                Ok(m) => bytes = bytes.saturating_add(m.len()),
                Err(_) => {}
            }
        }
    }
    bytes
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(options: &[String]) -> Vec<&str> {
        options
            .chunks(2)
            .map(|c| {
                assert_eq!(c[0], "-c");
                c[1].as_str()
            })
            .collect()
    }

    #[test]
    fn git_reads_no_host_configuration_and_runs_nothing_of_the_hosts() {
        let settings = GitConfig::default();
        let env = environment(&settings, None).unwrap();
        let get = |k: &str| env.iter().find(|(name, _)| name == k).map(|(_, v)| v.as_str());
        assert_eq!(get("GIT_CONFIG_NOSYSTEM"), Some("1"));
        assert_eq!(get("GIT_CONFIG_GLOBAL"), Some("/dev/null"));
        assert_eq!(get("GIT_ATTR_NOSYSTEM"), Some("1"));
        assert_eq!(get("GIT_TERMINAL_PROMPT"), Some("0"));
        let ssh = get("GIT_SSH_COMMAND").unwrap();
        assert!(ssh.starts_with("ssh -F /dev/null "), "{ssh}");
        assert!(ssh.contains("StrictHostKeyChecking=yes") && ssh.contains("UserKnownHostsFile=/dev/null"), "{ssh}");
        assert_eq!((get("GIT_CONFIG_KEY_0"), get("GIT_CONFIG_VALUE_0")), (Some("http.proxy"), Some("")));
        let without_file = options(None, false).unwrap();
        let set = pairs(&without_file);
        for wanted in ["core.hooksPath=/dev/null", "credential.helper=", "protocol.allow=never", "core.fsmonitor=false"]
        {
            assert!(set.contains(&wanted), "{wanted} missing from {set:?}");
        }
        assert!(!set.iter().any(|o| o.starts_with("protocol.file")), "{set:?}");
        let with_file = options(None, true).unwrap();
        assert!(pairs(&with_file).contains(&"protocol.file.allow=always"));
    }

    #[test]
    fn slipways_own_files_are_copied_private_and_named_quoted() {
        let parent = tempfile::tempdir().unwrap();
        let originals = tempfile::tempdir().unwrap();
        let credentials = originals.path().join("git credentials");
        std::fs::write(&credentials, "https://u:t@git.example.org\n").unwrap();
        let settings = GitConfig {
            proxy: Some("http://proxy.internal:3128".into()),
            credentials: Some(credentials),
            ..GitConfig::default()
        };
        let policy = Policy::new(&crate::config::Config::from_keys(&Default::default()).unwrap()).unwrap();
        let keys = Keys::copy(&settings, &policy, parent.path()).unwrap().unwrap();
        let copy = keys.credentials.clone().unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&keys.dir).unwrap().permissions().mode() & 0o777, 0o700);
        use std::os::unix::fs::MetadataExt as _;
        assert_eq!(std::fs::metadata(&copy).unwrap().uid(), policy.user.uid, "the sandbox user's");
        let with_keys = options(Some(&keys), false).unwrap();
        let set = pairs(&with_keys);
        assert!(!with_keys.iter().any(|o| o.contains("proxy.internal")), "the proxy is on the command line");
        let env = environment(&settings, Some(&keys)).unwrap();
        assert!(env.contains(&("GIT_CONFIG_VALUE_0".to_owned(), "http://proxy.internal:3128".to_owned())), "{env:?}");
        assert!(set.contains(&format!("credential.helper=store --file={}", copy.display()).as_str()), "{set:?}");
        let missing = GitConfig { ssh_key: Some(originals.path().join("nope")), ..GitConfig::default() };
        let err = Keys::copy(&missing, &policy, parent.path()).unwrap_err();
        assert!(err.starts_with("SLIPWAY_GIT_SSH_KEY: cannot read"), "{err}");
        let dir = keys.dir.clone();
        drop(keys);
        assert!(!dir.exists(), "the copies outlived the fetch");
    }

    #[test]
    fn a_repository_that_is_not_there_or_refuses_is_told_from_a_server_that_cannot_answer() {
        for missing in [
            "remote: Not Found\nfatal: repository 'https://git.example.org/ops/x.git/' not found\n",
            "fatal: could not read Username for 'https://127.0.0.1:4431': terminal prompts disabled\n",
            "remote: Invalid username or password.\nfatal: Authentication failed for 'https://git.example.org/x/'\n",
            "fatal: unable to access 'https://git.example.org/x/': The requested URL returned error: 403\n",
            "fatal: '/srv/x' does not appear to be a git repository\nfatal: Could not read from remote repository.\n",
            "ERROR: Repository not found.\nfatal: Could not read from remote repository.\n",
            "git@git.example.org: Permission denied (publickey).\nfatal: Could not read from remote repository.\n",
        ] {
            assert!(no_repository(missing), "{missing}");
        }
        for unreachable in [
            "fatal: unable to access 'https://git.example.org/x/': The requested URL returned error: 502\n",
            "fatal: unable to access 'https://127.0.0.1:1/x/': Failed to connect to 127.0.0.1 port 1: Connection refused\n",
            "fatal: unable to access 'https://nowhere.invalid/x/': Could not resolve host: nowhere.invalid\n",
            "ssh: connect to host git.example.org port 22: Connection timed out\nfatal: Could not read from remote repository.\n",
            "Host key verification failed.\nfatal: Could not read from remote repository.\n",
            "fatal: remote error: upload-pack: not our ref 0123456789abcdef0123456789abcdef01234567\n",
        ] {
            assert!(!no_repository(unreachable), "{unreachable}");
        }
    }

    #[tokio::test]
    async fn the_watcher_stops_a_fetch_once_its_folder_passes_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = tokio::sync::watch::channel(None);
        let watcher = tokio::spawn(watch(dir.path().to_path_buf(), 1000, tx));
        std::fs::write(dir.path().join("a"), vec![0u8; 1000]).unwrap();
        // At the limit: not stopped (three measures at least).
        let waited = tokio::time::timeout(WATCH_EVERY * 3, rx.changed()).await;
        assert!(waited.is_err(), "stopped at the limit");
        std::fs::create_dir(dir.path().join("objects")).unwrap();
        std::fs::write(dir.path().join("objects/b"), [0u8]).unwrap();
        tokio::time::timeout(Duration::from_secs(10), rx.changed()).await.expect("the watcher stops it").unwrap();
        assert_eq!(*rx.borrow(), Some(Stop::Cancel));
        assert!(watcher.await.is_ok(), "the watcher ends once it stopped the run");
    }
}
