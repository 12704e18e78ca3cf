//! `slipway-worker`: the apalis worker fleet (`work`) and local single-job
//! runs (`run`). All Nix runs here (PRODUCT.md §1, §6, §11).

mod local;
mod migrate_cmd;
mod nix_cmd;
mod ready_cmd;

use slipway_worker::work;

use clap::{Args, Parser, Subcommand, ValueEnum};
use slipway_jobs::config::Config;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "slipway-worker",
    version,
    about = "Runs Slipway's jobs (deploys, destroys, schema builds, names evals), and migrates configurations."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    // Serves the fleet's queues until stopped: its help is `work_about`.
    #[command(about = work_about())]
    Work {
        /// Name prefix of this worker; the host, process id and a random suffix are appended so every process is unique
        /// (`<prefix>@<host>-<pid>-<random>`; `GET /workers` reads the host from it).
        #[arg(long, default_value = "worker")]
        name: String,
        /// Concurrent builds (default: BUILD_SLOTS).
        #[arg(long)]
        slots: Option<u32>,
        // The queues this worker serves: its help is `queues_help`.
        #[arg(long, help = queues_help())]
        queues: Option<String>,
    },
    /// Runs one job in-process, without the queue, through the same job body as the fleet, and prints its run report;
    /// or migrates a configuration file with a renames table.
    Run {
        #[command(subcommand)]
        job: RunCommand,
    },
}

/// `work`'s description in `--help`, naming every queue of
/// [`slipway_jobs::store::queue::KINDS`].
fn work_about() -> String {
    format!(
        "Serves the fleet's queues ({}) until stopped. The first SIGTERM or Ctrl-C drains: no new job, running builds \
         finish, exit 0; a second one kills the running effects, hands their builds to another worker and exits 1.",
        slipway_jobs::store::queue::ALL_QUEUES.join(", ")
    )
}

/// `work --queues`'s help, naming every queue of [`slipway_jobs::store::queue::KINDS`].
fn queues_help() -> String {
    format!(
        "The queues this worker serves, comma separated, of {} (default: SLIPWAY_QUEUES, else all). For example \
         `--queues nix` for an evaluation worker.",
        slipway_jobs::store::queue::queue_names()
    )
}

/// What `run` does.
#[derive(Subcommand)]
enum RunCommand {
    /// Deploys the configuration with the module source's effects and prints the run report.
    Deploy(DeployArgs),
    /// Destroys what a deploy of this deployment id made and prints the run report.
    Destroy(LocalArgs),
    /// Migrates a configuration (or one section's value) with a renames table and prints
    /// `{"output": …, "skipped": [{"entry", "reason", "path"}]}`; reads only the two files.
    Migrate(migrate_cmd::MigrateArgs),
    /// Fetches a module source and builds its outputs (schema, application schemas, renames, meta),
    /// and checks it has `names`; prints each output's status and the timings.
    Schema(nix_cmd::SchemaArgs),
    /// Evaluates the `names` of a configuration with a module source: its nodes and their DNS names.
    Names(nix_cmd::NamesArgs),
    /// Waits until every instance of a deployment's last successful deploy answers as itself (ready),
    /// probing as the fleet does, or until the deadline; exit code 0 only when all are ready. Reads the
    /// deployment from the database of DATABASE_URL.
    WaitReady(ready_cmd::WaitReadyArgs),
}

/// The arguments of `run deploy` and `run destroy`.
#[derive(Args)]
struct LocalArgs {
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
}

/// The arguments of `run deploy`: those of every local run, and `--dry-run`.
#[derive(Args)]
struct DeployArgs {
    #[command(flatten)]
    local: LocalArgs,
    /// Evaluate and build every node, activate nothing, store no SBOM, and report per node
    /// what a real run would change (the effect gets DRY_RUN=1).
    #[arg(long)]
    dry_run: bool,
}

/// A job `run deploy|destroy` runs.
#[derive(Clone, Copy)]
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
    use clap::{CommandFactory as _, FromArgMatches as _};
    let matches = Cli::command().after_help(slipway_jobs::config::settings_help()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // Whatever the umask it started with, what it creates is its own (SEC-3).
    slipway_jobs::sandbox::private_umask();
    // SLIPWAY_LOG, else RUST_LOG, else the default; SLIPWAY_LOG_FORMAT (docs/CONFIGURATION.md).
    if let Err(e) = slipway_jobs::logs::init("slipway-worker") {
        eprintln!("slipway-worker: {e}");
        return ExitCode::from(2);
    }
    match cli.command {
        // A migration reads only its two files: no settings, no database, no Nix.
        Command::Run { job: RunCommand::Migrate(args) } => migrate_cmd::run(&args),
        Command::Run { job: RunCommand::Schema(args) } => with_settings(|config| nix_cmd::schema(config, args)),
        Command::Run { job: RunCommand::Names(args) } => with_settings(|config| nix_cmd::names(config, args)),
        Command::Run { job: RunCommand::WaitReady(args) } => with_settings(|config| ready_cmd::run(config, args)),
        Command::Run { job: RunCommand::Deploy(args) } => {
            with_settings(|config| local_run(config, LocalJob::Deploy, args.local, args.dry_run))
        }
        Command::Run { job: RunCommand::Destroy(args) } => {
            with_settings(|config| local_run(config, LocalJob::Destroy, args, false))
        }
        Command::Work { name, slots, queues } => with_settings(|config| async move {
            let queues = match queues {
                None => config.worker.queues.clone(),
                Some(list) => match slipway_jobs::config::parse_queues(Some(&list)) {
                    Ok(q) => q,
                    Err(e) => {
                        eprintln!("slipway-worker: --queues {}", e.to_string().trim_start_matches("SLIPWAY_QUEUES: "));
                        return ExitCode::from(2);
                    }
                },
            };
            match work::run(config, &name, slots, queues).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("slipway-worker: {}", slipway_jobs::error_line(e.chain()));
                    ExitCode::from(slipway_jobs::exit_status(e.chain()))
                }
            }
        }),
    }
}

/// Loads the settings (docs/CONFIGURATION.md; exit code 2 when they do not
/// load) and runs `command` with them on a tokio runtime.
fn with_settings<F, Fut>(command: F) -> ExitCode
where
    F: FnOnce(Config) -> Fut,
    Fut: std::future::Future<Output = ExitCode>,
{
    let config = match Config::load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("slipway-worker: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime starts");
    runtime.block_on(command(config))
}

/// `run deploy|destroy`: one build in-process ([`local::run`]); only a
/// deploy can be a dry run.
async fn local_run(config: Config, job: LocalJob, args: LocalArgs, dry_run: bool) -> ExitCode {
    local::run(config, job, &args.source, &args.config, &args.deployment, args.output, dry_run).await
}
