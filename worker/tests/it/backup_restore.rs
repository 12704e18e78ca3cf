//! Backup and restore as docs/OPERATOR-GUIDE.md tells an operator to do
//! them, on both engines: a backup taken while the api serves
//! (`pg_dump --format=custom`; SQLite's `.backup`), restored into an empty
//! database (`pg_restore --exit-on-error --single-transaction`; the copied
//! file), serves the same deployments, builds and SBOMs, and a fleet started
//! on it deploys again. (The workers are stopped while the two are compared:
//! a worker's readiness probes change what `GET /deployments/{id}` shows.)

use crate::common;

use common::{binary, command, demo, free_port, slow_source, slow_worker, start, wait_build, Api, Running, ENDED};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::TestDatabase;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Runs `program args…`, failing the test with its output when it fails.
fn run(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program} does not run: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The SQLite file of a `sqlite://<file>` URL.
fn sqlite_file(url: &str) -> &str {
    url.strip_prefix("sqlite://").expect("a sqlite:// URL")
}

/// Backs `from` up while it is in use and restores the backup into `to`, an
/// empty database of the same engine.
fn back_up_and_restore(engine: Engine, from: &TestDatabase, to: &TestDatabase, dir: &Path) {
    match engine {
        Engine::Postgres => {
            let dump = dir.join("slipway.dump");
            let dump = dump.to_str().unwrap();
            run("pg_dump", &["--format=custom", "--file", dump, &from.url]);
            run("pg_restore", &["--exit-on-error", "--single-transaction", "--no-owner", "--dbname", &to.url, dump]);
        }
        Engine::Sqlite => {
            let copy = dir.join("slipway-backup.db");
            run("sqlite3", &[sqlite_file(&from.url), &format!(".backup '{}'", copy.display())]);
            std::fs::copy(&copy, sqlite_file(&to.url)).unwrap();
        }
    }
}

/// The reads a front-end makes of deployment `id`, as one value to compare.
async fn what_the_api_shows(api: &Api, id: &str, build: &str) -> serde_json::Value {
    let mut shown = serde_json::Map::new();
    for path in [
        format!("/deployments/{id}"),
        format!("/deployments/{id}/builds"),
        format!("/builds/{build}"),
        format!("/sbom-list/{id}"),
        format!("/sbom/{id}?node=web"),
    ] {
        let (status, _, body) = api.get(&path).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        shown.insert(path, body);
    }
    serde_json::Value::Object(shown)
}

/// The api on `db`.
fn api_on(db: &TestDatabase, port: u16) -> Running {
    start(command(&binary("slipway-api"), db, port), db, "api.log")
}

/// A worker on `db`, with the test's quick module source.
fn worker_on(db: &TestDatabase, port: u16, source: &Path) -> Running {
    start(slow_worker(db, port, source), db, "worker.log")
}

async fn a_backup_taken_while_the_api_serves_restores_to_a_database_that_serves_and_deploys(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let source = db.path("quick-source");
    slow_source(&source, 0);
    let port = free_port();
    let _api = api_on(&db, port);
    let mut worker = worker_on(&db, port, &source);
    let api = Api::connect(&db, port).await;
    let (status, accepted) = api.submit("demo", &demo()).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    let build = accepted["build_id"].as_str().unwrap().to_owned();
    let done = wait_build(&api, &format!("/builds/{build}"), "the deploy to end", ENDED).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    api.wait_state("demo", "active", Duration::from_secs(60)).await;
    worker.kill();
    let before = what_the_api_shows(&api, "demo", &build).await;

    let restored = TestDatabase::new(engine).await;
    back_up_and_restore(engine, &db, &restored, db.dir.path());

    let restored_port = free_port();
    let _restored_api = api_on(&restored, restored_port);
    let restored_api = Api::connect(&restored, restored_port).await;
    assert_eq!(what_the_api_shows(&restored_api, "demo", &build).await, before);
    let _restored_worker = worker_on(&restored, restored_port, &source);
    let (status, accepted) = restored_api.submit("demo", &demo()).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    let again = accepted["build_id"].as_str().unwrap().to_owned();
    assert_ne!(again, build);
    let done =
        wait_build(&restored_api, &format!("/builds/{again}"), "the deploy on the restored database", ENDED).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let builds = restored_api.builds("demo").await.unwrap();
    assert_eq!(builds.len(), 2, "{builds:?}");
}

slipway_jobs::on_both_engines!(a_backup_taken_while_the_api_serves_restores_to_a_database_that_serves_and_deploys);
