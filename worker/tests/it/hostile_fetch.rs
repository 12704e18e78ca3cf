//! SEC-3: a module source is untrusted, and so is the host its worker runs
//! on, as far as a fetch goes. With the real binaries, real `git`
//! repositories (over `file://`, and over `https` from a local TLS server
//! that answers `401` and writes down every `Authorization` it is sent) and
//! real Nix: a worker whose `HOME` holds a hostile `.gitconfig` (an
//! `insteadOf`, hooks, a template, an fsmonitor, git-lfs's filter, a proxy,
//! credential helpers) and whose environment names a proxy fetches with
//! none of it; Slipway's own credential goes only to its own host; a link
//! leading out of the source is `source_unsafe`, a source past
//! `SLIPWAY_SOURCE_LIMIT` `source_too_large`, each with nothing kept; and a
//! transport Slipway does not fetch over is refused before `git` runs.

use crate::common;

use common::{binary, command, free_port, start, wait_for, Api, Running};
use reqwest::Method;
use serde_json::{json, Value};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::TestDatabase;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Runs `git args…` in `dir` with no configuration of this host; panics
/// with its output unless it succeeds.
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
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Makes `dir` a repository of everything in it, committed; returns the commit.
fn commit_all(dir: &Path) -> String {
    if !dir.join(".git").exists() {
        git(dir, &["init", "-q"]);
    }
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "a module source"]);
    git(dir, &["rev-parse", "HEAD"])
}

/// A module source in `dir` whose `schema` is `{"title": <title>, "type":
/// "object"}`, with a `meta` and effects that deploy no node: quick to build.
fn tiny_source(dir: &Path, title: &str) {
    std::fs::create_dir_all(dir.join("core/effects")).unwrap();
    let core = format!(
        r#"{{ ... }}:
let
  document = name: file: value: derivation {{
    inherit name file;
    system = builtins.currentSystem;
    builder = "/bin/sh";
    PATH = "/usr/bin:/bin";
    text = builtins.toJSON value;
    args = [ "-c" ''mkdir "$out" && printf '%s\n' "$text" > "$out/$file"'' ];
  }};
in {{
  schema = document "hostile-fetch-schema" "schema.json" {{ title = "{title}"; type = "object"; }};
  meta = document "hostile-fetch-meta" "meta.json" {{ domain = [ "domain" ]; applications = {{ }}; }};
}}
"#
    );
    std::fs::write(dir.join("core/default.nix"), core).unwrap();
    let effect = "#!/bin/sh\necho '{\"nodes\": []}' > \"$SBOM_OUT_DIR/nodes.json\"\n";
    for name in ["deploy", "destroy"] {
        let path = dir.join("core/effects").join(name);
        std::fs::write(&path, effect).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// The schema [`tiny_source`] builds for `title`.
fn schema_of(title: &str) -> Value {
    json!({ "title": title, "type": "object" })
}

/// A TCP listener that counts the connections it is offered (a proxy the
/// hostile configuration names: nothing may reach it).
struct Canary {
    port: u16,
    connections: Arc<AtomicUsize>,
}

async fn canary() -> Canary {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&connections);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            drop(stream);
        }
    });
    Canary { port, connections }
}

/// A worker's `HOME` set against it: a `.gitconfig` (and the same as
/// `~/.config/git/config`) whose every setting would run something,
/// redirect the fetch or send a credential, and a `.git-credentials`.
/// Whatever of it runs writes a file into `reached/` (open to all, so a
/// sandboxed process could).
struct Hostile {
    home: PathBuf,
    reached: PathBuf,
}

impl Hostile {
    fn new(dir: &Path, proxy: u16, redirect: Option<(&str, &str)>, credentials: &[String]) -> Self {
        let home = dir.to_path_buf();
        let reached = home.join("reached");
        let hooks = home.join("hooks");
        for folder in [&home, &reached, &hooks, &home.join("template/hooks"), &home.join(".config/git")] {
            std::fs::create_dir_all(folder).unwrap();
            std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::set_permissions(&reached, std::fs::Permissions::from_mode(0o777)).unwrap();
        let script = |path: PathBuf, name: &str, then: &str| {
            let body = format!("#!/bin/sh\necho \"$0 $*\" > '{}/{name}'\n{then}", reached.display());
            std::fs::write(&path, body).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        for hook in ["post-checkout", "reference-transaction", "post-merge", "post-index-change"] {
            script(hooks.join(hook), hook, "");
        }
        script(home.join("template/hooks/post-checkout"), "template-hook", "");
        script(hooks.join("fsmonitor"), "fsmonitor", "");
        script(hooks.join("lfs-smudge"), "lfs-smudge", "cat\n");
        script(hooks.join("credential"), "credential-helper", "echo username=evil\necho password=helper-token\n");
        let mut config = String::new();
        if let Some((from, to)) = redirect {
            config.push_str(&format!("[url \"{to}\"]\n\tinsteadOf = {from}\n"));
        }
        config.push_str(&format!(
            "[core]\n\thooksPath = {hooks}\n\tfsmonitor = {hooks}/fsmonitor\n\
             [init]\n\ttemplateDir = {home}/template\n\
             [http]\n\tproxy = http://127.0.0.1:{proxy}\n\tsslVerify = false\n\
             [credential]\n\thelper = store\n\thelper = !{hooks}/credential\n\
             [filter \"lfs\"]\n\tsmudge = {hooks}/lfs-smudge %f\n\tclean = cat\n\trequired = true\n\
             [protocol]\n\tallow = always\n",
            hooks = hooks.display(),
            home = home.display(),
        ));
        std::fs::write(home.join(".gitconfig"), &config).unwrap();
        std::fs::write(home.join(".config/git/config"), &config).unwrap();
        std::fs::write(home.join(".git-credentials"), credentials.join("\n") + "\n").unwrap();
        Self { home, reached }
    }

    /// The worker's environment: this `HOME`, and a proxy and git settings
    /// in variables.
    fn env(&self, proxy: u16) -> Vec<(String, String)> {
        let proxy = format!("http://127.0.0.1:{proxy}");
        let hooks = self.home.join("hooks").display().to_string();
        [
            ("HOME", self.home.display().to_string()),
            ("XDG_CONFIG_HOME", self.home.join(".config").display().to_string()),
            ("https_proxy", proxy.clone()),
            ("HTTPS_PROXY", proxy.clone()),
            ("http_proxy", proxy.clone()),
            ("ALL_PROXY", proxy),
            ("GIT_SSL_NO_VERIFY", "1".into()),
            ("GIT_CONFIG_COUNT", "1".into()),
            ("GIT_CONFIG_KEY_0", "core.hooksPath".into()),
            ("GIT_CONFIG_VALUE_0", hooks),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// The names of what of this configuration ran.
    fn ran(&self) -> Vec<String> {
        let entries = std::fs::read_dir(&self.reached).unwrap();
        entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
    }
}

/// An api and a worker on `db` (SQLite), both allowing every source and
/// `file://` repositories; the worker with `worker_env` and `worker_args`
/// after `work`.
struct Fleet {
    api: Api,
    state: PathBuf,
    _api: Running,
    _worker: Running,
}

async fn fleet(db: &TestDatabase, worker_env: &[(String, String)], worker_args: &[&str]) -> Fleet {
    let port = free_port();
    let shared = [("SLIPWAY_ALLOW_PATH_SOURCES", "true"), ("SLIPWAY_TRUSTED_SOURCES", "")];
    let mut api = command(&binary("slipway-api"), db, port);
    api.envs(shared);
    let api_process = start(api, db, "api.log");
    let worker_process = start(worker(db, port, worker_env, worker_args), db, "worker.log");
    let api = Api::connect(db, port).await;
    Fleet { api, state: db.path("state"), _api: api_process, _worker: worker_process }
}

/// `slipway-worker work worker_args…` of a [`fleet`] on `port`.
fn worker(db: &TestDatabase, port: u16, env: &[(String, String)], args: &[&str]) -> Command {
    let mut worker = command(&binary("slipway-worker"), db, port);
    worker.envs([("SLIPWAY_ALLOW_PATH_SOURCES", "true"), ("SLIPWAY_TRUSTED_SOURCES", "")]);
    worker.envs(env.iter().map(|(k, v)| (k, v)));
    worker.arg("work").args(args);
    worker
}

impl Fleet {
    /// `POST /schema/get_for` of `source`, repeated while it answers `202`.
    async fn schema_for(&self, source: &str) -> (u16, Value) {
        let body = json!({ "source": source });
        wait_for("the source's outputs", Duration::from_secs(120), || async {
            let (status, answer) = self.api.call(Method::POST, "/schema/get_for", Some(&body)).await.unwrap();
            (status != 202).then_some((status, answer))
        })
        .await
    }

    /// What the host's source cache holds: its entries' names, sorted.
    fn cache(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.state.join("sources/git"))
            .into_iter()
            .flatten()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Asserts the cache holds nothing named after `revision` (no tree, no
    /// work folder, no lock) and no copy of Slipway's git files is left.
    fn assert_nothing_kept(&self, revision: &str) {
        let kept: Vec<String> = self.cache().into_iter().filter(|n| n.contains(revision)).collect();
        assert!(kept.is_empty(), "the cache kept {kept:?} of the refused revision");
        self.assert_no_keys();
    }

    /// Asserts no copy of Slipway's git files outlived its fetch.
    fn assert_no_keys(&self) {
        let keys: Vec<_> = std::fs::read_dir(self.state.join("sources"))
            .into_iter()
            .flatten()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("keys-"))
            .collect();
        assert!(keys.is_empty(), "copies of the git files outlived their fetch: {keys:?}");
    }
}

/// A throw-away authority and a certificate for 127.0.0.1 it signed, made
/// with `openssl` in `dir`: `(ca.pem, server.pem, server.key)`.
fn authority(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let ca = [
        &["req", "-x509"][..],
        &ec,
        &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=slipway test ca"],
    ];
    openssl(&ca.concat());
    openssl(&[&["req"][..], &ec, &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"]].concat());
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\nextendedKeyUsage = serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    (dir.join("ca.pem"), dir.join("server.pem"), dir.join("server.key"))
}

/// The TLS server of [`https_server`]: it answers every request `401` and
/// writes `{"path", "authorization"}` of each to its log.
const SERVER: &str = r#"
import http.server, json, os, ssl, sys
cert, key, port_file, log_file = sys.argv[1:5]

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        with open(log_file, "a") as log:
            log.write(json.dumps({"path": self.path, "authorization": self.headers.get("Authorization")}) + "\n")
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="slipway-test"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = answer

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
with open(port_file + ".part", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".part", port_file)
server.serve_forever()
"#;

/// A git server over https that wants a login it never accepts.
struct HttpsServer {
    port: u16,
    log: PathBuf,
    _process: Running,
}

impl HttpsServer {
    /// The `Authorization` headers it was sent, one per request (`None`
    /// for a request without one), after it has seen at least one request.
    async fn authorizations(&self) -> Vec<Option<String>> {
        wait_for("the https server to see a request", Duration::from_secs(30), || async {
            let text = std::fs::read_to_string(&self.log).ok()?;
            let lines: Vec<Option<String>> = text
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()["authorization"].as_str().map(str::to_owned))
                .collect();
            (!lines.is_empty()).then_some(lines)
        })
        .await
    }
}

async fn https_server(dir: &Path, name: &str, cert: &Path, key: &Path) -> HttpsServer {
    let script = dir.join("server.py");
    std::fs::write(&script, SERVER).unwrap();
    let port_file = dir.join(format!("{name}.port"));
    let log = dir.join(format!("{name}.log"));
    let process = Command::new("python3")
        .arg(&script)
        .args([cert, key, &port_file, &log])
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("python3 runs");
    let process = Running(process);
    let port = wait_for("the https server to listen", Duration::from_secs(30), || async {
        std::fs::read_to_string(&port_file).ok()?.trim().parse::<u16>().ok()
    })
    .await;
    HttpsServer { port, log, _process: process }
}

/// A worker whose `HOME` and environment are hostile fetches a trusted
/// repository as if they were not there: its `insteadOf` does not send the
/// fetch to another repository, no hook, template hook, fsmonitor or
/// git-lfs filter of it runs (the trusted repository asks every file to go
/// through the `lfs` filter), and its proxy is never offered a connection.
#[tokio::test]
async fn a_hostile_git_configuration_of_the_host_redirects_runs_and_filters_nothing() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let trusted = db.path("trusted");
    tiny_source(&trusted, "trusted");
    std::fs::write(trusted.join(".gitattributes"), "* filter=lfs diff=lfs merge=lfs -text\n").unwrap();
    std::fs::write(trusted.join("data.txt"), "the committed bytes\n").unwrap();
    commit_all(&trusted);
    let evil = db.path("evil");
    tiny_source(&evil, "evil");
    let evil_rev = commit_all(&evil);
    let (trusted_url, evil_url) = (format!("file://{}", trusted.display()), format!("file://{}", evil.display()));
    let proxy = canary().await;
    let hostile = Hostile::new(&db.path("home"), proxy.port, Some((&trusted_url, &evil_url)), &[]);
    let fleet = fleet(&db, &hostile.env(proxy.port), &[]).await;

    let (status, schema) = fleet.schema_for(&format!("git+{trusted_url}?ref=main")).await;
    assert_eq!((status, &schema), (200, &schema_of("trusted")), "the fetch was redirected");
    let trusted_rev = git(&trusted, &["rev-parse", "HEAD"]);
    let tree = fleet.state.join("sources/git").join(&trusted_rev);
    assert!(tree.join("core/default.nix").is_file(), "the trusted revision is not in the cache");
    assert_eq!(std::fs::read_to_string(tree.join("data.txt")).unwrap(), "the committed bytes\n");
    assert!(!fleet.cache().iter().any(|n| n.contains(&evil_rev)), "the insteadOf target was fetched");
    assert_eq!(hostile.ran(), Vec::<String>::new(), "the host's git configuration ran something");
    assert_eq!(proxy.connections.load(Ordering::SeqCst), 0, "the host's proxy was offered the fetch");
}

/// An `https` fetch goes to its server directly: neither the proxy of the
/// host's `~/.gitconfig` nor that of the worker's environment is offered a
/// connection. (The server answers `401`: the fetch fails as
/// `source_repository_not_found`, having reached it.)
#[tokio::test]
async fn a_proxy_of_the_host_never_carries_a_fetch() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let (ca, cert, key) = authority(&db.path("tls"));
    let server = https_server(&db.path("tls"), "git", &cert, &key).await;
    let proxy = canary().await;
    let hostile = Hostile::new(&db.path("home"), proxy.port, None, &[]);
    let mut env = hostile.env(proxy.port);
    env.push(("SLIPWAY_GIT_CA_FILE".into(), ca.display().to_string()));
    let fleet = fleet(&db, &env, &[]).await;

    let source = format!("git+https://127.0.0.1:{}/ops/source.git?ref=main", server.port);
    let (status, answer) = fleet.schema_for(&source).await;
    assert_eq!((status, answer["error"].as_str()), (422, Some("source_repository_not_found")), "{answer}");
    assert!(!server.authorizations().await.is_empty(), "the server was not reached directly");
    assert_eq!(proxy.connections.load(Ordering::SeqCst), 0, "a proxy of the host was offered the fetch");
    assert_eq!(hostile.ran(), Vec::<String>::new(), "the host's git configuration ran something");
}

/// `SLIPWAY_GIT_PROXY` is the one proxy an `https` fetch goes through.
#[tokio::test]
async fn slipways_own_proxy_carries_an_https_fetch() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let (ca, cert, key) = authority(&db.path("tls"));
    let server = https_server(&db.path("tls"), "git", &cert, &key).await;
    let proxy = canary().await;
    let env = [
        ("SLIPWAY_GIT_CA_FILE".to_owned(), ca.display().to_string()),
        ("SLIPWAY_GIT_PROXY".to_owned(), format!("http://127.0.0.1:{}", proxy.port)),
    ];
    let fleet = fleet(&db, &env, &[]).await;
    let source = format!("git+https://127.0.0.1:{}/ops/source.git?ref=main", server.port);
    let (status, answer) = fleet.schema_for(&source).await;
    assert_eq!((status, answer["error"].as_str()), (502, Some("fetch_failed")), "{answer}");
    assert!(proxy.connections.load(Ordering::SeqCst) > 0, "the fetch did not go through SLIPWAY_GIT_PROXY");
    assert!(!server.log.exists(), "the fetch went around SLIPWAY_GIT_PROXY");
}

/// `SLIPWAY_GIT_CREDENTIALS` is sent to its own host only, and the host's
/// credential helpers (git's store of `~/.git-credentials`, a helper
/// program) are never asked: the server named in Slipway's file is sent
/// Slipway's credential and no other; another server, for which only the
/// host has credentials, is sent none. No copy of Slipway's file outlives
/// the fetch.
#[tokio::test]
async fn slipways_credential_goes_only_to_its_host_and_no_credential_of_the_host_is_sent() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let (ca, cert, key) = authority(&db.path("tls"));
    let own = https_server(&db.path("tls"), "own", &cert, &key).await;
    let other = https_server(&db.path("tls"), "other", &cert, &key).await;
    let proxy = canary().await;
    let host_credentials: Vec<String> =
        [own.port, other.port].iter().map(|p| format!("https://evil:host-token@127.0.0.1:{p}")).collect();
    let hostile = Hostile::new(&db.path("home"), proxy.port, None, &host_credentials);
    let credentials = db.path("slipway-git-credentials");
    std::fs::write(&credentials, format!("https://slipway:slipway-token@127.0.0.1:{}\n", own.port)).unwrap();
    let mut env = hostile.env(proxy.port);
    env.push(("SLIPWAY_GIT_CA_FILE".into(), ca.display().to_string()));
    env.push(("SLIPWAY_GIT_CREDENTIALS".into(), credentials.display().to_string()));
    let fleet = fleet(&db, &env, &[]).await;

    for server in [&own, &other] {
        let source = format!("git+https://127.0.0.1:{}/ops/source.git?ref=main", server.port);
        let (status, answer) = fleet.schema_for(&source).await;
        // The servers refuse every login: 401.
        assert_eq!((status, answer["error"].as_str()), (422, Some("source_repository_not_found")), "{answer}");
        assert!(!answer.to_string().contains("token"), "a credential reached the answer: {answer}");
    }
    use base64::Engine as _;
    let slipway = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("slipway:slipway-token"));
    let sent: Vec<String> = own.authorizations().await.into_iter().flatten().collect();
    assert!(!sent.is_empty(), "Slipway's credential was not sent to its host");
    assert!(sent.iter().all(|a| *a == slipway), "another credential went to the server: {sent:?}");
    let sent: Vec<String> = other.authorizations().await.into_iter().flatten().collect();
    assert_eq!(sent, Vec::<String>::new(), "a credential went to a server Slipway has none for");
    assert_eq!(hostile.ran(), Vec::<String>::new(), "a credential helper of the host ran");
    assert_eq!(proxy.connections.load(Ordering::SeqCst), 0);
    assert_eq!(std::fs::read_to_string(&credentials).unwrap().lines().count(), 1, "Slipway's file was changed");
    fleet.assert_no_keys();
}

/// A committed link that leads out of the source, whether to a host file
/// (`core/schema.json -> /etc/passwd`), as the whole `core` folder, or by
/// `..`, is refused `422 source_unsafe` naming the link and its target,
/// and the cache keeps nothing of it; links inside the source stay allowed.
#[tokio::test]
async fn a_link_leading_out_of_the_source_is_source_unsafe_and_nothing_is_kept() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let outside = db.path("outside");
    tiny_source(&outside, "outside");
    let fleet = fleet(&db, &[], &[]).await;
    // Each case: the link it commits (path, target), and the refusal's end.
    let outside_core = outside.join("core").display().to_string();
    let cases = [
        ("host-file", "core/schema.json", "/etc/passwd".to_owned()),
        ("core-folder", "core", outside_core),
        ("dot-dot", "core/effects/deploy", "../../../outside/core/effects/deploy".to_owned()),
    ];
    for (name, link, target) in cases {
        let dir = db.path(name);
        tiny_source(&dir, name);
        let at = dir.join(link);
        if at.is_dir() {
            std::fs::remove_dir_all(&at).unwrap();
        } else if at.exists() {
            std::fs::remove_file(&at).unwrap();
        }
        symlink(&target, &at).unwrap();
        let message = format!("{link} is a link to {target}, outside the source");
        let dir = db.path(name);
        tiny_source(&dir, name);
        let revision = commit_all(&dir);
        let (status, answer) = fleet.schema_for(&format!("git+file://{}?rev={revision}", dir.display())).await;
        assert_eq!((status, answer["error"].as_str()), (422, Some("source_unsafe")), "{name}: {answer}");
        let said = answer["message"].as_str().unwrap();
        assert!(said.ends_with(&message), "{name}: {said:?} does not end with {message:?}");
        fleet.assert_nothing_kept(&revision);
    }
    let inside = db.path("inside");
    tiny_source(&inside, "inside");
    std::fs::create_dir_all(inside.join("shared")).unwrap();
    std::fs::rename(inside.join("core/effects/deploy"), inside.join("shared/deploy")).unwrap();
    symlink("../../shared/deploy", inside.join("core/effects/deploy")).unwrap();
    symlink("core/default.nix", inside.join("default.nix")).unwrap();
    let revision = commit_all(&inside);
    let (status, schema) = fleet.schema_for(&format!("git+file://{}?rev={revision}", inside.display())).await;
    assert_eq!((status, &schema), (200, &schema_of("inside")), "links inside the source were refused");
    assert!(fleet.cache().contains(&revision));
}

/// A deploy of a stored revision checks the tree it finds in the host's
/// cache as a fetch does: a tree that leads out of the source (as an
/// earlier Slipway may have kept one) fails the build `source_unavailable`
/// naming the link, and is removed; its effect never runs.
#[tokio::test]
async fn a_deploy_refuses_a_cached_tree_that_links_out_of_the_source() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let dir = db.path("repo");
    tiny_source(&dir, "stored");
    let deploy = "#!/bin/sh\necho the effect ran\necho '{\"nodes\": []}' > \"$SBOM_OUT_DIR/nodes.json\"\n";
    std::fs::write(dir.join("core/effects/deploy"), deploy).unwrap();
    let revision = commit_all(&dir);
    let source = format!("git+file://{}?rev={revision}", dir.display());
    let fleet = fleet(&db, &[], &["--queues", "nix"]).await;
    let (status, schema) = fleet.schema_for(&source).await;
    assert_eq!((status, &schema), (200, &schema_of("stored")));
    let body = json!({ "configuration": { "domain": "stored.example.org" }, "module_source": source });
    let (status, accepted) = fleet.api.call(Method::PUT, "/deployments/stored", Some(&body)).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    let tree = fleet.state.join("sources/git").join(&revision);
    symlink("/etc/passwd", tree.join("core/schema.json")).unwrap();

    let port = fleet.api.base.rsplit(':').next().unwrap().parse().unwrap();
    let _builder = start(worker(&db, port, &[], &["--queues", "builds"]), &db, "builder.log");
    let failed = fleet.api.wait_state("stored", "failed", Duration::from_secs(120)).await;
    let builds = fleet.api.builds("stored").await.unwrap();
    let (_, _, build) = fleet.api.get(&format!("/builds/{}", builds[0]["id"].as_str().unwrap())).await;
    assert_eq!(build["reason"], "source_unavailable", "{build} {failed}");
    let error = build["error"].as_str().unwrap();
    assert!(error.ends_with("core/schema.json is a link to /etc/passwd, outside the source"), "{error}");
    assert!(!tree.exists(), "the refused tree was kept");
    assert!(!build["log"].as_str().unwrap_or_default().contains("the effect ran"), "the effect ran: {build}");
}

/// `slipway-worker run deploy` inspects its `path:` folder before Nix
/// reads it: a link out of it is refused, naming the link (exit 2).
#[test]
fn a_local_run_refuses_a_path_source_that_links_out_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source");
    tiny_source(&source, "local");
    symlink("/etc/shadow", source.join("core/secrets.nix")).unwrap();
    let config = dir.path().join("configuration.json");
    std::fs::write(&config, "{}").unwrap();
    let out = Command::new(binary("slipway-worker"))
        .args(["run", "deploy", "--source", &format!("path:{}", source.display())])
        .arg("--config")
        .arg(&config)
        .env("SLIPWAY_STATE_DIR", dir.path().join("state"))
        .env_remove("SLIPWAY_CONFIG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("core/secrets.nix is a link to /etc/shadow, outside the source"), "{stderr}");
}

/// Deterministic bytes that do not compress (xorshift).
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// `SLIPWAY_SOURCE_LIMIT` bounds the download (3 MiB that do not
/// compress, stopped while it arrives) and the tree (8 MiB of zeros whose
/// pack is a few KiB, refused before it is checked out): each is
/// `422 source_too_large` naming the limit, and nothing of it is kept. A
/// source under the limit is fetched.
#[tokio::test]
async fn a_source_past_the_size_limit_is_source_too_large_and_nothing_is_kept() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let limit = [("SLIPWAY_SOURCE_LIMIT".to_owned(), "1M".to_owned())];
    let fleet = fleet(&db, &limit, &[]).await;
    let cases: [(&str, Vec<u8>, &str); 2] = [
        ("incompressible", noise(3 << 20, 7), "): its download passed it and was stopped;"),
        ("compressible", vec![0u8; 8 << 20], "): its files hold 8389"),
    ];
    for (name, data, says) in cases {
        let dir = db.path(name);
        tiny_source(&dir, name);
        std::fs::write(dir.join("data.bin"), data).unwrap();
        let revision = commit_all(&dir);
        let (status, answer) = fleet.schema_for(&format!("git+file://{}?rev={revision}", dir.display())).await;
        assert_eq!((status, answer["error"].as_str()), (422, Some("source_too_large")), "{name}: {answer}");
        let message = answer["message"].as_str().unwrap();
        assert!(message.contains("SLIPWAY_SOURCE_LIMIT (1 MiB)") && message.contains(says), "{name}: {message}");
        fleet.assert_nothing_kept(&revision);
    }
    let dir = db.path("small");
    tiny_source(&dir, "small");
    std::fs::write(dir.join("data.bin"), noise(512 << 10, 11)).unwrap();
    let revision = commit_all(&dir);
    let (status, schema) = fleet.schema_for(&format!("git+file://{}?rev={revision}", dir.display())).await;
    assert_eq!((status, &schema), (200, &schema_of("small")));
    assert!(fleet.cache().contains(&revision));
}

/// A worker fetches over `https` and `ssh` only: a `file://` repository
/// that an api allowing local sources passed on is refused by a worker
/// that does not allow them, before any `git` runs (no cache folder is
/// made), and `slipway-worker run schema` refuses it, and plain `http`,
/// as `invalid_module_source`.
#[tokio::test]
async fn a_worker_refuses_a_transport_it_does_not_fetch_over_before_git_runs() {
    let db = TestDatabase::new(Engine::Sqlite).await;
    let dir = db.path("repo");
    tiny_source(&dir, "local");
    let revision = commit_all(&dir);
    let source = format!("git+file://{}?rev={revision}", dir.display());
    let fleet = fleet(&db, &[("SLIPWAY_ALLOW_PATH_SOURCES".into(), "false".into())], &[]).await;
    let (status, answer) = fleet.schema_for(&source).await;
    assert_eq!((status, answer["error"].as_str()), (502, Some("fetch_failed")), "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("https and ssh only"), "{answer}");
    assert!(!fleet.state.join("sources").exists(), "the worker began the fetch");

    for refused in [source.as_str(), "git+http://git.example.org/ops/source.git?ref=main"] {
        let out = Command::new(binary("slipway-worker"))
            .args(["run", "schema", "--source", refused, "--output", "json"])
            .env("SLIPWAY_STATE_DIR", db.path("local-state"))
            .env_remove("SLIPWAY_CONFIG")
            .env_remove("SLIPWAY_ALLOW_PATH_SOURCES")
            .output()
            .unwrap();
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        assert_eq!(out.status.code(), Some(2), "{refused}: {answer}");
        assert_eq!(answer["error"], "invalid_module_source", "{refused}: {answer}");
    }
}
