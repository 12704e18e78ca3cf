//! Module sources: a source reference and its checks, here; what Slipway
//! reads from a source's outputs in [`outputs`]; which sources a submit may
//! use and how it asks for their outputs in [`policy`]; an api's cache of
//! outputs built on the `nix` queue in [`fleet`]. See
//! `docs/MODULE-SOURCE.md` (MS-1).

pub mod fleet;
pub mod outputs;
pub mod policy;

use std::fmt;
use std::path::PathBuf;

/// The project repository: the default entry of the trusted-source allowlist
/// (MS-6, `SLIPWAY_TRUSTED_SOURCES`). A hosting provider sets its own list.
pub const PROJECT_REPOSITORY: &str = "https://slipway.invalid/slipway";

/// The URL schemes of a git source's repository (SEC-3): `file://` is
/// further held to [`ModuleSource::check_transport`].
const TRANSPORTS: [&str; 3] = ["https://", "ssh://", "file://"];

/// A module source reference (MS-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleSource {
    /// `git+<url>?rev=<40 hex>` (pinned) or `git+<url>?ref=<branch>` (rolling).
    Git {
        /// The repository URL, without `git+`.
        url: String,
        /// How the revision is chosen.
        pin: GitPin,
    },
    /// `path:<dir>`: local runs and tests only.
    Path(PathBuf),
}

/// How a git module source names its revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitPin {
    /// A 40-hex commit.
    Rev(String),
    /// A branch, resolved and pinned when fetched.
    Ref(String),
}

/// A module source that is malformed or not allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// Not of a form MS-1 names.
    #[error("a module source is git+<url>?rev=<40 hex>, git+<url>?ref=<branch> or path:<dir>; {0}")]
    Malformed(String),
    /// Outside the trusted-source allowlist (MS-6).
    #[error("module source {0} is not in this service's trusted-source allowlist")]
    NotAllowed(String),
    /// A `path:` source where they are not allowed (over HTTP, unless
    /// `SLIPWAY_ALLOW_PATH_SOURCES` is set).
    #[error("module source {0}: path: sources are for local runs and tests; this service does not take them (SLIPWAY_ALLOW_PATH_SOURCES)")]
    PathNotAllowed(String),
    /// A `file://` repository where local sources are not allowed: Slipway
    /// fetches over `https` and `ssh` only (SEC-3).
    #[error("module source {0}: file:// repositories are for local runs and tests; this service fetches over https and ssh only (SLIPWAY_ALLOW_PATH_SOURCES)")]
    TransportNotAllowed(String),
}

impl ModuleSource {
    /// Parses a reference of MS-1.
    pub fn parse(s: &str) -> Result<Self, SourceError> {
        // A source is stored, logged and shown: a control character (a
        // terminal escape, a line break) or a bidirectional override would
        // act on whoever reads it there. Refused before anything repeats it
        // unescaped; the message escapes it.
        if let Some(c) = s.chars().find(|c| c.is_control() || is_bidi_control(*c)) {
            return Err(SourceError::Malformed(format!(
                "{s:?} holds the control character {c:?}; a module source is printable text"
            )));
        }
        if let Some(dir) = s.strip_prefix("path:") {
            if dir.is_empty() {
                return Err(SourceError::Malformed("path: needs a folder".into()));
            }
            return Ok(Self::Path(PathBuf::from(dir)));
        }
        let Some(rest) = s.strip_prefix("git+") else {
            return Err(SourceError::Malformed(format!("{s:?} starts with neither git+ nor path:")));
        };
        let (url, query) = rest
            .split_once('?')
            .ok_or_else(|| SourceError::Malformed(format!("{s:?} names neither ?rev= nor ?ref=")))?;
        // A password in the URL would be stored, logged and repeated in
        // every error: it is refused before anything repeats the URL.
        let authority = url.split_once("://").map_or("", |(_, rest)| rest.split('/').next().unwrap_or(""));
        if authority.rsplit_once('@').is_some_and(|(userinfo, _)| userinfo.contains(':')) {
            return Err(SourceError::Malformed(
                "a module source URL carries no password; give a private repository's credentials \
                 with SLIPWAY_GIT_CREDENTIALS (https) or SLIPWAY_GIT_SSH_KEY (ssh)"
                    .into(),
            ));
        }
        // SEC-3: plain http (readable and changeable on the way), git://,
        // ext:: and scp-like addresses are never fetched.
        let scheme_ok = TRANSPORTS.iter().any(|p| url.starts_with(p));
        if !scheme_ok || url.contains(char::is_whitespace) {
            return Err(SourceError::Malformed(format!(
                "{url:?} is not an https or ssh URL (file:// where local sources are allowed)"
            )));
        }
        // A dot segment would make the allowlist's prefix match a URL that
        // names another repository once resolved (`…/trusted/../other`).
        let path = url.split_once("://").map_or(url, |(_, rest)| rest);
        let dot_segment = path.split('/').any(|seg| {
            let seg = seg.to_ascii_lowercase().replace("%2e", ".");
            seg == "." || seg == ".."
        });
        let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
        if host.starts_with('-') {
            return Err(SourceError::Malformed(format!(
                "{url:?} names a host that begins with '-', which ssh would read as an option"
            )));
        }
        if url.contains('#') {
            return Err(SourceError::Malformed(format!("{url:?} has a fragment ('#'), which names no repository")));
        }
        if dot_segment || url.contains('\\') {
            return Err(SourceError::Malformed(format!(
                "{url:?} has a '.' or '..' segment; name the repository directly"
            )));
        }
        let pin = if let Some(rev) = query.strip_prefix("rev=") {
            if rev.len() != 40 || !rev.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()) {
                return Err(SourceError::Malformed(format!("rev {rev:?} is not 40 lower-case hex digits")));
            }
            GitPin::Rev(rev.to_owned())
        } else if let Some(r) = query.strip_prefix("ref=") {
            if let Some(why) = bad_ref(r) {
                return Err(SourceError::Malformed(format!("ref {r:?} is not a branch or tag name: {why}")));
            }
            GitPin::Ref(r.to_owned())
        } else {
            return Err(SourceError::Malformed(format!("{query:?} names neither rev= nor ref=")));
        };
        Ok(Self::Git { url: url.to_owned(), pin })
    }

    /// SEC-3: the transports Slipway fetches over: `https://` and `ssh://`
    /// ([`ModuleSource::parse`] takes no other), and `file://` only where
    /// `allow_file` (`SLIPWAY_ALLOW_PATH_SOURCES`) is set;
    /// [`SourceError::TransportNotAllowed`] otherwise. A `path:` source is
    /// [`ModuleSource::check_allowed`]'s to judge.
    pub fn check_transport(&self, allow_file: bool) -> Result<(), SourceError> {
        match self {
            Self::Git { url, .. } if url.starts_with("file://") && !allow_file => {
                Err(SourceError::TransportNotAllowed(self.to_string()))
            }
            _ => Ok(()),
        }
    }

    /// MS-6 allowlist: a git URL must start with a trusted prefix at a
    /// boundary (`https://host/ops` allows `https://host/ops/fork` and
    /// `https://host/ops.git`, not `https://host/ops-evil`; a prefix ending in
    /// `/` allows what is under it); an empty list allows all. A `path:`
    /// source, or a `file://` repository ([`ModuleSource::check_transport`]),
    /// only where `allow_path` is set.
    pub fn check_allowed(&self, trusted: &[String], allow_path: bool) -> Result<(), SourceError> {
        self.check_transport(allow_path)?;
        match self {
            Self::Path(_) if allow_path => Ok(()),
            Self::Path(_) => Err(SourceError::PathNotAllowed(self.to_string())),
            Self::Git { url, .. } => {
                let under = |prefix: &str| match url.strip_prefix(prefix) {
                    Some(rest) => {
                        prefix.ends_with('/')
                            || rest.is_empty()
                            || rest.starts_with('/')
                            || rest == ".git"
                            || rest.starts_with(".git/")
                    }
                    None => false,
                };
                if trusted.is_empty() || trusted.iter().any(|p| under(p)) {
                    Ok(())
                } else {
                    Err(SourceError::NotAllowed(self.to_string()))
                }
            }
        }
    }
}

/// The Unicode bidirectional formatting characters (embeddings, overrides,
/// isolates and marks), which reorder the text shown around them.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Why `name` is not a branch or tag name git takes, or `None`: the rules
/// of `git check-ref-format --allow-onelevel`, byte for byte, and no
/// leading `-` (as `--branch` adds):
///
/// - it is not empty, and does not begin with `-` (git would read it as an
///   option);
/// - it does not begin or end with `/`, and holds no `//` (no empty part);
/// - no part of it (between `/`s) begins with `.` or ends with `.lock`;
/// - it does not end with `.`, and holds no `..` and no `@{` (git reads
///   `@{-1}`, `main@{1}` as other revisions); it is not the single `@`;
/// - it holds no control character (bytes below `0x20`, and `0x7f`), no
///   space, and none of `~ ^ : ? * [ \` (git reads `main^`, `main~1`,
///   `a:b` as other revisions, and `?*[` as patterns).
///
/// Besides, a source's query decodes nothing and takes one parameter, so
/// `&`, `#` and `%` are refused too. Any other byte (non-ASCII letters
/// included) is taken, as git takes it.
pub fn bad_ref(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("it is empty");
    }
    if name.starts_with('-') {
        return Some("it begins with '-'");
    }
    if name == "@" {
        return Some("it is the single character '@'");
    }
    if name.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Some("it holds a control character");
    }
    if let Some(c) = name.chars().find(|c| " ~^:?*[\\".contains(*c)) {
        return Some(match c {
            ' ' => "it holds a space",
            '~' | '^' | ':' => "it holds '~', '^' or ':', which git reads as a revision expression",
            '\\' => "it holds '\\'",
            _ => "it holds '?', '*' or '[', which git reads as a pattern",
        });
    }
    if name.contains(['&', '#', '%']) {
        return Some("it holds '&', '#' or '%', which a module source's query does not take");
    }
    if name.starts_with('/') || name.ends_with('/') || name.contains("//") {
        return Some("it begins or ends with '/' or holds '//'");
    }
    if name.contains("..") {
        return Some("it holds '..'");
    }
    if name.ends_with('.') {
        return Some("it ends with '.'");
    }
    if name.contains("@{") {
        return Some("it holds '@{', which git reads as a revision expression");
    }
    if name.split('/').any(|part| part.starts_with('.')) {
        return Some("a part of it begins with '.'");
    }
    if name.split('/').any(|part| part.ends_with(".lock")) {
        return Some("a part of it ends with '.lock'");
    }
    None
}

impl fmt::Display for ModuleSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Path(p) => write!(f, "path:{}", p.display()),
            Self::Git { url, pin: GitPin::Rev(r) } => write!(f, "git+{url}?rev={r}"),
            Self::Git { url, pin: GitPin::Ref(r) } => write!(f, "git+{url}?ref={r}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_form_round_trips() {
        for s in [
            "git+https://example.org/x.git?rev=0123456789abcdef0123456789abcdef01234567",
            "git+https://example.org/x.git?ref=main",
            "path:/srv/source",
        ] {
            assert_eq!(ModuleSource::parse(s).unwrap().to_string(), s);
        }
    }

    /// Each ref name, whether Slipway takes it, and the words of its
    /// refusal; `git check-ref-format` is asked about each too.
    const REF_NAMES: &[(&str, Option<&str>)] = &[
        ("main", None),
        ("release/1.2", None),
        ("v1.0.0", None),
        ("feature_x-2", None),
        ("refs/tags/v1", None),
        ("refs/heads/main", None),
        ("HEAD", None),
        ("x/-y", None),
        ("a@b", None),
        ("@@", None),
        ("a{b}", None),
        ("a.lock.b", None),
        ("é", None),
        ("a\u{a0}b", None),
        ("a\u{85}b", None),
        ("ü/ß", None),
        ("-n", Some("begins with '-'")),
        ("-", Some("begins with '-'")),
        ("--upload-pack=x", Some("begins with '-'")),
        ("main^", Some("'^'")),
        ("main^{}", Some("'^'")),
        ("main~1", Some("'~'")),
        ("a:b", Some("':'")),
        ("a?b", Some("'?'")),
        ("a*", Some("'*'")),
        ("a[b", Some("'['")),
        ("a\\b", Some("'\\'")),
        ("a b", Some("a space")),
        ("a\tb", Some("control character")),
        ("ma\u{0}in", Some("control character")),
        ("a\u{7f}b", Some("control character")),
        ("x.lock", Some("'.lock'")),
        ("a/b.lock", Some("'.lock'")),
        ("foo/bar.lock/baz", Some("'.lock'")),
        ("a//b", Some("'//'")),
        ("x/", Some("ends with '/'")),
        ("/x", Some("begins or ends with '/'")),
        ("a.", Some("ends with '.'")),
        ("a..b", Some("'..'")),
        ("..", Some("'..'")),
        (".", Some("ends with '.'")),
        (".hidden", Some("begins with '.'")),
        ("a/.b", Some("begins with '.'")),
        ("a/./b", Some("begins with '.'")),
        ("@", Some("single character '@'")),
        ("@{-1}", Some("'@{'")),
        ("main@{1}", Some("'@{'")),
        ("a@{b", Some("'@{'")),
        ("", Some("empty")),
    ];

    /// Slipway's own refusals of a ref that git takes: a source's query is
    /// not decoded and takes one parameter.
    const QUERY_ONLY: &[&str] = &["a&b", "a#b", "a%20b"];

    #[test]
    fn every_ref_name_git_refuses_is_refused_naming_the_rule_and_every_other_is_taken() {
        for (name, refused) in REF_NAMES {
            // A NUL cannot be an argument: git never sees such a name.
            if !name.contains('\0') {
                let git = std::process::Command::new("git")
                    .args(["check-ref-format", "--allow-onelevel", name])
                    .output()
                    .expect("git runs");
                assert_eq!(!git.status.success(), refused.is_some(), "git and this table disagree on {name:?}");
            }
            let source = format!("git+https://example.org/x.git?ref={name}");
            // A control character is refused in any part of a source (git
            // takes C1 ones, such as U+0085).
            if name.contains(char::is_control) {
                let err = ModuleSource::parse(&source).unwrap_err().to_string();
                assert!(err.contains("control character"), "{name:?}: {err}");
                continue;
            }
            match (ModuleSource::parse(&source), refused) {
                (Ok(parsed), None) => assert_eq!(parsed.to_string(), source),
                (Err(SourceError::Malformed(why)), Some(words)) => {
                    assert!(why.contains("is not a branch or tag name") && why.contains(words), "{name:?}: {why}")
                }
                (other, _) => panic!("{name:?}: {other:?}"),
            }
        }
        for name in QUERY_ONLY {
            let git = std::process::Command::new("git").args(["check-ref-format", "--allow-onelevel", name]).status();
            assert!(git.expect("git runs").success(), "git refuses {name:?}: move it to REF_NAMES");
            let err = ModuleSource::parse(&format!("git+https://example.org/x.git?ref={name}")).unwrap_err();
            assert!(err.to_string().contains("query does not take"), "{name:?}: {err}");
        }
    }

    #[test]
    fn a_password_in_a_source_url_is_refused_and_never_repeated() {
        for source in [
            "git+https://user:hunter2-secret@example.org/x.git?ref=main",
            "git+http://user:hunter2-secret@example.org/x.git?ref=main",
            "git+ssh://git:hunter2-secret@example.org/x.git?ref=main",
        ] {
            let err = ModuleSource::parse(source).unwrap_err().to_string();
            assert!(!err.contains("hunter2"), "{err}");
            assert!(err.contains("SLIPWAY_GIT_CREDENTIALS"), "{err}");
        }
        assert!(ModuleSource::parse("git+ssh://git@example.org/x.git?ref=main").is_ok());
        assert!(ModuleSource::parse("git+https://token@example.org/x.git?ref=main").is_ok());
    }

    #[test]
    fn a_host_that_reads_as_an_option_or_a_fragment_is_refused() {
        for source in
            ["git+ssh://-oProxyCommand=touch%20/tmp/x/x?ref=main", "git+https://example.org/x.git#frag?ref=main"]
        {
            assert!(ModuleSource::parse(source).is_err(), "{source}");
        }
    }

    #[test]
    fn a_control_character_anywhere_in_a_source_is_refused_and_shown_escaped() {
        for source in [
            "git+https://x.example/\u{1b}]0;T\u{7}?ref=main",
            "git+https://x.example/a\u{1b}[2Jb.git?rev=0123456789abcdef0123456789abcdef01234567",
            "git+https://x.example/a\u{9b}31m?ref=main",
            "git+https://x.example/a\u{202e}b?ref=main",
            "git+https://x.example/a\rb?ref=main",
            "path:/srv/\u{1b}]52;c;aGk=\u{7}",
        ] {
            let err = ModuleSource::parse(source).unwrap_err().to_string();
            assert!(err.contains("control character"), "{source:?}: {err}");
            assert!(!err.contains(['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}', '\r']), "{err:?}");
        }
    }

    #[test]
    fn a_short_rev_is_refused() {
        assert!(ModuleSource::parse("git+https://example.org/x?rev=abc").is_err());
    }

    #[test]
    fn path_sources_need_explicit_permission() {
        let s = ModuleSource::parse("path:/x").unwrap();
        assert!(s.check_allowed(&[], false).is_err());
        assert!(s.check_allowed(&[], true).is_ok());
    }

    #[test]
    fn a_dot_segment_cannot_lead_a_source_out_of_the_allowlist() {
        for s in [
            "git+file:///srv/trusted/../outside?ref=main",
            "git+https://git.example.org/ops/../evil/x?ref=main",
            "git+https://git.example.org/ops/%2E%2e/evil?ref=main",
            "git+https://git.example.org/ops/./x?ref=main",
        ] {
            assert!(matches!(ModuleSource::parse(s), Err(SourceError::Malformed(_))), "{s}");
        }
    }

    #[test]
    fn only_https_and_ssh_are_fetched_and_file_only_where_local_sources_are_allowed() {
        for refused in [
            "git+http://example.org/x.git?ref=main",
            "git+HTTP://example.org/x.git?ref=main",
            "git+git://example.org/x.git?ref=main",
            "git+ext::sh -c touch% /tmp/pwned?ref=main",
            "git+ftp://example.org/x.git?ref=main",
            "git+git@example.org:x.git?ref=main",
            "git+fd::3?ref=main",
        ] {
            let err = ModuleSource::parse(refused).unwrap_err();
            assert!(matches!(err, SourceError::Malformed(_)), "{refused}: {err}");
        }
        for (s, local) in [
            ("git+https://example.org/x.git?ref=main", false),
            ("git+ssh://git@example.org/x.git?ref=main", false),
            ("git+file:///srv/x?ref=main", true),
        ] {
            let source = ModuleSource::parse(s).unwrap();
            assert!(source.check_transport(true).is_ok(), "{s}");
            assert_eq!(source.check_transport(false).is_err(), local, "{s}");
            let err = source.check_allowed(&[], false);
            assert_eq!(matches!(err, Err(SourceError::TransportNotAllowed(_))), local, "{s}: {err:?}");
        }
        let err = ModuleSource::parse("git+file:///srv/x?ref=main").unwrap().check_allowed(&[], false).unwrap_err();
        assert!(err.to_string().contains("https and ssh only"), "{err}");
    }

    #[test]
    fn an_allowlist_prefix_matches_at_a_boundary_only() {
        let trusted = vec!["https://slipway.invalid/slipway".to_owned(), "file:///srv/forks/".to_owned()];
        for (s, allowed) in [
            ("git+https://slipway.invalid/slipway?ref=main", true),
            ("git+https://slipway.invalid/slipway.git?ref=main", true),
            ("git+https://slipway.invalid/slipway/sub?ref=main", true),
            ("git+https://slipway.invalid/slipway-evil?ref=main", false),
            ("git+https://slipway.invalid/slipway.evil?ref=main", false),
            ("git+file:///srv/forks/a?ref=main", true),
            ("git+file:///srv/forksevil?ref=main", false),
        ] {
            let source = ModuleSource::parse(s).unwrap();
            assert_eq!(source.check_allowed(&trusted, true).is_ok(), allowed, "{s}");
        }
    }

    #[test]
    fn an_empty_allowlist_allows_every_git_source() {
        let s = ModuleSource::parse("git+https://fork.example/x?ref=main").unwrap();
        assert!(s.check_allowed(&[], false).is_ok());
        assert!(s.check_allowed(&["https://other.example/".into()], false).is_err());
    }
}
