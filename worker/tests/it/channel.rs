//! The browser-orchestrated delete end to end (DL-1, DL-2, DL-3): the real
//! api and worker processes, a real callback receiver on loopback, the
//! deployment channel and the build log as server-sent events read over
//! real HTTP, on both engines and across api replicas.

use crate::common;

use common::{binary, command, demo, free_port, slow_source, slow_worker, start, wait_for, Api};
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::TestDatabase;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// One server-sent event.
#[derive(Debug, Clone, PartialEq)]
struct Sse {
    id: Option<String>,
    event: String,
    data: Value,
}

/// An open event stream: its status, and the events as they come.
struct Stream {
    status: u16,
    response: Option<reqwest::Response>,
    buffer: String,
    /// Comment lines (keep-alives) read so far.
    comments: usize,
}

impl Stream {
    /// Opens `path` with the api's token (in the header, or as
    /// `access_token` when `in_query`), resuming after `last` when given.
    async fn open(api: &Api, path: &str, last: Option<&str>, in_query: bool) -> Stream {
        let url = if in_query {
            format!("{}{path}?access_token={}", api.base, api.token)
        } else {
            format!("{}{path}", api.base)
        };
        let mut request = api.http.get(url).header("accept", "text/event-stream");
        if !in_query {
            request = request.bearer_auth(&api.token);
        }
        if let Some(last) = last {
            request = request.header("last-event-id", last);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        if status == 200 {
            let ctype = response.headers()["content-type"].to_str().unwrap().to_owned();
            assert!(ctype.starts_with("text/event-stream"), "{ctype}");
        }
        Stream { status, response: Some(response), buffer: String::new(), comments: 0 }
    }

    /// The next event (keep-alive comments skipped); `None` when the server
    /// closed the stream. Panics past `deadline`.
    async fn next(&mut self, deadline: Duration) -> Option<Sse> {
        tokio::time::timeout(deadline, self.next_event()).await.expect("the next event came in time")
    }

    async fn next_event(&mut self) -> Option<Sse> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut id, mut event, mut data) = (None, "message".to_owned(), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() {
                    self.comments += block.lines().filter(|l| l.starts_with(':')).count();
                    continue; // a comment: keep-alive
                }
                return Some(Sse { id, event, data: serde_json::from_str(&data).expect("event data is JSON") });
            }
            let chunk = self.response.as_mut()?.chunk().await.expect("the stream reads");
            match chunk {
                Some(bytes) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                None => {
                    self.response = None;
                    return None;
                }
            }
        }
    }

    /// Every event until the server closes the stream.
    async fn rest(&mut self, deadline: Duration) -> Vec<Sse> {
        let mut out = Vec::new();
        while let Some(e) = self.next(deadline).await {
            out.push(e);
        }
        out
    }
}

/// A request the callback receiver got: its head and body.
#[derive(Debug)]
struct Received {
    head: String,
    body: Value,
}

/// A callback receiver on 127.0.0.1: answers every request `204` and
/// hands it to the test. Returns its origin and the requests.
async fn receiver() -> (String, mpsc::UnboundedReceiver<Received>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut bytes = Vec::new();
                let mut buf = [0u8; 4096];
                let (head, body) = loop {
                    let n = socket.read(&mut buf).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    bytes.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&bytes).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let head = text[..end].to_owned();
                        let length = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned())
                            })
                            .and_then(|v| v.parse::<usize>().ok())
                            .unwrap_or(0);
                        if bytes.len() >= end + 4 + length {
                            break (head, bytes[end + 4..end + 4 + length].to_vec());
                        }
                    }
                };
                let _ = socket
                    .write_all(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .await;
                let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let _ = tx.send(Received { head, body });
            });
        }
    });
    (origin, rx)
}

/// The api and a worker on `db`, allowing callbacks to `origin` on loopback.
fn fleet(db: &TestDatabase, origin: &str) -> (common::Running, common::Running, u16) {
    let port = free_port();
    let mut api = command(&binary("slipway-api"), db, port);
    api.env("SLIPWAY_ALLOWED_ORIGINS", origin).env("SLIPWAY_CALLBACK_ALLOW_PRIVATE", "true");
    let api = start(api, db, "api.log");
    let mut worker = command(&binary("slipway-worker"), db, port);
    worker.arg("work").env("SLIPWAY_ALLOWED_ORIGINS", origin).env("SLIPWAY_CALLBACK_ALLOW_PRIVATE", "true");
    let worker = start(worker, db, "worker.log");
    (api, worker, port)
}

fn ids(events: &[Sse]) -> Vec<i64> {
    events.iter().map(|e| e.id.as_deref().unwrap().parse().unwrap()).collect()
}

fn states(events: &[Sse]) -> Vec<String> {
    events.iter().map(|e| e.data["state"].as_str().unwrap().to_owned()).collect()
}

const LONG: Duration = Duration::from_secs(120);

async fn a_delete_with_a_callback_is_followed_to_idle_on_the_channel_and_pushed_once(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let (origin, mut received) = receiver().await;
    let (_api, _worker, port) = fleet(&db, &origin);
    let api = Api::connect(&db, port).await;

    let (status, submitted) = api.submit("demo", &demo()).await.unwrap();
    assert_eq!(status, 202, "{submitted}");
    // The channel starts with the current state and ends after a terminal one.
    let mut deploy = Stream::open(&api, "/deployments/demo/events", None, false).await;
    assert_eq!(deploy.status, 200);
    let followed = deploy.rest(LONG).await;
    assert_eq!(followed.last().unwrap().data["state"], "active", "{followed:?}");
    assert_eq!(followed.last().unwrap().data["build_id"], submitted["build_id"]);
    let active_id = followed.last().unwrap().id.clone().unwrap();

    let token = "reconcile-token-for-demo-only";
    let (status, deleted) = api
        .call(
            reqwest::Method::DELETE,
            "/deployments/demo",
            Some(&json!({ "callback_url": format!("{origin}/reconcile?deployment=demo"), "callback_token": token })),
        )
        .await
        .unwrap();
    assert_eq!(status, 202, "{deleted}");
    assert_eq!(deleted["callback"], json!({ "accepted": true, "reason": null }));
    let destroy = deleted["build_id"].as_str().unwrap().to_owned();

    // A tab that opens the channel now sees the destroy through to idle.
    let mut channel = Stream::open(&api, "/deployments/demo/events", None, true).await;
    assert_eq!(channel.status, 200);
    let seen = channel.rest(LONG).await;
    assert_eq!(seen.last().unwrap().data["state"], "idle", "{seen:?}");
    assert_eq!(seen.last().unwrap().data["build_id"], destroy.as_str());

    // The push: once, with the token as a bearer header, naming the deployment.
    let push = tokio::time::timeout(LONG, received.recv()).await.expect("the push came").unwrap();
    assert!(push.head.starts_with("POST /reconcile?deployment=demo HTTP/1.1"), "{}", push.head);
    assert!(
        push.head.lines().any(|l| l.eq_ignore_ascii_case(&format!("authorization: Bearer {token}"))),
        "{}",
        push.head
    );
    assert_eq!(push.body, json!({ "deployment_id": "demo", "state": "idle", "build_id": destroy }));
    let build = wait_for("the push's outcome", LONG, || async {
        let (_, _, b) = api.get(&format!("/builds/{destroy}")).await;
        (b["callback"]["state"] == "delivered").then_some(b)
    })
    .await;
    assert_eq!(build["callback"]["status"], 204, "{build}");
    assert!(!build.to_string().contains(token), "the build shows the token: {build}");
    assert!(received.try_recv().is_err(), "a second push came");

    // A reconnect after the active event gets what it missed, each once, in order.
    let mut resumed = Stream::open(&api, "/deployments/demo/events", Some(&active_id), false).await;
    let missed = resumed.rest(LONG).await;
    assert_eq!(states(&missed), ["destroying", "idle"], "{missed:?}");
    let numbers = ids(&missed);
    assert!(numbers[0] > active_id.parse::<i64>().unwrap() && numbers[0] < numbers[1], "{numbers:?}");
    // After the terminal event there is nothing to follow: 204 stops an EventSource.
    let last = missed.last().unwrap().id.clone().unwrap();
    let done = Stream::open(&api, "/deployments/demo/events", Some(&last), false).await;
    assert_eq!(done.status, 204);
}

slipway_jobs::on_both_engines!(a_delete_with_a_callback_is_followed_to_idle_on_the_channel_and_pushed_once);

async fn a_refused_callback_never_blocks_the_delete_and_nothing_is_pushed(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let (origin, mut received) = receiver().await;
    let (_api, _worker, port) = fleet(&db, "https://panel.example.org");
    let api = Api::connect(&db, port).await;
    let (status, _) = api.submit("demo", &demo()).await.unwrap();
    assert_eq!(status, 202);
    api.wait_state("demo", "active", LONG).await;

    let body = json!({ "callback_url": format!("{origin}/reconcile"), "callback_token": "never-sent" });
    let (status, deleted) = api.call(reqwest::Method::DELETE, "/deployments/demo", Some(&body)).await.unwrap();
    assert_eq!(status, 202, "{deleted}");
    assert_eq!(deleted["callback"]["accepted"], false);
    let reason = deleted["callback"]["reason"].as_str().unwrap();
    assert!(reason.contains("not in SLIPWAY_ALLOWED_ORIGINS"), "{reason}");
    api.wait_state("demo", "idle", LONG).await;
    let (_, _, build) = api.get(&format!("/builds/{}", deleted["build_id"].as_str().unwrap())).await;
    assert_eq!(build["callback"], Value::Null, "{build}");
    assert!(received.try_recv().is_err(), "a refused callback was pushed");
}

slipway_jobs::on_both_engines!(a_refused_callback_never_blocks_the_delete_and_nothing_is_pushed);

async fn the_channel_on_one_api_follows_changes_made_through_another(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let (_a, _worker, port_a) = fleet(&db, "https://panel.example.org");
    let port_b = free_port();
    let _b = start(command(&binary("slipway-api"), &db, port_b), &db, "api-b.log");
    let (a, b) = (Api::connect(&db, port_a).await, Api::connect(&db, port_b).await);

    let (status, first) = a.submit("demo", &demo()).await.unwrap();
    assert_eq!(status, 202);
    let build = first["build_id"].as_str().unwrap();
    // Opened on replica B while the build runs: the worker's change must
    // wake B's stream (the stream's own re-read comes only every minute).
    let mut channel = Stream::open(&b, "/deployments/demo/events", None, false).await;
    let mut seen = Vec::new();
    while let Some(e) = channel.next(LONG).await {
        seen.push((e, common::now_ms()));
    }
    let (active, arrived) = seen.last().unwrap();
    assert_eq!(active.data["state"], "active", "{seen:?}");
    assert_eq!(active.data["build_id"], build);
    let (_, _, finished) = a.get(&format!("/builds/{build}")).await;
    let lag = arrived - common::ms_of(&finished["finished_at"]);
    eprintln!("{engine:?}: the active event reached replica B {lag} ms after the build ended");
    assert!(lag < 5_000, "the active event came {lag} ms after the build ended: B was not woken");
    let events: Vec<Sse> = seen.into_iter().map(|(e, _)| e).collect();
    let numbers = ids(&events);
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");

    // A delete through replica A, followed on replica B.
    let (status, _) = a.delete("demo").await;
    assert_eq!(status, 202);
    let mut follow = Stream::open(&b, "/deployments/demo/events", None, false).await;
    let rest = follow.rest(LONG).await;
    assert_eq!(rest.last().unwrap().data["state"], "idle", "{rest:?}");
    assert!(ids(&rest)[0] > *numbers.last().unwrap(), "event ids went back: {rest:?}");
}

slipway_jobs::on_both_engines!(the_channel_on_one_api_follows_changes_made_through_another);

async fn a_build_log_streams_while_it_runs_and_resumes_after_the_last_chunk_seen(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let source = db.path("slow-source");
    slow_source(&source, 3);
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let _worker = start(slow_worker(&db, port, &source), &db, "worker.log");
    let api = Api::connect(&db, port).await;

    let (status, submitted) = api.submit("demo", &demo()).await.unwrap();
    assert_eq!(status, 202, "{submitted}");
    let build = submitted["build_id"].as_str().unwrap().to_owned();
    let path = format!("/builds/{build}/log");
    let mut stream = Stream::open(&api, &path, None, true).await;
    assert_eq!(stream.status, 200);
    let events = stream.rest(LONG).await;
    let (end, chunks) = events.split_last().unwrap();
    assert_eq!(end.event, "end", "{events:?}");
    assert_eq!(end.data, json!({ "build_id": build, "status": "succeeded" }));
    assert!(chunks.iter().all(|c| c.event == "log"), "{chunks:?}");
    let text: String = chunks.iter().map(|c| c.data["text"].as_str().unwrap()).collect();
    let (_, _, read) = api.get(&format!("/builds/{build}")).await;
    assert_eq!(text, read["log"].as_str().unwrap(), "the stream and the read disagree");
    assert!(text.contains("deploying"), "{text}");

    // Resuming after the first chunk sends the rest, none twice.
    let first = chunks[0].id.clone().unwrap();
    let mut resumed = Stream::open(&api, &path, Some(&first), false).await;
    let again = resumed.rest(LONG).await;
    assert_eq!(again.as_slice(), &events[1..], "a resumed log differs from the rest of the first");
    // After the end: 204.
    let done = Stream::open(&api, &path, end.id.as_deref(), false).await;
    assert_eq!(done.status, 204);
}

slipway_jobs::on_both_engines!(a_build_log_streams_while_it_runs_and_resumes_after_the_last_chunk_seen);

async fn a_stream_without_a_valid_token_or_with_a_bad_last_event_id_is_refused_in_json(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let api = Api::connect(&db, port).await;
    let none: Option<&str> = None;
    for (path, header) in [
        ("/deployments/demo/events?access_token=not.a.token", none),
        ("/deployments/demo/events", none),
        ("/deployments/demo/events", Some("Bearer not.a.token")),
        ("/builds/demo.20260101T000000Z.aaaaaa/log?access_token=", none),
    ] {
        let mut request = api.http.get(format!("{}{path}", api.base));
        if let Some(h) = header {
            request = request.header("authorization", h);
        }
        let r = request.send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401, "{path}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "unauthorized", "{path}: {body}");
        assert!(!body.to_string().contains("not.a.token"), "{body}");
    }
    let r = api
        .http
        .get(format!("{}/deployments/demo/events", api.base))
        .bearer_auth(&api.token)
        .header("last-event-id", "seven")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "invalid_request");
    let unknown = Stream::open(&api, "/deployments/nothing-here/events", None, false).await;
    assert_eq!(unknown.status, 404);
}

slipway_jobs::on_both_engines!(a_stream_without_a_valid_token_or_with_a_bad_last_event_id_is_refused_in_json);

async fn a_quiet_channel_sends_keep_alive_comments_while_a_long_build_runs(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let source = db.path("slow-source");
    // Longer than the api's keep-alive interval (15 s).
    slow_source(&source, 17);
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let _worker = start(slow_worker(&db, port, &source), &db, "worker.log");
    let api = Api::connect(&db, port).await;
    let (status, _) = api.submit("demo", &demo()).await.unwrap();
    assert_eq!(status, 202);
    let mut channel = Stream::open(&api, "/deployments/demo/events", None, false).await;
    let first = channel.next(LONG).await.unwrap();
    assert_eq!(first.data["state"], "building");
    let active = channel.next(LONG).await.unwrap();
    assert_eq!(active.data["state"], "active");
    assert!(channel.comments >= 1, "no keep-alive comment in a 17 s quiet stretch");
}

#[tokio::test]
async fn a_quiet_channel_sends_keep_alive_comments_while_a_long_build_runs_sqlite() {
    a_quiet_channel_sends_keep_alive_comments_while_a_long_build_runs(Engine::Sqlite).await
}

async fn an_api_stopping_ends_its_open_streams_instead_of_waiting_for_them(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let port = free_port();
    let mut api_process = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let api = Api::connect(&db, port).await;
    // No worker: the deploy stays queued and the channel stays open.
    let (status, submitted) = api.submit("demo", &demo()).await.unwrap();
    assert_eq!(status, 202, "{submitted}");
    let mut channel = Stream::open(&api, "/deployments/demo/events", None, false).await;
    assert_eq!(channel.next(LONG).await.unwrap().data["state"], "building");
    let mut log =
        Stream::open(&api, &format!("/builds/{}/log", submitted["build_id"].as_str().unwrap()), None, false).await;
    assert_eq!(log.status, 200);

    common::signal(api_process.0.id(), libc::SIGTERM);
    assert_eq!(channel.next(LONG).await, None, "the channel outlived the api's shutdown");
    assert_eq!(log.next(LONG).await, None, "the log stream outlived the api's shutdown");
    let exited = common::poll(LONG, || {
        let status = api_process.0.try_wait().unwrap();
        async move { status }
    })
    .await;
    assert!(exited.is_some_and(|s| s.success()), "the api did not stop cleanly: {exited:?}");
}

slipway_jobs::on_both_engines!(an_api_stopping_ends_its_open_streams_instead_of_waiting_for_them);

async fn a_last_event_id_the_deployment_never_reached_starts_over_from_the_current_state(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let api = Api::connect(&db, port).await;
    // No worker: the deploy stays queued, the deployment `building` (event 1).
    let (status, _) = api.submit("demo", &demo()).await.unwrap();
    assert_eq!(status, 202);
    let mut channel = Stream::open(&api, "/deployments/demo/events", Some("50"), false).await;
    assert_eq!(channel.status, 200);
    let first = channel.next(Duration::from_secs(10)).await.expect("the current state");
    assert_eq!((first.id.as_deref(), &first.data["state"]), (Some("1"), &json!("building")));
}

slipway_jobs::on_both_engines!(a_last_event_id_the_deployment_never_reached_starts_over_from_the_current_state);

async fn a_stream_ends_when_the_token_it_was_opened_with_expires(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let api = Api::connect(&db, port).await;
    let (status, submitted) = api.submit("demo", &demo()).await.unwrap();
    assert_eq!(status, 202);
    let out = command(&binary("slipway-api"), &db, port)
        .args(["token", "--deployments", "demo", "--ttl", "3s"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let short = Api { token: String::from_utf8(out.stdout).unwrap().trim().to_owned(), ..api.clone() };
    let build = submitted["build_id"].as_str().unwrap();
    // Both opened while the token is valid.
    let mut streams = Vec::new();
    for path in ["/deployments/demo/events".to_owned(), format!("/builds/{build}/log")] {
        let stream = Stream::open(&short, &path, None, true).await;
        assert_eq!(stream.status, 200, "{path}");
        streams.push((path, stream));
    }
    for (path, mut stream) in streams {
        // The deploy never runs (no worker): only the token's end can close these.
        let rest = stream.rest(Duration::from_secs(30)).await;
        assert!(rest.iter().all(|e| e.event != "end" && e.data["state"] != "active"), "{path}: {rest:?}");
    }
}

slipway_jobs::on_both_engines!(a_stream_ends_when_the_token_it_was_opened_with_expires);
