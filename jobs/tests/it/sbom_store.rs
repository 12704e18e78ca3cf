//! The SBOM store's layout (docs/SBOM.md "How a document is stored"), on
//! both engines: a document comes back as the JSON value accepted, keys in
//! ascending order; components and dependency entries shared by nodes and
//! deployments are stored once; what no SBOM uses any more is deleted; and
//! migrations 0013 and 0014 move SBOMs stored in the layouts before them,
//! chunks written as text before migration 0017 are read beside compressed
//! ones, and a node's row names the chunks holding its pieces (migration
//! 0018; rows written before are read through the pieces' rows).

use serde_json::{json, Value};
use slipway_jobs::store::db::Conn;
use slipway_jobs::store::sboms::{self, NodeSbom, SbomText};
use slipway_jobs::store::{Db, Engine, Q};
use slipway_jobs::test_support::{migrated_before, TestDatabase};
use std::time::Duration;

async fn open(engine: Engine, test_db: &TestDatabase) -> Db {
    match engine {
        Engine::Sqlite => slipway_jobs::store::open_sqlite(&test_db.dir.path().join("slipway.db")).await.unwrap(),
        Engine::Postgres => slipway_jobs::store::open_postgres(&test_db.url).await.unwrap(),
    }
}

async fn add_deployments(conn: &mut Conn, ids: &[&str]) {
    for id in ids {
        Q::new(
            "INSERT INTO deployments (id, configuration, instances, version, created_at, updated_at)
             VALUES ($1, '{}', '[]', 0, 0, 0)",
        )
        .text(*id)
        .execute(conn)
        .await
        .unwrap();
    }
}

async fn count(conn: &mut Conn, table: &str) -> i64 {
    Q::new(format!("SELECT COUNT(*) AS n FROM {table}")).fetch_one(conn).await.unwrap().int("n").unwrap()
}

/// The names of the components whose texts the chunks hold, sorted: every
/// chunk line is `<id> <canonical text>`, and each id is a stored component.
async fn stored_component_names(conn: &mut Conn) -> Vec<String> {
    let ids: std::collections::BTreeSet<i64> = Q::new("SELECT id FROM sbom_components")
        .fetch_all(conn)
        .await
        .unwrap()
        .iter()
        .map(|r| r.int("id").unwrap())
        .collect();
    let mut names = Vec::new();
    let mut listed = std::collections::BTreeSet::new();
    for row in
        Q::new("SELECT CAST(codec AS BIGINT) AS codec, body FROM sbom_component_chunks").fetch_all(conn).await.unwrap()
    {
        let lines = sboms::chunk_text(row.int("codec").unwrap(), row.bytes("body").unwrap()).unwrap();
        for line in lines.split('\n') {
            let (id, text) = line.split_once(' ').unwrap();
            listed.insert(id.parse::<i64>().unwrap());
            names.push(serde_json::from_str::<Value>(text).unwrap()["name"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(listed, ids, "the chunks hold the text of every stored component and of nothing else");
    names.sort();
    names
}

fn component(name: &str) -> Value {
    json!({"type": "library", "bom-ref": format!("/nix/store/{name}"), "name": name, "version": "1.0",
           "properties": [{"value": format!("/nix/store/{name}"), "name": "nix:store_path"}]})
}

/// A node's document: its own metadata, `names` as components, and a
/// dependencies entry per component naming the one before it.
fn node_document(node: &str, names: &[&str]) -> Value {
    let mut dependencies =
        vec![json!({"ref": format!("node:{node}"), "dependsOn": [format!("/nix/store/{}", names[0])]})];
    for (i, name) in names.iter().enumerate() {
        let depends: Vec<String> = names[..i].iter().take(1).map(|n| format!("/nix/store/{n}")).collect();
        dependencies.push(json!({"ref": format!("/nix/store/{name}"), "dependsOn": depends}));
    }
    json!({
        "specVersion": "1.5", "bomFormat": "CycloneDX", "version": 1,
        "metadata": {"component": {"type": "operating-system", "name": node, "bom-ref": format!("node:{node}")}},
        "components": names.iter().map(|n| component(n)).collect::<Vec<_>>(),
        "dependencies": dependencies,
    })
}

async fn text_of(conn: &mut Conn, deployment: &str, node: &str) -> String {
    match sboms::document_text(conn, deployment, node).await.unwrap() {
        Some(SbomText::Ready(text)) => text,
        other => panic!("no document for {deployment}/{node}: {other:?}"),
    }
}

async fn a_document_comes_back_as_the_json_value_accepted_with_its_keys_in_ascending_order(engine: Engine) {
    let test_db = TestDatabase::new(engine).await;
    let db = open(engine, &test_db).await;
    let mut conn = db.acquire().await.unwrap();
    add_deployments(&mut conn, &["d"]).await;
    // Keys out of order at every depth, a key between `components` and
    // `dependencies` (`compositions`), non-ASCII text, numbers, and a
    // component listed twice.
    let accepted: Value = serde_json::from_str(
        r#"{"version":1,"specVersion":"1.5","serialNumber":"urn:uuid:3e671687-395b-41f5-a30f-a58921a69b79",
            "metadata":{"timestamp":"2026-01-01T00:00:00Z","component":{"type":"application","name":"zé","bom-ref":"app"}},
            "dependencies":[{"ref":"app","dependsOn":["b","a"]},{"ref":"a"},{"ref":"b","dependsOn":[]}],
            "compositions":[{"aggregate":"complete","assemblies":["a"]}],
            "components":[{"version":"2","name":"b","type":"library","bom-ref":"b","hashes":[{"content":"00","alg":"SHA-256"}]},
                          {"type":"library","bom-ref":"a","name":"a\u0001","properties":[{"name":"n","value":"1.5e3"}]},
                          {"version":"2","name":"b","type":"library","bom-ref":"b","hashes":[{"content":"00","alg":"SHA-256"}]}],
            "bomFormat":"CycloneDX","services":[{"name":"s","bom-ref":"s"}]}"#,
    )
    .unwrap();
    let nodes = [("n".to_owned(), NodeSbom::Ready(accepted.clone()))];
    sboms::replace(&mut conn, "d", "build", &nodes, 1).await.unwrap();

    let text = text_of(&mut conn, "d", "n").await;
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), accepted);
    assert_eq!(text, sboms::canonical_text(&accepted), "compact, keys in ascending byte order at every depth");
    let Some(NodeSbom::Ready(value)) = sboms::document(&mut conn, "d", "n").await.unwrap() else { panic!() };
    assert_eq!(value, accepted);
    assert_eq!(count(&mut conn, "sbom_components").await, 2, "the component listed twice is stored once");
}

slipway_jobs::on_both_engines!(a_document_comes_back_as_the_json_value_accepted_with_its_keys_in_ascending_order);

async fn a_document_without_components_or_dependencies_comes_back_without_them(engine: Engine) {
    let test_db = TestDatabase::new(engine).await;
    let db = open(engine, &test_db).await;
    let mut conn = db.acquire().await.unwrap();
    add_deployments(&mut conn, &["d"]).await;
    let bare = json!({"bomFormat": "CycloneDX", "specVersion": "1.6", "version": 1});
    let empty = json!({"bomFormat": "CycloneDX", "specVersion": "1.6", "components": [], "dependencies": []});
    let nodes = [
        ("bare".to_owned(), NodeSbom::Ready(bare.clone())),
        ("empty".to_owned(), NodeSbom::Ready(empty.clone())),
        ("gone".to_owned(), NodeSbom::Unavailable("the deploy wrote no SBOM for this node".into())),
    ];
    sboms::replace(&mut conn, "d", "build", &nodes, 1).await.unwrap();
    assert_eq!(text_of(&mut conn, "d", "bare").await, sboms::canonical_text(&bare));
    assert_eq!(text_of(&mut conn, "d", "empty").await, sboms::canonical_text(&empty));
    assert_eq!(
        sboms::document_text(&mut conn, "d", "gone").await.unwrap(),
        Some(SbomText::Unavailable("the deploy wrote no SBOM for this node".into()))
    );
    assert_eq!(sboms::document_text(&mut conn, "d", "nobody").await.unwrap(), None);
}

slipway_jobs::on_both_engines!(a_document_without_components_or_dependencies_comes_back_without_them);

async fn components_and_dependency_entries_shared_across_nodes_and_deployments_are_stored_once(engine: Engine) {
    let test_db = TestDatabase::new(engine).await;
    let db = open(engine, &test_db).await;
    let mut conn = db.acquire().await.unwrap();
    add_deployments(&mut conn, &["one", "two"]).await;
    let a = node_document("a", &["glibc", "openssl", "a-only"]);
    let b = node_document("b", &["glibc", "openssl", "b-only"]);
    let c = node_document("c", &["glibc", "openssl", "c-only"]);
    let one = [("a".to_owned(), NodeSbom::Ready(a.clone())), ("b".to_owned(), NodeSbom::Ready(b.clone()))];
    sboms::replace(&mut conn, "one", "build-1", &one, 1).await.unwrap();
    sboms::replace(&mut conn, "two", "build-2", &[("c".to_owned(), NodeSbom::Ready(c.clone()))], 1).await.unwrap();

    // glibc, openssl and each node's own component.
    assert_eq!(sboms::component_count(&mut conn).await.unwrap(), 5);
    // The entries of glibc and openssl are shared; each node's own entry and
    // the entry of its own component are not.
    assert_eq!(count(&mut conn, "sbom_dependencies").await, 2 + 3 * 2);
    for (deployment, node, doc) in [("one", "a", &a), ("one", "b", &b), ("two", "c", &c)] {
        assert_eq!(text_of(&mut conn, deployment, node).await, sboms::canonical_text(doc));
    }
}

slipway_jobs::on_both_engines!(components_and_dependency_entries_shared_across_nodes_and_deployments_are_stored_once);

async fn what_no_sbom_uses_any_more_is_deleted_after_replace_and_remove_all(engine: Engine) {
    let test_db = TestDatabase::new(engine).await;
    let db = open(engine, &test_db).await;
    let mut conn = db.acquire().await.unwrap();
    add_deployments(&mut conn, &["one", "two"]).await;
    let a = node_document("a", &["glibc", "openssl", "a-only"]);
    let b = node_document("b", &["glibc", "openssl", "b-only"]);
    let one = [("a".to_owned(), NodeSbom::Ready(a.clone())), ("b".to_owned(), NodeSbom::Ready(b.clone()))];
    sboms::replace(&mut conn, "one", "build-1", &one, 1).await.unwrap();
    sboms::replace(&mut conn, "two", "build-2", &[("a".to_owned(), NodeSbom::Ready(a.clone()))], 1).await.unwrap();
    assert_eq!(sboms::component_count(&mut conn).await.unwrap(), 4);

    // Node b leaves deployment one, a gets a new openssl: b-only and the old
    // openssl were used by nothing else; deployment two still uses the rest.
    let a2 = node_document("a", &["glibc", "openssl-3", "a-only"]);
    sboms::replace(&mut conn, "one", "build-3", &[("a".to_owned(), NodeSbom::Ready(a2.clone()))], 2).await.unwrap();
    assert_eq!(stored_component_names(&mut conn).await, ["a-only", "glibc", "openssl", "openssl-3"]);
    assert_eq!(text_of(&mut conn, "one", "a").await, sboms::canonical_text(&a2));
    assert_eq!(text_of(&mut conn, "two", "a").await, sboms::canonical_text(&a));

    // Storing the same SBOM again keeps what it uses.
    sboms::replace(&mut conn, "one", "build-4", &[("a".to_owned(), NodeSbom::Ready(a2.clone()))], 3).await.unwrap();
    assert_eq!(sboms::component_count(&mut conn).await.unwrap(), 4);
    assert_eq!(text_of(&mut conn, "one", "a").await, sboms::canonical_text(&a2));

    sboms::remove_all(&mut conn, "two").await.unwrap();
    assert_eq!(sboms::component_count(&mut conn).await.unwrap(), 3, "openssl went with deployment two");
    // Its text left the chunk it shared with glibc and a-only.
    assert_eq!(stored_component_names(&mut conn).await, ["a-only", "glibc", "openssl-3"]);
    assert_eq!(text_of(&mut conn, "one", "a").await, sboms::canonical_text(&a2));
    sboms::remove_all(&mut conn, "one").await.unwrap();
    assert_eq!(sboms::component_count(&mut conn).await.unwrap(), 0);
    for table in ["sbom_component_chunks", "sbom_dependencies", "sbom_dependency_chunks", "sboms"] {
        assert_eq!(count(&mut conn, table).await, 0, "{table} is empty once no SBOM is left");
    }
}

slipway_jobs::on_both_engines!(what_no_sbom_uses_any_more_is_deleted_after_replace_and_remove_all);

/// A database at migration 0012 with SBOMs in the old layout (a row per
/// component of each node; the rest, `dependencies` included, in
/// `sboms.document`), then migrated to the current one.
async fn sboms_stored_before_migration_0013_come_back_unchanged_after_it(engine: Engine) {
    let test_db = TestDatabase::new(engine).await;
    let a = node_document("a", &["glibc", "openssl", "a-only"]);
    let b = node_document("b", &["openssl", "glibc", "b-only"]);
    let old_rows = |doc: &Value| {
        let mut rest = doc.clone();
        let components = rest.as_object_mut().unwrap().remove("components").unwrap();
        let rows: Vec<(String, String)> = components
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                use sha2::Digest;
                let text = sboms::canonical_text(c);
                (hex::encode(sha2::Sha256::digest(text.as_bytes())), text)
            })
            .collect();
        (rest.to_string(), rows)
    };
    {
        let db = migrated_before(engine, &test_db, 13).await;
        let mut conn = db.acquire().await.unwrap();
        add_deployments(&mut conn, &["d"]).await;
        for (node, doc) in [("a", &a), ("b", &b)] {
            let (rest, rows) = old_rows(doc);
            Q::new(
                "INSERT INTO sboms (deployment_id, node, build_id, status, reason, document, created_at)
                 VALUES ('d', $1, 'old', 'ready', NULL, $2, 1)",
            )
            .text(node)
            .text(rest)
            .execute(&mut conn)
            .await
            .unwrap();
            for (position, (hash, text)) in rows.into_iter().enumerate() {
                Q::new("INSERT INTO sbom_components (hash, component) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING")
                    .text(&hash)
                    .text(text)
                    .execute(&mut conn)
                    .await
                    .unwrap();
                Q::new(
                    "INSERT INTO sbom_node_components (deployment_id, node, position, hash) VALUES ('d', $1, $2, $3)",
                )
                .text(node)
                .int(position as i64)
                .text(hash)
                .execute(&mut conn)
                .await
                .unwrap();
            }
        }
        drop(conn);
        db.close().await;
    }

    let db = open(engine, &test_db).await;
    let mut conn = db.acquire().await.unwrap();
    assert_eq!(sboms::component_count(&mut conn).await.unwrap(), 4);
    assert_eq!(text_of(&mut conn, "d", "a").await, sboms::canonical_text(&a));
    assert_eq!(text_of(&mut conn, "d", "b").await, sboms::canonical_text(&b));
    // Use counts came across: b's next deploy drops b-only and nothing else.
    let b2 = node_document("b", &["openssl", "glibc"]);
    let nodes = [("a".to_owned(), NodeSbom::Ready(a.clone())), ("b".to_owned(), NodeSbom::Ready(b2.clone()))];
    sboms::replace(&mut conn, "d", "new", &nodes, 2).await.unwrap();
    assert_eq!(sboms::component_count(&mut conn).await.unwrap(), 3);
    assert_eq!(text_of(&mut conn, "d", "b").await, sboms::canonical_text(&b2));
    sboms::remove_all(&mut conn, "d").await.unwrap();
    assert_eq!(sboms::component_count(&mut conn).await.unwrap(), 0);
}

slipway_jobs::on_both_engines!(sboms_stored_before_migration_0013_come_back_unchanged_after_it);

/// A database at migration 0013 with SBOMs in its layout (each piece's text
/// in its own row; ids with gaps, lists with runs and without, one node's
/// dependencies still in its rest), then migrated to the chunked layout.
async fn sboms_stored_before_migration_0014_come_back_unchanged_after_it(engine: Engine) {
    use sha2::Digest;
    let test_db = TestDatabase::new(engine).await;
    let names: Vec<String> = (0..150).map(|i| format!("pkg{i}")).collect();
    let a_names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut b_names: Vec<&str> = a_names[..100].iter().rev().copied().collect();
    b_names.extend(["b-1", "b-2", "b-3"]);
    let a = node_document("a", &a_names);
    let b = node_document("b", &b_names);
    // Component ids with gaps (1-100, 201-250, then b's own 300-302), as
    // 0013 may leave them after deletions; dependency entries 1-151 (a's).
    let component_id = |name: &str| -> i64 {
        match a_names.iter().position(|n| *n == name) {
            Some(i) if i < 100 => i as i64 + 1,
            Some(i) => i as i64 + 101,
            None => 300 + b_names.iter().position(|n| *n == name).unwrap() as i64 - 100,
        }
    };
    let hashed = |v: &Value| {
        let text = sboms::canonical_text(v);
        (hex::encode(sha2::Sha256::digest(text.as_bytes())), text)
    };
    {
        let db = migrated_before(engine, &test_db, 14).await;
        let mut conn = db.acquire().await.unwrap();
        add_deployments(&mut conn, &["d"]).await;
        let mut stored = std::collections::BTreeSet::new();
        for (doc, names) in [(&a, &a_names), (&b, &b_names)] {
            for (component, name) in doc["components"].as_array().unwrap().iter().zip(names.iter()) {
                if stored.insert(component_id(name)) {
                    let (hash, text) = hashed(component);
                    Q::new("INSERT INTO sbom_components (id, hash, component) VALUES ($1, $2, $3)")
                        .int(component_id(name))
                        .text(hash)
                        .text(text)
                        .execute(&mut conn)
                        .await
                        .unwrap();
                }
            }
        }
        for (i, entry) in a["dependencies"].as_array().unwrap().iter().enumerate() {
            let (hash, text) = hashed(entry);
            Q::new("INSERT INTO sbom_dependencies (id, hash, entry) VALUES ($1, $2, $3)")
                .int(i as i64 + 1)
                .text(hash)
                .text(text)
                .execute(&mut conn)
                .await
                .unwrap();
        }
        let a_rest = {
            let mut rest = a.clone();
            rest.as_object_mut().unwrap().remove("components");
            rest.as_object_mut().unwrap().remove("dependencies");
            sboms::canonical_text(&rest)
        };
        let b_rest = {
            let mut rest = b.clone();
            rest.as_object_mut().unwrap().remove("components");
            sboms::canonical_text(&rest)
        };
        let a_components: Vec<i64> = a_names.iter().map(|n| component_id(n)).collect();
        let b_components: Vec<i64> = b_names.iter().map(|n| component_id(n)).collect();
        let a_dependencies: Vec<i64> = (1..=151).collect();
        for (node, rest, components, dependencies) in [
            ("a", a_rest, sboms::encode_ids(&a_components), Some(sboms::encode_ids(&a_dependencies))),
            ("b", b_rest, sboms::encode_ids(&b_components), None),
        ] {
            Q::new(
                "INSERT INTO sboms (deployment_id, node, build_id, status, reason, document, components, dependencies,
                                    created_at)
                 VALUES ('d', $1, 'old', 'ready', NULL, $2, $3, $4, 1)",
            )
            .text(node)
            .text(rest)
            .text(components)
            .opt_text(dependencies)
            .execute(&mut conn)
            .await
            .unwrap();
        }
        drop(conn);
        db.close().await;
    }

    let db = open(engine, &test_db).await;
    let mut conn = db.acquire().await.unwrap();
    assert_eq!(sboms::component_count(&mut conn).await.unwrap(), 153);
    // 64 pieces to a chunk in id order: ids 1-64, 65-128 (of which 65-100),
    // 193-256 (201-250) and 257-320 (300-302).
    assert_eq!(count(&mut conn, "sbom_component_chunks").await, 4);
    assert_eq!(count(&mut conn, "sbom_dependency_chunks").await, 3);
    assert_eq!(text_of(&mut conn, "d", "a").await, sboms::canonical_text(&a));
    assert_eq!(text_of(&mut conn, "d", "b").await, sboms::canonical_text(&b));

    // Node a leaves: the 50 components only it named go, with their chunk;
    // b's next deploy stores its dependencies shared and drops b-3.
    let b2 = node_document("b", &b_names[..102]);
    sboms::replace(&mut conn, "d", "new", &[("b".to_owned(), NodeSbom::Ready(b2.clone()))], 2).await.unwrap();
    assert_eq!(sboms::component_count(&mut conn).await.unwrap(), 102);
    assert_eq!(count(&mut conn, "sbom_component_chunks").await, 3, "the chunk of ids 193-256 held only a's");
    assert_eq!(text_of(&mut conn, "d", "b").await, sboms::canonical_text(&b2));
    sboms::remove_all(&mut conn, "d").await.unwrap();
    for table in ["sbom_components", "sbom_component_chunks", "sbom_dependencies", "sbom_dependency_chunks"] {
        assert_eq!(count(&mut conn, table).await, 0, "{table} is empty once no SBOM is left");
    }
}

slipway_jobs::on_both_engines!(sboms_stored_before_migration_0014_come_back_unchanged_after_it);

/// Chunks close at 64 pieces or before 32 KiB of lines on SQLite, 8 KiB on
/// PostgreSQL; a piece larger than that
/// gets a chunk of its own. A node that uses some of another node's pieces,
/// in another order, reads their chunks and leaves the rest out.
async fn a_document_spread_over_many_chunks_comes_back_as_accepted(engine: Engine) {
    let test_db = TestDatabase::new(engine).await;
    let db = open(engine, &test_db).await;
    let mut conn = db.acquire().await.unwrap();
    add_deployments(&mut conn, &["d"]).await;
    let names: Vec<String> = (0..300).map(|i| format!("pkg{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut big = node_document("big", &names);
    // One component of 40 KiB, and a dependencies list that is not one
    // entry per component (two entries fewer).
    big["components"][7]["description"] = Value::String("x".repeat(40 * 1024));
    big["dependencies"].as_array_mut().unwrap().truncate(299);
    let some: Vec<&str> = names.iter().rev().step_by(7).copied().collect();
    let small = node_document("small", &some);
    let nodes =
        [("big".to_owned(), NodeSbom::Ready(big.clone())), ("small".to_owned(), NodeSbom::Ready(small.clone()))];
    sboms::replace(&mut conn, "d", "build", &nodes, 1).await.unwrap();

    // 300 components: the 7 before the large one, the large one alone, then
    // 292 of ~150 bytes: on SQLite in chunks of 64 (under 32 KiB), on
    // PostgreSQL of 54 or 53 (8 KiB) and one of 25. small's are all big's,
    // so no chunk of its own.
    let rest = match engine {
        Engine::Sqlite => 5,
        Engine::Postgres => 6,
    };
    assert_eq!(count(&mut conn, "sbom_component_chunks").await, 1 + 1 + rest);
    assert_eq!(text_of(&mut conn, "d", "big").await, sboms::canonical_text(&big));
    assert_eq!(text_of(&mut conn, "d", "small").await, sboms::canonical_text(&small));
    let Some(NodeSbom::Ready(value)) = sboms::document(&mut conn, "d", "big").await.unwrap() else { panic!() };
    assert_eq!(value, big);
}

slipway_jobs::on_both_engines!(a_document_spread_over_many_chunks_comes_back_as_accepted);

/// Each chunk of `table` by id: its codec and its lines.
async fn chunks(conn: &mut Conn, table: &str) -> std::collections::BTreeMap<i64, (i64, String)> {
    Q::new(format!("SELECT id, CAST(codec AS BIGINT) AS codec, body FROM {table}"))
        .fetch_all(conn)
        .await
        .unwrap()
        .iter()
        .map(|row| {
            let codec = row.int("codec").unwrap();
            (row.int("id").unwrap(), (codec, sboms::chunk_text(codec, row.bytes("body").unwrap()).unwrap()))
        })
        .collect()
}

/// A database at migration 0014 with a node's SBOM in chunks of text, then
/// migrated: the old chunks keep their text (codec 0) and are read as they
/// are, beside the compressed chunks (codec 1) that pieces stored after
/// the migration get, in one document; a text chunk that loses a piece is
/// written again compressed.
async fn chunks_written_as_text_before_migration_0017_are_read_beside_compressed_ones(engine: Engine) {
    use sha2::Digest;
    let test_db = TestDatabase::new(engine).await;
    let names: Vec<String> = (0..150).map(|i| format!("pkg{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let a = node_document("a", &names[..100]);
    let mut old_lines: std::collections::BTreeMap<(&str, i64), String> = std::collections::BTreeMap::new();
    {
        // What 0014's writer stored for `a`: pieces 1-100 and 1-101, 64 to a
        // chunk, each chunk's lines as text.
        let db = migrated_before(engine, &test_db, 17).await;
        let mut conn = db.acquire().await.unwrap();
        add_deployments(&mut conn, &["one"]).await;
        for (key, table, chunks) in [
            ("components", "sbom_components", "sbom_component_chunks"),
            ("dependencies", "sbom_dependencies", "sbom_dependency_chunks"),
        ] {
            for (i, piece) in a[key].as_array().unwrap().iter().enumerate() {
                let (id, text) = (i as i64 + 1, sboms::canonical_text(piece));
                let chunk = (id - 1) / 64 + 1;
                Q::new(format!("INSERT INTO {table} (id, hash, chunk) VALUES ($1, $2, $3)"))
                    .int(id)
                    .text(hex::encode(sha2::Sha256::digest(text.as_bytes())))
                    .int(chunk)
                    .execute(&mut conn)
                    .await
                    .unwrap();
                let lines = old_lines.entry((chunks, chunk)).or_default();
                if !lines.is_empty() {
                    lines.push('\n');
                }
                lines.push_str(&format!("{id} {text}"));
            }
        }
        for ((table, chunk), lines) in &old_lines {
            Q::new(format!("INSERT INTO {table} (id, body) VALUES ($1, $2)"))
                .int(*chunk)
                .text(lines.as_str())
                .execute(&mut conn)
                .await
                .unwrap();
        }
        insert_old_node_a(&mut conn, &a).await;
        drop(conn);
        db.close().await;
    }

    let db = open(engine, &test_db).await;
    let mut conn = db.acquire().await.unwrap();
    add_deployments(&mut conn, &["two"]).await;
    let old_components = chunks(&mut conn, "sbom_component_chunks").await;
    assert_eq!(old_components.len(), 2);
    for (chunk, (codec, lines)) in &old_components {
        assert_eq!((*codec, lines), (sboms::CODEC_TEXT, &old_lines[&("sbom_component_chunks", *chunk)]));
    }
    assert_eq!(chunks(&mut conn, "sbom_dependency_chunks").await.values().map(|c| c.0).collect::<Vec<_>>(), [0, 0]);
    assert_eq!(text_of(&mut conn, "one", "a").await, sboms::canonical_text(&a));

    // b shares a's last 50 packages (in text chunks 1 and 2) and adds 50:
    // its document comes from chunks of both codecs.
    let b = node_document("b", &names[50..150]);
    sboms::replace(&mut conn, "two", "new", &[("b".to_owned(), NodeSbom::Ready(b.clone()))], 2).await.unwrap();
    let after_b = chunks(&mut conn, "sbom_component_chunks").await;
    assert_eq!(after_b.len(), 3);
    let (codec, lines) = &after_b[&3];
    assert_eq!(*codec, sboms::CODEC_LZ4, "a new chunk is compressed");
    assert_eq!(lines.lines().count(), 50);
    assert_eq!(text_of(&mut conn, "two", "b").await, sboms::canonical_text(&b));
    assert_eq!(text_of(&mut conn, "one", "a").await, sboms::canonical_text(&a));

    // a keeps pkg0-31: pkg32-49 leave text chunk 1, which is written again
    // compressed; chunk 2 (pkg64-99, all b's) stays as it was.
    let a2 = node_document("a", &names[..32]);
    sboms::replace(&mut conn, "one", "new", &[("a".to_owned(), NodeSbom::Ready(a2.clone()))], 3).await.unwrap();
    let after_a2 = chunks(&mut conn, "sbom_component_chunks").await;
    assert_eq!(after_a2.values().map(|c| c.0).collect::<Vec<_>>(), [1, 0, 1]);
    assert_eq!(after_a2[&1].1.lines().count(), 32 + 14, "pkg0-31, and pkg50-63 that b names");
    assert_eq!(after_a2[&2], old_components[&2]);
    assert_eq!(text_of(&mut conn, "one", "a").await, sboms::canonical_text(&a2));
    assert_eq!(text_of(&mut conn, "two", "b").await, sboms::canonical_text(&b));
    let Some(NodeSbom::Ready(value)) = sboms::document(&mut conn, "two", "b").await.unwrap() else { panic!() };
    assert_eq!(value, b);
}

slipway_jobs::on_both_engines!(chunks_written_as_text_before_migration_0017_are_read_beside_compressed_ones);

/// The writer's chunks are compressed: the bytes stored are a fraction of
/// the lines they hold.
async fn new_chunks_are_stored_compressed(engine: Engine) {
    let test_db = TestDatabase::new(engine).await;
    let db = open(engine, &test_db).await;
    let mut conn = db.acquire().await.unwrap();
    add_deployments(&mut conn, &["d"]).await;
    let names: Vec<String> = (0..64).map(|i| format!("pkg{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let doc = node_document("n", &names);
    sboms::replace(&mut conn, "d", "build", &[("n".to_owned(), NodeSbom::Ready(doc.clone()))], 1).await.unwrap();
    let rows = Q::new("SELECT CAST(codec AS BIGINT) AS codec, body FROM sbom_component_chunks")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    let (mut stored, mut lines) = (0, String::new());
    for row in rows {
        let (codec, body) = (row.int("codec").unwrap(), row.bytes("body").unwrap());
        assert_eq!(codec, sboms::CODEC_LZ4);
        stored += body.len();
        lines.push_str(&sboms::chunk_text(codec, body).unwrap());
        lines.push('\n');
    }
    assert_eq!(lines.lines().count(), 64);
    assert!(stored * 3 < lines.len(), "{stored} bytes stored for {} bytes of lines", lines.len());
    assert_eq!(text_of(&mut conn, "d", "n").await, sboms::canonical_text(&doc));
}

slipway_jobs::on_both_engines!(new_chunks_are_stored_compressed);

/// What a node's row says of its chunks, per list: the `component_chunks`
/// and `dependency_chunks` columns.
async fn named_chunks(conn: &mut Conn, deployment: &str, node: &str) -> [Option<String>; 2] {
    let row = Q::new("SELECT component_chunks, dependency_chunks FROM sboms WHERE deployment_id = $1 AND node = $2")
        .text(deployment)
        .text(node)
        .fetch_one(conn)
        .await
        .unwrap();
    [row.opt_text("component_chunks").unwrap(), row.opt_text("dependency_chunks").unwrap()]
}

/// The chunks that hold the pieces a node's lists name, per list, found
/// through the pieces' rows and written as the row writes a list of ids.
async fn chunks_holding(conn: &mut Conn, deployment: &str, node: &str) -> [Option<String>; 2] {
    let row = Q::new("SELECT components, dependencies FROM sboms WHERE deployment_id = $1 AND node = $2")
        .text(deployment)
        .text(node)
        .fetch_one(conn)
        .await
        .unwrap();
    let mut out = [None, None];
    for (k, (list, table)) in
        [("components", "sbom_components"), ("dependencies", "sbom_dependencies")].into_iter().enumerate()
    {
        let ids = sboms::decode_ids(&row.text(list).unwrap()).unwrap();
        let mut chunks: Vec<i64> = Vec::new();
        for id in ids {
            let q = Q::new(format!("SELECT chunk FROM {table} WHERE id = $1")).int(id);
            chunks.push(q.fetch_one(conn).await.unwrap().int("chunk").unwrap());
        }
        chunks.sort_unstable();
        chunks.dedup();
        out[k] = Some(sboms::encode_ids(&chunks));
    }
    out
}

/// A node's row names the chunks holding the pieces of each of its lists
/// (its own new chunks, and those of pieces other nodes stored first), and
/// they stay true when pieces around them are deleted and their chunks
/// written again; the document is read from them.
async fn a_node_row_names_the_chunks_holding_its_pieces(engine: Engine) {
    let test_db = TestDatabase::new(engine).await;
    let db = open(engine, &test_db).await;
    let mut conn = db.acquire().await.unwrap();
    add_deployments(&mut conn, &["one", "two"]).await;
    let names: Vec<String> = (0..400).map(|i| format!("pkg{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let a = node_document("a", &names[..200]);
    // b: every third of a's packages, backwards, then 150 of its own.
    let mut b_names: Vec<&str> = names[..200].iter().rev().step_by(3).copied().collect();
    b_names.extend(&names[250..400]);
    let b = node_document("b", &b_names);
    sboms::replace(&mut conn, "one", "build-1", &[("a".to_owned(), NodeSbom::Ready(a.clone()))], 1).await.unwrap();
    sboms::replace(&mut conn, "two", "build-2", &[("b".to_owned(), NodeSbom::Ready(b.clone()))], 1).await.unwrap();
    assert!(count(&mut conn, "sbom_component_chunks").await >= 6, "the pieces span several chunks");
    for (deployment, node, doc) in [("one", "a", &a), ("two", "b", &b)] {
        let named = named_chunks(&mut conn, deployment, node).await;
        assert_eq!(named, chunks_holding(&mut conn, deployment, node).await, "{node}'s row names its chunks");
        assert_eq!(text_of(&mut conn, deployment, node).await, sboms::canonical_text(doc));
    }
    assert_eq!(named_chunks(&mut conn, "one", "a").await[0].as_deref(), Some("1-4"));

    // a keeps its first 50 packages: the pieces only it named leave their
    // chunks, which are written again or deleted; b's row still holds.
    let a2 = node_document("a", &names[..50]);
    sboms::replace(&mut conn, "one", "build-3", &[("a".to_owned(), NodeSbom::Ready(a2.clone()))], 2).await.unwrap();
    for (deployment, node, doc) in [("one", "a", &a2), ("two", "b", &b)] {
        assert_eq!(named_chunks(&mut conn, deployment, node).await, chunks_holding(&mut conn, deployment, node).await);
        assert_eq!(text_of(&mut conn, deployment, node).await, sboms::canonical_text(doc));
    }
}

slipway_jobs::on_both_engines!(a_node_row_names_the_chunks_holding_its_pieces);

/// A database at migration 0017 with a node's SBOM as its writer stored it
/// (compressed chunks, lists of piece ids, no chunk ids in the row), then
/// migrated: the row names no chunks and is read through its pieces' rows;
/// a node stored afterwards that shares its pieces names their chunks; both
/// read back as accepted, also after pieces leave.
async fn sboms_stored_before_migration_0018_are_read_through_their_pieces(engine: Engine) {
    use sha2::Digest;
    let test_db = TestDatabase::new(engine).await;
    let names: Vec<String> = (0..150).map(|i| format!("pkg{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let a = node_document("a", &names[..100]);
    {
        // What 0017's writer stored for `a`: pieces 1-100 and 1-101, 64 to a
        // chunk, each chunk's lines compressed.
        let db = migrated_before(engine, &test_db, 18).await;
        let mut conn = db.acquire().await.unwrap();
        add_deployments(&mut conn, &["one"]).await;
        for (key, table, chunks) in [
            ("components", "sbom_components", "sbom_component_chunks"),
            ("dependencies", "sbom_dependencies", "sbom_dependency_chunks"),
        ] {
            let mut lines: std::collections::BTreeMap<i64, String> = std::collections::BTreeMap::new();
            for (i, piece) in a[key].as_array().unwrap().iter().enumerate() {
                let (id, text) = (i as i64 + 1, sboms::canonical_text(piece));
                let chunk = (id - 1) / 64 + 1;
                Q::new(format!("INSERT INTO {table} (id, hash, chunk) VALUES ($1, $2, $3)"))
                    .int(id)
                    .text(hex::encode(sha2::Sha256::digest(text.as_bytes())))
                    .int(chunk)
                    .execute(&mut conn)
                    .await
                    .unwrap();
                let body = lines.entry(chunk).or_default();
                if !body.is_empty() {
                    body.push('\n');
                }
                body.push_str(&format!("{id} {text}"));
            }
            for (chunk, body) in lines {
                Q::new(format!("INSERT INTO {chunks} (id, codec, body) VALUES ($1, 1, $2)"))
                    .int(chunk)
                    .bytes(lz4_flex::block::compress_prepend_size(body.as_bytes()))
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
        }
        insert_old_node_a(&mut conn, &a).await;
        drop(conn);
        db.close().await;
    }

    let db = open(engine, &test_db).await;
    let mut conn = db.acquire().await.unwrap();
    add_deployments(&mut conn, &["two"]).await;
    assert_eq!(named_chunks(&mut conn, "one", "a").await, [None, None]);
    assert_eq!(text_of(&mut conn, "one", "a").await, sboms::canonical_text(&a));

    // b shares a's last 50 packages (in old chunks 1 and 2) and adds 50.
    let b = node_document("b", &names[50..150]);
    sboms::replace(&mut conn, "two", "new", &[("b".to_owned(), NodeSbom::Ready(b.clone()))], 2).await.unwrap();
    assert_eq!(named_chunks(&mut conn, "two", "b").await, chunks_holding(&mut conn, "two", "b").await);
    assert_eq!(named_chunks(&mut conn, "two", "b").await[0].as_deref(), Some("1-3"));
    assert_eq!(text_of(&mut conn, "two", "b").await, sboms::canonical_text(&b));
    assert_eq!(text_of(&mut conn, "one", "a").await, sboms::canonical_text(&a));

    // a keeps pkg0-31 (its row is written again, naming its chunks):
    // pkg32-49 leave old chunk 1.
    let a2 = node_document("a", &names[..32]);
    sboms::replace(&mut conn, "one", "new", &[("a".to_owned(), NodeSbom::Ready(a2.clone()))], 3).await.unwrap();
    assert_eq!(named_chunks(&mut conn, "one", "a").await, chunks_holding(&mut conn, "one", "a").await);
    assert_eq!(text_of(&mut conn, "one", "a").await, sboms::canonical_text(&a2));
    assert_eq!(text_of(&mut conn, "two", "b").await, sboms::canonical_text(&b));
}

slipway_jobs::on_both_engines!(sboms_stored_before_migration_0018_are_read_through_their_pieces);

/// On PostgreSQL a chunk's body stays in its row (not in the TOAST table)
/// up to a page, though it is past the 2 KB at which PostgreSQL would
/// otherwise move it out: components carrying hashes that do not compress.
#[tokio::test]
async fn chunk_bodies_stay_in_their_rows_on_postgresql() {
    use sha2::Digest;
    let test_db = TestDatabase::new(Engine::Postgres).await;
    let db = open(Engine::Postgres, &test_db).await;
    let mut conn = db.acquire().await.unwrap();
    add_deployments(&mut conn, &["d"]).await;
    let names: Vec<String> = (0..200).map(|i| format!("pkg{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut doc = node_document("n", &names);
    for component in doc["components"].as_array_mut().unwrap() {
        let name = component["name"].as_str().unwrap().to_owned();
        let sha = hex::encode(sha2::Sha256::digest(name.as_bytes()));
        let sha512 = hex::encode(sha2::Sha512::digest(name.as_bytes()));
        component["hashes"] = json!([{"alg": "SHA-256", "content": sha}, {"alg": "SHA-512", "content": sha512}]);
    }
    sboms::replace(&mut conn, "d", "build", &[("n".to_owned(), NodeSbom::Ready(doc.clone()))], 1).await.unwrap();
    let largest = Q::new("SELECT CAST(MAX(octet_length(body)) AS BIGINT) AS n FROM sbom_component_chunks")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .int("n")
        .unwrap();
    assert!(largest > 2100, "a chunk's body is past PostgreSQL's 2 KB TOAST threshold ({largest} bytes)");
    let toasted = Q::new(
        "SELECT COALESCE(SUM(pg_relation_size(reltoastrelid)), 0)::BIGINT AS n FROM pg_class
         WHERE relname IN ('sbom_component_chunks', 'sbom_dependency_chunks')",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap()
    .int("n")
    .unwrap();
    assert_eq!(toasted, 0, "no chunk body went to a TOAST table");
    assert_eq!(text_of(&mut conn, "d", "n").await, sboms::canonical_text(&doc));
}

/// The fleet-wide SBOM lock guards the shared pieces only: a deploy whose
/// nodes have no SBOM, replacing nodes that had none, records its end while
/// another writer holds the lock; one with a document still waits for it.
#[tokio::test]
async fn nodes_without_an_sbom_are_recorded_while_another_writer_holds_the_sbom_lock() {
    let test_db = TestDatabase::new(Engine::Postgres).await;
    let db = open(Engine::Postgres, &test_db).await;
    add_deployments(&mut db.acquire().await.unwrap(), &["bare", "full"]).await;
    let mut holder = db.begin_write().await.unwrap();
    holder.lock_name("slipway:sboms").await.unwrap();

    let unavailable = [("noop".to_owned(), NodeSbom::Unavailable("no SBOM written".into()))];
    for build in ["build-1", "build-2"] {
        let mut tx = db.begin_write().await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), sboms::replace(&mut tx, "bare", build, &unavailable, 1))
            .await
            .expect("a replace touching no shared piece does not wait for the SBOM lock")
            .unwrap();
        tx.commit().await.unwrap();
    }

    let ready = [("web".to_owned(), NodeSbom::Ready(node_document("web", &["glibc"])))];
    let db2 = db.clone();
    let waiting = tokio::spawn(async move {
        let mut tx = db2.begin_write().await.unwrap();
        sboms::replace(&mut tx, "full", "build-3", &ready, 1).await.unwrap();
        tx.commit().await.unwrap();
    });
    // The writer of a document waits on the lock: seen by PostgreSQL as a
    // backend waiting on an advisory lock.
    slipway_jobs::test_support::wait_for("the document's writer to wait on the lock", Duration::from_secs(10), || {
        let db = db.clone();
        async move {
            let mut conn = db.acquire().await.unwrap();
            let q = Q::new("SELECT COUNT(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted");
            (q.fetch_one(&mut conn).await.unwrap().int("n").unwrap() > 0).then_some(())
        }
    })
    .await;
    assert!(!waiting.is_finished());
    holder.commit().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("it goes on once the lock is free").unwrap();
    let mut conn = db.acquire().await.unwrap();
    assert_eq!(sboms::list(&mut conn, "bare").await.unwrap()[0].build_id, "build-2");
    assert_eq!(sboms::list(&mut conn, "full").await.unwrap()[0].status, "ready");
}

/// Writes node `a` of deployment `one` as an older writer did: its document
/// without its lists, and the lists as the id runs `1-100` (components) and
/// `1-101` (dependencies), with no chunk ids (those came with migration 0018).
async fn insert_old_node_a(conn: &mut Conn, a: &Value) {
    let mut rest = a.clone();
    rest.as_object_mut().unwrap().remove("components");
    rest.as_object_mut().unwrap().remove("dependencies");
    Q::new(
        "INSERT INTO sboms (deployment_id, node, build_id, status, reason, document, components, dependencies,
                            created_at)
         VALUES ('one', 'a', 'old', 'ready', NULL, $1, '1-100', '1-101', 1)",
    )
    .text(sboms::canonical_text(&rest))
    .execute(conn)
    .await
    .unwrap();
}
