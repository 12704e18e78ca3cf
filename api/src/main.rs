//! `slipway-api`: serve the HTTP API, or mint a development token.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use slipway_api::auth::Mint;
use slipway_api::{app, AppState};
use slipway_jobs::config::{parse_duration, Config};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Parser)]
#[command(name = "slipway-api", version, about = "Slipway's HTTP API. With no command it serves on SLIPWAY_BIND.")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serves the API on SLIPWAY_BIND until SIGINT or SIGTERM (the default).
    Serve,
    /// Prints a token signed with SLIPWAY_JWT_SECRET, or with an HS256 key of SLIPWAY_JWT_KEYS_FILE (development and tests).
    Token {
        /// Deployment ids the token may touch, comma separated, or `*` for all.
        #[arg(long, value_delimiter = ',', required = true)]
        deployments: Vec<String>,
        /// Lifetime: 3600, 90s, 30m, 1h, 7d.
        #[arg(long, default_value = "1h")]
        ttl: String,
        /// The token's subject.
        #[arg(long, default_value = "developer")]
        sub: String,
        /// Adds the operator claim: the token may also read the fleet (GET /queues, GET /workers).
        #[arg(long)]
        operator: bool,
        /// With SLIPWAY_JWT_KEYS_FILE: the kid of the HS256 key to sign with (default: the file's first HS256 key).
        #[arg(long)]
        kid: Option<String>,
    },
}

fn main() -> ExitCode {
    use clap::{CommandFactory as _, FromArgMatches as _};
    let matches = Cli::command().after_help(slipway_jobs::config::settings_help()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // Whatever the umask it started with, what it creates is its own (SEC-3).
    slipway_jobs::sandbox::private_umask();
    // SLIPWAY_LOG, else RUST_LOG, else the default; SLIPWAY_LOG_FORMAT (docs/CONFIGURATION.md).
    if let Err(e) = slipway_jobs::logs::init("slipway-api") {
        eprintln!("slipway-api: {e}");
        return ExitCode::FAILURE;
    }
    let result = match Config::load() {
        Err(e) => Err(anyhow::Error::new(e)),
        Ok(config) => match cli.command.unwrap_or(Command::Serve) {
            Command::Serve => {
                let runtime = tokio::runtime::Runtime::new().expect("tokio runtime starts");
                let served = runtime.block_on(serve(config));
                // What the drain left open is dropped, not waited for.
                runtime.shutdown_timeout(std::time::Duration::from_secs(1));
                served
            }
            Command::Token { deployments, ttl, sub, operator, kid } => {
                token(&config, &ttl, Mint { subject: sub, deployments, ttl_secs: 0, operator, kid })
            }
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("slipway-api: {}", slipway_jobs::error_line(e.chain()));
            ExitCode::from(slipway_jobs::exit_status(e.chain()))
        }
    }
}

/// `slipway-api token`: prints `mint` signed, lasting `ttl`.
fn token(config: &Config, ttl: &str, mint: Mint) -> anyhow::Result<()> {
    let ttl = parse_duration(ttl)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| anyhow::anyhow!("--ttl {ttl:?}: expected 3600, 90s, 30m, 1h or 7d"))?;
    for d in mint.deployments.iter().filter(|d| *d != "*") {
        slipway_jobs::id::DeploymentId::parse(d)?;
    }
    println!("{}", Mint { ttl_secs: ttl.as_secs(), ..mint }.sign(config)?);
    Ok(())
}

/// Serves until a signal. It listens first and answers every request `503`
/// (`slipway_api::starting`) while the database is opened and migrated,
/// which may mean waiting for another process's migrations; a signal then
/// ends it at once. A database that cannot be used ends it with the error.
async fn serve(config: Config) -> anyhow::Result<()> {
    slipway_jobs::sandbox::private_dir(&config.state_dir)
        .with_context(|| format!("making the state folder {} private", config.state_dir.display()))?;
    // Every stream is a socket: the soft open-file limit up to the hard one.
    slipway_api::fd_limit::raise_and_log(config.api.streams_per_api);
    let bind = config.api.bind.clone();
    let read_timeout = config.api.request_timeout;
    let grace = config.api.shutdown_grace;
    // Before the api listens, so that no signal meets its default action
    // (ending the process): SIGHUP reads the token keys again, SIGTERM and
    // SIGINT stop it.
    let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).context("handling SIGHUP")?;
    let signals = shutdown_signals()?;
    let listener = tokio::net::TcpListener::bind(&bind).await.with_context(|| format!("binding {bind}"))?;
    let address = listener.local_addr()?;
    tracing::info!(
        address = %address,
        "slipway-api starting: every request answers 503 until its database is open and migrated; listening"
    );
    let ready = slipway_api::starting::Ready::new();
    let opened = Arc::new(std::sync::OnceLock::<AppState>::new());
    let streams = opened.clone();
    let mut first = signals.clone();
    let mut second = signals.clone();
    let serving = tokio::spawn(slipway_api::serve::serve_draining(
        listener,
        slipway_api::starting::router(ready.clone()),
        read_timeout,
        async move {
            let _ = first.wait_for(|n| *n >= 1).await;
            tracing::info!(
                grace_seconds = grace.as_secs(),
                "slipway-api shutting down: draining requests in flight for at most the grace (a second signal ends it at once)"
            );
            // Open streams would hold the drain to its end: end them (their
            // clients reconnect, to another replica, with their last id).
            if let Some(state) = streams.get() {
                state.hub.close();
            }
        },
        async move {
            tokio::select! {
                () = tokio::time::sleep(grace) => {
                    tracing::warn!(grace_seconds = grace.as_secs(), "slipway-api shutdown grace over");
                }
                _ = second.wait_for(|n| *n >= 2) => tracing::warn!("slipway-api second signal: exiting at once"),
            }
        },
    ));
    let mut stop = signals;
    let db = tokio::select! {
        db = slipway_jobs::store::open(&config) => db.context("opening the database")?,
        _ = stop.wait_for(|n| *n >= 1) => {
            tracing::info!("slipway-api stopped before its database was ready");
            return Ok(());
        }
    };
    let state = AppState::new(config, db)?;
    if let Some(file) = state.verifier.keys_file() {
        tracing::info!(file = %file.display(), kids = ?state.verifier.keys().kids(), "token keys loaded");
    }
    let rotation = tokio::spawn(slipway_api::rotation::watch(state.clone(), hangup));
    let metrics = state.metrics.clone();
    let upkeep = tokio::spawn(async move {
        let mut tick = tokio::time::interval(slipway_api::observe::UPKEEP_EVERY);
        loop {
            tick.tick().await;
            metrics.upkeep();
        }
    });
    // The fleet's clock, read from the database now and every minute ([`slipway_jobs::clock`]).
    if let Err(e) = state.clock.check(&state.db).await {
        tracing::warn!(error = %e, "the database's clock could not be read; using this host's until it can");
    }
    let clock = tokio::spawn(state.clock.clone().run(state.db.clone()));
    let wal = state
        .wal
        .clone()
        .map(|keeper| tokio::spawn(keeper.run(state.db.clone(), state.config.database.sqlite_checkpoint_every)));
    let _ = opened.set(state.clone());
    ready.set(app(state));
    tracing::info!(address = %address, version = env!("CARGO_PKG_VERSION"), "slipway-api serving");
    match serving.await.context("serving")? {
        slipway_api::serve::Drained::Complete => tracing::info!("slipway-api stopped: every request finished"),
        slipway_api::serve::Drained::CutShort { open } => {
            tracing::warn!(connections = open, "slipway-api stopped with connections still open")
        }
    }
    upkeep.abort();
    rotation.abort();
    clock.abort();
    if let Some(wal) = wal {
        wal.abort();
    }
    Ok(())
}

/// Counts the `SIGTERM` and `SIGINT` signals received from now on (the
/// first starts the drain, the second ends it). Handling them replaces their
/// default action, ending the process.
fn shutdown_signals() -> anyhow::Result<tokio::sync::watch::Receiver<u32>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("handling SIGINT")?;
    let (count, signals) = tokio::sync::watch::channel(0u32);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = interrupt.recv() => {}
            }
            count.send_modify(|n| *n += 1);
        }
    });
    Ok(signals)
}
