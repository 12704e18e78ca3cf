//! The sandbox of every process Slipway runs on a module source (SEC-3):
//! `git` fetching it, Nix evaluating and building it, and its effects.
//!
//! A module source is untrusted code, even from an allowed repository. Each
//! such process runs in a sandbox that the kernel enforces (bubblewrap's
//! `bwrap`, then util-linux's `setpriv`):
//!
//! - as the unprivileged sandbox user (`SLIPWAY_SANDBOX_USER`), with no
//!   capability and `no_new_privs`, so no setuid program lifts it;
//! - in a mount namespace that shows only the host's system folders
//!   read-only (`/usr`, `/etc`, the Nix store and `SLIPWAY_SANDBOX_PATHS`),
//!   a `/proc` of its own PID namespace (no other process, so no worker's
//!   environment or memory), a minimal `/dev`, its own scratch folder as
//!   `/tmp`, and the folders of [`View`]: its own source read-only, its own
//!   work folder (and, for an effect, its own deployment's state) writable.
//!   Slipway's state folder, database file and configuration file are never
//!   shown, even where they lie under a system folder;
//! - with a network of its own (only a loopback) unless the run needs the
//!   host's (a fetch, an evaluation with allowed URIs, an effect with
//!   `SLIPWAY_EFFECT_NETWORK=host`);
//! - with Nix reached through the Nix daemon (`NIX_REMOTE=daemon`): the
//!   sandbox user is not a trusted Nix user, so the daemon's own settings
//!   (its build sandbox above all) hold whatever the source asks, and the
//!   store cannot be written but through the daemon; and with the Nix
//!   settings of [`Policy::nix_config`], which the host's `NIX_CONFIG`,
//!   `NIX_PATH` and user configuration files cannot weaken;
//! - with at most `NIX_MEMORY_LIMIT` of address space per process.
//!
//! [`crate::effect`] puts the sandbox inside each effect's PID namespace,
//! so deadlines, cancels and worker deaths still end every process.

use crate::config::Config;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The folders a sandbox shows of the host, read-only, when they exist:
/// symbolic links among them (`/bin -> usr/bin` on a merged-`/usr` host)
/// are made again as links inside.
const SYSTEM: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/nix"];

/// The Nix settings whose safety the sandbox depends on; they are set in
/// every sandboxed process's `NIX_CONFIG` (and passed again on the command
/// line of Slipway's own Nix runs), after anything the host's `nix.conf` says.
const FORCED_NIX: &[(&str, &str)] = &[
    ("restrict-eval", "true"),
    ("allow-unsafe-native-code-during-evaluation", "false"),
    ("allow-import-from-derivation", "false"),
    ("sandbox", "true"),
    ("pure-eval", "false"),
];

/// The settings of the operator's own `NIX_CONFIG` that pass into a
/// sandbox: where to get and build store paths, and how long to wait for
/// them. Nothing that changes what an evaluation may reach.
const OPERATOR_NIX: &[&str] = &[
    "substituters",
    "extra-substituters",
    "trusted-public-keys",
    "extra-trusted-public-keys",
    "builders",
    "builders-use-substitutes",
    "connect-timeout",
    "stalled-download-timeout",
    "fallback",
    "max-jobs",
    "cores",
    "http-connections",
];

/// The user a sandbox runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Its user id (never 0).
    pub uid: u32,
    /// Its group id.
    pub gid: u32,
    /// Supplementary groups: the group of the Nix daemon's socket folder
    /// when that folder is not open to all.
    pub groups: Vec<u32>,
}

/// Who every sandbox runs as and what of the host it sees, from the
/// worker's configuration ([`Policy::new`]).
#[derive(Debug, Clone)]
pub struct Policy {
    /// The sandbox user.
    pub user: User,
    /// Host paths shown read-only: [`SYSTEM`], then `SLIPWAY_SANDBOX_PATHS`.
    system: Vec<PathBuf>,
    /// Host paths never shown: the state folder, the SQLite file and the
    /// configuration file.
    hidden: Vec<PathBuf>,
    /// `NIX_CONFIG` of every sandboxed process ([`Policy::nix_config`]).
    nix_config: String,
    /// The address space of each process, in bytes.
    pub memory: u64,
    /// The largest file each process may write, in bytes (`RLIMIT_FSIZE`;
    /// past it the write fails and the process gets `SIGXFSZ`): a fetch's
    /// `git` runs with `SLIPWAY_SOURCE_LIMIT`. `None` (unbounded) elsewhere.
    pub file_size: Option<u64>,
    /// `SLIPWAY_NIX_ALLOWED_URIS`, as Nix's `allowed-uris` takes them.
    pub allowed_uris: Vec<String>,
}

/// What one sandboxed run sees besides the host's system folders. Paths
/// are host paths, shown at the same path inside (so a path in a log or a
/// Nix GC root means the same inside and out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    /// Folders and files shown read-only (the module source).
    pub read: Vec<PathBuf>,
    /// Folders shown writable (the run's work folder, an effect's state);
    /// the worker gives them to the sandbox user first ([`Policy::give`]).
    pub write: Vec<PathBuf>,
    /// Whether the run may use the host's network; otherwise it has a
    /// network of its own with only a loopback.
    pub network: bool,
}

/// A [`Policy`] and the [`View`] of one run.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// Who runs, and what of the host every run sees.
    pub policy: Policy,
    /// What this run sees of its own.
    pub view: View,
}

impl Sandbox {
    /// The command line running `program args…` in this sandbox
    /// ([`Policy::command`]).
    pub fn command(&self, scratch: &Path, dir: &Path, program: &Path, args: &[String]) -> (String, Vec<OsString>) {
        self.policy.command(&self.view, scratch, dir, program, args)
    }
}

impl Policy {
    /// The policy of `config`'s sandbox settings: resolves the sandbox user
    /// (a name of the host's user database, or `uid:gid`) and finds the Nix
    /// daemon's socket folder. Errors name the setting.
    pub fn new(config: &Config) -> Result<Self, String> {
        let settings = &config.sandbox;
        let mut user = resolve_user(&settings.user)?;
        if let Some(gid) = daemon_socket_group() {
            if gid != user.gid && !user.groups.contains(&gid) {
                user.groups.push(gid);
            }
        }
        let mut system: Vec<PathBuf> = SYSTEM.iter().map(PathBuf::from).collect();
        for var in ["NIX_STORE_DIR", "NIX_STATE_DIR"] {
            if let Some(dir) = std::env::var_os(var).map(PathBuf::from).filter(|d| d.is_absolute()) {
                system.push(dir);
            }
        }
        // A daemon listening elsewhere than under the Nix state folder.
        if let Some(socket) = std::env::var_os("NIX_DAEMON_SOCKET_PATH").map(PathBuf::from) {
            system.extend(socket.parent().filter(|d| d.is_absolute()).map(Path::to_path_buf));
        }
        system.extend(settings.paths.iter().cloned());
        let mut hidden = vec![config.state_dir.clone()];
        hidden.extend(config.database.sqlite_path().map(|p| std::path::absolute(&p).unwrap_or(p)));
        hidden.extend(config.file.clone());
        Ok(Self {
            user,
            system,
            hidden,
            nix_config: nix_config(&settings.nix_allowed_uris, std::env::var("NIX_CONFIG").ok().as_deref()),
            memory: settings.memory_limit,
            file_size: None,
            allowed_uris: settings.nix_allowed_uris.clone(),
        })
    }

    /// The `NIX_CONFIG` every sandboxed process gets: the operator's
    /// settings of `OPERATOR_NIX` from the worker's own `NIX_CONFIG`,
    /// then `allowed-uris` and the settings of `FORCED_NIX`, which win.
    pub fn nix_config(&self) -> &str {
        &self.nix_config
    }

    /// The `--option name value` arguments that force `FORCED_NIX` and
    /// `allowed-uris` on one Nix command line, whatever any configuration
    /// file or variable says.
    pub fn nix_options(&self) -> Vec<String> {
        let mut args = Vec::new();
        for (name, value) in FORCED_NIX {
            args.extend(["--option".to_owned(), name.to_string(), value.to_string()]);
        }
        args.extend(["--option".to_owned(), "allowed-uris".to_owned(), self.allowed_uris.join(" ")]);
        args
    }

    /// The environment of a sandboxed process besides its own variables:
    /// the locale and `PATH` of the worker, `HOME` and `TMPDIR` at its
    /// scratch folder, and Nix through the daemon with [`Policy::nix_config`],
    /// an empty `NIX_PATH` and no user configuration file. Nothing else of
    /// the worker's environment (never a credential) is passed.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> =
            ["PATH", "LANG", "LC_ALL", "TZ", "NIX_STORE_DIR", "NIX_STATE_DIR", "NIX_DAEMON_SOCKET_PATH"]
                .iter()
                .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
                .collect();
        env.extend(
            [
                ("HOME", "/tmp"),
                ("TMPDIR", "/tmp"),
                ("NIX_REMOTE", "daemon"),
                ("NIX_PATH", ""),
                ("NIX_USER_CONF_FILES", "/dev/null"),
                ("NIX_CONFIG", self.nix_config.as_str()),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
        );
        env
    }

    /// The command line that runs `program args…` in the sandbox of `view`
    /// with `scratch` as its `/tmp`, starting in `dir`: `bwrap` and its
    /// mounts, then `setpriv` dropping to the sandbox user.
    pub fn command(
        &self,
        view: &View,
        scratch: &Path,
        dir: &Path,
        program: &Path,
        args: &[String],
    ) -> (String, Vec<OsString>) {
        let mut mounts = Mounts::default();
        // A PID namespace of its own: its /proc shows its own processes
        // only, and none outlives it.
        mounts.flag("--die-with-parent").flag("--unshare-pid").flag("--unshare-ipc").flag("--unshare-uts");
        if !view.network {
            mounts.flag("--unshare-net");
        }
        // Its scratch folder first: a shown folder may lie under /tmp.
        mounts.pair("--dev", "/dev").pair("--proc", "/proc").bind("--bind", scratch, Path::new("/tmp"));
        for path in &self.system {
            match std::fs::symlink_metadata(path) {
                Ok(m) if m.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(path) {
                        mounts.bind("--symlink", &target, path);
                    }
                }
                Ok(_) => {
                    mounts.bind("--ro-bind", path, path);
                }
                Err(_) => {}
            }
        }
        // /etc/resolv.conf may be a link into /run (systemd-resolved): show its folder.
        if let Ok(resolv) = std::fs::canonicalize("/etc/resolv.conf") {
            if let Some(folder) = resolv.parent().filter(|f| !self.shows(f)) {
                mounts.bind("--ro-bind", folder, folder);
            }
        }
        for path in self.hidden.iter().filter(|p| self.shows(p)) {
            match std::fs::metadata(path) {
                Ok(m) if m.is_dir() => {
                    mounts.pair("--tmpfs", path);
                }
                Ok(_) => {
                    mounts.bind("--ro-bind", Path::new("/dev/null"), path);
                }
                Err(_) => {}
            }
        }
        for path in &view.read {
            mounts.bind("--ro-bind", path, path);
        }
        for path in &view.write {
            mounts.bind("--bind", path, path);
        }
        let mut a = mounts.args;
        a.extend(["--chdir".into(), dir.into(), "--".into(), "setpriv".into()]);
        a.push(format!("--reuid={}", self.user.uid).into());
        a.push(format!("--regid={}", self.user.gid).into());
        if self.user.groups.is_empty() {
            a.push("--clear-groups".into());
        } else {
            let groups: Vec<String> = self.user.groups.iter().map(u32::to_string).collect();
            a.push(format!("--groups={}", groups.join(",")).into());
        }
        a.extend(["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"].map(OsString::from));
        a.push(program.into());
        a.extend(args.iter().map(OsString::from));
        ("bwrap".to_owned(), a)
    }

    /// Whether `path` lies under one of the host folders a sandbox shows.
    fn shows(&self, path: &Path) -> bool {
        self.system.iter().any(|s| path.starts_with(s))
    }

    /// Makes `path` (a folder, with everything in it) the sandbox user's,
    /// without following links, so a run may write it. The worker calls
    /// it on each folder of a [`View::write`] and on the scratch folder.
    /// A file with more than one link that is not the sandbox user's
    /// already is left alone: a run may have linked a file of the host
    /// into its state folder (where `fs.protected_hardlinks` is off), and
    /// giving it away would give the host's file.
    pub fn give(&self, path: &Path) -> std::io::Result<()> {
        give_to(&self.user, path)
    }
}

/// [`Policy::give`] for `user`.
fn give_to(user: &User, path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p)?;
        let theirs = meta.uid() == user.uid && meta.gid() == user.gid;
        let linked_elsewhere = !meta.is_dir() && meta.nlink() > 1;
        if !theirs && !linked_elsewhere {
            std::os::unix::fs::lchown(&p, Some(user.uid), Some(user.gid))?;
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&p)? {
                stack.push(entry?.path());
            }
        }
    }
    Ok(())
}

/// The arguments of `bwrap`, in order. A mount point's parent folders
/// that no earlier mount shows are made first, open to enter (`bwrap`
/// would make them `0700`, closed to the sandbox user).
#[derive(Default)]
struct Mounts {
    args: Vec<OsString>,
    /// Mount points and folders made so far, inside.
    made: Vec<PathBuf>,
    /// Folders shown read-only: what lies under them is there already.
    read_only: Vec<PathBuf>,
}

impl Mounts {
    fn flag(&mut self, flag: &str) -> &mut Self {
        self.args.push(flag.into());
        self
    }

    fn pair(&mut self, option: &str, path: impl AsRef<std::ffi::OsStr>) -> &mut Self {
        self.args.extend([option.into(), path.as_ref().to_os_string()]);
        self.made.push(PathBuf::from(path.as_ref()));
        self
    }

    /// `option source destination` (a bind, or `--symlink target link`).
    fn bind(&mut self, option: &str, source: &Path, destination: &Path) -> &mut Self {
        let ancestors: Vec<&Path> = destination.ancestors().skip(1).collect();
        for folder in ancestors.into_iter().rev() {
            if folder == Path::new("/")
                || self.made.iter().any(|m| m == folder)
                || self.read_only.iter().any(|r| folder.starts_with(r))
            {
                continue;
            }
            self.args.extend(["--perms".into(), "0755".into(), "--dir".into(), folder.into()]);
            self.made.push(folder.to_path_buf());
        }
        self.args.extend([option.into(), source.into(), destination.into()]);
        self.made.push(destination.to_path_buf());
        if option == "--ro-bind" {
            self.read_only.push(destination.to_path_buf());
        }
        self
    }
}

/// The `NIX_CONFIG` of [`Policy::nix_config`] from the operator's own
/// (`operator`, the worker's `NIX_CONFIG`, may be absent).
fn nix_config(allowed_uris: &[String], operator: Option<&str>) -> String {
    let mut lines: Vec<String> = operator
        .unwrap_or("")
        .lines()
        .map(str::trim)
        .filter(|line| {
            let name = line.split('=').next().unwrap_or("").trim();
            line.contains('=') && OPERATOR_NIX.contains(&name)
        })
        .map(str::to_owned)
        .collect();
    lines.push(format!("allowed-uris = {}", allowed_uris.join(" ")));
    lines.extend(FORCED_NIX.iter().map(|(name, value)| format!("{name} = {value}")));
    lines.join("\n")
}

/// `name` or `uid:gid` as a [`User`], with its groups from the user database.
fn resolve_user(spec: &str) -> Result<User, String> {
    let invalid = |why: &str| format!("SLIPWAY_SANDBOX_USER: {why} (got {spec:?})");
    if let Some((uid, gid)) = spec.split_once(':') {
        let (uid, gid) = (uid.parse::<u32>(), gid.parse::<u32>());
        return match (uid, gid) {
            (Ok(0), _) => Err(invalid("the sandbox user must not be root")),
            (Ok(uid), Ok(gid)) => Ok(User { uid, gid, groups: Vec::new() }),
            _ => Err(invalid("expected a user name or uid:gid")),
        };
    }
    let name = std::ffi::CString::new(spec).map_err(|_| invalid("a user name holds no NUL"))?;
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwnam_r writes into `pwd` and `buf`, which outlive the call.
    let rc = unsafe { libc::getpwnam_r(name.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() {
        return Err(invalid("no such user on this host: create an unprivileged user for it, or name uid:gid"));
    }
    if pwd.pw_uid == 0 {
        return Err(invalid("the sandbox user must not be root"));
    }
    Ok(User { uid: pwd.pw_uid, gid: pwd.pw_gid, groups: Vec::new() })
}

/// The group of the Nix daemon's socket folder when others may not enter
/// it (Debian's `nix-users`), so the sandbox user can reach the daemon.
fn daemon_socket_group() -> Option<u32> {
    use std::os::unix::fs::MetadataExt as _;
    let folder = match std::env::var_os("NIX_DAEMON_SOCKET_PATH").map(PathBuf::from) {
        Some(socket) => socket.parent()?.to_path_buf(),
        None => std::env::var_os("NIX_STATE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| "/nix/var/nix".into())
            .join("daemon-socket"),
    };
    let meta = std::fs::metadata(folder).ok()?;
    (meta.mode() & 0o001 == 0).then_some(meta.gid())
}

/// Makes this process create every file and folder private to its user
/// (`umask 077`), whatever the umask it was started with: the state
/// folder, the database and every work folder are the worker's alone.
/// Both binaries call it first thing.
pub fn private_umask() {
    // SAFETY: umask only sets this process's file mode mask.
    unsafe { libc::umask(0o077) };
}

/// Creates `dir` (and its parents) and makes it `0700`, even when it
/// existed with a wider mode: Slipway's state folder.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Checks, when a worker starts (or a local run begins), that this host
/// can sandbox a module source: `bwrap` and `setpriv` run, the sandbox user
/// reaches the Nix daemon, and the daemon builds in Nix's sandbox (a probe
/// derivation looks for the host's Nix database); when it does not, the
/// check fails if `SLIPWAY_NIX_REQUIRE_SANDBOX` (the default), else warns.
pub async fn check(config: &Config) -> Result<(), String> {
    let policy = Policy::new(config)?;
    let scratch = tempfile_dir()?;
    policy.give(&scratch).map_err(|e| format!("cannot give {} to the sandbox user: {e}", scratch.display()))?;
    let nonce = ulid::Ulid::generate().to_string().to_lowercase();
    let expression = format!(
        "derivation {{ name = \"slipway-sandbox-probe\"; system = builtins.currentSystem; builder = \"/bin/sh\"; \
         nonce = \"{nonce}\"; args = [ \"-c\" \"if [ -e /nix/var/nix/db ]; then echo host > $out; \
         else echo sandbox > $out; fi\" ]; }}"
    );
    let mut args = policy.nix_options();
    args.extend(["--no-out-link".to_owned(), "-E".to_owned(), expression]);
    let (program, argv) = policy.command(&View::default(), &scratch, Path::new("/tmp"), Path::new("nix-build"), &args);
    let mut command = tokio::process::Command::new(&program);
    command.args(&argv).env_clear().envs(policy.env()).stdin(std::process::Stdio::null()).kill_on_drop(true);
    // SAFETY: umask is async-signal-safe; see effect::run for why 022.
    unsafe {
        command.pre_exec(|| {
            libc::umask(0o022);
            Ok(())
        });
    }
    let run = command.output().await;
    let _ = std::fs::remove_dir_all(&scratch);
    let out = run.map_err(|e| {
        format!("cannot run {program} (bubblewrap), which sandboxes every process run on a module source: {e}")
    })?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "the sandbox user ({}) cannot build with Nix: {} (run the Nix daemon, nix-daemon, and let that user \
             reach its socket; see docs/SECURITY.md)",
            config.sandbox.user,
            stderr.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("no output").trim()
        ));
    }
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let seen = std::fs::read_to_string(&path).unwrap_or_default();
    if seen.trim() != "sandbox" {
        let why = "the Nix daemon builds outside Nix's sandbox: a source's builders would see this host and its \
                   network (start nix-daemon with sandbox = true; see docs/SECURITY.md)";
        if config.sandbox.nix_require_sandbox {
            return Err(format!("{why}; SLIPWAY_NIX_REQUIRE_SANDBOX=false lets the worker start regardless"));
        }
        tracing::warn!("{why}");
    }
    Ok(())
}

/// A fresh folder under the system's temporary folder, the sandbox user's.
fn tempfile_dir() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("slipway-check-{}", ulid::Ulid::generate().to_string().to_lowercase()));
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operators_nix_settings_pass_but_never_one_that_weakens_an_evaluation() {
        let operator = "substituters = https://cache.example\nallow-unsafe-native-code-during-evaluation = true\n\
                        extra-allowed-uris = file:///\nrestrict-eval = false\ntrusted-public-keys = k:1";
        let config = nix_config(&["https://example.org/".to_owned()], Some(operator));
        let lines: Vec<&str> = config.lines().collect();
        assert_eq!(lines[..2], ["substituters = https://cache.example", "trusted-public-keys = k:1"]);
        assert!(lines.contains(&"allowed-uris = https://example.org/"));
        assert!(lines.contains(&"allow-unsafe-native-code-during-evaluation = false"));
        assert!(lines.contains(&"restrict-eval = true"));
        assert!(!config.contains("file://"), "{config}");
        assert!(!config.contains("= true\nextra"), "{config}");
    }

    #[test]
    fn giving_a_folder_away_never_gives_a_file_linked_from_elsewhere() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile::tempdir().unwrap();
        let (outside, state) = (dir.path().join("host-file"), dir.path().join("state"));
        std::fs::create_dir(&state).unwrap();
        std::fs::write(&outside, "the host's").unwrap();
        std::fs::hard_link(&outside, state.join("linked")).unwrap();
        std::fs::write(state.join("own"), "the run's").unwrap();
        std::os::unix::fs::symlink(&outside, state.join("symlink")).unwrap();
        let before = std::fs::metadata(&outside).unwrap();
        let user = User { uid: before.uid() + 4242, gid: before.gid() + 4242, groups: vec![] };
        give_to(&user, &state).unwrap();
        let after = std::fs::metadata(&outside).unwrap();
        assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()), "the linked file was given away");
        for mine in [state.clone(), state.join("own")] {
            assert_eq!(std::fs::symlink_metadata(&mine).unwrap().uid(), user.uid, "{}", mine.display());
        }
        assert_eq!(std::fs::symlink_metadata(state.join("symlink")).unwrap().uid(), user.uid);
    }

    #[test]
    fn the_sandbox_user_is_resolved_by_name_or_ids_and_never_root() {
        let nobody = resolve_user("nobody").unwrap();
        assert_ne!(nobody.uid, 0);
        assert_eq!(resolve_user("1234:5678").unwrap(), User { uid: 1234, gid: 5678, groups: vec![] });
        for bad in ["root", "0:0", "no-such-user-here", "12:x"] {
            assert!(resolve_user(bad).unwrap_err().starts_with("SLIPWAY_SANDBOX_USER:"), "{bad}");
        }
    }
}
