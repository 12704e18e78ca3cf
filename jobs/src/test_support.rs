//! Support for tests that run against both engines (issue: every storage
//! test runs on SQLite and on PostgreSQL, each in its own database).
//!
//! [`TestDatabase::new`] makes a fresh SQLite file in a temporary folder, or
//! a fresh PostgreSQL database on the server named by
//! `SLIPWAY_TEST_POSTGRES` (default `postgres://postgres@127.0.0.1:5432/postgres`),
//! dropped again when the value is dropped. [`on_both_engines!`] turns one
//! `async fn name(engine: Engine)` into two tests, `name::sqlite` and
//! `name::postgres`.

use crate::store::Engine;
use std::path::{Path, PathBuf};

/// The PostgreSQL server tests create their databases on.
pub fn postgres_admin_url() -> String {
    std::env::var("SLIPWAY_TEST_POSTGRES").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A database of its own for one test.
#[derive(Debug)]
pub struct TestDatabase {
    /// The `DATABASE_URL` to give Slipway.
    pub url: String,
    /// A temporary folder for the SQLite file and for state.
    pub dir: tempfile::TempDir,
    postgres_name: Option<String>,
    /// Set by [`TestDatabase::keep`]: nothing is removed on drop.
    kept: std::sync::atomic::AtomicBool,
}

impl TestDatabase {
    /// A fresh, empty database on `engine`.
    pub async fn new(engine: Engine) -> Self {
        let dir = tempfile::tempdir().expect("temporary folder");
        match engine {
            Engine::Sqlite => Self {
                url: format!("sqlite://{}", dir.path().join("slipway.db").display()),
                dir,
                postgres_name: None,
                kept: Default::default(),
            },
            Engine::Postgres => {
                use sqlx::Connection;
                let name = format!("slipway_test_{}", ulid::Ulid::generate().to_string().to_lowercase());
                let admin = postgres_admin_url();
                let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap_or_else(|e| {
                    panic!("PostgreSQL at {admin} (SLIPWAY_TEST_POSTGRES): {e}; scripts/test starts it")
                });
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut conn)
                    .await
                    .expect("create database");
                let _ = conn.close().await;
                let base = admin.rsplit_once('/').map(|(b, _)| b.to_owned()).unwrap_or(admin);
                Self { url: format!("{base}/{name}"), dir, postgres_name: Some(name), kept: Default::default() }
            }
        }
    }

    /// Whether process `pid`, a Slipway binary using this database, holds a
    /// transaction open, as a process stopped inside one does. On SQLite:
    /// the write lock does not come free within 3 s (another process holds
    /// it only for a moment). On PostgreSQL: one of its sessions (named by
    /// [`crate::store::application_name`]) is idle in a transaction once its
    /// running statements ended.
    pub async fn holds_a_transaction(&self, pid: u32) -> bool {
        use sqlx::Connection;
        match &self.postgres_name {
            None => {
                let options = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(self.path("slipway.db"))
                    .busy_timeout(std::time::Duration::from_secs(3));
                let mut conn = sqlx::SqliteConnection::connect_with(&options).await.expect("sqlite connection");
                let locked = match sqlx::query("BEGIN IMMEDIATE").execute(&mut conn).await {
                    Ok(_) => {
                        sqlx::query("ROLLBACK").execute(&mut conn).await.expect("rollback");
                        false
                    }
                    Err(e) => {
                        let busy = e.as_database_error().and_then(|d| d.code()).is_some_and(|c| c == "5");
                        assert!(busy, "sqlite write lock: {e}");
                        true
                    }
                };
                let _ = conn.close().await;
                locked
            }
            Some(name) => {
                let mut conn = sqlx::PgConnection::connect(&self.url).await.expect("postgres connection");
                let states = format!(
                    "SELECT state FROM pg_stat_activity WHERE datname = '{name}' AND application_name LIKE '% {pid}'"
                );
                // A statement still running after 2 s waits on a lock (or on a
                // stopped reader): counted as held.
                let mut held = true;
                let start = std::time::Instant::now();
                while start.elapsed() < std::time::Duration::from_secs(2) {
                    let rows: Vec<(Option<String>,)> =
                        sqlx::query_as(sqlx::AssertSqlSafe(states.clone())).fetch_all(&mut conn).await.unwrap();
                    if rows.iter().any(|(s,)| s.as_deref() == Some("active")) {
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        continue;
                    }
                    held = rows.iter().any(|(s,)| s.as_deref().is_some_and(|s| s.starts_with("idle in transaction")));
                    break;
                }
                let _ = conn.close().await;
                held
            }
        }
    }

    /// PostgreSQL only: simulates an outage of this database. `false` makes
    /// the server refuse new connections to it and drops those it has (as a
    /// restart or a failover does) and returns how many were dropped; `true`
    /// lets connections in again.
    pub async fn accept_connections(&self, accept: bool) -> usize {
        use sqlx::Connection;
        let name = self.postgres_name.as_deref().expect("an outage needs a PostgreSQL test database");
        let mut admin = sqlx::PgConnection::connect(&postgres_admin_url()).await.expect("admin connection");
        let sql = |s: String| sqlx::query(sqlx::AssertSqlSafe(s));
        sql(format!("ALTER DATABASE {name} WITH ALLOW_CONNECTIONS {accept}")).execute(&mut admin).await.unwrap();
        let dropped = if accept {
            0
        } else {
            sql(format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"))
                .fetch_all(&mut admin)
                .await
                .unwrap()
                .len()
        };
        let _ = admin.close().await;
        dropped
    }

    /// A path inside this test's temporary folder.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// With `true`, the database and the temporary folder outlive this
    /// value (to inspect them after a failure); `false` undoes it.
    pub fn keep(&self, keep: bool) {
        self.kept.store(keep, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // A failed test keeps what it left (logs, state, its database) and
        // says where, so a failure in CI can be read afterwards.
        if std::thread::panicking() {
            eprintln!("the failed test's folder is kept: {} (database {})", self.dir.path().display(), self.url);
            print_log_tails(self.dir.path());
            *self.kept.get_mut() = true;
        }
        if *self.kept.get_mut() {
            self.dir.disable_cleanup(true);
            return;
        }
        let Some(name) = self.postgres_name.take() else { return };
        // Drop runs outside any runtime guarantee: use a thread of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async {
                use sqlx::Connection;
                if let Ok(mut conn) = sqlx::PgConnection::connect(&postgres_admin_url()).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
                        .execute(&mut conn)
                        .await;
                }
            });
        })
        .join();
    }
}

/// Prints the last lines of each `*.log` file in `dir` (the logs of the
/// processes a test started), so that a failure in CI shows what they did.
fn print_log_tails(dir: &Path) {
    const LINES: usize = 40;
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    for log in logs {
        let text = String::from_utf8_lossy(&std::fs::read(&log).unwrap_or_default()).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        eprintln!("--- the last {} lines of {} ---", LINES.min(lines.len()), log.display());
        for line in &lines[lines.len().saturating_sub(LINES)..] {
            eprintln!("{line}");
        }
    }
}

/// A running process of this host, as `/proc` showed it when it was read.
#[derive(Debug, Clone)]
pub struct Process {
    /// Its pid, as this host numbers it.
    pub pid: u32,
    /// Its environment: `KEY=value` entries separated by NUL bytes (empty when unreadable).
    pub environ: Vec<u8>,
    /// Its command line, the arguments joined by spaces.
    pub cmdline: String,
    /// Its working folder (empty when unreadable; a deleted one keeps its old path).
    pub cwd: PathBuf,
    /// Its PID namespace, as `/proc/<pid>/ns/pid` names it (`pid:[4026531836]`).
    pub pid_namespace: String,
    /// When it started, in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub started: u64,
}

impl Process {
    /// Process `pid`, or `None` when it is gone, a zombie, or its PID namespace is unreadable.
    pub fn of(pid: u32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            return None;
        }
        let started = fields.get(19)?.parse().ok()?;
        let pid_namespace = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?.display().to_string();
        let read = |what: &str| std::fs::read(format!("/proc/{pid}/{what}")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&read("cmdline")).replace('\0', " ").trim().to_owned();
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_default().display().to_string();
        let cwd = PathBuf::from(cwd.strip_suffix(" (deleted)").unwrap_or(&cwd));
        Some(Self { pid, environ: read("environ"), cmdline, cwd, pid_namespace, started })
    }

    /// The value of environment variable `key`, if set.
    pub fn env(&self, key: &str) -> Option<String> {
        self.environ.split(|b| *b == 0).find_map(|entry| {
            let value = entry.strip_prefix(key.as_bytes())?.strip_prefix(b"=")?;
            Some(String::from_utf8_lossy(value).into_owned())
        })
    }

    /// Whether its environment or command line contains `needle`, or, when
    /// `needle` is an absolute path, it works in that folder or under it.
    pub fn mentions(&self, needle: &str) -> bool {
        if needle.is_empty() {
            return false;
        }
        let contains = |hay: &[u8]| hay.windows(needle.len()).any(|w| w == needle.as_bytes());
        contains(&self.environ)
            || self.cmdline.contains(needle)
            || (needle.starts_with('/') && self.cwd.starts_with(needle))
    }
}

/// Every running process of this host but this one, read from `/proc` in one pass.
pub fn processes() -> Vec<Process> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter_map(Process::of)
        .collect()
}

/// The running processes of this host (other than this one) that
/// [mention](Process::mentions) `needle`: what is left of an effect, Nix
/// builders included (they start with a clean environment, but with the
/// derivation's attributes and their build folder).
pub fn processes_with(needle: &str) -> Vec<u32> {
    processes().into_iter().filter(|p| p.mentions(needle)).map(|p| p.pid).collect()
}

/// The processes of this host in the PID namespace named `namespace`, as
/// `readlink /proc/self/ns/pid` prints it (`pid:[4026532291]`): an effect
/// records its namespace so a test finds every process it started, by
/// the kernel's own grouping, whatever they did to their environment,
/// session or parent (a sandboxed effect sees only its namespace's pids).
pub fn processes_in_pid_namespace(namespace: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/pid")).is_ok_and(|ns| ns.as_os_str() == namespace)
                && process_runs(*pid as i32)
        })
        .collect()
}

/// How long the node builders of [`sleepy_nix_source`] sleep, in seconds.
pub const SLEEPY_BUILDER_SECS: u64 = 12;

/// A copy of the reference module source at `dest` whose node builders
/// first sleep [`SLEEPY_BUILDER_SECS`]: a real builder that outlives its
/// `nix-build` unless the build is ended with it. (They sleep whatever
/// happens: a builder runs in the Nix daemon's sandbox and sees nothing of
/// the host a test could use as a switch.) Every builder carries `token`
/// in its environment (a derivation attribute, which also makes its
/// derivations this copy's own, never built before), so
/// [`processes_with`] finds it and whatever it started.
pub fn sleepy_nix_source(dest: &std::path::Path, token: &str) {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../nix");
    let status = std::process::Command::new("cp").arg("-r").arg(&repo).arg(dest).status().expect("cp runs");
    assert!(status.success(), "cannot copy {} to {}", repo.display(), dest.display());
    let nodes = dest.join("core/nodes/default.nix");
    let text = std::fs::read_to_string(&nodes).expect("nodes/default.nix");
    let marked = text.replacen(
        "system = lib.write.mkDerivation {",
        &format!("system = lib.write.mkDerivation {{\n        slipwayTestToken = \"{token}\";"),
        1,
    );
    assert_ne!(marked, text, "the reference source's node derivation moved; update this helper");
    std::fs::write(&nodes, marked).expect("write nodes/default.nix");
    let builder = dest.join("core/nodes/system-builder.sh");
    let text = std::fs::read_to_string(&builder).expect("system-builder.sh");
    let sleepy = text.replacen("set -eu\n", &format!("set -eu\nsleep {SLEEPY_BUILDER_SECS}\n"), 1);
    assert_ne!(sleepy, text, "the reference source's system builder changed; update this helper");
    std::fs::write(&builder, sleepy).expect("write system-builder.sh");
}

/// True while process `pid` runs (a zombie waiting to be reaped does not run).
pub fn process_runs(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit(')').next().and_then(|s| s.split_whitespace().next()).unwrap_or("gone");
    state != "gone" && state != "Z"
}

/// Turns each `async fn name(engine: Engine)` into the tests `name::sqlite`
/// and `name::postgres`.
#[macro_export]
macro_rules! on_both_engines {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test]
                async fn sqlite() {
                    super::$name($crate::store::Engine::Sqlite).await
                }
                #[tokio::test]
                async fn postgres() {
                    super::$name($crate::store::Engine::Postgres).await
                }
            }
        )*
    };
}

/// The newest modification time of the files under `dir` (to tell a
/// binary built before its sources changed).
pub fn newest(dir: &std::path::Path) -> std::time::SystemTime {
    let mut latest = std::time::SystemTime::UNIX_EPOCH;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let t =
            if path.is_dir() { newest(&path) } else { entry.metadata().and_then(|m| m.modified()).unwrap_or(latest) };
        latest = latest.max(t);
    }
    latest
}

/// A child process killed (SIGKILL) when dropped, however the test ends.
pub struct Running(pub std::process::Child);

impl Running {
    /// SIGKILLs the process now and reaps it.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback port free at the time of asking.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("its address").port()
}

/// A command for Slipway binary `bin` on `db`, the api on `port`, tokens
/// signed with `secret`, the built-in source of this repository and a 2 s
/// heartbeat; no configuration file and no failpoint from the caller's
/// environment.
pub fn slipway_command(bin: &std::path::Path, db: &TestDatabase, port: u16, secret: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(bin);
    cmd.env("DATABASE_URL", &db.url)
        .env("SLIPWAY_STATE_DIR", db.path("state"))
        .env("SLIPWAY_BIND", format!("127.0.0.1:{port}"))
        .env("SLIPWAY_JWT_SECRET", secret)
        .env("SLIPWAY_DEFAULT_SOURCE_DIR", repo().join("nix"))
        .env("SLIPWAY_HEARTBEAT", "2")
        .env_remove("SLIPWAY_CONFIG")
        .env_remove("SLIPWAY_FAILPOINTS");
    cmd
}

/// Starts `cmd` with no input and its stderr appended to `<test dir>/<log>`.
pub fn start(mut cmd: std::process::Command, db: &TestDatabase, log: &str) -> Running {
    use std::process::Stdio;
    let file = std::fs::OpenOptions::new().create(true).append(true).open(db.path(log)).expect("a log file");
    Running(
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::from(file)).spawn().expect("the process starts"),
    )
}

/// The repository's root folder.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `examples/demo.json`, the configuration of the quickstart's demo.
pub fn demo() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(repo().join("examples/demo.json")).expect("examples/demo.json"))
        .expect("examples/demo.json is JSON")
}

/// A checker of the built-in source's baked outputs (`api/default-source`).
pub fn checker() -> std::sync::Arc<crate::validate::Checker> {
    let outputs = crate::source::SourceOutputs::read_dir(&repo().join("api/default-source")).expect("baked outputs");
    std::sync::Arc::new(crate::validate::Checker::new(outputs).expect("the baked schema compiles"))
}

/// Any module source a test names, checked against the built-in source's
/// schema (tests run their own effects with it), or the built-in one.
pub struct AnySource(pub std::sync::Arc<crate::validate::Checker>);

impl crate::submit::Sources for AnySource {
    fn checker_for<'a>(
        &'a self,
        requested: Option<&'a str>,
    ) -> futures::future::BoxFuture<
        'a,
        Result<(std::sync::Arc<crate::validate::Checker>, Option<String>), crate::submit::SubmitError>,
    > {
        Box::pin(async move { Ok((std::sync::Arc::clone(&self.0), requested.map(str::to_owned))) })
    }

    fn names<'a>(
        &'a self,
        _: Option<&'a str>,
        _: &'a serde_json::Value,
    ) -> futures::future::BoxFuture<'a, Result<crate::submit::NamesEval, crate::submit::SubmitError>> {
        Box::pin(async { Ok(crate::submit::NamesEval::Skipped("tests run no names eval".into())) })
    }
}

/// A module source at `root` whose deploy effect is the shell script
/// `script` (and whose destroy succeeds); returns its `path:` reference.
pub fn source_with_deploy(root: &std::path::Path, script: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let effects = root.join("core/effects");
    std::fs::create_dir_all(&effects).expect("effects folder");
    std::fs::write(root.join("core/default.nix"), "{ provider ? {} }: { }\n").expect("default.nix");
    for (name, body) in [("deploy", script), ("destroy", "#!/bin/sh\nexit 0\n")] {
        let path = effects.join(name);
        std::fs::write(&path, body).expect("effect");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    format!("path:{}", root.display())
}

/// A job context on a fresh database of its own: what a worker's job
/// bodies see, for tests that run builds in-process.
pub struct World {
    /// The context the job bodies run with (worker `test-worker`).
    pub ctx: crate::jobs::Ctx,
    /// The test's database and temporary folder (state under `state/`).
    pub db: TestDatabase,
}

/// A [`World`] on `engine`, with the configuration keys `extra` on top of
/// a state folder in the test's temporary folder and the reference source.
pub async fn world(engine: Engine, extra: &[(&str, &str)]) -> World {
    let db = TestDatabase::new(engine).await;
    let mut keys = std::collections::BTreeMap::from([
        ("DATABASE_URL".to_owned(), db.url.clone()),
        ("SLIPWAY_STATE_DIR".to_owned(), db.path("state").display().to_string()),
        ("SLIPWAY_DEFAULT_SOURCE_DIR".to_owned(), repo().join("nix").display().to_string()),
    ]);
    keys.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let config = crate::config::Config::from_keys(&keys).expect("test configuration");
    let pool = crate::store::open(&config).await.expect("test database opens");
    World { ctx: crate::jobs::Ctx::new(pool, std::sync::Arc::new(config), "test-worker", false), db }
}

impl World {
    /// Checks the demo configuration and queues a build of `kind` for
    /// deployment `id` (module source `source`, or the built-in one).
    pub async fn queue(&self, id: &str, kind: crate::state::BuildKind, source: Option<&str>) -> String {
        self.queue_configuration(id, kind, source, demo()).await
    }

    /// [`World::queue`] with another configuration.
    pub async fn queue_configuration(
        &self,
        id: &str,
        kind: crate::state::BuildKind,
        source: Option<&str>,
        configuration: serde_json::Value,
    ) -> String {
        let request = crate::submit::SubmitRequest {
            deployment: crate::id::DeploymentId::parse(id).expect("a valid deployment id"),
            configuration,
            module_source: source.map(str::to_owned),
            queueing: crate::submit::Queueing { kind, limit: None },
            dry_run: false,
        };
        crate::submit::submit(&self.ctx.db, &AnySource(checker()), None, request)
            .await
            .expect("the build is queued")
            .build_id
    }

    /// Runs build `build_id` in-process to its end and returns its report.
    pub async fn run(&self, build_id: &str) -> crate::jobs::report::Report {
        let job = crate::store::queue::BuildJob { build_id: build_id.into() };
        match crate::jobs::build_job::run(job, &self.ctx).await.expect("the build job runs") {
            crate::jobs::build_job::Ran::Finished(r) => *r,
            other => panic!("the build did not run: {other:?}"),
        }
    }

    /// Deployment `id`'s state (ST-1).
    pub async fn state(&self, id: &str) -> crate::state::DeploymentState {
        let mut conn = self.ctx.db.acquire().await.expect("connection");
        let deciding = crate::store::builds::deciding(&mut conn, id).await.expect("read");
        crate::state::DeploymentState::derive(deciding.map(|b| (b.kind, b.status)))
    }

    /// A build row.
    pub async fn build(&self, id: &str) -> crate::store::builds::BuildRow {
        let mut conn = self.ctx.db.acquire().await.expect("connection");
        crate::store::builds::get(&mut conn, id).await.expect("read").expect("the build exists")
    }

    /// Jobs pushed into apalis's table for any queue.
    pub async fn jobs(&self) -> i64 {
        let table = match self.ctx.db.engine() {
            Engine::Sqlite => "Jobs",
            Engine::Postgres => "apalis.jobs",
        };
        let mut conn = self.ctx.db.acquire().await.expect("connection");
        crate::store::Q::new(format!("SELECT COUNT(*) AS n FROM {table}"))
            .fetch_one(&mut conn)
            .await
            .expect("count")
            .int("n")
            .expect("n")
    }

    /// The builds whose job was pushed, in submit order.
    pub async fn dispatched(&self) -> Vec<String> {
        let mut conn = self.ctx.db.acquire().await.expect("connection");
        let rows = crate::store::Q::new("SELECT id FROM builds WHERE dispatched = 1 ORDER BY seq")
            .fetch_all(&mut conn)
            .await
            .expect("read");
        rows.iter().map(|r| r.text("id").expect("id")).collect()
    }
}

/// A database of `engine` in `test_db` with only Slipway's migrations
/// numbered below `version` applied (as an older release left it), for
/// tests of a migration: write rows in the old layout, then open it with
/// [`crate::store::open_sqlite`] or [`crate::store::open_postgres`], which
/// runs the rest.
pub async fn migrated_before(engine: Engine, test_db: &TestDatabase, version: i64) -> crate::store::Db {
    use std::borrow::Cow;
    let before = |mut m: sqlx::migrate::Migrator| {
        m.migrations = Cow::Owned(m.migrations.iter().filter(|x| x.version < version).cloned().collect());
        m.dangerous_set_table_name("_slipway_migrations");
        m
    };
    match engine {
        Engine::Sqlite => {
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(test_db.dir.path().join("slipway.db"))
                .create_if_missing(true)
                .foreign_keys(true);
            let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
            before(sqlx::migrate!("../migrations/sqlite")).run(&pool).await.unwrap();
            crate::store::Db::Sqlite(crate::store::SqliteDb::new(pool))
        }
        Engine::Postgres => {
            let pool = sqlx::PgPool::connect(&test_db.url).await.unwrap();
            before(sqlx::migrate!("../migrations/postgres")).run(&pool).await.unwrap();
            crate::store::Db::Postgres(pool)
        }
    }
}

/// Polls `check` until it yields, backing off from 20 ms to 250 ms; panics
/// naming `what` past `deadline`. What tests wait with instead of sleeping.
pub async fn wait_for<F, Fut, T>(what: &str, deadline: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = std::time::Instant::now();
    let mut every = std::time::Duration::from_millis(20);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < deadline, "timed out after {deadline:?} waiting for {what}");
        tokio::time::sleep(every).await;
        every = (every * 2).min(std::time::Duration::from_millis(250));
    }
}

/// Records build `id` as run to success by worker `a-worker`, as if a
/// worker had claimed it and its effect had succeeded (no effect runs; the
/// deployment's next build is dispatched as after a real end).
pub async fn record_success(db: &crate::store::Db, id: &str) {
    use crate::store::builds;
    let now = crate::store::now_ms();
    let mut tx = db.begin_write().await.expect("transaction");
    let row = builds::get(&mut tx, id).await.expect("read").expect("the build exists");
    tx.lock_deployment(&row.deployment_id).await.expect("lock");
    assert!(builds::claim(&mut tx, &row, "a-worker", now).await.expect("claim"), "the build changed meanwhile");
    let claimed = builds::get(&mut tx, id).await.expect("read").expect("the build exists");
    let finish = builds::Finish {
        status: crate::state::BuildStatus::Succeeded,
        reason: None,
        error: None,
        report: serde_json::json!({}),
    };
    assert!(builds::finish(&mut tx, &claimed, &finish, now).await.expect("finish"), "the claim did not hold");
    builds::dispatch_next(&mut tx, &row.deployment_id).await.expect("dispatch");
    tx.commit().await.expect("commit");
}

/// Claims build `id` for worker `worker` as its next attempt, as a worker
/// would before it dies or is taken for dead; returns the claimed row.
pub async fn claim_as(db: &crate::store::Db, id: &str, worker: &str) -> crate::store::builds::BuildRow {
    use crate::store::builds;
    let mut tx = db.begin_write().await.expect("transaction");
    let row = builds::get(&mut tx, id).await.expect("read").expect("the build exists");
    assert!(builds::claim(&mut tx, &row, worker, crate::store::now_ms()).await.expect("claim"), "the build changed");
    let claimed = builds::get(&mut tx, id).await.expect("read").expect("the build exists");
    tx.commit().await.expect("commit");
    claimed
}

/// A submit of the demo configuration to deployment `id` through the
/// built-in source, within `queue_size` (Q-3): what `PUT /deployments/{id}` does.
pub async fn submit_demo(
    db: &crate::store::Db,
    sources: &dyn crate::submit::Sources,
    id: &str,
    queue_size: u32,
) -> Result<crate::submit::Accepted, crate::submit::SubmitError> {
    let request = crate::submit::SubmitRequest {
        deployment: crate::id::DeploymentId::parse(id).expect("a valid deployment id"),
        configuration: demo(),
        module_source: None,
        queueing: crate::submit::Queueing { kind: crate::state::BuildKind::Deploy, limit: Some(queue_size) },
        dry_run: false,
    };
    crate::submit::submit(db, sources, None, request).await
}

// ---------------------------------------------------------------------------
// OpenBao (operator secrets, PRODUCT.md §8): the development server of
// `scripts/openbao-up`, a root of its own per test, and tokens with the
// policies of `docs/openbao/`.

/// The development OpenBao the tests use: `SLIPWAY_TEST_OPENBAO_ADDR`,
/// `SLIPWAY_TEST_OPENBAO_ROOT_TOKEN` and `SLIPWAY_TEST_OPENBAO_BIN` (the
/// `bao` binary), from the environment, else from the `env` file
/// `scripts/openbao-up` leaves in `SLIPWAY_OPENBAO_DIR` (default
/// `.slipway/openbao`).
fn openbao_vars() -> std::collections::BTreeMap<String, String> {
    let mut vars = std::collections::BTreeMap::new();
    let dir =
        std::env::var("SLIPWAY_OPENBAO_DIR").map(PathBuf::from).unwrap_or_else(|_| PathBuf::from(".slipway/openbao"));
    let dir = if dir.is_absolute() { dir } else { repo().join(dir) };
    if let Ok(text) = std::fs::read_to_string(dir.join("env")) {
        vars.extend(text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())));
    }
    for key in ["SLIPWAY_TEST_OPENBAO_ADDR", "SLIPWAY_TEST_OPENBAO_ROOT_TOKEN", "SLIPWAY_TEST_OPENBAO_BIN"] {
        if let Some(v) = std::env::var(key).ok().filter(|v| !v.is_empty()) {
            vars.insert(key.to_owned(), v);
        }
    }
    vars
}

/// The address and root token of [`openbao_vars`]; panics, saying to run
/// `scripts/openbao-up`, without them.
fn openbao_server() -> (String, secrecy::SecretString) {
    let mut vars = openbao_vars();
    let (Some(addr), Some(token)) =
        (vars.remove("SLIPWAY_TEST_OPENBAO_ADDR"), vars.remove("SLIPWAY_TEST_OPENBAO_ROOT_TOKEN"))
    else {
        panic!(
            "no development OpenBao for this test: run scripts/openbao-up (scripts/test does), or set \
             SLIPWAY_TEST_OPENBAO_ADDR and SLIPWAY_TEST_OPENBAO_ROOT_TOKEN"
        )
    };
    (addr, secrecy::SecretString::from(token))
}

/// A loopback address where nothing listens (a port just given back by
/// the system): for "OpenBao cannot be reached".
pub fn closed_loopback_port() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address")
}

/// The root token's side of a [`TestOpenBao`]: set-up, inspection, clean-up.
#[derive(Clone)]
struct BaoAdmin {
    addr: String,
    mount: String,
    root: String,
    root_token: secrecy::SecretString,
    http: reqwest::Client,
}

impl BaoAdmin {
    /// A request to `/v1/<path>` (already escaped for the URL) with the
    /// root token: the status and the body (JSON, else a JSON string).
    async fn call(&self, method: &str, path: &str, body: Option<serde_json::Value>) -> (u16, serde_json::Value) {
        use secrecy::ExposeSecret;
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut request = self
            .http
            .request(method, format!("{}/v1/{path}", self.addr))
            .header("X-Vault-Token", self.root_token.expose_secret());
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("OpenBao at {} does not answer ({e}): run scripts/openbao-up", self.addr));
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)))
    }

    /// Every entry under the root, relative to it, folder by folder.
    async fn entries(&self) -> std::collections::BTreeSet<String> {
        let mut entries = std::collections::BTreeSet::new();
        let mut folders = vec![String::new()];
        while let Some(folder) = folders.pop() {
            let path = format!("{}/metadata/{}/{}?list=true", self.mount, self.root, folder.replace('%', "%25"));
            let (status, answer) = self.call("GET", &path, None).await;
            if status == 404 {
                continue;
            }
            assert_eq!(status, 200, "listing {folder:?}: {answer}");
            for key in answer["data"]["keys"].as_array().expect("keys") {
                let key = format!("{folder}{}", key.as_str().expect("a key"));
                if key.ends_with('/') {
                    folders.push(key);
                } else {
                    entries.insert(key);
                }
            }
        }
        entries
    }

    /// Polls `sys/health` until it answers `200` (unsealed, active).
    async fn wait_until_healthy(&self, deadline: std::time::Duration) {
        let url = format!("{}/v1/sys/health", self.addr);
        let what = format!("OpenBao at {} to answer sys/health with 200 (run scripts/openbao-up)", self.addr);
        wait_for(&what, deadline, || {
            let request = self.http.get(&url).timeout(std::time::Duration::from_secs(2)).send();
            async move { request.await.ok().filter(|r| r.status().as_u16() == 200).map(|_| ()) }
        })
        .await;
    }
}

/// A `bao server` a test started for itself, killed when dropped: a
/// development server (memory only), or a [persistent](TestOpenBao::persistent)
/// one that [restarts](TestOpenBao::restart) with its data.
struct PrivateOpenBao {
    child: std::process::Child,
    unseal_key: String,
    _home: tempfile::TempDir,
    /// A persistent server's `bao` binary and configuration file, to start it again.
    persistent: Option<(String, PathBuf)>,
}

/// Two free consecutive loopback ports; the first (an OpenBao server
/// also listens on the next one, for its cluster).
fn free_port_pair() -> u16 {
    (0..50)
        .find_map(|_| {
            let a = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
            let port = a.local_addr().ok()?.port();
            std::net::TcpListener::bind(("127.0.0.1", port.checked_add(1)?)).ok()?;
            Some(port)
        })
        .expect("two free consecutive loopback ports")
}

/// Starts `bin` with `args`, `HOME` at `home`, killed with the test's
/// thread should the test process die before dropping it.
fn spawn_bao(bin: &str, args: &[&str], home: &std::path::Path, stdout: std::process::Stdio) -> std::process::Child {
    use std::process::{Command, Stdio};
    let mut command = Command::new(bin);
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    command
        .args(args)
        .env("HOME", home)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {bin} {} ({e}): run scripts/install-deps and scripts/openbao-up", args.join(" "))
        })
}

/// Polls `<addr>/v1/sys/health` until the server answers at all (sealed,
/// not initialised or active), up to 30 s.
async fn wait_until_listening(http: &reqwest::Client, addr: &str) {
    let url = format!("{addr}/v1/sys/health");
    wait_for(&format!("OpenBao at {addr} to listen"), std::time::Duration::from_secs(30), || {
        let request = http.get(&url).timeout(std::time::Duration::from_secs(2)).send();
        async move { request.await.ok().map(|_| ()) }
    })
    .await;
}

impl Drop for PrivateOpenBao {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One test's place in a development OpenBao: a root of its own
/// (`test-<random>`) on the KV version 2 mount `secret`, the policies of
/// `docs/openbao/slipway-api.hcl` and `slipway-worker.hcl` loaded for that
/// root (as `slipway-api-<root>` and `slipway-worker-<root>`), and a child
/// token of each, without the default policy. Operations go through
/// [`TestOpenBao::api`] and [`TestOpenBao::worker`]; the root token only
/// sets up, inspects ([`TestOpenBao::entries`]) and cleans up. Dropped, it
/// removes its entries, policies and tokens (or stops its own server).
pub struct TestOpenBao {
    /// The server's address (`OPENBAO_ADDR`).
    pub addr: String,
    /// The KV version 2 mount, `secret` (`OPENBAO_MOUNT`).
    pub mount: String,
    /// This test's root, `test-<random>` (`OPENBAO_ROOT`).
    pub root: String,
    /// A token with this root's `slipway-api` policy.
    pub api_token: secrecy::SecretString,
    /// A token with this root's `slipway-worker` policy.
    pub worker_token: secrecy::SecretString,
    admin: BaoAdmin,
    policies: Vec<String>,
    tokens: std::sync::Mutex<Vec<secrecy::SecretString>>,
    private: Option<PrivateOpenBao>,
}

impl std::fmt::Debug for TestOpenBao {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestOpenBao")
            .field("addr", &self.addr)
            .field("root", &self.root)
            .field("private", &self.private.is_some())
            .finish_non_exhaustive()
    }
}

impl TestOpenBao {
    /// A root of its own on the shared development server of
    /// `scripts/openbao-up`. Panics, saying to run it, when it does not answer.
    pub async fn new() -> Self {
        let (addr, root_token) = openbao_server();
        Self::set_up(addr, root_token, None, std::time::Duration::from_secs(5)).await
    }

    /// A root of its own on a development server this test starts for
    /// itself (on free loopback ports; stopped when dropped), so that it
    /// may [seal](TestOpenBao::seal) or [stop](TestOpenBao::stop) it without
    /// touching other tests. Runs `SLIPWAY_TEST_OPENBAO_BIN`, else `bao`.
    pub async fn private() -> Self {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        let bin = openbao_vars().remove("SLIPWAY_TEST_OPENBAO_BIN").unwrap_or_else(|| "bao".into());
        // The dev server also listens on the next port (cluster): both free.
        let port = free_port_pair();
        let root_token = format!("dev-{}", ulid::Ulid::generate().to_string().to_lowercase());
        let home = tempfile::tempdir().expect("temporary folder");
        let mut command = Command::new(&bin);
        // Killed with the test's thread, should the test process die
        // before dropping it.
        // SAFETY: prctl is async-signal-safe and touches no memory of ours.
        unsafe {
            use std::os::unix::process::CommandExt;
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = command
            .args(["server", "-dev", "-dev-no-store-token", &format!("-dev-listen-address=127.0.0.1:{port}")])
            .env("BAO_DEV_ROOT_TOKEN_ID", &root_token)
            .env("HOME", home.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {bin} server -dev ({e}): run scripts/install-deps and scripts/openbao-up")
            });
        // The banner it prints once it is up ends with the unseal key.
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(key) = line.strip_prefix("Unseal Key: ") {
                    let _ = tx.send(key.trim().to_owned());
                }
            }
        });
        let mut private = PrivateOpenBao { child, unseal_key: String::new(), _home: home, persistent: None };
        let unseal_key = tokio::task::spawn_blocking(move || rx.recv_timeout(std::time::Duration::from_secs(30)))
            .await
            .expect("the banner reader")
            .unwrap_or_else(|_| panic!("{bin} server -dev on port {port} printed no unseal key within 30 s"));
        private.unseal_key = unseal_key;
        let addr = format!("http://127.0.0.1:{port}");
        Self::set_up(addr, secrecy::SecretString::from(root_token), Some(private), std::time::Duration::from_secs(30))
            .await
    }

    /// A root of its own on a server this test starts for itself (on free
    /// loopback ports; stopped when dropped) that keeps its data on disk
    /// (`storage "raft"`, one node), so that [`TestOpenBao::restart`] finds every
    /// entry, policy and token again. It is initialised with one unseal key,
    /// unsealed, and given the KV version 2 mount `secret`, as the
    /// development server has it. Runs `SLIPWAY_TEST_OPENBAO_BIN`, else `bao`.
    pub async fn persistent() -> Self {
        crate::callback::install_crypto_provider();
        let bin = openbao_vars().remove("SLIPWAY_TEST_OPENBAO_BIN").unwrap_or_else(|| "bao".into());
        let port = free_port_pair();
        let home = tempfile::tempdir().expect("temporary folder");
        let config = home.path().join("openbao.hcl");
        let data = home.path().join("data");
        std::fs::create_dir_all(&data).expect("the OpenBao data folder");
        // Raft, on one node: the storage this OpenBao has that keeps its
        // data on disk (it has no "file" storage).
        let settings = format!(
            "storage \"raft\" {{\n  path = \"{data}\"\n  node_id = \"test\"\n}}\n\
             listener \"tcp\" {{\n  address = \"127.0.0.1:{port}\"\n  cluster_address = \"127.0.0.1:{cluster}\"\n  \
             tls_disable = true\n}}\napi_addr = \"http://127.0.0.1:{port}\"\n\
             cluster_addr = \"http://127.0.0.1:{cluster}\"\nui = false\n",
            data = data.display(),
            cluster = port + 1,
        );
        std::fs::write(&config, settings).expect("the OpenBao configuration");
        let config_arg = format!("-config={}", config.display());
        let child = spawn_bao(&bin, &["server", &config_arg], home.path(), std::process::Stdio::null());
        let mut private = PrivateOpenBao { child, unseal_key: String::new(), _home: home, persistent: None };
        let addr = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .expect("an HTTP client");
        wait_until_listening(&http, &addr).await;
        let init: serde_json::Value = http
            .put(format!("{addr}/v1/sys/init"))
            .json(&serde_json::json!({ "secret_shares": 1, "secret_threshold": 1 }))
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .expect("OpenBao initialises")
            .json()
            .await
            .expect("its keys");
        private.unseal_key = init["keys"][0].as_str().expect("an unseal key").to_owned();
        let root_token = secrecy::SecretString::from(init["root_token"].as_str().expect("a root token").to_owned());
        let admin = BaoAdmin {
            addr: addr.clone(),
            mount: "secret".into(),
            root: String::new(),
            root_token: root_token.clone(),
            http: http.clone(),
        };
        let (status, answer) =
            admin.call("PUT", "sys/unseal", Some(serde_json::json!({ "key": private.unseal_key }))).await;
        assert_eq!(status, 200, "unsealing: {answer}");
        admin.wait_until_healthy(std::time::Duration::from_secs(30)).await;
        let body = serde_json::json!({ "type": "kv", "options": { "version": "2" } });
        let (status, answer) = admin.call("POST", "sys/mounts/secret", Some(body)).await;
        assert!((200..300).contains(&status), "mounting secret/ as KV version 2: {status} {answer}");
        private.persistent = Some((bin, config));
        Self::set_up(addr, root_token, Some(private), std::time::Duration::from_secs(30)).await
    }

    async fn set_up(
        addr: String,
        root_token: secrecy::SecretString,
        private: Option<PrivateOpenBao>,
        deadline: std::time::Duration,
    ) -> Self {
        crate::callback::install_crypto_provider();
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .expect("an HTTP client");
        let root = format!("test-{}", ulid::Ulid::generate().to_string().to_lowercase());
        let admin = BaoAdmin { addr: addr.clone(), mount: "secret".into(), root: root.clone(), root_token, http };
        admin.wait_until_healthy(deadline).await;
        let mut bao = Self {
            addr,
            mount: admin.mount.clone(),
            root,
            api_token: secrecy::SecretString::from(String::new()),
            worker_token: secrecy::SecretString::from(String::new()),
            admin,
            policies: Vec::new(),
            tokens: Default::default(),
            private,
        };
        for (role, file) in [("slipway-api", "slipway-api.hcl"), ("slipway-worker", "slipway-worker.hcl")] {
            let name = format!("{role}-{}", bao.root);
            let body = serde_json::json!({ "policy": bao.policy(file) });
            let (status, answer) = bao.admin.call("PUT", &format!("sys/policies/acl/{name}"), Some(body)).await;
            assert!((200..300).contains(&status), "loading policy {name}: {status} {answer}");
            bao.policies.push(name);
        }
        bao.api_token = bao.mint_token(&[&bao.policies[0]]).await;
        bao.worker_token = bao.mint_token(&[&bao.policies[1]]).await;
        bao
    }

    /// `docs/openbao/<file>` for this test's mount and root: each path's
    /// `secret/<data|metadata|destroy>/deployments/` becomes
    /// `<mount>/<data|metadata|destroy>/<root>/`; nothing else changes
    /// (`auth/token/…` paths stay as they are).
    pub fn policy(&self, file: &str) -> String {
        let path = repo().join("docs/openbao").join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut policy = text.clone();
        let mut replaced = 0;
        for kind in ["data", "metadata", "destroy"] {
            let from = format!("path \"secret/{kind}/deployments/");
            replaced += policy.matches(&from).count();
            policy = policy.replace(&from, &format!("path \"{}/{kind}/{}/", self.mount, self.root));
        }
        // The token's own paths (lookup-self, renew-self) are not the root's.
        replaced += text.matches("path \"auth/token/").count();
        assert_eq!(
            replaced,
            text.matches("path \"").count(),
            "{}: a path outside secret/*/deployments/",
            path.display()
        );
        policy
    }

    /// A child token of the root token with exactly `policies` (no default
    /// policy), valid for an hour; revoked when this value is dropped.
    pub async fn mint_token(&self, policies: &[&str]) -> secrecy::SecretString {
        let body = serde_json::json!({
            "policies": policies,
            "no_default_policy": true,
            "ttl": "1h",
            "display_name": format!("slipway-{}", self.root),
        });
        let (status, answer) = self.admin.call("POST", "auth/token/create", Some(body)).await;
        assert_eq!(status, 200, "minting a token: {answer}");
        let token = answer["auth"]["client_token"].as_str().expect("a client token").to_owned();
        let token = secrecy::SecretString::from(token);
        self.tokens.lock().expect("tokens").push(token.clone());
        token
    }

    /// A child token of the root token with exactly `policies` (no default
    /// policy) and the token options of `options` (`ttl`, `renewable`,
    /// `explicit_max_ttl`, …, as `auth/token/create` takes them); revoked
    /// when this value is dropped.
    pub async fn mint_token_with(&self, policies: &[&str], options: serde_json::Value) -> secrecy::SecretString {
        let mut body = serde_json::json!({
            "policies": policies,
            "no_default_policy": true,
            "ttl": "1h",
            "display_name": format!("slipway-{}", self.root),
        });
        for (k, v) in options.as_object().expect("token options are an object") {
            body[k] = v.clone();
        }
        let (status, answer) = self.admin.call("POST", "auth/token/create", Some(body)).await;
        assert_eq!(status, 200, "minting a token: {answer}");
        let token = answer["auth"]["client_token"].as_str().expect("a client token").to_owned();
        let token = secrecy::SecretString::from(token);
        self.tokens.lock().expect("tokens").push(token.clone());
        token
    }

    /// The names of this test's `slipway-api` and `slipway-worker` policies.
    pub fn policy_names(&self) -> (&str, &str) {
        (&self.policies[0], &self.policies[1])
    }

    /// One request to OpenBao with the root token (set-up and inspection
    /// only: quotas, policies, token lookups): status and JSON body.
    pub async fn root_call(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        self.admin.call(method, path, body).await
    }

    /// Loads `policy` (HCL) as `name`; removed when this value is dropped.
    pub async fn load_policy(&mut self, name: &str, policy: &str) {
        let body = serde_json::json!({ "policy": policy });
        let (status, answer) = self.admin.call("PUT", &format!("sys/policies/acl/{name}"), Some(body)).await;
        assert!((200..300).contains(&status), "loading policy {name}: {status} {answer}");
        self.policies.push(name.to_owned());
    }

    /// The configuration of a Slipway process holding `token`.
    pub fn config(&self, token: &secrecy::SecretString) -> crate::config::OpenBaoConfig {
        crate::config::OpenBaoConfig {
            addr: self.addr.clone(),
            token: token.clone(),
            mount: self.mount.clone(),
            root: self.root.clone(),
        }
    }

    /// A client with the api's token (its policy only).
    pub fn api(&self) -> crate::openbao::OpenBao {
        crate::openbao::OpenBao::new(&self.config(&self.api_token)).expect("a client")
    }

    /// A client with a worker's token (its policy only).
    pub fn worker(&self) -> crate::openbao::OpenBao {
        crate::openbao::OpenBao::new(&self.config(&self.worker_token)).expect("a client")
    }

    /// The `OPENBAO_*` keys of an api (`worker == false`) or a worker, for
    /// [`world`] or a process's environment.
    pub fn keys(&self, worker: bool) -> Vec<(&'static str, String)> {
        use secrecy::ExposeSecret;
        let token = if worker { &self.worker_token } else { &self.api_token };
        vec![
            ("OPENBAO_ADDR", self.addr.clone()),
            ("OPENBAO_TOKEN", token.expose_secret().to_owned()),
            ("OPENBAO_MOUNT", self.mount.clone()),
            ("OPENBAO_ROOT", self.root.clone()),
        ]
    }

    /// Every entry under this test's root as OpenBao names it, relative to
    /// the root (`<id>/secret/<instance>/<field>`, escaped names), listed
    /// folder by folder with the root token.
    pub async fn entries(&self) -> std::collections::BTreeSet<String> {
        self.admin.entries().await
    }

    /// The `value` of the entry at `relative` (as [`TestOpenBao::entries`]
    /// names it), read with the root token.
    pub async fn value_at(&self, relative: &str) -> Option<String> {
        let path = format!("{}/data/{}/{}", self.mount, self.root, relative.replace('%', "%25"));
        let (status, answer) = self.admin.call("GET", &path, None).await;
        match status {
            404 => None,
            200 => Some(answer["data"]["data"]["value"].as_str().expect("a string value").to_owned()),
            _ => panic!("reading {relative}: {status} {answer}"),
        }
    }

    /// Private server only: seals it (every request then answers `503`,
    /// sealed) until [`TestOpenBao::unseal`].
    pub async fn seal(&self) {
        assert!(self.private.is_some(), "only a private OpenBao is sealed: other tests share the development one");
        let (status, answer) = self.admin.call("PUT", "sys/seal", None).await;
        assert!((200..300).contains(&status), "sealing: {status} {answer}");
    }

    /// Private server only: unseals it with the key it printed, and waits
    /// until it answers as active again.
    pub async fn unseal(&self) {
        let key = self.private.as_ref().expect("a private OpenBao").unseal_key.clone();
        let (status, answer) = self.admin.call("PUT", "sys/unseal", Some(serde_json::json!({ "key": key }))).await;
        assert_eq!(status, 200, "unsealing: {answer}");
        self.admin.wait_until_healthy(std::time::Duration::from_secs(30)).await;
    }

    /// Persistent server only ([`TestOpenBao::persistent`]): kills it
    /// (SIGKILL, as a crash or a host's restart would), starts it again on
    /// the same ports and files, unseals it and waits until it answers as
    /// active. Connections are refused meanwhile; entries, policies and
    /// tokens are kept. Returns how long it was away.
    pub async fn restart(&mut self) -> std::time::Duration {
        let began = std::time::Instant::now();
        let private = self.private.as_mut().expect("a private OpenBao");
        let (bin, config) = private.persistent.clone().expect("a persistent OpenBao (TestOpenBao::persistent)");
        let _ = private.child.kill();
        let _ = private.child.wait();
        let config_arg = format!("-config={}", config.display());
        let home = config.parent().expect("the server's folder").to_owned();
        private.child = spawn_bao(&bin, &["server", &config_arg], &home, std::process::Stdio::null());
        wait_until_listening(&self.admin.http, &self.addr).await;
        self.unseal().await;
        began.elapsed()
    }

    /// Private server only: stops it for good (connections are then refused).
    pub fn stop(&mut self) {
        drop(self.private.take().expect("a private OpenBao"));
    }
}

impl Drop for TestOpenBao {
    fn drop(&mut self) {
        if self.private.is_some() {
            return; // Its server goes with it.
        }
        // Remove this root's entries, policies and tokens from the shared
        // server, from a thread of its own (drop may run outside a runtime,
        // and the client's connections belong to the test's).
        let admin = self.admin.clone();
        let policies = std::mem::take(&mut self.policies);
        let tokens = std::mem::take(&mut *self.tokens.lock().unwrap_or_else(|e| e.into_inner()));
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            let Ok(http) = reqwest::Client::builder().no_proxy().timeout(std::time::Duration::from_secs(5)).build()
            else {
                return;
            };
            let admin = BaoAdmin { http, ..admin };
            rt.block_on(async {
                use secrecy::ExposeSecret;
                for entry in admin.entries().await {
                    let path = format!("{}/metadata/{}/{}", admin.mount, admin.root, entry.replace('%', "%25"));
                    admin.call("DELETE", &path, None).await;
                }
                for policy in &policies {
                    admin.call("DELETE", &format!("sys/policies/acl/{policy}"), None).await;
                }
                for token in &tokens {
                    admin
                        .call("POST", "auth/token/revoke", Some(serde_json::json!({ "token": token.expose_secret() })))
                        .await;
                }
            });
        })
        .join();
    }
}

// ---------------------------------------------------------------------------
// A stub HTTP server (readiness probes, PRODUCT.md §10).

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
