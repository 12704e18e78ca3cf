//! Q-3 across api replicas: two `slipway-api` processes on one PostgreSQL,
//! many submits at once to distinct deployments, spread over both. Exactly
//! `QUEUE_SIZE` are accepted, every other one is refused whole with
//! `503 queue_full`, and the queue never holds more than `QUEUE_SIZE` builds,
//! each with its job. Run with a small bound (every submit near it counts
//! under the exclusive lock) and with one above PostgreSQL's
//! `max_connections` (the first submits commit under the shared lock, the
//! last ones under the exclusive lock, all at once).

use crate::common;

use common::{binary, command, demo, free_port, start, Api};
use futures::StreamExt;
use slipway_jobs::store::{Engine, Q};
use slipway_jobs::test_support::TestDatabase;

/// How many rows `sql` counts in the test's database.
async fn count(db: &TestDatabase, sql: &str) -> i64 {
    let keys = std::collections::BTreeMap::from([("DATABASE_URL".to_owned(), db.url.clone())]);
    let store = slipway_jobs::store::open(&slipway_jobs::config::Config::from_keys(&keys).unwrap()).await.unwrap();
    let n = Q::new(sql).fetch_one(&mut store.acquire().await.unwrap()).await.unwrap().int("n").unwrap();
    store.close().await;
    n
}

async fn two_apis_admit_exactly_queue_size_submits_sent_at_once(queue_size: u32, submits: usize) {
    let db = TestDatabase::new(Engine::Postgres).await;
    let max_connections = count(&db, "SELECT current_setting('max_connections')::bigint AS n").await;
    let ports = [free_port(), free_port()];
    let _apis: Vec<_> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let mut cmd = command(&binary("slipway-api"), &db, *port);
            cmd.env("QUEUE_SIZE", queue_size.to_string());
            start(cmd, &db, &format!("api-{i}.log"))
        })
        .collect();
    let apis = [Api::connect(&db, ports[0]).await, Api::connect(&db, ports[1]).await];
    let configuration = demo();
    let sends = (0..submits).map(|i| {
        let (api, configuration) = (&apis[i % 2], &configuration);
        async move { api.submit(&format!("q{i}"), configuration).await.expect("the api answers") }
    });
    // 12 in flight per api, under its pool of 16 connections: near the
    // bound the submits' transactions take the admission lock one after
    // another, and a burst past the pool would wait out its 2 s acquire
    // timeout on a loaded machine (answered 503 service_unavailable).
    let answers: Vec<(u16, serde_json::Value)> = futures::stream::iter(sends).buffer_unordered(24).collect().await;
    let accepted = answers.iter().filter(|(status, _)| *status == 202).count();
    let unexpected: Vec<_> =
        answers.iter().filter(|(s, b)| *s != 202 && !(*s == 503 && b["error"] == "queue_full")).collect();
    if !unexpected.is_empty() {
        let logs: Vec<String> =
            (0..2).map(|i| std::fs::read_to_string(db.path(&format!("api-{i}.log"))).unwrap_or_default()).collect();
        panic!(
            "{} answers neither 202 nor 503 queue_full: {unexpected:?}\napi logs:\n{}",
            unexpected.len(),
            logs.join("\n")
        );
    }
    assert_eq!(
        accepted, queue_size as usize,
        "QUEUE_SIZE {queue_size}, {submits} submits over two apis (max_connections {max_connections})"
    );
    assert_eq!(count(&db, "SELECT COUNT(*) AS n FROM builds WHERE status = 'queued'").await, i64::from(queue_size));
    // A refused submit wrote nothing: no deployment row, no job.
    assert_eq!(count(&db, "SELECT COUNT(*) AS n FROM deployments").await, i64::from(queue_size));
    assert_eq!(
        count(&db, "SELECT COUNT(*) AS n FROM apalis.jobs WHERE job_type = 'builds'").await,
        i64::from(queue_size)
    );
    // Once full, both apis refuse before reading the body.
    for api in &apis {
        let (status, body) = api.submit("one-more", &configuration).await.unwrap();
        assert_eq!((status, body["error"].as_str()), (503, Some("queue_full")), "{body}");
    }
}

#[tokio::test]
async fn two_apis_admit_exactly_a_small_queue_size() {
    two_apis_admit_exactly_queue_size_submits_sent_at_once(5, 40).await;
}

#[tokio::test]
async fn two_apis_admit_exactly_a_queue_size_above_max_connections() {
    two_apis_admit_exactly_queue_size_submits_sent_at_once(110, 150).await;
}
