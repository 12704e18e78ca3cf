//! The one typed configuration of both binaries (PRODUCT.md §12).
//!
//! Keys are the environment variable names of §12, each documented for
//! operators in `docs/CONFIGURATION.md` (a test keeps [`KEYS`] and that file
//! together). A TOML file named by `SLIPWAY_CONFIG` may set the same keys
//! (`DATABASE_URL = "sqlite://…"`); the environment wins over the file.
//! Loaded once at start-up and passed down; nothing reads the environment
//! afterwards. The log filter ([`log_filter`]) is read before the
//! configuration, so that loading it can be logged.
//!
//! One loader ([`Config::from_keys`]) reads every key; [`Config`] groups
//! them by who reads them: [`ApiConfig`] (`config/api.rs`),
//! [`WorkerConfig`] (`config/worker.rs`), [`SourcesConfig`] (module sources
//! and the `nix` queue), [`DatabaseConfig`], [`MetricsConfig`],
//! [`OpenBaoConfig`] (`config/openbao.rs`, with its own key checks) and the
//! sandbox's and git's settings (`config/sandbox.rs`); what both binaries
//! read stays at the top. Unit tests: `config/tests.rs`.

mod api;
mod database;
mod metrics;
mod openbao;
mod rollouts;
mod safe_change;
mod sandbox;
mod sources;
mod tenancy;
mod webhooks;
mod worker;

pub use api::ApiConfig;
pub use database::DatabaseConfig;
pub use metrics::MetricsConfig;
pub use openbao::OpenBaoConfig;
pub use rollouts::RolloutsConfig;
pub use safe_change::SafeChangeConfig;
pub use sandbox::{parse_size, GitConfig, SandboxConfig};
pub use sources::SourcesConfig;
pub use tenancy::TenancyConfig;
pub use webhooks::WebhooksConfig;
pub use worker::WorkerConfig;

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

/// Slipway's configuration (PRODUCT.md §12). Durations are whole seconds
/// unless a unit is given (`90s`, `5m`, `1h`, `14d`).
#[derive(Debug, Clone)]
pub struct Config {
    /// `DATABASE_URL` and how the database is kept (`SLIPWAY_POSTGRES_POLL`,
    /// `SLIPWAY_SQLITE_*`).
    pub database: DatabaseConfig,
    /// `SLIPWAY_STATE_DIR`: work dirs, caches, local-provider state; made
    /// absolute against the starting folder.
    pub state_dir: PathBuf,
    /// `SLIPWAY_HEARTBEAT`: worker heartbeat interval; a worker missing two
    /// beats has its builds picked up by another worker.
    pub heartbeat: Duration,
    /// `SLIPWAY_CLOCK_SKEW_LIMIT`: how far this host's wall clock may be
    /// from the database's before the process warns (log, `/readyz`,
    /// `slipway_clock_skew_seconds`), default 2 s. Shared times come from
    /// the database's clock whatever the skew; the warning is for
    /// the host's time synchronisation.
    pub clock_skew_limit: Duration,
    /// `SLIPWAY_ALLOWED_ORIGINS`: the CORS allowlist, also the only origins
    /// a delete's callback may point to (DL-2); comma separated origins,
    /// kept as a browser serialises them (see [`Origins`]). Empty by default.
    pub allowed_origins: Origins,
    /// `SLIPWAY_CALLBACK_ALLOW_PRIVATE`: let a reconcile push connect to
    /// loopback, private and other addresses that
    /// [`crate::callback::forbidden_address`] refuses (development only).
    /// Default `false`.
    pub callback_allow_private: bool,
    /// What only the api reads (`SLIPWAY_BIND`, `SLIPWAY_JWT_*`,
    /// `QUEUE_SIZE`, the request timeouts, the stream caps).
    pub api: ApiConfig,
    /// What only a worker reads (`SLIPWAY_QUEUES`, `BUILD_*`, the effects'
    /// timeouts, `READY_TIMEOUT`, `RETENTION`, `SLIPWAY_READINESS_CONNECT`).
    pub worker: WorkerConfig,
    /// Module sources and the `nix` queue (`SLIPWAY_TRUSTED_SOURCES`,
    /// `SLIPWAY_ALLOW_PATH_SOURCES`, `SLIPWAY_DEFAULT_SOURCE_DIR`,
    /// `SLIPWAY_SELF_SOURCE`, `SLIPWAY_PROVIDER`, `NIX_TIMEOUT`, `NIX_SLOTS`).
    pub sources: SourcesConfig,
    /// `OPENBAO_ADDR`, `OPENBAO_TOKEN`, `OPENBAO_MOUNT`, `OPENBAO_ROOT`
    /// (PRODUCT.md §8): where operator secrets live; `None` when
    /// `OPENBAO_ADDR` is unset (a submit with a secret value is then refused).
    pub openbao: Option<OpenBaoConfig>,
    /// Plans, rollbacks and health gates (`PLAN_TTL`, `KEEP_GENERATIONS`,
    /// `HEALTH_GATE`).
    pub safe_change: SafeChangeConfig,
    /// Safe retries and tenants (`SLIPWAY_IDEMPOTENCY_TTL`,
    /// `SLIPWAY_IDEMPOTENCY_LEASE`, `SLIPWAY_TENANT_CLAIM`,
    /// `TENANT_BUILD_SLOTS`, `TENANT_QUEUE_SIZE`).
    pub tenancy: TenancyConfig,
    /// Webhook deliveries (`WEBHOOK_RETRY_WINDOW`, `WEBHOOK_POLL`,
    /// `WEBHOOK_TIMEOUT`; WH-1).
    pub webhooks: WebhooksConfig,
    /// Rollouts' bounds (`ROLLOUT_MAX_DEPLOYMENTS`).
    pub rollouts: RolloutsConfig,
    /// A worker's metrics address and the scrape token of both binaries
    /// (`SLIPWAY_METRICS_ADDR`, `SLIPWAY_METRICS_TOKEN`).
    pub metrics: MetricsConfig,
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
    "PLAN_TTL",
    "KEEP_GENERATIONS",
    "HEALTH_GATE",
    "WEBHOOK_RETRY_WINDOW",
    "WEBHOOK_POLL",
    "WEBHOOK_TIMEOUT",
    "ROLLOUT_MAX_DEPLOYMENTS",
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
    "SLIPWAY_IDEMPOTENCY_TTL",
    "SLIPWAY_IDEMPOTENCY_LEASE",
    "SLIPWAY_TENANT_CLAIM",
    "TENANT_BUILD_SLOTS",
    "TENANT_QUEUE_SIZE",
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
        // Each key parsed in this order, so that the first bad key named is
        // the same whatever the grouping below.
        let database_url = get("DATABASE_URL").unwrap_or("sqlite://.slipway/slipway.db").to_owned();
        let bind = get("SLIPWAY_BIND").unwrap_or("127.0.0.1:8080").to_owned();
        let jwt_secret = get("SLIPWAY_JWT_SECRET").map(|s| SecretString::from(s.to_owned()));
        let jwt_public_key = get("SLIPWAY_JWT_PUBLIC_KEY").map(str::to_owned);
        let jwt_keys_file = get("SLIPWAY_JWT_KEYS_FILE").map(|p| folder(PathBuf::from(p)));
        let jwt_audience = get("SLIPWAY_JWT_AUDIENCE").unwrap_or("slipway").to_owned();
        let jwt_issuer = get("SLIPWAY_JWT_ISSUER").map(str::to_owned);
        let allowed_origins = Origins::parse(list("SLIPWAY_ALLOWED_ORIGINS")).map_err(|e| ConfigError::Invalid {
            key: "SLIPWAY_ALLOWED_ORIGINS",
            value: e.entry,
            reason: e.reason,
        })?;
        let callback_allow_private = boolean(keys, "SLIPWAY_CALLBACK_ALLOW_PRIVATE", false)?;
        let readiness_connect = match keys.get("SLIPWAY_READINESS_CONNECT") {
            Some(_) => list("SLIPWAY_READINESS_CONNECT"),
            None => vec![crate::probe::LOCAL_FRONT_DOOR.to_owned()],
        };
        let trusted_sources = match keys.get("SLIPWAY_TRUSTED_SOURCES") {
            Some(_) => list("SLIPWAY_TRUSTED_SOURCES"),
            None => vec![crate::source::PROJECT_REPOSITORY.to_owned()],
        };
        let allow_path_sources = boolean(keys, "SLIPWAY_ALLOW_PATH_SOURCES", false)?;
        let default_source_dir =
            folder(get("SLIPWAY_DEFAULT_SOURCE_DIR").map(PathBuf::from).unwrap_or_else(default_source_dir));
        let self_source = get("SLIPWAY_SELF_SOURCE").map(str::to_owned);
        let provider = get("SLIPWAY_PROVIDER").unwrap_or("local").to_owned();
        let nix_timeout = duration(keys, "NIX_TIMEOUT", 300)?;
        let nix_slots = number(keys, "NIX_SLOTS", 2)?;
        let openbao = OpenBaoConfig::from_keys(|k| get(k).map(str::to_owned))?;
        let queues = parse_queues(get("SLIPWAY_QUEUES"))?;
        let build_slots = number(keys, "BUILD_SLOTS", 4)?;
        let build_prefetch = match keys.get("BUILD_PREFETCH").filter(|v| !v.is_empty()) {
            None => None,
            Some(_) => Some(number(keys, "BUILD_PREFETCH", 1)?),
        };
        let deploy_timeout = duration(keys, "DEPLOY_TIMEOUT", 3600)?;
        let destroy_timeout = duration(keys, "DESTROY_TIMEOUT", 1800)?;
        let deploy_sbom_timeout = duration(keys, "DEPLOY_SBOM_TIMEOUT", 600)?;
        let ready_timeout = duration(keys, "READY_TIMEOUT", 600)?;
        let queue_size = number(keys, "QUEUE_SIZE", 1000)?;
        let retention = duration(keys, "RETENTION", 14 * 86400)?;
        let plan_ttl = duration(keys, "PLAN_TTL", 3600)?;
        let webhooks = WebhooksConfig {
            retry_window: duration(keys, "WEBHOOK_RETRY_WINDOW", 86_400)?,
            poll: duration(keys, "WEBHOOK_POLL", 2)?,
            attempt_timeout: duration(keys, "WEBHOOK_TIMEOUT", 10)?,
        };
        let keep_generations = number(keys, "KEEP_GENERATIONS", 5)?;
        let rollout_max_deployments = number(keys, "ROLLOUT_MAX_DEPLOYMENTS", 10_000)?;
        let health_gate = match get("HEALTH_GATE").map(str::trim).filter(|v| *v != "off") {
            None => None,
            Some(v) => Some(crate::provenance::HealthGate::from_setting(v).map_err(|_| ConfigError::Invalid {
                key: "HEALTH_GATE",
                value: v.to_owned(),
                reason: "expected off, a duration from 1s to 24h, or one followed by ,rollback (such as 5m,rollback)",
            })?),
        };
        let heartbeat = duration(keys, "SLIPWAY_HEARTBEAT", 5)?;
        let postgres_poll = duration(keys, "SLIPWAY_POSTGRES_POLL", crate::store::queue::POSTGRES_POLL.as_secs())?;
        let metrics_addr = match get("SLIPWAY_METRICS_ADDR") {
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
        };
        let metrics_token = get("SLIPWAY_METRICS_TOKEN")
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| SecretString::from(t.to_owned()));
        let request_timeout = duration(keys, "SLIPWAY_REQUEST_TIMEOUT", 30)?;
        let body_timeout = duration(keys, "SLIPWAY_BODY_TIMEOUT", 60)?;
        let shutdown_grace = duration(keys, "SLIPWAY_SHUTDOWN_GRACE", 10)?;
        let streams_per_subject = number(keys, "SLIPWAY_STREAMS_PER_SUBJECT", 100)?;
        let streams_per_api = number(keys, "SLIPWAY_STREAMS_PER_API", 10_000)?;
        let sqlite_wal_limit = sandbox::size(keys, "SLIPWAY_SQLITE_WAL_LIMIT", crate::store::SQLITE_WAL_LIMIT)?;
        let clock_skew_limit = duration(keys, "SLIPWAY_CLOCK_SKEW_LIMIT", 2)?;
        let sqlite_checkpoint_every = duration(keys, "SLIPWAY_SQLITE_CHECKPOINT_EVERY", 30)?;
        let sandbox = SandboxConfig::from_keys(keys)?;
        let git = GitConfig::from_keys(keys)?;
        let tenancy = TenancyConfig::from_keys(keys)?;
        Ok(Self {
            database: DatabaseConfig { url: database_url, postgres_poll, sqlite_wal_limit, sqlite_checkpoint_every },
            state_dir,
            heartbeat,
            clock_skew_limit,
            allowed_origins,
            callback_allow_private,
            api: ApiConfig {
                bind,
                jwt_secret,
                jwt_public_key,
                jwt_keys_file,
                jwt_audience,
                jwt_issuer,
                queue_size,
                request_timeout,
                body_timeout,
                shutdown_grace,
                streams_per_subject,
                streams_per_api,
            },
            worker: WorkerConfig {
                queues,
                build_slots,
                build_prefetch,
                deploy_timeout,
                destroy_timeout,
                deploy_sbom_timeout,
                ready_timeout,
                retention,
                readiness_connect,
            },
            sources: SourcesConfig {
                trusted_sources,
                allow_path_sources,
                default_source_dir,
                self_source,
                provider,
                nix_timeout,
                nix_slots,
            },
            openbao,
            safe_change: SafeChangeConfig { plan_ttl, keep_generations, health_gate },
            tenancy,
            webhooks,
            rollouts: RolloutsConfig { max_deployments: rollout_max_deployments },
            metrics: MetricsConfig { addr: metrics_addr, token: metrics_token },
            sandbox,
            git,
            file: None,
        })
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
mod tests;
