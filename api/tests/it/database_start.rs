//! How the real `slipway-api` binary starts on a database it must wait for
//! or cannot use: another process's migration lock (it listens and answers
//! `503` meanwhile), a database a newer release migrated (one line, exit
//! 78), and a connection pooler (transaction mode refused in one line with
//! exit 78, session mode served). Each test has a database of its own on
//! the shared PostgreSQL, and the poolers are PgBouncers of their own.

use crate::common;

use common::process::{api_command, start_api_until};
use common::*;
use serde_json::Value;
use slipway_jobs::store::{Engine, Q};
use slipway_jobs::test_support::TestDatabase;
use std::path::Path;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

/// The migration lock's key for the PostgreSQL database at `url`.
fn lock_key(url: &str) -> i64 {
    let name = url.rsplit('/').next().unwrap().split('?').next().unwrap();
    slipway_jobs::store::migration_lock_key(name)
}

#[tokio::test]
async fn while_another_process_holds_the_migration_lock_the_api_listens_and_answers_503_in_the_json_shape() {
    let database = TestDatabase::new(Engine::Postgres).await;
    // Another process migrating: a transaction holding the lock.
    let other = slipway_jobs::store::open_postgres(&database.url).await.unwrap();
    let mut migrating = other.begin_write().await.unwrap();
    Q::new("SELECT pg_advisory_xact_lock($1)::text AS locked")
        .int(lock_key(&database.url))
        .fetch_one(&mut migrating)
        .await
        .unwrap();
    let api =
        start_api_until(database.dir.path(), None, &[("DATABASE_URL", &database.url)], "listening address=").await;
    api.wait_log(0, &["waiting for another process's database migrations", "held_by"], Duration::from_secs(30)).await;
    for head in [
        "GET /healthz HTTP/1.1\r\n".to_owned(),
        format!("GET /deployments/demo HTTP/1.1\r\nAuthorization: Bearer {}\r\n", all()),
    ] {
        let (status, body) = common::process::answer_at(&api.addr, &head).await;
        assert_eq!(status, 503, "{head}: {body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_error_shape(&body, "service_unavailable");
    }
    // The other process is done: the api migrates and serves.
    migrating.commit().await.unwrap();
    api.wait_log(0, &["serving address="], Duration::from_secs(30)).await;
    assert_eq!(api.status_of("GET /healthz HTTP/1.1\r\n").await, 200);
}

/// The api's exit status and the lines it wrote to standard error that are
/// not log lines (its last words), run on `dir` with `env` (within 60 s).
async fn run_to_exit(dir: &Path, env: &[(&str, &str)]) -> (Option<i32>, Vec<String>, String) {
    let mut command = api_command(dir, None, env);
    command.env("SLIPWAY_LOG", "warn").stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("the api exits within 60 s")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let last_words = stderr.lines().filter(|l| l.starts_with("slipway-api:")).map(str::to_owned).collect();
    (output.status.code(), last_words, stderr)
}

#[tokio::test]
async fn an_older_binary_on_a_database_a_newer_release_migrated_says_which_migration_in_one_line_and_exits_78() {
    for engine in [Engine::Sqlite, Engine::Postgres] {
        let database = TestDatabase::new(engine).await;
        let db = slipway_jobs::store::open(
            &slipway_jobs::config::Config::from_keys(&[("DATABASE_URL".to_owned(), database.url.clone())].into())
                .unwrap(),
        )
        .await
        .unwrap();
        let mut conn = db.acquire().await.unwrap();
        Q::new(
            "INSERT INTO _slipway_migrations (version, description, success, checksum, execution_time) \
             VALUES (9999, 'from a newer release', TRUE, $1, 0)",
        )
        .bytes(vec![0u8])
        .execute(&mut conn)
        .await
        .unwrap();
        drop(conn);
        db.close().await;
        let (status, last_words, stderr) = run_to_exit(database.dir.path(), &[("DATABASE_URL", &database.url)]).await;
        assert_eq!(status, Some(78), "{engine:?}: {stderr}");
        assert_eq!(last_words.len(), 1, "{engine:?}: {stderr}");
        let line = &last_words[0];
        eprintln!("{engine:?}: {line}");
        for words in ["newer Slipway release", "migration 9999", "from a newer release", "run that newer release"] {
            assert!(line.contains(words), "{engine:?}: {words:?} not in {line}");
        }
        assert!(!stderr.contains("previously applied"), "{engine:?}: {stderr}");
    }
}

/// A PgBouncer of its own in front of the shared PostgreSQL, in `mode`
/// (`transaction` or `session`), on a free loopback port; killed on drop.
struct PgBouncer {
    _child: tokio::process::Child,
    _dir: tempfile::TempDir,
    port: u16,
}

impl PgBouncer {
    async fn start(mode: &str) -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        let binary = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("pgbouncer is installed (scripts/install-deps installs it)");
        let dir = tempfile::tempdir().unwrap();
        // PgBouncer refuses to run as root: it runs as nobody, who must read these.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let admin = url::Url::parse(&slipway_jobs::test_support::postgres_admin_url()).unwrap();
        let users = dir.path().join("users.txt");
        std::fs::write(&users, format!("\"{}\" \"\"\n", admin.username())).unwrap();
        let ini = dir.path().join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\n* = host={} port={}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
                 unix_socket_dir =\nauth_type = trust\nauth_file = {}\npool_mode = {mode}\ndefault_pool_size = 4\n\
                 ignore_startup_parameters = extra_float_digits\n",
                admin.host_str().unwrap(),
                admin.port().unwrap_or(5432),
                users.display()
            ),
        )
        .unwrap();
        for file in [&users, &ini] {
            std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let mut command = tokio::process::Command::new(binary);
        command.arg(&ini).stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
        command.stderr(std::process::Stdio::piped()).kill_on_drop(true);
        // SAFETY: getuid(2) has no preconditions.
        if unsafe { libc::getuid() } == 0 {
            command.args(["-u", "nobody"]);
        }
        let mut child = command.spawn().expect("pgbouncer starts");
        let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let listening = tokio::time::timeout(Duration::from_secs(30), async {
            let mut seen = Vec::new();
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("listening on") {
                    return Ok(lines);
                }
                seen.push(line);
            }
            Err(seen)
        })
        .await
        .expect("pgbouncer listens within 30 s");
        let mut lines = listening.unwrap_or_else(|seen| panic!("pgbouncer ended: {seen:#?}"));
        // Keep reading its log so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self { _child: child, _dir: dir, port }
    }

    /// `url` (of the shared PostgreSQL) through this pooler.
    fn url_for(&self, url: &str) -> String {
        let mut url = url::Url::parse(url).unwrap();
        url.set_host(Some("127.0.0.1")).unwrap();
        url.set_port(Some(self.port)).unwrap();
        url.to_string()
    }
}

#[tokio::test]
async fn behind_a_pooler_in_transaction_mode_the_api_refuses_in_one_line_naming_the_fix_exits_78_and_leaves_no_lock_behind(
) {
    let database = TestDatabase::new(Engine::Postgres).await;
    let pooler = PgBouncer::start("transaction").await;
    let url = pooler.url_for(&database.url);
    let (status, last_words, stderr) = run_to_exit(database.dir.path(), &[("DATABASE_URL", &url)]).await;
    assert_eq!(status, Some(78), "{stderr}");
    assert_eq!(last_words.len(), 1, "{stderr}");
    let line = &last_words[0];
    eprintln!("{line}");
    for words in ["transaction mode", "directly", "session mode"] {
        assert!(line.contains(words), "{words:?} not in {line}");
    }
    assert!(!stderr.contains("prepared statement"), "{stderr}");
    // The attempt left nothing behind on the pooler's server sessions (a
    // session lock there would hold every later start): with the pooler
    // still up, a start over a direct URL serves.
    let api = start_api_until(database.dir.path(), None, &[("DATABASE_URL", &database.url)], "serving address=").await;
    assert_eq!(api.status_of("GET /healthz HTTP/1.1\r\n").await, 200);
    drop(pooler);
}

#[tokio::test]
async fn behind_a_pooler_in_session_mode_the_api_serves() {
    let database = TestDatabase::new(Engine::Postgres).await;
    let pooler = PgBouncer::start("session").await;
    let url = pooler.url_for(&database.url);
    let api = start_api_until(database.dir.path(), None, &[("DATABASE_URL", &url)], "serving address=").await;
    assert_eq!(api.status_of("GET /healthz HTTP/1.1\r\n").await, 200);
    let list = api.list_with(&all()).await;
    assert_eq!(list, 200);
}
