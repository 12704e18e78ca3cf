//! The real `slipway-api` binary over loopback: started with only the
//! environment a test gives it, its log kept line by line, killed when the
//! test drops it.

use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// A `slipway-api serve` process on a loopback port of its choosing.
pub struct ApiProcess {
    child: tokio::process::Child,
    /// Where it serves: `127.0.0.1:<port>`.
    pub addr: String,
    /// Every line it logged so far.
    log: watch::Receiver<Vec<String>>,
}

/// The command of the api binary with `env` only, plus a database and a
/// state folder in `dir`, the harness's [`super::SECRET`] (an empty value
/// in `env` unsets it, as for every setting), `127.0.0.1:0` as its address
/// and `info` logs; `file` becomes its `SLIPWAY_CONFIG` when given.
pub fn api_command(dir: &Path, file: Option<&str>, env: &[(&str, &str)]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_slipway-api"));
    command
        .env_clear()
        .env("DATABASE_URL", format!("sqlite://{}", dir.join("slipway.db").display()))
        .env("SLIPWAY_STATE_DIR", dir.join("state"))
        .env("SLIPWAY_JWT_SECRET", super::SECRET)
        .env("SLIPWAY_BIND", "127.0.0.1:0")
        .env("SLIPWAY_LOG", "info")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    if let Some(text) = file {
        let path = dir.join("slipway.toml");
        std::fs::write(&path, text).unwrap();
        command.env("SLIPWAY_CONFIG", path);
    }
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

/// Starts the api as [`api_command`] says; returns once it says where it
/// serves (within 120 s), or panics with what it logged.
pub async fn start_api(dir: &Path, file: Option<&str>, env: &[(&str, &str)]) -> ApiProcess {
    start_api_until(dir, file, env, "serving address=").await
}

/// Starts the api as [`api_command`] says; returns once it logs `marker`
/// followed by its address (`serving address=`, or `listening address=`
/// while its database is not ready yet), within 120 s.
pub async fn start_api_until(dir: &Path, file: Option<&str>, env: &[(&str, &str)], marker: &str) -> ApiProcess {
    start_command_until(api_command(dir, file, env), marker).await
}

/// Starts `command` (made by [`api_command`], then changed by the test);
/// returns once it logs `marker` followed by its address, within 120 s.
pub async fn start_command_until(mut command: tokio::process::Command, marker: &str) -> ApiProcess {
    command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
    let mut child = command.spawn().expect("slipway-api starts");
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let (sender, log) = watch::channel(Vec::new());
    // Keep reading its log so it never blocks on a full pipe.
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            sender.send_modify(|log| log.push(line));
        }
    });
    let mut seen = log.clone();
    let serving = tokio::time::timeout(Duration::from_secs(120), async {
        let found = seen.wait_for(|log| log.iter().any(|l| l.contains(marker))).await;
        found.ok().and_then(|log| log.iter().find_map(|l| Some(l.split_once(marker)?.1.to_owned())))
    })
    .await;
    match serving {
        Ok(Some(rest)) => {
            let addr = rest.split_whitespace().next().unwrap().to_owned();
            ApiProcess { child, addr, log }
        }
        Ok(None) => panic!("slipway-api ended before serving: {:#?}", log.borrow()),
        Err(_) => panic!("slipway-api did not serve within 120 s: {:#?}", log.borrow()),
    }
}

impl ApiProcess {
    /// `GET /deployments?ids=z` with `token` as its bearer: the status.
    pub async fn list_with(&self, token: &str) -> u16 {
        self.status_of(&format!("GET /deployments?ids=z HTTP/1.1\r\nAuthorization: Bearer {token}\r\n")).await
    }

    /// The status of the answer to `head` ([`status_at`]).
    pub async fn status_of(&self, head: &str) -> u16 {
        status_at(&self.addr, head).await
    }

    /// `GET path` without a token: the status and the body.
    pub async fn get(&self, path: &str) -> (u16, String) {
        answer_at(&self.addr, &format!("GET {path} HTTP/1.1\r\n")).await
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the api runs")
    }

    /// Every line it logged so far.
    pub fn log(&self) -> Vec<String> {
        self.log.borrow().clone()
    }

    /// The value of the series named exactly `series` (with its labels) in
    /// a scrape of `/metrics`; panics when the scrape has none.
    pub async fn metric(&self, series: &str) -> f64 {
        let (status, text) = self.get("/metrics").await;
        assert_eq!(status, 200);
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series} in the scrape: {text}"))
    }

    /// The first line it logs after the first `skip` that contains every
    /// one of `words`; panics past `deadline` with what it logged.
    pub async fn wait_log(&self, skip: usize, words: &[&str], deadline: Duration) -> String {
        let matches = |line: &String| words.iter().all(|w| line.contains(w));
        let mut log = self.log.clone();
        let found = tokio::time::timeout(deadline, log.wait_for(|log| log.iter().skip(skip).any(matches))).await;
        match found {
            Ok(Ok(log)) => log.iter().skip(skip).find(|l| matches(l)).unwrap().clone(),
            _ => panic!("slipway-api logged no line with {words:?} within {deadline:?}: {:#?}", self.log()),
        }
    }

    /// Its exit status once it has exited within `deadline`, or `None` if
    /// it is still running then.
    pub async fn exited_within(&mut self, deadline: Duration) -> Option<std::process::ExitStatus> {
        tokio::time::timeout(deadline, self.child.wait()).await.ok().map(|status| status.unwrap())
    }

    /// Sends it `signal` (such as `libc::SIGTERM`).
    pub fn signal(&self, signal: i32) {
        let pid = self.pid() as libc::pid_t;
        // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "signalling the api");
    }

    /// Kills it.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// The status of the answer of the api at `addr` to `head` ([`answer_at`]).
pub async fn status_at(addr: &str, head: &str) -> u16 {
    answer_at(addr, head).await.0
}

/// The answer of the api at `addr` to `head` (a request line and header
/// lines, each ending in CRLF), sent with `Host` and `Connection: close` on
/// a connection of its own: its status and its body (within 30 s).
pub async fn answer_at(addr: &str, head: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("{head}Host: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer))
        .await
        .expect("an answer within 30 s")
        .unwrap();
    let text = String::from_utf8_lossy(&answer);
    let status =
        text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no HTTP answer: {text}"));
    (status, text.split_once("\r\n\r\n").map_or(String::new(), |(_, body)| body.to_owned()))
}
