//! `PUT /deployments/{id}` over the router: migration, validation, secrets, module
//! sources and queue admission (MG-7, Q-3); nothing is written on a refusal.

use crate::common;

use axum::http::{Method, StatusCode};
use common::*;
use serde_json::{json, Value};
use slipway_jobs::store::Engine;

async fn a_configuration_that_fails_the_schema_lists_every_path_and_stores_nothing(engine: Engine) {
    let h = harness(engine).await;
    let mut config = demo();
    config["applications"]["mastodon"]["enable"] = json!("yes");
    config["applications"]["peertube"]["unknownOption"] = json!(1);
    config["stray"] = json!(true);
    let (status, body) = h.put("demo", &json!({ "configuration": config })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_error_shape(&body, "invalid_configuration");
    let paths: Vec<&str> =
        body["details"]["problems"].as_array().unwrap().iter().map(|p| p["path"].as_str().unwrap()).collect();
    for want in ["/applications/mastodon/enable", "/applications/peertube/unknownOption", "/stray"] {
        assert!(paths.contains(&want), "{want} missing from {paths:?}");
    }
    assert_eq!(h.count("deployments").await, 0);
    assert_eq!(h.count("builds").await, 0);
    assert_eq!(h.count("jobs").await, 0);
}

async fn a_secret_value_without_openbao_is_an_invalid_configuration(engine: Engine) {
    let h = harness(engine).await;
    let schema: Value = h.call(Method::GET, "/schema", None, None).await.1;
    let meta: Value = serde_json::from_str(slipway_api::default_source::META).unwrap();
    let (app, field) = meta["applications"]
        .as_object()
        .unwrap()
        .iter()
        .find_map(|(k, v)| {
            v["secrets"].as_array().and_then(|s| s.first()).map(|f| (k.clone(), f.as_str().unwrap().to_owned()))
        })
        .expect("the built-in source has a secret field");
    assert!(schema.to_string().contains("writeOnly"));
    let mut config = demo();
    config["applications"][&app]["enable"] = json!(true);
    config["applications"][&app][&field] = json!("not-to-be-stored");
    let (status, body) = h.put("demo", &json!({ "configuration": config })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_error_shape(&body, "invalid_configuration");
    assert!(!body.to_string().contains("not-to-be-stored"), "the secret is echoed: {body}");
    assert_eq!(h.count("deployments").await, 0);
}

async fn a_malformed_json_body_gets_the_json_error_shape(engine: Engine) {
    let h = harness(engine).await;
    let (status, body) =
        h.call(Method::PUT, "/deployments/demo", Some(&all()), Some(b"{\"configuration\": ".to_vec())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_error_shape(&body, "malformed_json");
    let (status, body) =
        h.call(Method::PUT, "/deployments/demo", Some(&all()), Some(b"{\"config\": {}}".to_vec())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_error_shape(&body, "invalid_request");
    // A body must be an object: serde would read a struct from an array.
    let array = json!([{ "configuration": demo() }]).to_string().into_bytes();
    let (status, body) = h.call(Method::PUT, "/deployments/demo", Some(&all()), Some(array)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_error_shape(&body, "invalid_request");
    assert_eq!((h.count("deployments").await, h.count("builds").await), (0, 0));
}

/// JSON that serde_json reads but whose meaning would be a guess: a key
/// repeated in one object (the last one would win silently), here inside
/// the configuration; and nesting deeper than the service reads. Each is
/// `400 invalid_request` naming what and where, and nothing is stored.
async fn a_repeated_key_or_too_deep_nesting_is_refused_naming_it(engine: Engine) {
    let h = harness(engine).await;
    let text = demo().to_string();
    assert!(demo()["domain"].is_string(), "the example has no domain to repeat");
    let configuration = format!(r#"{}, "domain": "other.example.org"}}"#, &text[..text.len() - 1]);
    let repeated = format!(r#"{{"configuration": {configuration}}}"#);
    let (status, body) = h.call(Method::PUT, "/deployments/demo", Some(&all()), Some(repeated.into_bytes())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_error_shape(&body, "invalid_request");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains(r#"repeats the key "domain""#) && message.contains("line 1"), "{body}");
    let depth = slipway_api::extract::MAX_DEPTH + 1;
    let deep = format!(r#"{{"configuration": {{"x": {}{}}}}}"#, "[".repeat(depth), "]".repeat(depth));
    let (status, body) = h.call(Method::PUT, "/deployments/demo", Some(&all()), Some(deep.into_bytes())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_error_shape(&body, "invalid_request");
    let limit = format!("deeper than {} levels", slipway_api::extract::MAX_DEPTH);
    assert!(body["message"].as_str().unwrap().contains(&limit), "{body}");
    assert_eq!((h.count("deployments").await, h.count("builds").await), (0, 0));
}

async fn an_explicit_module_source_outside_the_allowlist_is_refused(engine: Engine) {
    let h = harness(engine).await;
    let body = json!({ "configuration": demo(), "module_source": "git+https://evil.example/x?ref=main" });
    let (status, answer) = h.put("demo", &body).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert_error_shape(&answer, "source_not_allowed");
    let body = json!({ "configuration": demo(), "module_source": "ftp://x" });
    let (status, answer) = h.put("demo", &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_error_shape(&answer, "invalid_module_source");
    assert_eq!(h.count("deployments").await, 0);
}

/// SEC-3: a repository reached over plain http, git:// or another
/// transport, or a `file://` one where local sources are not allowed, is
/// `400 invalid_module_source` on every procedure that names a source,
/// before anything is queued or fetched.
async fn a_module_source_over_a_transport_slipway_does_not_fetch_is_refused_before_anything_runs(engine: Engine) {
    let h = harness_with(engine, &[("SLIPWAY_TRUSTED_SOURCES", "")]).await;
    for source in [
        "git+http://git.example.org/ops/source.git?ref=main",
        "git+git://git.example.org/ops/source.git?ref=main",
        "git+file:///srv/sources/ops?ref=main",
    ] {
        let submit = json!({ "configuration": demo(), "module_source": source }).to_string().into_bytes();
        for (method, path, body) in [
            (Method::PUT, "/deployments/demo", submit.clone()),
            (Method::POST, "/deployments/demo/preview", submit),
            (Method::POST, "/schema/get_for", json!({ "source": source }).to_string().into_bytes()),
            (Method::POST, "/renames/get_for", json!({ "source": source }).to_string().into_bytes()),
        ] {
            let (status, answer) = h.call(method, path, Some(&all()), Some(body)).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {source}: {answer}");
            assert_error_shape(&answer, "invalid_module_source");
            let message = answer["message"].as_str().unwrap();
            assert!(message.contains("https") && message.contains("ssh"), "names what is fetched: {answer}");
        }
    }
    assert_eq!((h.count("deployments").await, h.count("builds").await, h.count("jobs").await), (0, 0, 0));
}

/// Moves the value at `to` back to `from` (both under `applications.mastodon`).
fn unmigrate(config: &mut Value, to: &str, from: &str) {
    let app = config["applications"]["mastodon"].as_object_mut().unwrap();
    let v = app.remove(to).unwrap();
    app.insert(from.to_owned(), v);
}

async fn a_configuration_in_an_old_shape_is_migrated_along_rename_chains_before_it_is_stored(engine: Engine) {
    let h = harness(engine).await;
    let mut old = demo();
    // Chains of the built-in renames.json: applications.*.domainName → domain → subdomain,
    // and mastodon email → contactEmail → adminEmail.
    unmigrate(&mut old, "subdomain", "domainName");
    unmigrate(&mut old, "adminEmail", "email");
    let (status, body) = h.put("demo", &json!({ "configuration": old })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (_, read) = h.call(Method::GET, "/deployments/demo", Some(&all()), None).await;
    assert_eq!(read["configuration"], demo());
}

async fn a_migrated_submit_names_each_rename_applied_in_its_202_as_a_deprecation(engine: Engine) {
    let h = harness(engine).await;
    let mut old = demo();
    unmigrate(&mut old, "subdomain", "domainName");
    unmigrate(&mut old, "adminEmail", "email");
    let (status, body) = h.put("demo", &json!({ "configuration": old })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let moved: Vec<(&str, &str)> = body["deprecations"]
        .as_array()
        .unwrap_or_else(|| panic!("no deprecations in the 202: {body}"))
        .iter()
        .map(|d| (d["from"].as_str().unwrap(), d["to"].as_str().unwrap()))
        .collect();
    let app = "/applications/mastodon";
    let want: Vec<(String, String)> =
        [("domainName", "domain"), ("domain", "subdomain"), ("email", "contactEmail"), ("contactEmail", "adminEmail")]
            .iter()
            .map(|(from, to)| (format!("{app}/{from}"), format!("{app}/{to}")))
            .collect();
    for (from, to) in &want {
        assert!(moved.contains(&(from.as_str(), to.as_str())), "{from} → {to} is not named: {body}");
    }
    assert_eq!(moved.len(), want.len(), "{body}");
    for d in body["deprecations"].as_array().unwrap() {
        assert!(d.as_object().unwrap().contains_key("module_source"), "{d}");
    }
    let warnings: Vec<&str> = body["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).collect();
    for (from, to) in &want {
        assert!(
            warnings.iter().any(|w| w.starts_with("deprecated:") && w.contains(&format!("{from} was renamed to {to}"))),
            "no deprecation notice for {from}: {warnings:?}"
        );
    }
    // The configuration in the current shape: no notice.
    let (status, body) = h.put("demo", &json!({ "configuration": demo() })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert!(body.get("deprecations").is_none() && body.get("warnings").is_none(), "{body}");
}

async fn a_rename_whose_target_is_taken_is_named_in_the_errors_and_nothing_is_stored(engine: Engine) {
    let h = harness(engine).await;
    let mut both = demo();
    both["applications"]["mastodon"]["domainName"] = json!("old");
    let (status, body) = h.put("demo", &json!({ "configuration": both })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let problems = body["details"]["problems"].as_array().unwrap();
    let skipped: Vec<&Value> = problems.iter().filter(|p| p["kind"] == "skipped_rename").collect();
    assert_eq!(skipped.len(), 1, "{body}");
    // The chain moved domainName one step (to domain); the next step's target is taken.
    assert!(skipped[0]["path"].as_str().unwrap().starts_with("/applications/mastodon/domain"), "{body}");
    assert!(skipped[0]["message"].as_str().unwrap().contains("subdomain"), "{body}");
    assert_eq!(h.count("deployments").await, 0);
}

async fn past_queue_size_a_submit_is_refused_before_its_body_is_read(engine: Engine) {
    let h = harness_with(engine, &[("QUEUE_SIZE", "2")]).await;
    for id in ["a", "b"] {
        let (status, body) = h.put(id, &json!({ "configuration": demo() })).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    // Not even a JSON body: the refusal comes before the body is read.
    let (status, body) = h.call(Method::PUT, "/deployments/c", Some(&all()), Some(b"not read".to_vec())).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_error_shape(&body, "queue_full");
    assert_eq!(h.count("builds").await, 2);
}

/// Q-3 with submits arriving together: the early check lets them all in,
/// and the submit's own transaction still admits exactly `QUEUE_SIZE`.
async fn concurrent_submits_are_admitted_up_to_the_queue_size_exactly(engine: Engine) {
    let h = harness_with(engine, &[("QUEUE_SIZE", "2")]).await;
    let h = &h;
    let puts =
        (0..10).map(|i| async move { h.put(&format!("together-{i}"), &json!({ "configuration": demo() })).await });
    let answers = futures::future::join_all(puts).await;
    let accepted = answers.iter().filter(|(s, _)| *s == StatusCode::ACCEPTED).count();
    assert_eq!(accepted, 2, "{answers:?}");
    for (status, body) in answers.iter().filter(|(s, _)| *s != StatusCode::ACCEPTED) {
        assert_eq!(*status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_error_shape(body, "queue_full");
    }
    assert_eq!((h.count("deployments").await, h.count("builds").await, h.count("jobs").await), (2, 2, 2));
}

/// (application, secret field) of the built-in source's first application with a secret.
fn a_secret_field() -> (String, String) {
    let meta: Value = serde_json::from_str(slipway_api::default_source::META).unwrap();
    meta["applications"]
        .as_object()
        .unwrap()
        .iter()
        .find_map(|(k, v)| {
            v["secrets"].as_array().and_then(|s| s.first()).map(|f| (k.clone(), f.as_str().unwrap().to_owned()))
        })
        .expect("the built-in source has a secret field")
}

async fn a_secret_value_is_listed_together_with_every_other_problem(engine: Engine) {
    let h = harness(engine).await;
    let (app, field) = a_secret_field();
    let mut config = demo();
    config["applications"][&app]["enable"] = json!(true);
    config["applications"][&app][&field] = json!("s3cr3t-value");
    config["stray"] = json!(1);
    let (status, body) = h.put("demo", &json!({ "configuration": config })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let kinds: Vec<&str> =
        body["details"]["problems"].as_array().unwrap().iter().map(|p| p["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"secret") && kinds.contains(&"unexpected_key"), "{body}");
    assert!(!body.to_string().contains("s3cr3t-value"));
}

async fn the_secret_lists_are_derived_by_the_api_not_taken_from_the_client(engine: Engine) {
    let h = harness(engine).await;
    let (app, field) = a_secret_field();
    let mut config = demo();
    config["applications"][&app]["enable"] = json!(true);
    config["applications"][&app]["secretsSet"] = json!([field.clone(), "bogus"]);
    config["applications"][&app]["secretsClear"] = json!([field.clone(), "nope"]);
    let (status, body) = h.put("demo", &json!({ "configuration": config })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (_, read) = h.call(Method::GET, "/deployments/demo", Some(&all()), None).await;
    assert_eq!(read["configuration"]["applications"][&app]["secretsSet"], json!([]));
    assert_eq!(read["configuration"]["applications"][&app]["secretsClear"], json!([field]));
}

/// The first `else: {not: {required: [key]}}` form hint of the built-in
/// schema: (application, option, key).
fn an_else_hint() -> (String, String, String) {
    let schema: Value = serde_json::from_str(slipway_api::default_source::SCHEMA).unwrap();
    for (app, def) in schema["$defs"].as_object().unwrap() {
        for (option, prop) in def["properties"].as_object().into_iter().flatten() {
            if let Some(key) = prop["else"]["not"]["required"][0].as_str() {
                return (app.clone(), option.clone(), key.to_owned());
            }
        }
    }
    panic!("the built-in schema has no else form hint")
}

async fn a_form_hint_refusal_names_the_key_that_does_not_apply(engine: Engine) {
    let h = harness(engine).await;
    let (app, option, key) = an_else_hint();
    let mut config = demo();
    config["applications"][&app][&option] = json!({ key.clone(): "x" });
    let (status, body) = h.put("demo", &json!({ "configuration": config })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let want = format!("/applications/{app}/{option}/{key}");
    let problem = body["details"]["problems"].as_array().unwrap().iter().find(|p| p["path"] == want.as_str());
    let problem = problem.unwrap_or_else(|| panic!("no problem at {want}: {body}"));
    assert!(problem["message"].as_str().unwrap().contains(&key), "{problem}");
}

/// `PUT /deployments/{id}` with `Origin: origin` and `body`.
async fn put_from(h: &Harness, id: &str, origin: &str, body: &Value) -> (StatusCode, Value) {
    use axum::http::{header, Request};
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;
    let req = Request::builder()
        .method(Method::PUT)
        .uri(format!("/deployments/{id}"))
        .header(header::AUTHORIZATION, format!("Bearer {}", all()))
        .header(header::ORIGIN, origin)
        .header(header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    let res = h.router.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn each_build_records_who_asked_and_keeps_no_origin_it_cannot_show(engine: Engine) {
    let h = harness(engine).await;
    let body = json!({ "configuration": demo() });
    let (status, accepted) = put_from(&h, "who", "https://panel.example.org", &body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let long = format!("https://{}.example.org", "a".repeat(300));
    let (status, _) = put_from(&h, "who", &long, &body).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, page) = h.call(Method::GET, "/deployments/who/builds", Some(&all()), None).await;
    let builds = page["builds"].as_array().unwrap();
    assert_eq!(builds[1]["requested_by"]["origin"], "https://panel.example.org", "{page}");
    assert!(builds[1]["requested_by"]["sub"].is_string(), "{page}");
    assert_eq!(builds[0]["trigger"], "submit", "{page}");
    assert!(builds[0]["requested_by"].get("origin").is_none(), "an origin past 256 bytes was kept: {page}");
    let (_, build) =
        h.call(Method::GET, &format!("/builds/{}", accepted["build_id"].as_str().unwrap()), Some(&all()), None).await;
    assert_eq!(build["requested_by"]["origin"], "https://panel.example.org", "{build}");
}

async fn a_health_gate_that_is_no_duration_is_refused_naming_it_and_stores_nothing(engine: Engine) {
    let h = harness(engine).await;
    for gate in
        [json!({ "timeout": "forever" }), json!({ "timeout": "2d", "rollback": true }), json!({ "rollback": true })]
    {
        let body = json!({ "configuration": demo(), "health_gate": gate });
        let (status, answer) = h.put("gated", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{gate}: {answer}");
        assert_error_shape(&answer, "invalid_request");
        assert!(
            answer["message"].as_str().unwrap().contains("health_gate")
                || answer["message"].as_str().unwrap().contains("timeout"),
            "{answer}"
        );
    }
    assert_eq!(h.count("builds").await, 0, "a refused submit stored a build");
}

async fn a_hostile_build_id_given_to_an_apply_or_a_rollback_is_quoted_and_cut_in_its_404(engine: Engine) {
    let h = harness(engine).await;
    let (status, _) = h.put("hostile", &json!({ "configuration": demo() })).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let hostile = format!("\u{1b}[31m{}", "x".repeat(10_000));
    for (path, body) in [
        ("/deployments/hostile/apply", json!({ "plan": hostile })),
        ("/deployments/hostile/rollback", json!({ "to": hostile })),
    ] {
        let (status, answer) = h.call(Method::POST, path, Some(&all()), Some(body.to_string().into_bytes())).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
        let message = answer["message"].as_str().unwrap();
        assert!(!message.contains('\u{1b}') && message.contains("\\u{1b}"), "{message}");
        assert!(message.len() < 200, "the id was not cut: {} bytes", message.len());
    }
    assert_eq!(h.count("builds").await, 1, "a refused apply or rollback stored a build");
}

slipway_jobs::on_both_engines!(
    a_hostile_build_id_given_to_an_apply_or_a_rollback_is_quoted_and_cut_in_its_404,
    each_build_records_who_asked_and_keeps_no_origin_it_cannot_show,
    a_health_gate_that_is_no_duration_is_refused_naming_it_and_stores_nothing,
    a_configuration_that_fails_the_schema_lists_every_path_and_stores_nothing,
    a_secret_value_without_openbao_is_an_invalid_configuration,
    a_malformed_json_body_gets_the_json_error_shape,
    a_repeated_key_or_too_deep_nesting_is_refused_naming_it,
    an_explicit_module_source_outside_the_allowlist_is_refused,
    a_module_source_over_a_transport_slipway_does_not_fetch_is_refused_before_anything_runs,
    a_configuration_in_an_old_shape_is_migrated_along_rename_chains_before_it_is_stored,
    a_rename_whose_target_is_taken_is_named_in_the_errors_and_nothing_is_stored,
    a_migrated_submit_names_each_rename_applied_in_its_202_as_a_deprecation,
    past_queue_size_a_submit_is_refused_before_its_body_is_read,
    concurrent_submits_are_admitted_up_to_the_queue_size_exactly,
    a_secret_value_is_listed_together_with_every_other_problem,
    the_secret_lists_are_derived_by_the_api_not_taken_from_the_client,
    a_form_hint_refusal_names_the_key_that_does_not_apply,
);
