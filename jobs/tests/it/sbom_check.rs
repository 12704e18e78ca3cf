//! SBOMs held to their standard (`slipway_jobs::sbom`, docs/SBOM.md): real
//! documents of every supported CycloneDX version pass, among them those
//! other tools wrote and the reference source's own (committed, and built
//! now with Nix); each rule has a document that breaks it, and the reason
//! names the ref (or the schema's path) and the rule. Then the store: the
//! component hash does not depend on the input's key order.

use serde_json::{json, Value};
use slipway_jobs::sbom::{check, SbomProblem, SUPPORTED};
use slipway_jobs::store::sboms::{self, NodeSbom};
use slipway_jobs::store::{Engine, Q};
use slipway_jobs::test_support::{repo, TestDatabase};
use std::path::Path;

fn fixture(name: &str) -> Value {
    let path = repo().join("jobs/tests/sboms").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn reason(doc: &Value) -> String {
    match check(doc) {
        Ok(()) => panic!("the document passed: {doc}"),
        Err(problem) => problem.to_string(),
    }
}

/// A small valid document of `version`: a node with one component holding a
/// nested one, a service, and dependencies between them.
fn small(version: &str) -> Value {
    json!({
        "bomFormat": "CycloneDX",
        "specVersion": version,
        "version": 1,
        "metadata": {"component": {"type": "operating-system", "bom-ref": "node", "name": "web", "version": "1"}},
        "components": [
            {"type": "application", "bom-ref": "app", "name": "app", "version": "1.0",
             "components": [{"type": "library", "bom-ref": "lib", "name": "lib", "version": "2.0"}]},
            {"type": "library", "bom-ref": "libc", "name": "libc", "version": "2.39"}
        ],
        "services": [{"bom-ref": "api", "name": "api", "services": [{"bom-ref": "db", "name": "db"}]}],
        "dependencies": [
            {"ref": "node", "dependsOn": ["app", "api"]},
            {"ref": "app", "dependsOn": ["lib", "libc"]},
            {"ref": "api", "dependsOn": ["db"]},
            {"ref": "libc", "dependsOn": []}
        ]
    })
}

#[test]
fn a_small_document_of_each_supported_version_passes() {
    assert_eq!(SUPPORTED, ["1.3", "1.4", "1.5", "1.6"]);
    for version in SUPPORTED {
        assert_eq!(check(&small(version)), Ok(()), "CycloneDX {version}");
    }
}

#[test]
fn documents_that_cyclonedx_py_wrote_pass_for_each_version_from_1_3_to_1_6() {
    for version in SUPPORTED {
        let doc = fixture(&format!("cyclonedx-py-{version}.cdx.json"));
        assert_eq!(doc["specVersion"], version);
        assert!(doc["components"].as_array().unwrap().len() > 30);
        assert_eq!(check(&doc), Ok(()), "cyclonedx-py {version}");
    }
}

#[test]
fn documents_that_cyclonedx_npm_and_cdxgen_wrote_pass() {
    for (name, version) in [("cyclonedx-npm-1.4.cdx.json", "1.4"), ("cdxgen-1.6.cdx.json", "1.6")] {
        let doc = fixture(name);
        assert_eq!(doc["specVersion"], version, "{name}");
        assert_eq!(check(&doc), Ok(()), "{name}");
    }
}

#[test]
fn the_reference_sources_committed_sboms_pass() {
    for node in ["gateway", "mastodon", "peertube"] {
        let doc = fixture(&format!("reference-{node}.cdx.json"));
        assert_eq!(doc["metadata"]["component"]["name"], node);
        assert_eq!(check(&doc), Ok(()), "{node}");
    }
}

/// Builds each node's SBOM of `examples/demo.json` as the deploy effect does
/// (`deployPlan`, then `nix-store --realise` of its SBOM derivation), so a
/// change to `nix/core/nodes/sbom-builder.sh` that breaks the standard fails here.
#[test]
fn the_reference_sources_sboms_built_now_by_nix_pass() {
    let out = tempfile::tempdir().unwrap();
    let run = |cmd: &mut std::process::Command| {
        let output = cmd.env("NIX_CONFIG", "substituters =").output().unwrap();
        assert!(output.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    };
    let plan = run(std::process::Command::new("nix-instantiate")
        .args(["--eval", "--read-write-mode"])
        .arg(repo().join("nix/core"))
        .args(["-A", "deployPlan", "--arg", "provider", "{ name = \"local\"; }", "--argstr", "configFile"])
        .arg(repo().join("examples/demo.json")));
    let plan = std::fs::read_to_string(plan.trim().trim_matches('"')).unwrap();
    let mut checked = 0;
    for line in plan.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        let (node, sbom_drv) = (fields[0], fields[2]);
        let root = out.path().join(node);
        let built = run(std::process::Command::new("nix-store")
            .args(["--realise", sbom_drv, "--add-root"])
            .arg(&root)
            .arg("--indirect"));
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(Path::new(built.trim())).unwrap()).unwrap();
        assert_eq!(check(&doc), Ok(()), "{node}");
        checked += 1;
    }
    assert_eq!(checked, 3, "{plan}");
}

#[test]
fn a_bom_ref_repeated_in_nested_components_is_refused_naming_the_ref_both_places_and_the_rule() {
    let mut doc = small("1.5");
    doc["components"][1]["components"] = json!([{"type": "library", "bom-ref": "lib", "name": "lib-copy"}]);
    let problem = check(&doc).unwrap_err();
    assert_eq!(
        problem,
        SbomProblem::DuplicateBomRef {
            bom_ref: "lib".into(),
            first: "/components/0/components/0/bom-ref".into(),
            again: "/components/1/components/0/bom-ref".into(),
        }
    );
    assert_eq!(
        problem.to_string(),
        "bom-ref \"lib\" is used twice, at /components/0/components/0/bom-ref and at \
         /components/1/components/0/bom-ref: every bom-ref must be unique in the document"
    );
}

#[test]
fn a_bom_ref_of_the_metadata_component_repeated_deep_in_components_is_refused() {
    let mut doc = small("1.6");
    doc["components"][0]["components"][0]["components"] = json!([{"type": "library", "bom-ref": "node", "name": "x"}]);
    let text = reason(&doc);
    assert!(text.starts_with("bom-ref \"node\" is used twice, at /metadata/component/bom-ref and at "), "{text}");
    assert!(text.contains("/components/0/components/0/components/0/bom-ref"), "{text}");
    assert!(text.ends_with("every bom-ref must be unique in the document"), "{text}");
}

#[test]
fn a_bom_ref_shared_by_a_nested_service_and_a_component_is_refused() {
    let mut doc = small("1.4");
    doc["services"][0]["services"][0]["bom-ref"] = json!("libc");
    assert_eq!(
        check(&doc),
        Err(SbomProblem::DuplicateBomRef {
            bom_ref: "libc".into(),
            first: "/components/1/bom-ref".into(),
            again: "/services/0/services/0/bom-ref".into(),
        })
    );
}

#[test]
fn a_dangling_depends_on_entry_is_refused_naming_the_entry_its_dependency_and_the_rule() {
    let mut doc = small("1.5");
    doc["dependencies"][1]["dependsOn"] = json!(["lib", "openssl"]);
    let problem = check(&doc).unwrap_err();
    assert_eq!(
        problem,
        SbomProblem::DanglingDependsOn {
            bom_ref: "openssl".into(),
            of: "app".into(),
            at: "/dependencies/1/dependsOn/1".into()
        }
    );
    assert_eq!(
        problem.to_string(),
        "dependsOn entry \"openssl\" of \"app\" at /dependencies/1/dependsOn/1 names no bom-ref of the document: \
         every dependsOn entry must point at an existing bom-ref"
    );
}

#[test]
fn a_dangling_dependency_ref_is_refused_naming_the_ref_and_the_rule() {
    let mut doc = small("1.3");
    doc["dependencies"].as_array_mut().unwrap().push(json!({"ref": "ghost", "dependsOn": ["lib"]}));
    let text = reason(&doc);
    assert_eq!(
        text,
        "dependency ref \"ghost\" at /dependencies/4/ref names no bom-ref of the document: \
         every ref in dependencies must point at an existing bom-ref"
    );
}

#[test]
fn a_repeated_depends_on_entry_is_refused_naming_the_entry_before_the_schema_would() {
    // Every schema from 1.3 on also says `uniqueItems`; the rule names the ref.
    for version in SUPPORTED {
        let mut doc = small(version);
        doc["dependencies"][0]["dependsOn"] = json!(["app", "api", "app"]);
        assert_eq!(
            reason(&doc),
            "dependsOn of \"node\" lists \"app\" more than once (again at /dependencies/0/dependsOn/2): \
             no entry may repeat in one dependsOn",
            "CycloneDX {version}"
        );
    }
}

#[test]
fn a_dependency_ref_listed_twice_is_refused_naming_both_places_for_every_version() {
    for version in SUPPORTED {
        // Two entries of one ref, saying different things: no schema refuses it.
        let mut doc = small(version);
        doc["dependencies"].as_array_mut().unwrap().push(json!({"ref": "app", "dependsOn": ["libc"]}));
        let problem = check(&doc).unwrap_err();
        assert_eq!(
            problem,
            SbomProblem::DuplicateDependencyRef {
                bom_ref: "app".into(),
                first: "/dependencies/1/ref".into(),
                again: "/dependencies/4/ref".into()
            },
            "CycloneDX {version}"
        );
        assert_eq!(
            problem.to_string(),
            "dependency ref \"app\" is listed twice in dependencies, at /dependencies/1/ref and at /dependencies/4/ref: \
             each ref may have one entry, which lists all it depends on"
        );
        // The same entry twice (the schemas' uniqueItems): the rule names the ref.
        let mut doc = small(version);
        let again = doc["dependencies"][3].clone();
        doc["dependencies"].as_array_mut().unwrap().push(again);
        assert!(reason(&doc).starts_with("dependency ref \"libc\" is listed twice"), "CycloneDX {version}");
    }
}

#[test]
fn every_other_list_of_refs_that_repeats_one_is_refused_too() {
    // 1.6's `provides`, and a composition's lists, are sets of refs: the
    // schema refuses a repeat (uniqueItems), naming its place.
    let mut doc = small("1.6");
    doc["dependencies"][1]["provides"] = json!(["lib", "lib"]);
    assert!(reason(&doc).contains("/dependencies/1/provides"), "{}", reason(&doc));
    for version in SUPPORTED {
        for list in ["assemblies", "dependencies"] {
            let mut doc = small(version);
            doc["compositions"] = json!([{"aggregate": "complete", list: ["app", "app"]}]);
            assert!(reason(&doc).contains(&format!("/compositions/0/{list}")), "{version} {list}: {}", reason(&doc));
        }
    }
}

#[test]
fn a_dependency_may_name_a_nested_component_and_a_nested_service() {
    let mut doc = small("1.6");
    doc["dependencies"].as_array_mut().unwrap().push(json!({"ref": "lib", "dependsOn": ["db"]}));
    assert_eq!(check(&doc), Ok(()));
}

#[test]
fn a_schema_violation_is_refused_naming_the_version_the_path_and_the_schemas_message() {
    let mut doc = small("1.5");
    doc["components"][0]["components"][0]["type"] = json!("gadget");
    let problem = check(&doc).unwrap_err();
    let SbomProblem::Schema { version, at, message } = &problem else { panic!("{problem:?}") };
    assert_eq!((*version, at.as_str()), ("1.5", "/components/0/components/0/type"));
    assert!(message.contains("\"gadget\""), "{message}");
    assert!(
        problem
            .to_string()
            .starts_with("the SBOM breaks the CycloneDX 1.5 schema at /components/0/components/0/type: "),
        "{problem}"
    );
}

#[test]
fn a_schema_violation_deep_in_a_real_document_names_its_path() {
    let mut doc = fixture("cyclonedx-py-1.6.cdx.json");
    doc["components"][7]["hashes"] = json!([{"alg": "SHA-256", "content": "not hex"}]);
    let text = reason(&doc);
    assert!(text.starts_with("the SBOM breaks the CycloneDX 1.6 schema at /components/7/hashes/0/content: "), "{text}");
}

#[test]
fn a_schema_violation_at_the_root_says_so_and_masks_large_values() {
    let mut doc = small("1.4");
    doc["extra"] = json!({"a": "b"});
    let text = reason(&doc);
    assert!(text.starts_with("the SBOM breaks the CycloneDX 1.4 schema at the document root: "), "{text}");
    assert!(text.contains("extra"), "{text}");

    let mut doc = small("1.6");
    doc["components"][1]["licenses"] = json!([{"nonsense": "x".repeat(2000)}]);
    assert_eq!(
        reason(&doc),
        "the SBOM breaks the CycloneDX 1.6 schema at /components/1/licenses: \
         the value is not valid under any of the schemas listed in the 'oneOf' keyword"
    );

    let mut doc = small("1.6");
    doc["components"][1]["type"] = json!("x".repeat(2000));
    let text = reason(&doc);
    assert!(text.starts_with("the SBOM breaks the CycloneDX 1.6 schema at /components/1/type: \"xxx"), "{text}");
    assert!(text.ends_with("…") && text.chars().count() < 400, "{} characters: {text}", text.chars().count());
}

#[test]
fn each_document_is_checked_against_its_own_versions_schema() {
    // A cryptographic asset is a component type from 1.6 on.
    let mut doc = small("1.6");
    doc["components"][1]["type"] = json!("cryptographic-asset");
    assert_eq!(check(&doc), Ok(()));
    doc["specVersion"] = json!("1.5");
    assert!(reason(&doc).starts_with("the SBOM breaks the CycloneDX 1.5 schema at /components/1/type: "));
    // Services came with 1.2, nested components with 1.0; `services` holds
    // only known keys everywhere: the same document passes every version.
    for version in SUPPORTED {
        assert_eq!(check(&small(version)), Ok(()), "{version}");
    }
}

#[test]
fn an_unknown_spec_version_is_refused_saying_which_versions_are_checked() {
    for version in ["1.2", "1.7", "2.0", ""] {
        let mut doc = small("1.5");
        doc["specVersion"] = json!(version);
        assert_eq!(reason(&doc), format!("specVersion {version} is not supported: Slipway checks 1.3 to 1.6"));
    }
    let mut doc = small("1.5");
    doc["specVersion"] = json!(1.5);
    assert_eq!(reason(&doc), "specVersion 1.5 (not a string) is not supported: Slipway checks 1.3 to 1.6");
}

#[test]
fn a_missing_spec_version_is_refused_saying_so() {
    let mut doc = small("1.5");
    doc.as_object_mut().unwrap().remove("specVersion");
    assert_eq!(check(&doc), Err(SbomProblem::MissingSpecVersion));
    assert_eq!(reason(&doc), "the SBOM has no specVersion: Slipway checks 1.3 to 1.6");
}

#[test]
fn a_document_that_is_not_cyclonedx_is_refused_before_anything_else() {
    for doc in [json!({"spdxVersion": "SPDX-2.3"}), json!({"bomFormat": "SPDX", "specVersion": "1.5"}), json!([])] {
        assert_eq!(check(&doc), Err(SbomProblem::NotCycloneDx), "{doc}");
    }
}

/// The canonical text of a component: keys sorted at every depth, compact,
/// escapes normalised; `bom-ref` included.
#[test]
fn a_components_canonical_text_sorts_keys_at_every_depth_and_keeps_the_bom_ref() {
    let a: Value = serde_json::from_str(
        r#"{"type":"library","name":"z\u00e9","bom-ref":"r","hashes":[{"content":"ab","alg":"SHA-256"}]}"#,
    )
    .unwrap();
    let b: Value = serde_json::from_str(
        "{ \"hashes\" : [ { \"alg\" : \"SHA-256\", \"content\" : \"ab\" } ], \"bom-ref\": \"r\", \"name\": \"zé\", \"type\": \"library\" }",
    )
    .unwrap();
    let text = sboms::canonical_text(&a);
    assert_eq!(text, r#"{"bom-ref":"r","hashes":[{"alg":"SHA-256","content":"ab"}],"name":"zé","type":"library"}"#);
    assert_eq!(sboms::canonical_text(&b), text);
}

/// With `serde_json`'s default sorted map, the canonical text is the text
/// stored before it existed: no stored hash changes.
#[test]
fn the_canonical_text_of_real_components_is_the_text_stored_before() {
    for name in ["cyclonedx-py-1.6.cdx.json", "cdxgen-1.6.cdx.json", "reference-mastodon.cdx.json"] {
        for component in fixture(name)["components"].as_array().unwrap() {
            assert_eq!(sboms::canonical_text(component), component.to_string(), "{name}");
        }
    }
}

async fn the_same_component_written_with_its_keys_in_another_order_is_stored_once(engine: Engine) {
    let test_db = TestDatabase::new(engine).await;
    let db = match engine {
        Engine::Sqlite => slipway_jobs::store::open_sqlite(&test_db.dir.path().join("slipway.db")).await.unwrap(),
        Engine::Postgres => slipway_jobs::store::open_postgres(&test_db.url).await.unwrap(),
    };
    let mut conn = db.acquire().await.unwrap();
    Q::new(
        "INSERT INTO deployments (id, configuration, instances, version, created_at, updated_at)
         VALUES ('d', '{}', '[]', 0, 0, 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let one: Value = serde_json::from_str(
        r#"{"bomFormat":"CycloneDX","specVersion":"1.5","components":[{"type":"library","bom-ref":"r","name":"x"}]}"#,
    )
    .unwrap();
    let two: Value = serde_json::from_str(
        r#"{"components":[{"name":"x","bom-ref":"r","type":"library"}],"specVersion":"1.5","bomFormat":"CycloneDX"}"#,
    )
    .unwrap();
    let nodes = [("a".to_owned(), NodeSbom::Ready(one)), ("b".to_owned(), NodeSbom::Ready(two))];
    sboms::replace(&mut conn, "d", "build", &nodes, 1).await.unwrap();
    assert_eq!(sboms::component_count(&mut conn).await.unwrap(), 1);
    let row = Q::new(
        "SELECT c.id AS id, c.hash AS hash, CAST(k.codec AS BIGINT) AS codec, k.body AS body
         FROM sbom_components c JOIN sbom_component_chunks k ON k.id = c.chunk",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    let (id, text) = (row.int("id").unwrap(), r#"{"bom-ref":"r","name":"x","type":"library"}"#);
    let body = sboms::chunk_text(row.int("codec").unwrap(), row.bytes("body").unwrap()).unwrap();
    assert_eq!(body, format!("{id} {text}"), "its chunk holds its one canonical text");
    use sha2::Digest;
    assert_eq!(row.text("hash").unwrap(), hex::encode(sha2::Sha256::digest(text.as_bytes())));
}

slipway_jobs::on_both_engines!(the_same_component_written_with_its_keys_in_another_order_is_stored_once);
