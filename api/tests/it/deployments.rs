//! Deployments and their builds over the router: ids (ID-1) from the shared cases,
//! reads (ST-1, TF-1), lists, deletes (DL-1), build pages and cancels.

use crate::common;

use axum::http::{Method, StatusCode};
use common::*;
use serde_json::{json, Value};
use slipway_jobs::store::Engine;

async fn every_valid_deployment_id_is_accepted_and_stored_as_given(engine: Engine) {
    let h = harness(engine).await;
    let ids = case("deployment-ids.json");
    for id in ids["valid"].as_array().unwrap() {
        let id = id.as_str().unwrap();
        let (status, body) = h.put(&encode(id), &json!({ "configuration": demo() })).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{id}: {body}");
        assert_eq!(body["deployment_id"], id);
        assert!(body["build_id"].as_str().unwrap().starts_with(&format!("{id}.")));
        let (status, read) = h.call(Method::GET, &format!("/deployments/{}", encode(id)), Some(&all()), None).await;
        assert_eq!(status, StatusCode::OK, "{id}: {read}");
        assert_eq!(read["id"], id);
        assert_eq!(read["state"], "building");
    }
}

async fn every_invalid_deployment_id_is_refused_and_writes_nothing(engine: Engine) {
    let h = harness(engine).await;
    let ids = case("deployment-ids.json");
    // Beside the cases, one far too long: its error still quotes it cut short.
    let long = "a".repeat(4_000);
    let invalid = ids["invalid"].as_array().unwrap().iter().map(|id| id.as_str().unwrap()).chain([long.as_str()]);
    for id in invalid {
        for method in [Method::PUT, Method::GET, Method::DELETE] {
            let body = (method == Method::PUT).then(|| json!({ "configuration": demo() }).to_string().into_bytes());
            let (status, answer) =
                h.call(method.clone(), &format!("/deployments/{}", encode(id)), Some(&all()), body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {id:?}: {answer}");
            assert_error_shape(&answer, "invalid_deployment_id");
            let message = answer["message"].as_str().unwrap();
            assert!(message.len() < 300 && !message.contains('\n'), "{method} {id:?}: one short line: {message}");
        }
    }
    assert_eq!(h.count("deployments").await, 0);
    assert_eq!(h.count("builds").await, 0);
    assert_eq!(h.count("jobs").await, 0);
}

async fn an_unknown_deployment_is_not_found_on_read_and_delete(engine: Engine) {
    let h = harness(engine).await;
    for (method, uri) in [
        (Method::GET, "/deployments/nobody"),
        (Method::DELETE, "/deployments/nobody"),
        (Method::GET, "/sbom-list/nobody"),
        (Method::GET, "/builds/nobody.20260101T000000Z.abcdef"),
    ] {
        let (status, body) = h.call(method.clone(), uri, Some(&all()), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {uri}: {body}");
        assert_error_shape(&body, "not_found");
    }
    // A long unknown build id is quoted cut short, not repeated whole.
    let long = "a".repeat(5000);
    for uri in [format!("/builds/{long}"), format!("/builds/{long}/log")] {
        let (status, body) = h.call(Method::GET, &uri, Some(&all()), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert!(body["message"].as_str().unwrap().len() < 100, "{body}");
    }
}

async fn a_submit_stores_the_build_and_its_job_together_and_a_delete_waits_its_turn(engine: Engine) {
    let h = harness(engine).await;
    let (s1, first) = h.put("demo", &json!({ "configuration": demo() })).await;
    let (s2, second) = h.call(Method::DELETE, "/deployments/demo", Some(&all()), None).await;
    assert_eq!((s1, s2), (StatusCode::ACCEPTED, StatusCode::ACCEPTED));
    assert_ne!(first["build_id"], second["build_id"]);
    assert_eq!(h.count("builds").await, 2);
    // ST-2: only the first build of the deployment is handed to the queue.
    assert_eq!(h.count("jobs").await, 1);
    let (_, builds) = h.call(Method::GET, "/deployments/demo/builds", Some(&all()), None).await;
    let ids: Vec<&str> = builds["builds"].as_array().unwrap().iter().map(|b| b["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [second["build_id"].as_str().unwrap(), first["build_id"].as_str().unwrap()]);
}

async fn a_deployment_read_gives_domain_and_instances_from_the_source_meta(engine: Engine) {
    let h = harness(engine).await;
    h.put("demo", &json!({ "configuration": demo() })).await;
    let (_, read) = h.call(Method::GET, "/deployments/demo", Some(&all()), None).await;
    assert_eq!(read["domain"], demo()["domain"]);
    let meta: Value = serde_json::from_str(slipway_api::default_source::META).unwrap();
    let names: Vec<&str> = read["instances"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap()).collect();
    for (app, _) in meta["applications"].as_object().unwrap() {
        let enabled = demo()["applications"][app]["enable"].as_bool().unwrap_or(false);
        assert_eq!(names.contains(&app.as_str()), enabled, "{app} in {names:?}");
    }
    for c in meta["catalog"].as_array().unwrap() {
        assert!(names.contains(&c["name"].as_str().unwrap()), "catalog component {c} is always on");
    }
    for i in read["instances"].as_array().unwrap() {
        assert_eq!(i["url"], format!("https://{}/", i["domain"].as_str().unwrap()));
    }
    assert_eq!(read["deployed_instances"], json!([]));
}

async fn deleting_twice_answers_the_same_destroy(engine: Engine) {
    let h = harness(engine).await;
    h.put("demo", &json!({ "configuration": demo() })).await;
    let (s1, a) = h.call(Method::DELETE, "/deployments/demo", Some(&all()), None).await;
    let (s2, b) = h.call(Method::DELETE, "/deployments/demo", Some(&all()), None).await;
    assert_eq!((s1, s2), (StatusCode::ACCEPTED, StatusCode::ACCEPTED));
    assert_eq!(a["build_id"], b["build_id"]);
    assert_eq!(a["state"], "destroying");
}

/// A deployment's builds come in pages, newest first, joined by `next`.
async fn builds_are_listed_in_pages_joined_by_a_cursor(engine: Engine) {
    let h = harness(engine).await;
    for _ in 0..5 {
        let (status, body) = h.put("paged", &json!({ "configuration": demo() })).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    let (_, whole) = h.call(Method::GET, "/deployments/paged/builds", Some(&all()), None).await;
    let ids = |page: &Value| -> Vec<String> {
        page["builds"].as_array().unwrap().iter().map(|b| b["id"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(ids(&whole).len(), 5);
    assert_eq!(whole["next"], Value::Null);
    let (mut paged, mut uri, mut sizes) = (Vec::new(), "/deployments/paged/builds?limit=2".to_owned(), Vec::new());
    loop {
        let (status, page) = h.call(Method::GET, &uri, Some(&all()), None).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        sizes.push(ids(&page).len());
        paged.extend(ids(&page));
        match page["next"].as_str() {
            Some(next) => uri = format!("/deployments/paged/builds?limit=2&before={next}"),
            None => break,
        }
    }
    assert_eq!(paged, ids(&whole), "pages joined give the whole list, newest first");
    assert_eq!(sizes, [2, 2, 1]);
    // A bad page size, or a cursor from another deployment, is refused.
    h.put("other", &json!({ "configuration": demo() })).await;
    let (_, other) = h.call(Method::GET, "/deployments/other/builds", Some(&all()), None).await;
    let foreign = format!("/deployments/paged/builds?before={}", ids(&other)[0]);
    for bad in ["/deployments/paged/builds?limit=0", "/deployments/paged/builds?limit=101", foreign.as_str()] {
        let (status, body) = h.call(Method::GET, bad, Some(&all()), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_error_shape(&body, "invalid_request");
    }
}

async fn a_queued_build_can_be_cancelled_once(engine: Engine) {
    let h = harness(engine).await;
    let (_, accepted) = h.put("demo", &json!({ "configuration": demo() })).await;
    let uri = format!("/builds/{}/cancel", accepted["build_id"].as_str().unwrap());
    let (status, body) = h.call(Method::POST, &uri, Some(&all()), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "cancelled");
    let (status, body) = h.call(Method::POST, &uri, Some(&all()), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_error_shape(&body, "build_finished");
    let (_, read) = h.call(Method::GET, "/deployments/demo", Some(&all()), None).await;
    assert_eq!(read["last_build"]["status"], "cancelled");
    let other = token(&["other"], 3600, SECRET);
    let (status, _) = h.call(Method::POST, &uri, Some(&other), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a build outside the token's scope does not reveal itself");
}

/// ST-1: a deployment whose newest submit was cancelled before it ran
/// reads the state of the build that last ran, and says both.
async fn a_read_names_the_build_its_state_comes_from_when_the_newest_never_ran(engine: Engine) {
    let h = harness(engine).await;
    let (_, first) = h.put("demo", &json!({ "configuration": demo() })).await;
    let first = first["build_id"].as_str().unwrap().to_owned();
    // A worker ran the first build to success.
    slipway_jobs::test_support::record_success(&h.db, &first).await;
    let (_, second) = h.put("demo", &json!({ "configuration": demo() })).await;
    let uri = format!("/builds/{}/cancel", second["build_id"].as_str().unwrap());
    assert_eq!(h.call(Method::POST, &uri, Some(&all()), None).await.0, StatusCode::OK);
    let (_, read) = h.call(Method::GET, "/deployments/demo", Some(&all()), None).await;
    assert_eq!(read["state"], "active", "{read}");
    assert_eq!(read["state_build_id"], first.as_str(), "{read}");
    assert_eq!(read["last_build"]["id"], second["build_id"], "{read}");
    assert_eq!(read["last_build"]["status"], "cancelled", "{read}");
    assert_eq!(read["last_build"]["started_at"], Value::Null, "{read}");
}

async fn rejected_query_strings_and_path_segments_get_the_json_error_shape(engine: Engine) {
    let h = harness(engine).await;
    let (status, body) = h.call(Method::GET, "/schema?application=a&application=b", None, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_error_shape(&body, "invalid_request");
    for uri in ["/deployments/%FF", "/sbom-list/%FF", "/deployments/%FF/builds"] {
        let (status, body) = h.call(Method::GET, uri, Some(&all()), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {body}");
        assert_error_shape(&body, "invalid_deployment_id");
    }
    let (status, body) = h.call(Method::GET, "/builds/%FF", Some(&all()), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_error_shape(&body, "not_found");
}

async fn a_list_names_each_deployment_once_and_is_bounded(engine: Engine) {
    let h = harness(engine).await;
    h.put("demo", &json!({ "configuration": demo() })).await;
    let (status, body) = h.call(Method::GET, "/deployments?ids=demo,demo,nobody", Some(&all()), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["deployments"].as_array().unwrap().len(), 1);
    let many: Vec<String> = (0..=slipway_api::routes::deployments::MAX_LIST).map(|i| format!("d{i}")).collect();
    let (status, body) = h.call(Method::GET, &format!("/deployments?ids={}", many.join(",")), Some(&all()), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_error_shape(&body, "invalid_request");
}

slipway_jobs::on_both_engines!(
    every_valid_deployment_id_is_accepted_and_stored_as_given,
    every_invalid_deployment_id_is_refused_and_writes_nothing,
    an_unknown_deployment_is_not_found_on_read_and_delete,
    a_submit_stores_the_build_and_its_job_together_and_a_delete_waits_its_turn,
    a_deployment_read_gives_domain_and_instances_from_the_source_meta,
    deleting_twice_answers_the_same_destroy,
    builds_are_listed_in_pages_joined_by_a_cursor,
    a_queued_build_can_be_cancelled_once,
    a_read_names_the_build_its_state_comes_from_when_the_newest_never_ran,
    rejected_query_strings_and_path_segments_get_the_json_error_shape,
    a_list_names_each_deployment_once_and_is_bounded,
);
