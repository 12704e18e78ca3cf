//! SEC-1 over every route: each (method, route) of the router
//! (`route_table`, the one list; a new route must be added there) × every
//! kind of token. Public routes answer as public whatever the token; an
//! authenticated one answers `401 unauthorized` for every bad token, `403`
//! for another scope (`404` where it hides existence), and success or a
//! domain answer in scope; no answer carries another scope's data, and no
//! refused call changes anything.
//!
//! The api verifies with an issuer configured (`SLIPWAY_JWT_ISSUER`), so a
//! token without `iss` is one of the bad ones. The last test runs the real
//! binary to check that an issuer and an audience set in the environment or
//! in the configuration file are required claims.

use crate::common;
use crate::route_table;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use base64::Engine as _;
use common::process::start_api;
use common::*;
use http_body_util::BodyExt;
use route_table::{routes, Access, Input, Route};
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use std::collections::BTreeMap;
use tower::ServiceExt;

/// The issuer the api under test trusts.
const ISSUER: &str = "https://panel.example";
/// A key that is not the api's.
const OTHER_SECRET: &str = "another-secret-of-at-least-32-bytes!";
/// The deployment every call addresses, and another one.
const TARGET: &str = "alpha";
const OTHER: &str = "beta";

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// Valid claims for `deployments`.
fn claims(deployments: &[&str]) -> Value {
    json!({ "sub": "panel-user", "aud": "slipway", "iss": ISSUER, "exp": now() + 3600, "deployments": deployments })
}

/// Valid claims for every deployment, with `changes` applied (`null` removes a claim).
fn all_but(changes: Value) -> Value {
    let mut c = claims(&["*"]);
    for (k, v) in changes.as_object().unwrap() {
        match v {
            Value::Null => c.as_object_mut().unwrap().remove(k),
            v => c.as_object_mut().unwrap().insert(k.clone(), v.clone()),
        };
    }
    c
}

/// A token for `deployments` the api accepts.
fn scoped(deployments: &[&str]) -> String {
    sign(&claims(deployments))
}

/// An unsigned token claiming `alg` (RFC 7519 §6), with the given signature part.
fn alg_none(alg: &str, signature: Option<&str>) -> String {
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let message = format!("{}.{}", b64(&json!({ "alg": alg, "typ": "JWT" })), b64(&claims(&["*"])));
    match signature {
        None => message,
        Some("hs256") => {
            let key = jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes());
            let sig = jsonwebtoken::crypto::sign(message.as_bytes(), &key, jsonwebtoken::Algorithm::HS256).unwrap();
            format!("{message}.{sig}")
        }
        Some(sig) => format!("{message}.{sig}"),
    }
}

/// Every token the api must refuse with `401`, each naming what is wrong
/// with it; all of them claim every deployment (`*`). `None`: no token.
fn refused_tokens() -> Vec<(String, Option<String>)> {
    let mut tokens = vec![
        ("no token".to_owned(), None),
        ("a malformed token".to_owned(), Some("not.a.jwt".to_owned())),
        ("an expired token".to_owned(), Some(sign(&all_but(json!({ "exp": now() - 60 }))))),
        ("a token not valid yet".to_owned(), Some(sign(&all_but(json!({ "nbf": now() + 3600 }))))),
        ("a token for another audience".to_owned(), Some(sign(&all_but(json!({ "aud": "other" }))))),
        ("a token without an audience".to_owned(), Some(sign(&all_but(json!({ "aud": null }))))),
        ("a token of another issuer".to_owned(), Some(sign(&all_but(json!({ "iss": "https://other.example" }))))),
        ("a token without an issuer".to_owned(), Some(sign(&all_but(json!({ "iss": null }))))),
        ("a token signed with another key".to_owned(), Some(sign_with(&claims(&["*"]), OTHER_SECRET))),
    ];
    for alg in ["none", "None", "NONE", "nOnE"] {
        tokens.push((format!("alg {alg} with an empty signature"), Some(alg_none(alg, Some("")))));
        tokens.push((format!("alg {alg} with our HS256 signature"), Some(alg_none(alg, Some("hs256")))));
        tokens.push((format!("alg {alg} with a made-up signature"), Some(alg_none(alg, Some("c2lnbmF0dXJl")))));
        tokens.push((format!("alg {alg} without a signature part"), Some(alg_none(alg, None))));
    }
    tokens
}

/// How a call carries its token: the `Authorization` header, or (streams
/// only) the `access_token` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Carrier {
    Header,
    Query,
}

/// The carriers a route takes a token by.
fn carriers(route: &Route) -> &'static [Carrier] {
    if route.stream {
        &[Carrier::Header, Carrier::Query]
    } else {
        &[Carrier::Header]
    }
}

/// An answer: status, media type, and the JSON body (`Null` for a stream,
/// which is not read: it lasts until the deployment settles).
#[derive(Debug)]
struct Answer {
    status: StatusCode,
    content_type: String,
    body: Value,
}

/// The seeded data: [`TARGET`] and [`OTHER`] submitted once each.
struct Seeded {
    h: Harness,
    /// The build of [`TARGET`]'s submit.
    build: String,
    /// The build of [`OTHER`]'s submit.
    other_build: String,
}

async fn seeded(engine: Engine) -> Seeded {
    let h = harness_with(engine, &[("SLIPWAY_JWT_ISSUER", ISSUER)]).await;
    let mut builds = Vec::new();
    for id in [TARGET, OTHER] {
        let body = Some(json!({ "configuration": demo() }).to_string().into_bytes());
        let (status, answer) = h.call(Method::PUT, &format!("/deployments/{id}"), Some(&scoped(&["*"])), body).await;
        assert_eq!(status, StatusCode::ACCEPTED, "seeding {id}: {answer}");
        builds.push(answer["build_id"].as_str().unwrap().to_owned());
    }
    let other_build = builds.pop().unwrap();
    let build = builds.pop().unwrap();
    Seeded { h, build, other_build }
}

impl Seeded {
    /// `route` for [`TARGET`] with `token` carried by `carrier`; a route
    /// that reads a body gets a valid one.
    async fn call(&self, route: &Route, token: Option<&str>, carrier: Carrier) -> Answer {
        self.call_on(route, &self.build, token, carrier).await
    }

    /// As [`Seeded::call`], on build `build`.
    async fn call_on(&self, route: &Route, build: &str, token: Option<&str>, carrier: Carrier) -> Answer {
        let mut uri = route.uri(TARGET, build);
        let mut request = Request::builder().method(route.method.clone());
        match (token, carrier) {
            (Some(t), Carrier::Header) => request = request.header(header::AUTHORIZATION, format!("Bearer {t}")),
            (Some(t), Carrier::Query) => {
                uri.push(if uri.contains('?') { '&' } else { '?' });
                uri.push_str(&format!("access_token={t}"));
            }
            (None, _) => {}
        }
        let request = match route.input {
            Input::Json(body) => {
                request.uri(&uri).header(header::CONTENT_TYPE, "application/json").body(Body::from(body().to_string()))
            }
            Input::None | Input::OptionalJson => request.uri(&uri).body(Body::empty()),
        }
        .unwrap();
        let answer = self.h.router.clone().oneshot(request).await.unwrap();
        let status = answer.status();
        let content_type =
            answer.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        let body = if content_type.starts_with("text/event-stream") {
            Value::Null
        } else {
            let bytes = answer.into_body().collect().await.unwrap().to_bytes();
            serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({ "raw": String::from_utf8_lossy(&bytes) }))
        };
        Answer { status, content_type, body }
    }

    /// The public routes' statuses without a token.
    async fn public_baseline(&self) -> BTreeMap<String, StatusCode> {
        let mut baseline = BTreeMap::new();
        for route in routes().iter().filter(|r| r.access == Access::Public) {
            baseline.insert(route.name(), self.call(route, None, Carrier::Header).await.status);
        }
        baseline
    }

    /// What a refused call must not have changed: the builds of both
    /// deployments and their statuses.
    async fn builds_of_both(&self) -> Value {
        let star = scoped(&["*"]);
        let mut seen = Vec::new();
        for id in [TARGET, OTHER] {
            let (status, page) =
                self.h.call(Method::GET, &format!("/deployments/{id}/builds"), Some(&star), None).await;
            assert_eq!(status, StatusCode::OK, "{page}");
            seen.push(page["builds"].clone());
        }
        json!(seen)
    }
}

/// Panics unless `answer` to a call of `route` is the §3 shape with `code`,
/// in JSON, and carries nothing of [`TARGET`]'s data the call did not name
/// itself (its build id, its stored configuration).
fn assert_refused(answer: &Answer, route: &Route, status: StatusCode, code: &str, seeded: &Seeded, what: &str) {
    assert_eq!(answer.status, status, "{what}: {}", answer.body);
    assert!(answer.content_type.starts_with("application/json"), "{what}: {}", answer.content_type);
    assert_error_shape(&answer.body, code);
    let text = answer.body.to_string();
    if !route.uri.contains("{build}") {
        assert!(!text.contains(&seeded.build), "{what}: the answer names the target's build: {text}");
    }
    assert!(!text.contains("\"configuration\""), "{what}: the answer carries a configuration: {text}");
}

async fn every_bad_token_is_refused_with_401_on_every_authenticated_route_and_public_routes_stay_public(
    engine: Engine,
) {
    let s = seeded(engine).await;
    let baseline = s.public_baseline().await;
    let before = s.builds_of_both().await;
    for (what, token) in refused_tokens() {
        for route in routes() {
            for &carrier in carriers(&route) {
                let call = format!("{} with {what} in the {carrier:?}", route.name());
                let answer = s.call(&route, token.as_deref(), carrier).await;
                if route.access == Access::Public {
                    assert_eq!(answer.status, baseline[&route.name()], "{call}: {}", answer.body);
                    continue;
                }
                assert_refused(&answer, &route, StatusCode::UNAUTHORIZED, "unauthorized", &s, &call);
                if let Some(t) = &token {
                    for part in t.split('.').filter(|p| p.len() > 3) {
                        assert!(!answer.body.to_string().contains(part), "{call}: the answer repeats the token");
                    }
                }
            }
        }
    }
    assert_eq!(s.builds_of_both().await, before, "a refused call changed the builds");
    assert_eq!(s.h.count("deployments").await, 2);
}

async fn a_token_of_another_scope_gets_403_or_404_and_never_the_deployments_data(engine: Engine) {
    let s = seeded(engine).await;
    let baseline = s.public_baseline().await;
    let before = s.builds_of_both().await;
    // Scoped to another deployment that exists, with data of its own.
    let foreign = scoped(&[OTHER]);
    for route in routes() {
        for &carrier in carriers(&route) {
            let call = format!("{} with a token for {OTHER} in the {carrier:?}", route.name());
            let answer = s.call(&route, Some(&foreign), carrier).await;
            match route.access {
                Access::Public => assert_eq!(answer.status, baseline[&route.name()], "{call}: {}", answer.body),
                Access::Token => {
                    let status = answer.status.as_u16();
                    assert!(route.in_scope.contains(&status), "{call}: {status} {}", answer.body);
                    assert!(!answer.body.to_string().contains(&s.build), "{call}: {}", answer.body);
                }
                Access::Deployment | Access::Operator => {
                    assert_refused(&answer, &route, StatusCode::FORBIDDEN, "forbidden", &s, &call)
                }
                Access::Build => {
                    assert_refused(&answer, &route, StatusCode::NOT_FOUND, "not_found", &s, &call);
                    // Existence does not leak: the answer is that of a build that does not exist.
                    let unknown = format!("{TARGET}.20000101T000000Z.zzzzzz");
                    let absent = s.call_on(&route, &unknown, Some(&foreign), carrier).await;
                    assert_eq!(
                        answer.body.to_string(),
                        absent.body.to_string().replace(&unknown, &s.build),
                        "{call}: the answer tells the build exists"
                    );
                }
            }
        }
    }
    assert_eq!(s.builds_of_both().await, before, "a call out of scope changed the builds");
}

/// In scope, every route answers success or a domain answer (never 401 or
/// 403), whether the token names the deployment or says `*`; each on data
/// of its own, so both see the same states.
async fn a_token_naming_the_deployment_and_a_star_token_reach_every_route(engine: Engine) {
    for deployments in [&[TARGET][..], &["*"][..]] {
        let s = seeded(engine).await;
        let token = scoped(deployments);
        for route in routes().iter().filter(|r| r.access != Access::Public) {
            for &carrier in carriers(route) {
                let call = format!("{} with a token for {deployments:?} in the {carrier:?}", route.name());
                let answer = s.call(route, Some(&token), carrier).await;
                if route.access == Access::Operator {
                    // A front-end's token never sees the fleet, even one for every deployment.
                    assert_refused(&answer, route, StatusCode::FORBIDDEN, "forbidden", &s, &call);
                    continue;
                }
                let status = answer.status.as_u16();
                assert!(route.in_scope.contains(&status), "{call}: {status} {}", answer.body);
                if route.stream && status == 200 {
                    assert!(answer.content_type.starts_with("text/event-stream"), "{call}: {}", answer.content_type);
                } else if status >= 400 {
                    assert!(answer.body["error"].is_string(), "{call}: {}", answer.body);
                }
                assert!(!answer.body.to_string().contains(&s.other_build), "{call}: {OTHER}'s data: {}", answer.body);
            }
        }
    }
}

/// `GET /deployments?ids=a,b` with a token for `a` alone is refused whole
/// (`403`), and shows nothing of `b`.
async fn a_list_naming_a_deployment_outside_the_scope_is_refused_whole(engine: Engine) {
    let s = seeded(engine).await;
    let token = scoped(&[TARGET]);
    for ids in [format!("{TARGET},{OTHER}"), format!("{OTHER},{TARGET}"), OTHER.to_owned()] {
        let (status, body) = s.h.call(Method::GET, &format!("/deployments?ids={ids}"), Some(&token), None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{ids}: {body}");
        assert_error_shape(&body, "forbidden");
        assert!(!body.to_string().contains(&s.other_build), "{ids}: {body}");
    }
    let (status, body) = s.h.call(Method::GET, &format!("/deployments?ids={TARGET}"), Some(&token), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let listed: Vec<&str> = body["deployments"].as_array().unwrap().iter().map(|d| d["id"].as_str().unwrap()).collect();
    assert_eq!(listed, [TARGET]);
}

/// The fleet routes answer a token with the operator claim (`slipway-api
/// token --operator`), whatever deployments it names: the queues with their
/// counts, the workers (none here); `"operator": false` is refused like no claim.
async fn an_operator_token_reads_the_queues_and_the_workers(engine: Engine) {
    let s = seeded(engine).await;
    for deployments in [&[OTHER][..], &["*"][..]] {
        let mut c = claims(deployments);
        c["operator"] = json!(true);
        let operator = sign(&c);
        let (status, body) = s.h.call(Method::GET, "/queues", Some(&operator), None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let queues: Vec<&str> =
            body["queues"].as_array().unwrap().iter().map(|q| q["queue"].as_str().unwrap()).collect();
        assert_eq!(queues, ["builds", "nix", "callbacks", "readiness", "rollouts"], "{body}");
        // The two seeded submits wait for a worker (none runs here).
        let builds = &body["queues"][0];
        assert_eq!((builds["waiting"].as_i64(), builds["running"].as_i64()), (Some(2), Some(0)), "{body}");
        assert!(builds["oldest_waiting_ms"].as_i64().is_some_and(|ms| ms >= 0), "{body}");
        assert_eq!(body["queues"][2]["oldest_waiting_ms"], Value::Null, "{body}");
        let (status, body) = s.h.call(Method::GET, "/workers", Some(&operator), None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["workers"], json!([]), "{body}");
    }
    let mut c = claims(&["*"]);
    c["operator"] = json!(false);
    let (status, body) = s.h.call(Method::GET, "/workers", Some(&sign(&c)), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_error_shape(&body, "forbidden");
}

slipway_jobs::on_both_engines!(
    an_operator_token_reads_the_queues_and_the_workers,
    every_bad_token_is_refused_with_401_on_every_authenticated_route_and_public_routes_stay_public,
    a_token_of_another_scope_gets_403_or_404_and_never_the_deployments_data,
    a_token_naming_the_deployment_and_a_star_token_reach_every_route,
    a_list_naming_a_deployment_outside_the_scope_is_refused_whole,
);

#[tokio::test]
async fn the_route_table_names_every_route_of_the_router() {
    let h = harness(Engine::Sqlite).await;
    route_table::the_table_names_every_route_of(&h.router, &all()).await;
}

// The real binary: configuration from the environment and from the file.

/// The fault of issue 10: with `SLIPWAY_JWT_ISSUER` in the configuration
/// file and the variable set empty in the environment (as a compose file
/// does with an unset `${VAR}`), the empty value wiped the file's issuer
/// and a token without `iss` was accepted. An empty variable counts as
/// unset: the file's issuer and audience stay, and both claims are required.
#[tokio::test]
async fn a_configured_issuer_and_audience_are_required_from_the_environment_or_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = format!("SLIPWAY_JWT_ISSUER = \"{ISSUER}\"\nSLIPWAY_JWT_AUDIENCE = \"panel\"\n");
    let variables = [("SLIPWAY_JWT_ISSUER", ISSUER), ("SLIPWAY_JWT_AUDIENCE", "panel")];
    let emptied = [("SLIPWAY_JWT_ISSUER", ""), ("SLIPWAY_JWT_AUDIENCE", "")];
    let good = json!({ "sub": "t", "aud": "panel", "iss": ISSUER, "exp": now() + 3600, "deployments": ["*"] });
    let without = |claim: &str| {
        let mut c = good.clone();
        c.as_object_mut().unwrap().remove(claim);
        sign(&c)
    };
    for (how, file, env) in [
        ("the environment", None, &variables[..]),
        ("the file", Some(file.as_str()), &[][..]),
        ("the file, with the variables set empty", Some(file.as_str()), &emptied[..]),
    ] {
        let api = start_api(dir.path(), file, env).await;
        assert_eq!(api.list_with(&sign(&good)).await, 200, "{how}: a token with every claim");
        assert_eq!(api.list_with(&without("iss")).await, 401, "{how}: a token without iss");
        assert_eq!(api.list_with(&without("aud")).await, 401, "{how}: a token without aud");
        let mut slipway = good.clone();
        slipway["aud"] = json!("slipway");
        assert_eq!(api.list_with(&sign(&slipway)).await, 401, "{how}: a token for the default audience");
        api.stop().await;
    }
}
