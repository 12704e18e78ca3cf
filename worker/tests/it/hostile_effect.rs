//! SEC-3, an effect as an attacker who controls the module source writes
//! it: with the real api and worker, a real `bao server -dev` and each
//! process holding its own OpenBao token, the effect gets its own
//! deployment's operator secrets as files and no credential of the worker
//! (no OpenBao token, no JWT secret, in its environment or any process's it
//! can see); what it leaves for the worker to read is never followed out of
//! its output folder. Polls with deadlines; never sleeps to synchronise.

use crate::common;

use common::{binary, command, demo, free_port, start, wait_build, Api, Running, ENDED, SECRET};
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::{TestDatabase, TestOpenBao};
use std::path::{Path, PathBuf};

const PEERTUBE: &str = "peertube-operator-secrets";

/// A deploy effect that does what a hostile one would: keeps its whole
/// environment, every process environment it can read and every file it
/// can find whose path names a secret, in `$STATE_DIR/seen/`; copies its
/// own secret values there and prints them; reports one node, `web`.
const SNOOPING_DEPLOY: &str = r#"#!/bin/sh
seen="$STATE_DIR/seen"
rm -rf "$seen"
mkdir -p "$seen"
env > "$seen/env"
for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f"; done > "$seen/proc" 2>/dev/null
tab=$(printf '\t')
if [ -n "${OPERATOR_SECRETS_FILE:-}" ]; then
  cp "$OPERATOR_SECRETS_FILE" "$seen/list"
  while IFS="$tab" read -r application instance field entry version file; do
    [ -n "$file" ] || continue
    cat "$file" >> "$seen/values"
    echo "the effect prints its secret: $(cat "$file")"
  done < "$OPERATOR_SECRETS_FILE"
fi
find / \( -path /proc -o -path /sys -o -path /dev -o -path /nix -o -path /usr \) -prune -o -type f -path '*secret*' -print 2>/dev/null |
  while read -r found; do echo "== $found"; cat "$found"; done > "$seen/found" 2>/dev/null
echo '{"nodes": [{"name": "web", "dnsNames": [], "outcome": "deployed", "system": null, "error": null}]}' > "$SBOM_OUT_DIR/nodes.json"
echo "the SBOM of web is elsewhere" > "$SBOM_OUT_DIR/web.error"
"#;

/// A deploy effect that leaves links for the worker to follow: the node's
/// SBOM error and its timings lead to the worker's own environment (as the
/// worker, in the host's PID namespace, would resolve `/proc/self`), and a
/// node whose name climbs out of the output folder.
const LINKING_DEPLOY: &str = r#"#!/bin/sh
echo '{"nodes": [{"name": "web", "dnsNames": [], "outcome": "deployed", "system": null, "error": null},
                {"name": "../climb", "dnsNames": [], "outcome": "deployed", "system": null, "error": null}]}' > "$SBOM_OUT_DIR/nodes.json"
ln -s /proc/self/environ "$SBOM_OUT_DIR/web.error"
ln -s /proc/self/environ "$SBOM_OUT_DIR/timings.json"
ln -s /proc/self/environ "$SBOM_OUT_DIR/../climb.error"
"#;

/// A module source whose deploy effect is `deploy`.
fn source(root: &Path, deploy: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let effects = root.join("core/effects");
    std::fs::create_dir_all(&effects).unwrap();
    std::fs::write(root.join("core/default.nix"), "{ provider ? {} }: { }\n").unwrap();
    for (name, body) in [("deploy", deploy), ("destroy", "#!/bin/sh\nexit 0\n")] {
        std::fs::write(effects.join(name), body).unwrap();
        std::fs::set_permissions(effects.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    root.to_path_buf()
}

struct Fleet {
    db: TestDatabase,
    bao: TestOpenBao,
    api: Api,
    port: u16,
    root: PathBuf,
    _api: Running,
    worker: Option<Running>,
    _source: tempfile::TempDir,
}

impl Fleet {
    /// Starts a worker with the workers' token.
    fn start_worker(&mut self) {
        let mut worker = command(&binary("slipway-worker"), &self.db, self.port);
        worker.arg("work").env("SLIPWAY_DEFAULT_SOURCE_DIR", &self.root).envs(self.bao.keys(true));
        self.worker = Some(start(worker, &self.db, "worker.log"));
    }
}

/// The api with the api's token and a worker with the workers' token,
/// running `deploy` as the effect of every build.
async fn fleet(deploy: &str) -> Fleet {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let bao = TestOpenBao::new().await;
    let dir = tempfile::tempdir().unwrap();
    let root = source(&dir.path().join("source"), deploy);
    let port = free_port();
    let mut api = command(&binary("slipway-api"), &db, port);
    api.envs(bao.keys(false));
    let api_process = start(api, &db, "api.log");
    let api = Api::connect(&db, port).await;
    let mut fleet = Fleet { db, bao, api, port, root, _api: api_process, worker: None, _source: dir };
    fleet.start_worker();
    fleet
}

/// The demo configuration with peertube's `smtpPassword` set to `value`.
fn with_password(value: &str) -> Value {
    let mut config = demo();
    config["applications"]["peertube"]["smtpPassword"] = json!(value);
    config
}

/// Submits `config` to `id`; the build once it ended.
async fn deploy(api: &Api, id: &str, config: &Value) -> Value {
    let (status, accepted) = api.submit(id, config).await.expect("the api answers");
    assert_eq!(status, 202, "{accepted}");
    let path = format!("/builds/{}", accepted["build_id"].as_str().unwrap());
    wait_build(api, &path, "the deploy to end", ENDED).await
}

fn seen(db: &TestDatabase, id: &str, file: &str) -> String {
    let path = db.path("state").join("provider").join(id).join("seen").join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// SEC-3 and §8: the worker hands an effect its own deployment's values as
/// private files and keeps its token; nothing the effect can read names a
/// credential of the worker or the api, or another deployment's value;
/// the value it prints is hidden in the log, and the files are gone once
/// it ended.
#[tokio::test]
async fn an_effect_gets_its_own_secrets_as_files_and_no_credential_of_the_worker() {
    use secrecy::ExposeSecret as _;
    let fleet = fleet(SNOOPING_DEPLOY).await;
    let (db, api) = (&fleet.db, &fleet.api);
    let other = deploy(api, "tenant-b", &with_password("value-of-tenant-b-0b1c")).await;
    assert_eq!(other["status"], "succeeded", "{other}");
    let build = deploy(api, "tenant-a", &with_password("value-of-tenant-a-9f3e")).await;
    assert_eq!(build["status"], "succeeded", "{build}");

    let credentials = [
        fleet.bao.keys(true).into_iter().find(|(k, _)| *k == "OPENBAO_TOKEN").unwrap().1,
        fleet.bao.keys(false).into_iter().find(|(k, _)| *k == "OPENBAO_TOKEN").unwrap().1,
        SECRET.to_owned(),
    ];
    for file in ["env", "proc", "found", "list", "values"] {
        let text = seen(db, "tenant-a", file);
        for credential in &credentials {
            assert!(!text.contains(credential.as_str()), "the effect read a credential in {file}:\n{text}");
        }
        assert!(!text.contains("value-of-tenant-b"), "the effect read another deployment's secret in {file}:\n{text}");
        assert!(!text.contains("BAO_TOKEN") && !text.contains("OPENBAO_ADDR"), "{file}:\n{text}");
    }
    assert_eq!(seen(db, "tenant-a", "values"), "value-of-tenant-a-9f3e");
    let list = seen(db, "tenant-a", "list");
    let columns: Vec<&str> = list.trim_end().split('\t').collect();
    assert_eq!(columns[..3], ["peertube", PEERTUBE, "smtpPassword"], "{list}");
    assert_eq!(columns[4], "1", "{list}");

    let log = build["log"].as_str().unwrap_or_default();
    assert!(log.contains("the effect prints its secret: [redacted]"), "{log}");
    assert!(!log.contains("value-of-tenant-a"), "{log}");
    for build in [&other, &build] {
        let attempt = db.path("state").join("builds").join(build["id"].as_str().unwrap()).join("attempt-1");
        assert!(attempt.join("sbom").exists(), "{}", attempt.display());
        assert!(!attempt.join("secrets").exists(), "the handed values outlived the effect: {}", attempt.display());
    }
    // The values stayed in OpenBao, each deployment's under its own entry.
    let admin = fleet.bao.api();
    let value = admin.read("tenant-b", PEERTUBE, "smtpPassword").await.unwrap().unwrap();
    assert_eq!(value.expose_secret(), "value-of-tenant-b-0b1c");
}

/// §8: a pinned version the worker cannot read fails the build before its
/// effect starts (`operator_secrets`), naming the field, instance and
/// version, never a value.
#[tokio::test]
async fn a_pinned_version_that_is_gone_fails_the_build_before_its_effect_runs() {
    let mut fleet = fleet(SNOOPING_DEPLOY).await;
    let first = deploy(&fleet.api, "gone", &with_password("value-that-goes-7d2a")).await;
    assert_eq!(first["status"], "succeeded", "{first}");
    // The next build pins version 1; the entry goes before a worker runs it.
    drop(fleet.worker.take());
    let (status, accepted) = fleet.api.submit("gone", &demo()).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    fleet.bao.worker().destroy_all_versions("gone", PEERTUBE, "smtpPassword").await.unwrap();
    std::fs::remove_dir_all(fleet.db.path("state").join("provider/gone/seen")).unwrap();
    fleet.start_worker();

    let path = format!("/builds/{}", accepted["build_id"].as_str().unwrap());
    let build = wait_build(&fleet.api, &path, "the deploy to end", ENDED).await;
    assert_eq!(build["status"], "failed", "{build}");
    assert_eq!(build["reason"], "operator_secrets", "{build}");
    let error = build["error"].as_str().unwrap_or_default();
    assert!(error.contains("smtpPassword") && error.contains("version 1"), "{build}");
    assert!(!build.to_string().contains("value-that-goes"), "{build}");
    assert!(!fleet.db.path("state").join("provider/gone/seen").exists(), "the effect ran");
}

/// SEC-3: the worker (root, in the host's PID namespace) reads what an
/// effect left only as regular files directly in its output folder: links
/// to the worker's own environment and a node name that climbs out are
/// refused, and nothing of the worker's environment reaches the report.
#[tokio::test]
async fn the_worker_follows_no_link_an_effect_leaves_in_its_output() {
    let fleet = fleet(LINKING_DEPLOY).await;
    let build = deploy(&fleet.api, "links", &demo()).await;
    let text = build.to_string();
    let token = fleet.bao.keys(true).into_iter().find(|(k, _)| *k == "OPENBAO_TOKEN").unwrap().1;
    for leaked in [token.as_str(), SECRET, "DATABASE_URL", "SLIPWAY_STATE_DIR"] {
        assert!(!text.contains(leaked), "the worker's environment reached the report: {build}");
    }
    let nodes = build["report"]["nodes"].as_array().cloned().unwrap_or_default();
    let error_of = |name: &str| {
        let node = nodes.iter().find(|n| n["name"] == name).unwrap_or_else(|| panic!("no node {name}: {build}"));
        node["error"].as_str().unwrap_or_default().to_owned()
    };
    assert!(error_of("web").contains("symbolic link"), "{build}");
    assert!(error_of("../climb").contains("not a file name"), "{build}");
}
