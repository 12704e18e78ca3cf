//! The one typed configuration of both binaries (PRODUCT.md §12).
//!
//! Keys are the environment variable names of §12, each documented for
//! operators in `docs/CONFIGURATION.md` (a test keeps [`KEYS`] and that file
//! together). A TOML file named by `SLIPWAY_CONFIG` may set the same keys
//! (`DATABASE_URL = "sqlite://…"`); the environment wins over the file.
//! Loaded once at start-up and passed down; nothing reads the environment
//! afterwards. The log filter ([`log_filter`]) is read before the
//! configuration, so that loading it can be logged.

mod sandbox;

pub use sandbox::{parse_size, GitConfig, SandboxConfig};

use crate::callback::Origins;
use secrecy::SecretString;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// A key that is missing, malformed, or in a file that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `SLIPWAY_CONFIG` names a file that cannot be read or parsed.
    #[error("cannot read the configuration file {path}: {reason}")]
    File {
        /// The file named by `SLIPWAY_CONFIG`.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A key holds a value of the wrong shape.
    #[error("{key}: {reason} (got {value:?})")]
    Invalid {
        /// The §12 key.
        key: &'static str,
        /// The value given (never a secret's: secrets are not parsed).
        value: String,
        /// What shape was expected.
        reason: &'static str,
    },
    /// A key is missing that another key needs.
    #[error("{key} is not set: {reason}")]
    Missing {
        /// The key that is missing.
        key: &'static str,
        /// Which key needs it, and why.
        reason: &'static str,
    },
    /// A key of a feature this release does not have is set: refused, so
    /// that nobody believes it takes effect.
    #[error("{key} is not supported by this release ({feature} comes in a later one); unset it")]
    Unsupported {
        /// The key.
        key: &'static str,
        /// What it would configure.
        feature: &'static str,
    },
}

/// Keys of features this release does not have, and what they would
/// configure; setting one is [`ConfigError::Unsupported`]. Empty in this
/// release (the `OPENBAO_*` keys left it with [`OpenBaoConfig`]); kept for
/// the next feature that ships its keys before its code.
pub const UNSUPPORTED: &[(&str, &str)] = &[];

/// Where operator secrets live (PRODUCT.md §8, §12; `docs/OPENBAO.md`): an
/// OpenBao KV version 2 mount. Present in [`Config::openbao`] only when
/// `OPENBAO_ADDR` is set. `Debug` never shows the token.
#[derive(Clone)]
pub struct OpenBaoConfig {
    /// `OPENBAO_ADDR`: the server's base URL, `http(s)://host[:port][/path]`,
    /// without a trailing slash (requests go to `<addr>/v1/…`).
    pub addr: String,
    /// `OPENBAO_TOKEN`: the token Slipway sends as `X-Vault-Token`: the api's
    /// and the workers' are different tokens with different policies
    /// (`docs/openbao/`).
    pub token: SecretString,
    /// `OPENBAO_MOUNT`: the KV version 2 mount, default `secret`; one or
    /// more segments of `A-Z a-z 0-9 - . _ ~` joined by `/`.
    pub mount: String,
    /// `OPENBAO_ROOT`: the folder of the mount that holds every
    /// deployment's entries, default `deployments`; same shape as `mount`.
    pub root: String,
}

impl std::fmt::Debug for OpenBaoConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenBaoConfig")
            .field("addr", &self.addr)
            .field("token", &"[redacted]")
            .field("mount", &self.mount)
            .field("root", &self.root)
            .finish()
    }
}

impl OpenBaoConfig {
    /// Reads the `OPENBAO_*` keys: `None` when `OPENBAO_ADDR` is unset (no
    /// operator secrets). An address without a token, a token without an
    /// address, an address that is not an `http(s)` URL, or a mount or root
    /// that is not a plain path is a [`ConfigError`] naming the key; the
    /// token is never echoed.
    fn from_keys(get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, ConfigError> {
        let token = get("OPENBAO_TOKEN");
        let Some(addr) = get("OPENBAO_ADDR") else {
            if token.is_some() {
                return Err(ConfigError::Missing {
                    key: "OPENBAO_ADDR",
                    reason: "OPENBAO_TOKEN is set, but without an address Slipway keeps no operator secrets",
                });
            }
            return Ok(None);
        };
        let addr = openbao_addr(addr.trim())?;
        let Some(token) = token.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()) else {
            return Err(ConfigError::Missing {
                key: "OPENBAO_TOKEN",
                reason: "OPENBAO_ADDR is set: Slipway needs a token to reach OpenBao",
            });
        };
        let folder = |key: &'static str, default: &str| -> Result<String, ConfigError> {
            let value = get(key).unwrap_or_else(|| default.to_owned());
            let trimmed = value.trim().trim_matches('/');
            let plain = !trimmed.is_empty()
                && trimmed.split('/').all(|s| {
                    !s.is_empty()
                        && s != "."
                        && s != ".."
                        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
                });
            if plain {
                Ok(trimmed.to_owned())
            } else {
                Err(ConfigError::Invalid {
                    key,
                    value,
                    reason: "expected a path of OpenBao such as `secret` or `team/kv`: segments of letters, digits, \
                             `-`, `.`, `_` and `~` joined by `/` (no empty, `.` or `..` segment)",
                })
            }
        };
        Ok(Some(Self {
            addr,
            token: SecretString::from(token),
            mount: folder("OPENBAO_MOUNT", "secret")?,
            root: folder("OPENBAO_ROOT", "deployments")?,
        }))
    }
}

/// `OPENBAO_ADDR` checked and without its trailing slash. User information
/// (`user:password@`) is refused without echoing the value.
fn openbao_addr(value: &str) -> Result<String, ConfigError> {
    let invalid = |value: &str, reason| ConfigError::Invalid { key: "OPENBAO_ADDR", value: value.to_owned(), reason };
    if value.contains('@') {
        return Err(invalid(
            "[not shown: it may hold user information]",
            "an OpenBao address carries no user information (`@`); the token goes in OPENBAO_TOKEN",
        ));
    }
    let url = url::Url::parse(value)
        .map_err(|_| invalid(value, "expected an http or https URL such as http://127.0.0.1:8200"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(invalid(value, "expected an http or https URL such as http://127.0.0.1:8200"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid(value, "an OpenBao address has no query and no fragment"));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// Slipway's configuration (PRODUCT.md §12). Durations are whole seconds
/// unless a unit is given (`90s`, `5m`, `1h`, `14d`).
#[derive(Debug, Clone)]
pub struct Config {
    /// `DATABASE_URL`: `sqlite://<file>` (created if missing) or `postgres://…`.
    pub database_url: String,
    /// `SLIPWAY_BIND`: the api's listen address.
    pub bind: String,
    /// `SLIPWAY_STATE_DIR`: work dirs, caches, local-provider state; made
    /// absolute against the starting folder.
    pub state_dir: PathBuf,
    /// `SLIPWAY_JWT_SECRET`: HS256 secret of a front-end.
    pub jwt_secret: Option<SecretString>,
    /// `SLIPWAY_JWT_PUBLIC_KEY`: an Ed25519 public key (PEM) of a front-end.
    pub jwt_public_key: Option<String>,
    /// `SLIPWAY_JWT_KEYS_FILE`: a JWK Set (RFC 7517) of the front-ends'
    /// keys, each named by its `kid` (SEC-4), instead of the two keys above;
    /// made absolute against the starting folder. The api reads it at start,
    /// on `SIGHUP` and when it changes; this is only its path.
    pub jwt_keys_file: Option<PathBuf>,
    /// `SLIPWAY_JWT_AUDIENCE`: the required `aud` claim.
    pub jwt_audience: String,
    /// `SLIPWAY_JWT_ISSUER`: when set, the required `iss` claim.
    pub jwt_issuer: Option<String>,
    /// `SLIPWAY_ALLOWED_ORIGINS`: the CORS allowlist, also the only origins
    /// a delete's callback may point to (DL-2); comma separated origins,
    /// kept as a browser serialises them (see [`Origins`]). Empty by default.
    pub allowed_origins: Origins,
    /// `SLIPWAY_CALLBACK_ALLOW_PRIVATE`: let a reconcile push connect to
    /// loopback, private and other addresses that
    /// [`crate::callback::forbidden_address`] refuses (development only).
    /// Default `false`.
    pub callback_allow_private: bool,
    /// `SLIPWAY_READINESS_CONNECT`: the `connect` addresses a module
    /// source's `meta.readiness` may name (SEC-3: the probe goes from the
    /// worker's network, not from a sandbox), each `<ip>:<port>` or
    /// `http://<host>:<port>` as the source writes it; empty (the empty
    /// string in the file) allows any. Default: the local provider's front
    /// door, `http://127.0.0.1:8470`.
    pub readiness_connect: Vec<String>,
    /// `SLIPWAY_TRUSTED_SOURCES`: module-source allowlist (URL prefixes);
    /// `Some(vec![])` (the empty string) allows all.
    pub trusted_sources: Vec<String>,
    /// `SLIPWAY_ALLOW_PATH_SOURCES`: accept `path:` module sources over HTTP
    /// and fetch `git+file://` repositories (MS-1, SEC-3: local runs and
    /// tests only). Default `false`.
    pub allow_path_sources: bool,
    /// `SLIPWAY_DEFAULT_SOURCE_DIR`: the folder holding the built-in module
    /// source's `core/` that workers deploy a deployment without a source
    /// from; made absolute against the starting folder.
    pub default_source_dir: PathBuf,
    /// `SLIPWAY_SELF_SOURCE`: the self-pin (MS-8); unset: sources float.
    pub self_source: Option<String>,
    /// `SLIPWAY_PROVIDER`: the provider whose effects this worker runs,
    /// passed to them as `PROVIDER`. Default `local`, the reference
    /// source's only provider.
    pub provider: String,
    /// `NIX_TIMEOUT` (MS-7): one deadline covering a `nix`-queue job's
    /// fetch and build; default 300 s.
    pub nix_timeout: Duration,
    /// `NIX_SLOTS` (MS-7): schema builds and names evals running at once,
    /// fleet-wide; default 2.
    pub nix_slots: u32,
    /// `OPENBAO_ADDR`, `OPENBAO_TOKEN`, `OPENBAO_MOUNT`, `OPENBAO_ROOT`
    /// (PRODUCT.md §8): where operator secrets live; `None` when
    /// `OPENBAO_ADDR` is unset (a submit with a secret value is then refused).
    pub openbao: Option<OpenBaoConfig>,
    /// `SLIPWAY_QUEUES`: the queues this worker serves, of `builds`,
    /// `nix` and `maintenance`; default all. `--queues` overrides it.
    pub queues: Vec<String>,
    /// `BUILD_SLOTS`: concurrent builds per worker (§6).
    pub build_slots: u32,
    /// `BUILD_PREFETCH`: build jobs a worker claims from the queue at once;
    /// `None`: as many as it has slots. More than the slots makes a worker
    /// with many short builds drain faster (one claim and one acknowledgement
    /// per batch); the jobs it holds wait for one of its slots, not for
    /// another worker.
    pub build_prefetch: Option<u32>,
    /// `DEPLOY_TIMEOUT` (§6).
    pub deploy_timeout: Duration,
    /// `DESTROY_TIMEOUT` (§6).
    pub destroy_timeout: Duration,
    /// `DEPLOY_SBOM_TIMEOUT`, passed to the deploy effect.
    pub deploy_sbom_timeout: Duration,
    /// `READY_TIMEOUT` (§10): how long after a successful deploy its
    /// instances are probed before those not ready are `not_ready`.
    pub ready_timeout: Duration,
    /// `QUEUE_SIZE`.
    pub queue_size: u32,
    /// `RETENTION`.
    pub retention: Duration,
    /// `SLIPWAY_HEARTBEAT`: worker heartbeat interval; a worker missing two
    /// beats has its builds picked up by another worker.
    pub heartbeat: Duration,
    /// `SLIPWAY_POSTGRES_POLL`: on PostgreSQL, how often an idle worker
    /// looks for jobs besides the notifications of new ones (default 1 s).
    /// The poll finds what no notification announces (a job handed out
    /// again after its worker died, a delayed job coming due) and bounds
    /// the wait while the worker's LISTEN connects again after an outage.
    pub postgres_poll: Duration,
    /// `SLIPWAY_METRICS_ADDR`: where a worker serves its own metrics
    /// (`GET /metrics`, docs/METRICS.md); `None` (the default): it serves none.
    /// The api serves its metrics on its own address and ignores this.
    pub metrics_addr: Option<String>,
    /// `SLIPWAY_METRICS_TOKEN`: when set, `GET /metrics` (the api's and a
    /// worker's) answers only `Authorization: Bearer <this token>`;
    /// unset: anyone who reaches the address may scrape.
    pub metrics_token: Option<SecretString>,
    /// `SLIPWAY_REQUEST_TIMEOUT`: the api's read timeout, default 30 s. A
    /// client gets this long to send a request's head (request line and
    /// header fields; past it the connection is closed unanswered, as
    /// hyper does) and may pause this long between two pieces of a body
    /// (past it `408 request_timeout`). An idle keep-alive connection is
    /// closed after it too. Workers ignore it.
    pub request_timeout: Duration,
    /// `SLIPWAY_BODY_TIMEOUT`: the most time a request body may take to
    /// arrive, in all, counted from the end of its head; default 60 s. A
    /// body still arriving past it is answered `408 request_timeout` with
    /// `Connection: close`, however steadily it trickles in (the pauses
    /// alone are bounded by `SLIPWAY_REQUEST_TIMEOUT`). Workers ignore it.
    pub body_timeout: Duration,
    /// `SLIPWAY_SHUTDOWN_GRACE`: how long the api drains on `SIGTERM` or
    /// `SIGINT`, default 10 s. It stops accepting at once, ends its event
    /// streams and lets the requests in flight finish for at most this
    /// long, then exits with whatever is still open; a second signal ends
    /// the drain at once. Workers ignore it.
    pub shutdown_grace: Duration,
    /// `SLIPWAY_STREAMS_PER_SUBJECT`: event streams (`GET
    /// /deployments/{id}/events`, `GET /builds/{id}/log`) one token subject
    /// may hold open on one api at once, default 100; past it a stream is
    /// refused `429 too_many_streams`. A ticket's streams count for the
    /// subject of the token that minted it. Workers ignore it.
    pub streams_per_subject: u32,
    /// `SLIPWAY_STREAMS_PER_API`: event streams one api holds open at
    /// once, whoever opened them, default 10000; past it a stream is
    /// refused `429 too_many_streams`. Workers ignore it.
    pub streams_per_api: u32,
    /// `SLIPWAY_SQLITE_WAL_LIMIT`: the size past which a process on SQLite
    /// checkpoints the write-ahead log and truncates it, and the size SQLite
    /// cuts the log back to after any checkpoint (`journal_size_limit`);
    /// default 64 MiB, at least 1 MiB. Ignored on PostgreSQL.
    pub sqlite_wal_limit: u64,
    /// `SLIPWAY_CLOCK_SKEW_LIMIT`: how far this host's wall clock may be
    /// from the database's before the process warns (log, `/readyz`,
    /// `slipway_clock_skew_seconds`), default 2 s. Shared times come from
    /// the database's clock whatever the skew; the warning is for
    /// the host's time synchronisation.
    pub clock_skew_limit: Duration,
    /// `SLIPWAY_SQLITE_CHECKPOINT_EVERY`: how often a process on SQLite
    /// looks at the write-ahead log's size (and checkpoints it past
    /// `SLIPWAY_SQLITE_WAL_LIMIT`), default 30 s. Ignored on PostgreSQL.
    pub sqlite_checkpoint_every: Duration,
    /// How processes run on a module source are contained and bounded
    /// (`SLIPWAY_SANDBOX_*`, `SLIPWAY_NIX_*`, `NIX_MEMORY_LIMIT`, the
    /// output and source limits; SEC-3).
    pub sandbox: SandboxConfig,
    /// How `git` fetches a module source (`SLIPWAY_GIT_*`).
    pub git: GitConfig,
    /// `SLIPWAY_CONFIG`: the configuration file this was loaded from, if
    /// any (hidden from every sandbox, whatever its permissions).
    pub file: Option<PathBuf>,
}

/// Parses a list of queues (`SLIPWAY_QUEUES`, `--queues`): comma separated
/// names of [`crate::store::queue::ALL_QUEUES`]; unset or empty: all of them.
pub fn parse_queues(value: Option<&str>) -> Result<Vec<String>, ConfigError> {
    let all = crate::store::queue::ALL_QUEUES;
    let Some(value) = value.filter(|v| !v.trim().is_empty()) else {
        return Ok(all.iter().map(|q| q.to_string()).collect());
    };
    let mut queues = Vec::new();
    for name in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if !all.contains(&name) {
            return Err(ConfigError::Invalid {
                key: "SLIPWAY_QUEUES",
                value: value.to_owned(),
                reason: queues_expected(),
            });
        }
        if !queues.iter().any(|q| q == name) {
            queues.push(name.to_owned());
        }
    }
    if queues.is_empty() {
        return Err(ConfigError::Invalid { key: "SLIPWAY_QUEUES", value: value.to_owned(), reason: queues_expected() });
    }
    Ok(queues)
}

/// What [`parse_queues`] expects, as its error says: `a comma-separated
/// list of the queues builds, nix, …` (every one of
/// [`crate::store::queue::KINDS`]).
fn queues_expected() -> &'static str {
    static TEXT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!("a comma-separated list of the queues {}", crate::store::queue::queue_names())
    });
    TEXT.as_str()
}

/// The built-in source shipped next to the binaries: `$SLIPWAY_DEFAULT_SOURCE_DIR`,
/// else `./nix` when it exists, else the `nix/` folder of this source tree.
fn default_source_dir() -> PathBuf {
    let here = PathBuf::from("nix");
    if here.join("core/default.nix").exists() {
        return std::fs::canonicalize(&here).unwrap_or(here);
    }
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../nix"))
}

/// Every key a configuration file may set.
pub const KEYS: &[&str] = &[
    "DATABASE_URL",
    "SLIPWAY_BIND",
    "SLIPWAY_STATE_DIR",
    "SLIPWAY_JWT_SECRET",
    "SLIPWAY_JWT_PUBLIC_KEY",
    "SLIPWAY_JWT_KEYS_FILE",
    "SLIPWAY_JWT_AUDIENCE",
    "SLIPWAY_JWT_ISSUER",
    "SLIPWAY_ALLOWED_ORIGINS",
    "SLIPWAY_CALLBACK_ALLOW_PRIVATE",
    "SLIPWAY_READINESS_CONNECT",
    "SLIPWAY_TRUSTED_SOURCES",
    "SLIPWAY_ALLOW_PATH_SOURCES",
    "SLIPWAY_DEFAULT_SOURCE_DIR",
    "SLIPWAY_SELF_SOURCE",
    "SLIPWAY_PROVIDER",
    "SLIPWAY_HEARTBEAT",
    "SLIPWAY_POSTGRES_POLL",
    "SLIPWAY_QUEUES",
    "OPENBAO_ADDR",
    "OPENBAO_TOKEN",
    "OPENBAO_MOUNT",
    "OPENBAO_ROOT",
    "NIX_SLOTS",
    "NIX_TIMEOUT",
    "BUILD_SLOTS",
    "BUILD_PREFETCH",
    "DEPLOY_TIMEOUT",
    "DESTROY_TIMEOUT",
    "DEPLOY_SBOM_TIMEOUT",
    "READY_TIMEOUT",
    "QUEUE_SIZE",
    "RETENTION",
    "SLIPWAY_METRICS_ADDR",
    "SLIPWAY_METRICS_TOKEN",
    "SLIPWAY_REQUEST_TIMEOUT",
    "SLIPWAY_BODY_TIMEOUT",
    "SLIPWAY_SHUTDOWN_GRACE",
    "SLIPWAY_STREAMS_PER_SUBJECT",
    "SLIPWAY_STREAMS_PER_API",
    "SLIPWAY_SQLITE_WAL_LIMIT",
    "SLIPWAY_CLOCK_SKEW_LIMIT",
    "SLIPWAY_SQLITE_CHECKPOINT_EVERY",
    "SLIPWAY_SANDBOX_USER",
    "SLIPWAY_SANDBOX_PATHS",
    "SLIPWAY_EFFECT_NETWORK",
    "SLIPWAY_NIX_ALLOWED_URIS",
    "SLIPWAY_NIX_REQUIRE_SANDBOX",
    "NIX_MEMORY_LIMIT",
    "SLIPWAY_OUTPUT_LIMIT",
    "SLIPWAY_NODE_LIMIT",
    "SLIPWAY_SOURCE_LIMIT",
    "SLIPWAY_GIT_PROXY",
    "SLIPWAY_GIT_SSH_KEY",
    "SLIPWAY_GIT_KNOWN_HOSTS",
    "SLIPWAY_GIT_CREDENTIALS",
    "SLIPWAY_GIT_CA_FILE",
];

/// What a binary's `--help` says of its settings: where they come from and
/// every key ([`KEYS`], then the variables read from the environment only).
pub fn settings_help() -> String {
    format!(
        "Settings come from environment variables, or from a TOML file named by SLIPWAY_CONFIG \
         (an environment variable that is set and not empty wins over the file). \
         docs/CONFIGURATION.md describes each one.\n\n\
         Keys: {}.\n\n\
         From the environment only: SLIPWAY_CONFIG, SLIPWAY_LOG (else RUST_LOG; a log filter such as info or \
         slipway=debug), SLIPWAY_LOG_FORMAT (text or json).",
        KEYS.join(", ")
    )
}

impl Config {
    /// Loads the file named by `SLIPWAY_CONFIG` (if any), then the process environment.
    pub fn load() -> Result<Self, ConfigError> {
        match std::env::var("SLIPWAY_CONFIG") {
            Ok(path) => Self::load_file(std::path::Path::new(&path), std::env::vars()),
            Err(_) => Self::from_keys(&std::env::vars().collect()),
        }
    }

    /// Loads a TOML file of §12 keys, then `env` on top of it; an empty
    /// variable of `env` leaves the file's value in place.
    pub fn load_file(path: &std::path::Path, env: impl Iterator<Item = (String, String)>) -> Result<Self, ConfigError> {
        let mut keys = BTreeMap::new();
        {
            let path = path.to_path_buf();
            let text = std::fs::read_to_string(&path)
                .map_err(|e| ConfigError::File { path: path.clone(), reason: e.to_string() })?;
            let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
                // Where: line and column (1-based) of the error's first byte.
                let at = e.span().map(|span| {
                    let before = &text[..span.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                    format!("line {line}, column {column}: ")
                });
                ConfigError::File { path: path.clone(), reason: format!("{}{}", at.unwrap_or_default(), e.message()) }
            })?;
            if let Some(unknown) = table.keys().find(|k| !KEYS.contains(&k.as_str())) {
                return Err(ConfigError::File {
                    path,
                    reason: format!(
                        "unknown key {unknown:?}; the keys are those of docs/CONFIGURATION.md: {}",
                        KEYS.join(", ")
                    ),
                });
            }
            for (k, v) in table {
                let v = match v {
                    toml::Value::String(s) => s,
                    toml::Value::Array(a) => a
                        .iter()
                        .map(|x| x.as_str().map(str::to_owned).unwrap_or_else(|| x.to_string()))
                        .collect::<Vec<_>>()
                        .join(","),
                    other => other.to_string(),
                };
                keys.insert(k, v);
            }
        }
        // An empty variable counts as unset (docs/CONFIGURATION.md): it does
        // not wipe the file's value, which would silently drop, say, a
        // configured SLIPWAY_JWT_ISSUER and with it the `iss` check.
        keys.extend(env.filter(|(_, v)| !v.is_empty()));
        let mut config = Self::from_keys(&keys)?;
        config.file = Some(std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()));
        Ok(config)
    }

    /// Builds a configuration from `KEY → value` pairs (file and environment merged).
    pub fn from_keys(keys: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let get = |k: &str| keys.get(k).map(String::as_str).filter(|v| !v.is_empty());
        let list = |k: &str| -> Vec<String> {
            get(k)
                .map(|v| v.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect())
                .unwrap_or_default()
        };
        if let Some((key, feature)) = UNSUPPORTED.iter().find(|(k, _)| get(k).is_some()) {
            return Err(ConfigError::Unsupported { key, feature });
        }
        // Folders are made absolute against the folder the process starts
        // in: effects run in folders of their own and are handed these paths.
        let folder = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
        let state_dir = folder(PathBuf::from(get("SLIPWAY_STATE_DIR").unwrap_or(".slipway")));
        Ok(Self {
            database_url: get("DATABASE_URL").unwrap_or("sqlite://.slipway/slipway.db").to_owned(),
            bind: get("SLIPWAY_BIND").unwrap_or("127.0.0.1:8080").to_owned(),
            state_dir,
            jwt_secret: get("SLIPWAY_JWT_SECRET").map(|s| SecretString::from(s.to_owned())),
            jwt_public_key: get("SLIPWAY_JWT_PUBLIC_KEY").map(str::to_owned),
            jwt_keys_file: get("SLIPWAY_JWT_KEYS_FILE").map(|p| folder(PathBuf::from(p))),
            jwt_audience: get("SLIPWAY_JWT_AUDIENCE").unwrap_or("slipway").to_owned(),
            jwt_issuer: get("SLIPWAY_JWT_ISSUER").map(str::to_owned),
            allowed_origins: Origins::parse(list("SLIPWAY_ALLOWED_ORIGINS")).map_err(|e| ConfigError::Invalid {
                key: "SLIPWAY_ALLOWED_ORIGINS",
                value: e.entry,
                reason: e.reason,
            })?,
            callback_allow_private: boolean(keys, "SLIPWAY_CALLBACK_ALLOW_PRIVATE", false)?,
            readiness_connect: match keys.get("SLIPWAY_READINESS_CONNECT") {
                Some(_) => list("SLIPWAY_READINESS_CONNECT"),
                None => vec![crate::readiness::LOCAL_FRONT_DOOR.to_owned()],
            },
            trusted_sources: match keys.get("SLIPWAY_TRUSTED_SOURCES") {
                Some(_) => list("SLIPWAY_TRUSTED_SOURCES"),
                None => vec![crate::source::PROJECT_REPOSITORY.to_owned()],
            },
            allow_path_sources: boolean(keys, "SLIPWAY_ALLOW_PATH_SOURCES", false)?,
            default_source_dir: folder(
                get("SLIPWAY_DEFAULT_SOURCE_DIR").map(PathBuf::from).unwrap_or_else(default_source_dir),
            ),
            self_source: get("SLIPWAY_SELF_SOURCE").map(str::to_owned),
            provider: get("SLIPWAY_PROVIDER").unwrap_or("local").to_owned(),
            nix_timeout: duration(keys, "NIX_TIMEOUT", 300)?,
            nix_slots: number(keys, "NIX_SLOTS", 2)?,
            openbao: OpenBaoConfig::from_keys(|k| get(k).map(str::to_owned))?,
            queues: parse_queues(get("SLIPWAY_QUEUES"))?,
            build_slots: number(keys, "BUILD_SLOTS", 4)?,
            build_prefetch: match keys.get("BUILD_PREFETCH").filter(|v| !v.is_empty()) {
                None => None,
                Some(_) => Some(number(keys, "BUILD_PREFETCH", 1)?),
            },
            deploy_timeout: duration(keys, "DEPLOY_TIMEOUT", 3600)?,
            destroy_timeout: duration(keys, "DESTROY_TIMEOUT", 1800)?,
            deploy_sbom_timeout: duration(keys, "DEPLOY_SBOM_TIMEOUT", 600)?,
            ready_timeout: duration(keys, "READY_TIMEOUT", 600)?,
            queue_size: number(keys, "QUEUE_SIZE", 1000)?,
            retention: duration(keys, "RETENTION", 14 * 86400)?,
            heartbeat: duration(keys, "SLIPWAY_HEARTBEAT", 5)?,
            postgres_poll: duration(keys, "SLIPWAY_POSTGRES_POLL", crate::store::queue::POSTGRES_POLL.as_secs())?,
            metrics_addr: match get("SLIPWAY_METRICS_ADDR") {
                None => None,
                Some(addr) => Some(
                    addr.trim()
                        .parse::<std::net::SocketAddr>()
                        .map_err(|_| ConfigError::Invalid {
                            key: "SLIPWAY_METRICS_ADDR",
                            value: addr.to_owned(),
                            reason: "expected an IP address and a port, such as 127.0.0.1:9185",
                        })?
                        .to_string(),
                ),
            },
            metrics_token: get("SLIPWAY_METRICS_TOKEN")
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(|t| SecretString::from(t.to_owned())),
            request_timeout: duration(keys, "SLIPWAY_REQUEST_TIMEOUT", 30)?,
            body_timeout: duration(keys, "SLIPWAY_BODY_TIMEOUT", 60)?,
            shutdown_grace: duration(keys, "SLIPWAY_SHUTDOWN_GRACE", 10)?,
            streams_per_subject: number(keys, "SLIPWAY_STREAMS_PER_SUBJECT", 100)?,
            streams_per_api: number(keys, "SLIPWAY_STREAMS_PER_API", 10_000)?,
            sqlite_wal_limit: sandbox::size(keys, "SLIPWAY_SQLITE_WAL_LIMIT", crate::store::SQLITE_WAL_LIMIT)?,
            clock_skew_limit: duration(keys, "SLIPWAY_CLOCK_SKEW_LIMIT", 2)?,
            sqlite_checkpoint_every: duration(keys, "SLIPWAY_SQLITE_CHECKPOINT_EVERY", 30)?,
            sandbox: SandboxConfig::from_keys(keys)?,
            git: GitConfig::from_keys(keys)?,
            file: None,
        })
    }

    /// The SQLite file of a `sqlite://` database URL, if it is one.
    pub fn sqlite_path(&self) -> Option<PathBuf> {
        let rest = self.database_url.strip_prefix("sqlite://").or_else(|| self.database_url.strip_prefix("sqlite:"))?;
        let rest = rest.split('?').next().unwrap_or(rest);
        Some(PathBuf::from(rest))
    }
}

fn number(keys: &BTreeMap<String, String>, key: &'static str, default: u32) -> Result<u32, ConfigError> {
    match keys.get(key).filter(|v| !v.is_empty()) {
        None => Ok(default),
        Some(v) => v.trim().parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| ConfigError::Invalid {
            key,
            value: v.clone(),
            reason: "expected a whole number from 1 to 4294967295",
        }),
    }
}

fn boolean(keys: &BTreeMap<String, String>, key: &'static str, default: bool) -> Result<bool, ConfigError> {
    match keys.get(key).map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("") => Ok(default),
        Some("1" | "true" | "yes" | "on") => Ok(true),
        Some("0" | "false" | "no" | "off") => Ok(false),
        Some(_) => Err(ConfigError::Invalid { key, value: keys[key].clone(), reason: "expected true or false" }),
    }
}

/// The log filter when neither `SLIPWAY_LOG` nor `RUST_LOG` is set: `info`,
/// with sqlx's and apalis's chatter (every statement, every poll) at `warn`,
/// and none of apalis's own lines about a queue worker that stopped with an
/// error (`apalis_core::worker`, `apalis_core::monitor`): the worker's
/// supervisor logs that error once, where it restarts the queue worker,
/// rather than apalis at every restart.
pub const DEFAULT_LOG_FILTER: &str = "info,sqlx=warn,apalis=warn,apalis_core::worker=off,apalis_core::monitor=off";

/// The log filter of both binaries, in `RUST_LOG` syntax, and the variable it
/// came from: `SLIPWAY_LOG` when set, else `RUST_LOG` when set, else
/// [`DEFAULT_LOG_FILTER`] (named `"default"`). An empty value counts as
/// unset. `var` reads the environment (`|k| std::env::var(k).ok()`).
pub fn log_filter(var: impl Fn(&str) -> Option<String>) -> (&'static str, String) {
    for name in ["SLIPWAY_LOG", "RUST_LOG"] {
        if let Some(filter) = var(name).filter(|v| !v.trim().is_empty()) {
            return (name, filter);
        }
    }
    ("default", DEFAULT_LOG_FILTER.to_owned())
}

/// Parses `300`, `300s`, `5m`, `1h` or `14d`.
pub fn parse_duration(v: &str) -> Option<Duration> {
    let v = v.trim();
    let (digits, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len()));
    let n: u64 = digits.parse().ok()?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86400,
        _ => return None,
    };
    Some(Duration::from_secs(secs))
}

fn duration(keys: &BTreeMap<String, String>, key: &'static str, default_secs: u64) -> Result<Duration, ConfigError> {
    match keys.get(key).filter(|v| !v.is_empty()) {
        None => Ok(Duration::from_secs(default_secs)),
        Some(v) => parse_duration(v).filter(|d| !d.is_zero()).ok_or_else(|| ConfigError::Invalid {
            key,
            value: v.clone(),
            reason: "expected a duration such as 300, 90s, 5m, 1h or 14d",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_specification() {
        let c = Config::from_keys(&BTreeMap::new()).unwrap();
        assert_eq!(c.database_url, "sqlite://.slipway/slipway.db");
        assert_eq!(c.bind, "127.0.0.1:8080");
        assert_eq!(c.build_slots, 4);
        assert_eq!(c.build_prefetch, None);
        assert_eq!(c.deploy_timeout, Duration::from_secs(3600));
        assert_eq!(c.retention, Duration::from_secs(14 * 86400));
        assert_eq!(c.jwt_audience, "slipway");
        assert_eq!(c.request_timeout, Duration::from_secs(30));
        assert_eq!(c.body_timeout, Duration::from_secs(60));
        assert_eq!(c.shutdown_grace, Duration::from_secs(10));
        assert_eq!((c.streams_per_subject, c.streams_per_api), (100, 10_000));
        assert_eq!((c.sqlite_wal_limit, c.sqlite_checkpoint_every), (64 << 20, Duration::from_secs(30)));
        assert_eq!(c.clock_skew_limit, Duration::from_secs(2));
    }

    #[test]
    fn a_list_of_queues_names_known_queues_and_at_least_one() {
        assert_eq!(parse_queues(None).unwrap(), ["builds", "nix", "callbacks", "readiness", "maintenance"]);
        assert_eq!(parse_queues(Some(" nix, nix ")).unwrap(), ["nix"]);
        for bad in [",", "bogus", "nix,bogus", "NIX"] {
            assert!(parse_queues(Some(bad)).is_err(), "{bad}");
        }
    }

    fn openbao(pairs: &[(&str, &str)]) -> Result<Option<OpenBaoConfig>, String> {
        let keys = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_keys(&keys).map(|c| c.openbao).map_err(|e| e.to_string())
    }

    #[test]
    fn openbao_is_configured_only_by_an_address_and_takes_the_default_mount_and_root() {
        assert!(openbao(&[]).unwrap().is_none());
        assert!(openbao(&[("OPENBAO_ADDR", ""), ("OPENBAO_MOUNT", "kv")]).unwrap().is_none());
        let c = openbao(&[("OPENBAO_ADDR", "http://127.0.0.1:8200/"), ("OPENBAO_TOKEN", "s.tok")]).unwrap().unwrap();
        assert_eq!(
            (c.addr.as_str(), c.mount.as_str(), c.root.as_str()),
            ("http://127.0.0.1:8200", "secret", "deployments")
        );
        let c = openbao(&[
            ("OPENBAO_ADDR", "https://bao.example/proxy/"),
            ("OPENBAO_TOKEN", "s.tok\n"),
            ("OPENBAO_MOUNT", "/team/kv/"),
            ("OPENBAO_ROOT", "slipway/deployments"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (c.addr.as_str(), c.mount.as_str(), c.root.as_str()),
            ("https://bao.example/proxy", "team/kv", "slipway/deployments")
        );
        use secrecy::ExposeSecret;
        assert_eq!(c.token.expose_secret(), "s.tok");
    }

    #[test]
    fn an_openbao_address_without_a_token_names_the_missing_key() {
        for token in [None, Some(""), Some("  ")] {
            let mut pairs = vec![("OPENBAO_ADDR", "http://127.0.0.1:8200")];
            pairs.extend(token.map(|t| ("OPENBAO_TOKEN", t)));
            let err = openbao(&pairs).unwrap_err();
            assert!(err.starts_with("OPENBAO_TOKEN is not set"), "{err}");
        }
        let err = openbao(&[("OPENBAO_TOKEN", "s.never-shown")]).unwrap_err();
        assert!(err.starts_with("OPENBAO_ADDR is not set"), "{err}");
        assert!(!err.contains("s.never-shown"), "the token is echoed: {err}");
    }

    #[test]
    fn a_malformed_openbao_key_is_named_and_the_token_never_shows() {
        let token = ("OPENBAO_TOKEN", "s.never-shown");
        for (key, value) in [
            ("OPENBAO_ADDR", "127.0.0.1:8200"),
            ("OPENBAO_ADDR", "ftp://bao.example"),
            ("OPENBAO_ADDR", "http://bao.example/?x=1"),
            ("OPENBAO_ADDR", "http://user:s.never-shown@bao.example"),
            ("OPENBAO_MOUNT", "a//b"),
            ("OPENBAO_MOUNT", "../secret"),
            ("OPENBAO_MOUNT", "sec ret"),
            ("OPENBAO_ROOT", "."),
            ("OPENBAO_ROOT", "deploy%2Fments"),
            ("OPENBAO_ROOT", "/"),
        ] {
            let mut pairs = vec![("OPENBAO_ADDR", "http://127.0.0.1:8200"), token];
            pairs.retain(|(k, _)| *k != key);
            pairs.push((key, value));
            let err = openbao(&pairs).unwrap_err();
            assert!(err.starts_with(&format!("{key}:")), "{value}: {err}");
            assert!(!err.contains("never-shown"), "the token is echoed: {err}");
        }
    }

    #[test]
    fn the_debug_form_of_a_configuration_never_shows_the_openbao_token() {
        let keys = BTreeMap::from([
            ("OPENBAO_ADDR".to_owned(), "http://127.0.0.1:8200".to_owned()),
            ("OPENBAO_TOKEN".to_owned(), "s.never-shown".to_owned()),
        ]);
        let c = Config::from_keys(&keys).unwrap();
        let debug = format!("{c:?} {:?} {:#?}", c.openbao, c.openbao);
        assert!(debug.contains("http://127.0.0.1:8200") && !debug.contains("never-shown"), "{debug}");
    }

    #[test]
    fn a_key_of_a_feature_this_release_does_not_have_is_refused_by_name() {
        for (key, _) in UNSUPPORTED {
            let keys = BTreeMap::from([(key.to_string(), "something".to_owned())]);
            let err = Config::from_keys(&keys).unwrap_err().to_string();
            assert!(err.starts_with(key) && err.contains("not supported by this release"), "{err}");
            assert!(!err.contains("something"), "the value is echoed: {err}");
        }
    }

    #[test]
    fn relative_folders_are_taken_from_the_starting_folder() {
        let keys = BTreeMap::from([
            ("SLIPWAY_STATE_DIR".to_owned(), "state".to_owned()),
            ("SLIPWAY_DEFAULT_SOURCE_DIR".to_owned(), "nix".to_owned()),
        ]);
        let c = Config::from_keys(&keys).unwrap();
        let here = std::env::current_dir().unwrap();
        assert_eq!((c.state_dir, c.default_source_dir), (here.join("state"), here.join("nix")));
        let c = Config::from_keys(&BTreeMap::new()).unwrap();
        assert!(c.state_dir.is_absolute(), "{}", c.state_dir.display());
    }

    #[test]
    fn a_token_keys_file_is_taken_from_the_starting_folder() {
        let keys = BTreeMap::from([("SLIPWAY_JWT_KEYS_FILE".to_owned(), "keys/jwks.json".to_owned())]);
        let c = Config::from_keys(&keys).unwrap();
        assert_eq!(c.jwt_keys_file, Some(std::env::current_dir().unwrap().join("keys/jwks.json")));
        assert_eq!(Config::from_keys(&BTreeMap::new()).unwrap().jwt_keys_file, None);
    }

    #[test]
    fn a_metrics_address_must_be_an_ip_and_a_port_and_the_token_never_shows() {
        let keys = BTreeMap::from([("SLIPWAY_METRICS_ADDR".to_owned(), "localhost".to_owned())]);
        let err = Config::from_keys(&keys).unwrap_err().to_string();
        assert!(err.starts_with("SLIPWAY_METRICS_ADDR:"), "{err}");
        let keys = BTreeMap::from([
            ("SLIPWAY_METRICS_ADDR".to_owned(), " 127.0.0.1:9185".to_owned()),
            ("SLIPWAY_METRICS_TOKEN".to_owned(), "m.never-shown".to_owned()),
        ]);
        let c = Config::from_keys(&keys).unwrap();
        assert_eq!(c.metrics_addr.as_deref(), Some("127.0.0.1:9185"));
        assert!(!format!("{c:?}").contains("never-shown"), "the metrics token shows in {c:?}");
        assert!(Config::from_keys(&BTreeMap::new()).unwrap().metrics_addr.is_none());
    }

    #[test]
    fn a_malformed_value_names_its_key() {
        let keys = BTreeMap::from([("DEPLOY_TIMEOUT".to_owned(), "soon".to_owned())]);
        let err = Config::from_keys(&keys).unwrap_err().to_string();
        assert!(err.starts_with("DEPLOY_TIMEOUT:"), "{err}");
    }

    #[test]
    fn a_configuration_file_with_an_unknown_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("slipway.toml");
        std::fs::write(&file, "DATABASE_URL = \"sqlite://x.db\"\nBUILD_SLOT = 3\n").unwrap();
        let err = Config::load_file(&file, std::iter::empty()).unwrap_err().to_string();
        assert!(err.contains("BUILD_SLOT"), "{err}");
    }

    #[test]
    fn a_configuration_file_that_is_not_toml_is_refused_with_the_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("slipway.toml");
        std::fs::write(&file, "BUILD_SLOTS = 3\nQUEUE_SIZE = = 7\n").unwrap();
        let err = Config::load_file(&file, std::iter::empty()).unwrap_err().to_string();
        assert!(err.contains("line 2, column "), "{err}");
    }

    #[test]
    fn a_number_out_of_range_is_refused_by_its_key_with_the_range() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("slipway.toml");
        std::fs::write(&file, "QUEUE_SIZE = 5000000000\n").unwrap();
        let err = Config::load_file(&file, std::iter::empty()).unwrap_err().to_string();
        assert!(err.starts_with("QUEUE_SIZE:") && err.contains("4294967295"), "{err}");
    }

    #[test]
    fn the_environment_wins_over_the_configuration_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("slipway.toml");
        std::fs::write(&file, "BUILD_SLOTS = 3\nQUEUE_SIZE = 7\n").unwrap();
        let env = [("BUILD_SLOTS".to_owned(), "5".to_owned())];
        let c = Config::load_file(&file, env.into_iter()).unwrap();
        assert_eq!((c.build_slots, c.queue_size), (5, 7));
    }

    #[test]
    fn an_empty_variable_leaves_the_configuration_file_value_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("slipway.toml");
        std::fs::write(&file, "SLIPWAY_JWT_ISSUER = \"https://panel.example\"\nSLIPWAY_JWT_AUDIENCE = \"panel\"\n")
            .unwrap();
        let env =
            [("SLIPWAY_JWT_ISSUER".to_owned(), String::new()), ("SLIPWAY_JWT_AUDIENCE".to_owned(), String::new())];
        let c = Config::load_file(&file, env.into_iter()).unwrap();
        assert_eq!((c.jwt_issuer.as_deref(), c.jwt_audience.as_str()), (Some("https://panel.example"), "panel"));
    }

    #[test]
    fn slipway_log_wins_over_rust_log_which_wins_over_the_default() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let both = &[("SLIPWAY_LOG", "debug"), ("RUST_LOG", "trace")];
        assert_eq!(log_filter(env(both)), ("SLIPWAY_LOG", "debug".to_owned()));
        assert_eq!(log_filter(env(&[("RUST_LOG", "warn")])), ("RUST_LOG", "warn".to_owned()));
        let empty = &[("SLIPWAY_LOG", ""), ("RUST_LOG", "warn")];
        assert_eq!(log_filter(env(empty)), ("RUST_LOG", "warn".to_owned()));
        assert_eq!(log_filter(env(&[])), ("default", DEFAULT_LOG_FILTER.to_owned()));
    }

    /// The operator's reference is in the project: every key, the variables
    /// read outside [`KEYS`], and error messages that point to it.
    #[test]
    fn every_key_is_documented_in_docs_configuration() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/CONFIGURATION.md");
        let doc = std::fs::read_to_string(path).expect("docs/CONFIGURATION.md");
        let missing: Vec<&str> = KEYS
            .iter()
            .copied()
            .chain(["SLIPWAY_CONFIG", "SLIPWAY_LOG", "RUST_LOG", "SLIPWAY_LOG_FORMAT"])
            .filter(|k| !doc.contains(&format!("`{k}`")))
            .collect();
        assert!(missing.is_empty(), "not in docs/CONFIGURATION.md: {missing:?}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("slipway.toml");
        std::fs::write(&file, "BUILD_SLOT = 3\n").unwrap();
        let err = Config::load_file(&file, std::iter::empty()).unwrap_err().to_string();
        assert!(err.contains("docs/CONFIGURATION.md"), "{err}");
    }

    /// The operator's documents stand on their own: they never send the
    /// reader to files outside the project.
    #[test]
    fn the_operator_documents_point_only_inside_the_project() {
        for doc in ["README.md", "docs/CONFIGURATION.md"] {
            let path = format!("{}/../{doc}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap().to_lowercase();
            for outside in ["product.md", "../shared", "seeds/", "seed 0"] {
                assert!(!text.contains(outside), "{doc} mentions {outside}");
            }
        }
    }

    #[test]
    fn allowed_origins_are_normalised_and_a_bad_one_is_named_with_its_key() {
        let keys = BTreeMap::from([(
            "SLIPWAY_ALLOWED_ORIGINS".to_owned(),
            "https://Panel.example:443, http://localhost:3000/".to_owned(),
        )]);
        let c = Config::from_keys(&keys).unwrap();
        assert_eq!(c.allowed_origins.iter().collect::<Vec<_>>(), ["https://panel.example", "http://localhost:3000"]);
        assert!(!c.callback_allow_private);
        let keys = BTreeMap::from([(
            "SLIPWAY_ALLOWED_ORIGINS".to_owned(),
            "https://panel.example,https://panel.example/app".to_owned(),
        )]);
        let err = Config::from_keys(&keys).unwrap_err().to_string();
        assert!(err.starts_with("SLIPWAY_ALLOWED_ORIGINS:") && err.contains("\"https://panel.example/app\""), "{err}");
        let keys = BTreeMap::from([("SLIPWAY_CALLBACK_ALLOW_PRIVATE".to_owned(), "true".to_owned())]);
        assert!(Config::from_keys(&keys).unwrap().callback_allow_private);
    }

    #[test]
    fn an_empty_trusted_sources_list_allows_all() {
        let keys = BTreeMap::from([("SLIPWAY_TRUSTED_SOURCES".to_owned(), String::new())]);
        assert!(Config::from_keys(&keys).unwrap().trusted_sources.is_empty());
    }
}
