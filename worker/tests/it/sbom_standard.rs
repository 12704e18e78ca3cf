//! A provider's effect that writes an SBOM breaking the CycloneDX rules
//! (docs/SBOM.md), through the real `slipway-api` and `slipway-worker`: the
//! build succeeds, that node's SBOM is `unavailable` with the reason naming
//! the ref and the rule, and the node whose SBOM is sound is `ready`.

use crate::common;

use common::{binary, command, demo, free_port, start, wait_build, Api, ENDED};
use serde_json::Value;
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::TestDatabase;
use std::path::Path;

/// What the api must say about node `db`, whose SBOM's `dependsOn` names a
/// component the document does not have.
const DANGLING: &str = "dependsOn entry \"/nix/store/00000000000000000000000000000000-openssl-3.0.14\" of \
     \"slipway-node:db\" at /dependencies/0/dependsOn/1 names no bom-ref of the document: \
     every dependsOn entry must point at an existing bom-ref";

/// A module source whose deploy reports two nodes: `web` with a sound
/// CycloneDX 1.6 SBOM, `db` with one whose dependency names a missing
/// component.
fn source_with_a_broken_sbom(root: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let effects = root.join("core/effects");
    std::fs::create_dir_all(&effects).unwrap();
    std::fs::write(root.join("core/default.nix"), "{ provider ? {} }: { }\n").unwrap();
    let deploy = r#"#!/bin/sh
set -eu
cat > "$SBOM_OUT_DIR/nodes.json" <<'EOF'
{"nodes": [
  {"name": "db", "dnsNames": [], "outcome": "deployed", "system": null, "error": null},
  {"name": "web", "dnsNames": [], "outcome": "deployed", "system": null, "error": null}
]}
EOF
bom() {
  node=$1 depends=$2
  cat <<EOF
{"bomFormat": "CycloneDX", "specVersion": "1.6", "version": 1,
 "metadata": {"component": {"type": "operating-system", "bom-ref": "slipway-node:$node", "name": "$node"}},
 "components": [{"type": "library", "bom-ref": "/nix/store/11111111111111111111111111111111-zlib-1.3.1", "name": "zlib", "version": "1.3.1"}],
 "dependencies": [{"ref": "slipway-node:$node", "dependsOn": [$depends]}]}
EOF
}
bom web '"/nix/store/11111111111111111111111111111111-zlib-1.3.1"' > "$SBOM_OUT_DIR/web.cdx.json"
bom db '"/nix/store/11111111111111111111111111111111-zlib-1.3.1", "/nix/store/00000000000000000000000000000000-openssl-3.0.14"' > "$SBOM_OUT_DIR/db.cdx.json"
echo deployed
"#;
    for (name, body) in [("deploy", deploy), ("destroy", "#!/bin/sh\nexit 0\n")] {
        let path = effects.join(name);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

async fn an_effect_that_writes_a_broken_sbom_leaves_that_node_unavailable_with_the_reason(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let source = db.path("broken-sbom-source");
    source_with_a_broken_sbom(&source);
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let mut worker = command(&binary("slipway-worker"), &db, port);
    worker.arg("work").env("SLIPWAY_DEFAULT_SOURCE_DIR", &source);
    let _worker = start(worker, &db, "worker.log");
    let api = Api::connect(&db, port).await;

    let (status, submitted) = api.submit("demo", &demo()).await.unwrap();
    assert_eq!(status, 202, "{submitted}");
    let build_path = format!("/builds/{}", submitted["build_id"].as_str().unwrap());
    let build = wait_build(&api, &build_path, "the deploy to end", ENDED).await;
    // An SBOM that fails its checks fails no node, as one that did not build.
    assert_eq!(build["status"], "succeeded", "{build}");
    let report_db = build["report"]["nodes"].as_array().unwrap().iter().find(|n| n["name"] == "db").cloned();
    let report_db = report_db.unwrap_or_else(|| panic!("no node db in {build}"));
    assert_eq!((&report_db["sbom"], &report_db["error"]), (&Value::from("unavailable"), &Value::from(DANGLING)));

    let (status, _, list) = api.get("/sbom-list/demo").await;
    assert_eq!(status, 200, "{list}");
    let nodes = list["nodes"].as_array().unwrap();
    let entry = |name: &str| nodes.iter().find(|n| n["node"] == name).unwrap_or_else(|| panic!("{name}: {list}"));
    assert_eq!(entry("db")["status"], "unavailable", "{list}");
    assert_eq!(entry("db")["reason"], DANGLING, "{list}");
    assert_eq!(entry("web")["status"], "ready", "{list}");

    let (status, _, body) = api.get("/sbom/demo?node=db").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["details"]["reason"], DANGLING, "{body}");
    let (status, ctype, web) = api.get("/sbom/demo?node=web").await;
    assert_eq!((status, ctype.as_str()), (200, "application/vnd.cyclonedx+json"), "{web}");
    assert_eq!(web["specVersion"], "1.6");
}

slipway_jobs::on_both_engines!(an_effect_that_writes_a_broken_sbom_leaves_that_node_unavailable_with_the_reason);
