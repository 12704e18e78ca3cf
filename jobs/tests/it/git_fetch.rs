//! MS-1 with real `git` repositories over `file://`, fetched as a worker
//! fetches them (sandboxed `git`): a `ref` is pinned to the commit it names,
//! an annotated tag's peeled commit and never its tag object's id, whether
//! it is given short (`v2`) or in full (`refs/tags/v1`); a revision, branch
//! or tag the repository lacks is a refusal naming it
//! (`source_revision_not_found`), a URL naming no repository is
//! `source_repository_not_found`, and a server that cannot be reached stays
//! `fetch_failed`, worth a later try.

use slipway_jobs::config::Config;
use slipway_jobs::fetch::{self, FetchError};
use slipway_jobs::nix::NixFailure;
use slipway_jobs::outbound::Class;
use slipway_jobs::source::ModuleSource;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Runs `git args…` in `dir`; panics with its output unless it succeeds.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=Slipway tests", "-c", "user.email=tests@slipway.invalid"])
        .args(["-c", "init.defaultBranch=main", "-c", "tag.gpgSign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Commits a source whose `core/default.nix` says `version`; returns the commit.
fn commit_version(dir: &Path, version: &str) -> String {
    std::fs::create_dir_all(dir.join("core")).unwrap();
    std::fs::write(dir.join("core/default.nix"), format!("{{ ... }}: {{ version = \"{version}\"; }}\n")).unwrap();
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", version]);
    git(dir, &["rev-parse", "HEAD"])
}

/// A worker's configuration fetching into `state` and taking `file://`.
fn config(state: &Path) -> Config {
    let keys = BTreeMap::from([
        ("SLIPWAY_STATE_DIR".to_owned(), state.display().to_string()),
        ("SLIPWAY_ALLOW_PATH_SOURCES".to_owned(), "true".to_owned()),
    ]);
    Config::from_keys(&keys).unwrap()
}

async fn fetch(config: &Config, source: &str) -> Result<fetch::Fetched, FetchError> {
    fetch::fetch(config, &ModuleSource::parse(source).unwrap(), Duration::from_secs(60)).await
}

/// A repository with two commits and tags of every kind: annotated `v1`
/// (first commit) and `v2` (second), lightweight `light` (first), `nested`
/// (an annotated tag of the tag `v2`), and `tree` (a tag of a tree).
struct Tagged {
    url: String,
    first: String,
    second: String,
    v2_object: String,
}

fn tagged(dir: &Path) -> Tagged {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q"]);
    let first = commit_version(dir, "first");
    git(dir, &["tag", "-a", "v1", "-m", "the first release"]);
    git(dir, &["tag", "light"]);
    let tree = git(dir, &["rev-parse", "HEAD^{tree}"]);
    git(dir, &["tag", "-a", "tree", "-m", "a tag of a tree", &tree]);
    let second = commit_version(dir, "second");
    git(dir, &["tag", "-a", "v2", "-m", "the second release"]);
    git(dir, &["tag", "-a", "nested", "-m", "a tag of a tag", "v2"]);
    let v2_object = git(dir, &["rev-parse", "refs/tags/v2"]);
    assert_ne!(v2_object, second, "v2 is an annotated tag");
    Tagged { url: format!("file://{}", dir.display()), first, second, v2_object }
}

#[tokio::test]
async fn an_annotated_tag_is_pinned_to_the_commit_it_points_at_whether_named_short_or_in_full() {
    let scratch = tempfile::tempdir().unwrap();
    let repo = tagged(&scratch.path().join("repo"));
    let config = config(&scratch.path().join("state"));
    for (name, commit, version) in [
        ("v2", &repo.second, "second"),
        ("refs/tags/v2", &repo.second, "second"),
        ("v1", &repo.first, "first"),
        ("refs/tags/v1", &repo.first, "first"),
        ("nested", &repo.second, "second"),
        ("light", &repo.first, "first"),
        ("main", &repo.second, "second"),
        ("refs/heads/main", &repo.second, "second"),
    ] {
        let fetched = fetch(&config, &format!("git+{}?ref={name}", repo.url)).await.unwrap();
        assert_eq!(fetched.revision.as_deref(), Some(commit.as_str()), "{name}");
        assert_eq!(fetched.pinned, format!("git+{}?rev={commit}", repo.url), "{name}");
        let core = std::fs::read_to_string(fetched.dir.join("core/default.nix")).unwrap();
        assert!(core.contains(version), "{name}: {core}");
    }
}

#[tokio::test]
async fn a_revision_branch_or_tag_the_repository_lacks_is_refused_naming_it() {
    let scratch = tempfile::tempdir().unwrap();
    let repo = tagged(&scratch.path().join("repo"));
    let config = config(&scratch.path().join("state"));
    let missing = "0123456789abcdef0123456789abcdef01234567";
    for (query, named) in [
        (format!("rev={missing}"), missing),
        // A tag object's id names no commit of its own.
        (format!("rev={}", repo.v2_object), repo.v2_object.as_str()),
        ("ref=no-such-branch".to_owned(), "no-such-branch"),
        // A tag of a tree names no commit.
        ("ref=tree".to_owned(), ""),
    ] {
        let err = fetch(&config, &format!("git+{}?{query}", repo.url)).await.unwrap_err();
        assert!(matches!(err, FetchError::NoSuchRevision { .. } | FetchError::NoSuchRef { .. }), "{query}: {err:?}");
        assert!(err.to_string().contains(named), "{query}: {err}");
        assert_eq!(err.class(), Class::Refused, "{query}");
        assert_eq!(NixFailure::from_fetch(&err).code.as_str(), "source_revision_not_found", "{query}");
    }
    let kept: Vec<_> = std::fs::read_dir(fetch::cache_dir(&config.state_dir))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !name.ends_with(".lock"))
        .collect();
    assert_eq!(kept, Vec::<String>::new(), "a refused revision left a tree in the cache");
}

#[tokio::test]
async fn a_url_naming_no_repository_is_told_from_a_server_that_cannot_be_reached() {
    let scratch = tempfile::tempdir().unwrap();
    let config = config(&scratch.path().join("state"));
    let not_a_repository = scratch.path().join("empty");
    std::fs::create_dir_all(&not_a_repository).unwrap();
    for url in [
        format!("file://{}", scratch.path().join("nowhere").display()),
        format!("file://{}", not_a_repository.display()),
    ] {
        for query in ["ref=main", "rev=0123456789abcdef0123456789abcdef01234567"] {
            let err = fetch(&config, &format!("git+{url}?{query}")).await.unwrap_err();
            assert!(matches!(err, FetchError::NoRepository { .. }), "{url}?{query}: {err:?}");
            assert!(err.to_string().contains("no repository at this URL"), "{err}");
            assert!(!err.to_string().contains("fatal:"), "git's own output is in the message: {err}");
            assert_eq!(err.class(), Class::Refused);
            assert_eq!(NixFailure::from_fetch(&err).code.as_str(), "source_repository_not_found");
        }
    }
    // Nothing listens on a port just released.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let err = fetch(&config, &format!("git+https://127.0.0.1:{port}/ops/source.git?ref=main")).await.unwrap_err();
    assert!(matches!(err, FetchError::Failed { .. }), "{err:?}");
    assert!(err.class().is_retryable(), "{err:?}");
    assert_eq!(NixFailure::from_fetch(&err).code.as_str(), "fetch_failed");
}
