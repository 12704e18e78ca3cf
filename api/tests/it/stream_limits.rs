//! Event streams cannot exhaust an api, against the real `slipway-api`
//! binary over loopback: one token subject holds at most
//! `SLIPWAY_STREAMS_PER_SUBJECT` streams and the api at most
//! `SLIPWAY_STREAMS_PER_API` (`429 too_many_streams` past either, with
//! `Retry-After`, counted in the metrics); every stream tells its client
//! how long to wait before reconnecting (`retry:`), drawn afresh per
//! stream; and a stream cut because its token expired says so last.

use crate::common;

use common::process::{start_api, ApiProcess};
use common::*;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A token of subject `sub` for every deployment, expiring `exp_offset`
/// seconds from now.
fn token_of(sub: &str, exp_offset: i64) -> String {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    sign(&json!({ "sub": sub, "aud": "slipway", "exp": now + exp_offset, "deployments": ["*"] }))
}

/// Submits `demo` with the built-in source (no worker needed to accept it).
async fn submit_demo(api: &ApiProcess) {
    let body = json!({ "configuration": demo() }).to_string();
    let mut stream = TcpStream::connect(&api.addr).await.unwrap();
    let request = format!(
        "PUT /deployments/demo HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        all(),
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 202"), "the submit was not accepted: {answer}");
}

/// An event stream opened over its own connection (HTTP/1.0, so that the
/// body is the bytes up to the close, without chunk framing).
struct Stream {
    connection: TcpStream,
    /// What was read so far: the head, then the body.
    text: String,
}

impl Stream {
    /// Opens `GET path` with `token`: once the head has come.
    async fn open(api: &ApiProcess, path: &str, token: &str) -> Stream {
        let mut connection = TcpStream::connect(&api.addr).await.unwrap();
        let request =
            format!("GET {path} HTTP/1.0\r\nHost: localhost\r\nAccept: text/event-stream\r\nAuthorization: Bearer {token}\r\n\r\n");
        connection.write_all(request.as_bytes()).await.unwrap();
        let mut stream = Stream { connection, text: String::new() };
        stream.read_until(|t| t.contains("\r\n\r\n"), Duration::from_secs(30)).await;
        stream
    }

    /// The answer's status.
    fn status(&self) -> u16 {
        self.text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
    }

    /// The answer's body so far.
    fn body(&self) -> &str {
        self.text.split_once("\r\n\r\n").map_or("", |(_, body)| body)
    }

    /// Reads until `done` holds of what was read, or the server closes
    /// (`false` then); panics past `deadline`.
    async fn read_until(&mut self, done: impl Fn(&str) -> bool, deadline: Duration) -> bool {
        let read = async {
            let mut buffer = [0u8; 4096];
            while !done(&self.text) {
                let n = self.connection.read(&mut buffer).await.unwrap_or(0);
                if n == 0 {
                    return false;
                }
                self.text.push_str(&String::from_utf8_lossy(&buffer[..n]));
            }
            true
        };
        tokio::time::timeout(deadline, read).await.unwrap_or_else(|_| panic!("nothing more within {deadline:?}"))
    }

    /// The JSON body of a refusal (read to the close).
    async fn refusal(mut self) -> Value {
        self.read_until(|_| false, Duration::from_secs(30)).await;
        serde_json::from_str(self.body()).unwrap_or_else(|_| panic!("not a JSON refusal: {}", self.text))
    }
}

/// The value of the metric line starting with `series` in the api's scrape.
#[tokio::test]
async fn a_subject_past_its_cap_and_an_api_past_its_own_are_refused_429_and_a_closed_stream_frees_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let api =
        start_api(dir.path(), None, &[("SLIPWAY_STREAMS_PER_SUBJECT", "3"), ("SLIPWAY_STREAMS_PER_API", "5")]).await;
    submit_demo(&api).await;
    let (alice, bob) = (token_of("alice", 3600), token_of("bob", 3600));
    let mut open = Vec::new();
    for _ in 0..3 {
        let stream = Stream::open(&api, "/deployments/demo/events", &alice).await;
        assert_eq!(stream.status(), 200, "{}", stream.text);
        open.push(stream);
    }
    let refused = Stream::open(&api, "/deployments/demo/events", &alice).await;
    assert_eq!(refused.status(), 429, "{}", refused.text);
    assert!(refused.text.to_ascii_lowercase().contains("\r\nretry-after: 10\r\n"), "{}", refused.text);
    let body = refused.refusal().await;
    assert_error_shape(&body, "too_many_streams");
    assert_eq!(body["details"], json!({ "limit": "subject", "open": 3, "max": 3 }));
    assert!(body["message"].as_str().unwrap().contains("SLIPWAY_STREAMS_PER_SUBJECT"), "{body}");

    // Another subject is not held to alice's count, only to the api's.
    for _ in 0..2 {
        let stream = Stream::open(&api, "/deployments/demo/events", &bob).await;
        assert_eq!(stream.status(), 200, "{}", stream.text);
        open.push(stream);
    }
    let refused = Stream::open(&api, "/deployments/demo/events", &bob).await;
    assert_eq!(refused.status(), 429, "{}", refused.text);
    assert_eq!(refused.refusal().await["details"], json!({ "limit": "api", "open": 5, "max": 5 }));
    assert_eq!(api.metric("slipway_streams_open{kind=\"deployment_events\"}").await, 5.0);
    assert_eq!(api.metric("slipway_streams_busiest_subject").await, 3.0);
    assert_eq!(api.metric("slipway_streams_refused_total{limit=\"subject\"}").await, 1.0);
    assert_eq!(api.metric("slipway_streams_refused_total{limit=\"api\"}").await, 1.0);

    // Alice closes one of hers: once the api has seen the connection go,
    // she may open one again, and nobody gets a sixth.
    drop(open.remove(0));
    let reopened = tokio::time::timeout(Duration::from_secs(60), async {
        let mut every = tokio::time::interval(Duration::from_millis(100));
        loop {
            every.tick().await;
            let stream = Stream::open(&api, "/deployments/demo/events", &alice).await;
            if stream.status() == 200 {
                return stream;
            }
            assert_eq!(stream.status(), 429, "{}", stream.text);
        }
    })
    .await
    .expect("a closed stream's place was never given back");
    open.push(reopened);
    let refused = Stream::open(&api, "/deployments/demo/events", &bob).await;
    assert_eq!(refused.status(), 429, "{}", refused.text);
}

#[tokio::test]
async fn every_stream_asks_for_a_reconnection_wait_of_its_own_between_one_and_five_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let api = start_api(dir.path(), None, &[]).await;
    submit_demo(&api).await;
    let mut waits = Vec::new();
    for _ in 0..12 {
        let mut stream = Stream::open(&api, "/deployments/demo/events", &all()).await;
        assert_eq!(stream.status(), 200, "{}", stream.text);
        stream.read_until(|t| t.contains("event: state"), Duration::from_secs(30)).await;
        let body = stream.body().to_owned();
        assert!(body.starts_with("retry:"), "the stream does not open with retry: {body}");
        let wait: u64 = body.lines().find_map(|l| l.strip_prefix("retry:")?.trim().parse().ok()).unwrap();
        assert!((1000..5000).contains(&wait), "retry: {wait}");
        waits.push(wait);
    }
    waits.sort_unstable();
    waits.dedup();
    assert!(waits.len() > 1, "every stream asked for the same wait: {waits:?}");
}

#[tokio::test]
async fn a_stream_whose_token_expires_ends_with_a_token_expired_event() {
    let dir = tempfile::tempdir().unwrap();
    let api = start_api(dir.path(), None, &[]).await;
    submit_demo(&api).await;
    let mut stream = Stream::open(&api, "/deployments/demo/events", &token_of("short", 3)).await;
    assert_eq!(stream.status(), 200, "{}", stream.text);
    // The build is queued with no worker: the stream stays open until the
    // token expires, then says so and closes.
    let closed = !stream.read_until(|_| false, Duration::from_secs(60)).await;
    assert!(closed);
    let body = stream.body();
    let last = body.trim_end().rsplit("\n\n").next().unwrap();
    assert!(last.starts_with("event: token_expired\n"), "the last event: {last}");
    assert!(!last.contains("\nid:"), "it carries an id: {last}");
    let data: Value = serde_json::from_str(last.split_once("data: ").unwrap().1).unwrap();
    assert!(data["message"].as_str().unwrap().contains("fresh token"), "{data}");
    assert!(data["expired_at"].as_str().unwrap().ends_with('Z'), "{data}");
    assert!(body.contains("event: state"), "{body}");
}
