//! The rename engine under a fuzzer: migrate, then validate, with an
//! arbitrary renames table and an arbitrary configuration.
//!
//! From the fuzzer's bytes it builds a table (paths of literal keys and `*`,
//! both kinds) and a JSON configuration whose keys come mostly from a small
//! alphabet shared with the table, so that paths meet, overlap and collide.
//! It then checks the rules of `jobs/src/renames.rs` (MG-1…MG-3):
//!
//! - neither [`migrate`] nor [`Checker::check`] (the built-in source's
//!   schema and renames, from `api/default-source/`) panics, nor does
//!   [`Skipped::message`] for any skipped entry;
//! - migrating the output again changes nothing and reports the same
//!   skipped entries (MG-2: the output is a fixed point, and the skips are
//!   those that cannot apply to it);
//! - a move neither loses nor copies a value: the scalars of the input and
//!   of the output are the same multiset;
//! - when no `from` of the table names anything in the configuration, the
//!   output is the input and nothing is skipped.
//!
//! Run it with `scripts/fuzz` (docs/TESTING.md).

#![no_main]

use std::sync::OnceLock;

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use slipway_jobs::renames::{migrate, Rename, RenameKind, Skipped, WILDCARD};
use slipway_jobs::source::outputs::SourceOutputs;
use slipway_jobs::validate::Checker;

/// Keys of tables and configurations: short ones that collide often, the
/// built-in source's own names, a literal `*` key, an empty key, a key
/// with a dot, and a list index written as a key.
const KEYS: [&str; 16] = [
    "a",
    "b",
    "c",
    "d",
    "applications",
    "mastodon",
    "peertube",
    "domain",
    "domainName",
    "subdomain",
    "enable",
    "moderators",
    "*",
    "",
    "x.y",
    "0",
];

const MAX_ENTRIES: usize = 8;
const MAX_PATH: usize = 4;
const MAX_DEPTH: u32 = 5;
const MAX_CHILDREN: usize = 5;

/// One fuzz case: a table and the configuration it migrates.
struct Case {
    table: Vec<Rename>,
    configuration: Value,
}

/// Printed by `cargo fuzz fmt` and on a crash: the two JSON documents, ready
/// to paste into a regression test.
impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let table = serde_json::to_string(&self.table).map_err(|_| std::fmt::Error)?;
        writeln!(f, "renames: {table}")?;
        write!(f, "configuration: {}", self.configuration)
    }
}

fn key(u: &mut Unstructured) -> Result<String> {
    // Mostly the alphabet; now and then any short text.
    let pick = u.int_in_range(0..=KEYS.len() as u8 + 1)? as usize;
    match KEYS.get(pick) {
        Some(known) => Ok((*known).to_owned()),
        None => {
            let len = u.int_in_range(0..=6)?;
            (0..len).map(|_| u.arbitrary::<char>()).collect()
        }
    }
}

fn path(u: &mut Unstructured) -> Result<Vec<String>> {
    let len = u.int_in_range(0..=MAX_PATH)?;
    (0..len).map(|_| if u.ratio(1, 4)? { Ok(WILDCARD.to_owned()) } else { key(u) }).collect()
}

fn value(u: &mut Unstructured, depth: u32) -> Result<Value> {
    let kinds = if depth == 0 { 4 } else { 6 };
    Ok(match u.int_in_range(0..=kinds - 1)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::from(u.int_in_range(-3i64..=300)?),
        3 => Value::String(key(u)?),
        4 => {
            let len = u.int_in_range(0..=MAX_CHILDREN)?;
            Value::Array((0..len).map(|_| value(u, depth - 1)).collect::<Result<_>>()?)
        }
        _ => Value::Object(object(u, depth - 1)?),
    })
}

fn object(u: &mut Unstructured, depth: u32) -> Result<Map<String, Value>> {
    let len = u.int_in_range(0..=MAX_CHILDREN)?;
    let mut map = Map::new();
    for _ in 0..len {
        let k = key(u)?;
        map.insert(k, value(u, depth)?);
    }
    Ok(map)
}

impl<'a> Arbitrary<'a> for Case {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let entries = u.int_in_range(0..=MAX_ENTRIES)?;
        let table = (0..entries)
            .map(|_| {
                let (from, to) = (path(u)?, path(u)?);
                let kind = if u.arbitrary()? { RenameKind::Value } else { RenameKind::Option };
                Ok(Rename { from, to, kind })
            })
            .collect::<Result<_>>()?;
        // A configuration is an object (the api refuses anything else).
        let configuration = Value::Object(object(u, MAX_DEPTH)?);
        Ok(Case { table, configuration })
    }
}

/// The built-in source's outputs, compiled once per process.
fn checker() -> &'static Checker {
    static CHECKER: OnceLock<Checker> = OnceLock::new();
    CHECKER.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../api/default-source");
        let outputs = SourceOutputs::read_dir(dir.as_ref()).expect("api/default-source holds the built-in outputs");
        Checker::new(outputs).expect("the built-in schema compiles")
    })
}

/// Whether `pattern` names a value in `value`, read as the module doc of
/// `migrate` says, independently of the engine: a literal segment is an
/// object key; `*` is every key of an object, or every item of a list when
/// it is not the last segment.
fn names_something(value: &Value, pattern: &[String]) -> bool {
    let Some((segment, rest)) = pattern.split_first() else {
        return true;
    };
    match value {
        Value::Object(map) if segment == WILDCARD => map.values().any(|child| names_something(child, rest)),
        Value::Object(map) => map.get(segment).is_some_and(|child| names_something(child, rest)),
        Value::Array(items) if segment == WILDCARD && !rest.is_empty() => {
            items.iter().any(|child| names_something(child, rest))
        }
        _ => false,
    }
}

/// Every scalar under `value`, as JSON text.
fn scalars(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => map.values().for_each(|child| scalars(child, out)),
        Value::Array(items) => items.iter().for_each(|child| scalars(child, out)),
        other => out.push(other.to_string()),
    }
}

fn sorted_scalars(value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    scalars(value, &mut out);
    out.sort();
    out
}

fuzz_target!(|case: Case| {
    let Case { table, configuration } = &case;

    let mut output = configuration.clone();
    let skipped: Vec<Skipped> = migrate(&mut output, table);
    for s in &skipped {
        assert!(!s.message(table).is_empty());
    }

    let mut again = output.clone();
    let skipped_again = migrate(&mut again, table);
    assert_eq!(again, output, "migrating the output again changed it");
    assert_eq!(skipped_again, skipped, "migrating the output again skipped other entries");

    assert_eq!(sorted_scalars(configuration), sorted_scalars(&output), "a move lost or copied a value");

    let absent = table.iter().all(|r| r.from.is_empty() || !names_something(configuration, &r.from));
    if absent {
        assert_eq!(&output, configuration, "no from is present, yet the configuration changed");
        assert!(skipped.is_empty(), "no from is present, yet entries were skipped: {skipped:?}");
    }

    // Validation of the migrated output must answer, never panic.
    let _ = checker().check(output, Some("secret values are refused"));
});
