//! A stub HTTP server (readiness probes, PRODUCT.md §10).

use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the server does with its n-th request (from 0).
pub type Behaviour = Arc<dyn Fn(usize, &str) -> Reply + Send + Sync>;

/// One reply.
#[derive(Clone)]
pub enum Reply {
    /// Status and headers, with a small body.
    Answer(u16, Vec<(&'static str, String)>),
    /// Accept, read the request, never answer.
    Hang,
}

/// A real HTTP/1.1 server on loopback that answers as its [`Behaviour`]
/// says, and keeps each request's `Host` (for readiness probes).
pub struct StubServer {
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    hosts: Arc<Mutex<Vec<String>>>,
}

impl StubServer {
    /// Starts it; it stops with the test's runtime.
    pub async fn start(behaviour: Behaviour) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hosts = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&hosts);
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else { return };
                let (behaviour, seen) = (Arc::clone(&behaviour), Arc::clone(&seen));
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut got = Vec::new();
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                        let Ok(n) = socket.read(&mut buf).await else { return };
                        if n == 0 {
                            return;
                        }
                        got.extend_from_slice(&buf[..n]);
                    }
                    let text = String::from_utf8_lossy(&got).into_owned();
                    let host = text
                        .lines()
                        .find_map(|l| l.strip_prefix("host: ").or_else(|| l.strip_prefix("Host: ")))
                        .unwrap_or("")
                        .trim()
                        .to_owned();
                    let n = {
                        let mut seen = seen.lock().unwrap();
                        seen.push(host.clone());
                        seen.len() - 1
                    };
                    match behaviour(n, &host) {
                        Reply::Hang => {
                            let _ = socket.read(&mut buf).await;
                        }
                        Reply::Answer(status, headers) => {
                            let mut head = format!("HTTP/1.1 {status} X\r\ncontent-length: 2\r\nconnection: close\r\n");
                            for (k, v) in headers {
                                head.push_str(&format!("{k}: {v}\r\n"));
                            }
                            head.push_str("\r\n{}");
                            let _ = socket.write_all(head.as_bytes()).await;
                        }
                    }
                });
            }
        });
        Self { addr, hosts }
    }

    /// How many requests it got.
    pub fn requests(&self) -> usize {
        self.hosts.lock().unwrap().len()
    }
}

impl StubServer {
    /// The `Host` of each request so far, in order.
    pub fn hosts(&self) -> Vec<String> {
        self.hosts.lock().unwrap().clone()
    }
}
