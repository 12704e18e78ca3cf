//! IK-1 over the router: `Idempotency-Key` on every route that queues work
//! (a retry answers the first answer and queues nothing; another request
//! with the key is `422`; one in flight `409`; keys per token subject;
//! hostile keys refused), and `ETag` / `If-Match` / `If-None-Match` on a
//! deployment (two tabs: the second write is `412`, nothing changed).

use crate::common;

use axum::body::Body;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use common::*;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use slipway_jobs::store::idempotency::{self, NewClaim, Scope};
use slipway_jobs::store::{now_ms, Engine, Q};
use tower::ServiceExt;

/// An answer: status, headers, JSON body.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

/// One request with `headers` (name, value) and a JSON `body`.
async fn send(
    h: &Harness,
    method: Method,
    uri: &str,
    token: &str,
    headers: &[(&str, &[u8])],
    body: Option<&Value>,
) -> Answer {
    send_to(h.router.clone(), method, uri, token, headers, body).await
}

/// [`send`] to `router`.
async fn send_to(
    router: axum::Router,
    method: Method,
    uri: &str,
    token: &str,
    headers: &[(&str, &[u8])],
    body: Option<&Value>,
) -> Answer {
    let mut req = Request::builder().method(method).uri(uri).header(header::AUTHORIZATION, format!("Bearer {token}"));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let req = match body {
        Some(b) => req.header(header::CONTENT_TYPE, "application/json").body(Body::from(b.to_string())),
        None => req.body(Body::empty()),
    }
    .unwrap();
    let res = router.oneshot(req).await.unwrap();
    let (status, headers) = (res.status(), res.headers().clone());
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    Answer { status, headers, body: serde_json::from_slice(&bytes).unwrap_or(Value::Null) }
}

fn submit_body() -> Value {
    json!({ "configuration": demo() })
}

/// A token for every deployment whose `sub` is `sub`.
fn token_of(sub: &str) -> String {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    sign(&json!({ "sub": sub, "aud": "slipway", "exp": now + 3600, "deployments": ["*"] }))
}

async fn builds_of(h: &Harness, kind: &str) -> i64 {
    let mut conn = h.db.acquire().await.unwrap();
    Q::new("SELECT COUNT(*) AS n FROM builds WHERE kind = $1")
        .text(kind)
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .int("n")
        .unwrap()
}

async fn a_retried_put_with_the_same_key_queues_one_build_and_answers_the_same_body(engine: Engine) {
    let h = harness(engine).await;
    let key: &[(&str, &[u8])] = &[("idempotency-key", b"\"01JD7Q0R6Q3W6Y1B8Z2M4N5P7S\"")];
    let first = send(&h, Method::PUT, "/deployments/demo", &all(), key, Some(&submit_body())).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.body);
    assert!(first.headers.get("idempotency-replayed").is_none());
    let again = send(&h, Method::PUT, "/deployments/demo", &all(), key, Some(&submit_body())).await;
    assert_eq!(again.status, StatusCode::ACCEPTED, "{}", again.body);
    assert_eq!(again.body, first.body, "the retry is answered another body");
    assert_eq!(again.headers["idempotency-replayed"], "true");
    assert_eq!(again.headers[header::CONTENT_TYPE], first.headers[header::CONTENT_TYPE]);
    assert_eq!((h.count("builds").await, h.count("jobs").await), (1, 1), "the retry queued another build");
    // Without the key, the same request is a new submit.
    let (status, _) = h.put("demo", &submit_body()).await;
    assert_eq!((status, h.count("builds").await), (StatusCode::ACCEPTED, 2));
}

async fn the_same_key_with_another_body_or_route_is_422_and_queues_nothing(engine: Engine) {
    let h = harness(engine).await;
    let key: &[(&str, &[u8])] = &[("idempotency-key", b"\"k-1\"")];
    let first = send(&h, Method::PUT, "/deployments/demo", &all(), key, Some(&submit_body())).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.body);
    let mut other = demo();
    other["domain"] = json!("other.example.org");
    let again = send(&h, Method::PUT, "/deployments/demo", &all(), key, Some(&json!({ "configuration": other }))).await;
    assert_eq!(again.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", again.body);
    assert_error_shape(&again.body, "idempotency_key_reused");
    let elsewhere = send(&h, Method::PUT, "/deployments/demo-2", &all(), key, Some(&submit_body())).await;
    assert_eq!(elsewhere.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", elsewhere.body);
    let precondition: &[(&str, &[u8])] = &[("idempotency-key", b"\"k-1\""), ("if-match", b"*")];
    let conditional = send(&h, Method::PUT, "/deployments/demo", &all(), precondition, Some(&submit_body())).await;
    assert_error_shape(&conditional.body, "idempotency_key_reused");
    assert_eq!(h.count("builds").await, 1);
    assert_eq!(h.count("deployments").await, 1);
}

/// A request in flight holds its key: the same request is `409` with
/// `Retry-After`. An api killed mid-request leaves the key in flight only
/// until its lease: then the retry runs.
async fn a_key_in_flight_is_409_until_its_lease_passes(engine: Engine) {
    let h = harness(engine).await;
    let body = submit_body().to_string();
    let mut headers = HeaderMap::new();
    headers.insert("idempotency-key", "\"k-2\"".parse().unwrap());
    let fingerprint = slipway_api::idempotency::fingerprint(
        &Method::PUT,
        &"/deployments/demo".parse().unwrap(),
        &headers,
        body.as_bytes(),
    );
    let now = now_ms();
    let scope = Scope { iss: "", sub: "t" };
    let mut conn = h.db.begin_write().await.unwrap();
    let claim = NewClaim {
        scope,
        key: "k-2",
        fingerprint: &fingerprint,
        claim: "another api",
        now,
        lease_until: now + 60_000,
        expires_at: now + 86_400_000,
    };
    assert!(idempotency::claim(&mut conn, &claim).await.unwrap());
    conn.commit().await.unwrap();
    let key: &[(&str, &[u8])] = &[("idempotency-key", b"\"k-2\"")];
    let busy = send(&h, Method::PUT, "/deployments/demo", &all(), key, Some(&submit_body())).await;
    assert_eq!(busy.status, StatusCode::CONFLICT, "{}", busy.body);
    assert_error_shape(&busy.body, "idempotency_key_in_flight");
    assert_eq!(busy.headers[header::RETRY_AFTER], "1");
    assert_eq!(h.count("builds").await, 0);
    // The api that held it died: its lease passes, and the retry runs once.
    let mut conn = h.db.begin_write().await.unwrap();
    Q::new("UPDATE idempotency_keys SET lease_until = $1").int(now - 1).execute(&mut conn).await.unwrap();
    conn.commit().await.unwrap();
    let taken = send(&h, Method::PUT, "/deployments/demo", &all(), key, Some(&submit_body())).await;
    assert_eq!(taken.status, StatusCode::ACCEPTED, "{}", taken.body);
    let again = send(&h, Method::PUT, "/deployments/demo", &all(), key, Some(&submit_body())).await;
    assert_eq!((again.status, &again.body), (StatusCode::ACCEPTED, &taken.body));
    assert_eq!(h.count("builds").await, 1);
}

/// Two requests with one key at once, for real (PostgreSQL, where a write
/// can wait on a row lock without holding the process's write turn): the
/// first holds its key while its submit waits on the deployment's row, so
/// the second is `409`; once the first is answered, a third gets its answer.
#[tokio::test]
async fn a_request_still_running_makes_a_retry_with_its_key_409_on_postgres() {
    let h = harness(Engine::Postgres).await;
    let (status, _) = h.put("demo", &submit_body()).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let mut blocker = h.db.begin_write().await.unwrap();
    assert!(blocker.lock_deployment("demo").await.unwrap());
    let key: &[(&str, &[u8])] = &[("idempotency-key", b"\"concurrent\"")];
    let router = h.router.clone();
    let token = all();
    let first = tokio::spawn(async move {
        send_to(
            router,
            Method::PUT,
            "/deployments/demo",
            &token,
            &[("idempotency-key", b"\"concurrent\"")],
            Some(&submit_body()),
        )
        .await
    });
    // The first request holds the key once its claim is committed.
    slipway_jobs::test_support::wait_for(
        "the first request to claim its key",
        std::time::Duration::from_secs(60),
        || async { (h.count("idempotency_keys").await == 1).then_some(()) },
    )
    .await;
    let second = send(&h, Method::PUT, "/deployments/demo", &all(), key, Some(&submit_body())).await;
    assert_eq!(second.status, StatusCode::CONFLICT, "{}", second.body);
    assert_error_shape(&second.body, "idempotency_key_in_flight");
    blocker.rollback().await.unwrap();
    let first = first.await.unwrap();
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.body);
    let third = send(&h, Method::PUT, "/deployments/demo", &all(), key, Some(&submit_body())).await;
    assert_eq!((third.status, &third.body), (StatusCode::ACCEPTED, &first.body));
    assert_eq!(h.count("builds").await, 2);
}

async fn two_subjects_with_one_key_are_independent(engine: Engine) {
    let h = harness(engine).await;
    let key: &[(&str, &[u8])] = &[("idempotency-key", b"\"shared\"")];
    let a = send(&h, Method::PUT, "/deployments/demo", &token_of("alice"), key, Some(&submit_body())).await;
    let b = send(&h, Method::PUT, "/deployments/demo", &token_of("bob"), key, Some(&submit_body())).await;
    assert_eq!((a.status, b.status), (StatusCode::ACCEPTED, StatusCode::ACCEPTED), "{} {}", a.body, b.body);
    assert_ne!(a.body["build_id"], b.body["build_id"]);
    assert!(b.headers.get("idempotency-replayed").is_none());
    assert_eq!(h.count("builds").await, 2);
}

/// DELETE, cancel, apply and rollback: a retry answers the first answer
/// even when the same request without the key would now answer otherwise.
async fn every_queuing_route_answers_a_retry_with_its_first_answer(engine: Engine) {
    let h = harness(engine).await;
    let (status, _) = h.put("demo", &submit_body()).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // A delete, then a submit: a retried delete must not queue a second destroy.
    let key: &[(&str, &[u8])] = &[("idempotency-key", b"\"delete-1\"")];
    let deleted = send(&h, Method::DELETE, "/deployments/demo", &all(), key, None).await;
    assert_eq!(deleted.status, StatusCode::ACCEPTED, "{}", deleted.body);
    let (status, submitted) = h.put("demo", &submit_body()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{submitted}");
    let again = send(&h, Method::DELETE, "/deployments/demo", &all(), key, None).await;
    assert_eq!((again.status, &again.body), (StatusCode::ACCEPTED, &deleted.body));
    assert_eq!(builds_of(&h, "destroy").await, 1);
    // A cancel of a queued build, retried: the same 200, not 409 build_finished.
    let uri = format!("/builds/{}/cancel", submitted["build_id"].as_str().unwrap());
    let key: &[(&str, &[u8])] = &[("idempotency-key", b"\"cancel-1\"")];
    let cancelled = send(&h, Method::POST, &uri, &all(), key, None).await;
    assert_eq!(cancelled.status, StatusCode::OK, "{}", cancelled.body);
    let again = send(&h, Method::POST, &uri, &all(), key, None).await;
    assert_eq!((again.status, &again.body), (StatusCode::OK, &cancelled.body));
    assert_eq!(again.headers["idempotency-replayed"], "true");
    // Apply and rollback carry the layer too: their final refusals are replayed.
    for (path, body) in [("apply", json!({ "plan": "demo-nothing" })), ("rollback", json!({ "to": "demo-nothing" }))] {
        let uri = format!("/deployments/demo/{path}");
        let key: &[(&str, &[u8])] = &[("idempotency-key", path.as_bytes())];
        let first = send(&h, Method::POST, &uri, &all(), key, Some(&body)).await;
        assert!(first.status.is_client_error(), "{path}: {}", first.body);
        let again = send(&h, Method::POST, &uri, &all(), key, Some(&body)).await;
        assert_eq!((again.status, &again.body), (first.status, &first.body), "{path}");
        assert_eq!(again.headers["idempotency-replayed"], "true", "{path}");
    }
}

async fn hostile_keys_are_refused_with_a_clear_message_and_store_nothing(engine: Engine) {
    let h = harness(engine).await;
    let long = vec![b'k'; 10 * 1024];
    for (value, says) in [
        (&long[..], "10240 bytes long"),
        (&b"\"a\tb\""[..], "outside visible ASCII"),
        (&b"\"\""[..], "is empty"),
        (&b"\"unclosed"[..], "does not close"),
        (&b"\"\\x\""[..], "backslash"),
    ] {
        let answer =
            send(&h, Method::PUT, "/deployments/demo", &all(), &[("idempotency-key", value)], Some(&submit_body()))
                .await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
        assert_error_shape(&answer.body, "invalid_idempotency_key");
        let message = answer.body["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
        assert!(!message.contains("kkkkkkkk"), "the key is repeated: {message}");
    }
    let twice = send(
        &h,
        Method::PUT,
        "/deployments/demo",
        &all(),
        &[("idempotency-key", b"a"), ("idempotency-key", b"b")],
        Some(&submit_body()),
    )
    .await;
    assert_error_shape(&twice.body, "invalid_idempotency_key");
    assert_eq!((h.count("builds").await, h.count("idempotency_keys").await), (0, 0));
}

async fn expired_keys_are_taken_again_and_swept(engine: Engine) {
    let h = harness(engine).await;
    let key: &[(&str, &[u8])] = &[("idempotency-key", b"\"old\"")];
    let first = send(&h, Method::PUT, "/deployments/demo", &all(), key, Some(&submit_body())).await;
    assert_eq!(first.status, StatusCode::ACCEPTED);
    let mut conn = h.db.begin_write().await.unwrap();
    Q::new("UPDATE idempotency_keys SET expires_at = $1").int(now_ms() - 1).execute(&mut conn).await.unwrap();
    conn.commit().await.unwrap();
    let later = send(&h, Method::PUT, "/deployments/demo", &all(), key, Some(&submit_body())).await;
    assert_eq!(later.status, StatusCode::ACCEPTED);
    assert_ne!(later.body["build_id"], first.body["build_id"], "an expired key is replayed");
    let mut conn = h.db.acquire().await.unwrap();
    assert_eq!(idempotency::sweep(&mut conn, now_ms()).await.unwrap(), 0, "a live key is swept");
    assert_eq!(idempotency::sweep(&mut conn, now_ms() + 2 * 86_400_000).await.unwrap(), 1);
}

/// Two browser tabs read the same version; the first write wins, the
/// second is `412` and changes nothing.
async fn two_tabs_writing_the_version_they_read_the_second_is_412(engine: Engine) {
    let h = harness(engine).await;
    let create_only: &[(&str, &[u8])] = &[("if-none-match", b"*")];
    let created = send(&h, Method::PUT, "/deployments/demo", &all(), create_only, Some(&submit_body())).await;
    assert_eq!(created.status, StatusCode::ACCEPTED, "{}", created.body);
    let again = send(&h, Method::PUT, "/deployments/demo", &all(), create_only, Some(&submit_body())).await;
    assert_eq!(again.status, StatusCode::PRECONDITION_FAILED, "{}", again.body);
    assert_error_shape(&again.body, "precondition_failed");
    let read = send(&h, Method::GET, "/deployments/demo", &all(), &[], None).await;
    let etag = read.headers[header::ETAG].to_str().unwrap().to_owned();
    assert_eq!(etag, "\"1\"");
    let tab: &[(&str, &[u8])] = &[("if-match", etag.as_bytes())];
    let mut edited = demo();
    edited["domain"] = json!("tab-one.example.org");
    let one = send(&h, Method::PUT, "/deployments/demo", &all(), tab, Some(&json!({ "configuration": edited }))).await;
    assert_eq!(one.status, StatusCode::ACCEPTED, "{}", one.body);
    edited["domain"] = json!("tab-two.example.org");
    let two = send(&h, Method::PUT, "/deployments/demo", &all(), tab, Some(&json!({ "configuration": edited }))).await;
    assert_eq!(two.status, StatusCode::PRECONDITION_FAILED, "{}", two.body);
    assert_error_shape(&two.body, "precondition_failed");
    let read = send(&h, Method::GET, "/deployments/demo", &all(), &[], None).await;
    assert_eq!(read.headers[header::ETAG], "\"2\"");
    assert_eq!(read.body["configuration"]["domain"], "tab-one.example.org");
    assert_eq!(h.count("builds").await, 2);
    // A delete with the stale version is refused too; with the current one it runs.
    let stale = send(&h, Method::DELETE, "/deployments/demo", &all(), tab, None).await;
    assert_error_shape(&stale.body, "precondition_failed");
    assert_eq!(builds_of(&h, "destroy").await, 0);
    let current = send(&h, Method::DELETE, "/deployments/demo", &all(), &[("if-match", b"\"7\", \"2\"")], None).await;
    assert_eq!(current.status, StatusCode::ACCEPTED, "{}", current.body);
    // `If-Match: *` needs the deployment to exist.
    let absent =
        send(&h, Method::PUT, "/deployments/nowhere", &all(), &[("if-match", b"*")], Some(&submit_body())).await;
    assert_error_shape(&absent.body, "precondition_failed");
    let absent = send(&h, Method::DELETE, "/deployments/nowhere", &all(), &[("if-match", b"*")], None).await;
    assert_error_shape(&absent.body, "precondition_failed");
    assert_eq!(h.count("deployments").await, 1);
}

/// The routes that queue work (IK-1), as `METHOD /template` of the route
/// table: each takes an `Idempotency-Key`. A new one must be added here,
/// and wrapped in the router (`idempotent(&state, …)`).
const QUEUING_ROUTES: [&str; 10] = [
    "PUT /deployments/{id}",
    "DELETE /deployments/{id}",
    "POST /deployments/{id}/apply",
    "POST /deployments/{id}/rollback",
    "POST /builds/{id}/cancel",
    "POST /webhooks/{id}/deliveries/{delivery_id}/redeliver",
    "POST /rollouts",
    "POST /rollouts/{id}/pause",
    "POST /rollouts/{id}/resume",
    "POST /rollouts/{id}/cancel",
];

/// The (method, template) pairs `api/src/router.rs` wraps with the
/// idempotency layer: `idempotent(&state, <method>(…))` inside a
/// `.route("…"`, and the submit (`put(submit)`) whose handler carries
/// `idempotency::guard`.
fn wrapped_in_router() -> std::collections::BTreeSet<String> {
    let router = std::fs::read_to_string(format!("{}/src/router.rs", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let submit_guarded = router
        .split("let submit =")
        .nth(1)
        .is_some_and(|rest| rest[..rest.find(';').unwrap()].contains("idempotency::guard"));
    let mut wrapped = std::collections::BTreeSet::new();
    for chunk in router.split(".route(").skip(1) {
        let Some(quoted) = chunk.trim_start().strip_prefix('"') else { continue };
        let path = &quoted[..quoted.find('"').unwrap()];
        let mut rest = chunk;
        while let Some(at) = rest.find("idempotent(&state,") {
            rest = rest[at + "idempotent(&state,".len()..].trim_start();
            let method = &rest[..rest.find('(').unwrap()];
            wrapped.insert(format!("{} {path}", method.to_uppercase()));
        }
        if submit_guarded && chunk.contains("put(submit)") {
            wrapped.insert(format!("PUT {path}"));
        }
    }
    wrapped
}

/// Walks the route table: every queuing route refuses a malformed key
/// (`400 invalid_idempotency_key`) before it does anything, and every
/// other route (the reads, `POST /webhooks` whose answer carries a
/// one-time secret, …) ignores the header. The list of queuing routes is
/// the router's list of wrapped routes, so a queuing route added without
/// the layer fails here.
async fn every_queuing_route_and_no_other_refuses_a_malformed_key(engine: Engine) {
    use crate::route_table::{routes, template, Input};
    let h = harness(engine).await;
    let queuing: std::collections::BTreeSet<String> = QUEUING_ROUTES.iter().map(|r| r.to_string()).collect();
    assert_eq!(queuing.len(), QUEUING_ROUTES.len(), "QUEUING_ROUTES repeats a route");
    assert_eq!(queuing, wrapped_in_router(), "the queuing routes, then the routes the router wraps");
    let table: Vec<_> = routes();
    let names: std::collections::BTreeSet<String> =
        table.iter().map(|r| format!("{} {}", r.method, template(r.uri))).collect();
    assert!(queuing.is_subset(&names), "a queuing route is not in the route table: {queuing:?}");
    for route in &table {
        let name = format!("{} {}", route.method, template(route.uri));
        let body = match route.input {
            Input::Json(body) => Some(body()),
            Input::None | Input::OptionalJson => None,
        };
        let mut req = Request::builder()
            .method(route.method.clone())
            .uri(route.uri("demo", "build-none"))
            .header(header::AUTHORIZATION, format!("Bearer {}", operator()))
            .header("idempotency-key", "\"unclosed");
        let req = match body {
            Some(b) => req.header(header::CONTENT_TYPE, "application/json").body(Body::from(b.to_string())),
            None => {
                req = req.header(header::ACCEPT, "*/*");
                req.body(Body::empty())
            }
        }
        .unwrap();
        let res = h.router.clone().oneshot(req).await.unwrap();
        let status = res.status();
        // Only a 400 is read whole (a stream's success never ends).
        let code = if status == StatusCode::BAD_REQUEST {
            let bytes = res.into_body().collect().await.unwrap().to_bytes();
            serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null)["error"].clone()
        } else {
            Value::Null
        };
        if queuing.contains(&name) {
            assert_eq!((status, &code), (StatusCode::BAD_REQUEST, &json!("invalid_idempotency_key")), "{name}");
        } else {
            assert_ne!(code, json!("invalid_idempotency_key"), "{name} reads Idempotency-Key but is not listed");
        }
    }
    assert_eq!(h.count("idempotency_keys").await, 0);
}

slipway_jobs::on_both_engines!(
    a_retried_put_with_the_same_key_queues_one_build_and_answers_the_same_body,
    the_same_key_with_another_body_or_route_is_422_and_queues_nothing,
    a_key_in_flight_is_409_until_its_lease_passes,
    two_subjects_with_one_key_are_independent,
    every_queuing_route_answers_a_retry_with_its_first_answer,
    hostile_keys_are_refused_with_a_clear_message_and_store_nothing,
    expired_keys_are_taken_again_and_swept,
    two_tabs_writing_the_version_they_read_the_second_is_412,
    every_queuing_route_and_no_other_refuses_a_malformed_key,
);
