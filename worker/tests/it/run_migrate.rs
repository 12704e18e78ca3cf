//! `slipway-worker run migrate` (§5): the real binary over every migration
//! case in `testdata/cases/migration`, its text output, and its refusals of
//! bad input. The expected values live only in the case files.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/cases/migration")
}

/// Every case file, sorted by name, with its JSON. Panics on an empty
/// folder, so a missing one cannot pass.
fn cases() -> Vec<(String, Value)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(cases_dir())
        .expect("the migration cases folder")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no migration cases in {}", cases_dir().display());
    paths
        .into_iter()
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let case = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("case JSON");
            (name, case)
        })
        .collect()
}

/// What a run of the binary gave.
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout))
    }
}

/// `slipway-worker run migrate <args>`, with settings that would refuse any
/// command that loads them (a migration loads none).
fn migrate(args: &[&str]) -> Ran {
    let out = Command::new(env!("CARGO_BIN_EXE_slipway-worker"))
        .args(["run", "migrate"])
        .args(args)
        .env("SLIPWAY_CONFIG", "/nonexistent/slipway.toml")
        .output()
        .unwrap();
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The case's table and input written to files in `dir`.
fn files(dir: &Path, case: &Value) -> (String, String) {
    let (renames, config) = (dir.join("renames.json"), dir.join("config.json"));
    std::fs::write(&renames, case["renames"].to_string()).unwrap();
    std::fs::write(&config, case["input"].to_string()).unwrap();
    (renames.display().to_string(), config.display().to_string())
}

/// The `--section` arguments of a section case (its path as a JSON list),
/// none for a whole-configuration case.
fn section_args(case: &Value) -> Vec<String> {
    match case.get("section_path") {
        Some(path) => vec!["--section".into(), path.to_string()],
        None => vec![],
    }
}

#[test]
fn every_migration_case_gives_its_output_and_skipped_entries_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut sections = 0;
    for (name, case) in cases() {
        let (renames, config) = files(dir.path(), &case);
        let section = section_args(&case);
        sections += usize::from(!section.is_empty());
        let mut args = vec!["--renames", &renames, "--config", &config, "--output", "json"];
        args.extend(section.iter().map(String::as_str));
        let ran = migrate(&args);
        if ran.code != 0 {
            failures.push(format!("{name}: exit code {}: {}", ran.code, ran.stderr));
            continue;
        }
        let want = json!({ "output": case["output"], "skipped": case["skipped"] });
        if ran.json() != want {
            failures.push(format!("{name}: gave\n{}\nexpected\n{want:#}", ran.stdout));
        }
    }
    assert!(failures.is_empty(), "{} case(s) failed:\n{}", failures.len(), failures.join("\n\n"));
    assert!(sections > 0, "no section case ran, so --section went untested");
}

#[test]
fn a_dotted_section_path_migrates_as_its_json_form_does() {
    let dir = tempfile::tempdir().unwrap();
    let section_cases: Vec<_> = cases().into_iter().filter(|(_, case)| case.get("section_path").is_some()).collect();
    assert!(!section_cases.is_empty());
    for (name, case) in section_cases {
        let (renames, config) = files(dir.path(), &case);
        let keys: Vec<&str> = case["section_path"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
        let (dotted, listed) = (keys.join("."), case["section_path"].to_string());
        let base = ["--renames", renames.as_str(), "--config", config.as_str(), "--output", "json", "--section"];
        let by_dots = migrate(&[&base[..], &[dotted.as_str()]].concat());
        let by_list = migrate(&[&base[..], &[listed.as_str()]].concat());
        assert_eq!(by_dots.code, 0, "{name}: {}", by_dots.stderr);
        assert_eq!(by_dots.json(), by_list.json(), "{name}");
        assert_eq!(by_dots.json()["output"], case["output"], "{name}");
    }
}

#[test]
fn the_text_output_shows_the_migrated_value_and_names_every_skipped_entry() {
    let dir = tempfile::tempdir().unwrap();
    let mut skips_seen = 0;
    for (name, case) in cases() {
        let (renames, config) = files(dir.path(), &case);
        let section = section_args(&case);
        let mut args = vec!["--renames", renames.as_str(), "--config", config.as_str()];
        args.extend(section.iter().map(String::as_str));
        let ran = migrate(&args);
        assert_eq!(ran.code, 0, "{name}: {}", ran.stderr);
        let pretty = serde_json::to_string_pretty(&case["output"]).unwrap();
        assert!(ran.stdout.contains(&pretty), "{name}: the migrated value is not shown:\n{}", ran.stdout);
        let skipped = case["skipped"].as_array().unwrap();
        if skipped.is_empty() {
            assert!(ran.stdout.contains("no entry was skipped"), "{name}:\n{}", ran.stdout);
        }
        for skip in skipped {
            skips_seen += 1;
            let entry = format!("renames entry {} (", skip["entry"]);
            let line = ran.stdout.lines().find(|l| l.contains(&entry));
            let line = line.unwrap_or_else(|| panic!("{name}: no line names {entry}:\n{}", ran.stdout));
            assert!(line.contains("skipped"), "{name}: {line}");
            if let Some(path) = skip["path"].as_array() {
                let dotted: Vec<&str> = path.iter().map(|k| k.as_str().unwrap()).collect();
                assert!(line.contains(&dotted.join(".")), "{name}: {line} does not name {path:?}");
            }
        }
    }
    assert!(skips_seen > 0, "no case skips an entry, so the skip lines went untested");
}

#[test]
fn bad_input_is_refused_with_the_file_and_what_is_wrong_and_exit_code_two() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let table = write("renames.json", r#"[{"from": ["a"], "to": ["b"], "kind": "option"}]"#);
    let config = write("config.json", r#"{"a": 1}"#);
    let missing = dir.path().join("missing.json").display().to_string();
    let cases = [
        // (renames, config, extra arguments, what the error must name)
        (missing.clone(), config.clone(), vec![], vec![missing.as_str(), "renames file", "cannot read"]),
        (table.clone(), missing.clone(), vec![], vec![missing.as_str(), "configuration file", "cannot read"]),
        (write("broken.json", "[{"), config.clone(), vec![], vec!["broken.json", "not JSON"]),
        (table.clone(), write("broken-config.json", "{\"a\": "), vec![], vec!["broken-config.json", "not JSON"]),
        (
            write("object.json", r#"{"from": ["a"], "to": ["b"]}"#),
            config.clone(),
            vec![],
            vec!["object.json", "not a list"],
        ),
        (
            write("no-to.json", r#"[{"from": ["a"], "to": ["b"]}, {"from": ["c"]}]"#),
            config.clone(),
            vec![],
            vec!["no-to.json", "entry 1", "`to`"],
        ),
        (
            write("kind.json", r#"[{"from": ["a"], "to": ["b"], "kind": "alias"}]"#),
            config.clone(),
            vec![],
            vec!["kind.json", "entry 0", "alias"],
        ),
        (
            write("segment.json", r#"[{"from": ["a", 1], "to": ["b"]}]"#),
            config.clone(),
            vec![],
            vec!["segment.json", "entry 0"],
        ),
        (
            table.clone(),
            config.clone(),
            vec!["--section", "applications..mastodon"],
            vec!["--section", "non-empty keys"],
        ),
        (table.clone(), config.clone(), vec!["--section", "[\"applications\", 2]"], vec!["--section", "JSON list"]),
    ];
    for (renames, config, extra, named) in cases {
        let mut args = vec!["--renames", renames.as_str(), "--config", config.as_str()];
        args.extend(extra.iter().copied());
        let ran = migrate(&args);
        assert_eq!(ran.code, 2, "{args:?}: {}{}", ran.stdout, ran.stderr);
        assert!(ran.stdout.is_empty(), "{args:?}: text output prints nothing on stdout: {}", ran.stdout);
        for word in &named {
            assert!(ran.stderr.contains(word), "{args:?}: the error does not name {word:?}: {}", ran.stderr);
        }
        args.extend(["--output", "json"]);
        let ran = migrate(&args);
        assert_eq!(ran.code, 2, "{args:?}");
        let error = ran.json();
        assert_eq!(error["error"], "invalid_input", "{error}");
        assert!(error["message"].as_str().is_some_and(|m| named.iter().all(|w| m.contains(w))), "{error}");
    }
}

/// A key a renames entry does not have (a misspelt `kind`) is ignored, as a
/// submit's migration ignores it, and named on stderr with its entry; the
/// JSON report on stdout stays the report alone.
#[test]
fn an_unknown_key_in_a_renames_entry_is_named_in_a_warning_and_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let renames = dir.path().join("renames.json");
    std::fs::write(&renames, r#"[{"from": ["a"], "to": ["b"]}, {"from": ["c"], "to": ["d"], "knid": "value"}]"#)
        .unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(&config, r#"{"a": 1, "c": 2}"#).unwrap();
    let (renames, config) = (renames.display().to_string(), config.display().to_string());
    let ran = migrate(&["--renames", &renames, "--config", &config, "--output", "json"]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert_eq!(ran.json()["output"], serde_json::json!({"b": 1, "d": 2}));
    for word in ["warning", "renames.json", "entry 1", "\"knid\""] {
        assert!(ran.stderr.contains(word), "the warning does not name {word:?}: {}", ran.stderr);
    }
    assert!(!ran.stderr.contains("entry 0"), "a known entry was warned about: {}", ran.stderr);
}

/// The same settings that `migrate` ignores make a command that loads them
/// fail, so [`migrate`]'s environment is a real check that it reads none.
#[test]
fn a_migration_reads_no_settings() {
    let out = Command::new(env!("CARGO_BIN_EXE_slipway-worker"))
        .args(["run", "deploy", "--source", "path:/nonexistent", "--config", "/nonexistent.json"])
        .env("SLIPWAY_CONFIG", "/nonexistent/slipway.toml")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/slipway.toml"), "{out:?}");
    let dir = tempfile::tempdir().unwrap();
    let (_, case) = cases().into_iter().next().unwrap();
    let (renames, config) = files(dir.path(), &case);
    let ran = migrate(&["--renames", &renames, "--config", &config, "--output", "json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
}
