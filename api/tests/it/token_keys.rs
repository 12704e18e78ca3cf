//! SEC-4: several token keys at once, each named by its `kid`, rotated on a
//! running api without a restart.
//!
//! Over the router: a token's kid picks its key; an unknown kid, a `crit`
//! header, two `Authorization` headers and a stream's token sent both in
//! the header and as `?access_token=` are `401`. Over the real binary on
//! loopback: a keys file that is not a key set stops the start naming its
//! fault; `slipway-api token --kid` signs with the key it names; keys rotate
//! (a new file renamed over the old one) while clients keep sending tokens
//! of the old and the new key, and no token of a key live at that moment is
//! ever refused; `SIGHUP` reloads the file, and a reload that fails keeps the
//! keys live before it.

use crate::common;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use base64::Engine as _;
use common::process::{api_command, start_api, ApiProcess};
use common::*;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tower::ServiceExt;

/// The secrets of the HS256 keys `a`, `b` and `c` (of equal length).
const SECRET_A: &[u8] = b"key-a-secret-of-at-least-32-bytes!";
const SECRET_B: &[u8] = b"key-b-secret-of-at-least-32-bytes!";
const SECRET_C: &[u8] = b"key-c-secret-of-at-least-32-bytes!";

/// The secret of HS256 key `kid`.
fn secret(kid: &str) -> &'static [u8] {
    match kid {
        "a" => SECRET_A,
        "b" => SECRET_B,
        _ => SECRET_C,
    }
}

/// The JWK of HS256 key `kid`.
fn jwk(kid: &str) -> Value {
    json!({ "kty": "oct", "kid": kid, "k": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret(kid)) })
}

/// `{"keys": [the JWK of each kid]}`.
fn key_set(kids: &[&str]) -> String {
    json!({ "keys": kids.iter().map(|k| jwk(k)).collect::<Vec<_>>() }).to_string()
}

/// Writes `text` to `path` as an operator should: to a file beside it, then
/// renamed over it, so the api reads the old file or the new one, whole.
fn replace(path: &Path, text: &str) {
    let next = path.with_extension("json.new");
    std::fs::write(&next, text).unwrap();
    std::fs::rename(&next, path).unwrap();
}

/// Valid claims for every deployment, for an hour, with `header`'s fields.
fn signed(header: jsonwebtoken::Header, key: &[u8]) -> String {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let claims = json!({ "sub": "panel", "aud": "slipway", "exp": now + 3600, "deployments": ["*"] });
    jsonwebtoken::encode(&header, &claims, &jsonwebtoken::EncodingKey::from_secret(key)).unwrap()
}

/// A token signed with `key`, its header naming `kid` when given.
fn token(key: &[u8], kid: Option<&str>) -> String {
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    header.kid = kid.map(str::to_owned);
    signed(header, key)
}

/// A folder holding `keys.json` with the keys of `kids`.
fn keys_dir(kids: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys.json");
    std::fs::write(&path, key_set(kids)).unwrap();
    (dir, path)
}

/// A harness whose keys are those of `path` (an empty `SLIPWAY_JWT_SECRET` is unset).
async fn harness_of(path: &Path) -> Harness {
    harness_with(Engine::Sqlite, &[("SLIPWAY_JWT_SECRET", ""), ("SLIPWAY_JWT_KEYS_FILE", path.to_str().unwrap())]).await
}

/// `method uri` with one `Authorization: Bearer` header per token: the
/// status and the error message, if any.
async fn call(h: &Harness, method: Method, uri: &str, tokens: &[&str]) -> (StatusCode, String) {
    let mut request = Request::builder().method(method).uri(uri);
    for t in tokens {
        request = request.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let body = Body::from(json!({ "configuration": demo() }).to_string());
    let request = request.header(header::CONTENT_TYPE, "application/json").body(body).unwrap();
    let answer = h.router.clone().oneshot(request).await.unwrap();
    let status = answer.status();
    let bytes = answer.into_body().collect().await.unwrap().to_bytes();
    let message = serde_json::from_slice::<Value>(&bytes).ok().and_then(|v| v["message"].as_str().map(str::to_owned));
    (status, message.unwrap_or_default())
}

#[tokio::test]
async fn a_kid_picks_its_key_and_an_unknown_kid_or_a_crit_header_is_401() {
    let (_dir, path) = keys_dir(&["a", "b"]);
    let h = harness_of(&path).await;
    let list = "/deployments?ids=z";
    for good in [token(SECRET_A, Some("a")), token(SECRET_B, Some("b")), token(SECRET_A, None), token(SECRET_B, None)] {
        assert_eq!(call(&h, Method::GET, list, &[&good]).await.0, StatusCode::OK);
    }
    let mut crit = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    crit.kid = Some("a".into());
    crit.crit = Some(vec!["exp".into()]);
    for (bad, want) in [
        (token(SECRET_A, Some("b")), "the token's signature does not verify"),
        (token(SECRET_C, None), "the token's signature does not verify"),
        (token(SECRET_C, Some("c")), "the token's kid \"c\" names no key of this service"),
        (
            signed(crit, SECRET_A),
            "the token's header has a crit parameter; this service understands no header extension",
        ),
    ] {
        for (method, uri) in [(Method::GET, list), (Method::PUT, "/deployments/demo")] {
            assert_eq!(call(&h, method.clone(), uri, &[&bad]).await, (StatusCode::UNAUTHORIZED, want.to_owned()));
        }
    }
    assert_eq!(h.count("deployments").await, 0);
}

#[tokio::test]
async fn two_authorization_headers_or_a_streams_token_sent_twice_are_401() {
    let h = harness(Engine::Sqlite).await;
    let token = all();
    let several = (StatusCode::UNAUTHORIZED, "send one Authorization header, not several".to_owned());
    for (method, uri) in [
        (Method::GET, "/deployments?ids=z"),
        (Method::PUT, "/deployments/demo"),
        (Method::GET, "/deployments/demo/events"),
        (Method::GET, "/queues"),
    ] {
        assert_eq!(call(&h, method.clone(), uri, &[&token, &token]).await, several, "{method} {uri}");
    }
    assert_eq!(h.count("deployments").await, 0, "a refused submit stored nothing");
    let twice =
        (StatusCode::UNAUTHORIZED, "send the token once: in the Authorization header or as access_token, not both");
    for path in ["/deployments/demo/events", "/builds/demo.20260101T000000Z.abcdef/log"] {
        let both = format!("{path}?access_token={token}");
        let answer = call(&h, Method::GET, &both, &[&token]).await;
        assert_eq!((answer.0, answer.1.as_str()), twice, "{path}");
        // Either way alone reaches the route: these ids do not exist.
        assert_eq!(call(&h, Method::GET, path, &[&token]).await.0, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(call(&h, Method::GET, &both, &[]).await.0, StatusCode::NOT_FOUND, "{path}");
    }
}

// The real binary.

/// An api on its own folder whose keys are those of `keys` (a path in `dir`).
async fn api_with_keys(dir: &Path, keys: &Path) -> ApiProcess {
    start_api(dir, None, &[("SLIPWAY_JWT_SECRET", ""), ("SLIPWAY_JWT_KEYS_FILE", keys.to_str().unwrap())]).await
}

#[tokio::test]
async fn a_keys_file_that_is_not_a_key_set_stops_the_api_at_start_naming_its_faults() {
    let (dir, path) = keys_dir(&["a"]);
    let short = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b"too-short");
    let bad = json!({ "keys": [jwk("a"), { "kty": "oct", "kid": "b", "k": short }, jwk("a")] }).to_string();
    std::fs::write(&path, bad).unwrap();
    let env = [("SLIPWAY_JWT_SECRET", ""), ("SLIPWAY_JWT_KEYS_FILE", path.to_str().unwrap())];
    let mut command = api_command(dir.path(), None, &env);
    let out = tokio::time::timeout(Duration::from_secs(120), command.output()).await.expect("it stops").unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    for want in [
        path.display().to_string(),
        "key 1 (kid \"b\"): its k holds 9 bytes; an HS256 secret needs at least 32 random bytes".to_owned(),
        "key 2 (kid \"a\"): key 0 has the same kid".to_owned(),
    ] {
        assert!(stderr.contains(&want), "{want:?} is not in: {stderr}");
    }
    for secret in [short, base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(SECRET_A)] {
        assert!(!stderr.contains(&secret), "a key is shown: {stderr}");
    }
}

#[tokio::test]
async fn the_token_command_signs_with_the_key_its_kid_names() {
    let (dir, path) = keys_dir(&["a", "b"]);
    let env = [("SLIPWAY_JWT_SECRET", ""), ("SLIPWAY_JWT_KEYS_FILE", path.to_str().unwrap())];
    let mint = |args: &'static [&'static str]| {
        let mut command = api_command(dir.path(), None, &env);
        command.args(["token", "--deployments", "*"]).args(args);
        async move { command.output().await.unwrap() }
    };
    for (args, kid) in [(&[][..], "a"), (&["--kid", "b"][..], "b")] {
        let out = mint(args).await;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let token = String::from_utf8(out.stdout).unwrap();
        let token = token.trim();
        assert_eq!(jsonwebtoken::decode_header(token).unwrap().kid.as_deref(), Some(kid));
        let mut check = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
        check.set_audience(&["slipway"]);
        let key = jsonwebtoken::DecodingKey::from_secret(secret(kid));
        jsonwebtoken::decode::<Value>(token, &key, &check).unwrap_or_else(|e| panic!("{kid}: {e}"));
    }
    let out = mint(&["--kid", "c"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("has no key with the kid \"c\""), "{stderr}");
}

/// Which key signed a request's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signer {
    A,
    B,
}

/// One request of the clients: its token's key, when it was sent and
/// answered, and the status.
#[derive(Debug, Clone, Copy)]
struct Sent {
    signer: Signer,
    started: Instant,
    answered: Instant,
    status: u16,
}

/// Receives the clients' requests into `sent` until `done(sent)`; panics
/// naming `what` past 60 s.
async fn until(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Sent>,
    sent: &mut Vec<Sent>,
    what: &str,
    done: impl Fn(&[Sent]) -> bool,
) {
    let waited = tokio::time::timeout(Duration::from_secs(60), async {
        while !done(sent) {
            sent.push(rx.recv().await.expect("the clients run"));
        }
    })
    .await;
    assert!(waited.is_ok(), "waited 60 s for {what}");
}

/// How many requests of `signer` answered `status` after `since`.
fn count(sent: &[Sent], signer: Signer, status: u16, since: Instant) -> usize {
    sent.iter().filter(|s| s.signer == signer && s.status == status && s.started >= since).count()
}

/// The rotation of the operator guide on a running api: key `a` live; `b`
/// added beside it (the file replaced by one with both); `a` removed. Two
/// clients send requests all along, one with a token of `a`, one with a
/// token of `b`, each sending its next request when the last is answered.
/// Each change reaches the api through the file alone (its poll). No
/// request of a key live at that moment is refused: `a`'s until the file
/// without it is written, `b`'s from the first of its tokens accepted on;
/// and once refused, `a` stays refused.
#[tokio::test]
async fn keys_rotate_on_a_running_api_without_refusing_a_token_of_a_live_key() {
    let (dir, path) = keys_dir(&["a"]);
    let api = api_with_keys(dir.path(), &path).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for (signer, token) in [(Signer::A, token(SECRET_A, Some("a"))), (Signer::B, token(SECRET_B, Some("b")))] {
        let (tx, addr) = (tx.clone(), api.addr.clone());
        tokio::spawn(async move {
            let head = format!("GET /deployments?ids=z HTTP/1.1\r\nAuthorization: Bearer {token}\r\n");
            loop {
                let started = Instant::now();
                let status = common::process::status_at(&addr, &head).await;
                if tx.send(Sent { signer, started, answered: Instant::now(), status }).is_err() {
                    break;
                }
            }
        });
    }
    drop(tx);
    let begun = Instant::now();
    let mut sent = Vec::new();
    until(&mut rx, &mut sent, "requests before the rotation", |s| {
        count(s, Signer::A, 200, begun) >= 20 && count(s, Signer::B, 401, begun) >= 20
    })
    .await;

    let adding = Instant::now();
    replace(&path, &key_set(&["a", "b"]));
    until(&mut rx, &mut sent, "a token of b accepted", |s| count(s, Signer::B, 200, adding) > 0).await;
    let b_live = sent.iter().find(|s| s.signer == Signer::B && s.status == 200).unwrap().answered;
    until(&mut rx, &mut sent, "requests with both keys live", |s| {
        count(s, Signer::A, 200, b_live) >= 20 && count(s, Signer::B, 200, b_live) >= 20
    })
    .await;

    let removing = Instant::now();
    replace(&path, &key_set(&["b"]));
    until(&mut rx, &mut sent, "a token of a refused", |s| count(s, Signer::A, 401, removing) > 0).await;
    let a_gone = sent.iter().find(|s| s.signer == Signer::A && s.status == 401).unwrap().answered;
    until(&mut rx, &mut sent, "requests after the rotation", |s| {
        count(s, Signer::A, 401, a_gone) >= 20 && count(s, Signer::B, 200, a_gone) >= 20
    })
    .await;
    drop(rx);

    let failed = |s: &&Sent| {
        s.status != 200 && s.status != 401
            || s.signer == Signer::A
                && (s.answered < removing && s.status != 200 || s.started > a_gone && s.status != 401)
            || s.signer == Signer::B
                && (s.answered < adding && s.status != 401 || s.started > b_live && s.status != 200)
    };
    let wrong: Vec<_> = sent.iter().filter(failed).collect();
    assert!(
        wrong.is_empty(),
        "{} of {} requests were answered against the keys live then: {:?}",
        wrong.len(),
        sent.len(),
        &wrong[..wrong.len().min(5)]
    );
    assert!(b_live > adding && a_gone > removing);
    api.stop().await;
}

/// Writes `text` over the keys file in place (the same inode), of the same
/// length as what it replaces, and gives the file back its modification
/// time: a change the file's poll cannot see, which `SIGHUP` reads.
fn rewrite_unseen(path: &Path, text: &str) {
    use std::io::Write as _;
    let before = std::fs::metadata(path).unwrap();
    assert_eq!(before.len(), text.len() as u64, "the same length");
    let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file.set_modified(before.modified().unwrap()).unwrap();
}

/// `SIGHUP` makes the api read the keys file whether or not it changed to
/// the poll's eye; a file it refuses leaves the keys live before it in
/// place, with one error line naming the fault, the reload counted as
/// `failed`; neither line shows a key.
#[tokio::test]
async fn sighup_reloads_the_keys_file_and_a_reload_that_fails_keeps_the_keys() {
    let (dir, path) = keys_dir(&["a"]);
    let api = api_with_keys(dir.path(), &path).await;
    let (a, b) = (token(SECRET_A, Some("a")), token(SECRET_B, Some("b")));
    assert_eq!((api.list_with(&a).await, api.list_with(&b).await), (200, 401));

    let seen = api.log().len();
    rewrite_unseen(&path, &key_set(&["b"]));
    hang_up(&api);
    let line = api.wait_log(seen, &["token keys reloaded", "SIGHUP", "[\"b\"]"], Duration::from_secs(30)).await;
    assert_eq!((api.list_with(&a).await, api.list_with(&b).await), (401, 200), "after: {line}");

    let seen = api.log().len();
    rewrite_unseen(&path, &key_set(&["b"]).replace("\"oct\"", "\"RSA\""));
    hang_up(&api);
    let line = api.wait_log(seen, &["token keys not reloaded", "SIGHUP"], Duration::from_secs(30)).await;
    assert!(line.contains("key 0 (kid \"b\"): its kty is \"RSA\"") && line.contains("[\"b\"]"), "{line}");
    assert_eq!((api.list_with(&a).await, api.list_with(&b).await), (401, 200), "the keys before stay live");

    let (status, metrics) = api.get("/metrics").await;
    assert_eq!(status, 200);
    for want in ["slipway_token_key_reloads_total{outcome=\"loaded\"} 1", "outcome=\"failed\"} 1"] {
        assert!(metrics.contains(want), "{want} is not in:\n{metrics}");
    }
    let shown = format!("{}\n{metrics}", api.log().join("\n"));
    for key in [SECRET_A, SECRET_B] {
        let k = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key);
        assert!(!shown.contains(&k) && !shown.contains(std::str::from_utf8(key).unwrap()), "a key is shown");
    }
    api.stop().await;
}

/// Sends `SIGHUP` to the api.
fn hang_up(api: &ApiProcess) {
    // SAFETY: kill(2) with a process id of our own child and a valid signal.
    assert_eq!(unsafe { libc::kill(api.pid() as i32, libc::SIGHUP) }, 0);
}
