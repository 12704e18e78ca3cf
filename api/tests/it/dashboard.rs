//! The dashboard at `/ui` (api/src/ui): a public shell that loads only its
//! own script and style sheet, and HTML fragments authorised like the JSON
//! routes: a token sees the deployments it names, and only a token for every
//! deployment sees the queues and workers. (Every fragment is also in
//! `tests/route_table`, so `auth_matrix.rs` and `error_shape.rs` walk it
//! with every bad token and every fault; the browser test,
//! `worker/tests/it/dashboard.rs`, drives the page through a real deploy.)

use crate::common;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use common::*;
use http_body_util::BodyExt;
use serde_json::json;
use slipway_jobs::store::Engine;
use tower::ServiceExt;

/// GET `uri` with `bearer`: status, content type, CSP header and body text.
async fn get(h: &Harness, uri: &str, bearer: Option<&str>) -> (StatusCode, String, String, String) {
    let mut request = Request::builder().method(Method::GET).uri(uri);
    if let Some(t) = bearer {
        request = request.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let answer = h.router.clone().oneshot(request.body(Body::empty()).unwrap()).await.unwrap();
    let header = |name| answer.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let (status, ctype, csp) = (answer.status(), header(header::CONTENT_TYPE), header(header::CONTENT_SECURITY_POLICY));
    let body = answer.into_body().collect().await.unwrap().to_bytes();
    (status, ctype, csp, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn the_shell_is_public_and_loads_nothing_but_its_own_script_and_style_sheet() {
    let h = harness(Engine::Sqlite).await;
    let (status, ctype, csp, page) = get(&h, "/ui", None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(ctype.starts_with("text/html"), "{ctype}");
    assert_eq!(csp, slipway_api::ui::CONTENT_SECURITY_POLICY);
    assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"), "{csp}");
    assert!(page.contains(r#"<script src="/ui/dashboard.js" defer></script>"#), "{page}");
    assert!(page.contains(r#"<link rel="stylesheet" href="/ui/dashboard.css">"#), "{page}");
    for elsewhere in ["http://", "https://", "//cdn", " style="] {
        assert!(!page.contains(elsewhere), "the shell has {elsewhere:?}: {page}");
    }
    for (path, media) in [("/ui/dashboard.js", "text/javascript"), ("/ui/dashboard.css", "text/css")] {
        let (status, ctype, _, text) = get(&h, path, None).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(ctype.starts_with(media), "{path}: {ctype}");
        assert!(!text.contains("https://") && !text.contains("http://"), "{path} loads from elsewhere");
    }
}

async fn a_front_end_token_lists_only_its_deployments_and_is_refused_the_fleet_which_an_operator_sees(engine: Engine) {
    let h = harness(engine).await;
    for id in ["alpha", "beta"] {
        let (status, answer) = h.put(id, &json!({ "configuration": demo() })).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{id}: {answer}");
    }
    let alpha = token(&["alpha"], 3600, SECRET);
    let (status, _, _, list) = get(&h, "/ui/fragments/deployments", Some(&alpha)).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert!(list.contains(r#"data-deployment="alpha""#), "{list}");
    assert!(!list.contains("beta"), "a token for alpha sees beta: {list}");
    assert!(list.contains(r#"data-fleet="false""#), "{list}");
    let (status, ctype, _, refused) = get(&h, "/ui/fragments/fleet", Some(&alpha)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert!(ctype.starts_with("application/json"), "{ctype}");
    assert_error_shape(&serde_json::from_str(&refused).unwrap(), "forbidden");
    let (status, _, _, other) = get(&h, "/ui/fragments/deployments/beta", Some(&alpha)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{other}");

    let (status, _, _, list) = get(&h, "/ui/fragments/deployments", Some(&all())).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    for id in ["alpha", "beta"] {
        assert!(list.contains(&format!(r#"data-deployment="{id}""#)), "{id}: {list}");
    }
    // A token for every deployment is still a front-end's: no fleet.
    assert!(list.contains(r#"data-fleet="false""#), "{list}");
    let (status, _, _, refused) = get(&h, "/ui/fragments/fleet", Some(&all())).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    let (status, _, _, list) = get(&h, "/ui/fragments/deployments", Some(&operator())).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert!(list.contains(r#"data-fleet="true""#), "{list}");
    let (status, _, _, fleet) = get(&h, "/ui/fragments/fleet", Some(&operator())).await;
    assert_eq!(status, StatusCode::OK, "{fleet}");
    // Each submit dispatched its deploy; no worker runs, so both wait.
    assert!(fleet.contains(r#"<tr data-queue="builds"><td>builds</td><td>2</td>"#), "{fleet}");
    assert!(fleet.contains("No worker has beaten within the last hour."), "{fleet}");
}

async fn a_deployment_fragment_shows_its_state_and_builds_and_a_queued_build_is_left_to_the_stream(engine: Engine) {
    let h = harness(engine).await;
    let (status, answer) = h.put("alpha", &json!({ "configuration": demo() })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let build = answer["build_id"].as_str().unwrap();
    let (status, _, _, page) = get(&h, "/ui/fragments/deployments/alpha", Some(&all())).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains(r#"data-state="building""#), "{page}");
    assert!(page.contains(&format!(r#"data-latest-build="{build}""#)), "{page}");
    assert!(page.contains(&format!("#/deployments/alpha/builds/{build}")), "{page}");
    let (status, _, _, shown) = get(&h, &format!("/ui/fragments/builds/{build}"), Some(&all())).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    assert!(shown.contains(r#"data-status="queued""#) && shown.contains(r#"data-live="true""#), "{shown}");
    // Another deployment's token: the build does not exist for it.
    let other = token(&["beta"], 3600, SECRET);
    let (status, _, _, hidden) = get(&h, &format!("/ui/fragments/builds/{build}"), Some(&other)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{hidden}");
    let (status, _, _, missing) = get(&h, "/ui/fragments/deployments/gamma", Some(&all())).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
}

async fn a_queued_build_says_why_it_waits_and_the_builds_list_shows_each_trigger_and_who_asked_escaped(engine: Engine) {
    let h = harness(engine).await;
    // A subject with markup in it: the page shows it as text.
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let hostile = sign(&json!({ "sub": "<b>mallory</b>", "aud": "slipway", "exp": now + 3600, "deployments": ["*"] }));
    let body = json!({ "configuration": demo() }).to_string().into_bytes();
    let (status, deploy) = h.call(Method::PUT, "/deployments/alpha", Some(&hostile), Some(body.clone())).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{deploy}");
    let (status, plan) = h.put("alpha?dry_run=true", &json!({ "configuration": demo() })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{plan}");
    let (deploy, plan) = (deploy["build_id"].as_str().unwrap(), plan["build_id"].as_str().unwrap());

    // No worker runs: the deploy waits for one, the plan for the deploy.
    let (_, _, _, shown) = get(&h, &format!("/ui/fragments/builds/{deploy}"), Some(&all())).await;
    assert!(shown.contains("a worker: none serving the builds queue is alive"), "{shown}");
    assert!(shown.contains(r#"<dd class="trigger">submit</dd>"#), "{shown}");
    assert!(shown.contains("&lt;b&gt;mallory&lt;/b&gt;") && !shown.contains("<b>mallory"), "{shown}");
    assert!(shown.contains(r#"<p class="changes">2 added: /configuration, /secret_versions"#), "{shown}");
    let (_, _, _, shown) = get(&h, &format!("/ui/fragments/builds/{plan}"), Some(&all())).await;
    assert!(shown.contains("an earlier build of this deployment to end"), "{shown}");
    assert!(shown.contains(&format!("#/deployments/alpha/builds/{deploy}")), "{shown}");
    assert!(shown.contains(r#"<dd class="trigger">dry_run</dd>"#), "{shown}");

    // The list: each build's trigger and who asked; no button yet (nothing succeeded).
    let (_, _, _, page) = get(&h, "/ui/fragments/deployments/alpha", Some(&all())).await;
    assert!(page.contains(&format!(r#"<tr data-build="{deploy}" data-trigger="submit">"#)), "{page}");
    assert!(page.contains(&format!(r#"<tr data-build="{plan}" data-trigger="dry_run">"#)), "{page}");
    assert!(page.contains(r#"<td class="who">&lt;b&gt;mallory&lt;/b&gt;</td>"#), "{page}");
    assert!(page.contains(r#"<td class="who">t</td>"#), "{page}");
    assert!(!page.contains("<b>mallory") && !page.contains("data-action="), "{page}");
}

slipway_jobs::on_both_engines!(
    a_front_end_token_lists_only_its_deployments_and_is_refused_the_fleet_which_an_operator_sees,
    a_deployment_fragment_shows_its_state_and_builds_and_a_queued_build_is_left_to_the_stream,
    a_queued_build_says_why_it_waits_and_the_builds_list_shows_each_trigger_and_who_asked_escaped,
);
