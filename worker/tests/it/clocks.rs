//! One clock for the fleet (jobs/src/clock.rs), with real processes whose clocks are
//! skewed by libfaketime (Debian's `faketime`, preloaded into the process
//! alone, its monotonic clock left true as NTP leaves it):
//!
//! - on PostgreSQL, an api 300 s ahead queues builds and names evals that a
//!   worker with a true clock runs at once, stores `queued_at` and build ids
//!   on the database's clock, and says in `/readyz` and a metric that its
//!   host's clock is off;
//! - on PostgreSQL, a worker 30 days ahead sweeps nothing that finished a
//!   moment ago (`RETENTION` is counted on the database's clock);
//! - on both engines, a worker whose wall clock is stepped 2 hours during a
//!   deploy reports the deploy's real durations.
//!
//! On SQLite every process runs on the host that holds the file, so a
//! skew between processes cannot arise outside such a preload: the skew
//! cases run on PostgreSQL, the step on both.

use crate::common;

use common::{binary, command, demo, free_port, slow_source, slow_worker, start, wait_build, wait_for, Api};
use serde_json::Value;
use slipway_jobs::on_both_engines;
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::TestDatabase;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// libfaketime, as Debian's `faketime` package installs it (the variant
/// for programs with threads).
const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// Runs `cmd` with its wall clock at `offset` from the host's (`+300s`,
/// `+30d`), its monotonic clock untouched.
fn skewed(cmd: &mut Command, offset: &str) {
    assert!(Path::new(FAKETIME).exists(), "{FAKETIME} is missing: scripts/install-deps --browser installs faketime");
    cmd.env("LD_PRELOAD", FAKETIME).env("FAKETIME", offset).env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
}

/// The host's wall clock, Unix ms.
fn host_now_ms() -> i64 {
    (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}

/// Unix ms of an RFC 3339 text.
fn ms_of(text: &Value) -> i64 {
    let at = time::OffsetDateTime::parse(text.as_str().unwrap(), &time::format_description::well_known::Rfc3339);
    (at.unwrap().unix_timestamp_nanos() / 1_000_000) as i64
}

/// Unix ms of a build id's stamp (`<deployment>.<YYYYMMDDTHHMMSSZ>.<suffix>`).
fn stamp_ms(build_id: &str) -> i64 {
    let stamp = build_id.split('.').nth(1).unwrap();
    let format = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let at = time::PrimitiveDateTime::parse(stamp, &format).unwrap().assume_utc();
    (at.unix_timestamp_nanos() / 1_000_000) as i64
}

/// The value of the first series of `family` in the scrape of `api`, with its labels.
async fn gauge(api: &Api, family: &str) -> (String, f64) {
    let text = api.http.get(format!("{}/metrics", api.base)).send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with(family))
        .find_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .unwrap_or_else(|| panic!("no {family} in the scrape: {text}"))
}

async fn warnings(api: &Api) -> Vec<String> {
    let (status, _, ready) = api.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    ready["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn an_api_whose_clock_is_ahead_queues_work_that_runs_at_once_and_says_its_clock_is_off() {
    let db = TestDatabase::new(Engine::Postgres).await;
    let (port, ahead_port) = (free_port(), free_port());
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let mut ahead = command(&binary("slipway-api"), &db, ahead_port);
    skewed(&mut ahead, "+300s");
    let _ahead = start(ahead, &db, "api-ahead.log");
    let mut worker = command(&binary("slipway-worker"), &db, port);
    worker.arg("work");
    let _worker = start(worker, &db, "worker.log");
    let (api, api_ahead) = (Api::connect(&db, port).await, Api::connect(&db, ahead_port).await);
    wait_for("a live worker of the nix queue", Duration::from_secs(60), || async {
        let (_, _, ready) = api.get("/readyz").await;
        let q = ready["queues"].as_array()?.iter().find(|q| q["queue"] == "nix")?.clone();
        (q["workers"].as_i64()? > 0).then_some(())
    })
    .await;

    // The names eval and the build the api ahead queues are due at once.
    let (status, answer) = api_ahead.submit("ahead", &demo()).await.unwrap();
    assert_eq!(status, 202, "{answer}");
    assert!(answer.get("names_skipped").is_none(), "the names eval was not run at once: {answer}");
    assert!(answer["names"]["nodes"].as_array().is_some_and(|n| !n.is_empty()), "{answer}");
    let build_id = answer["build_id"].as_str().unwrap().to_owned();
    let path = format!("/builds/{build_id}");
    let build = wait_build(&api, &path, "the build to start", &["running", "succeeded", "failed"]).await;

    // Stored times and the build id's stamp are the database's, not the api's.
    let now = host_now_ms();
    let queued = ms_of(&build["queued_at"]);
    assert!((queued - now).abs() < 30_000, "queued_at {} is {} ms from now", build["queued_at"], queued - now);
    assert!((stamp_ms(&build_id) - now).abs() < 30_000, "build id {build_id} is stamped off the fleet's clock");

    // The api ahead says so; the other does not.
    let said = warnings(&api_ahead).await;
    assert!(said.iter().any(|w| w.contains("ahead of the database") && w.contains("NTP")), "{said:?}");
    let (series, skew) = gauge(&api_ahead, "slipway_clock_skew_seconds{").await;
    assert!((290.0..310.0).contains(&skew) && series.contains("host=\""), "{series} {skew}");
    let log = std::fs::read_to_string(db.path("api-ahead.log")).unwrap();
    assert!(log.contains("this host's clock is off from the database's"), "{log}");
    let said = warnings(&api).await;
    assert!(!said.iter().any(|w| w.contains("database's (more than")), "{said:?}");
    let (_, skew) = gauge(&api, "slipway_clock_skew_seconds{").await;
    assert!(skew.abs() < 2.0, "{skew}");
}

#[tokio::test]
async fn a_worker_whose_clock_is_a_month_ahead_sweeps_nothing_that_finished_a_moment_ago() {
    let db = TestDatabase::new(Engine::Postgres).await;
    let source = db.path("slow-source");
    slow_source(&source, 0);
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let mut worker = slow_worker(&db, port, &source);
    worker.env("RETENTION", "14d");
    let mut first = start(worker, &db, "worker.log");
    let api = Api::connect(&db, port).await;
    let (status, answer) = api.submit("recent", &demo()).await.unwrap();
    assert_eq!(status, 202, "{answer}");
    let build_id = answer["build_id"].as_str().unwrap().to_owned();
    let build = wait_build(&api, &format!("/builds/{build_id}"), "the build to end", &["succeeded"]).await;
    assert!(build["log"].as_str().is_some_and(|l| l.contains("deploying")), "{build}");
    let work = db.path("state").join("builds").join(&build_id);
    assert!(work.is_dir(), "{} is missing", work.display());
    first.kill();

    let mut ahead = slow_worker(&db, port, &source);
    ahead.env("RETENTION", "14d");
    skewed(&mut ahead, "+30d");
    let _ahead = start(ahead, &db, "worker-ahead.log");
    wait_for("the worker ahead to run its retention sweep", Duration::from_secs(60), || async {
        let log = std::fs::read_to_string(db.path("worker-ahead.log")).unwrap_or_default();
        log.contains("retention sweep").then_some(())
    })
    .await;
    assert!(work.is_dir(), "the worker a month ahead swept a build that finished a moment ago");
    let (_, _, build) = api.get(&format!("/builds/{build_id}")).await;
    assert!(build["log"].as_str().is_some_and(|l| l.contains("deploying")), "its log was cleared: {build}");
}

/// A deploy during which the worker's wall clock is stepped 2 hours ahead
/// (a libfaketime offset read from a file, changed mid-run) reports the
/// durations it really took.
async fn a_wall_clock_step_during_a_deploy_leaves_its_durations_true(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let source = db.path("slow-source");
    slow_source(&source, 3);
    let offset = db.path("faketime-offset");
    std::fs::write(&offset, "+0\n").unwrap();
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let mut worker = slow_worker(&db, port, &source);
    skewed(&mut worker, "+0");
    worker.env_remove("FAKETIME").env("FAKETIME_TIMESTAMP_FILE", &offset).env("FAKETIME_CACHE_DURATION", "1");
    let _worker = start(worker, &db, "worker.log");
    let api = Api::connect(&db, port).await;
    let (status, answer) = api.submit("stepped", &demo()).await.unwrap();
    assert_eq!(status, 202, "{answer}");
    let path = format!("/builds/{}", answer["build_id"].as_str().unwrap());
    wait_for("the effect to start", Duration::from_secs(60), || async {
        let (_, _, b) = api.get(&path).await;
        b["log"].as_str().is_some_and(|l| l.contains("deploying")).then_some(())
    })
    .await;
    std::fs::write(&offset, "+2h\n").unwrap();
    let build = wait_build(&api, &path, "the build to end", &["succeeded"]).await;
    let timings = if build["timings"].is_object() { &build["timings"] } else { &build["report"]["timings"] };
    for part in ["wall_ms", "effect_ms"] {
        let ms = timings[part].as_f64().unwrap_or_else(|| panic!("no {part}: {build}"));
        assert!((0.0..600_000.0).contains(&ms), "{part} is {ms} ms after a 2 h step: {timings}");
    }
    let took = ms_of(&build["finished_at"]) - ms_of(&build["queued_at"]);
    assert!((0..600_000).contains(&took), "finished_at is {took} ms after queued_at: {build}");
}

on_both_engines!(a_wall_clock_step_during_a_deploy_leaves_its_durations_true);
