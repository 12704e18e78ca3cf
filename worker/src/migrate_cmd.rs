//! `slipway-worker run migrate`: the rename engine (§5, MG-1…MG-4) on two
//! files, for an operator or a front-end author who wants to see what a
//! renames table does to a stored configuration before a submit does it.
//!
//! It reads a renames table (a source's `renames.json`) and a configuration,
//! migrates it as a submit would ([`slipway_jobs::renames::migrate`]) and
//! prints `{"output": <the migrated value>, "skipped": [{"entry", "reason",
//! "path"?}]}`, the shape of the migration cases in `testdata/cases/migration`.
//! With `--section <path>` the configuration file holds one section's value
//! and only the table's entries inside that section apply, relative to it
//! ([`slipway_jobs::renames::section_renames`], MG-4); `entry` still indexes
//! the table file. Nothing else is read: no settings, no database, no Nix.

use crate::Output;
use serde_json::{json, Value};
use slipway_jobs::renames::{self, Rename, Skipped};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Exit code for input that was refused before anything ran.
const INVALID_INPUT: u8 = 2;

/// The arguments of `run migrate`.
#[derive(clap::Args)]
pub struct MigrateArgs {
    /// The renames table: a JSON file holding a list of {"from": [..], "to": [..], "kind": "option"|"value"}
    /// entries (a module source's renames.json; "kind" may be left out).
    #[arg(long)]
    renames: PathBuf,
    /// The configuration JSON file; with --section, the section's value alone.
    #[arg(long)]
    config: PathBuf,
    /// Migrate one section's value: where the section sits in a whole configuration, dotted
    /// (applications.mastodon) or as a JSON list of keys (["applications","mastodon"]).
    /// Only the table's entries inside it apply, relative to it.
    #[arg(long)]
    section: Option<String>,
    /// Report format: text for people, or the JSON object {"output", "skipped"}.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

/// Runs `run migrate`: exit 0 with the migrated value and the skipped
/// entries (a skip is a result, not a failure), or exit 2 with a sentence
/// naming the file and what is wrong with it (with `--output json` also the
/// error as `{"error": "invalid_input", "message", "details": null}` on
/// stdout).
pub fn run(args: &MigrateArgs) -> ExitCode {
    match migrate_files(args) {
        Ok(migrated) => {
            print(args.output, &migrated);
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("slipway-worker run migrate: {message}");
            if args.output == Output::Json {
                println!("{}", json!({ "error": "invalid_input", "message": message, "details": null }));
            }
            ExitCode::from(INVALID_INPUT)
        }
    }
}

/// A migration's result, with what is needed to explain its skips.
struct Migrated {
    /// The migrated value.
    output: Value,
    /// The skipped entries, `entry` indexing the table file.
    skipped: Vec<Skipped>,
    /// The entries as they applied (relative to the section for a
    /// section), at their index in the table file.
    applied: Vec<Rename>,
    /// How many entries applied (all, or those inside the section).
    count: usize,
    /// The section's path, if one was given.
    section: Option<Vec<String>>,
}

fn migrate_files(args: &MigrateArgs) -> Result<Migrated, String> {
    let section = args.section.as_deref().map(parse_section).transpose()?;
    let table = read_table(&args.renames)?;
    let mut value = read_json(&args.config, "configuration file")?;
    // The entries that apply, each with its index in the table file.
    let (indices, applied): (Vec<usize>, Vec<Rename>) = match &section {
        None => table.iter().cloned().enumerate().collect(),
        Some(path) => (0..table.len())
            .filter_map(|i| renames::section_renames(&table[i..=i], path).pop().map(|entry| (i, entry)))
            .unzip(),
    };
    let skipped = renames::migrate(&mut value, &applied)
        .into_iter()
        .map(|skip| Skipped { entry: indices[skip.entry], ..skip })
        .collect();
    // Each applied entry at its index in the file, so a skip's message names
    // the file's entry with the paths it applied with.
    let mut shown = table;
    for (&i, entry) in indices.iter().zip(&applied) {
        shown[i] = entry.clone();
    }
    Ok(Migrated { output: value, skipped, count: applied.len(), applied: shown, section })
}

fn print(output: Output, migrated: &Migrated) {
    match output {
        Output::Json => {
            let report = json!({ "output": migrated.output, "skipped": migrated.skipped });
            println!("{}", serde_json::to_string_pretty(&report).expect("JSON values serialise"));
        }
        Output::Text => {
            let entries = match migrated.count {
                1 => "1 renames entry".to_owned(),
                n => format!("{n} renames entries"),
            };
            match &migrated.section {
                None => println!("migrated with {entries}:"),
                Some(path) => println!("migrated section {} with the {entries} inside it:", path.join(".")),
            }
            println!("{}", serde_json::to_string_pretty(&migrated.output).expect("JSON values serialise"));
            if migrated.skipped.is_empty() {
                println!("no entry was skipped");
            } else {
                println!("skipped (each value stays where it is):");
                for skip in &migrated.skipped {
                    println!("  {}", skip.message(&migrated.applied));
                }
            }
        }
    }
}

/// `--section`: a JSON list of keys, or keys joined by dots.
fn parse_section(text: &str) -> Result<Vec<String>, String> {
    let path: Vec<String> = if text.trim_start().starts_with('[') {
        serde_json::from_str(text).map_err(|e| format!("--section {text}: not a JSON list of keys: {e}"))?
    } else {
        text.split('.').map(str::to_owned).collect()
    };
    if path.is_empty() || path.iter().any(String::is_empty) {
        return Err(format!(
            "--section {text:?}: a section path is one or more non-empty keys (applications.mastodon, or \
             [\"applications\",\"mastodon\"]); leave --section out to migrate a whole configuration"
        ));
    }
    if path.iter().any(|key| key == renames::WILDCARD) {
        return Err(format!("--section {text:?}: a section path names keys, not {:?}", renames::WILDCARD));
    }
    Ok(path)
}

/// The keys a renames entry has; any other is ignored, as a submit's
/// migration ignores it, and named on stderr (a misspelt `kind`, say).
const ENTRY_KEYS: [&str; 3] = ["from", "to", "kind"];

/// The renames table in `file`, each entry checked on its own so that the
/// error names the entry that is wrong. A key an entry does not have is
/// named in a warning on stderr.
fn read_table(file: &Path) -> Result<Vec<Rename>, String> {
    let shape = r#"a renames table is a JSON list of {"from": [..], "to": [..], "kind": "option"|"value"} entries"#;
    let Value::Array(entries) = read_json(file, "renames file")? else {
        return Err(format!("renames file {}: not a list; {shape}", file.display()));
    };
    entries
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            if let Value::Object(keys) = &entry {
                for key in keys.keys().filter(|k| !ENTRY_KEYS.contains(&k.as_str())) {
                    eprintln!(
                        "slipway-worker run migrate: warning: renames file {}: entry {i}: unknown key {key:?}                          ignored (an entry has \"from\", \"to\" and \"kind\")",
                        file.display()
                    );
                }
            }
            serde_json::from_value(entry)
                .map_err(|e| format!("renames file {}: entry {i}: {e}; {shape}", file.display()))
        })
        .collect()
}

/// The JSON value in `file`; `what` names the file in an error.
fn read_json(file: &Path, what: &str) -> Result<Value, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{what} {}: cannot read it: {e}", file.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{what} {}: not JSON: {e}", file.display()))
}
