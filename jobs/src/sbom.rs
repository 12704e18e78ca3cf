//! A node's CycloneDX SBOM held to its standard before it is stored (seed 000
//! "SBOM of the deployed nodes"; docs/SBOM.md).
//!
//! [`check`] runs, in this order, stopping at the first problem:
//!
//! 1. `bomFormat` is `"CycloneDX"`, and `specVersion` is one of
//!    [`SUPPORTED`] (`1.3` to `1.6`).
//! 2. Every `bom-ref` of the document's components and services is unique
//!    across the whole document: `metadata.component` and its nested
//!    `components`, `components` and their nested `components` at any depth,
//!    `services` and their nested `services` at any depth, met in that order,
//!    each item before what it holds. (Copies of a tool elsewhere, in
//!    `metadata.tools` or an annotation's `annotator`, are not counted:
//!    cdxgen repeats the tool's `bom-ref` there.)
//! 3. In `dependencies`, entry by entry: its `ref` names a `bom-ref` of the
//!    document and no earlier entry has the same `ref` (a ref's entry lists
//!    all it depends on: two could say different things, and no schema
//!    refuses them), then each `dependsOn` entry names a `bom-ref`, and no
//!    entry repeats in one `dependsOn`. (The other lists of refs, 1.6's
//!    `provides` and a composition's `assemblies` and `dependencies`, are
//!    held to unique items by the schema, rule 4.)
//! 4. The official CycloneDX JSON schema of the document's own
//!    `specVersion` (with its SPDX and JSF companions, and `format` checked
//!    as the CycloneDX Python library does), its first error.
//!
//! The rules of 2 and 3 run before the schema so that a problem both catch
//! (the schemas also say `dependsOn` has unique items) is reported naming
//! the ref. The schemas are the files of `jobs/cyclonedx/` (see its README),
//! compiled into the binary, each compiled once, on first use; resolving
//! their `$ref`s never fetches anything.

use jsonschema::{Retrieve, Uri, Validator};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

/// The CycloneDX versions whose documents Slipway checks and stores, oldest first.
pub const SUPPORTED: [&str; 4] = ["1.3", "1.4", "1.5", "1.6"];

/// The schema of each of [`SUPPORTED`], in the same order.
const SCHEMAS: [&str; 4] = [
    include_str!("../cyclonedx/bom-1.3.SNAPSHOT.schema.json"),
    include_str!("../cyclonedx/bom-1.4.SNAPSHOT.schema.json"),
    include_str!("../cyclonedx/bom-1.5.SNAPSHOT.schema.json"),
    include_str!("../cyclonedx/bom-1.6.SNAPSHOT.schema.json"),
];

const SPDX: &str = include_str!("../cyclonedx/spdx.SNAPSHOT.schema.json");
const JSF: &str = include_str!("../cyclonedx/jsf-0.82.SNAPSHOT.schema.json");

/// Where the schemas' `$ref`s to their companions lead (relative to their
/// `$id`, `http://cyclonedx.org/schema/…`), under the package's names and the
/// specification's.
const COMPANIONS: [(&str, &str); 4] = [
    ("http://cyclonedx.org/schema/spdx.SNAPSHOT.schema.json", SPDX),
    ("http://cyclonedx.org/schema/spdx.schema.json", SPDX),
    ("http://cyclonedx.org/schema/jsf-0.82.SNAPSHOT.schema.json", JSF),
    ("http://cyclonedx.org/schema/jsf-0.82.schema.json", JSF),
];

/// Longest schema message kept in a reason, in characters.
const MESSAGE_MAX: usize = 300;

/// Why an SBOM was refused: the first rule it breaks. Its `Display` is the
/// sentence `GET /sbom-list/{id}` shows as the node's reason; a location is a
/// JSON pointer into the document (RFC 6901).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SbomProblem {
    /// `bomFormat` is missing or not `"CycloneDX"`.
    #[error("the SBOM is not a CycloneDX document: its bomFormat is not \"CycloneDX\"")]
    NotCycloneDx,
    /// No `specVersion`.
    #[error("the SBOM has no specVersion: Slipway checks 1.3 to 1.6")]
    MissingSpecVersion,
    /// A `specVersion` Slipway has no schema for (`version`: as written, a
    /// JSON text when it is not a string).
    #[error("specVersion {version} is not supported: Slipway checks 1.3 to 1.6")]
    UnsupportedSpecVersion {
        /// The document's `specVersion`.
        version: String,
    },
    /// Two objects carry the same `bom-ref`.
    #[error(
        "bom-ref \"{bom_ref}\" is used twice, at {first} and at {again}: every bom-ref must be unique in the document"
    )]
    DuplicateBomRef {
        /// The repeated `bom-ref`.
        bom_ref: String,
        /// Where the walk met it first.
        first: String,
        /// Where it met it again.
        again: String,
    },
    /// A `ref` in `dependencies` names no `bom-ref` of the document.
    #[error(
        "dependency ref \"{bom_ref}\" at {at} names no bom-ref of the document: every ref in dependencies must point at an existing bom-ref"
    )]
    DanglingDependencyRef {
        /// The `ref`.
        bom_ref: String,
        /// Its location.
        at: String,
    },
    /// Two entries of `dependencies` have the same `ref`.
    #[error(
        "dependency ref \"{bom_ref}\" is listed twice in dependencies, at {first} and at {again}: each ref may have one entry, which lists all it depends on"
    )]
    DuplicateDependencyRef {
        /// The repeated `ref`.
        bom_ref: String,
        /// The location of its first entry's `ref`.
        first: String,
        /// The location of the entry that repeats it.
        again: String,
    },
    /// A `dependsOn` entry names no `bom-ref` of the document.
    #[error(
        "dependsOn entry \"{bom_ref}\" of \"{of}\" at {at} names no bom-ref of the document: every dependsOn entry must point at an existing bom-ref"
    )]
    DanglingDependsOn {
        /// The entry.
        bom_ref: String,
        /// The `ref` of the dependency whose `dependsOn` holds it.
        of: String,
        /// Its location.
        at: String,
    },
    /// One `dependsOn` lists the same entry twice.
    #[error(
        "dependsOn of \"{of}\" lists \"{bom_ref}\" more than once (again at {at}): no entry may repeat in one dependsOn"
    )]
    RepeatedDependsOn {
        /// The repeated entry.
        bom_ref: String,
        /// The `ref` of the dependency whose `dependsOn` repeats it.
        of: String,
        /// Where it repeats.
        at: String,
    },
    /// The document breaks its version's JSON schema.
    #[error("the SBOM breaks the CycloneDX {version} schema at {at}: {message}")]
    Schema {
        /// The document's `specVersion`.
        version: &'static str,
        /// The location of the schema's first error (`the document root` for the root).
        at: String,
        /// The schema's message, values longer than a scalar masked, at most 300 characters.
        message: String,
    },
}

/// Checks a CycloneDX document by the rules of this module, in their order.
///
/// # Errors
/// The first rule the document breaks, as an [`SbomProblem`].
pub fn check(doc: &Value) -> Result<(), SbomProblem> {
    if doc.get("bomFormat").and_then(Value::as_str) != Some("CycloneDX") {
        return Err(SbomProblem::NotCycloneDx);
    }
    let index = spec_version(doc)?;
    check_refs(doc)?;
    check_schema(doc, index)
}

/// The index in [`SUPPORTED`] of the document's `specVersion`.
fn spec_version(doc: &Value) -> Result<usize, SbomProblem> {
    match doc.get("specVersion") {
        None | Some(Value::Null) => Err(SbomProblem::MissingSpecVersion),
        Some(Value::String(version)) => SUPPORTED
            .iter()
            .position(|s| s == version)
            .ok_or_else(|| SbomProblem::UnsupportedSpecVersion { version: version.clone() }),
        Some(other) => Err(SbomProblem::UnsupportedSpecVersion { version: format!("{other} (not a string)") }),
    }
}

/// Rules 2 and 3: unique `bom-ref`s, and `dependencies` that name them.
fn check_refs(doc: &Value) -> Result<(), SbomProblem> {
    let mut refs = HashMap::new();
    if let Some(component) = doc.pointer("/metadata/component") {
        add_ref(component, "/metadata/component", &mut refs)?;
        collect_refs(component.get("components"), "/metadata/component/components", "components", &mut refs)?;
    }
    collect_refs(doc.get("components"), "/components", "components", &mut refs)?;
    collect_refs(doc.get("services"), "/services", "services", &mut refs)?;

    let Some(dependencies) = doc.get("dependencies").and_then(Value::as_array) else { return Ok(()) };
    let mut entries_of: HashMap<&str, String> = HashMap::new();
    for (i, dependency) in dependencies.iter().enumerate() {
        let Some(of) = dependency.get("ref").and_then(Value::as_str) else { continue };
        let at = format!("/dependencies/{i}/ref");
        if !refs.contains_key(of) {
            return Err(SbomProblem::DanglingDependencyRef { bom_ref: of.to_owned(), at });
        }
        if let Some(first) = entries_of.get(of) {
            return Err(SbomProblem::DuplicateDependencyRef {
                bom_ref: of.to_owned(),
                first: first.clone(),
                again: at,
            });
        }
        entries_of.insert(of, at);
        let Some(entries) = dependency.get("dependsOn").and_then(Value::as_array) else { continue };
        let mut seen = HashSet::new();
        for (j, entry) in entries.iter().enumerate() {
            let Some(entry) = entry.as_str() else { continue };
            let at = format!("/dependencies/{i}/dependsOn/{j}");
            if !refs.contains_key(entry) {
                return Err(SbomProblem::DanglingDependsOn { bom_ref: entry.to_owned(), of: of.to_owned(), at });
            }
            if !seen.insert(entry) {
                return Err(SbomProblem::RepeatedDependsOn { bom_ref: entry.to_owned(), of: of.to_owned(), at });
            }
        }
    }
    Ok(())
}

/// Adds the `bom-ref` of each item of `list` (at `path`) and, depth first,
/// of the items of its own `nested` list (`components` in a component,
/// `services` in a service).
fn collect_refs(
    list: Option<&Value>,
    path: &str,
    nested: &str,
    refs: &mut HashMap<String, String>,
) -> Result<(), SbomProblem> {
    let Some(items) = list.and_then(Value::as_array) else { return Ok(()) };
    for (i, item) in items.iter().enumerate() {
        let at = format!("{path}/{i}");
        add_ref(item, &at, refs)?;
        collect_refs(item.get(nested), &format!("{at}/{nested}"), nested, refs)?;
    }
    Ok(())
}

/// Adds the string `bom-ref` of `item` (at `path`), if it has one; a second
/// one is a problem.
fn add_ref(item: &Value, path: &str, refs: &mut HashMap<String, String>) -> Result<(), SbomProblem> {
    let Some(bom_ref) = item.get("bom-ref").and_then(Value::as_str) else { return Ok(()) };
    let at = format!("{path}/bom-ref");
    if let Some(first) = refs.get(bom_ref) {
        return Err(SbomProblem::DuplicateBomRef { bom_ref: bom_ref.to_owned(), first: first.clone(), again: at });
    }
    refs.insert(bom_ref.to_owned(), at);
    Ok(())
}

/// Rule 4: the schema of `SUPPORTED[index]`, its first error.
fn check_schema(doc: &Value, index: usize) -> Result<(), SbomProblem> {
    let Err(error) = validator(index).validate(doc) else { return Ok(()) };
    let at = match error.instance_path().as_str() {
        "" => "the document root".to_owned(),
        path => path.to_owned(),
    };
    let scalar = !matches!(error.instance().as_ref(), Value::Object(_) | Value::Array(_));
    let message = if scalar { error.to_string() } else { error.masked_with("the value").to_string() };
    let message = match message.char_indices().nth(MESSAGE_MAX) {
        Some((cut, _)) => format!("{}…", &message[..cut]),
        None => message,
    };
    Err(SbomProblem::Schema { version: SUPPORTED[index], at, message })
}

/// The compiled schema of `SUPPORTED[index]`, compiled on first use.
fn validator(index: usize) -> &'static Validator {
    static VALIDATORS: [OnceLock<Validator>; 4] = [OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new()];
    VALIDATORS[index].get_or_init(|| {
        let schema: Value = serde_json::from_str(SCHEMAS[index]).expect("a bundled CycloneDX schema is JSON");
        jsonschema::options()
            .with_retriever(Companions)
            .should_validate_formats(true)
            .build(&schema)
            .expect("a bundled CycloneDX schema compiles")
    })
}

/// Resolves the schemas' `$ref`s to the bundled companions, and refuses any
/// other: nothing is fetched.
struct Companions;

impl Retrieve for Companions {
    fn retrieve(&self, uri: &Uri<String>) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let (_, text) = COMPANIONS
            .iter()
            .find(|(known, _)| *known == uri.as_str())
            .ok_or_else(|| format!("{uri} is not a bundled CycloneDX schema"))?;
        Ok(serde_json::from_str(text)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bundled_schema_compiles_with_its_companions_offline() {
        for index in 0..SUPPORTED.len() {
            let _ = validator(index);
        }
    }
}
