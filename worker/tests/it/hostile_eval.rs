//! SEC-3, evaluation and builds: a module source is untrusted code. Each
//! test here serves hostile sources from a real git repository (over
//! `file://`) to the real api and worker binaries, which evaluate and build
//! them with real Nix through `POST /schema/get_for` (or
//! `slipway-worker run names`), and checks each attack ends in a stable
//! error code, or in an answer holding nothing of the host.
//!
//! The worker starts as an attacker would wish: sentinel values in its
//! environment (`OPENBAO_TOKEN`, `SLIPWAY_JWT_SECRET`, `SENTINEL_EXTRA`) and
//! configuration file, a `NIX_PATH` whose `nixpkgs` would run a command and
//! write a marker file, and a `NIX_CONFIG` that lifts restricted
//! evaluation, allows unsafe native code and every `file://` URI. Beside it
//! lie a JSON file of "another tenant" and a store path holding a sentinel.
//! After the attacks, a leak scan looks for the sentinel in every answer,
//! every row of every table, both processes' logs and every store path the
//! jobs produced; a TCP listener of the test and the api's own port must
//! have seen no connection, and the marker file must not exist. Polls with
//! deadlines; never sleeps to synchronise.

use crate::common;

use common::{binary, command, demo, free_port, start, wait_for, Api, Running};
use reqwest::Method;
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::TestDatabase;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What every hostile source starts with: `doc` writes a document from
/// Nix text, `built` runs a `sh` script that makes `$out` (`bashBuilt` a
/// `bash` one).
const PRELUDE: &str = r#"{ provider ? { } }:
let
  doc = name: file: text: derivation {
    inherit name file text; system = builtins.currentSystem; builder = "/bin/sh";
    PATH = "/usr/bin:/bin"; passAsFile = [ "text" ];
    args = [ "-c" "mkdir $out && cp $textPath $out/$file" ];
  };
  shell = builder: name: script: derivation {
    inherit name builder; system = builtins.currentSystem;
    PATH = "/usr/bin:/bin"; args = [ "-c" "mkdir $out && ${script}" ];
  };
  built = shell "/bin/sh";
  bashBuilt = shell "/bin/bash";
in
"#;

/// A source whose `schema` output is `schema` (a derivation) and whose
/// `meta` is an empty document.
fn core(schema: &str) -> String {
    format!("{PRELUDE}{{\n  schema = {schema};\n  meta = doc \"meta\" \"meta.json\" \"{{}}\";\n}}\n")
}

/// A source whose `schema.json` is the JSON of the Nix value `expression`,
/// evaluated when the schema is built.
fn evaluated(expression: &str) -> String {
    core(&format!("doc \"schema\" \"schema.json\" (builtins.toJSON ({expression}))"))
}

/// A TCP listener on loopback that counts the connections it accepts.
struct Listener {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl Listener {
    fn start() -> Self {
        let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        std::thread::spawn(move || {
            for stream in socket.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Self { port, accepted }
    }
}

/// Runs `git args…` in `dir`.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Slipway tests",
            "-c",
            "user.email=tests@slipway.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The api and a worker started with sentinels, and what the test saw.
struct Hostile {
    db: TestDatabase,
    api: Api,
    api_port: u16,
    worker: Running,
    _api: Running,
    /// Every sentinel value holds this text.
    sentinel: String,
    /// The git repository whose revisions are the hostile sources.
    repo: PathBuf,
    listener: Listener,
    /// The file a command run by the host's `nixpkgs` would write.
    marker: PathBuf,
    /// The worker's configuration file (it holds a sentinel).
    config_file: PathBuf,
    /// "Another tenant's" JSON document on the host, and its store path.
    tenant_file: PathBuf,
    tenant_store_path: String,
    /// Every answer of the api, as text.
    answers: Vec<String>,
}

impl Hostile {
    /// Starts the api and the worker on a fresh SQLite database, the worker
    /// with the sentinels and the host settings of the module
    /// documentation, `env` on both, both with `umask 022` when `loose`.
    async fn start(env: &[(&str, &str)], loose: bool) -> Self {
        let db = TestDatabase::new(Engine::Sqlite).await;
        let sentinel =
            format!("slipwaysentinel{}x{}", std::process::id(), ulid::Ulid::generate().to_string().to_lowercase());
        let marker = db.path("marker");
        let nixpkgs = db.path("nixpkgs");
        std::fs::create_dir_all(&nixpkgs).unwrap();
        std::fs::write(
            nixpkgs.join("default.nix"),
            format!(
                "(builtins.exec or (_: \"{sentinel}-nixpkgs\")) [ \"/bin/sh\" \"-c\" \"touch {}; echo '\\\"{sentinel}-nixpkgs\\\"'\" ]\n",
                marker.display()
            ),
        )
        .unwrap();
        let config_file = db.path("worker.toml");
        std::fs::write(&config_file, format!("SLIPWAY_JWT_SECRET = \"{sentinel}-in-the-configuration-file\"\n"))
            .unwrap();
        let tenant_file = db.path("tenant.json");
        std::fs::write(&tenant_file, json!({ "tenant": format!("{sentinel}-tenant") }).to_string()).unwrap();
        let added =
            Command::new("nix-store").arg("--add").arg(&tenant_file).env("NIX_REMOTE", "daemon").output().unwrap();
        assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
        let tenant_store_path = String::from_utf8(added.stdout).unwrap().trim().to_owned();
        let repo = db.path("hostile");
        std::fs::create_dir_all(repo.join("core")).unwrap();
        git(&repo, &["init", "-q"]);
        let listener = Listener::start();
        let api_port = free_port();
        let bao = slipway_jobs::test_support::closed_loopback_port();
        let umask = |cmd: &mut Command| {
            if loose {
                use std::os::unix::process::CommandExt as _;
                // SAFETY: umask is async-signal-safe.
                unsafe {
                    cmd.pre_exec(|| {
                        libc::umask(0o022);
                        Ok(())
                    });
                }
            }
        };
        let mut api = command(&binary("slipway-api"), &db, api_port);
        // The hostile repositories are file:// fixtures: the path-source switch admits them.
        api.env("SLIPWAY_TRUSTED_SOURCES", "").env("SLIPWAY_ALLOW_PATH_SOURCES", "true").envs(env.iter().copied());
        umask(&mut api);
        let api_process = start(api, &db, "api.log");
        let mut worker = command(&binary("slipway-worker"), &db, api_port);
        worker
            .arg("work")
            .env("SLIPWAY_TRUSTED_SOURCES", "")
            .env("SLIPWAY_ALLOW_PATH_SOURCES", "true")
            .env("SLIPWAY_CONFIG", &config_file)
            .env("OPENBAO_ADDR", format!("http://{bao}"))
            .env("OPENBAO_TOKEN", format!("{sentinel}-openbao-token"))
            .env("SLIPWAY_JWT_SECRET", format!("{sentinel}-jwt-secret-of-the-worker"))
            .env("SENTINEL_EXTRA", format!("{sentinel}-extra"))
            .env("NIX_PATH", format!("nixpkgs={}", nixpkgs.display()))
            .env(
                "NIX_CONFIG",
                "substituters =\nallow-unsafe-native-code-during-evaluation = true\nrestrict-eval = false\n\
                 experimental-features = nix-command flakes\nextra-allowed-uris = file:/// http://127.0.0.1\n\
                 allow-import-from-derivation = true",
            )
            .envs(env.iter().copied());
        umask(&mut worker);
        let worker = start(worker, &db, "worker.log");
        let api = Api::connect(&db, api_port).await;
        Self {
            db,
            api,
            api_port,
            worker,
            _api: api_process,
            sentinel,
            repo,
            listener,
            marker,
            config_file,
            tenant_file,
            tenant_store_path,
            answers: Vec::new(),
        }
    }

    /// Commits `core` as the repository's `core/default.nix`: the source at that revision.
    fn revision(&self, core: &str) -> String {
        std::fs::write(self.repo.join("core/default.nix"), core).unwrap();
        git(&self.repo, &["add", "-A"]);
        git(&self.repo, &["commit", "-q", "--allow-empty", "-m", "a hostile source"]);
        format!("git+file://{}?rev={}", self.repo.display(), git(&self.repo, &["rev-parse", "HEAD"]))
    }

    /// `POST /schema/get_for` of `source` until it is no longer computing.
    async fn get_for(&mut self, source: &str) -> (u16, Value) {
        let body = json!({ "source": source });
        let (status, answer) = wait_for("the source's outputs", Duration::from_secs(180), || async {
            let (status, answer) = self.api.call(Method::POST, "/schema/get_for", Some(&body)).await.unwrap();
            (status != 202).then_some((status, answer))
        })
        .await;
        self.answers.push(answer.to_string());
        (status, answer)
    }

    /// The answer to the hostile source `core`, which must be `status`
    /// with error code `code`.
    async fn refused(&mut self, what: &str, core: &str, status: u16, code: &str) -> Value {
        let source = self.revision(core);
        let (got, answer) = self.get_for(&source).await;
        assert_eq!((got, answer["error"].as_str()), (status, Some(code)), "{what}: {answer}");
        answer
    }

    /// The worker's peak resident memory (`VmHWM`), in KiB.
    fn worker_peak_kib(&self) -> u64 {
        peak_kib(self.worker.0.id())
    }

    /// How many requests for `/healthz` the api's access log holds.
    fn healthz_requests(&self) -> usize {
        std::fs::read_to_string(self.db.path("api.log")).unwrap_or_default().matches("/healthz").count()
    }

    /// The leak scan: the sentinel in no answer, no row of the database, no
    /// log line and no store path the jobs produced; no connection to the
    /// test's listener; no marker file.
    async fn scan(&self) {
        let mut hits: Vec<String> = Vec::new();
        for (i, answer) in self.answers.iter().enumerate() {
            if answer.contains(&self.sentinel) {
                hits.push(format!("answer {}: {answer}", i + 1));
            }
        }
        let database = dump(&self.db.path("slipway.db")).await;
        for (place, text) in &database {
            if text.contains(&self.sentinel) {
                hits.push(format!("the database, {place}"));
            }
        }
        for log in ["api.log", "worker.log"] {
            let text = std::fs::read_to_string(self.db.path(log)).unwrap_or_default();
            for line in text.lines().filter(|l| l.contains(&self.sentinel)) {
                hits.push(format!("{log}: {line}"));
            }
        }
        let mentioned: String = database.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>().join("\n")
            + &std::fs::read_to_string(self.db.path("worker.log")).unwrap_or_default();
        let mut paths = store_paths(&mentioned);
        paths.retain(|p| *p != self.tenant_store_path);
        for path in paths {
            if let Some(file) = holds(Path::new(&path), &self.sentinel) {
                hits.push(format!("the store path {path} ({file})"));
            }
        }
        assert!(hits.is_empty(), "the sentinel leaked:\n{}", hits.join("\n"));
        assert_eq!(self.listener.accepted.load(Ordering::SeqCst), 0, "a source connected to the test's listener");
        assert!(!self.marker.exists(), "a command of the host's nixpkgs ran");
    }
}

/// `VmHWM` of process `pid`, in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Every column of every row of every table of the SQLite database at
/// `file`, as text, with where it was.
async fn dump(file: &Path) -> Vec<(String, String)> {
    use sqlx::{Connection as _, Row as _};
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=ro", file.display())).await.unwrap();
    let tables: Vec<(String,)> = sqlx::query_as("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    let mut texts = Vec::new();
    for (table,) in &tables {
        let columns: Vec<(String,)> =
            sqlx::query_as("SELECT name FROM pragma_table_info(?)").bind(table).fetch_all(&mut conn).await.unwrap();
        if columns.is_empty() {
            continue;
        }
        let quote = |name: &str| format!("\"{}\"", name.replace('"', "\"\""));
        let list: Vec<String> = columns.iter().map(|(c,)| format!("CAST({} AS BLOB)", quote(c))).collect();
        let sql = format!("SELECT {} FROM {}", list.join(", "), quote(table));
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_all(&mut conn).await.unwrap();
        for (r, row) in rows.iter().enumerate() {
            for (i, (column,)) in columns.iter().enumerate() {
                let value: Option<Vec<u8>> = row.try_get(i).unwrap();
                if let Some(value) = value {
                    let place = format!("table {table}, row {}, column {column}", r + 1);
                    texts.push((place, String::from_utf8_lossy(&value).into_owned()));
                }
            }
        }
    }
    let _ = conn.close().await;
    texts
}

/// The store paths `/nix/store/<hash>-<name>` that `text` names.
fn store_paths(text: &str) -> Vec<String> {
    let mut paths: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("/nix/store/") {
        let tail = &rest[at..];
        let end = tail[11..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || "+-._?=".contains(c)))
            .map_or(tail.len(), |e| e + 11);
        let path = &tail[..end];
        if path.len() > 11 + 33 && !paths.iter().any(|p| p == path) {
            paths.push(path.to_owned());
        }
        rest = &tail[end..];
    }
    paths
}

/// The file under `path` (a file or a folder, links not followed) that
/// holds `needle`, if any.
fn holds(path: &Path, needle: &str) -> Option<String> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if meta.is_dir() {
        std::fs::read_dir(path).ok()?.flatten().find_map(|e| holds(&e.path(), needle))
    } else if meta.is_file() && meta.len() < 64 << 20 {
        let text = std::fs::read(path).ok()?;
        String::from_utf8_lossy(&text).contains(needle).then(|| path.display().to_string())
    } else {
        None
    }
}

/// The worker's secrets, the host's files and every tenant's data stay out
/// of reach of an evaluation: through `/proc` (by the worker's pid, or its
/// own), the environment, the database file and the worker's configuration
/// file (by path), `/`, another tenant's store path, the host's `nixpkgs`
/// and `builtins.exec` (which would write the marker), `builtins.fetchTree`,
/// and documents that are symbolic links to the host's files, which the
/// worker would otherwise follow.
#[tokio::test]
async fn an_evaluation_reaches_no_secret_host_file_or_other_tenants_data() {
    let mut h = Hostile::start(&[], false).await;
    let pid = h.worker.0.id();
    let db_file = h.db.path("slipway.db");
    let config = h.config_file.display().to_string();
    let tenant_file = h.tenant_file.display().to_string();
    let tenant = h.tenant_store_path.clone();
    let marker = h.marker.display().to_string();
    let failed = "build_failed";
    let attacks: Vec<(&str, String, u16, &str)> = vec![
        (
            "the worker's environment by its pid",
            evaluated(&format!("builtins.readFile (builtins.fetchurl \"file:///proc/{pid}/environ\")")),
            422,
            failed,
        ),
        ("its own environment", evaluated("builtins.readFile \"/proc/self/environ\""), 422, failed),
        (
            "the database file",
            evaluated(&format!("builtins.readFile (builtins.path {{ path = \"{}\"; name = \"db\"; }})", db_file.display())),
            422,
            failed,
        ),
        ("the database file beside the source", evaluated("builtins.readFile ./../../../../../slipway.db"), 422, failed),
        ("the worker's configuration file", evaluated(&format!("builtins.readFile \"{config}\"")), 422, failed),
        ("the root folder", evaluated("builtins.attrNames (builtins.readDir \"/\")"), 422, failed),
        (
            "another tenant's store path",
            evaluated(&format!("builtins.readFile (builtins.storePath \"{tenant}\")")),
            422,
            failed,
        ),
        ("the host's nixpkgs", evaluated("import <nixpkgs>"), 422, failed),
        (
            "a command of the host",
            evaluated(&format!("builtins.exec [ \"/bin/sh\" \"-c\" \"touch {marker}; echo 1\" ]")),
            422,
            failed,
        ),
        (
            "a path fetched as a tree",
            evaluated(&format!(
                "builtins.readFile (builtins.fetchTree {{ type = \"path\"; path = \"{tenant_file}\"; }}).outPath"
            )),
            422,
            failed,
        ),
        (
            "a document linked to another tenant's file",
            core(&format!("built \"schema\" \"ln -s {tenant_file} $out/schema.json\"")),
            422,
            "source_unsafe",
        ),
        (
            "a document linked to the worker's configuration file",
            core(&format!("built \"schema\" \"ln -s {config} $out/schema.json\"")),
            422,
            "source_unsafe",
        ),
        ("an output that is itself a link", core(&format!("derivation {{ name = \"schema\"; system = builtins.currentSystem; builder = \"/bin/sh\"; args = [ \"-c\" \"/usr/bin/ln -s {} $out\" ]; }}", h.db.path("").display())), 422, "source_unsafe"),
    ];
    for (what, core, status, code) in &attacks {
        let answer = h.refused(what, core, *status, code).await;
        if *code == "source_unsafe" {
            assert!(answer["message"].as_str().unwrap().contains("not read"), "{what}: {answer}");
        }
    }
    // The environment and the search path an evaluation sees are empty.
    let names =
        "[ \"OPENBAO_TOKEN\" \"SLIPWAY_JWT_SECRET\" \"SENTINEL_EXTRA\" \"SLIPWAY_CONFIG\" \"NIX_PATH\" \"HOME\" ]";
    let source = h.revision(&evaluated(&format!("map builtins.getEnv {names}")));
    let (status, schema) = h.get_for(&source).await;
    assert_eq!((status, schema), (200, json!(["", "", "", "", "", ""])));
    let source = h.revision(&evaluated("map (e: e.prefix) builtins.nixPath"));
    let (status, schema) = h.get_for(&source).await;
    assert_eq!((status, schema), (200, json!(["source"])), "the search path holds the source alone");
    h.scan().await;
}

/// No connection leaves an evaluation or a build of a source: `fetchurl`
/// and `fetchTarball` of the test's listener and of the api's own
/// `/healthz`, and fixed-output derivations (which the Nix daemon builds
/// with the host's network) fetching it with `builtin:fetchurl` or
/// connecting from a shell, are refused before anything is built.
#[tokio::test]
async fn a_source_connects_to_no_loopback_listener_while_it_is_evaluated_or_built() {
    let mut h = Hostile::start(&[], false).await;
    let (listener, api) = (h.listener.port, h.api_port);
    let before = h.healthz_requests();
    let fixed = |builder: &str, rest: &str| {
        core(&format!(
            "derivation {{ name = \"fixed\"; system = builtins.currentSystem; builder = \"{builder}\"; {rest} \
             outputHashMode = \"flat\"; outputHashAlgo = \"sha256\"; \
             outputHash = \"0000000000000000000000000000000000000000000000000000\"; }}"
        ))
    };
    let attacks: Vec<(&str, String, &str)> = vec![
        ("fetchurl of a listener", evaluated(&format!("builtins.readFile (builtins.fetchurl \"http://127.0.0.1:{listener}/\")")), "build_failed"),
        ("fetchurl of the api", evaluated(&format!("builtins.readFile (builtins.fetchurl \"http://127.0.0.1:{api}/healthz\")")), "build_failed"),
        ("fetchTarball of a listener", evaluated(&format!("builtins.readDir (builtins.fetchTarball \"http://127.0.0.1:{listener}/x.tar.gz\")")), "build_failed"),
        (
            "builtin:fetchurl of a listener",
            fixed("builtin:fetchurl", &format!("url = \"http://127.0.0.1:{listener}/\";")),
            "source_unsafe",
        ),
        (
            "a shell connecting to the api",
            fixed("/bin/bash", &format!("args = [ \"-c\" \"exec 3<>/dev/tcp/127.0.0.1/{api}; echo 'GET /healthz HTTP/1.0' >&3; echo >&3; cat <&3 > $out\" ];")),
            "source_unsafe",
        ),
    ];
    for (what, core, code) in &attacks {
        let answer = h.refused(what, core, 422, code).await;
        if *code == "source_unsafe" {
            assert!(answer["message"].as_str().unwrap().contains("fixed-output"), "{what}: {answer}");
        }
    }
    // A derivation that is not fixed-output builds with a network of its own.
    let plain = core(&format!(
        "bashBuilt \"schema\" \"(exec 3<>/dev/tcp/127.0.0.1/{listener}) 2>/dev/null && echo '\\\"connected\\\"' > $out/schema.json \
         || echo '\\\"refused\\\"' > $out/schema.json\""
    ));
    let source = h.revision(&plain);
    let (status, schema) = h.get_for(&source).await;
    assert_eq!((status, schema), (200, json!("refused")));
    assert_eq!(h.healthz_requests(), before, "a source reached the api");
    h.scan().await;
}

/// SEC-3's memory bound: with `NIX_MEMORY_LIMIT=1G`, an evaluation that
/// allocates past it (10^8 strings at once, or 3·10^7 one by one) ends
/// `out_of_memory` within seconds, naming the setting and its value; it is
/// not run again (one Nix run says so in the job's log), and the worker
/// itself stays small.
#[tokio::test]
async fn an_evaluation_past_nix_memory_limit_ends_out_of_memory_once_and_quickly() {
    let mut h = Hostile::start(&[("NIX_MEMORY_LIMIT", "1G")], false).await;
    for (what, count) in [("10^8 strings at once", "100000000"), ("3·10^7 strings", "30000000")] {
        let peak_before = h.worker_peak_kib();
        let started = Instant::now();
        let core = evaluated(&format!("builtins.length (builtins.genList (i: \"x${{toString i}}\") {count})"));
        let answer = h.refused(what, &core, 422, "out_of_memory").await;
        let took = started.elapsed();
        let peak_after = h.worker_peak_kib();
        eprintln!(
            "{what}: out_of_memory after {:.1} s; the worker's VmHWM {peak_before} KiB before, {peak_after} KiB after",
            took.as_secs_f64()
        );
        assert!(answer["message"].as_str().unwrap().contains("NIX_MEMORY_LIMIT (1 GiB)"), "{answer}");
        assert!(took < Duration::from_secs(60), "{what} took {took:?}");
        assert!(peak_after < 512 * 1024, "the worker grew to {peak_after} KiB");
    }
    let logs: Vec<String> = dump(&h.db.path("slipway.db"))
        .await
        .into_iter()
        .filter(|(place, _)| place.starts_with("table nix_results") && place.ends_with("column log"))
        .map(|(_, log)| log)
        .collect();
    assert_eq!(logs.len(), 2, "one job per source");
    for log in logs {
        assert_eq!(log.matches("error: out of memory").count(), 1, "a run out of memory was run again: {log}");
    }
    h.scan().await;
}

/// SEC-3's output bound: a `schema.json` past `SLIPWAY_OUTPUT_LIMIT` is
/// refused by its size alone, `output_too_large` naming the output, its
/// size and the limit; nothing of it is kept in `nix_results`, and its
/// store path (and derivation) are deleted.
#[tokio::test]
async fn a_document_past_the_output_limit_is_refused_unread_and_its_store_path_deleted() {
    let mut h = Hostile::start(&[("SLIPWAY_OUTPUT_LIMIT", "1M")], false).await;
    let name = format!("big-{}", ulid::Ulid::generate().to_string().to_lowercase());
    let core = core(&format!("built \"{name}\" \"head -c 5000000 /dev/zero > $out/schema.json\""));
    let peak_before = h.worker_peak_kib();
    let answer = h.refused("a 5 MB schema.json", &core, 422, "output_too_large").await;
    let message = answer["message"].as_str().unwrap();
    assert!(
        message.contains("schema.json is 5000000 bytes") && message.contains("SLIPWAY_OUTPUT_LIMIT (1 MiB)"),
        "{answer}"
    );
    assert_eq!(answer["details"]["output"], "schema");
    eprintln!("the worker's VmHWM {peak_before} KiB before, {} KiB after", h.worker_peak_kib());
    let stored: usize = dump(&h.db.path("slipway.db"))
        .await
        .into_iter()
        .filter(|(place, _)| place.starts_with("table nix_results"))
        .map(|(_, text)| text.len())
        .sum();
    assert!(stored < 256 * 1024, "nix_results holds {stored} bytes");
    let left: Vec<String> = std::fs::read_dir("/nix/store")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(&name))
        .collect();
    assert!(left.is_empty(), "the refused output is still in the store: {left:?}");
    h.scan().await;
}

/// `slipway-worker run names` on a `path:` source (the `names` eval of
/// EV-1): `nodes.json` past `SLIPWAY_OUTPUT_LIMIT`, or listing more nodes
/// than `SLIPWAY_NODE_LIMIT`, is `output_too_large`, naming the count and
/// the limit.
#[test]
fn a_names_output_past_its_size_or_node_limit_is_output_too_large() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("configuration.json");
    std::fs::write(&config, "{}").unwrap();
    let names = |nodes: &str| {
        let source = dir.path().join(format!("source-{}", nodes.len()));
        std::fs::create_dir_all(source.join("core")).unwrap();
        let core = format!("{PRELUDE}{{\n  names = {{ configFile }}: {nodes};\n}}\n");
        std::fs::write(source.join("core/default.nix"), core).unwrap();
        format!("path:{}", source.display())
    };
    let eleven = names(
        "doc \"names\" \"nodes.json\" (builtins.toJSON { nodes = builtins.genList (i: { name = \"n${toString i}\"; dnsNames = [ ]; }) 11; })",
    );
    let large = names("built \"names\" \"head -c 2000000 /dev/zero > $out/nodes.json\"");
    let run = |source: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_slipway-worker"))
            .args(["run", "names", "--source", source, "--config", config.to_str().unwrap(), "--output", "json"])
            .env("SLIPWAY_STATE_DIR", dir.path().join("state"))
            .env("SLIPWAY_NODE_LIMIT", "10")
            .env("SLIPWAY_OUTPUT_LIMIT", "1M")
            .env_remove("SLIPWAY_CONFIG")
            .output()
            .unwrap();
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (out.status.code(), answer, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, answer, err) = run(&eleven);
    assert_eq!((code, answer["error"].as_str()), (Some(1), Some("output_too_large")), "{answer} {err}");
    assert!(
        answer["message"].as_str().unwrap().contains("lists 11 nodes, more than SLIPWAY_NODE_LIMIT (10)"),
        "{answer}"
    );
    let (code, answer, err) = run(&large);
    assert_eq!((code, answer["error"].as_str()), (Some(1), Some("output_too_large")), "{answer} {err}");
    assert!(answer["message"].as_str().unwrap().contains("nodes.json is 2000000 bytes"), "{answer}");
}

/// An import from derivation would run a builder during the evaluation:
/// with the worker and the api started under `umask 022`, a deployment is
/// deployed (its `configuration.json` lies in the state folder), then
/// sources whose builders read that file (by import from derivation, by a
/// plain build, or by a link from their document) get nothing of it; the
/// state folder, the database and every work folder are the worker's alone.
#[tokio::test]
async fn a_builder_reads_no_other_deployment_even_when_the_worker_starts_with_umask_022() {
    let mut h = Hostile::start(&[], true).await;
    let (status, accepted) = h.api.submit("demo", &demo()).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    h.api.wait_state("demo", "active", Duration::from_secs(300)).await;
    let state = h.db.path("state");
    let builds = state.join("builds");
    let configuration = wait_for("the deployment's configuration.json", Duration::from_secs(10), || async {
        std::fs::read_dir(&builds).ok()?.flatten().find_map(|build| {
            std::fs::read_dir(build.path())
                .ok()?
                .flatten()
                .map(|a| a.path().join("configuration.json"))
                .find(|c| c.is_file())
        })
    })
    .await;
    let file = configuration.display().to_string();
    let ifd = evaluated(&format!(
        "import (derivation {{ name = \"ifd\"; system = builtins.currentSystem; builder = \"/bin/sh\"; \
         args = [ \"-c\" \"echo \\\"''$(/usr/bin/cat {file})''\\\" > $out\" ]; }})"
    ));
    h.refused("an import from derivation", &ifd, 422, "build_failed").await;
    h.refused("a builder", &core(&format!("built \"schema\" \"cp {file} $out/schema.json\"")), 422, "build_failed")
        .await;
    h.refused("a link", &core(&format!("built \"schema\" \"ln -s {file} $out/schema.json\"")), 422, "source_unsafe")
        .await;
    for answer in &h.answers {
        assert!(!answer.contains("demo.example.org"), "the other deployment's configuration came back: {answer}");
    }
    use std::os::unix::fs::PermissionsExt as _;
    let private = |path: &Path| {
        let mode = std::fs::metadata(path).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{} is {:o}", path.display(), mode & 0o777);
    };
    for path in [state.clone(), builds.clone(), configuration.clone(), h.db.path("slipway.db")] {
        private(&path);
    }
    for build in std::fs::read_dir(&builds).unwrap().flatten() {
        private(&build.path());
        for attempt in std::fs::read_dir(build.path()).unwrap().flatten() {
            private(&attempt.path());
        }
    }
    if state.join("nix").exists() {
        private(&state.join("nix"));
    }
    h.scan().await;
}
