//! A front-end's origin for the tests that need one (`browser.rs`,
//! `leaks.rs`): a small HTTP/1.1 server on 127.0.0.1 that serves the files
//! of a folder (`GET /<name>`) and takes reconcile pushes (`POST
//! /reconcile`, answered `204`), recording every request it got. One
//! request per connection (`Connection: close`); enough for a browser and
//! for the worker's push.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as the origin read it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// The request target, query included.
    pub path: String,
    /// Header names lower-cased, in the order they came.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// The first header named `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON (null when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// The origin; stops serving when dropped.
pub struct Origin {
    /// `http://127.0.0.1:<port>`: the value for `SLIPWAY_ALLOWED_ORIGINS`.
    pub base: String,
    requests: Arc<Mutex<Vec<Request>>>,
    task: tokio::task::JoinHandle<()>,
}

/// The path that takes reconcile pushes.
pub const RECONCILE: &str = "/reconcile";

impl Origin {
    /// Serves the files of `files` (none with `None`) on a free port of 127.0.0.1.
    pub async fn start(files: Option<PathBuf>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let (files, seen) = (files.clone(), seen.clone());
                tokio::spawn(async move {
                    // A connection that says nothing for 30 s is dropped.
                    let _ = tokio::time::timeout(Duration::from_secs(30), serve(stream, files, seen)).await;
                });
            }
        });
        Self { base, requests, task }
    }

    /// `<base>/reconcile`.
    pub fn reconcile_url(&self) -> String {
        format!("{}{RECONCILE}", self.base)
    }

    /// Every request so far, in the order they were read whole.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// The reconcile pushes so far (`POST /reconcile`).
    pub fn pushes(&self) -> Vec<Request> {
        self.requests().into_iter().filter(|r| r.method == "POST" && r.path == RECONCILE).collect()
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one request from `stream`, records it, answers it and closes.
async fn serve(mut stream: TcpStream, files: Option<PathBuf>, seen: Arc<Mutex<Vec<Request>>>) {
    let Some(request) = read_request(&mut stream).await else { return };
    seen.lock().unwrap().push(request.clone());
    let (status, ctype, body): (&str, &str, Vec<u8>) = match (request.method.as_str(), request.path.as_str()) {
        ("POST", RECONCILE) => ("204 No Content", "text/plain", Vec::new()),
        ("GET", path) => {
            let name = path.split(['?', '#']).next().unwrap_or("").trim_start_matches('/');
            let file = files
                .as_ref()
                .filter(|_| !name.is_empty() && !name.contains('/') && !name.starts_with('.'))
                .and_then(|dir| std::fs::read(dir.join(name)).ok());
            match file {
                Some(bytes) => ("200 OK", content_type(name), bytes),
                None => ("404 Not Found", "text/plain", b"not found".to_vec()),
            }
        }
        _ => ("404 Not Found", "text/plain", b"not found".to_vec()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(&body).await;
    let _ = stream.shutdown().await;
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

/// One HTTP/1.1 request: its head, then a `content-length` or chunked body.
async fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > 64 * 1024 || !read_more(stream, &mut buf).await {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut rest = buf[end + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_owned(), first.next()?.to_owned());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let header = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    let body = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(i) = rest.windows(2).position(|w| w == b"\r\n") {
                    break i;
                }
                if !read_more(stream, &mut rest).await {
                    return None;
                }
            };
            let size = usize::from_str_radix(
                String::from_utf8_lossy(&rest[..line_end]).split(';').next().unwrap_or("").trim(),
                16,
            )
            .ok()?;
            rest.drain(..line_end + 2);
            while rest.len() < size + 2 {
                if !read_more(stream, &mut rest).await {
                    return None;
                }
            }
            body.extend_from_slice(&rest[..size]);
            rest.drain(..size + 2);
            if size == 0 {
                break body;
            }
        }
    } else {
        let length: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        while rest.len() < length {
            if !read_more(stream, &mut rest).await {
                return None;
            }
        }
        rest.truncate(length);
        rest
    };
    Some(Request { method, path, headers, body })
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 8192];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}
