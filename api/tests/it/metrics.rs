//! `GET /metrics` (docs/METRICS.md) through the router: requests counted by
//! route template with bounded labels that never carry an id, the metrics
//! token, the queue-cap refusals and the fleet's gauges read from the
//! database at the scrape.

use crate::common;

use axum::http::{Method, StatusCode};
use common::{all, demo, harness, harness_with, Harness};
use serde_json::json;
use slipway_jobs::store::Engine;
use std::collections::BTreeSet;

/// The scrape's text, with `bearer` when given.
async fn scrape(h: &Harness, bearer: Option<&str>) -> (StatusCode, String) {
    let (status, body) = h.call(Method::GET, "/metrics", bearer, None).await;
    (status, body["raw"].as_str().unwrap_or_default().to_owned())
}

/// Every sample line of `family` (not its `_bucket`/`_sum`/`_count` lines
/// unless `family` names them): `(labels, value)`.
fn samples<'t>(text: &'t str, family: &str) -> Vec<(&'t str, &'t str)> {
    text.lines()
        .filter_map(|l| l.strip_prefix(family))
        .filter_map(|rest| {
            let (labels, value) = match rest.strip_prefix('{') {
                Some(inner) => inner.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            Some((labels, value))
        })
        .collect()
}

/// The value of label `name` in a `k="v",…` list.
fn label<'t>(labels: &'t str, name: &str) -> Option<&'t str> {
    labels.split("\",").find_map(|kv| kv.strip_prefix(&format!("{name}=\""))).map(|v| v.trim_end_matches('"'))
}

/// Many distinct ids, paths, query strings and methods make no new series:
/// the route label is a template of the router or `unmatched`, the method
/// one of a fixed list or `other`, and no id appears anywhere in the scrape.
#[tokio::test]
async fn request_labels_stay_bounded_and_never_carry_an_id_however_many_ids_are_requested() {
    let h = harness(Engine::Sqlite).await;
    let token = all();
    let brew = Method::from_bytes(b"BREW").unwrap();
    for n in 0..60 {
        let id = format!("hidden-id-{n}");
        let build = format!("hidden-id-{n}.20260101T000000Z.abc{n:03}");
        for (method, uri) in [
            (Method::GET, format!("/deployments/{id}")),
            (Method::GET, format!("/deployments/{id}/builds?limit={n}")),
            (Method::GET, format!("/builds/{build}")),
            (Method::GET, format!("/sbom/{id}?node=hidden-node-{n}")),
            (Method::GET, format!("/no/such/hidden-path-{n}")),
            (Method::PUT, format!("/deployments/{id}/preview")),
            (brew.clone(), format!("/deployments/{id}")),
            (Method::from_bytes(format!("HIDDENMETHOD{n}").as_bytes()).unwrap(), "/healthz".to_owned()),
        ] {
            h.call(method, &uri, Some(&token), None).await;
        }
    }
    let (status, text) = scrape(&h, None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(!text.contains("hidden"), "an id, a path or a method of a request is in the scrape:\n{text}");
    let requests = samples(&text, "slipway_http_requests_total");
    let (mut routes, mut methods, mut series) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for (labels, _) in &requests {
        routes.insert(label(labels, "route").unwrap().to_owned());
        methods.insert(label(labels, "method").unwrap().to_owned());
        series.insert(labels.to_owned());
    }
    let want_routes: BTreeSet<String> = [
        "/deployments/{id}",
        "/deployments/{id}/builds",
        "/builds/{id}",
        "/sbom/{id}",
        "unmatched",
        "/deployments/{id}/preview",
        "/healthz",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(routes, want_routes, "{text}");
    assert_eq!(methods, ["GET", "PUT", "other"].into_iter().map(str::to_owned).collect(), "{text}");
    // 480 requests, a dozen series: each route with the statuses it answered.
    assert!(series.len() <= 12, "{} series for 480 requests:\n{text}", series.len());
    let counted: u64 = requests.iter().map(|(_, v)| v.parse::<u64>().unwrap()).sum();
    assert_eq!(counted, 480, "{text}");
    let durations = samples(&text, "slipway_http_request_duration_seconds_count");
    assert_eq!(durations.iter().map(|(_, v)| v.parse::<u64>().unwrap()).sum::<u64>(), 480, "{text}");
}

/// With `SLIPWAY_METRICS_TOKEN` set, a scrape without it (or with an api
/// token) is refused in the JSON error shape, and one with it answered.
#[tokio::test]
async fn the_metrics_token_when_set_is_the_only_way_in() {
    let h = harness_with(Engine::Sqlite, &[("SLIPWAY_METRICS_TOKEN", "metrics-token-of-the-test")]).await;
    for bearer in [None, Some(all())] {
        let (status, body) = h.call(Method::GET, "/metrics", bearer.as_deref(), None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert_eq!(body["error"], "unauthorized", "{body}");
    }
    let (status, text) = scrape(&h, Some("metrics-token-of-the-test")).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(text.contains("# TYPE slipway_http_requests_total counter"), "{text}");
    assert!(!text.contains("metrics-token-of-the-test"), "{text}");
}

/// A submit past `QUEUE_SIZE` counts one `queue_full` refusal; the queued
/// build shows in the `builds` queue's depth, with no worker alive and no
/// slot in use, read from the database at the scrape.
async fn a_refused_submit_and_the_waiting_build_show_in_the_scrape(engine: Engine) {
    let h = harness_with(engine, &[("QUEUE_SIZE", "1")]).await;
    let (status, text) = scrape(&h, None).await;
    assert_eq!(status, StatusCode::OK);
    for zero in [
        "slipway_admission_refusals_total{reason=\"queue_full\"} 0",
        "slipway_admission_refusals_total{reason=\"nix_busy\"} 0",
        "slipway_queue_depth{queue=\"builds\"} 0",
        "slipway_queue_oldest_waiting_seconds{queue=\"builds\"} 0",
        "slipway_workers_alive 0",
        "slipway_slots_in_use{pool=\"builds\"} 0",
        "slipway_slots_in_use{pool=\"nix\"} 0",
    ] {
        assert!(text.contains(zero), "{zero} missing from:\n{text}");
    }
    let (status, body) = h.put("first", &json!({ "configuration": demo() })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (status, body) = h.put("second", &json!({ "configuration": demo() })).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"], "queue_full", "{body}");
    let (_, text) = scrape(&h, None).await;
    for want in [
        "slipway_admission_refusals_total{reason=\"queue_full\"} 1",
        "slipway_queue_depth{queue=\"builds\"} 1",
        "slipway_queue_depth{queue=\"nix\"} 0",
        "slipway_workers_alive 0",
    ] {
        assert!(text.contains(want), "{want} missing from:\n{text}");
    }
    assert_eq!(samples(&text, "slipway_queue_depth").len(), 5, "builds, nix, callbacks, readiness, rollouts:\n{text}");
}

slipway_jobs::on_both_engines!(a_refused_submit_and_the_waiting_build_show_in_the_scrape);

/// The finite `le` bounds of the request latency histogram in a scrape.
fn latency_bounds(text: &str) -> Vec<f64> {
    let mut bounds: Vec<f64> = samples(text, "slipway_http_request_duration_seconds_bucket")
        .iter()
        .filter_map(|(labels, _)| label(labels, "le"))
        .filter(|le| *le != "+Inf")
        .map(|le| le.parse().unwrap())
        .collect();
    bounds.sort_by(f64::total_cmp);
    bounds.dedup();
    bounds
}

#[tokio::test]
async fn the_latency_buckets_reach_from_one_millisecond_to_the_request_timeout_and_nix_timeout() {
    for (request, nix, ceiling) in [("30", "300", 300.0), ("900", "60", 900.0), ("45", "20", 45.0)] {
        let h = harness_with(Engine::Sqlite, &[("SLIPWAY_REQUEST_TIMEOUT", request), ("NIX_TIMEOUT", nix)]).await;
        let (status, _) = h.call(Method::GET, "/healthz", None, None).await;
        assert_eq!(status, StatusCode::OK);
        let (_, text) = scrape(&h, None).await;
        let bounds = latency_bounds(&text);
        let what = format!("SLIPWAY_REQUEST_TIMEOUT={request} NIX_TIMEOUT={nix}: {bounds:?}");
        assert_eq!(bounds.first(), Some(&0.001), "{what}");
        let last = *bounds.last().unwrap();
        assert!(last >= ceiling, "the last finite bucket is under the longest a request may take: {what}");
        assert!(last < ceiling * 2.5, "{what}");
    }
}
