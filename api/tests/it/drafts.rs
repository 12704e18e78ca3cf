//! TF-2: what a configuration that the api does not store (a draft) serves:
//! `POST /application-paths` and `POST /sections`, public, reading only the
//! body, against the built-in source's `meta.json` and renames.
//!
//! They touch no database, so they run on SQLite only.

use crate::common;

use axum::http::{Method, StatusCode};
use common::*;
use serde_json::{json, Value};
use slipway_jobs::store::Engine;

/// The built-in source's `meta.json`.
fn meta() -> Value {
    serde_json::from_str(slipway_api::default_source::META).unwrap()
}

/// `POST route` with `body`, without a token.
async fn post(h: &Harness, route: &str, body: &Value) -> (StatusCode, Value) {
    h.call(Method::POST, route, None, Some(body.to_string().into_bytes())).await
}

/// `configuration` with the `subdomain` of every application stored under
/// the name it had two renames ago (`domainName`, then `domain`, in the
/// built-in renames table).
fn in_old_shape(mut configuration: Value) -> Value {
    for app in configuration["applications"].as_object_mut().unwrap().values_mut() {
        let app = app.as_object_mut().unwrap();
        if let Some(subdomain) = app.remove("subdomain") {
            app.insert("domainName".into(), subdomain);
        }
    }
    configuration
}

#[tokio::test]
async fn application_paths_give_every_application_its_path_and_section_without_a_token() {
    let h = harness(Engine::Sqlite).await;
    let mut draft = demo();
    draft["applications"].as_object_mut().unwrap().remove("pixelfed");
    let (status, body) = post(&h, "/application-paths", &json!({ "configuration": draft })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let apps = meta()["applications"].as_object().unwrap().clone();
    let answered = body["applications"].as_object().unwrap();
    assert_eq!(answered.keys().collect::<Vec<_>>(), apps.keys().collect::<Vec<_>>(), "{body}");
    for (key, app) in &apps {
        assert_eq!(answered[key]["path"], app["path"], "{key}: {body}");
        assert_eq!(answered[key]["section"], app["section"], "{key}: {body}");
        assert_eq!(answered[key]["present"], key != "pixelfed", "{key}: {body}");
    }
    assert!(body.get("changed").is_none(), "no previous, no changed: {body}");
}

#[tokio::test]
async fn a_previous_configuration_in_an_old_shape_marks_only_the_edited_application_as_changed() {
    let h = harness(Engine::Sqlite).await;
    let previous = in_old_shape(demo());
    assert_ne!(previous, demo(), "the old shape must differ from the current one");
    // The shape alone: nothing changed.
    let (status, body) =
        post(&h, "/application-paths", &json!({ "configuration": demo(), "previous": previous })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["changed"], json!([]), "{body}");
    // One edit, and one application dropped.
    let mut draft = demo();
    draft["applications"]["peertube"]["adminEmail"] = json!("new@demo.example.org");
    draft["applications"].as_object_mut().unwrap().remove("pixelfed");
    let (status, body) = post(&h, "/application-paths", &json!({ "configuration": draft, "previous": previous })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["changed"], json!(["peertube", "pixelfed"]), "{body}");
    assert_eq!(body["applications"]["pixelfed"]["present"], false, "{body}");
}

#[tokio::test]
async fn a_previous_of_null_is_no_previous() {
    let h = harness(Engine::Sqlite).await;
    let (status, body) = post(&h, "/application-paths", &json!({ "configuration": demo(), "previous": null })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.get("changed").is_none(), "{body}");
}

#[tokio::test]
async fn sections_give_every_section_with_its_value_in_the_current_shape() {
    let h = harness(Engine::Sqlite).await;
    let mut draft = in_old_shape(demo());
    draft["applications"].as_object_mut().unwrap().remove("pixelfed");
    let (status, body) = post(&h, "/sections", &json!({ "configuration": draft })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let want = meta()["sections"].as_array().unwrap().clone();
    let got = body["sections"].as_array().unwrap();
    assert_eq!(got.len(), want.len(), "{body}");
    for (got, want) in got.iter().zip(&want) {
        assert_eq!(got["id"], want["id"], "{body}");
        assert_eq!(got["title"], want["title"], "{body}");
        assert_eq!(got["path"], want["path"], "{body}");
        // The current shape is read at the section's path in `demo()`.
        let path: Vec<&str> = want["path"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
        let expected = path.iter().try_fold(demo(), |v, k| v.get(*k).cloned());
        if want["id"] == "pixelfed" {
            assert_eq!(got["present"], false, "{body}");
            assert_eq!(got["value"], Value::Null, "{body}");
        } else {
            assert_eq!(got["present"], true, "{body}");
            assert_eq!(Some(&got["value"]), expected.as_ref(), "migrated to the current shape: {body}");
        }
    }
}

#[tokio::test]
async fn a_body_that_is_not_a_configuration_is_refused_in_the_error_shape() {
    let h = harness(Engine::Sqlite).await;
    for route in ["/application-paths", "/sections"] {
        let (status, body) = h.call(Method::POST, route, None, Some(b"{\"configuration\": ".to_vec())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{route}: {body}");
        assert_error_shape(&body, "malformed_json");
        for bad in [json!({}), json!({ "configuration": [] }), json!({ "configuration": {}, "stray": 1 }), json!([])] {
            let (status, body) = post(&h, route, &bad).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{route} {bad}: {body}");
            assert_error_shape(&body, "invalid_request");
        }
        let (status, body) = h.call(Method::GET, route, None, None).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{route}: {body}");
    }
    let (status, body) = post(&h, "/application-paths", &json!({ "configuration": {}, "previous": "x" })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_error_shape(&body, "invalid_request");
    assert!(body["message"].as_str().unwrap().contains("previous"), "{body}");
}
