//! Slow clients and shutdown, against the real `slipway-api` binary over
//! loopback: a body has a total deadline (`SLIPWAY_BODY_TIMEOUT`), and a
//! `SIGTERM` drains for at most `SLIPWAY_SHUTDOWN_GRACE` whatever the
//! clients do, a second signal ending the drain at once.

use crate::common;

use common::process::{start_api, ApiProcess};
use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// How long past its grace the api may take to exit: the runtime's own
/// shutdown (1 s at most) and a loaded machine.
const MARGIN: Duration = Duration::from_secs(3);

/// The head of a submit announcing a 1000-byte JSON body, with a valid token.
fn slow_submit_head(id: &str) -> String {
    format!(
        "PUT /deployments/{id} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{",
        all()
    )
}

/// A connection sending `head`, then one more body byte a second until the
/// server closes it; what the server answered, once it has.
fn trickle(addr: &str, head: String) -> JoinHandle<Vec<u8>> {
    let addr = addr.to_owned();
    tokio::spawn(async move {
        let stream = TcpStream::connect(&addr).await.unwrap();
        let (mut read, mut write) = stream.into_split();
        write.write_all(head.as_bytes()).await.unwrap();
        let writer = tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            every.tick().await;
            loop {
                every.tick().await;
                if write.write_all(b" ").await.is_err() {
                    break;
                }
            }
        });
        let mut answer = Vec::new();
        let _ = read.read_to_end(&mut answer).await;
        writer.abort();
        answer
    })
}

/// A connection that sends `head` and nothing more, kept open.
async fn stuck(addr: &str, head: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// 50 connections stuck in their head and 50 trickling a body; returns once
/// the api has accepted them all (it answered a request on a connection
/// opened after them: it accepts in order).
async fn hundred_slow_clients(api: &ApiProcess) -> (Vec<TcpStream>, Vec<JoinHandle<Vec<u8>>>) {
    let mut heads = Vec::new();
    let mut bodies = Vec::new();
    for i in 0..50 {
        heads.push(stuck(&api.addr, "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ").await);
        bodies.push(trickle(&api.addr, slow_submit_head(&format!("slow-{i}"))));
    }
    assert_eq!(api.status_of("GET /healthz HTTP/1.1\r\n").await, 200);
    (heads, bodies)
}

#[tokio::test]
async fn sigterm_with_a_hundred_connections_stuck_in_their_head_or_a_slow_body_exits_within_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let grace = Duration::from_secs(2);
    let mut api = start_api(dir.path(), None, &[("SLIPWAY_SHUTDOWN_GRACE", "2s")]).await;
    let (_heads, _bodies) = hundred_slow_clients(&api).await;
    let skip = api.log().len();
    let asked = Instant::now();
    api.signal(libc::SIGTERM);
    api.wait_log(skip, &["stopped accepting"], grace).await;
    assert!(TcpStream::connect(&api.addr).await.is_err(), "the api still accepts after SIGTERM");
    let status = api.exited_within(grace + MARGIN).await;
    let took = asked.elapsed();
    assert!(status.is_some(), "the api still runs {took:?} after SIGTERM with a grace of {grace:?}: {:#?}", api.log());
    eprintln!("exited {took:?} after SIGTERM (grace {grace:?})");
    assert!(took >= grace, "the api exited after {took:?}, before its grace ended, with requests in flight");
    assert!(status.unwrap().success(), "{status:?}");
    let log = api.log().join("\n");
    assert!(log.contains("shutdown grace over"), "{log}");
    assert!(log.contains("stopped with connections still open"), "{log}");
}

#[tokio::test]
async fn a_second_sigterm_ends_the_drain_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut api = start_api(dir.path(), None, &[("SLIPWAY_SHUTDOWN_GRACE", "5m")]).await;
    let (_heads, _bodies) = hundred_slow_clients(&api).await;
    let skip = api.log().len();
    api.signal(libc::SIGTERM);
    api.wait_log(skip, &["shutting down"], Duration::from_secs(10)).await;
    let asked = Instant::now();
    api.signal(libc::SIGTERM);
    let status = api.exited_within(MARGIN).await;
    assert!(status.is_some(), "the api still runs {:?} after a second SIGTERM: {:#?}", asked.elapsed(), api.log());
    eprintln!("exited {:?} after the second SIGTERM", asked.elapsed());
    assert!(api.log().join("\n").contains("second signal"), "{:#?}", api.log());
}

#[tokio::test]
async fn a_body_sent_one_byte_a_second_gets_408_once_the_body_deadline_passes() {
    let dir = tempfile::tempdir().unwrap();
    let deadline = Duration::from_secs(3);
    // Each pause (1 s) is well inside the read timeout: only the total deadline can end it.
    let api = start_api(dir.path(), None, &[("SLIPWAY_BODY_TIMEOUT", "3s"), ("SLIPWAY_REQUEST_TIMEOUT", "30s")]).await;
    let started = Instant::now();
    let answer = tokio::time::timeout(deadline * 4, trickle(&api.addr, slow_submit_head("trickled")))
        .await
        .expect("an answer within four times the body deadline")
        .unwrap();
    let took = started.elapsed();
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no HTTP answer: {answer:?}"));
    assert!(head.starts_with("HTTP/1.1 408 "), "{head}");
    assert!(head.to_ascii_lowercase().contains("\r\nconnection: close"), "{head}");
    let body: Value = serde_json::from_str(body).unwrap();
    assert_error_shape(&body, "request_timeout");
    assert_eq!(body["details"]["limit_seconds"], 3, "{body}");
    eprintln!("408 after {took:?} (deadline {deadline:?})");
    assert!(took >= deadline, "answered after {took:?}, before the deadline");
    // Nothing was stored: the deployment is unknown.
    let status =
        api.status_of(&format!("GET /deployments/trickled HTTP/1.1\r\nAuthorization: Bearer {}\r\n", all())).await;
    assert_eq!(status, 404);
}
