//! The SBOM validator (`jobs/src/sbom.rs`, docs/SBOM.md) under a fuzzer.
//!
//! A case is a CycloneDX-shaped document built from the fuzzer's bytes
//! (format, version, a metadata component, nested components and services
//! whose `bom-ref`s come from a small alphabet so that they collide, and
//! `dependencies` naming them), or, now and then, the bytes read as JSON.
//! It checks that:
//!
//! - [`check`] never panics and answers the same twice;
//! - every location a refusal names is a JSON pointer into the document
//!   that leads to the ref it names (each `first`, `again` and `at`), and
//!   a schema problem's location leads to a value of the document;
//! - the reference rules (unique `bom-ref`s, each dependency `ref` and
//!   `dependsOn` entry naming one, no `ref` with two entries, no entry
//!   twice in one `dependsOn`), read by an oracle written here from
//!   docs/SBOM.md, refuse exactly the documents whose answer is a
//!   reference problem, when the format and version are right;
//! - an accepted document is a CycloneDX document of a supported version.
//!
//! Run it with `scripts/fuzz` (docs/TESTING.md).

#![no_main]

use std::collections::HashSet;

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};
use slipway_jobs::sbom::{check, SbomProblem, SUPPORTED};

const REFS: [&str; 6] = ["a", "b", "c", "pkg:nix/hello@2.12", "slipway-node:gateway", ""];
const VERSIONS: [&str; 6] = ["1.3", "1.4", "1.5", "1.6", "1.2", "2.0"];
const MAX_ITEMS: usize = 4;
const MAX_DEPTH: u32 = 3;

struct Case(Value);

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

fn a_ref(u: &mut Unstructured) -> Result<Value> {
    Ok(match u.int_in_range(0..=REFS.len() + 1)? {
        i if i < REFS.len() => json!(REFS[i]),
        i if i == REFS.len() => json!(u.int_in_range(0..=9)?),
        _ => json!(u.arbitrary::<String>()?),
    })
}

/// A component or service, with nested ones of its kind below it.
fn item(u: &mut Unstructured, nested: &str, depth: u32) -> Result<Value> {
    let mut map = Map::new();
    if nested == "components" {
        let kind = ["library", "application", "operating-system", "bogus"][u.int_in_range(0..=3)?];
        map.insert("type".into(), json!(kind));
    }
    if u.ratio(7, 8)? {
        map.insert("name".into(), json!(["hello", "nginx", ""][u.int_in_range(0..=2)?]));
    }
    if u.ratio(5, 6)? {
        map.insert("bom-ref".into(), a_ref(u)?);
    }
    if depth > 0 && u.ratio(1, 3)? {
        map.insert(nested.into(), list(u, nested, depth - 1)?);
    }
    Ok(Value::Object(map))
}

fn list(u: &mut Unstructured, nested: &str, depth: u32) -> Result<Value> {
    let len = u.int_in_range(0..=MAX_ITEMS)?;
    Ok(Value::Array((0..len).map(|_| item(u, nested, depth)).collect::<Result<_>>()?))
}

impl<'a> Arbitrary<'a> for Case {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        if u.ratio(1, 16)? {
            let bytes: &[u8] = u.arbitrary()?;
            return Ok(Case(serde_json::from_slice(bytes).unwrap_or(Value::Null)));
        }
        let mut doc = Map::new();
        if u.ratio(15, 16)? {
            doc.insert("bomFormat".into(), json!(if u.ratio(15, 16)? { "CycloneDX" } else { "SPDX" }));
        }
        match u.int_in_range(0..=VERSIONS.len() + 1)? {
            i if i < VERSIONS.len() => doc.insert("specVersion".into(), json!(VERSIONS[i])),
            i if i == VERSIONS.len() => doc.insert("specVersion".into(), json!(1.5)),
            _ => None,
        };
        doc.insert("version".into(), json!(1));
        if u.ratio(1, 2)? {
            doc.insert("metadata".into(), json!({ "component": item(u, "components", MAX_DEPTH)? }));
        }
        if u.ratio(3, 4)? {
            doc.insert("components".into(), list(u, "components", MAX_DEPTH)?);
        }
        if u.ratio(1, 4)? {
            doc.insert("services".into(), list(u, "services", MAX_DEPTH)?);
        }
        if u.ratio(3, 4)? {
            let len = u.int_in_range(0..=MAX_ITEMS)?;
            let mut dependencies = Vec::new();
            for _ in 0..len {
                let mut entry = Map::new();
                if u.ratio(7, 8)? {
                    entry.insert("ref".into(), a_ref(u)?);
                }
                if u.ratio(3, 4)? {
                    let n = u.int_in_range(0..=MAX_ITEMS)?;
                    entry.insert("dependsOn".into(), Value::Array((0..n).map(|_| a_ref(u)).collect::<Result<_>>()?));
                }
                dependencies.push(Value::Object(entry));
            }
            doc.insert("dependencies".into(), Value::Array(dependencies));
        }
        Ok(Case(Value::Object(doc)))
    }
}

/// Every string `bom-ref` of the places docs/SBOM.md rule 2 walks.
fn bom_refs<'a>(doc: &'a Value, out: &mut Vec<&'a str>) {
    fn walk<'a>(list: Option<&'a Value>, nested: &str, out: &mut Vec<&'a str>) {
        for item in list.and_then(Value::as_array).into_iter().flatten() {
            out.extend(item.get("bom-ref").and_then(Value::as_str));
            walk(item.get(nested), nested, out);
        }
    }
    if let Some(component) = doc.pointer("/metadata/component") {
        out.extend(component.get("bom-ref").and_then(Value::as_str));
        walk(component.get("components"), "components", out);
    }
    walk(doc.get("components"), "components", out);
    walk(doc.get("services"), "services", out);
}

/// Whether the document keeps the reference rules (2 and 3 of docs/SBOM.md).
fn refs_hold(doc: &Value) -> bool {
    let mut refs = Vec::new();
    bom_refs(doc, &mut refs);
    let known: HashSet<&str> = refs.iter().copied().collect();
    if known.len() != refs.len() {
        return false;
    }
    let mut entries = HashSet::new();
    for dependency in doc.get("dependencies").and_then(Value::as_array).into_iter().flatten() {
        let Some(of) = dependency.get("ref").and_then(Value::as_str) else { continue };
        if !known.contains(of) || !entries.insert(of) {
            return false;
        }
        let mut seen = HashSet::new();
        for entry in dependency.get("dependsOn").and_then(Value::as_array).into_iter().flatten() {
            let Some(entry) = entry.as_str() else { continue };
            if !known.contains(entry) || !seen.insert(entry) {
                return false;
            }
        }
    }
    true
}

fn leads_to(doc: &Value, pointer: &str, bom_ref: &str) {
    assert_eq!(doc.pointer(pointer).and_then(Value::as_str), Some(bom_ref), "{pointer} does not lead to {bom_ref:?}");
}

fuzz_target!(|case: Case| {
    let doc = &case.0;
    let answer = check(doc);
    assert_eq!(check(doc), answer, "two checks of one document differ");

    let refs_problem = match &answer {
        Err(SbomProblem::DuplicateBomRef { bom_ref, first, again }) => {
            leads_to(doc, first, bom_ref);
            leads_to(doc, again, bom_ref);
            assert_ne!(first, again);
            true
        }
        Err(SbomProblem::DuplicateDependencyRef { bom_ref, first, again }) => {
            leads_to(doc, first, bom_ref);
            leads_to(doc, again, bom_ref);
            assert_ne!(first, again);
            true
        }
        Err(SbomProblem::DanglingDependencyRef { bom_ref, at })
        | Err(SbomProblem::DanglingDependsOn { bom_ref, at, .. })
        | Err(SbomProblem::RepeatedDependsOn { bom_ref, at, .. }) => {
            leads_to(doc, at, bom_ref);
            true
        }
        Err(SbomProblem::Schema { at, .. }) => {
            assert!(at == "the document root" || doc.pointer(at).is_some(), "{at} leads nowhere");
            false
        }
        _ => false,
    };

    let header_right = doc.get("bomFormat").and_then(Value::as_str) == Some("CycloneDX")
        && doc.get("specVersion").and_then(Value::as_str).is_some_and(|v| SUPPORTED.contains(&v));
    if header_right {
        assert_eq!(refs_problem, !refs_hold(doc), "the reference rules and the answer {answer:?} disagree");
    }
    if answer.is_ok() {
        assert!(header_right, "an accepted document without a right format and version");
    }
});
