//! The api's test harness: the router on a fresh database of either engine
//! (`tower::ServiceExt::oneshot`, no socket), tokens, and the inputs of
//! `testdata/cases` (copies of the shared cases) and `examples/demo.json`;
//! [`process`] runs the real binary over loopback.
#![allow(dead_code, unused_imports)]

pub mod process;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use slipway_api::{app, AppState};
use slipway_jobs::config::Config;
use slipway_jobs::store::{Db, Engine, Q};
use slipway_jobs::test_support::TestDatabase;
use std::collections::BTreeMap;
use tower::ServiceExt;

pub use slipway_jobs::test_support::{demo, repo};

/// The HS256 secret every harness's api verifies tokens with.
pub const SECRET: &str = "test-secret-of-at-least-32-bytes-long";

/// A file of `testdata/cases`, as JSON.
pub fn case(name: &str) -> Value {
    let text = std::fs::read_to_string(repo().join("testdata/cases").join(name)).expect("case file");
    serde_json::from_str(&text).expect("case JSON")
}

/// The api's router on a database of its own.
pub struct Harness {
    /// The router, called in-process.
    pub router: Router,
    /// The api's database.
    pub db: Db,
    /// The test's database and temporary folder.
    pub database: TestDatabase,
}

/// A harness on a fresh database of `engine`.
pub async fn harness(engine: Engine) -> Harness {
    harness_with(engine, &[]).await
}

/// A harness whose configuration has `extra` keys on top.
pub async fn harness_with(engine: Engine, extra: &[(&str, &str)]) -> Harness {
    harness_on(TestDatabase::new(engine).await, None, extra).await
}

/// A harness on `database`, reached at `url` instead of its own URL when
/// given (a test proxy in front of it), with `extra` configuration keys.
pub async fn harness_on(database: TestDatabase, url: Option<String>, extra: &[(&str, &str)]) -> Harness {
    let mut keys = BTreeMap::from([
        ("DATABASE_URL".to_owned(), url.unwrap_or_else(|| database.url.clone())),
        ("SLIPWAY_STATE_DIR".to_owned(), database.path("state").display().to_string()),
        ("SLIPWAY_JWT_SECRET".to_owned(), SECRET.to_owned()),
    ]);
    keys.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let config = Config::from_keys(&keys).unwrap();
    let db = slipway_jobs::store::open(&config).await.unwrap();
    let state = AppState::new(config, db.clone()).unwrap();
    Harness { router: app(state), db, database }
}

/// `claims` signed with [`SECRET`].
pub fn sign(claims: &Value) -> String {
    sign_with(claims, SECRET)
}

/// `claims` signed with `secret` (HS256).
pub fn sign_with(claims: &Value, secret: &str) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

/// A token for `deployments`, expiring `exp_offset` seconds from now, signed with `secret`.
pub fn token(deployments: &[&str], exp_offset: i64, secret: &str) -> String {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    sign_with(&json!({ "sub": "t", "aud": "slipway", "exp": now + exp_offset, "deployments": deployments }), secret)
}

/// A token for every deployment, valid for an hour.
pub fn all() -> String {
    token(&["*"], 3600, SECRET)
}

/// A token for every deployment with the operator claim (the fleet),
/// valid for an hour.
pub fn operator() -> String {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    sign(&json!({ "sub": "ops", "aud": "slipway", "exp": now + 3600, "deployments": ["*"], "operator": true }))
}

impl Harness {
    /// One request: status and the JSON body (`{"raw": …}` when not JSON).
    pub async fn call(
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

    /// `PUT /deployments/{id_path}` with `body`, with a token for every deployment.
    pub async fn put(&self, id_path: &str, body: &Value) -> (StatusCode, Value) {
        self.call(Method::PUT, &format!("/deployments/{id_path}"), Some(&all()), Some(body.to_string().into_bytes()))
            .await
    }

    /// Rows in one of our tables, or in apalis's job table for `"jobs"`.
    pub async fn count(&self, table: &str) -> i64 {
        let table = match (table, self.db.engine()) {
            ("jobs", Engine::Sqlite) => "Jobs",
            ("jobs", Engine::Postgres) => "apalis.jobs",
            (t, _) => t,
        };
        let mut conn = self.db.acquire().await.unwrap();
        Q::new(format!("SELECT COUNT(*) AS n FROM {table}")).fetch_one(&mut conn).await.unwrap().int("n").unwrap()
    }
}

/// The §3 error shape with `code`.
pub fn assert_error_shape(body: &Value, code: &str) {
    assert_eq!(body["error"], code, "{body}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    assert!(body.get("details").is_some(), "{body}");
}

/// Percent-encodes a path segment the way a front-end's encodeURIComponent does.
pub fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
