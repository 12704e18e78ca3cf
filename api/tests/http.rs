//! The HTTP API against a real temporary SQLite database, through the router
//! (`tower::ServiceExt::oneshot`). Inputs come from `testdata/cases` (copies
//! of `../shared/cases`) and `examples/demo.json`.

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use slipway_api::{app, AppState};
use slipway_jobs::config::Config;
use slipway_jobs::store::{Engine, Q};
use slipway_jobs::test_support::TestDatabase;
use std::collections::BTreeMap;
use std::path::PathBuf;
use tower::ServiceExt;

const SECRET: &str = "test-secret-of-at-least-32-bytes-long";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn case(name: &str) -> Value {
    let text = std::fs::read_to_string(repo().join("testdata/cases").join(name)).expect("case file");
    serde_json::from_str(&text).expect("case JSON")
}

fn demo() -> Value {
    serde_json::from_str(&std::fs::read_to_string(repo().join("examples/demo.json")).unwrap()).unwrap()
}

struct Harness {
    router: Router,
    db: slipway_jobs::store::Db,
    database: TestDatabase,
}

async fn harness(engine: Engine) -> Harness {
    harness_with(engine, &[]).await
}

async fn harness_with(engine: Engine, extra: &[(&str, &str)]) -> Harness {
    let database = TestDatabase::new(engine).await;
    let mut keys = BTreeMap::from([
        ("DATABASE_URL".to_owned(), database.url.clone()),
        ("SLIPWAY_STATE_DIR".to_owned(), database.path("state").display().to_string()),
        ("SLIPWAY_JWT_SECRET".to_owned(), SECRET.to_owned()),
    ]);
    keys.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let config = Config::from_keys(&keys).unwrap();
    let db = slipway_jobs::store::open(&config).await.unwrap();
    let state = AppState::new(config, db.clone()).unwrap();
    Harness { router: app(state), db, database }
}

fn token(deployments: &[&str], exp_offset: i64, secret: &str) -> String {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let claims = json!({ "sub": "t", "aud": "slipway", "exp": now + exp_offset, "deployments": deployments });
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

fn all() -> String {
    token(&["*"], 3600, SECRET)
}

impl Harness {
    async fn call(
        &self,
        method: Method,
        uri: &str,
        bearer: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> (StatusCode, Value) {
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(t) = bearer {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = match body {
            Some(b) => req.header(header::CONTENT_TYPE, "application/json").body(Body::from(b)),
            None => req.body(Body::empty()),
        }
        .unwrap();
        let res = self.router.clone().oneshot(req).await.unwrap();
        let status = res.status();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        let value =
            serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({ "raw": String::from_utf8_lossy(&bytes) }));
        (status, value)
    }

    async fn put(&self, id_path: &str, body: &Value) -> (StatusCode, Value) {
        self.call(Method::PUT, &format!("/deployments/{id_path}"), Some(&all()), Some(body.to_string().into_bytes()))
            .await
    }

    /// Rows in one of our tables, or in apalis's job table for `"jobs"`.
    async fn count(&self, table: &str) -> i64 {
        let table = match (table, self.db.engine()) {
            ("jobs", Engine::Sqlite) => "Jobs",
            ("jobs", Engine::Postgres) => "apalis.jobs",
            (t, _) => t,
        };
        let mut conn = self.db.acquire().await.unwrap();
        Q::new(format!("SELECT COUNT(*) AS n FROM {table}")).fetch_one(&mut conn).await.unwrap().int("n").unwrap()
    }
}

fn assert_error_shape(body: &Value, code: &str) {
    assert_eq!(body["error"], code, "{body}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    assert!(body.get("details").is_some(), "{body}");
}

/// Percent-encodes a path segment the way a front-end's encodeURIComponent does.
fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

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
    for id in ids["invalid"].as_array().unwrap() {
        let id = id.as_str().unwrap();
        for method in [Method::PUT, Method::GET, Method::DELETE] {
            let body = (method == Method::PUT).then(|| json!({ "configuration": demo() }).to_string().into_bytes());
            let (status, answer) =
                h.call(method.clone(), &format!("/deployments/{}", encode(id)), Some(&all()), body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {id:?}: {answer}");
            assert_error_shape(&answer, "invalid_deployment_id");
        }
    }
    assert_eq!(h.count("deployments").await, 0);
    assert_eq!(h.count("builds").await, 0);
    assert_eq!(h.count("jobs").await, 0);
}

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

async fn missing_expired_and_forged_tokens_are_unauthorized(engine: Engine) {
    let h = harness(engine).await;
    let body = || Some(json!({ "configuration": demo() }).to_string().into_bytes());
    let expired = token(&["*"], -3600, SECRET);
    let forged = token(&["*"], 3600, "another-secret-of-at-least-32-bytes!");
    for bearer in [None, Some(expired.as_str()), Some(forged.as_str()), Some("not.a.jwt")] {
        let (status, answer) = h.call(Method::PUT, "/deployments/demo", bearer, body()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{bearer:?}: {answer}");
        assert_error_shape(&answer, "unauthorized");
    }
    assert_eq!(h.count("deployments").await, 0);
}

async fn a_token_without_the_id_in_scope_is_forbidden(engine: Engine) {
    let h = harness(engine).await;
    let other = token(&["other"], 3600, SECRET);
    let (status, body) = h
        .call(
            Method::PUT,
            "/deployments/demo",
            Some(&other),
            Some(json!({ "configuration": demo() }).to_string().into_bytes()),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_error_shape(&body, "forbidden");
    assert_eq!(h.count("deployments").await, 0);
    let (status, _) = h.call(Method::GET, "/deployments/demo", Some(&other), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
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
    let claimed = slipway_jobs::store::builds::claim(&h.db, &first, "a-worker").await.unwrap().unwrap();
    let finish = slipway_jobs::store::builds::Finish {
        status: slipway_jobs::state::BuildStatus::Succeeded,
        reason: None,
        error: None,
        report: json!({}),
    };
    let recorded = slipway_jobs::store::builds::finish(&h.db, &claimed, &finish, |_| Box::pin(async { Ok(()) }));
    assert!(recorded.await.unwrap());
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

async fn a_token_just_expired_or_not_yet_valid_is_refused_and_a_list_audience_is_read(engine: Engine) {
    let h = harness(engine).await;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let sign = |claims: Value| {
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
            &claims,
            &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap()
    };
    let just_expired = sign(json!({ "aud": "slipway", "exp": now - 5, "deployments": ["*"] }));
    let not_yet = sign(json!({ "aud": "slipway", "exp": now + 3600, "nbf": now + 3600, "deployments": ["*"] }));
    for (t, why) in [(&just_expired, "expired"), (&not_yet, "not valid yet")] {
        let (status, body) = h.call(Method::GET, "/deployments/demo", Some(t), None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert!(body["message"].as_str().unwrap().contains(why), "{body}");
    }
    let listed = sign(json!({ "aud": ["other", "slipway"], "exp": now + 3600, "deployments": ["*"] }));
    let (status, body) = h.call(Method::GET, "/deployments/demo", Some(&listed), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
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

slipway_jobs::on_both_engines!(
    builds_are_listed_in_pages_joined_by_a_cursor,
    concurrent_submits_are_admitted_up_to_the_queue_size_exactly,
    readyz_answers_503_when_the_database_is_gone,
    a_form_hint_refusal_names_the_key_that_does_not_apply,
    a_secret_value_is_listed_together_with_every_other_problem,
    the_secret_lists_are_derived_by_the_api_not_taken_from_the_client,
    rejected_query_strings_and_path_segments_get_the_json_error_shape,
    a_token_just_expired_or_not_yet_valid_is_refused_and_a_list_audience_is_read,
    a_list_names_each_deployment_once_and_is_bounded,
    a_queued_build_can_be_cancelled_once,
    every_valid_deployment_id_is_accepted_and_stored_as_given,
    every_invalid_deployment_id_is_refused_and_writes_nothing,
    every_valid_slug_gives_a_fresh_label_and_every_invalid_one_is_refused,
    a_configuration_that_fails_the_schema_lists_every_path_and_stores_nothing,
    a_secret_value_without_openbao_is_an_invalid_configuration,
    missing_expired_and_forged_tokens_are_unauthorized,
    a_token_without_the_id_in_scope_is_forbidden,
    an_unknown_deployment_is_not_found_on_read_and_delete,
    a_malformed_json_body_gets_the_json_error_shape,
    a_submit_stores_the_build_and_its_job_together_and_a_delete_waits_its_turn,
    a_read_names_the_build_its_state_comes_from_when_the_newest_never_ran,
    a_deployment_read_gives_domain_and_instances_from_the_source_meta,
    deleting_twice_answers_the_same_destroy,
    the_public_schema_serves_the_whole_schema_and_each_application,
    an_explicit_module_source_outside_the_allowlist_is_refused,
    a_configuration_in_an_old_shape_is_migrated_along_rename_chains_before_it_is_stored,
    a_rename_whose_target_is_taken_is_named_in_the_errors_and_nothing_is_stored,
    past_queue_size_a_submit_is_refused_before_its_body_is_read,
);

/// While PostgreSQL refuses the database's connections (an outage), reads
/// and submits answer `503 service_unavailable`, never `500`.
#[tokio::test]
async fn requests_during_a_database_outage_answer_503() {
    let h = harness(Engine::Postgres).await;
    h.database.accept_connections(false).await;
    let read = h.call(Method::GET, "/deployments/demo", Some(&all()), None).await;
    let submit = h.put("demo", &json!({ "configuration": demo() })).await;
    h.database.accept_connections(true).await;
    for (status, body) in [read, submit] {
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_error_shape(&body, "service_unavailable");
    }
}
