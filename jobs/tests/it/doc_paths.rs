//! The guides to the code name real files: every path that
//! `docs/ARCHITECTURE.md`, `docs/TESTING.md` and `jobs/README.md` quote
//! (`` `jobs/src/submit.rs` ``, `` `api/src/auth.rs::Auth` ``) exists, and
//! every source file they quote is named from the repository root, so a
//! reader can open it without guessing the folder.

use slipway_jobs::test_support::repo;

/// The guides this test holds to their paths.
const GUIDES: [&str; 3] = ["docs/ARCHITECTURE.md", "docs/TESTING.md", "jobs/README.md"];

/// Extensions of the files a guide points a reader to.
const SOURCE_EXTENSIONS: [&str; 9] = [".rs", ".nix", ".sql", ".mjs", ".toml", ".md", ".hcl", ".html", ".service"];

/// The inline code spans of `markdown`, outside fenced blocks.
fn code_spans(markdown: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(inside), Some(_)) = (parts.next(), parts.next()) {
            spans.push(inside.to_owned());
        }
    }
    spans
}

/// What a span names as a path: the span without an item (`::name`) or a
/// line (`:12`) after it, or `None` when it is not a plain path (it holds
/// a placeholder, a space or a glob, or starts with `/`, `$` or `.`).
fn path_of(span: &str) -> Option<&str> {
    let path = span.split("::").next().unwrap();
    let path = match path.rsplit_once(':') {
        Some((p, line)) if line.chars().all(|c| c.is_ascii_digit() || c == '-') => p,
        _ => path,
    };
    let plain = path.contains('/')
        && path.chars().all(|c| c.is_ascii_alphanumeric() || "/_.-".contains(c))
        && !path.starts_with(['/', '.', '-']);
    plain.then_some(path)
}

/// The folders and files at the repository's root a guide's path may start with.
fn roots() -> Vec<String> {
    std::fs::read_dir(repo())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with('.') && name != "target")
        .collect()
}

/// The faults of guide `guide` (a path from the repository's root, or an
/// absolute one): paths that do not exist, and source files not named from
/// the root.
fn faults_of(guide: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo().join(guide)).unwrap_or_else(|e| panic!("{guide}: {e}"));
    let roots = roots();
    let mut faults = Vec::new();
    for span in code_spans(&text) {
        let Some(path) = path_of(&span) else { continue };
        let first = path.split('/').next().unwrap();
        if roots.iter().any(|r| r == first) {
            if !repo().join(path.trim_end_matches('/')).exists() {
                faults.push(format!("{guide}: `{span}` names {path}, which does not exist"));
            }
        } else if SOURCE_EXTENSIONS.iter().any(|ext| path.ends_with(ext)) {
            faults.push(format!("{guide}: `{span}` names a file without the folders from the repository root"));
        }
    }
    faults
}

#[test]
fn every_path_the_guides_to_the_code_name_exists_and_starts_at_the_root() {
    let faults: Vec<String> = GUIDES.iter().flat_map(|g| faults_of(g)).collect();
    assert!(faults.is_empty(), "{} faults:\n{}", faults.len(), faults.join("\n"));
}

#[test]
fn a_path_that_does_not_exist_or_is_named_from_a_subfolder_is_a_fault() {
    let dir = tempfile::tempdir().unwrap();
    let guide = dir.path().join("GUIDE.md");
    std::fs::write(
        &guide,
        "`jobs/src/submit.rs::submit` and `api/src/gone.rs` and `store/db.rs` and `<state>/builds/` \
         and `/proc` and `jobs/src/lib.rs:3`\n```sh\ncat nowhere/at/all.rs\n```\n",
    )
    .unwrap();
    // An absolute path: `faults_of` reads it as it is, and checks the
    // paths it names against the repository.
    let faults = faults_of(guide.to_str().unwrap());
    assert_eq!(faults.len(), 2, "{faults:?}");
    assert!(faults[0].contains("api/src/gone.rs, which does not exist"), "{faults:?}");
    assert!(faults[1].contains("`store/db.rs` names a file without the folders"), "{faults:?}");
}
