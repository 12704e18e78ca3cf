//! A delete's callback (DL-2) as the api answers it: every URL of
//! `testdata/cases/callback-urls.json` through a real `DELETE`, and the
//! shapes of a callback a front-end can get wrong. A refused callback never
//! blocks the delete.

use crate::common;

use axum::http::{Method, StatusCode};
use common::{all, case, demo, harness_with, Harness};
use serde_json::{json, Value};
use slipway_jobs::store::{Engine, Q};

async fn delete(h: &Harness, body: &Value) -> (StatusCode, Value) {
    h.call(Method::DELETE, "/deployments/demo", Some(&all()), Some(body.to_string().into_bytes())).await
}

/// The callback URL stored on the deployment's destroy build, if any.
async fn stored_url(h: &Harness) -> Option<String> {
    let mut conn = h.db.acquire().await.unwrap();
    Q::new("SELECT callback_url FROM builds WHERE kind = 'destroy'")
        .fetch_optional(&mut conn)
        .await
        .unwrap()
        .and_then(|r| r.opt_text("callback_url").unwrap())
}

async fn every_callback_case_is_accepted_or_refused_on_delete_as_the_case_file_says(engine: Engine) {
    let cases = case("callback-urls.json");
    let origins: Vec<&str> = cases["allowed_origins"].as_array().unwrap().iter().map(|o| o.as_str().unwrap()).collect();
    let h = harness_with(engine, &[("SLIPWAY_ALLOWED_ORIGINS", &origins.join(","))]).await;
    let (status, body) = h.put("demo", &json!({ "configuration": demo() })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let mut destroy = None;
    for url in cases["allowed"].as_array().unwrap() {
        let (status, answer) = delete(&h, &json!({ "callback_url": url, "callback_token": "t0k3n" })).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{url}: {answer}");
        assert_eq!(answer["callback"], json!({ "accepted": true, "reason": null }), "{url}");
        assert_eq!(stored_url(&h).await.as_deref(), url.as_str(), "{url} was not stored");
        // Repeats answer the same destroy (DL-1).
        assert_eq!(*destroy.get_or_insert_with(|| answer["build_id"].clone()), answer["build_id"]);
    }
    let last_allowed = stored_url(&h).await;
    for url in cases["refused"].as_array().unwrap() {
        let (status, answer) = delete(&h, &json!({ "callback_url": url, "callback_token": "t0k3n" })).await;
        assert_eq!(status, StatusCode::ACCEPTED, "a refused callback blocked the delete: {url}: {answer}");
        assert_eq!(answer["callback"]["accepted"], false, "{url}: {answer}");
        let reason = answer["callback"]["reason"].as_str().unwrap_or_default();
        assert!(!reason.is_empty(), "{url}: no reason");
        assert!(!answer.to_string().contains("t0k3n"), "the answer repeats the token: {answer}");
        assert_eq!(stored_url(&h).await, last_allowed, "{url} replaced the stored callback");
        assert_eq!(answer["build_id"], destroy.clone().unwrap());
    }
}

slipway_jobs::on_both_engines!(every_callback_case_is_accepted_or_refused_on_delete_as_the_case_file_says);

async fn a_callback_without_its_other_half_or_with_a_token_that_cannot_be_a_header_is_refused(engine: Engine) {
    let h = harness_with(engine, &[("SLIPWAY_ALLOWED_ORIGINS", "https://panel.example.org")]).await;
    let (status, body) = h.put("demo", &json!({ "configuration": demo() })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let url = "https://panel.example.org/api/reconcile";
    let long = "x".repeat(5000);
    for (body, secret) in [
        (json!({ "callback_url": url }), None),
        (json!({ "callback_token": "lonely-token" }), Some("lonely-token")),
        (json!({ "callback_url": url, "callback_token": "" }), None),
        (json!({ "callback_url": url, "callback_token": "has space" }), Some("has space")),
        (json!({ "callback_url": url, "callback_token": "line\r\nX-Injected: 1" }), Some("X-Injected")),
        (json!({ "callback_url": url, "callback_token": long }), Some(long.as_str())),
        // A token of the wrong type is refused without being repeated.
        (json!({ "callback_url": url, "callback_token": 918273645 }), Some("918273645")),
        (json!({ "callback_url": url, "callback_token": { "k": "zq-not-a-string" } }), Some("zq-not-a-string")),
        (json!({ "callback_url": ["https://panel.example.org/x"], "callback_token": "t" }), None),
    ] {
        let (status, answer) = delete(&h, &body).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}: {answer}");
        assert_eq!(answer["callback"]["accepted"], false, "{body}: {answer}");
        assert!(answer["callback"]["reason"].as_str().is_some_and(|r| !r.is_empty()), "{answer}");
        if let Some(secret) = secret {
            assert!(!answer.to_string().contains(secret), "the answer repeats the token: {answer}");
        }
        assert_eq!(stored_url(&h).await, None);
    }
    // A field of the wrong type is named as such, also without its other half.
    for field in ["callback_url", "callback_token"] {
        let (_, answer) = delete(&h, &json!({ field: 5 })).await;
        let reason = answer["callback"]["reason"].as_str().unwrap_or_default();
        assert_eq!(reason, format!("{field} must be a string"), "{answer}");
    }
    // A body without a callback: `callback` is null.
    let (status, answer) = delete(&h, &json!({})).await;
    assert_eq!((status, &answer["callback"]), (StatusCode::ACCEPTED, &Value::Null), "{answer}");
    // A mistyped field refuses the callback, naming the field, and never the delete.
    let (status, answer) = delete(&h, &json!({ "callbackUrl": url, "callbackToken": "typo-token" })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(answer["callback"]["accepted"], false, "{answer}");
    let reason = answer["callback"]["reason"].as_str().unwrap();
    assert!(reason.contains("callbackUrl") && reason.contains("callback_url"), "{reason}");
    assert!(!answer.to_string().contains("typo-token"), "{answer}");
    // Not a JSON object: nothing is understood, nothing is done.
    let (status, answer) = delete(&h, &json!(["callback_url"])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["error"], "invalid_request");
}

async fn a_callback_to_a_private_address_is_refused_at_once_unless_private_pushes_are_allowed(engine: Engine) {
    let origins = "http://127.0.0.1:3000,http://[::1]:3000,http://10.1.2.3";
    for (allow, accepted) in [("false", false), ("true", true)] {
        let h =
            harness_with(engine, &[("SLIPWAY_ALLOWED_ORIGINS", origins), ("SLIPWAY_CALLBACK_ALLOW_PRIVATE", allow)])
                .await;
        let (status, body) = h.put("demo", &json!({ "configuration": demo() })).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        for url in ["http://127.0.0.1:3000/cb", "http://[::1]:3000/cb", "http://10.1.2.3/cb"] {
            let (status, answer) = delete(&h, &json!({ "callback_url": url, "callback_token": "t" })).await;
            assert_eq!(status, StatusCode::ACCEPTED, "{url}: {answer}");
            assert_eq!(answer["callback"]["accepted"], accepted, "{url} with private pushes {allow}: {answer}");
        }
    }
}

slipway_jobs::on_both_engines!(a_callback_to_a_private_address_is_refused_at_once_unless_private_pushes_are_allowed);

slipway_jobs::on_both_engines!(a_callback_without_its_other_half_or_with_a_token_that_cannot_be_a_header_is_refused);

/// The addresses of a row of the address table a delete's callback is
/// checked against: its first, a middle and its last one.
fn first_middle_last(b: &slipway_jobs::callback::Block) -> [std::net::IpAddr; 3] {
    use std::net::IpAddr;
    match (b.first(), b.last()) {
        (IpAddr::V4(f), IpAddr::V4(l)) => {
            let (f, l) = (u32::from(f), u32::from(l));
            [f, f + (l - f) / 2, l].map(|n| IpAddr::V4(n.into()))
        }
        (IpAddr::V6(f), IpAddr::V6(l)) => {
            let (f, l) = (u128::from(f), u128::from(l));
            [f, f + (l - f) / 2, l].map(|n| IpAddr::V6(n.into()))
        }
        _ => unreachable!("a row mixes IPv4 and IPv6"),
    }
}

/// The addresses just outside a row that no row of the table holds.
fn global_neighbours(b: &slipway_jobs::callback::Block) -> Vec<std::net::IpAddr> {
    use std::net::IpAddr;
    let around = match (b.first(), b.last()) {
        (IpAddr::V4(f), IpAddr::V4(l)) => [u32::from(f).checked_sub(1), u32::from(l).checked_add(1)]
            .into_iter()
            .flatten()
            .map(|n| IpAddr::V4(n.into()))
            .collect::<Vec<_>>(),
        (IpAddr::V6(f), IpAddr::V6(l)) => [u128::from(f).checked_sub(1), u128::from(l).checked_add(1)]
            .into_iter()
            .flatten()
            .map(|n| IpAddr::V6(n.into()))
            .collect(),
        _ => unreachable!("a row mixes IPv4 and IPv6"),
    };
    around.into_iter().filter(|ip| slipway_jobs::callback::block_of(*ip).is_none()).collect()
}

fn url_of(ip: std::net::IpAddr) -> String {
    match ip {
        std::net::IpAddr::V4(a) => format!("http://{a}"),
        std::net::IpAddr::V6(a) => format!("http://[{a}]"),
    }
}

async fn every_refused_range_of_the_address_table_is_refused_on_delete_at_its_first_middle_and_last_address(
    engine: Engine,
) {
    use slipway_jobs::callback::{Rule, BLOCKS};
    let rows: Vec<_> = BLOCKS.iter().filter(|b| b.rule == Rule::Refuse).collect();
    let refused: Vec<(String, &slipway_jobs::callback::Block)> =
        rows.iter().flat_map(|b| first_middle_last(b).map(|ip| (url_of(ip), *b))).collect();
    let accepted: Vec<String> = rows.iter().flat_map(|b| global_neighbours(b)).map(url_of).collect();
    assert!(accepted.len() > rows.len() / 2, "few rows have a global neighbour: {accepted:?}");
    let origins: Vec<&str> =
        refused.iter().map(|(u, _)| u.as_str()).chain(accepted.iter().map(String::as_str)).collect();
    let h = harness_with(engine, &[("SLIPWAY_ALLOWED_ORIGINS", &origins.join(","))]).await;
    let (status, body) = h.put("demo", &json!({ "configuration": demo() })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    for (origin, row) in &refused {
        let url = format!("{origin}/cb");
        let (status, answer) = delete(&h, &json!({ "callback_url": url, "callback_token": "t0k3n" })).await;
        assert_eq!(status, StatusCode::ACCEPTED, "a refused callback blocked the delete: {url}: {answer}");
        assert_eq!(answer["callback"]["accepted"], false, "{url} ({row}) was accepted: {answer}");
        let reason = answer["callback"]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("an address of a refused kind"), "{url}: {reason}");
    }
    for origin in &accepted {
        let url = format!("{origin}/cb");
        let (status, answer) = delete(&h, &json!({ "callback_url": url, "callback_token": "t0k3n" })).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{url}: {answer}");
        assert_eq!(answer["callback"], json!({ "accepted": true, "reason": null }), "{url}");
    }
}

slipway_jobs::on_both_engines!(
    every_refused_range_of_the_address_table_is_refused_on_delete_at_its_first_middle_and_last_address
);

async fn the_reported_benchmarking_and_cloud_platform_addresses_are_refused_on_delete(engine: Engine) {
    let urls = ["http://198.18.0.1", "http://168.63.129.16", "http://100.100.100.200", "http://[fd00:ec2::254]"];
    let h = harness_with(engine, &[("SLIPWAY_ALLOWED_ORIGINS", &urls.join(","))]).await;
    let (status, body) = h.put("demo", &json!({ "configuration": demo() })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    for (url, names) in urls.iter().zip(["benchmarking (198.18.0.0/15)", "Azure", "Alibaba", "AWS"]) {
        let (status, answer) = delete(&h, &json!({ "callback_url": format!("{url}/cb"), "callback_token": "t" })).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{url}: {answer}");
        assert_eq!(answer["callback"]["accepted"], false, "{url}: {answer}");
        assert!(answer["callback"]["reason"].as_str().unwrap_or_default().contains(names), "{url}: {answer}");
    }
}

slipway_jobs::on_both_engines!(the_reported_benchmarking_and_cloud_platform_addresses_are_refused_on_delete);
