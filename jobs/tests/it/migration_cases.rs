//! Runs every shared migration case in `testdata/cases/migration` against the
//! rename engine (PRODUCT.md §5 MG-1…MG-4). The expected values live only in
//! the case files; see that folder's README for the fields.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;
use slipway_jobs::renames::{migrate, section_renames, Rename};

/// One case file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    renames: Vec<Rename>,
    input: Value,
    output: Value,
    skipped: Value,
    #[serde(default)]
    section: Option<String>,
    #[serde(default)]
    section_path: Option<Vec<String>>,
    #[serde(default)]
    section_renames: Option<Vec<Rename>>,
}

impl Case {
    /// The table that `input` is migrated with: the whole table, or for a
    /// section case the section's renames as the engine derives them.
    fn table(&self) -> Vec<Rename> {
        match &self.section_path {
            Some(path) => section_renames(&self.renames, path),
            None => self.renames.clone(),
        }
    }
}

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/cases/migration")
}

/// Every `*.json` case, sorted by file name. Panics when there is none, so an
/// empty or missing folder cannot pass silently.
fn load_cases() -> Vec<(PathBuf, Case)> {
    let dir = cases_dir();
    let entries = fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("cannot read the migration cases in {}: {error}", dir.display()));
    let mut paths: Vec<PathBuf> = entries
        .map(|entry| entry.expect("a readable folder entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no migration cases (*.json) in {}", dir.display());
    paths
        .into_iter()
        .map(|path| {
            let text =
                fs::read_to_string(&path).unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
            let case: Case = serde_json::from_str(&text)
                .unwrap_or_else(|error| panic!("{} is not a migration case: {error}", path.display()));
            (path, case)
        })
        .collect()
}

/// Runs `check` on every case and fails once, listing every case that failed.
fn check_every_case(check: impl Fn(&Case) -> Result<(), String>) {
    let failures: Vec<String> = load_cases()
        .iter()
        .filter_map(|(path, case)| check(case).err().map(|why| format!("{} ({}): {why}", case.name, path.display())))
        .collect();
    assert!(failures.is_empty(), "{} case(s) failed:\n{}", failures.len(), failures.join("\n\n"));
}

fn pretty<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).expect("serializable")
}

#[test]
fn the_migration_case_folder_holds_cases_named_after_their_files() {
    for (path, case) in load_cases() {
        let stem = path.file_stem().and_then(|stem| stem.to_str()).unwrap_or_default();
        assert_eq!(case.name, stem, "the case in {} names itself differently", path.display());
    }
}

#[test]
fn every_section_case_gives_its_section_renames() {
    check_every_case(|case| {
        let fields = (&case.section, &case.section_path, &case.section_renames);
        match fields {
            (None, None, None) => Ok(()),
            (Some(_), Some(path), Some(expected)) => {
                let actual = section_renames(&case.renames, path);
                if actual == *expected {
                    Ok(())
                } else {
                    Err(format!("section_renames gave\n{}\nexpected\n{}", pretty(&actual), pretty(expected)))
                }
            }
            _ => Err("a section case needs section, section_path and section_renames".to_owned()),
        }
    });
}

#[test]
fn every_case_migrates_its_input_to_its_output() {
    check_every_case(|case| {
        let mut value = case.input.clone();
        migrate(&mut value, &case.table());
        if value == case.output {
            Ok(())
        } else {
            Err(format!("migrated to\n{}\nexpected\n{}", pretty(&value), pretty(&case.output)))
        }
    });
}

#[test]
fn every_case_reports_exactly_its_skipped_entries() {
    check_every_case(|case| {
        let mut value = case.input.clone();
        let skipped = serde_json::to_value(migrate(&mut value, &case.table())).expect("serializable");
        if skipped == case.skipped {
            Ok(())
        } else {
            Err(format!("skipped\n{}\nexpected\n{}", pretty(&skipped), pretty(&case.skipped)))
        }
    });
}

#[test]
fn every_case_output_migrates_to_itself() {
    check_every_case(|case| {
        let mut value = case.output.clone();
        let skipped = migrate(&mut value, &case.table());
        if value != case.output {
            return Err(format!("migrating the output changed it to\n{}", pretty(&value)));
        }
        // A second pass may only repeat what the first could not apply.
        let mut first = case.input.clone();
        let first_skipped = migrate(&mut first, &case.table());
        match skipped.iter().find(|skip| !first_skipped.contains(skip)) {
            None => Ok(()),
            Some(new) => Err(format!("migrating the output skipped a new entry: {}", pretty(new))),
        }
    });
}
