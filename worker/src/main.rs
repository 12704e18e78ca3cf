//! `slipway-worker`: the apalis worker fleet (`work`) and local single-job
//! runs (`run`). All Nix runs here (PRODUCT.md §1, §6, §11).

mod local;
mod work;

use clap::{Parser, Subcommand, ValueEnum};
use slipway_jobs::config::Config;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "slipway-worker", version, about = "Runs Slipway's deploy and destroy jobs.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs deploy and destroy jobs from the queue until Ctrl-C (SIGINT or SIGTERM).
    Work {
        /// Name prefix of this worker; the host, process id and a random suffix are appended so every process is unique.
        #[arg(long, default_value = "worker")]
        name: String,
        /// Concurrent builds (default: BUILD_SLOTS).
        #[arg(long)]
        slots: Option<u32>,
    },
    /// Runs one job in-process, without the queue, through the same job body as the fleet, and prints its run report.
    Run {
        /// Which job.
        job: LocalJob,
        /// The module source (`path:<dir>`).
        #[arg(long)]
        source: String,
        /// The configuration JSON file.
        #[arg(long)]
        config: PathBuf,
        /// The deployment id the run acts for.
        #[arg(long, default_value = "local")]
        deployment: String,
        /// Report format.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
}

/// A job `run` can run.
#[derive(Clone, Copy, ValueEnum)]
enum LocalJob {
    /// Deploy the configuration.
    Deploy,
    /// Destroy what a deploy of this deployment id made.
    Destroy,
}

/// How `run` prints its report.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// For people.
    Text,
    /// The report as JSON.
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // SLIPWAY_LOG, else RUST_LOG, else the default (docs/CONFIGURATION.md).
    let (source, filter) = slipway_jobs::config::log_filter(|k| std::env::var(k).ok());
    let filter = tracing_subscriber::EnvFilter::try_new(&filter).unwrap_or_else(|e| {
        let default = slipway_jobs::config::DEFAULT_LOG_FILTER;
        eprintln!("slipway-worker: {source} is not a log filter ({e}); using {default}");
        tracing_subscriber::EnvFilter::new(default)
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let config = match Config::load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("slipway-worker: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime starts");
    runtime.block_on(async move {
        match cli.command {
            Command::Work { name, slots } => match work::run(config, &name, slots).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("slipway-worker: {}", slipway_jobs::error_line(e.chain()));
                    ExitCode::FAILURE
                }
            },
            Command::Run { job, source, config: file, deployment, output } => {
                local::run(config, job, &source, &file, &deployment, output).await
            }
        }
    })
}
