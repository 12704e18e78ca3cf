//! Bearer tokens (SEC-1) over the router: missing, expired, forged, out of scope.

use crate::common;

use axum::http::{Method, StatusCode};
use common::*;
use serde_json::{json, Value};
use slipway_jobs::store::Engine;

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

slipway_jobs::on_both_engines!(
    missing_expired_and_forged_tokens_are_unauthorized,
    a_token_without_the_id_in_scope_is_forbidden,
    a_token_just_expired_or_not_yet_valid_is_refused_and_a_list_audience_is_read,
);
