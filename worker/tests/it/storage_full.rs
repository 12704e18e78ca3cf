//! A host's full disk is told as what it is (real binaries, real Nix, file
//! systems really full: small `tmpfs` mounts): a submit whose names eval
//! cannot write into the worker's full state folder, or whose transaction
//! cannot write to the database's full disk, is `503 storage_unavailable`
//! naming the storage, with `Retry-After`, never a client error; nothing of
//! it is stored; the api logs it, counts it in
//! `slipway_storage_faults_total` and warns in `/readyz`; and once space is
//! freed the same submit is accepted (the fault was not kept as the
//! configuration's answer).

use crate::common;

use common::{binary, command, demo, free_port, start, wait_for, Api, Running};
use serde_json::Value;
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::TestDatabase;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A `tmpfs` of `size` mounted on a folder for the test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Self {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(at).output();
        let out = out.expect("mount runs");
        assert!(
            out.status.success(),
            "these tests mount a small tmpfs to fill it, which needs root: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self(at.to_owned())
    }

    /// Writes a file of zeros until the file system is full; its path.
    fn fill(&self) -> PathBuf {
        let path = self.0.join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let block = vec![0u8; 64 * 1024];
        loop {
            match file.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
        // Whatever room is left under a page.
        while file.write(&[0u8; 512]).is_ok_and(|n| n > 0) {}
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The value of the series named exactly `series` in the api's scrape.
async fn metric(api: &Api, series: &str) -> f64 {
    let text = api.http.get(format!("{}/metrics", api.base)).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in the scrape: {text}"))
}

/// A submit's status, `Retry-After` and body.
async fn submit(api: &Api, id: &str, configuration: &Value) -> (u16, Option<String>, Value) {
    let r = api
        .http
        .put(format!("{}/deployments/{id}", api.base))
        .bearer_auth(&api.token)
        .json(&serde_json::json!({ "configuration": configuration }))
        .send()
        .await
        .unwrap();
    let retry = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    (r.status().as_u16(), retry, r.json().await.unwrap_or(Value::Null))
}

async fn readyz_warnings(api: &Api) -> Vec<String> {
    let (status, _, ready) = api.get("/readyz").await;
    assert_eq!(status, 200, "a full disk does not make the api unready: {ready}");
    ready["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap().to_owned()).collect()
}

/// The demo with another domain: a configuration no names eval has seen.
fn demo_at(domain: &str) -> Value {
    let mut configuration = demo();
    configuration["domain"] = domain.into();
    configuration
}

#[tokio::test]
async fn a_full_state_folder_is_503_storage_unavailable_naming_the_worker_and_stores_nothing() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let state = db.path("full-state");
    let tmpfs = Tmpfs::mount(&state, "8m");
    let port = free_port();
    let with_state = |mut cmd: Command| {
        cmd.env("SLIPWAY_STATE_DIR", &state);
        cmd
    };
    let _api: Running = start(with_state(command(&binary("slipway-api"), &db, port)), &db, "api.log");
    let mut worker = with_state(command(&binary("slipway-worker"), &db, port));
    worker.arg("work");
    let _worker = start(worker, &db, "worker.log");
    let api = Api::connect(&db, port).await;
    wait_for("a live worker of the nix queue", Duration::from_secs(60), || async {
        let (_, _, ready) = api.get("/readyz").await;
        let q = ready["queues"].as_array()?.iter().find(|q| q["queue"] == "nix")?.clone();
        (q["workers"].as_i64()? > 0).then_some(())
    })
    .await;
    assert_eq!(metric(&api, "slipway_storage_faults_total{storage=\"worker\"}").await, 0.0);

    let filler = tmpfs.fill();
    let (status, retry, answer) = submit(&api, "full-state", &demo_at("full.example.org")).await;
    assert_eq!((status, answer["error"].as_str()), (503, Some("storage_unavailable")), "{answer}");
    assert_eq!(answer["details"]["storage"], "worker", "{answer}");
    assert_eq!(retry.as_deref(), Some("30"));
    assert!(answer["message"].as_str().unwrap().contains("No space left on device"), "{answer}");
    let (status, _, _) = api.get("/deployments/full-state").await;
    assert_eq!(status, 404, "nothing of the refused submit is stored");
    assert_eq!(metric(&api, "slipway_storage_faults_total{storage=\"worker\"}").await, 1.0);
    let warnings = readyz_warnings(&api).await;
    assert!(warnings.iter().any(|w| w.contains("state folder") && w.contains("No space left")), "{warnings:?}");
    let log = std::fs::read_to_string(db.path("api.log")).unwrap();
    assert!(log.contains("storage cannot be written"), "{log}");

    std::fs::remove_file(filler).unwrap();
    let (status, _, answer) = submit(&api, "full-state", &demo_at("full.example.org")).await;
    assert_eq!(status, 202, "with room again the same submit is accepted: {answer}");
}

#[tokio::test]
async fn a_full_database_disk_is_503_storage_unavailable_naming_the_database_and_stores_nothing() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let disk = db.path("full-db");
    let tmpfs = Tmpfs::mount(&disk, "8m");
    let file = disk.join("slipway.db");
    let port = free_port();
    let mut api_command = command(&binary("slipway-api"), &db, port);
    api_command.env("DATABASE_URL", format!("sqlite://{}", file.display()));
    let _api = start(api_command, &db, "api.log");
    let api = Api::connect(&db, port).await;
    let (status, _, answer) = submit(&api, "before", &demo()).await;
    assert_eq!(status, 202, "{answer}");

    // An empty log, so that the next commit has to grow it on a full disk.
    let out = Command::new("sqlite3").arg(&file).arg("PRAGMA wal_checkpoint(TRUNCATE)").output().unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).starts_with("0|"), "{out:?}");
    let filler = tmpfs.fill();
    let (status, retry, answer) = submit(&api, "full-db", &demo()).await;
    assert_eq!((status, answer["error"].as_str()), (503, Some("storage_unavailable")), "{answer}");
    assert_eq!(answer["details"]["storage"], "database", "{answer}");
    assert_eq!(retry.as_deref(), Some("30"));
    let (status, _, _) = api.get("/deployments/full-db").await;
    assert_eq!(status, 404, "nothing of the refused submit is stored");
    assert_eq!(metric(&api, "slipway_storage_faults_total{storage=\"database\"}").await, 1.0);
    let warnings = readyz_warnings(&api).await;
    assert!(warnings.iter().any(|w| w.contains("database's disk")), "{warnings:?}");

    std::fs::remove_file(filler).unwrap();
    let (status, _, answer) = submit(&api, "full-db", &demo()).await;
    assert_eq!(status, 202, "with room again the same submit is accepted: {answer}");
    let (status, _, listed) = api.get("/deployments?ids=before,full-db").await;
    assert_eq!(status, 200);
    assert_eq!(listed["deployments"].as_array().map(Vec::len), Some(2), "{listed}");
}
