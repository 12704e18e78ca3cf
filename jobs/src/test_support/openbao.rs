//! OpenBao (operator secrets, PRODUCT.md §8): the development server of
//! `scripts/openbao-up`, a root of its own per test, and tokens with the
//! policies of `docs/openbao/`.

use super::{repo, wait_for};
use std::path::PathBuf;

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
