//! Unknown query parameters on the routes that change state: every `PUT`,
//! `POST` and `DELETE` of the router (`route_table`, the one list) refuses
//! a query parameter it does not take with `400 invalid_request` naming it,
//! and does nothing. A caller's `DELETE /deployments/{id}?dry_run=true`
//! must not destroy: there is no dry-run delete.

use crate::common;
use crate::route_table;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use common::*;
use http_body_util::BodyExt;
use route_table::{routes, Input, Route};
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use tower::ServiceExt;

/// The deployment every call addresses.
const TARGET: &str = "alpha";

/// Whether a route changes state (or may: every `PUT`, `POST` and `DELETE`).
fn changes_state(route: &Route) -> bool {
    [Method::PUT, Method::POST, Method::DELETE].contains(&route.method)
}

/// `route` for [`TARGET`] and `build` with `extra` appended to its query,
/// with an operator's token and, for a route that reads a body, a valid one.
async fn call(h: &Harness, route: &Route, build: &str, extra: &str) -> (StatusCode, Value) {
    let mut uri = route.uri(TARGET, build);
    uri.push(if uri.contains('?') { '&' } else { '?' });
    uri.push_str(extra);
    let request = Request::builder()
        .method(route.method.clone())
        .uri(&uri)
        .header(header::AUTHORIZATION, format!("Bearer {}", operator()));
    let request = match route.input {
        Input::Json(body) => {
            request.header(header::CONTENT_TYPE, "application/json").body(Body::from(body().to_string()))
        }
        Input::None | Input::OptionalJson => request.body(Body::empty()),
    }
    .unwrap();
    let answer = h.router.clone().oneshot(request).await.unwrap();
    let status = answer.status();
    let bytes = answer.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({ "raw": String::from_utf8_lossy(&bytes) })))
}

/// The query parameters the OpenAPI document gives `route` (`dry_run` of a submit).
fn documented_query(doc: &Value, route: &Route) -> Vec<String> {
    let path = route.uri.split('?').next().unwrap().replace("{build}", "{id}").replace("{rollout}", "{id}");
    let operation = &doc["paths"][path.as_str()][route.method.as_str().to_ascii_lowercase()];
    operation["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["in"] == "query")
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect()
}

/// [`TARGET`] submitted once; its build id.
async fn seeded(h: &Harness) -> String {
    let (status, answer) = h.put(TARGET, &json!({ "configuration": demo() })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "seeding: {answer}");
    answer["build_id"].as_str().unwrap().to_owned()
}

/// What a refused call must not have changed: the deployment as read, its
/// builds, and the job queue.
async fn snapshot(h: &Harness) -> Value {
    let (status, mut deployment) = h.call(Method::GET, &format!("/deployments/{TARGET}"), Some(&all()), None).await;
    assert_eq!(status, StatusCode::OK, "{deployment}");
    deployment.as_object_mut().unwrap().remove("updated_at");
    let (status, builds) = h.call(Method::GET, &format!("/deployments/{TARGET}/builds"), Some(&all()), None).await;
    assert_eq!(status, StatusCode::OK, "{builds}");
    json!({ "deployment": deployment, "builds": builds, "jobs": h.count("jobs").await, "rows": h.count("builds").await })
}

#[tokio::test]
async fn every_route_that_changes_state_refuses_an_unknown_query_parameter_by_name_and_changes_nothing() {
    let h = harness(Engine::Sqlite).await;
    route_table::the_table_names_every_route_of(&h.router, &operator()).await;
    let build = seeded(&h).await;
    let before = snapshot(&h).await;
    let state_changing: Vec<Route> = routes().into_iter().filter(changes_state).collect();
    assert!(state_changing.len() >= 10, "the table lists too few routes that change state: {state_changing:?}");
    let (status, doc) = h.call(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    for route in &state_changing {
        let taken = documented_query(&doc, route);
        let path = route.uri.split('?').next().unwrap().replace("{build}", "{id}").replace("{rollout}", "{id}");
        let documented = &doc["paths"][path.as_str()][route.method.as_str().to_ascii_lowercase()]["responses"]["400"];
        assert!(documented.is_object(), "{}: the document gives no 400", route.name());
        let candidates = [("dry_run=true", "dry_run"), ("force=1", "force"), ("limit=5&dryrun", "limit")];
        for (extra, name) in candidates.into_iter().filter(|(_, name)| !taken.contains(&name.to_string())) {
            let (status, answer) = call(&h, route, &build, extra).await;
            let what = format!("{} with ?{extra}", route.name());
            assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {answer}");
            assert_error_shape(&answer, "invalid_request");
            assert_eq!(answer["details"]["parameter"], name, "{what}: {answer}");
            let message = answer["message"].as_str().unwrap();
            assert!(message.contains(&format!("`{name}`")), "{what}: the message does not name {name}: {message}");
        }
    }
    assert_eq!(snapshot(&h).await, before, "a refused call changed something");
}

#[tokio::test]
async fn a_dry_run_delete_is_refused_naming_dry_run_and_the_deployment_is_not_destroyed() {
    let h = harness(Engine::Sqlite).await;
    seeded(&h).await;
    let before = snapshot(&h).await;
    let uri = format!("/deployments/{TARGET}?dry_run=true");
    let (status, answer) = h.call(Method::DELETE, &uri, Some(&all()), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_error_shape(&answer, "invalid_request");
    assert_eq!(answer["details"], json!({ "parameter": "dry_run", "allowed": [] }));
    let after = snapshot(&h).await;
    assert_eq!(after, before, "the refused delete changed something");
    assert_ne!(after["deployment"]["state"], "destroying", "{after}");
    // The same delete without the parameter destroys: the refusal was the parameter's.
    let (status, answer) = h.call(Method::DELETE, &format!("/deployments/{TARGET}"), Some(&all()), None).await;
    assert_eq!((status, answer["state"].as_str()), (StatusCode::ACCEPTED, Some("destroying")), "{answer}");
}

#[tokio::test]
async fn a_parameter_a_route_takes_still_passes_and_a_submit_names_the_ones_it_takes() {
    let h = harness(Engine::Sqlite).await;
    seeded(&h).await;
    let body = Some(json!({ "configuration": demo() }).to_string().into_bytes());
    let uri = format!("/deployments/{TARGET}?dry_run=true");
    let (status, answer) = h.call(Method::PUT, &uri, Some(&all()), body.clone()).await;
    assert_eq!((status, answer["dry_run"].as_bool()), (StatusCode::ACCEPTED, Some(true)), "{answer}");
    let uri = format!("/deployments/{TARGET}?dry_run=true&dryrun=true");
    let (status, answer) = h.call(Method::PUT, &uri, Some(&all()), body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["details"], json!({ "parameter": "dryrun", "allowed": ["dry_run"] }));
    assert!(answer["message"].as_str().unwrap().contains("`dry_run`"), "{answer}");
}

#[tokio::test]
async fn a_parameter_given_twice_or_with_a_value_of_the_wrong_type_is_refused_by_name() {
    let h = harness(Engine::Sqlite).await;
    seeded(&h).await;
    let before = snapshot(&h).await;
    let body = Some(json!({ "configuration": demo() }).to_string().into_bytes());
    for (query, words) in [("dry_run=yes", "is not valid"), ("dry_run=true&dry_run=false", "more than once")] {
        let uri = format!("/deployments/{TARGET}?{query}");
        let (status, answer) = h.call(Method::PUT, &uri, Some(&all()), body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {answer}");
        assert_eq!(answer["error"], json!("invalid_request"), "{answer}");
        assert_eq!(answer["details"]["parameter"], json!("dry_run"), "{query}: {answer}");
        let message = answer["message"].as_str().unwrap();
        assert!(message.contains("`dry_run`") && message.contains(words), "{query}: {message}");
        assert!(!message.contains("Failed to deserialize"), "{query}: {message}");
    }
    assert_eq!(snapshot(&h).await, before, "a refused submit changed nothing");
}
