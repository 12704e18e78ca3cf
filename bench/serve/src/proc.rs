//! The release binaries as child processes, and a plain HTTP/1.1 client over
//! one keep-alive loopback connection (no client library between the timer
//! and the socket).

use anyhow::{bail, ensure, Context as _};
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The engine an `--engines` entry names: `sqlite` or `postgres`.
pub fn engine_named(name: &str) -> anyhow::Result<Engine> {
    match name {
        "sqlite" => Ok(Engine::Sqlite),
        "postgres" => Ok(Engine::Postgres),
        other => bail!("--engines takes sqlite and postgres, not {other}"),
    }
}

/// Runs `one` for each engine `names` lists, in turn, each with a scratch
/// folder of its own; after a PostgreSQL run, failed or not, drops
/// `database` from `server`. Each result is tagged `"engine": <name>`;
/// `part` prefixes the progress lines on stderr.
pub async fn each_engine<F, Fut>(
    part: &str,
    names: &[String],
    server: &str,
    database: &str,
    mut one: F,
) -> anyhow::Result<Vec<Value>>
where
    F: FnMut(Engine, PathBuf) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Value>>,
{
    let mut results = Vec::new();
    for name in names {
        let engine = engine_named(name)?;
        eprintln!("[{part}] {name}");
        let scratch = tempfile::tempdir()?;
        let result = one(engine, scratch.path().to_path_buf()).await;
        if engine == Engine::Postgres {
            pg_database(server, database, false).await?;
        }
        let mut result = result.with_context(|| name.clone())?;
        result["engine"] = json!(name);
        results.push(result);
    }
    Ok(results)
}

/// Drops `database` from `server` (any existing database's URL, for the
/// admin connection) and, with `create`, makes it anew: its URL.
pub async fn pg_database(server: &str, database: &str, create: bool) -> anyhow::Result<String> {
    let admin: sqlx::postgres::PgConnectOptions = server.parse().context("parsing --server")?;
    let mut conn = admin.connect().await.with_context(|| format!("connecting to {server}"))?;
    sqlx::raw_sql(AssertSqlSafe(format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))).execute(&mut conn).await?;
    if create {
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {database}"))).execute(&mut conn).await?;
    }
    conn.close().await?;
    let base = server.rsplit_once('/').map_or(server, |(b, _)| b);
    Ok(format!("{base}/{database}"))
}

/// A free loopback port.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A started `slipway-api` or `slipway-worker`, killed when dropped.
pub struct Process {
    /// The child.
    pub child: Child,
    /// When it was spawned.
    pub spawned: Instant,
    /// Unix ms when it was spawned.
    pub spawned_ms: i64,
}

impl Process {
    /// Starts `bin` with `args` and `env` (on top of a clean environment:
    /// PATH, HOME and NIX_CONFIG only), its output to `log`.
    pub fn start(bin: &Path, args: &[&str], env: &[(String, String)], log: &Path) -> anyhow::Result<Self> {
        let out = std::fs::File::create(log)?;
        let mut cmd = Command::new(bin);
        cmd.args(args).env_clear().stdin(Stdio::null()).stdout(out.try_clone()?).stderr(out);
        for key in ["PATH", "HOME", "NIX_CONFIG", "NIX_PATH"] {
            if let Ok(v) = std::env::var(key) {
                cmd.env(key, v);
            }
        }
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        let spawned_ms = slipway_jobs::store::now_ms();
        let spawned = Instant::now();
        let child = cmd.spawn().with_context(|| format!("starting {}", bin.display()))?;
        Ok(Self { child, spawned, spawned_ms })
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident and peak resident memory in KiB (`VmRSS`, `VmHWM`) and threads.
    pub fn memory(&self) -> anyhow::Result<(u64, u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        let field = |name: &str| -> anyhow::Result<u64> {
            let line = status.lines().find(|l| l.starts_with(name)).with_context(|| format!("no {name}"))?;
            Ok(line.split_whitespace().nth(1).context("a number")?.parse()?)
        };
        Ok((field("VmRSS:")?, field("VmHWM:")?, field("Threads:")?))
    }

    /// SIGTERM, then waits for it to exit (SIGKILL after 15 s).
    pub fn stop(mut self) -> anyhow::Result<()> {
        // SAFETY: a signal to our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The release binaries' folder.
pub fn bin_dir(given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| {
        let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
        PathBuf::from(target).join("release")
    })
}

/// Polls `GET /readyz` on `addr` (a new connection each time, every 2 ms)
/// until it answers 200; the time from `since`. Fails after `limit` or
/// when `process` exits.
pub fn wait_ready(addr: &str, process: &mut Process, limit: Duration) -> anyhow::Result<Duration> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(mut client) = Client::connect(addr) {
            if let Ok((200, _)) = client.get("/readyz", None) {
                return Ok(process.spawned.elapsed());
            }
        }
        if let Some(status) = process.child.try_wait()? {
            bail!("the process exited before it was ready ({status})");
        }
        ensure!(Instant::now() < deadline, "not ready within {limit:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// One HTTP/1.1 keep-alive connection.
pub struct Client {
    reader: BufReader<TcpStream>,
    host: String,
}

impl Client {
    /// Connects to `addr` (`127.0.0.1:port`) with `TCP_NODELAY`.
    pub fn connect(addr: &str) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        Ok(Self { reader: BufReader::new(stream), host: addr.to_owned() })
    }

    /// `GET path` with an optional bearer token: the status and the body.
    pub fn get(&mut self, path: &str, token: Option<&str>) -> anyhow::Result<(u16, Vec<u8>)> {
        self.send("GET", path, token, None)
    }

    /// One request, its answer read whole: the status and the body.
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        token: Option<&str>,
        json: Option<&str>,
    ) -> anyhow::Result<(u16, Vec<u8>)> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.host);
        if let Some(t) = token {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        if let Some(body) = json {
            head.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        if let Some(body) = json {
            head.push_str(body);
        }
        self.reader.get_mut().write_all(head.as_bytes())?;
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let status: u16 = line.split_whitespace().nth(1).context("an HTTP status line")?.parse()?;
        let mut length = None;
        let mut chunked = false;
        loop {
            line.clear();
            self.reader.read_line(&mut line)?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = Some(v.trim().parse::<usize>()?);
                } else if k.eq_ignore_ascii_case("transfer-encoding") && v.trim().eq_ignore_ascii_case("chunked") {
                    chunked = true;
                }
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                self.reader.read_line(&mut line)?;
                let size = usize::from_str_radix(line.trim(), 16)?;
                let mut chunk = vec![0; size + 2];
                self.reader.read_exact(&mut chunk)?;
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        } else {
            body.resize(length.context("an answer without Content-Length")?, 0);
            self.reader.read_exact(&mut body)?;
        }
        Ok((status, body))
    }
}

/// Percentile `p` (0–100) of sorted `v`, nearest rank.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}
