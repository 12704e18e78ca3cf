//! Public procedures over the router: labels (ID-2) from the shared slugs, the built-in
//! schema and renames (MS-5), readiness.

use crate::common;

use axum::http::{Method, StatusCode};
use common::*;
use serde_json::{json, Value};
use slipway_jobs::store::Engine;

async fn every_valid_slug_gives_a_fresh_label_and_every_invalid_one_is_refused(engine: Engine) {
    let h = harness(engine).await;
    let slugs = case("slugs.json");
    for pair in slugs["valid"].as_array().unwrap() {
        let (slug, prefix) = (pair[0].as_str().unwrap(), pair[1].as_str().unwrap());
        let (status, body) =
            h.call(Method::POST, "/labels", None, Some(json!({ "slug": slug }).to_string().into_bytes())).await;
        assert_eq!(status, StatusCode::OK, "{slug}: {body}");
        let label = body["label"].as_str().unwrap();
        let (head, suffix) = label.rsplit_once('-').unwrap();
        assert_eq!(head, prefix, "{slug}");
        assert_eq!(suffix.len(), 6);
        assert!(suffix.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()), "{label}");
    }
    for slug in slugs["invalid"].as_array().unwrap() {
        let (status, body) =
            h.call(Method::POST, "/labels", None, Some(json!({ "slug": slug }).to_string().into_bytes())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{slug}: {body}");
        assert_error_shape(&body, "invalid_slug");
    }
}

async fn the_public_schema_serves_the_whole_schema_and_each_application(engine: Engine) {
    let h = harness(engine).await;
    let (status, schema) = h.call(Method::GET, "/schema", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
    let apps: Value = serde_json::from_str(slipway_api::default_source::APPLICATIONS).unwrap();
    for (name, want) in apps.as_object().unwrap() {
        let (status, got) = h.call(Method::GET, &format!("/schema?application={name}"), None, None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(&got, want);
    }
    let (status, body) = h.call(Method::GET, "/schema?application=nope", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_error_shape(&body, "not_found");
}

/// `/healthz` is liveness and never asks the database; `/readyz` does.
async fn readyz_answers_503_when_the_database_is_gone(engine: Engine) {
    let h = harness(engine).await;
    let (status, body) = h.call(Method::GET, "/readyz", None, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "ready");
    h.db.close().await;
    let (status, body) = h.call(Method::GET, "/readyz", None, None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_error_shape(&body, "service_unavailable");
    let (status, _) = h.call(Method::GET, "/healthz", None, None).await;
    assert_eq!(status, StatusCode::OK);
}

/// MS-5, MG-4: `GET /renames` serves the built-in source's table as it is
/// baked; with `?section=` only the entries inside that section, with paths
/// relative to it (an entry of another section never shows); an unknown
/// section is `404` naming the sections there are.
async fn the_public_renames_serve_the_whole_table_and_each_section(engine: Engine) {
    let h = harness(engine).await;
    let (status, table) = h.call(Method::GET, "/renames", None, None).await;
    assert_eq!(status, StatusCode::OK, "{table}");
    let baked: Value = serde_json::from_str(slipway_api::default_source::RENAMES).unwrap();
    assert_eq!(table, baked);
    let meta: Value = serde_json::from_str(slipway_api::default_source::META).unwrap();
    let sections = meta["sections"].as_array().unwrap();
    assert!(!sections.is_empty());
    for section in sections {
        let id = section["id"].as_str().unwrap();
        let path: Vec<&str> = section["path"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
        let (status, relative) = h.call(Method::GET, &format!("/renames?section={id}"), None, None).await;
        assert_eq!(status, StatusCode::OK, "{relative}");
        // Every entry of the whole table that sits literally inside the
        // section is served, its section prefix cut.
        let inside = |p: &Value| {
            p.as_array().unwrap().iter().take(path.len()).map(|s| s.as_str().unwrap()).eq(path.iter().copied())
        };
        for entry in table.as_array().unwrap().iter().filter(|e| inside(&e["from"]) && inside(&e["to"])) {
            let cut = |p: &Value| json!(p.as_array().unwrap()[path.len()..]);
            let expected = json!({ "from": cut(&entry["from"]), "to": cut(&entry["to"]), "kind": entry["kind"] });
            assert!(relative.as_array().unwrap().contains(&expected), "{expected} is not in section {id}: {relative}");
        }
        // Nothing of the section keeps the absolute prefix.
        for entry in relative.as_array().unwrap() {
            assert!(!inside(&entry["from"]) || path.is_empty(), "{entry} still names the section's path");
        }
    }
    let (status, body) = h.call(Method::GET, "/renames?section=no-such-section", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_error_shape(&body, "not_found");
    assert!(body["message"].as_str().unwrap().contains(sections[0]["id"].as_str().unwrap()), "{body}");
}

slipway_jobs::on_both_engines!(
    the_public_renames_serve_the_whole_table_and_each_section,
    every_valid_slug_gives_a_fresh_label_and_every_invalid_one_is_refused,
    the_public_schema_serves_the_whole_schema_and_each_application,
    readyz_answers_503_when_the_database_is_gone,
);
