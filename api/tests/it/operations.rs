//! Running the api: answers while the database is away (within the
//! readiness budget, the outage logged once), request heads larger than
//! hyper's defaults (over real loopback TCP), the access log, `GET /version`
//! and token refusals that say what is wrong. Real SQLite and PostgreSQL
//! databases, one per test.

use crate::common;

use axum::http::{Method, StatusCode};
use axum::Router;
use common::*;
use serde_json::{json, Value};
use slipway_api::routes::health::READY_TIMEOUT;
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::{postgres_admin_url, wait_for, TestDatabase};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The readiness budget: `GET /readyz` answers `503` when the database does
/// not answer within it, and so must every other route (docs: README.md).
const BUDGET: Duration = Duration::from_secs(2);

/// How much later than the budget an answer may come (scheduling on a busy
/// test machine), far below the 10 s the pool used to wait.
const SLACK: Duration = Duration::from_secs(1);

/// Log lines written while a [`Captured::install`] guard lives (this
/// thread only: `#[tokio::test]` runs every task of the test on it).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn install(&self, filter: &str) -> tracing::subscriber::DefaultGuard {
        // tracing caches each callsite's interest process-wide, computed by
        // the first thread that reaches it; a sibling test's thread with no
        // subscriber would cache "never" and silence this capture. A global
        // subscriber that records nothing keeps every thread's answer "yes".
        static GLOBAL: std::sync::Once = std::sync::Once::new();
        GLOBAL.call_once(|| {
            let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry());
        });
        let writer = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap()).lines().map(str::to_owned).collect()
    }

    fn count(&self, needle: &str) -> usize {
        self.lines().iter().filter(|l| l.contains(needle)).count()
    }
}

// ---------------------------------------------------------------------------
// Fail fast while the database is away.

/// A TCP forwarder to PostgreSQL that can be cut: [`Proxy::stop`] closes
/// its port (new connections are refused, as by a stopped server) and drops
/// every forwarded connection.
struct Proxy {
    addr: SocketAddr,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tasks = Arc::new(Mutex::new(Vec::new()));
        let forwarding = tasks.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                forwarding.lock().unwrap().push(tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                }));
            }
        });
        tasks.lock().unwrap().push(accept);
        Proxy { addr, tasks }
    }

    /// `url` (of the test's PostgreSQL server) with the proxy as host.
    fn url(&self, url: &str) -> String {
        let rest = url.split_once("://").map(|(_, r)| r).expect("a postgres:// URL");
        let (authority, database) = rest.split_once('/').expect("a database name");
        let user = authority.rsplit_once('@').map_or(String::new(), |(u, _)| format!("{u}@"));
        format!("postgres://{user}{}/{database}", self.addr)
    }

    /// The server's `host:port` in `url`.
    fn upstream(url: &str) -> String {
        let rest = url.split_once("://").map(|(_, r)| r).expect("a postgres:// URL");
        let authority = rest.split('/').next().unwrap();
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        if host.contains(':') {
            host.to_owned()
        } else {
            format!("{host}:5432")
        }
    }

    async fn stop(&self) {
        let tasks: Vec<JoinHandle<()>> = std::mem::take(&mut *self.tasks.lock().unwrap());
        for task in tasks {
            task.abort();
            // Resolves once the task, and the sockets it held, are dropped.
            let _ = task.await;
        }
    }
}

/// Every route that needs the database, with a body where it takes one.
fn database_routes() -> Vec<(Method, &'static str, Option<Vec<u8>>)> {
    let submit = json!({ "configuration": demo() }).to_string().into_bytes();
    vec![
        (Method::GET, "/readyz", None),
        (Method::GET, "/deployments/x", None),
        (Method::GET, "/deployments?ids=x,y", None),
        (Method::GET, "/deployments/x/builds", None),
        (Method::PUT, "/deployments/x", Some(submit)),
        (Method::DELETE, "/deployments/x", None),
        (Method::GET, "/builds/x.20260101T000000Z.abcdef", None),
        (Method::POST, "/builds/x.20260101T000000Z.abcdef/cancel", None),
        (Method::GET, "/sbom-list/x", None),
        (Method::GET, "/sbom/x?node=n", None),
    ]
}

/// Calls every route of [`database_routes`] at once and checks each answers
/// `503 service_unavailable` within the readiness budget plus [`SLACK`].
async fn every_route_answers_503_within_the_budget(h: &Harness, outage: &str) {
    assert_eq!(READY_TIMEOUT, BUDGET, "the readiness budget is documented as 2 s");
    let token = all();
    let calls = database_routes().into_iter().map(|(method, uri, body)| {
        let token = token.clone();
        async move {
            let started = Instant::now();
            let (status, answer) = h.call(method.clone(), uri, Some(&token), body).await;
            (format!("{method} {uri}"), status, answer, started.elapsed())
        }
    });
    for (route, status, answer, took) in futures::future::join_all(calls).await {
        eprintln!("{outage}: {route} answered {status} in {:.3} s", took.as_secs_f64());
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{route}: {answer}");
        assert_error_shape(&answer, "service_unavailable");
        assert!(took <= BUDGET + SLACK, "{outage}: {route} took {took:?}, over the budget {BUDGET:?}");
    }
}

/// PostgreSQL refuses the database's connections and drops those it had.
#[tokio::test]
async fn every_route_answers_503_within_the_readiness_budget_while_postgres_refuses_connections() {
    let h = harness(Engine::Postgres).await;
    assert_eq!(h.call(Method::GET, "/readyz", None, None).await.0, StatusCode::OK);
    h.database.accept_connections(false).await;
    every_route_answers_503_within_the_budget(&h, "refused").await;
    h.database.accept_connections(true).await;
}

/// The server is gone: connections drop and new ones are refused at the TCP
/// level, which sqlx retries until the pool's acquire timeout.
#[tokio::test]
async fn every_route_answers_503_within_the_readiness_budget_while_postgres_is_stopped() {
    let proxy = Proxy::start(Proxy::upstream(&postgres_admin_url())).await;
    let database = TestDatabase::new(Engine::Postgres).await;
    let url = proxy.url(&database.url);
    let h = harness_on(database, Some(url), &[]).await;
    assert_eq!(h.call(Method::GET, "/readyz", None, None).await.0, StatusCode::OK);
    proxy.stop().await;
    every_route_answers_503_within_the_budget(&h, "stopped").await;
}

/// An outage gives one ERROR when it begins and one INFO when the database
/// answers again, however many requests and readiness polls meet it; the
/// next outage is logged again.
#[tokio::test]
async fn a_database_outage_is_logged_once_when_it_begins_and_once_when_it_ends() {
    let logs = Captured::default();
    let _guard = logs.install("info,sqlx=off");
    let h = harness(Engine::Postgres).await;
    let token = all();
    assert_eq!(h.call(Method::GET, "/readyz", None, None).await.0, StatusCode::OK);
    for outage in 1..=2 {
        h.database.accept_connections(false).await;
        for _ in 0..3 {
            assert_eq!(h.call(Method::GET, "/readyz", None, None).await.0, StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(
                h.call(Method::GET, "/deployments/x", Some(&token), None).await.0,
                StatusCode::SERVICE_UNAVAILABLE
            );
        }
        let loud: Vec<String> =
            logs.lines().into_iter().filter(|l| l.contains(" ERROR ") || l.contains(" WARN ")).collect();
        assert_eq!(loud.len(), outage, "one ERROR per outage, no WARN:\n{}", loud.join("\n"));
        assert!(loud.iter().all(|l| l.contains(" ERROR ") && l.contains("the database is away")), "{loud:?}");
        assert_eq!(logs.count("the database answers again"), outage - 1);
        h.database.accept_connections(true).await;
        wait_for("the recovery line", Duration::from_secs(15), || {
            let done = logs.count("the database answers again") == outage;
            async move { done.then_some(()) }
        })
        .await;
        assert_eq!(h.call(Method::GET, "/readyz", None, None).await.0, StatusCode::OK);
        assert_eq!(logs.count("the database answers again"), outage, "{:#?}", logs.lines());
    }
}

// ---------------------------------------------------------------------------
// Request heads larger than hyper's defaults, over loopback TCP.

struct Served {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

/// `router` served by [`slipway_api::serve::serve`] on a loopback port,
/// with the default read timeout.
async fn serve(router: Router) -> Served {
    serve_with(router, Duration::from_secs(30)).await
}

/// `router` served on a loopback port, request heads read within `read_timeout`.
async fn serve_with(router: Router, read_timeout: Duration) -> Served {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(slipway_api::serve::serve(listener, router, read_timeout, async {
        let _ = stopped.await;
    }));
    Served { addr, stop: Some(stop), task }
}

/// Sends `head` (a whole request head, `Connection: close`) and reads the
/// answer: status and JSON body (`{"raw": …}` when it is not JSON).
async fn raw_request(addr: SocketAddr, head: Vec<u8>) -> (u16, Value) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    // Written beside the read: a server that answers early stops reading.
    let write = tokio::spawn(async move {
        let _ = writer.write_all(&head).await;
        writer
    });
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), reader.read_to_end(&mut answer))
        .await
        .expect("an answer within 30 s")
        .unwrap_or_else(|e| panic!("reading the answer: {e} (got {:?})", String::from_utf8_lossy(&answer)));
    drop(write.await);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{head}"));
    (status, serde_json::from_str(body).unwrap_or_else(|_| json!({ "raw": body, "head": head })))
}

fn request_head(extra: &[(String, String)]) -> Vec<u8> {
    let mut head = String::from("GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head.into_bytes()
}

#[tokio::test]
async fn a_one_megabyte_header_answers_431_in_the_json_error_shape() {
    let h = harness(Engine::Sqlite).await;
    let served = serve(h.router.clone()).await;
    for size in [1_000_000, 1024 * 1024, slipway_api::limits::HEADER_LIMIT_BYTES] {
        let (status, body) = raw_request(served.addr, request_head(&[("X-Big".into(), "a".repeat(size))])).await;
        assert_eq!(status, 431, "{size} bytes: {body}");
        assert_error_shape(&body, "request_header_fields_too_large");
        assert_eq!(body["details"]["limit_bytes"], slipway_api::limits::HEADER_LIMIT_BYTES, "{body}");
        assert!(!body.to_string().contains("aaaa"), "the header is repeated: {body}");
    }
}

#[tokio::test]
async fn too_many_header_fields_answer_431_in_the_json_error_shape() {
    let h = harness(Engine::Sqlite).await;
    let served = serve(h.router.clone()).await;
    let many: Vec<(String, String)> = (0..300).map(|i| (format!("X-Field-{i}"), "v".to_owned())).collect();
    let (status, body) = raw_request(served.addr, request_head(&many)).await;
    assert_eq!(status, 431, "{body}");
    assert_error_shape(&body, "request_header_fields_too_large");
    assert_eq!(body["details"]["limit_fields"], slipway_api::limits::HEADER_FIELDS_LIMIT, "{body}");
}

#[tokio::test]
async fn a_header_section_within_the_limits_is_served() {
    let h = harness(Engine::Sqlite).await;
    let served = serve(h.router.clone()).await;
    let near = slipway_api::limits::HEADER_LIMIT_BYTES - 1024;
    let (status, body) = raw_request(served.addr, request_head(&[("X-Big".into(), "a".repeat(near))])).await;
    assert_eq!((status, &body), (200, &json!({ "status": "ok" })));
    let fields: Vec<(String, String)> = (0..90).map(|i| (format!("X-Field-{i}"), "v".to_owned())).collect();
    assert_eq!(raw_request(served.addr, request_head(&fields)).await.0, 200);
}

/// A client that never finishes its request head cannot hold a connection
/// open: past the read timeout the server closes it (hyper answers
/// nothing), and the server still serves others.
#[tokio::test]
async fn a_request_head_that_never_finishes_is_closed_after_the_read_timeout() {
    let h = harness(Engine::Sqlite).await;
    let read_timeout = Duration::from_secs(1);
    let served = serve_with(h.router.clone(), read_timeout).await;
    let started = Instant::now();
    let mut slow = TcpStream::connect(served.addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Half: ").await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(15), slow.read_to_end(&mut rest))
        .await
        .expect("the server closes a connection whose head never finishes");
    assert!(read.is_ok() || rest.is_empty(), "{read:?}");
    assert!(started.elapsed() >= read_timeout, "closed after {:?}, before the timeout", started.elapsed());
    let (status, _) = raw_request(served.addr, request_head(&[])).await;
    assert_eq!(status, 200);
}

/// A body that stops arriving gets `408 request_timeout` in the §3 shape
/// once a pause outlasts `SLIPWAY_REQUEST_TIMEOUT`; nothing is stored.
#[tokio::test]
async fn a_body_that_stops_arriving_gets_408_after_the_read_timeout() {
    for engine in [Engine::Sqlite, Engine::Postgres] {
        let h = harness_with(engine, &[("SLIPWAY_REQUEST_TIMEOUT", "1s")]).await;
        let served = serve(h.router.clone()).await;
        let head = format!(
            "PUT /deployments/demo HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"configuration\": ",
            all()
        );
        let started = Instant::now();
        let (status, body) = raw_request(served.addr, head.into_bytes()).await;
        assert_eq!(status, 408, "{engine:?}: {body}");
        assert_error_shape(&body, "request_timeout");
        assert!(started.elapsed() >= Duration::from_secs(1), "{engine:?}: answered after {:?}", started.elapsed());
        assert_eq!(h.count("builds").await, 0, "{engine:?}");
    }
}

/// A submit refused because the queue is full tells the client when to try
/// again (`Retry-After`, seconds), over real HTTP.
#[tokio::test]
async fn a_full_queue_tells_the_client_when_to_try_again() {
    let h = harness_with(Engine::Sqlite, &[("QUEUE_SIZE", "1")]).await;
    let (status, body) = h.put("first", &json!({ "configuration": slipway_jobs::test_support::demo() })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let served = serve(h.router.clone()).await;
    let body = json!({ "configuration": slipway_jobs::test_support::demo() }).to_string();
    let request = format!(
        "PUT /deployments/second HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        all(),
        body.len()
    );
    let mut stream = TcpStream::connect(served.addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_string(&mut answer)).await.unwrap().unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
    let retry_after =
        head.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("retry-after: ").map(str::to_owned));
    assert_eq!(retry_after, Some(slipway_api::error::QUEUE_FULL_RETRY_AFTER.to_string()), "{head}");
    let body: Value = serde_json::from_str(body).unwrap();
    assert_error_shape(&body, "queue_full");
    assert!(body["message"].as_str().unwrap().starts_with("1 build is waiting"), "{body}");
}

/// Graceful shutdown: once asked, serving ends (an idle keep-alive
/// connection does not hold it) and the port is closed.
#[tokio::test]
async fn serving_ends_gracefully_when_asked_to_stop() {
    let h = harness(Engine::Sqlite).await;
    let mut served = serve(h.router.clone()).await;
    let mut idle = TcpStream::connect(served.addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    served.stop.take().unwrap().send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), &mut served.task)
        .await
        .expect("serving ends within 10 s of the signal")
        .unwrap();
    assert!(TcpStream::connect(served.addr).await.is_err(), "the port is still open");
}

#[tokio::test]
async fn an_accepted_connection_sends_each_small_write_at_once_without_waiting_for_an_ack() {
    use slipway_jobs::store::nodelay;
    let h = harness(Engine::Sqlite).await;
    let served = serve(h.router.clone()).await;
    let mut client = TcpStream::connect(served.addr).await.unwrap();
    // One answered request: the server has accepted the connection by then.
    client.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
    let mut first = [0u8; 12];
    client.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    let accepted = nodelay::tcp_sockets_on(served.addr.port());
    assert_eq!(accepted.len(), 1, "one accepted connection on port {}: {accepted:?}", served.addr.port());
    assert_eq!(
        nodelay::nodelay(accepted[0]),
        Some(true),
        "the accepted connection holds small writes (a stream's events) until the client's delayed ACK"
    );
}

// ---------------------------------------------------------------------------
// What an operator sees.

/// One INFO line per request, in the request's span: method, route
/// template, the deployment or build the path names, status, latency;
/// never the token, the query string or a path no route matched.
#[tokio::test]
async fn every_request_gets_one_access_line_with_its_route_template_and_never_its_token() {
    let logs = Captured::default();
    let _guard = logs.install("info,sqlx=off");
    let h = harness(Engine::Sqlite).await;
    let token = all();
    let build = "hidden-id-19.20260101T000000Z.abcdef";
    let cases = [
        (Method::GET, "/deployments/hidden-id-17", Some(&token), "http.route=/deployments/{id}", 404),
        (Method::GET, "/deployments?ids=hidden-query-18", Some(&token), "http.route=/deployments", 200),
        (Method::GET, "/builds/hidden-id-19.20260101T000000Z.abcdef", None, "http.route=/builds/{id}", 401),
        (Method::GET, "/schema?application=hidden-app", None, "http.route=/schema", 404),
        (Method::GET, "/no/such/hidden-route", None, "http.route=-", 404),
        (Method::GET, "/healthz", None, "http.route=/healthz", 200),
    ];
    for (method, uri, bearer, route, status) in cases {
        let before = logs.count(" answered ");
        let (got, body) = h.call(method.clone(), uri, bearer.map(String::as_str), None).await;
        assert_eq!(got.as_u16(), status, "{uri}: {body}");
        let lines: Vec<String> = logs.lines().into_iter().filter(|l| l.contains(" answered ")).skip(before).collect();
        assert_eq!(lines.len(), 1, "{uri}: {lines:?}");
        let line = &lines[0];
        for part in [" INFO ", &format!("http.method={method}"), route, &format!("status={status}"), "latency_ms="] {
            assert!(line.contains(part), "{uri}: {part} missing from {line}");
        }
        assert!(line.contains("slipway_api::access"), "{line}");
        let named = match uri {
            "/deployments/hidden-id-17" => Some("deployment.id=hidden-id-17".to_owned()),
            _ if uri.starts_with("/builds/") => Some(format!("build.id={build}")),
            _ => None,
        };
        match named {
            Some(field) => assert!(line.contains(&field), "{uri}: {field} missing from {line}"),
            None => assert!(!line.contains("hidden"), "{uri}: {line}"),
        }
    }
    let all_lines = logs.lines().join("\n");
    for secret in [token.as_str(), "hidden-query", "hidden-app", "hidden-route"] {
        assert!(!all_lines.contains(secret), "{secret} is in the log:\n{all_lines}");
    }
}

#[tokio::test]
async fn version_names_the_crate_version_and_the_git_revision_it_was_built_from() {
    let h = harness(Engine::Sqlite).await;
    let (status, body) = h.call(Method::GET, "/version", None, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["name"], "slipway");
    assert_eq!(body["version"], env!("CARGO_PKG_VERSION"));
    let head = std::process::Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match head {
        Some(commit) => assert_eq!(body["revision"], commit.as_str(), "built from a git checkout"),
        None => assert_eq!(body["revision"], Value::Null),
    }
}

/// The refusals of `auth::Verifier` reach the client as they are.
#[tokio::test]
async fn a_token_without_exp_says_so_over_http() {
    let h = harness(Engine::Sqlite).await;
    let no_exp = sign(&json!({ "sub": "t", "aud": "slipway", "deployments": ["*"] }));
    let (status, body) = h.call(Method::GET, "/deployments/demo", Some(&no_exp), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_error_shape(&body, "unauthorized");
    assert_eq!(body["message"], "the token has no exp claim");
    let now = time::OffsetDateTime::now_utc().unix_timestamp() as f64;
    let fractional = sign(&json!({ "aud": "slipway", "exp": now + 60.5, "deployments": ["*"] }));
    let (status, body) = h.call(Method::GET, "/deployments/demo", Some(&fractional), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a fractional exp is a valid NumericDate: {body}");
}

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
