//! FS-1 over the router: each build records its tenant (the
//! `SLIPWAY_TENANT_CLAIM` claim, else the token's `iss` and `sub`), and
//! `TENANT_QUEUE_SIZE` refuses a tenant's submit past its bound with `429
//! tenant_queue_full` and `Retry-After`, before the body is read, storing
//! nothing, while another tenant's submit goes through.

use crate::common;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use common::*;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use slipway_jobs::store::{Engine, Q};
use tower::ServiceExt;

fn token_of(claims: Value) -> String {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let mut claims = claims;
    claims["aud"] = json!("slipway");
    claims["exp"] = json!(now + 3600);
    claims["deployments"] = json!(["*"]);
    sign(&claims)
}

/// A submit with `token`; `body` raw (a body that is not even JSON shows
/// the refusal came before it was read).
async fn put(h: &Harness, id: &str, token: &str, body: &[u8]) -> (StatusCode, Option<String>, Value) {
    let req = Request::builder()
        .method(Method::PUT)
        .uri(format!("/deployments/{id}"))
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_vec()))
        .unwrap();
    let res = h.router.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let retry = res.headers().get(header::RETRY_AFTER).map(|v| v.to_str().unwrap().to_owned());
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (status, retry, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn tenants(h: &Harness) -> Vec<String> {
    let mut conn = h.db.acquire().await.unwrap();
    Q::new("SELECT tenant FROM builds ORDER BY seq")
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .iter()
        .map(|r| r.text("tenant").unwrap())
        .collect()
}

async fn a_tenant_past_its_queue_size_is_refused_429_before_its_body_is_read(engine: Engine) {
    let h = harness_with(engine, &[("TENANT_QUEUE_SIZE", "2")]).await;
    let (alice, bob) = (token_of(json!({ "sub": "alice" })), token_of(json!({ "sub": "bob" })));
    let body = json!({ "configuration": demo() }).to_string().into_bytes();
    for id in ["a-1", "a-2"] {
        let (status, _, answer) = put(&h, id, &alice, &body).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    }
    let (status, retry, answer) = put(&h, "a-3", &alice, b"not even json").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{answer}");
    assert_error_shape(&answer, "tenant_queue_full");
    assert_eq!(retry.as_deref(), Some("30"));
    assert_eq!((h.count("deployments").await, h.count("builds").await), (2, 2), "the refused submit stored something");
    let (status, _, answer) = put(&h, "b-1", &bob, &body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "another tenant is refused: {answer}");
    assert_eq!(tenants(&h).await, ["\nalice", "\nalice", "\nbob"]);
}

async fn the_tenant_claim_names_the_tenant_across_subjects(engine: Engine) {
    let h = harness_with(engine, &[("TENANT_QUEUE_SIZE", "1"), ("SLIPWAY_TENANT_CLAIM", "org")]).await;
    let body = json!({ "configuration": demo() }).to_string().into_bytes();
    let alice = token_of(json!({ "sub": "alice", "org": "acme" }));
    let carol = token_of(json!({ "sub": "carol", "org": "acme" }));
    let dave = token_of(json!({ "sub": "dave" }));
    let (status, _, answer) = put(&h, "one", &alice, &body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let (status, _, answer) = put(&h, "two", &carol, &body).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "one tenant, two subjects: {answer}");
    let (status, _, answer) = put(&h, "three", &dave, &body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "a token without the claim is its own tenant: {answer}");
    assert_eq!(tenants(&h).await, ["acme", "\ndave"]);
}

async fn without_tenant_queue_size_a_tenant_is_bounded_only_by_queue_size(engine: Engine) {
    let h = harness(engine).await;
    let body = json!({ "configuration": demo() }).to_string().into_bytes();
    for n in 0..3 {
        let (status, _, answer) = put(&h, &format!("d-{n}"), &all(), &body).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    }
}

slipway_jobs::on_both_engines!(
    a_tenant_past_its_queue_size_is_refused_429_before_its_body_is_read,
    the_tenant_claim_names_the_tenant_across_subjects,
    without_tenant_queue_size_a_tenant_is_bounded_only_by_queue_size,
);
