//! `slipway-worker run schema|names`: a `nix`-queue job in-process (§11),
//! through the same fetch and the same contained Nix runs as the fleet's
//! `schema_build` and `names_eval` (`slipway_jobs::jobs::nix`), under
//! `NIX_TIMEOUT`, for `SLIPWAY_PROVIDER`.

use crate::Output;
use clap::Args;
use slipway_jobs::config::Config;
use slipway_jobs::fetch;
use slipway_jobs::nix::{NixFailure, NixRun};
use slipway_jobs::source::ModuleSource;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// The arguments of `run schema`.
#[derive(Args)]
pub struct SchemaArgs {
    /// The module source: `git+<url>?rev=<40 hex>`, `git+<url>?ref=<branch>` or `path:<dir>`.
    #[arg(long)]
    source: String,
    /// Output format: the outputs' status and timings for people, or everything as JSON.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

/// The arguments of `run names`.
#[derive(Args)]
pub struct NamesArgs {
    /// The module source: `git+<url>?rev=<40 hex>`, `git+<url>?ref=<branch>` or `path:<dir>`.
    #[arg(long)]
    source: String,
    /// The configuration JSON file (it is read by Nix: no secret values).
    #[arg(long)]
    config: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

fn refuse(output: Output, code: &str, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("slipway-worker run: {message}");
    if output == Output::Json {
        println!("{}", serde_json::json!({ "error": code, "message": message.to_string(), "details": null }));
    }
    ExitCode::from(2)
}

fn failed(output: Output, f: &NixFailure, log: &str) -> ExitCode {
    if !log.trim().is_empty() {
        eprintln!("{}", log.trim_end());
    }
    eprintln!("slipway-worker run: {} ({})", f.message, f.code.as_str());
    if output == Output::Json {
        println!(
            "{}",
            serde_json::json!({ "error": f.code.as_str(), "message": f.message, "details": { "output": f.output } })
        );
    }
    ExitCode::FAILURE
}

/// Fetches the source and makes a work folder; the refusal to print otherwise.
async fn prepare(
    config: &Config,
    source: &str,
    output: Output,
) -> Result<(fetch::Fetched, tempfile::TempDir, u64), ExitCode> {
    let parsed = ModuleSource::parse(source)
        .and_then(|s| s.check_transport(config.sources.allow_path_sources).map(|()| s))
        .map_err(|e| refuse(output, "invalid_module_source", e))?;
    slipway_jobs::nix::check_provider(&config.sources.provider)
        .map_err(|e| refuse(output, "invalid_input", format!("SLIPWAY_PROVIDER: {e}")))?;
    slipway_jobs::sandbox::check(config).await.map_err(|e| refuse(output, "invalid_input", e))?;
    let started = Instant::now();
    let fetched = fetch::fetch(config, &parsed, config.sources.nix_timeout)
        .await
        .map_err(|e| failed(output, &NixFailure::from_fetch(&e), e.log()))?;
    let fetch_ms = started.elapsed().as_millis() as u64;
    let work = tempfile::tempdir()
        .map_err(|e| refuse(output, "invalid_input", format!("cannot create a work folder: {e}")))?;
    Ok((fetched, work, fetch_ms))
}

/// `run schema`: builds every document output of the source and prints each
/// one's status and timing (text) or `{pinned, revision, documents,
/// failures, timings_ms}` (JSON). Exit 0 when every output built, 1 when
/// one failed, 2 on refused input.
pub async fn schema(config: Config, args: SchemaArgs) -> ExitCode {
    let until = Instant::now() + config.sources.nix_timeout;
    let (fetched, work, fetch_ms) = match prepare(&config, &args.source, args.output).await {
        Ok(p) => p,
        Err(code) => return code,
    };
    let pinned = if fetched.pinned.is_empty() { args.source.clone() } else { fetched.pinned.clone() };
    let marker = format!("slipway-nix:run-{}", std::process::id());
    let policy = match slipway_jobs::sandbox::Policy::new(&config) {
        Ok(p) => p,
        Err(e) => return refuse(args.output, "invalid_input", e),
    };
    let nix = NixRun {
        dir: &fetched.dir,
        provider: &config.sources.provider,
        work: work.path(),
        until,
        marker: &marker,
        policy: &policy,
        limits: slipway_jobs::nix::Limits::of(&config),
    };
    let mut log = String::new();
    let mut built = match nix.build_schema(&pinned, fetched.revision.as_deref(), &mut log).await {
        Ok(b) => b,
        Err(f) => return failed(args.output, &f, &log),
    };
    built.timings_ms.insert("fetch".into(), fetch_ms);
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&built).expect("outputs serialise")),
        Output::Text => {
            println!("source   {}", built.pinned);
            for (attribute, _) in slipway_jobs::nix::DOCUMENTS.iter().chain([("names", "")].iter()) {
                match built.failures.get(*attribute) {
                    None => println!("{attribute:<20} ok"),
                    Some(f) => println!("{attribute:<20} {} ({})", f.code.as_str(), f.message),
                }
            }
            for (step, ms) in &built.timings_ms {
                println!("{step:<20} {ms} ms");
            }
        }
    }
    if built.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        if !log.trim().is_empty() {
            eprintln!("{}", log.trim_end());
        }
        ExitCode::FAILURE
    }
}

/// `run names`: the `names` eval of a configuration (EV-1), printed as
/// nodes with their DNS names (text) or `nodes.json` (JSON).
pub async fn names(config: Config, args: NamesArgs) -> ExitCode {
    let until = Instant::now() + config.sources.nix_timeout;
    let configuration: serde_json::Value = match std::fs::read_to_string(&args.config)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| format!("not JSON: {e}")))
    {
        Ok(v) => v,
        Err(e) => return refuse(args.output, "invalid_input", format!("configuration {}: {e}", args.config.display())),
    };
    let (fetched, work, _) = match prepare(&config, &args.source, args.output).await {
        Ok(p) => p,
        Err(code) => return code,
    };
    let marker = format!("slipway-nix:run-{}", std::process::id());
    let policy = match slipway_jobs::sandbox::Policy::new(&config) {
        Ok(p) => p,
        Err(e) => return refuse(args.output, "invalid_input", e),
    };
    let nix = NixRun {
        dir: &fetched.dir,
        provider: &config.sources.provider,
        work: work.path(),
        until,
        marker: &marker,
        policy: &policy,
        limits: slipway_jobs::nix::Limits::of(&config),
    };
    let mut log = String::new();
    let names = match nix.eval_names(&configuration, &mut log).await {
        Ok(n) => n,
        Err(f) => return failed(args.output, &f, &log),
    };
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&names).expect("names serialise")),
        Output::Text => {
            for node in &names.nodes {
                println!("{:<16} {}", node.name, node.dns_names.join(" "));
            }
            if !names.disabled_applications.is_empty() {
                println!("disabled: {}", names.disabled_applications.join(", "));
            }
        }
    }
    ExitCode::SUCCESS
}
