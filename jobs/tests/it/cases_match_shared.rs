//! The cases under `testdata/cases` are copies of the shared cases
//! (`../shared/cases` beside the workspace); this test keeps them
//! byte-identical while the shared folder is present, and passes with a note
//! where it is not (a checkout of the workspace alone).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Every file below `root`, as paths relative to it.
fn files_below(root: &Path) -> BTreeSet<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<PathBuf>) {
        let entries = fs::read_dir(dir).unwrap_or_else(|error| panic!("cannot read {}: {error}", dir.display()));
        for entry in entries {
            let path = entry.expect("a readable folder entry").path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let relative = path.strip_prefix(root).expect("below the root");
                out.insert(relative.to_path_buf());
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, root, &mut out);
    out
}

#[test]
fn testdata_cases_are_byte_identical_to_the_shared_cases() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shared = manifest.join("../../shared/cases");
    let local = manifest.join("../testdata/cases");
    if !shared.is_dir() {
        eprintln!("note: {} is absent, so the copies in {} are not compared", shared.display(), local.display());
        return;
    }
    let shared_files = files_below(&shared);
    let local_files = files_below(&local);
    assert!(!shared_files.is_empty(), "{} holds no files", shared.display());

    let mut problems = Vec::new();
    for missing in shared_files.difference(&local_files) {
        problems.push(format!("{} is shared but has no copy in testdata/cases", missing.display()));
    }
    for extra in local_files.difference(&shared_files) {
        problems.push(format!("{} is in testdata/cases but not in the shared cases", extra.display()));
    }
    for file in shared_files.intersection(&local_files) {
        let read = |root: &Path| {
            fs::read(root.join(file))
                .unwrap_or_else(|error| panic!("cannot read {}: {error}", root.join(file).display()))
        };
        if read(&shared) != read(&local) {
            problems.push(format!("{} differs from the shared copy", file.display()));
        }
    }
    assert!(
        problems.is_empty(),
        "testdata/cases must stay a byte-identical copy of {}:\n{}",
        shared.display(),
        problems.join("\n")
    );
}
