//! SEC-2, scanned: no secret (a bearer token, a callback token, an operator
//! secret) appears in a log line, an answer of the api (error bodies, build
//! logs), or any column of any row of the database.
//!
//! The real api and worker run on a fresh SQLite database with their logs
//! at `debug`, while a front-end goes through the suite's flows with several
//! secrets: submits with a bearer token, refused tokens (a foreign
//! signature, an expired one, a tampered one), a refused submit carrying an
//! operator secret, a preview and submits whose operator secrets go to a
//! real OpenBao (the api's and the workers' own tokens) and reach the
//! nodes, a submit that keeps them, one that clears one (its deploy deletes
//! it from OpenBao), one refused while OpenBao is sealed, reads of builds
//! and their logs and diffs, a replaced secret rolled back from, a plan
//! given a secret value and its refused apply, the deployment channel
//! with `access_token`, a delete whose reconcile push is delivered, a delete
//! whose callback is refused (an origin outside the allowlist), a delete of
//! an unknown deployment and one with a malformed callback, a cancel, and
//! a webhook whose signed deliveries go out, whose delivery log is read and
//! whose secret is rotated (its one stored copy, in
//! `webhook_endpoints.secret`, is the only place the scan may find it).
//! The api logs in JSON and the worker in text (`SLIPWAY_LOG_FORMAT`), and
//! the api's and the worker's `/metrics` are scraped at the end.
//! Then every line of both logs, every answer body (the scrapes too) and
//! every row of every table is searched for each secret as sent and in its encoded forms; a
//! hit fails the test, naming the secret and the place. Polls with
//! deadlines; never sleeps to synchronise.

use crate::common;
use crate::origin;

use common::{binary, command, demo, free_port, start, wait_for, Api, SECRET};
use origin::Origin;
use reqwest::Method;
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::{TestDatabase, TestOpenBao};
use std::sync::Mutex;
use std::time::Duration;

/// Both processes log everything at `debug` (Slipway's crates and the HTTP
/// layers they use), but the database driver's and the queue's polling.
const LOG_FILTER: &str =
    "debug,sqlx=warn,apalis=info,apalis_core=info,apalis_sqlite=info,apalis_sql=info,hyper=info,hyper_util=info,h2=info,rustls=info";

/// A secret and the forms it is searched in.
struct Secret {
    /// What it is, for the failure message (never the value).
    name: String,
    /// `(form, text)`: as sent, base64, base64url, and for a JWT its signature alone.
    forms: Vec<(&'static str, String)>,
}

impl Secret {
    /// An opaque secret (a callback token, an operator secret).
    fn opaque(name: &str, value: &str) -> Self {
        let mut forms: Vec<(&'static str, String)> = Vec::new();
        for (form, text) in [
            ("as sent", value.to_owned()),
            ("in base64", base64(value.as_bytes(), STANDARD, true)),
            ("in base64url", base64(value.as_bytes(), URL_SAFE, false)),
        ] {
            // base64url is base64 without padding for most values: searched once.
            if !forms.iter().any(|(_, t)| *t == text || t.trim_end_matches('=') == text) {
                forms.push((form, text));
            }
        }
        Self { name: name.to_owned(), forms }
    }

    /// A bearer token (a JWT): also its signature alone, the part that makes it a credential.
    fn bearer(name: &str, token: &str) -> Self {
        let mut secret = Self::opaque(name, token);
        let signature = token.rsplit('.').next().unwrap_or(token);
        assert!(signature.len() >= 32, "{name} is not a signed JWT");
        secret.forms.push(("its signature", signature.to_owned()));
        secret
    }
}

const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn base64(bytes: &[u8], alphabet: &[u8; 64], pad: bool) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(alphabet[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
        if pad {
            out.push_str(&"=="[..3 - chunk.len()]);
        }
    }
    out
}

/// Every `(secret, form)` found in `text`, as `"<secret> (<form>) in <place>"`.
fn scan(secrets: &[Secret], place: &str, text: &[u8], hits: &mut Vec<String>) {
    for secret in secrets {
        for (form, value) in &secret.forms {
            if text.windows(value.len()).any(|w| w == value.as_bytes()) {
                hits.push(format!("{} ({form}) in {place}", secret.name));
            }
        }
    }
}

/// The operator's secrets (PRODUCT.md §8, SEC-2): the JWT signing secret,
/// the api's and the workers' OpenBao tokens, and each value of a secret
/// field the flows send: `(what, value)`.
fn operator_secrets(bao: &TestOpenBao, values: &[(&str, &str)]) -> Vec<Secret> {
    let token = |worker: bool| {
        bao.keys(worker).into_iter().find(|(k, _)| *k == "OPENBAO_TOKEN").map(|(_, v)| v).expect("a token")
    };
    let mut secrets = vec![
        Secret::opaque("the JWT signing secret (SLIPWAY_JWT_SECRET)", SECRET),
        Secret::opaque("the api's OPENBAO_TOKEN", &token(false)),
        Secret::opaque("the workers' OPENBAO_TOKEN", &token(true)),
    ];
    secrets.extend(values.iter().map(|(what, value)| Secret::opaque(what, value)));
    secrets
}

/// A random token, as a front-end makes one.
fn random_token(prefix: &str) -> String {
    use rand::Rng;
    let bytes: [u8; 24] = rand::rng().random();
    format!("{prefix}-{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// A token minted by `slipway-api token`, with another signing secret when `secret` is given.
fn mint(db: &TestDatabase, port: u16, deployments: &str, ttl: &str, secret: Option<&str>) -> String {
    let mut cmd = command(&binary("slipway-api"), db, port);
    if let Some(secret) = secret {
        cmd.env("SLIPWAY_JWT_SECRET", secret);
    }
    let out = cmd.args(["token", "--deployments", deployments, "--ttl", ttl]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// `value` for a URL's query: every byte but the unreserved ones (RFC 3986) as `%XX`.
fn percent_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A front-end that keeps every answer it gets, to be scanned.
struct Front {
    http: reqwest::Client,
    base: String,
    answers: Mutex<Vec<(String, Vec<u8>)>>,
}

impl Front {
    /// `method path` with `token` as the bearer (none with `None`): status and JSON body.
    async fn call(&self, token: Option<&str>, method: Method, path: &str, body: Option<&Value>) -> (u16, Value) {
        let mut request = self.http.request(method.clone(), format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status().as_u16();
        let bytes = response.bytes().await.unwrap_or_else(|e| panic!("{method} {path}: {e}")).to_vec();
        let place = format!("the answer to {method} {path} ({status})");
        self.answers.lock().unwrap().push((place, bytes.clone()));
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// A stream (server-sent events) read to its end, up to 60 s: status
    /// and text. `access_token`, when given, goes in the query.
    async fn stream(&self, path: &str, access_token: Option<&str>, bearer: Option<&str>) -> (u16, String) {
        let query = access_token.map_or(String::new(), |t| format!("?access_token={}", percent_encode(t)));
        let mut request = self.http.get(format!("{}{path}{query}", self.base));
        if let Some(t) = bearer {
            request = request.bearer_auth(t);
        }
        let read = async {
            let response = request.send().await?;
            let status = response.status().as_u16();
            Ok::<_, reqwest::Error>((status, response.bytes().await?.to_vec()))
        };
        let (status, bytes) = tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .unwrap_or_else(|_| panic!("GET {path} did not end within 60 s"))
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let with = if access_token.is_some() { "?access_token=…" } else { "" };
        self.answers.lock().unwrap().push((format!("the answer to GET {path}{with} ({status})"), bytes.clone()));
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Reads a deployment, its builds and each build (with its log and its stream).
    async fn read_all(&self, token: &str, id: &str) -> Vec<String> {
        self.call(Some(token), Method::GET, &format!("/deployments/{id}"), None).await;
        self.call(Some(token), Method::GET, &format!("/sbom-list/{id}"), None).await;
        let (status, page) = self.call(Some(token), Method::GET, &format!("/deployments/{id}/builds"), None).await;
        assert_eq!(status, 200, "{page}");
        let builds: Vec<String> =
            page["builds"].as_array().unwrap().iter().map(|b| b["id"].as_str().unwrap().to_owned()).collect();
        for build in &builds {
            let (status, b) = self.call(Some(token), Method::GET, &format!("/builds/{build}"), None).await;
            assert_eq!(status, 200, "{b}");
            let (status, diff) = self.call(Some(token), Method::GET, &format!("/builds/{build}/diff"), None).await;
            assert_eq!(status, 200, "{diff}");
            self.stream(&format!("/builds/{build}/log"), None, Some(token)).await;
        }
        builds
    }
}

/// Waits until deployment `id` is idle (from any state: a cancel may leave it failed first).
async fn wait_idle(front: &Front, token: &str, id: &str) {
    wait_for(&format!("{id} to become idle"), Duration::from_secs(240), || async {
        let (_, d) = front.call(Some(token), Method::GET, &format!("/deployments/{id}"), None).await;
        (d["state"] == "idle").then_some(())
    })
    .await
}

/// Waits until build `id` has ended (whatever its end).
async fn wait_ended(front: &Front, token: &str, build: &str) {
    wait_for(&format!("build {build} to end"), Duration::from_secs(240), || async {
        let (_, b) = front.call(Some(token), Method::GET, &format!("/builds/{build}"), None).await;
        let status = b["status"].as_str().unwrap_or("");
        ["succeeded", "failed", "cancelled", "superseded"].contains(&status).then_some(())
    })
    .await
}

/// Waits until build `id`'s push has an outcome (`delivered`, `failed` or `not_sent`).
async fn wait_callback_outcome(front: &Front, token: &str, build: &str) -> Value {
    wait_for(&format!("build {build}'s push to end"), Duration::from_secs(60), || async {
        let (_, b) = front.call(Some(token), Method::GET, &format!("/builds/{build}"), None).await;
        let state = b["callback"]["state"].as_str().unwrap_or("");
        ["delivered", "failed", "not_sent"].contains(&state).then(|| b["callback"].clone())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_callback_token_or_operator_secret_appears_in_a_log_an_answer_or_the_database() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    // Logs and database stay for a look when the test fails.
    db.keep(true);
    eprintln!("this test's folder (kept if it fails): {}", db.dir.path().display());
    let origin = Origin::start(None).await;
    // Not in the allowlist: a callback pointing there is refused, and it must get nothing.
    let elsewhere = Origin::start(None).await;
    // An OpenBao of this test's own, which it seals for a while.
    let bao = TestOpenBao::private().await;
    let (port, metrics_port) = (free_port(), free_port());
    let process = |bin: &str| {
        let mut cmd = command(&binary(bin), &db, port);
        for (key, value) in bao.keys(bin == "slipway-worker") {
            cmd.env(key, value);
        }
        cmd.env("SLIPWAY_ALLOWED_ORIGINS", &origin.base)
            .env("SLIPWAY_CALLBACK_ALLOW_PRIVATE", "true")
            .env("SLIPWAY_LOG", LOG_FILTER)
            .env("SLIPWAY_LOG_FORMAT", if bin == "slipway-api" { "json" } else { "text" })
            .env("SLIPWAY_METRICS_ADDR", format!("127.0.0.1:{metrics_port}"))
            .env_remove("RUST_LOG");
        cmd
    };
    let mut api_process = start(process("slipway-api"), &db, "api.log");
    let mut worker = process("slipway-worker");
    worker.arg("work");
    let mut worker_process = start(worker, &db, "worker.log");
    let api = Api::connect(&db, port).await;
    let front = Front { http: reqwest::Client::new(), base: api.base.clone(), answers: Mutex::new(Vec::new()) };

    let (a, b) = ("leak-a", "leak-b");
    let scoped = mint(&db, port, &format!("{a},{b}"), "1h", None);
    let foreign = mint(&db, port, "*", "1h", Some("another-front-end-secret-of-32-bytes-or-more"));
    let expiring = mint(&db, port, a, "1s", None);
    // One character of the signature changed (not the last: its low bits are padding).
    let tampered = {
        let mut t = scoped.clone().into_bytes();
        let i = t.len() - 10;
        t[i] = if t[i] == b'A' { b'B' } else { b'A' };
        String::from_utf8(t).unwrap()
    };
    let cb_delivered = random_token("cb-delivered");
    let cb_refused = random_token("cb-refused");
    let cb_unknown = random_token("cb-unknown");
    let cb_malformed = random_token("cb-malformed");
    let operator_secret = random_token("op-secret");
    let (op_mastodon, op_peertube) = (random_token("op-mastodon"), random_token("op-peertube"));
    let (op_preview, op_sealed) = (random_token("op-preview"), random_token("op-sealed"));
    let (op_plan, op_second) = (random_token("op-plan"), random_token("op-second"));
    let mut secrets = vec![
        Secret::bearer("the bearer token for every deployment", &api.token),
        Secret::bearer("the bearer token scoped to two deployments", &scoped),
        Secret::bearer("a bearer token signed by a foreign key", &foreign),
        Secret::bearer("an expired bearer token", &expiring),
        Secret::bearer("a tampered bearer token", &tampered),
        Secret::opaque("the callback token of the delivered push", &cb_delivered),
        Secret::opaque("the callback token of a refused callback", &cb_refused),
        Secret::opaque("the callback token of a delete of an unknown deployment", &cb_unknown),
        Secret::opaque("the callback token of a malformed callback", &cb_malformed),
    ];
    secrets.extend(operator_secrets(
        &bao,
        &[
            ("an operator secret's value in a refused submit", &operator_secret),
            ("an operator secret stored and deployed (mastodon)", &op_mastodon),
            ("an operator secret stored, deployed and cleared (peertube)", &op_peertube),
            ("an operator secret in a preview", &op_preview),
            ("an operator secret in a submit while OpenBao is sealed", &op_sealed),
            ("an operator secret given to a plan (never stored)", &op_plan),
            ("an operator secret replaced, then rolled back from", &op_second),
        ],
    ));

    // A webhook (WH-1) on the allowed origin, registered before the
    // deployments change so their events are delivered to it. The 201 is
    // the one answer that shows its secret: read apart, not scanned.
    let operator = Api::operator_token(&db, port);
    secrets.push(Secret::bearer("the operator token", &operator));
    let register = json!({ "url": origin.reconcile_url(), "events": ["*"], "description": "leak scan" });
    let created = api.http.post(format!("{}/webhooks", api.base)).bearer_auth(&operator).json(&register).send().await;
    let created = created.unwrap();
    assert_eq!(created.status(), 201);
    let created: Value = created.json().await.unwrap();
    let webhook = created["id"].as_str().unwrap().to_owned();
    let webhook_secret = created["secret"].as_str().unwrap().to_owned();
    secrets.push(Secret::opaque("a webhook's signing secret", &webhook_secret));
    secrets.push(Secret::opaque("a webhook's signing key (after whsec_)", &webhook_secret["whsec_".len()..]));

    // Refusals, each with its error body and log lines.
    let submit = json!({ "configuration": demo() });
    let (status, body) = front.call(Some(&foreign), Method::PUT, &format!("/deployments/{a}"), Some(&submit)).await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = front.call(Some(&tampered), Method::GET, &format!("/deployments/{a}"), None).await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = front.call(Some(&scoped), Method::GET, "/deployments/leak-elsewhere", None).await;
    assert!(status == 403 || status == 404, "{status} {body}");
    wait_for("the 1 s token to expire", Duration::from_secs(15), || async {
        let (status, _) = front.call(Some(&expiring), Method::GET, &format!("/deployments/{a}"), None).await;
        (status == 401).then_some(())
    })
    .await;
    let (status, body) = front.call(Some(&expiring), Method::PUT, &format!("/deployments/{a}"), Some(&submit)).await;
    assert_eq!(status, 401, "{body}");
    let mut invalid = demo();
    invalid["stray"] = json!(1);
    invalid["applications"]["mastodon"]["translationApiKey"] = json!(operator_secret);
    let (status, body) = front
        .call(Some(&scoped), Method::PUT, &format!("/deployments/{b}"), Some(&json!({ "configuration": invalid })))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "invalid_configuration", "{body}");

    // Two deployments, submitted with the scoped token, with operator secrets.
    let mut with_secrets = demo();
    with_secrets["applications"]["mastodon"]["translationApiKey"] = json!(op_mastodon);
    with_secrets["applications"]["peertube"]["smtpPassword"] = json!(op_peertube);
    let with_secrets = json!({ "configuration": with_secrets });
    let (status, body) = front
        .call(
            Some(&scoped),
            Method::POST,
            &format!("/deployments/{a}/preview"),
            Some(&{
                let mut preview = with_secrets.clone();
                preview["configuration"]["applications"]["mastodon"]["translationApiKey"] = json!(op_preview);
                preview
            }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    for id in [a, b] {
        let (status, body) =
            front.call(Some(&scoped), Method::PUT, &format!("/deployments/{id}"), Some(&with_secrets)).await;
        assert_eq!(status, 202, "{body}");
    }
    for id in [a, b] {
        api.wait_state(id, "active", Duration::from_secs(240)).await;
    }
    // A submit that keeps them, one that clears one (its deploy deletes it
    // from OpenBao), and one refused while OpenBao is sealed.
    let (status, body) = front.call(Some(&scoped), Method::PUT, &format!("/deployments/{a}"), Some(&submit)).await;
    assert_eq!(status, 202, "{body}");
    wait_ended(&front, &scoped, body["build_id"].as_str().unwrap()).await;
    let mut clear = demo();
    clear["applications"]["peertube"]["secretsClear"] = json!(["smtpPassword"]);
    let clear = json!({ "configuration": clear });
    let (status, body) = front.call(Some(&scoped), Method::PUT, &format!("/deployments/{a}"), Some(&clear)).await;
    assert_eq!(status, 202, "{body}");
    wait_ended(&front, &scoped, body["build_id"].as_str().unwrap()).await;
    bao.seal().await;
    let mut sealed = demo();
    sealed["applications"]["mastodon"]["translationApiKey"] = json!(op_sealed);
    let (status, body) = front
        .call(Some(&scoped), Method::PUT, &format!("/deployments/{a}"), Some(&json!({ "configuration": sealed })))
        .await;
    assert_eq!(status, 503, "{body}");
    bao.unseal().await;
    front.call(Some(&scoped), Method::GET, &format!("/deployments?ids={a},{b}"), None).await;
    let (status, text) = front.stream(&format!("/deployments/{a}/events"), Some(&scoped), None).await;
    assert_eq!(status, 200, "{text}");
    let (status, text) = front.stream(&format!("/deployments/{a}/events"), Some(&foreign), None).await;
    assert_eq!(status, 401, "{text}");
    let (status, text) = front.stream(&format!("/deployments/{a}/events"), None, Some(&tampered)).await;
    assert_eq!(status, 401, "{text}");

    // Safe change on b: a new secret version, a rollback to the first one
    // (the diff shows versions only), and a plan given a secret value,
    // whose apply is refused.
    let mut second = demo();
    second["applications"]["mastodon"]["translationApiKey"] = json!(op_second);
    let second = json!({ "configuration": second });
    let (status, body) = front.call(Some(&scoped), Method::PUT, &format!("/deployments/{b}"), Some(&second)).await;
    assert_eq!(status, 202, "{body}");
    wait_ended(&front, &scoped, body["build_id"].as_str().unwrap()).await;
    let (status, body) = front.call(Some(&scoped), Method::POST, &format!("/deployments/{b}/rollback"), None).await;
    assert_eq!(status, 202, "{body}");
    wait_ended(&front, &scoped, body["build_id"].as_str().unwrap()).await;
    let mut plan = demo();
    plan["applications"]["mastodon"]["translationApiKey"] = json!(op_plan);
    let plan = json!({ "configuration": plan });
    let path = format!("/deployments/{b}?dry_run=true");
    let (status, body) = front.call(Some(&scoped), Method::PUT, &path, Some(&plan)).await;
    assert_eq!(status, 202, "{body}");
    let plan_id = body["build_id"].as_str().unwrap().to_owned();
    wait_ended(&front, &scoped, &plan_id).await;
    let apply = json!({ "plan": plan_id });
    let (status, body) =
        front.call(Some(&scoped), Method::POST, &format!("/deployments/{b}/apply"), Some(&apply)).await;
    assert_eq!((status, body["error"].as_str()), (409, Some("plan_not_appliable")), "{body}");

    // A delete whose push is delivered.
    let delete = json!({ "callback_url": origin.reconcile_url(), "callback_token": cb_delivered });
    let (status, body) = front.call(Some(&scoped), Method::DELETE, &format!("/deployments/{a}"), Some(&delete)).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["callback"]["accepted"], true, "{body}");
    let destroy = body["build_id"].as_str().unwrap().to_owned();
    wait_idle(&front, &scoped, a).await;
    let outcome = wait_callback_outcome(&front, &scoped, &destroy).await;
    assert_eq!(outcome["state"], "delivered", "{outcome}");
    let pushes = origin.pushes().into_iter().filter(|r| r.header("webhook-id").is_none()).count();
    assert_eq!(pushes, 1, "{:?}", origin.requests());
    let (status, text) = front.stream(&format!("/deployments/{a}/events"), Some(&scoped), None).await;
    assert_eq!(status, 200, "{text}");

    // A cancel: a redeploy of b, cancelled at once (queued, running or already done).
    let (status, body) = front.call(Some(&scoped), Method::PUT, &format!("/deployments/{b}"), Some(&submit)).await;
    assert_eq!(status, 202, "{body}");
    let redeploy = body["build_id"].as_str().unwrap().to_owned();
    let (status, body) = front.call(Some(&foreign), Method::POST, &format!("/builds/{redeploy}/cancel"), None).await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = front.call(Some(&scoped), Method::POST, &format!("/builds/{redeploy}/cancel"), None).await;
    assert!([200, 202, 409].contains(&status), "{status} {body}");
    wait_ended(&front, &scoped, &redeploy).await;

    // A delete whose callback is refused: its origin is not allowed.
    let delete = json!({ "callback_url": elsewhere.reconcile_url(), "callback_token": cb_refused });
    let (status, body) = front.call(Some(&scoped), Method::DELETE, &format!("/deployments/{b}"), Some(&delete)).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["callback"]["accepted"], false, "{body}");
    assert!(body["callback"]["reason"].as_str().is_some_and(|r| !r.is_empty()), "{body}");
    wait_idle(&front, &scoped, b).await;

    // A delete of an unknown deployment, and one with a callback URL that is no URL.
    let delete = json!({ "callback_url": origin.reconcile_url(), "callback_token": cb_unknown });
    let (status, body) = front.call(Some(&api.token), Method::DELETE, "/deployments/leak-unknown", Some(&delete)).await;
    assert_eq!(status, 404, "{body}");
    let delete = json!({ "callback_url": "not a url", "callback_token": cb_malformed });
    let (status, body) = front.call(Some(&scoped), Method::DELETE, &format!("/deployments/{a}"), Some(&delete)).await;
    assert!(status == 202 || status == 400, "{status} {body}");
    if status == 202 {
        assert_eq!(body["callback"]["accepted"], false, "{body}");
        wait_ended(&front, &scoped, body["build_id"].as_str().unwrap()).await;
    }

    // Reads of every build and its log.
    let builds_a = front.read_all(&scoped, a).await;
    let builds_b = front.read_all(&scoped, b).await;
    assert!(builds_a.contains(&destroy) && builds_b.contains(&redeploy));
    assert!(elsewhere.requests().is_empty(), "a refused callback was called: {:?}", elsewhere.requests());
    let pushes = origin.pushes().into_iter().filter(|r| r.header("webhook-id").is_none()).count();
    assert_eq!(pushes, 1, "{:?}", origin.requests());

    // The webhook's deliveries went out signed; its log and reads are
    // scanned as answers. A rotation's answer (the new secret, once) is not.
    wait_for("a webhook delivery", Duration::from_secs(60), || async {
        let (_, log) = front.call(Some(&operator), Method::GET, &format!("/webhooks/{webhook}/deliveries"), None).await;
        log["deliveries"].as_array()?.iter().any(|d| d["status"] == "delivered").then_some(())
    })
    .await;
    let signed = origin.requests().into_iter().filter(|r| r.header("webhook-signature").is_some()).count();
    assert!(signed > 0, "no signed delivery reached the origin");
    let (status, body) = front.call(Some(&operator), Method::GET, &format!("/webhooks/{webhook}"), None).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = front.call(Some(&operator), Method::GET, "/webhooks", None).await;
    assert_eq!(status, 200, "{body}");
    let rotate = json!({ "rotate_secret": true });
    let rotated = api.http.patch(format!("{}/webhooks/{webhook}", api.base)).bearer_auth(&operator).json(&rotate);
    let rotated: Value = rotated.send().await.unwrap().json().await.unwrap();
    let rotated = rotated["secret"].as_str().unwrap().to_owned();
    secrets.push(Secret::opaque("a webhook's rotated secret", &rotated));
    secrets.push(Secret::opaque("a webhook's rotated key (after whsec_)", &rotated["whsec_".len()..]));
    let refused = json!({ "url": elsewhere.reconcile_url(), "events": ["*"], "secret": webhook_secret });
    let (status, body) = front.call(Some(&operator), Method::POST, "/webhooks", Some(&refused)).await;
    assert_eq!((status, &body["error"]), (400, &json!("invalid_webhook_url")), "{body}");
    let bad_secret = json!({ "url": origin.reconcile_url(), "events": ["*"], "secret": format!("{webhook_secret}!") });
    let (status, body) = front.call(Some(&operator), Method::POST, "/webhooks", Some(&bad_secret)).await;
    assert_eq!((status, &body["error"]), (400, &json!("invalid_webhook")), "{body}");

    // The metrics of both, scanned as answers.
    for base in [api.base.clone(), format!("http://127.0.0.1:{metrics_port}")] {
        let r = front.http.get(format!("{base}/metrics")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{base}/metrics");
        let bytes = r.bytes().await.unwrap().to_vec();
        assert!(bytes.starts_with(b"# "), "{base}/metrics: {}", String::from_utf8_lossy(&bytes));
        front.answers.lock().unwrap().push((format!("the scrape of {base}/metrics"), bytes));
    }

    // Everything is written: stop both processes, then scan.
    api_process.kill();
    worker_process.kill();
    let mut hits = Vec::new();
    let mut lines = 0;
    for log in ["api.log", "worker.log"] {
        let text = std::fs::read(db.path(log)).unwrap();
        assert!(!text.is_empty(), "{log} is empty");
        for (n, line) in text.split(|b| *b == b'\n').enumerate() {
            scan(&secrets, &format!("{log} line {}", n + 1), line, &mut hits);
            lines += 1;
        }
    }
    let answers = std::mem::take(&mut *front.answers.lock().unwrap());
    for (place, body) in &answers {
        scan(&secrets, place, body, &mut hits);
    }
    let (tables, rows) = scan_database(&db, &secrets, &mut hits).await;
    eprintln!(
        "scanned {lines} log lines, {} answers, {rows} rows of {tables} tables for {} secrets",
        answers.len(),
        secrets.len()
    );
    assert!(rows > 0, "the database has no rows");
    // Not counted: SQLite keeps old versions of pages (in the WAL, and in
    // free pages unless secure_delete is on) until they are overwritten.
    let mut residue = Vec::new();
    for file in ["slipway.db", "slipway.db-wal"] {
        if let Ok(bytes) = std::fs::read(db.path(file)) {
            scan(&secrets, &format!("the raw bytes of {file}"), &bytes, &mut residue);
        }
    }
    for r in &residue {
        eprintln!("note: {r} (an old page version, in no row)");
    }
    // The one place a webhook secret is kept, usable for signing
    // (docs/DECISIONS.md, "Webhook secrets are stored in the database"):
    // the scan must find the current one there, and nowhere else.
    let kept = |h: &String| h.contains("table webhook_endpoints, row ") && h.ends_with(", column secret");
    assert!(hits.iter().any(|h| kept(h) && h.starts_with("a webhook's rotated")), "the scan missed the kept secret");
    hits.retain(|h| !kept(h));
    hits.dedup();
    assert!(
        hits.is_empty(),
        "SEC-2: secrets where none may be (logs kept in {}):\n  {}",
        db.dir.path().display(),
        hits.join("\n  ")
    );
    db.keep(false);
}

/// Scans every column of every row of every table (as bytes, whatever its
/// type); returns how many tables and rows it read.
async fn scan_database(db: &TestDatabase, secrets: &[Secret], hits: &mut Vec<String>) -> (usize, usize) {
    use sqlx::{Connection, Row};
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(db.path("slipway.db")).read_only(true);
    let mut conn = sqlx::SqliteConnection::connect_with(&options).await.expect("the test's database");
    let tables: Vec<(String,)> = sqlx::query_as("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    let mut rows_read = 0;
    for (table,) in &tables {
        let columns: Vec<(String,)> =
            sqlx::query_as("SELECT name FROM pragma_table_info(?)").bind(table).fetch_all(&mut conn).await.unwrap();
        if columns.is_empty() {
            continue;
        }
        let quote = |name: &str| format!("\"{}\"", name.replace('"', "\"\""));
        let list: Vec<String> = columns.iter().map(|(c,)| format!("CAST({} AS BLOB)", quote(c))).collect();
        let sql = format!("SELECT {} FROM {}", list.join(", "), quote(table));
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_all(&mut conn).await.unwrap();
        for (r, row) in rows.iter().enumerate() {
            for (i, (column,)) in columns.iter().enumerate() {
                let value: Option<Vec<u8>> = row.try_get(i).unwrap();
                if let Some(value) = value {
                    scan(
                        secrets,
                        &format!("the database: table {table}, row {}, column {column}", r + 1),
                        &value,
                        hits,
                    );
                }
            }
        }
        rows_read += rows.len();
    }
    let _ = conn.close().await;
    (tables.len(), rows_read)
}

#[test]
fn the_scan_finds_a_secret_as_sent_in_base64_and_by_its_signature_alone() {
    let token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJlLW9mLWF0LWxlYXN0LXRoaXJ0eS10d28tYnl0ZXM";
    let secrets = [Secret::bearer("a token", token), Secret::opaque("a callback token", "cb-123")];
    assert_eq!(base64(b"cb-123", STANDARD, true), "Y2ItMTIz");
    assert_eq!(base64(b"ab", URL_SAFE, false), "YWI");
    assert_eq!(base64(b"ab", STANDARD, true), "YWI=");
    assert_eq!(base64(b"\xfb\xff", URL_SAFE, false), "-_8");
    let mut hits = Vec::new();
    scan(&secrets, "a line", format!("Authorization: Bearer {token}").as_bytes(), &mut hits);
    scan(&secrets, "a row", b"sig=c2lnbmF0dXJlLW9mLWF0LWxlYXN0LXRoaXJ0eS10d28tYnl0ZXM", &mut hits);
    scan(&secrets, "a body", b"{\"t\": \"Y2ItMTIz\"}", &mut hits);
    scan(&secrets, "a clean line", b"GET /deployments/{id} 200", &mut hits);
    assert_eq!(
        hits,
        [
            "a token (as sent) in a line",
            "a token (its signature) in a line",
            "a token (its signature) in a row",
            "a callback token (in base64) in a body",
        ]
    );
}
