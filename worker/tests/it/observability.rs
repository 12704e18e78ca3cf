//! What an operator observes of a real deploy (docs/METRICS.md,
//! docs/CONFIGURATION.md "Logs"): the real api and worker on either engine, with
//! JSON logs and the worker's metrics listener. The api's `/metrics` and the
//! worker's are scraped while a deploy waits, is refused past the queue's
//! cap, runs and ends, and every family moves; then every line both
//! processes wrote is parsed as JSON, and the request's and the job's span
//! fields are found. A database outage is logged once by the worker.
//! Polls with deadlines; never sleeps to synchronise.

use crate::common;

use common::{binary, command, demo, free_port, slow_source, slow_worker, start, Api};
use serde_json::Value;
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::TestDatabase;
use std::time::Duration;

/// `GET <base>/metrics`: the text, or `None` when it did not answer 200.
async fn scrape(http: &reqwest::Client, base: &str) -> Option<String> {
    let r = http.get(format!("{base}/metrics")).send().await.ok()?;
    (r.status() == 200).then_some(())?;
    r.text().await.ok()
}

/// The value of the sample `series` (a name with its labels as rendered).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Scrapes `base` until `series` satisfies `ok`; returns that scrape.
async fn wait_metric(http: &reqwest::Client, base: &str, series: &str, ok: impl Fn(f64) -> bool) -> String {
    let last = std::sync::Mutex::new(String::new());
    let found = common::poll(Duration::from_secs(60), || {
        let (http, base, last, ok) = (http.clone(), base.to_owned(), &last, &ok);
        async move {
            let text = scrape(&http, &base).await?;
            let hit = value(&text, series).is_some_and(ok);
            *last.lock().unwrap() = text.clone();
            hit.then_some(text)
        }
    })
    .await;
    found.unwrap_or_else(|| {
        panic!("{base}/metrics never showed {series} as wanted; last scrape:\n{}", last.lock().unwrap())
    })
}

/// Every line of `log` parsed as JSON (a line that is not JSON fails the test).
fn json_lines(db: &TestDatabase, log: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(db.path(log)).unwrap();
    assert!(!text.trim().is_empty(), "{log} is empty");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("a line of {log} is not JSON ({e}): {l}")))
        .collect()
}

async fn a_deploy_moves_every_metric_family_and_logs_its_request_and_job_spans_as_json(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let source = db.path("slow-source");
    slow_source(&source, 4);
    let (port, metrics_port) = (free_port(), free_port());
    let mut api_cmd = command(&binary("slipway-api"), &db, port);
    api_cmd.env("SLIPWAY_LOG_FORMAT", "json").env("QUEUE_SIZE", "1").env_remove("SLIPWAY_LOG").env_remove("RUST_LOG");
    let mut api_process = start(api_cmd, &db, "api.log");
    let api = Api::connect(&db, port).await;
    let http = reqwest::Client::new();
    let worker_base = format!("http://127.0.0.1:{metrics_port}");

    // No worker yet: the deploy waits on the `builds` queue, and a second
    // submit is refused past QUEUE_SIZE.
    let text = scrape(&http, &api.base).await.expect("the api's /metrics");
    assert_eq!(value(&text, "slipway_workers_alive"), Some(0.0), "{text}");
    let (status, accepted) = api.submit("observed", &demo()).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    let build = accepted["build_id"].as_str().unwrap().to_owned();
    wait_metric(&http, &api.base, "slipway_queue_depth{queue=\"builds\"}", |v| v == 1.0).await;
    wait_metric(&http, &api.base, "slipway_queue_oldest_waiting_seconds{queue=\"builds\"}", |v| v >= 1.0).await;
    let (status, refused) = api.submit("refused", &demo()).await.unwrap();
    assert_eq!((status, refused["error"].as_str()), (503, Some("queue_full")), "{refused}");
    wait_metric(&http, &api.base, "slipway_admission_refusals_total{reason=\"queue_full\"}", |v| v == 1.0).await;

    // A worker takes it: alive, one build slot in use while the effect runs.
    let mut worker_cmd = slow_worker(&db, port, &source);
    worker_cmd
        .env("SLIPWAY_LOG_FORMAT", "json")
        .env("SLIPWAY_METRICS_ADDR", format!("127.0.0.1:{metrics_port}"))
        .env("BUILD_SLOTS", "1")
        .env_remove("SLIPWAY_LOG")
        .env_remove("RUST_LOG");
    let mut worker_process = start(worker_cmd, &db, "worker.log");
    let during = wait_metric(&http, &api.base, "slipway_slots_in_use{pool=\"builds\"}", |v| v == 1.0).await;
    assert_eq!(value(&during, "slipway_workers_alive"), Some(1.0), "{during}");
    assert_eq!(value(&during, "slipway_queue_depth{queue=\"builds\"}"), Some(0.0), "{during}");
    let succeeded = "slipway_builds_total{kind=\"deploy\",outcome=\"succeeded\"}";
    let running = scrape(&http, &worker_base).await.expect("the worker's /metrics");
    assert_eq!(value(&running, succeeded), Some(0.0), "{running}");

    // It ends: the worker counts it with its duration, the slot is free.
    api.wait_state("observed", "active", Duration::from_secs(60)).await;
    let ended = wait_metric(&http, &worker_base, succeeded, |v| v == 1.0).await;
    let count = "slipway_build_duration_seconds_count{kind=\"deploy\",outcome=\"succeeded\"}";
    assert_eq!(value(&ended, count), Some(1.0), "{ended}");
    let sum = value(&ended, "slipway_build_duration_seconds_sum{kind=\"deploy\",outcome=\"succeeded\"}").unwrap();
    assert!((4.0..60.0).contains(&sum), "the 4 s deploy ran {sum} s:\n{ended}");
    let after = wait_metric(&http, &api.base, "slipway_slots_in_use{pool=\"builds\"}", |v| v == 0.0).await;
    for series in [
        "slipway_http_requests_total{route=\"/deployments/{id}\",method=\"PUT\",status=\"202\"}",
        "slipway_http_requests_total{route=\"/deployments/{id}\",method=\"PUT\",status=\"503\"}",
        "slipway_http_request_duration_seconds_count{route=\"/deployments/{id}\",method=\"PUT\"}",
    ] {
        assert!(value(&after, series).is_some_and(|v| v >= 1.0), "{series} did not move:\n{after}");
    }
    for text in [&after, &ended] {
        assert!(!text.contains("observed") && !text.contains(&build), "an id is in a scrape:\n{text}");
        assert!(!text.contains(&api.token) && !text.contains(common::SECRET), "a secret is in a scrape");
    }

    // Every line both wrote is JSON; the submit's request span and the
    // deploy's job span carry their dotted fields.
    api_process.kill();
    worker_process.kill();
    let api_lines = json_lines(&db, "api.log");
    let answered = api_lines
        .iter()
        .find(|l| {
            l["message"] == "answered" && l["span"]["http.method"] == "PUT" && l["span"]["deployment.id"] == "observed"
        })
        .unwrap_or_else(|| panic!("no access line of the submit in {api_lines:#?}"));
    assert_eq!(answered["span"]["name"], "request", "{answered}");
    assert_eq!(answered["span"]["http.route"], "/deployments/{id}", "{answered}");
    assert_eq!(answered["status"], 202, "{answered}");
    assert_eq!(answered["target"], "slipway_api::access", "{answered}");
    assert!(answered["latency_ms"].as_f64().is_some_and(|ms| ms > 0.0), "latency_ms is not a number: {answered}");
    let worker_lines = json_lines(&db, "worker.log");
    let job_lines: Vec<&Value> = worker_lines.iter().filter(|l| l["span"]["build.id"] == build.as_str()).collect();
    assert!(job_lines.iter().any(|l| l["message"] == "build started"), "{worker_lines:#?}");
    assert!(job_lines.iter().any(|l| l["message"] == "build succeeded"), "{worker_lines:#?}");
    // Each line of the build's jobs (its deploy, then the readiness probes
    // of its instances, which run under the same build id) sits in the span
    // of its job, named by kind, with the deployment and the worker.
    for line in job_lines {
        let job = line["spans"]
            .as_array()
            .and_then(|spans| spans.iter().find(|s| s["job.kind"].is_string()))
            .unwrap_or_else(|| panic!("a line outside any job's span: {line}"));
        let kind = job["job.kind"].as_str().unwrap();
        let deploy_line = ["build started", "build succeeded"].contains(&line["message"].as_str().unwrap_or(""));
        assert!(kind == "deploy" || (kind == "readiness" && !deploy_line), "{line}");
        assert_eq!(job["deployment.id"], "observed", "{line}");
        assert!(job["worker.name"].as_str().is_some_and(|n| n.starts_with("worker@")), "{line}");
    }
    let all = format!("{api_lines:?}{worker_lines:?}");
    assert!(!all.contains(&api.token) && !all.contains(common::SECRET), "a secret is in the logs");
}

slipway_jobs::on_both_engines!(a_deploy_moves_every_metric_family_and_logs_its_request_and_job_spans_as_json);

/// `SLIPWAY_LOG_FORMAT` other than `text` or `json` stops either binary at
/// start, naming the variable and the value.
#[tokio::test]
async fn an_unknown_log_format_stops_either_binary_at_start_naming_it() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    for (bin, args) in [("slipway-api", &["serve"][..]), ("slipway-worker", &["work"][..])] {
        let out =
            command(&binary(bin), &db, free_port()).args(args).env("SLIPWAY_LOG_FORMAT", "yaml").output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bin} started: {stderr}");
        assert!(stderr.contains("SLIPWAY_LOG_FORMAT: expected text or json (got \"yaml\")"), "{bin}: {stderr}");
    }
}

/// While PostgreSQL refuses the worker's connections, its queue workers'
/// streams fail and are restarted again and again: the failure is logged
/// once, by the worker's supervisor, never again by apalis at each restart
/// (the default log filter; the supervisor's debug lines show the restarts).
#[tokio::test]
async fn a_database_outage_is_logged_once_by_the_worker_however_often_its_queue_workers_restart() {
    let db = TestDatabase::new(Engine::Postgres).await;
    let mut cmd = command(&binary("slipway-worker"), &db, free_port());
    let filter = format!("{},slipway_worker=debug", slipway_jobs::config::DEFAULT_LOG_FILTER);
    cmd.arg("work").env("SLIPWAY_LOG", filter).env_remove("RUST_LOG").env_remove("SLIPWAY_LOG_FORMAT");
    let _worker = start(cmd, &db, "worker.log");
    let log = || std::fs::read_to_string(db.path("worker.log")).unwrap_or_default();
    common::wait_for("the worker to start", Duration::from_secs(30), || async {
        log().contains("worker started").then_some(())
    })
    .await;
    db.accept_connections(false).await;
    common::wait_for("three restarts of a queue worker", Duration::from_secs(60), || async {
        (log().matches("the queue worker stopped again").count() >= 2).then_some(())
    })
    .await;
    db.accept_connections(true).await;
    let text = log();
    assert_eq!(text.matches("the queue worker stopped with an error").count(), 1, "{text}");
    for apalis in ["WorkerError", "worker future ended with error"] {
        assert!(!text.contains(apalis), "apalis logged the failure too ({apalis}):\n{text}");
    }
}
