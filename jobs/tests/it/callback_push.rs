//! The reconcile push (DL-2) over real HTTP on loopback: receivers are raw
//! tokio listeners that record what they accept, the resolver is scripted
//! and counts its calls. "Got nothing" is proved without sleeping: after the
//! push, a sentinel connection must be the next one the receiver accepts.

use secrecy::SecretString;
use serde_json::{json, Value};
use slipway_jobs::callback::{check_url, push, Lookup, Origins, PushError, PushOutcome, PushRequest, Resolve};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

const TOKEN_TEXT: &str = "cb-token-7d1f0c2a9e";
static TOKEN: LazyLock<SecretString> = LazyLock::new(|| SecretString::from(TOKEN_TEXT));
static BODY: LazyLock<Value> = LazyLock::new(|| json!({"deployment": "demo", "state": "idle"}));

/// How long a test waits for something it expects to happen.
const WAIT: Duration = Duration::from_secs(10);
/// A globally reachable address (not a documentation range, which the
/// callback check refuses) that no test's receiver listens on.
const PUBLIC: IpAddr = IpAddr::V4(Ipv4Addr::new(93, 184, 216, 34));
const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

async fn within<T>(what: &str, future: impl std::future::Future<Output = Option<T>>) -> T {
    match tokio::time::timeout(WAIT, future).await {
        Ok(Some(value)) => value,
        Ok(None) => panic!("{what}: the channel closed"),
        Err(_) => panic!("{what}: nothing within {WAIT:?}"),
    }
}

/// A resolver answering from a script: the n-th call gets the n-th answer,
/// later calls the last one.
struct Scripted {
    answers: Vec<Vec<IpAddr>>,
    calls: AtomicUsize,
}

impl Scripted {
    fn new(answers: Vec<Vec<IpAddr>>) -> Self {
        Self { answers, calls: AtomicUsize::new(0) }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Resolve for Scripted {
    fn lookup<'a>(&'a self, _host: &'a str) -> Lookup<'a> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let answer = self.answers[n.min(self.answers.len() - 1)].clone();
        Box::pin(async move { Ok(answer) })
    }
}

/// What a receiver does with a connection.
enum Behaviour {
    /// Reads the request, writes this answer and closes.
    Answer(String),
    /// Reads the request and never answers.
    Never,
    /// Writes bytes that are not TLS as soon as it accepts, then waits.
    NotTls,
}

/// A request as a receiver read it.
struct Seen {
    head: String,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

struct Receiver {
    addr: SocketAddr,
    /// Peers in accept order.
    accepted: mpsc::UnboundedReceiver<SocketAddr>,
    requests: mpsc::UnboundedReceiver<Seen>,
}

impl Receiver {
    async fn start(behaviour: Behaviour) -> Self {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (accepted_tx, accepted) = mpsc::unbounded_channel();
        let (requests_tx, requests) = mpsc::unbounded_channel();
        let behaviour = Arc::new(behaviour);
        tokio::spawn(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                let _ = accepted_tx.send(peer);
                tokio::spawn(serve(stream, behaviour.clone(), requests_tx.clone()));
            }
        });
        Self { addr, accepted, requests }
    }

    fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Asserts that no connection reached the receiver (beyond those already
    /// taken from `accepted`): a sentinel connection made now is the next one
    /// accepted.
    async fn assert_got_nothing_more(&mut self) {
        let sentinel = TcpStream::connect(self.addr).await.unwrap();
        let me = sentinel.local_addr().unwrap();
        let next = within("the sentinel's accept", self.accepted.recv()).await;
        assert_eq!(next, me, "the receiver accepted a connection before the sentinel");
    }
}

async fn serve(mut stream: TcpStream, behaviour: Arc<Behaviour>, requests: mpsc::UnboundedSender<Seen>) {
    if let Behaviour::NotTls = *behaviour {
        let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n").await;
        return std::future::pending().await;
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut seen = Seen { head, body: Vec::new() };
    let length: usize = seen.header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    while buf.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    seen.body = buf[head_end..head_end + length].to_vec();
    let _ = requests.send(seen);
    match &*behaviour {
        Behaviour::Answer(answer) => {
            let _ = stream.write_all(answer.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
        Behaviour::Never | Behaviour::NotTls => std::future::pending().await,
    }
}

fn answer(status_line: &str, extra: &str) -> Behaviour {
    Behaviour::Answer(format!("HTTP/1.1 {status_line}\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n"))
}

fn origins(entries: &[String]) -> Origins {
    Origins::parse(entries).unwrap()
}

fn request<'a>(
    url: &'a str,
    origins: &'a Origins,
    resolver: &'a dyn Resolve,
    allow_private: bool,
    deadline: Duration,
) -> PushRequest<'a> {
    PushRequest { url, token: &TOKEN, body: &BODY, origins, allow_private, resolver, deadline }
}

/// SEC-2: whatever the outcome, its record never holds the token.
fn assert_no_token(outcome: &PushOutcome) {
    let json = serde_json::to_string(outcome).unwrap();
    assert!(!json.contains(TOKEN_TEXT), "the outcome shows the token: {json}");
    assert!(!format!("{outcome:?}").contains(TOKEN_TEXT), "the outcome's Debug shows the token");
}

#[tokio::test]
async fn a_push_to_a_loopback_receiver_with_allow_private_delivers_the_body_and_the_bearer_once() {
    let mut receiver = Receiver::start(answer("204 No Content", "")).await;
    let url = format!("http://receiver.test:{}/reconcile?deployment=demo", receiver.port());
    let allowed = origins(&[format!("http://receiver.test:{}", receiver.port())]);
    let resolver = Scripted::new(vec![vec![LOOPBACK]]);

    let outcome = push(request(&url, &allowed, &resolver, true, Duration::from_secs(5))).await;

    assert_no_token(&outcome);
    assert!(outcome.delivered, "{outcome:?}");
    assert_eq!((outcome.status, outcome.error, outcome.address), (Some(204), None, Some(receiver.addr)));
    let seen = within("the push", receiver.requests.recv()).await;
    assert!(seen.head.starts_with("POST /reconcile?deployment=demo HTTP/1.1\r\n"), "{}", seen.head);
    assert_eq!(seen.header("authorization"), Some(format!("Bearer {TOKEN_TEXT}").as_str()));
    assert_eq!(seen.header("content-type"), Some("application/json"));
    assert!(seen.header("user-agent").is_some_and(|ua| ua.starts_with("slipway/")), "{}", seen.head);
    assert_eq!(serde_json::from_slice::<Value>(&seen.body).unwrap(), *BODY);
    assert_eq!(resolver.calls(), 1);
    within("the push's accept", receiver.accepted.recv()).await;
    receiver.assert_got_nothing_more().await;
}

#[tokio::test]
async fn a_push_to_a_loopback_receiver_without_allow_private_is_refused_and_sends_nothing() {
    let mut receiver = Receiver::start(answer("204 No Content", "")).await;
    let url = format!("http://receiver.test:{}/reconcile", receiver.port());
    let allowed = origins(&[format!("http://receiver.test:{}", receiver.port())]);
    let resolver = Scripted::new(vec![vec![LOOPBACK]]);

    let outcome = push(request(&url, &allowed, &resolver, false, Duration::from_secs(5))).await;

    assert_no_token(&outcome);
    assert_eq!((outcome.delivered, outcome.status, outcome.error), (false, None, Some(PushError::RefusedAddress)));
    assert!(outcome.message.contains("loopback"), "{}", outcome.message);
    receiver.assert_got_nothing_more().await;
}

#[tokio::test]
async fn a_literal_loopback_address_is_refused_without_allow_private_and_never_resolved() {
    let mut receiver = Receiver::start(answer("204 No Content", "")).await;
    let url = format!("http://127.0.0.1:{}/reconcile", receiver.port());
    let allowed = origins(&[format!("http://127.0.0.1:{}", receiver.port())]);
    let resolver = Scripted::new(vec![vec![PUBLIC]]);

    let refused = push(request(&url, &allowed, &resolver, false, Duration::from_secs(5))).await;
    assert_eq!(refused.error, Some(PushError::RefusedAddress), "{refused:?}");
    receiver.assert_got_nothing_more().await;

    let delivered = push(request(&url, &allowed, &resolver, true, Duration::from_secs(5))).await;
    assert!(delivered.delivered, "{delivered:?}");
    assert_eq!(resolver.calls(), 0, "an IP literal was resolved");
}

#[tokio::test]
async fn a_rebinding_resolver_is_asked_once_and_the_loopback_receiver_never_gets_the_push() {
    let mut receiver = Receiver::start(answer("204 No Content", "")).await;
    let url = format!("http://rebind.test:{}/reconcile", receiver.port());
    let allowed = origins(&[format!("http://rebind.test:{}", receiver.port())]);
    let resolver = Scripted::new(vec![vec![PUBLIC], vec![LOOPBACK]]);
    let deadline = Duration::from_secs(1);

    let started = Instant::now();
    let outcome = push(request(&url, &allowed, &resolver, false, deadline)).await;

    assert_no_token(&outcome);
    assert!(
        matches!(outcome.error, Some(PushError::ConnectFailed | PushError::Timeout)),
        "the push should go to {PUBLIC} and fail: {outcome:?}"
    );
    assert!(started.elapsed() < deadline + Duration::from_secs(1), "took {:?}", started.elapsed());
    assert_eq!(resolver.calls(), 1, "the host was resolved again");
    receiver.assert_got_nothing_more().await;
}

#[tokio::test]
async fn a_resolver_answering_a_public_and_a_loopback_address_is_refused() {
    let mut receiver = Receiver::start(answer("204 No Content", "")).await;
    let url = format!("http://mixed.test:{}/reconcile", receiver.port());
    let allowed = origins(&[format!("http://mixed.test:{}", receiver.port())]);
    let resolver = Scripted::new(vec![vec!["93.184.216.34".parse().unwrap(), LOOPBACK]]);

    let outcome = push(request(&url, &allowed, &resolver, false, Duration::from_secs(5))).await;

    assert_no_token(&outcome);
    assert_eq!(outcome.error, Some(PushError::RefusedAddress), "{outcome:?}");
    assert_eq!(resolver.calls(), 1);
    receiver.assert_got_nothing_more().await;
}

#[tokio::test]
async fn a_name_resolving_to_a_benchmarking_or_cloud_platform_address_is_refused_and_sends_nothing() {
    for address in ["198.18.0.1", "168.63.129.16", "100.100.100.200", "fd00:ec2::254", "::ffff:198.18.0.1"] {
        let allowed = origins(&["https://panel.example".to_owned()]);
        let resolver = Scripted::new(vec![vec![address.parse().unwrap()]]);
        let outcome =
            push(request("https://panel.example/cb", &allowed, &resolver, false, Duration::from_secs(5))).await;
        assert_no_token(&outcome);
        assert_eq!(outcome.error, Some(PushError::RefusedAddress), "{address}: {outcome:?}");
        assert_eq!(resolver.calls(), 1, "{address}");
    }
}

#[tokio::test]
async fn a_name_that_resolves_to_nothing_is_resolve_failed() {
    let allowed = origins(&["http://nowhere.test".to_owned()]);
    let resolver = Scripted::new(vec![vec![]]);
    let outcome = push(request("http://nowhere.test/cb", &allowed, &resolver, true, Duration::from_secs(5))).await;
    assert_eq!(outcome.error, Some(PushError::ResolveFailed), "{outcome:?}");
}

#[tokio::test]
async fn a_redirect_is_recorded_as_its_status_and_not_followed() {
    let mut elsewhere = Receiver::start(answer("204 No Content", "")).await;
    let location = format!("Location: http://127.0.0.1:{}/stolen\r\n", elsewhere.port());
    let mut receiver = Receiver::start(answer("302 Found", &location)).await;
    let url = format!("http://receiver.test:{}/reconcile", receiver.port());
    // Both origins are allowed: the redirect is refused for being one.
    let allowed = origins(&[
        format!("http://receiver.test:{}", receiver.port()),
        format!("http://127.0.0.1:{}", elsewhere.port()),
    ]);
    let resolver = Scripted::new(vec![vec![LOOPBACK]]);

    let outcome = push(request(&url, &allowed, &resolver, true, Duration::from_secs(5))).await;

    assert_no_token(&outcome);
    assert_eq!((outcome.delivered, outcome.status, outcome.error), (false, Some(302), None), "{outcome:?}");
    within("the push", receiver.requests.recv()).await;
    elsewhere.assert_got_nothing_more().await;
}

#[tokio::test]
async fn a_receiver_that_never_answers_is_a_timeout_within_the_deadline() {
    let mut receiver = Receiver::start(Behaviour::Never).await;
    let url = format!("http://receiver.test:{}/reconcile", receiver.port());
    let allowed = origins(&[format!("http://receiver.test:{}", receiver.port())]);
    let resolver = Scripted::new(vec![vec![LOOPBACK]]);
    let deadline = Duration::from_secs(1);

    let started = Instant::now();
    let outcome = push(request(&url, &allowed, &resolver, true, deadline)).await;
    let took = started.elapsed();

    assert_no_token(&outcome);
    assert_eq!((outcome.delivered, outcome.status, outcome.error), (false, None, Some(PushError::Timeout)));
    assert!(took < deadline + Duration::from_millis(500), "took {took:?}");
    within("the push", receiver.requests.recv()).await;
}

#[tokio::test]
async fn an_origin_removed_from_the_allowlist_before_the_push_is_refused_origin() {
    let mut receiver = Receiver::start(answer("204 No Content", "")).await;
    let url = format!("http://receiver.test:{}/reconcile", receiver.port());
    let at_accept = origins(&[format!("http://receiver.test:{}", receiver.port())]);
    assert!(check_url(&url, &at_accept).is_ok(), "the delete would have accepted it");
    let at_push = origins(&["https://panel.example".to_owned()]);
    let resolver = Scripted::new(vec![vec![LOOPBACK]]);

    let outcome = push(request(&url, &at_push, &resolver, true, Duration::from_secs(5))).await;

    assert_no_token(&outcome);
    assert_eq!((outcome.delivered, outcome.error), (false, Some(PushError::RefusedOrigin)), "{outcome:?}");
    assert_eq!(resolver.calls(), 0);
    receiver.assert_got_nothing_more().await;
}

#[tokio::test]
async fn a_closed_port_is_connect_failed() {
    let port = {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://closed.test:{port}/reconcile");
    let allowed = origins(&[format!("http://closed.test:{port}")]);
    let resolver = Scripted::new(vec![vec![LOOPBACK]]);
    let outcome = push(request(&url, &allowed, &resolver, true, Duration::from_secs(5))).await;
    assert_no_token(&outcome);
    assert_eq!(outcome.error, Some(PushError::ConnectFailed), "{outcome:?}");
}

#[tokio::test]
async fn an_https_callback_answered_without_tls_is_a_tls_failure() {
    let receiver = Receiver::start(Behaviour::NotTls).await;
    let url = format!("https://receiver.test:{}/reconcile", receiver.port());
    let allowed = origins(&[format!("https://receiver.test:{}", receiver.port())]);
    let resolver = Scripted::new(vec![vec![LOOPBACK]]);
    let outcome = push(request(&url, &allowed, &resolver, true, Duration::from_secs(5))).await;
    assert_no_token(&outcome);
    assert_eq!(outcome.error, Some(PushError::Tls), "{outcome:?}");
}

#[tokio::test]
async fn a_push_request_and_its_outcome_json_never_show_the_token() {
    let allowed = origins(&["https://panel.example".to_owned()]);
    let resolver = Scripted::new(vec![vec![PUBLIC]]);
    let request = request("https://panel.example/cb", &allowed, &resolver, false, Duration::from_secs(1));
    assert!(!format!("{request:?}").contains(TOKEN_TEXT), "{request:?}");
    let outcome = PushOutcome {
        delivered: true,
        status: Some(204),
        error: None,
        message: "Delivered.".to_owned(),
        address: Some(SocketAddr::new(PUBLIC, 443)),
    };
    let json: Value = serde_json::to_value(&outcome).unwrap();
    assert_eq!(json["address"], "93.184.216.34:443");
    assert_no_token(&outcome);
}
