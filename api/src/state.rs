//! The application state every handler takes: [`App`], shared as
//! [`AppState`] (`State(state): State<AppState>`).

use crate::auth::Verifier;
use crate::database_health::DatabaseHealth;
use slipway_jobs::config::Config;
use slipway_jobs::source::fleet::FleetSources;
use slipway_jobs::store::Db;
use slipway_jobs::validate::Checker;
use std::sync::Arc;

/// Everything a handler needs, shared by reference.
#[derive(Debug)]
pub struct App {
    /// The configuration (§12).
    pub config: Config,
    /// The database.
    pub db: Db,
    /// Token verification (SEC-1) with the keys live now (SEC-4: those of
    /// a keys file are reloaded by [`crate::rotation::watch`]).
    pub verifier: Verifier,
    /// The module sources a submit is checked against: the built-in one,
    /// its outputs baked in and its schema compiled (MS-5), and any allowed
    /// source's outputs built on the `nix` queue and cached (MS-6), under
    /// the policy of MS-1, MS-6, MS-8.
    pub sources: FleetSources,
    /// Whether the database is away: outages are logged once each.
    pub database_health: DatabaseHealth,
    /// Queues last seen with waiting jobs and no live worker, so
    /// each such stretch is logged once.
    pub unserved: std::sync::Mutex<std::collections::HashMap<String, bool>>,
    /// Wakes the deployment channels this process streams (DL-3).
    pub hub: slipway_jobs::channel::Hub,
    /// Where a submit's operator secrets go (§8), with the api's token;
    /// `None` without `OPENBAO_ADDR` (a secret value is then refused).
    pub secrets: Option<slipway_jobs::openbao::OpenBao>,
    /// The api's OpenBao token, looked after (renewed) in the background
    /// ([`slipway_jobs::openbao_token`]); `None` without `OPENBAO_ADDR`, or
    /// when the app was built outside a tokio runtime.
    pub openbao_token: Option<slipway_jobs::openbao_token::TokenWatch>,
    /// This process's metrics (docs/METRICS.md), served by `GET /metrics`.
    pub metrics: slipway_jobs::metrics::Metrics,
    /// The event streams open now, under `SLIPWAY_STREAMS_PER_SUBJECT` and
    /// `SLIPWAY_STREAMS_PER_API`.
    pub streams: crate::stream_caps::StreamCaps,
    /// The keeper of the SQLite write-ahead log (`None` on PostgreSQL); its
    /// rounds run in `main`, its warning shows in `/readyz`.
    pub wal: Option<slipway_jobs::sqlite_wal::WalKeeper>,
    /// The storage faults answered lately (`503 storage_unavailable`),
    /// for the log, the metrics and `/readyz`.
    pub storage: crate::storage_health::StorageHealth,
    /// This process's watch over its clock ([`slipway_jobs::clock`]): its
    /// readings run in `main`, its warning shows in `/readyz`.
    pub clock: slipway_jobs::clock::ClockWatch,
}

/// The state handlers take: `State(state): State<AppState>`.
#[derive(Debug, Clone)]
pub struct AppState(pub Arc<App>);

impl std::ops::Deref for AppState {
    type Target = App;
    fn deref(&self) -> &App {
        &self.0
    }
}

impl AppState {
    /// Wires an app from its configuration and an opened database.
    pub fn new(config: Config, db: Db) -> anyhow::Result<AppState> {
        let verifier = Verifier::from_config(&config)?;
        slipway_jobs::nix::check_provider(&config.sources.provider)
            .map_err(|e| anyhow::anyhow!("SLIPWAY_PROVIDER: {e}"))?;
        let sources = FleetSources::new(&config, Checker::new(crate::default_source::outputs())?, db.clone());
        let database_health = DatabaseHealth::new(db.clone());
        let hub = slipway_jobs::channel::Hub::new(db.clone());
        let secrets = config
            .openbao
            .as_ref()
            .map(slipway_jobs::openbao::OpenBao::new)
            .transpose()
            .map_err(|e| anyhow::anyhow!("OPENBAO_TOKEN: {e}"))?;
        // The longest a request may take (the top of the latency buckets):
        // a submit or `get_for` may wait on a Nix build.
        let ceiling = config.api.request_timeout.max(config.sources.nix_timeout);
        let metrics = slipway_jobs::metrics::Metrics::with_http_ceiling(ceiling);
        metrics.register_refusals();
        metrics.register_key_reloads();
        // The api's longest job with the token is a submit, bounded by its
        // names eval (NIX_TIMEOUT).
        let openbao_token = secrets.clone().filter(|_| tokio::runtime::Handle::try_current().is_ok()).map(|bao| {
            slipway_jobs::openbao_token::TokenWatch::start(bao, config.sources.nix_timeout, Some(metrics.clone()))
        });
        let streams = crate::stream_caps::StreamCaps::new(
            config.api.streams_per_subject,
            config.api.streams_per_api,
            metrics.clone(),
        );
        let wal = config.database.sqlite_path().map(|path| {
            slipway_jobs::sqlite_wal::WalKeeper::new(&path, config.database.sqlite_wal_limit, metrics.clone())
        });
        let storage = crate::storage_health::StorageHealth::new(metrics.clone());
        let clock = slipway_jobs::clock::ClockWatch::new(config.clock_skew_limit, metrics.clone());
        Ok(AppState(Arc::new(App {
            config,
            db,
            verifier,
            sources,
            database_health,
            unserved: Default::default(),
            hub,
            secrets,
            openbao_token,
            metrics,
            streams,
            wal,
            storage,
            clock,
        })))
    }
}
