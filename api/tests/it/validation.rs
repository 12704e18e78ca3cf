//! `invalid_configuration` answers through the router, against a real
//! temporary database: what cannot reach a node is refused at submit with
//! its path, and the answer stays small however many problems a body has.

use crate::common;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use common::*;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use slipway_jobs::validate::{MAX_PROBLEMS, MAX_PROBLEM_TEXT};
use std::time::{Duration, Instant};
use tower::ServiceExt;

/// `PUT /deployments/demo` with `body`: the status, the answer's raw bytes and its JSON.
async fn submit(h: &Harness, body: Vec<u8>) -> (StatusCode, Vec<u8>, Value) {
    let req = Request::builder()
        .method(Method::PUT)
        .uri("/deployments/demo")
        .header(header::AUTHORIZATION, format!("Bearer {}", all()))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap();
    let res = h.router.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes().to_vec();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, bytes, value)
}

/// Rows written by submits: deployments, builds and apalis jobs.
async fn written(h: &Harness) -> [i64; 3] {
    [h.count("deployments").await, h.count("builds").await, h.count("jobs").await]
}

fn problems(body: &Value) -> &Vec<Value> {
    body["details"]["problems"].as_array().unwrap_or_else(|| panic!("no problems listed: {body}"))
}

/// Item 5: NUL cannot live in a Nix string, so it cannot reach a node
/// through any field. Wherever it sits (a free-text value, a list item, a
/// map key, a secret, a key the schema has no place for), the submit is
/// refused with that path, the sentence names the character and not the
/// value, and nothing is stored.
async fn a_nul_character_anywhere_is_refused_with_its_path_and_nothing_is_stored(engine: Engine) {
    let h = harness(engine).await;
    let secret = "hunter2-secret\u{0}tail";
    let mut config = demo();
    config["applications"]["mastodon"]["adminEmail"] = json!("x\u{0}@a.b");
    config["applications"]["mastodon"]["moderators"][0]["username"] = json!("al\u{0}ice");
    config["applications"]["mastodon"]["translationApiKey"] = json!(secret);
    config["applications"]["peertube"]["settings"]["instance"]["name"] = json!("\u{0}");
    config["applications"]["peertube"]["blockedInstances"] =
        json!({ "bad\u{0}.example": "spam", "ok.example": "a\u{0}" });
    config["str\u{0}ay"] = json!(1);
    let (status, raw, body) = submit(&h, json!({ "configuration": config }).to_string().into_bytes()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"], "invalid_configuration", "{body}");
    let nul: Vec<&Value> = problems(&body).iter().filter(|p| p["kind"] == "unsupported_character").collect();
    let mut paths: Vec<&str> = nul.iter().map(|p| p["path"].as_str().unwrap()).collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "/applications/mastodon/adminEmail",
            "/applications/mastodon/moderators/0/username",
            "/applications/mastodon/translationApiKey",
            "/applications/peertube/blockedInstances/bad\u{0}.example",
            "/applications/peertube/blockedInstances/ok.example",
            "/applications/peertube/settings/instance/name",
            "/str\u{0}ay",
        ],
        "{body}"
    );
    for p in &nul {
        assert!(p["message"].as_str().unwrap().contains("NUL character (U+0000)"), "{p}");
    }
    let text = String::from_utf8_lossy(&raw);
    assert!(!text.contains("hunter2"), "the answer echoes a secret value: {text}");
    assert_eq!(written(&h).await, [0, 0, 0], "a refused submit wrote something");
}

/// Item 5: an object with an `outPath` or `__toString` key is read by Nix
/// as a path or a string, not as the object submitted; such a key is
/// refused at submit with its path, and nothing is stored.
async fn keys_that_change_what_a_nix_object_means_are_refused_with_their_paths(engine: Engine) {
    let h = harness(engine).await;
    let mut config = demo();
    config["applications"]["peertube"]["blockedInstances"] = json!({ "outPath": "x", "__toString": "y", "ok": "z" });
    let (status, _, body) = submit(&h, json!({ "configuration": config }).to_string().into_bytes()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let mut paths: Vec<&str> =
        problems(&body).iter().filter(|p| p["kind"] == "reserved_key").map(|p| p["path"].as_str().unwrap()).collect();
    paths.sort();
    assert_eq!(
        paths,
        ["/applications/peertube/blockedInstances/__toString", "/applications/peertube/blockedInstances/outPath"],
        "{body}"
    );
    assert_eq!(written(&h).await, [0, 0, 0]);
}

/// Item 6: a body just under the 1 MiB limit with 75,000 invalid list
/// items is answered with the first problems and the count left out; the
/// answer is far smaller than the request.
async fn a_body_with_75000_invalid_items_gets_a_small_answer_that_counts_the_rest(engine: Engine) {
    let h = harness(engine).await;
    let items = 75_000;
    let mut config = demo();
    config["applications"]["peertube"]["transcoding"]["resolutions"] =
        Value::from((0..items).map(|i| format!("{i:09}")).collect::<Vec<_>>());
    let request = json!({ "configuration": config }).to_string().into_bytes();
    assert!(request.len() > 900_000 && request.len() < 1024 * 1024, "{} bytes", request.len());
    let started = Instant::now();
    let (status, raw, body) = submit(&h, request.clone()).await;
    let took = started.elapsed();
    println!("request {} bytes, answer {} bytes in {took:?}", request.len(), raw.len());
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"], "invalid_configuration");
    let listed = problems(&body);
    assert_eq!(listed.len(), MAX_PROBLEMS);
    assert_eq!(body["details"]["omitted"], items - MAX_PROBLEMS, "{}", body["message"]);
    assert!(body["message"].as_str().unwrap().contains("75000 problems"), "{}", body["message"]);
    // A stable order: the first items, in document order.
    for (i, p) in listed.iter().enumerate() {
        assert_eq!(p["path"], format!("/applications/peertube/transcoding/resolutions/{i}"));
    }
    assert!(raw.len() < 64 * 1024, "the answer is {} bytes", raw.len());
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert_eq!(written(&h).await, [0, 0, 0]);
}

/// Item 6: one huge key the schema has no place for (its path and the
/// sentence naming it) does not make a huge answer either; the cut falls
/// between characters (the key's are four bytes long).
async fn a_huge_unexpected_key_makes_a_bounded_problem(engine: Engine) {
    let h = harness(engine).await;
    let key = format!("k{}", "😀".repeat(225_000));
    let mut config = demo();
    config["applications"]["mastodon"][&key] = json!(1);
    let request = json!({ "configuration": config }).to_string().into_bytes();
    let request_len = request.len();
    let (status, raw, body) = submit(&h, request).await;
    println!("request {request_len} bytes, answer {} bytes", raw.len());
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let listed = problems(&body);
    assert_eq!(listed.len(), 1, "{body}");
    let (path, message) = (listed[0]["path"].as_str().unwrap(), listed[0]["message"].as_str().unwrap());
    assert!(path.starts_with("/applications/mastodon/k😀😀") && path.ends_with("😀…"), "{path}");
    assert!(message.contains("re-save the form") && message.contains("\"k😀😀"), "{message}");
    assert!(path.len() <= MAX_PROBLEM_TEXT && message.len() <= MAX_PROBLEM_TEXT, "{path} {message}");
    assert!(raw.len() < 4 * 1024, "the answer is {} bytes", raw.len());
    assert_eq!(body["details"]["omitted"], 0);
}

slipway_jobs::on_both_engines!(
    a_nul_character_anywhere_is_refused_with_its_path_and_nothing_is_stored,
    keys_that_change_what_a_nix_object_means_are_refused_with_their_paths,
    a_body_with_75000_invalid_items_gets_a_small_answer_that_counts_the_rest,
    a_huge_unexpected_key_makes_a_bounded_problem,
);
