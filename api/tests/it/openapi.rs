//! The OpenAPI document (`GET /openapi.json`) against the router and the
//! answers it really gives: every route of the router is in it (but the
//! pages named in [`NOT_API`]), it is OpenAPI 3.1 whose every `$ref`
//! resolves, and real answers validate against the schema documented for
//! their route and status. The documentation page (`GET /docs`) is served
//! from the binary alone.

use crate::common;
use crate::route_table;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use common::*;
use http_body_util::BodyExt;
use route_table::{registered_paths, routes, Access};
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use std::collections::BTreeSet;
use tower::ServiceExt;

/// Routes of the router that are not part of the API the document
/// describes: the document itself and its documentation page. A new route
/// that is not API (a dashboard, metrics) is named here.
const NOT_API: &[&str] = &[
    "/openapi.json",
    "/docs",
    "/docs/swagger-ui.css",
    "/docs/swagger-ui-bundle.js",
    // The dashboard: its page, files and HTML fragments (docs/DASHBOARD.md).
    "/ui",
    "/ui/dashboard.js",
    "/ui/dashboard.css",
    "/ui/fragments/deployments",
    "/ui/fragments/deployments/{id}",
    "/ui/fragments/builds/{id}",
    "/ui/fragments/fleet",
    "/ui/fragments/webhooks",
    "/ui/fragments/rollouts",
    "/ui/fragments/rollouts/{id}",
    // Prometheus's text format (docs/METRICS.md).
    "/metrics",
];

/// The document as the api serves it, without a token.
async fn served(h: &Harness) -> Value {
    let (status, doc) = h.call(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    doc
}

/// The route table's path in the document's syntax (`/builds/{id}` for `/builds/{build}`).
fn template(uri: &str) -> String {
    route_table::template(uri)
}

#[tokio::test]
async fn every_route_of_the_router_is_in_the_document_but_the_pages_named_as_not_api() {
    let h = harness(Engine::Sqlite).await;
    // The table is checked against the router by auth_matrix.rs; here too, so
    // this test cannot pass on a stale table.
    route_table::the_table_names_every_route_of(&h.router, &all()).await;
    let doc = served(&h).await;
    let paths = doc["paths"].as_object().expect("paths");
    let mut missing = Vec::new();
    let mut documented = BTreeSet::new();
    for route in routes() {
        let path = template(route.uri);
        if NOT_API.contains(&path.as_str()) {
            continue;
        }
        let method = route.method.as_str().to_ascii_lowercase();
        documented.insert((path.clone(), method.clone()));
        if paths.get(&path).and_then(|p| p.get(&method)).is_none() {
            missing.push(format!("{} {path}", route.method));
        }
    }
    assert!(missing.is_empty(), "routes of the router missing from /openapi.json: {missing:?}");
    for path in registered_paths() {
        assert!(paths.contains_key(&path) || NOT_API.contains(&path.as_str()), "{path} is not in the document");
    }
    // Nor does the document describe what the router does not serve.
    for (path, item) in paths {
        for method in
            item.as_object().unwrap().keys().filter(|k| ["get", "put", "post", "delete"].contains(&k.as_str()))
        {
            assert!(
                documented.contains(&(path.clone(), method.clone())),
                "{method} {path} is documented but not routed"
            );
        }
    }
}

/// Every `$ref` under `value`, with where it was found.
fn refs<'a>(value: &'a Value, at: String, out: &mut Vec<(String, &'a str)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push((at.clone(), r)),
                    _ => refs(v, format!("{at}/{k}"), out),
                }
            }
        }
        Value::Array(items) => items.iter().enumerate().for_each(|(i, v)| refs(v, format!("{at}/{i}"), out)),
        _ => {}
    }
}

/// A validator for the schema at JSON pointer `pointer` of `doc`, its
/// `$ref`s resolved inside the document.
fn validator(doc: &Value, pointer: &str) -> jsonschema::Validator {
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": format!("#{pointer}"),
        "components": doc["components"],
        "paths": doc["paths"],
    });
    jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{pointer}: {e}"))
}

#[tokio::test]
async fn the_document_is_openapi_3_1_and_every_ref_resolves_and_every_schema_compiles() {
    let h = harness(Engine::Sqlite).await;
    let doc = served(&h).await;
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.1.")), "{}", doc["openapi"]);
    assert!(doc["info"]["title"].is_string() && doc["info"]["version"].is_string());
    let mut found = Vec::new();
    refs(&doc, String::new(), &mut found);
    assert!(found.len() > 50, "too few $refs: {}", found.len());
    for (at, r) in &found {
        let pointer = r.strip_prefix('#').unwrap_or_else(|| panic!("{at}: {r} is not local"));
        assert!(doc.pointer(pointer).is_some(), "{at}: {r} does not resolve");
    }
    for name in doc["components"]["schemas"].as_object().expect("schemas").keys() {
        validator(&doc, &format!("/components/schemas/{name}"));
    }
    let mut ids = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let what = format!("{method} {path}");
            assert!(ids.insert(op["operationId"].as_str().expect("operationId").to_owned()), "{what}: its id repeats");
            let responses = op["responses"].as_object().expect("responses");
            // `/deployments/` (the empty id) only ever refuses.
            if path != "/deployments/" {
                assert!(responses.keys().any(|s| s.starts_with('2')), "{what}: no success answer");
            }
            for (status, answer) in responses {
                if status.as_str() >= "400" {
                    assert_eq!(
                        answer["content"]["application/json"]["schema"]["$ref"], "#/components/schemas/Error",
                        "{what} {status}: not the one error shape"
                    );
                }
            }
        }
    }
}

#[tokio::test]
async fn every_route_documents_its_security_and_the_refusals_it_can_answer() {
    let h = harness(Engine::Sqlite).await;
    let doc = served(&h).await;
    let schemes = doc["components"]["securitySchemes"].as_object().expect("security schemes");
    assert_eq!(schemes["bearer"], json!({ "type": "http", "scheme": "bearer", "bearerFormat": "JWT" }));
    assert_eq!(schemes["access_token"]["in"], "query");
    assert_eq!(schemes["ticket"]["in"], "query");
    for route in routes().iter().filter(|r| !NOT_API.contains(&template(r.uri).as_str())) {
        let op = &doc["paths"][template(route.uri)][route.method.as_str().to_ascii_lowercase()];
        let what = route.name();
        let security: Vec<String> = op["security"]
            .as_array()
            .map(|s| s.iter().flat_map(|r| r.as_object().unwrap().keys().cloned()).collect())
            .unwrap_or_default();
        let statuses: BTreeSet<&str> = op["responses"].as_object().unwrap().keys().map(String::as_str).collect();
        for status in ["413", "431", "500"] {
            assert!(statuses.contains(status), "{what}: {status} is not documented");
        }
        match route.access {
            Access::Public => assert!(security.is_empty(), "{what}: a public route asks for {security:?}"),
            access => {
                let want: &[&str] = if route.stream { &["bearer", "access_token", "ticket"] } else { &["bearer"] };
                assert_eq!(security, want, "{what}");
                assert!(statuses.contains("401"), "{what}: 401 is not documented");
                if access == Access::Deployment {
                    assert!(statuses.contains("403"), "{what}: 403 is not documented");
                }
                if access == Access::Build {
                    assert!(statuses.contains("404"), "{what}: 404 is not documented");
                }
            }
        }
        for status in route.in_scope {
            assert!(statuses.contains(status.to_string().as_str()), "{what}: {status} is not documented");
        }
        if route.input.reads_body() {
            assert!(statuses.contains("400") && op["requestBody"].is_object(), "{what}: its body is not documented");
            // schemathesis found it missing on PUT /deployments/{id}: a body not sent as JSON.
            assert!(statuses.contains("415"), "{what}: 415 is not documented");
        }
    }
}

/// Panics unless `body`, answered with `status` to `method path`, is valid
/// against the schema the document gives for it.
fn assert_documented(doc: &Value, method: &str, path: &str, status: StatusCode, body: &Value) {
    let what = format!("{method} {path} {status}");
    let escaped = path.replace('~', "~0").replace('/', "~1");
    let pointer = format!("/paths/{escaped}/{}/responses/{}", method.to_ascii_lowercase(), status.as_u16());
    let answer = doc.pointer(&pointer).unwrap_or_else(|| panic!("{what}: not documented"));
    let content = answer["content"].as_object().unwrap_or_else(|| panic!("{what}: no content documented"));
    let media = content.keys().next().unwrap();
    let schema = format!("{pointer}/content/{}/schema", media.replace('/', "~1"));
    let validator = validator(doc, &schema.replace('{', "%7B").replace('}', "%7D"));
    let errors: Vec<String> = validator.iter_errors(body).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{what}: the answer breaks its documented schema: {errors:?}\n{body}");
}

async fn real_answers_validate_against_their_documented_schemas(engine: Engine) {
    let h = harness(engine).await;
    let doc = served(&h).await;
    let token = all();
    let json_body = |v: Value| Some(v.to_string().into_bytes());
    let mut calls: Vec<(Method, String, String, Option<Vec<u8>>)> = vec![
        (Method::GET, "/healthz".into(), "/healthz".into(), None),
        (Method::GET, "/readyz".into(), "/readyz".into(), None),
        (Method::GET, "/version".into(), "/version".into(), None),
        (Method::GET, "/schema?application=nope".into(), "/schema".into(), None),
        (Method::GET, "/renames".into(), "/renames".into(), None),
        (Method::POST, "/labels".into(), "/labels".into(), json_body(json!({ "slug": "demo" }))),
        (Method::POST, "/labels".into(), "/labels".into(), json_body(json!({ "slug": "Not A Slug" }))),
        (
            Method::POST,
            "/application-paths".into(),
            "/application-paths".into(),
            json_body(json!({ "configuration": demo(), "previous": {} })),
        ),
        (Method::POST, "/sections".into(), "/sections".into(), json_body(json!({ "configuration": demo() }))),
        (
            Method::PUT,
            "/deployments/demo".into(),
            "/deployments/{id}".into(),
            json_body(json!({ "configuration": demo() })),
        ),
        (
            Method::PUT,
            "/deployments/demo".into(),
            "/deployments/{id}".into(),
            json_body(json!({ "configuration": {"x": 1} })),
        ),
        (Method::GET, "/deployments/demo".into(), "/deployments/{id}".into(), None),
        (Method::GET, "/deployments/nope".into(), "/deployments/{id}".into(), None),
        (Method::GET, "/deployments?ids=demo,nope".into(), "/deployments".into(), None),
        (Method::GET, "/deployments/demo/builds?limit=1".into(), "/deployments/{id}/builds".into(), None),
        (Method::GET, "/sbom-list/demo".into(), "/sbom-list/{id}".into(), None),
        (Method::POST, "/schema/get_for".into(), "/schema/get_for".into(), json_body(json!({}))),
        (Method::POST, "/renames/get_for".into(), "/renames/get_for".into(), json_body(json!({ "section": "nope" }))),
    ];
    let mut build = String::new();
    let mut i = 0;
    while i < calls.len() {
        let (method, uri, path, body) = calls[i].clone();
        let (status, answer) = h.call(method.clone(), &uri, Some(&token), body).await;
        assert_documented(&doc, method.as_str(), &path, status, &answer);
        if method == Method::PUT && status == StatusCode::ACCEPTED && build.is_empty() {
            build = answer["build_id"].as_str().unwrap().to_owned();
            calls.push((Method::GET, format!("/builds/{build}"), "/builds/{id}".into(), None));
            calls.push((Method::POST, format!("/builds/{build}/cancel"), "/builds/{id}/cancel".into(), None));
            calls.push((Method::POST, format!("/builds/{build}/cancel"), "/builds/{id}/cancel".into(), None));
            calls.push((
                Method::DELETE,
                "/deployments/demo".into(),
                "/deployments/{id}".into(),
                json_body(json!({ "callback_url": "ftp://x", "callback_token": "t" })),
            ));
            calls.push((Method::GET, "/deployments/demo".into(), "/deployments/{id}".into(), None));
        }
        i += 1;
    }
    assert!(!build.is_empty(), "the submit was not accepted");
    // Refusals by the router's layers and the token check, in the one shape.
    let (status, answer) = h.call(Method::GET, "/deployments/demo", None, None).await;
    assert_documented(&doc, "GET", "/deployments/{id}", status, &answer);
    let (status, answer) = h.call(Method::GET, "/deployments/", Some(&token), None).await;
    assert_documented(&doc, "GET", "/deployments/", status, &answer);
}

slipway_jobs::on_both_engines!(real_answers_validate_against_their_documented_schemas);

#[tokio::test]
async fn the_documentation_page_and_its_files_come_from_the_binary_alone() {
    let h = harness(Engine::Sqlite).await;
    let get = |uri: &'static str| {
        let router = h.router.clone();
        async move {
            let answer = router.oneshot(Request::get(uri).body(Body::empty()).unwrap()).await.unwrap();
            let status = answer.status();
            let media = answer.headers()[header::CONTENT_TYPE].to_str().unwrap().to_owned();
            let bytes = answer.into_body().collect().await.unwrap().to_bytes();
            (status, media, String::from_utf8(bytes.to_vec()).unwrap())
        }
    };
    let (status, media, page) = get("/docs").await;
    assert_eq!((status, media.as_str()), (StatusCode::OK, "text/html; charset=utf-8"));
    // Swagger UI's online validator would send the document's address to
    // a third party: it is off, and the page may load from its origin only.
    assert!(page.contains("validatorUrl: null"), "{page}");
    let answer = h.router.clone().oneshot(Request::get("/docs").body(Body::empty()).unwrap()).await.unwrap();
    let policy = answer.headers()[header::CONTENT_SECURITY_POLICY].to_str().unwrap().to_owned();
    for directive in ["default-src 'none'", "img-src 'self' data:", "connect-src 'self'"] {
        assert!(policy.contains(directive), "{policy}");
    }
    assert!(!policy.contains("unsafe-eval") && !policy.contains("script-src 'self' 'unsafe-inline'"), "{policy}");
    for link in ["\"docs/swagger-ui.css\"", "\"docs/swagger-ui-bundle.js\"", "\"openapi.json\""] {
        assert!(page.contains(link), "the page does not load {link}");
    }
    assert!(!page.contains("http://") && !page.contains("https://") && !page.contains("//cdn"), "{page}");
    let (status, media, css) = get("/docs/swagger-ui.css").await;
    assert_eq!((status, media.as_str()), (StatusCode::OK, "text/css"));
    assert!(css.len() > 10_000 && css.contains(".swagger-ui"), "{} bytes", css.len());
    let (status, media, js) = get("/docs/swagger-ui-bundle.js").await;
    assert!(status == StatusCode::OK && media.contains("javascript"), "{status} {media}");
    assert!(js.len() > 500_000 && js.contains("SwaggerUIBundle"), "{} bytes", js.len());
}

#[tokio::test]
async fn the_documented_deployment_id_accepts_exactly_the_ids_the_api_accepts() {
    let h = harness(Engine::Sqlite).await;
    let doc = served(&h).await;
    let token = all();
    for path in ["/deployments/{id}", "/deployments/{id}/builds", "/sbom-list/{id}"] {
        let parameters = doc["paths"][path]["get"]["parameters"].as_array().expect("parameters");
        let id = parameters.iter().find(|p| p["name"] == "id" && p["in"] == "path").expect("the id parameter");
        let schema = jsonschema::validator_for(&id["schema"]).unwrap();
        let long = "a".repeat(40);
        let too_long = "a".repeat(41);
        for id in ["a", "demo", "a-b", "0", "9-z", &long, &too_long, "-a", "a-", "A", "a_b", "a.b", "a%20b"] {
            let (status, answer) = h.call(Method::GET, &path.replace("{id}", id), Some(&token), None).await;
            let refused = status == StatusCode::BAD_REQUEST && answer["error"] == "invalid_deployment_id";
            let decoded = id.replace("%20", " ");
            assert_eq!(schema.is_valid(&json!(decoded)), !refused, "{path} with {id:?}: {status} {answer}");
        }
    }
}

#[tokio::test]
async fn documented_bounds_agree_with_what_the_api_accepts() {
    let h = harness(Engine::Sqlite).await;
    let doc = served(&h).await;
    let token = all();
    // A label's slug.
    let slug = jsonschema::validator_for(&json!({
        "$ref": "#/components/schemas/LabelRequest/properties/slug",
        "components": doc["components"],
    }))
    .unwrap();
    for s in ["demo", "a", "a-b-0", "", "-a", "a-", "A", "a b", "a_b"] {
        let (status, answer) =
            h.call(Method::POST, "/labels", None, Some(json!({ "slug": s }).to_string().into_bytes())).await;
        assert_eq!(slug.is_valid(&json!(s)), status == StatusCode::OK, "slug {s:?}: {status} {answer}");
    }
    // A page's size.
    let body = json!({ "configuration": demo() }).to_string().into_bytes();
    let (status, answer) = h.call(Method::PUT, "/deployments/demo", Some(&token), Some(body)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let parameters = doc["paths"]["/deployments/{id}/builds"]["get"]["parameters"].as_array().unwrap();
    let limit = parameters.iter().find(|p| p["name"] == "limit").expect("limit");
    let limit = jsonschema::validator_for(&limit["schema"]).unwrap();
    for n in [0, 1, 2, 100, 101] {
        let (status, answer) =
            h.call(Method::GET, &format!("/deployments/demo/builds?limit={n}"), Some(&token), None).await;
        assert_eq!(limit.is_valid(&json!(n)), status == StatusCode::OK, "limit {n}: {status} {answer}");
    }
    // A delete's body may be left out.
    assert_eq!(doc["paths"]["/deployments/{id}"]["delete"]["requestBody"]["required"], false);
}

/// The `enum` of schema `name` in the document's components.
fn enum_of(doc: &Value, name: &str) -> BTreeSet<String> {
    let values = doc["components"]["schemas"][name]["enum"].as_array();
    let values =
        values.unwrap_or_else(|| panic!("schema {name} is not an enum: {}", doc["components"]["schemas"][name]));
    values.iter().map(|v| v.as_str().unwrap().to_owned()).collect()
}

/// A source file of the workspace, up to its unit tests.
fn source(path: &str) -> String {
    let text = std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.find("#[cfg(test)]").map_or(text.clone(), |end| text[..end].to_owned())
}

/// Every `.rs` file under `dir` of the workspace.
fn sources_under(dir: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![repo().join(dir)];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path.strip_prefix(repo()).unwrap().display().to_string());
            }
        }
    }
    found
}

/// The quoted words after each of `openers` in `text`, skipping a status
/// argument (`ApiError::new(StatusCode::CONFLICT, "build_finished"`).
fn codes_after(text: &str, openers: &[&str]) -> BTreeSet<String> {
    let mut codes = BTreeSet::new();
    for opener in openers {
        let mut rest = text;
        while let Some(at) = rest.find(opener) {
            rest = &rest[at + opener.len()..];
            let mut args = rest.trim_start();
            if let Some(status) =
                args.strip_prefix("StatusCode::").or_else(|| args.strip_prefix("axum::http::StatusCode::"))
            {
                args = status.split_once(',').map_or("", |(_, after)| after).trim_start();
            }
            if let Some(quoted) = args.strip_prefix('"') {
                let word = &quoted[..quoted.find('"').unwrap()];
                if !word.is_empty() && word.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                    codes.insert(word.to_owned());
                }
            }
        }
    }
    codes
}

#[tokio::test]
async fn every_error_code_the_api_can_answer_is_in_the_documented_error_code_enum() {
    let doc = served(&harness(Engine::Sqlite).await).await;
    let documented = enum_of(&doc, "ErrorCode");
    let listed: BTreeSet<String> = slipway_api::error::ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(listed, documented, "ErrorCode::ALL and the enum's variants differ");
    assert_eq!(
        doc["components"]["schemas"]["Error"]["properties"]["error"]["$ref"], "#/components/schemas/ErrorCode",
        "the error answer's `error` is not documented as the enum"
    );
    // The codes the api's own code writes …
    let mut produced = BTreeSet::new();
    for file in sources_under("api/src") {
        produced.extend(codes_after(&source(&file), &["bad_request(", "ApiError::new(", "Self::new("]));
    }
    // … the router's safety net gives any status …
    for status in 400..=599u16 {
        produced.insert(slipway_api::error::status_code(StatusCode::from_u16(status).unwrap()).0.to_owned());
    }
    // … and a module source's failures pass their own codes on.
    let failures = source("jobs/src/nix/failure.rs");
    let arms = &failures[failures.find("pub fn as_str").unwrap()..];
    let arms = &arms[..arms.find("\n    }\n").unwrap()];
    produced.extend(codes_after(arms, &["=> "]));
    assert!(produced.len() >= 30, "the sources were not read right: {produced:?}");
    let missing: Vec<&String> = produced.difference(&documented).collect();
    assert!(missing.is_empty(), "codes the api can answer that the ErrorCode enum does not list: {missing:?}");
}

/// Properties that are both optional and nullable, and why: those of a
/// stored outcome that holds them, maybe null, only once it was sent.
const OPTIONAL_AND_NULLABLE: &[&str] = &["CallbackView.status", "CallbackView.error", "CallbackView.address"];

/// Whether a property's schema admits `null`.
fn admits_null(schema: &Value) -> bool {
    let in_type = match &schema["type"] {
        Value::String(t) => t == "null",
        Value::Array(types) => types.iter().any(|t| t == "null"),
        _ => false,
    };
    let in_choice =
        ["oneOf", "anyOf"].iter().any(|k| schema[k].as_array().is_some_and(|xs| xs.iter().any(admits_null)));
    in_type || in_choice || schema["nullable"] == true
}

/// The names of the component schemas an answer (not a request) can carry.
fn answer_schemas(doc: &Value) -> BTreeSet<String> {
    let mut out = Vec::new();
    for item in doc["paths"].as_object().unwrap().values() {
        for operation in item.as_object().unwrap().values() {
            refs(&operation["responses"], String::new(), &mut out);
        }
    }
    let mut names: BTreeSet<String> = BTreeSet::new();
    let mut todo: Vec<String> =
        out.iter().filter_map(|(_, r)| r.strip_prefix("#/components/schemas/").map(str::to_owned)).collect();
    while let Some(name) = todo.pop() {
        if names.insert(name.clone()) {
            let mut inner = Vec::new();
            refs(&doc["components"]["schemas"][&name], String::new(), &mut inner);
            todo.extend(inner.iter().filter_map(|(_, r)| r.strip_prefix("#/components/schemas/").map(str::to_owned)));
        }
    }
    names
}

#[tokio::test]
async fn a_property_an_answer_omits_when_empty_is_documented_optional_and_not_nullable() {
    let doc = served(&harness(Engine::Sqlite).await).await;
    let mut wrong = Vec::new();
    let names = answer_schemas(&doc);
    assert!(names.contains("Accepted") && names.contains("BuildView"), "{names:?}");
    for name in &names {
        let schema = &doc["components"]["schemas"][name];
        let required: BTreeSet<&str> =
            schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        for (property, value) in schema["properties"].as_object().into_iter().flatten() {
            let what = format!("{name}.{property}");
            if !required.contains(property.as_str())
                && admits_null(value)
                && !OPTIONAL_AND_NULLABLE.contains(&what.as_str())
            {
                wrong.push(what);
            }
        }
    }
    assert!(wrong.is_empty(), "optional properties documented as nullable (absent is not null): {wrong:?}");
}

#[tokio::test]
async fn build_reasons_and_callback_states_are_documented_as_enums_with_every_value_stored() {
    let doc = served(&harness(Engine::Sqlite).await).await;
    let schemas = &doc["components"]["schemas"];
    assert_eq!(schemas["BuildView"]["properties"]["reason"]["oneOf"][1]["$ref"], "#/components/schemas/BuildReason");
    assert_eq!(schemas["BuildSummary"]["properties"]["reason"]["$ref"], "#/components/schemas/BuildReason");
    let reasons = enum_of(&doc, "BuildReason");
    // Every reason the workers' reports and the store write.
    let report = source("jobs/src/jobs/report.rs");
    let arms = &report[report.find("pub fn as_str").unwrap()..];
    let mut written = codes_after(&arms[..arms.find("\n    }\n").unwrap()], &["=> "]);
    for file in sources_under("jobs/src/store") {
        let text = source(&file);
        for (_, rest) in text.match_indices("reason = '").map(|(at, m)| (at, &text[at + m.len()..])) {
            written.insert(rest[..rest.find('\'').unwrap()].to_owned());
        }
    }
    assert!(written.contains("superseded") && written.contains("nodes_failed"), "{written:?}");
    assert_eq!(reasons, written, "the documented build reasons, then those written");
    assert_eq!(schemas["CallbackView"]["properties"]["state"]["$ref"], "#/components/schemas/CallbackState");
    let states = enum_of(&doc, "CallbackState");
    let want = ["waiting", "queued", "sending", "delivered", "failed", "not_sent"];
    assert_eq!(states, want.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>());
}
