//! `slipway-worker run`: one job in-process (§11, seed 001 "Use Cases").
//!
//! The source's outputs are built with Nix, the configuration is checked the
//! way a submit checks it, and the build is stored in a throw-away database
//! and run by the same job body as the fleet (`slipway_jobs::jobs::build_job::run`).
//! Provider state stays under `SLIPWAY_STATE_DIR`, so a later `run destroy`
//! of the same deployment id removes what `run deploy` made.

use crate::{LocalJob, Output};
use slipway_jobs::config::Config;
use slipway_jobs::id::DeploymentId;
use slipway_jobs::jobs::build_job::{self, Ran};
use slipway_jobs::jobs::Ctx;
use slipway_jobs::source::policy::OneSource;
use slipway_jobs::source::ModuleSource;
use slipway_jobs::state::{BuildKind, BuildStatus};
use slipway_jobs::store::queue::BuildJob;
use slipway_jobs::submit::{self, Queueing, SubmitRequest};
use slipway_jobs::validate::Checker;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

/// Exit code for input that was refused before anything ran.
const INVALID_INPUT: u8 = 2;

/// Refuses the run: a sentence on stderr, and with `--output json` also a
/// JSON error on stdout (the shape of the api's errors), exit code 2.
fn refuse(output: Output, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("slipway-worker run: {msg}");
    if output == Output::Json {
        println!("{}", serde_json::json!({ "error": "invalid_input", "message": msg.to_string(), "details": null }));
    }
    ExitCode::from(INVALID_INPUT)
}

/// The outputs validation needs, built from the source folder `dir` the way
/// the fleet's schema build does (contained, under `NIX_TIMEOUT`).
async fn build_outputs(config: &Config, dir: &Path) -> Result<slipway_jobs::source::outputs::SourceOutputs, String> {
    slipway_jobs::nix::check_provider(&config.sources.provider).map_err(|e| format!("SLIPWAY_PROVIDER: {e}"))?;
    let work = tempfile::tempdir().map_err(|e| format!("cannot create a work folder: {e}"))?;
    let marker = format!("slipway-nix:run-{}", std::process::id());
    let until = std::time::Instant::now() + config.sources.nix_timeout;
    let policy = slipway_jobs::sandbox::Policy::new(config)?;
    let nix = slipway_jobs::nix::NixRun {
        dir,
        provider: &config.sources.provider,
        work: work.path(),
        until,
        marker: &marker,
        policy: &policy,
        limits: slipway_jobs::nix::Limits::of(config),
    };
    let mut log = String::new();
    let pinned = format!("path:{}", dir.display());
    let built = nix.build_schema(&pinned, None, &mut log).await;
    // The outputs are read: the work folder's out links, which Nix keeps as
    // GC roots, go with it rather than dangle.
    if let Err(e) = slipway_jobs::nix::output::remove_folder_and_roots(work.path()) {
        eprintln!("slipway-worker run: cannot remove the work folder {}: {e}", work.path().display());
    }
    let built = built.map_err(|f| f.message)?;
    built.outputs().map_err(|f| {
        if !log.trim().is_empty() {
            eprintln!("{}", log.trim_end());
        }
        f.message
    })
}

/// Runs one deploy or destroy and prints its report; exit 0 on success, 1 on
/// a failed build, 2 on refused input.
pub async fn run(
    config: Config,
    job: LocalJob,
    source: &str,
    file: &Path,
    deployment: &str,
    output: Output,
    dry_run: bool,
) -> ExitCode {
    let id = match DeploymentId::parse(deployment) {
        Ok(id) => id,
        Err(e) => return refuse(output, e),
    };
    // A dry run leaves no trace in the state folder (§11): what it finds
    // missing now and makes is removed when it ends, however it ends.
    let trace = dry_run.then(|| Trace::note(&config.state_dir, id.as_str()));
    let code = run_one(config, job, source, file, &id, output, dry_run, trace.as_ref()).await;
    if let Some(trace) = trace {
        if let Err(e) = trace.erase() {
            eprintln!("slipway-worker run: the dry run could not remove all it made: {e}");
            return ExitCode::FAILURE;
        }
    }
    code
}

/// What a dry run finds missing in the state folder before it runs, to
/// remove when it ends: the state folder itself, `builds/`, `locks/`,
/// `provider/`, `plans/` (and `nix/`, `outputs/`), the deployment's lock
/// file, provider folder and plans folder, and the build's work folder and
/// plan GC roots (new by definition), each with the GC roots of Nix that
/// point into it: a local run's plan cannot be applied. What was there
/// before stays.
struct Trace {
    /// The state folder, and whether it was there.
    state_dir: (std::path::PathBuf, bool),
    /// Paths under it that were missing, deepest first.
    missing: Vec<std::path::PathBuf>,
    /// The dry run's build, once it is known: its work folder goes.
    build: std::sync::Mutex<Option<String>>,
    /// The deployment, whose plans folder holds the build's GC roots.
    deployment: String,
}

impl Trace {
    /// Notes what of the state folder `state_dir` is missing for deployment `id`.
    fn note(state_dir: &Path, id: &str) -> Self {
        let candidates = [
            format!("provider/{id}"),
            format!("locks/{id}.lock"),
            format!("plans/{id}"),
            "provider".to_owned(),
            "plans".to_owned(),
            "locks".to_owned(),
            "builds".to_owned(),
            "nix".to_owned(),
            "outputs".to_owned(),
        ];
        let missing = candidates.iter().map(|c| state_dir.join(c)).filter(|p| p.symlink_metadata().is_err()).collect();
        let there = state_dir.symlink_metadata().is_ok();
        Self {
            state_dir: (state_dir.to_path_buf(), there),
            missing,
            build: std::sync::Mutex::new(None),
            deployment: id.to_owned(),
        }
    }

    /// Notes the dry run's build.
    fn build(&self, id: &str) {
        *self.build.lock().expect("trace lock") = Some(id.to_owned());
    }

    /// Removes what the run made: the missing paths (folders with the GC
    /// roots into them; a folder that was missing only if nothing else put
    /// something in it), and the state folder if it was missing.
    fn erase(&self) -> std::io::Result<()> {
        use slipway_jobs::nix::output::remove_folder_and_roots;
        let (state_dir, there) = &self.state_dir;
        if !there {
            return remove_folder_and_roots(state_dir);
        }
        if let Some(build) = self.build.lock().expect("trace lock").as_deref() {
            remove_folder_and_roots(&state_dir.join("builds").join(build))?;
            remove_folder_and_roots(&state_dir.join("plans").join(&self.deployment).join(build))?;
        }
        for path in &self.missing {
            let Ok(meta) = path.symlink_metadata() else { continue };
            if !meta.is_dir() {
                std::fs::remove_file(path)?;
            } else if path.parent() == Some(state_dir.as_path()) {
                // A shared folder (`builds/`, `locks/`, …): only if empty,
                // as another process may use it now.
                if std::fs::read_dir(path)?.next().is_none() {
                    std::fs::remove_dir(path)?;
                }
            } else {
                remove_folder_and_roots(path)?;
            }
        }
        Ok(())
    }
}

/// [`run`] of a parsed deployment id; a dry run notes its build in `trace`.
#[allow(clippy::too_many_arguments)]
async fn run_one(
    config: Config,
    job: LocalJob,
    source: &str,
    file: &Path,
    id: &DeploymentId,
    output: Output,
    dry_run: bool,
    trace: Option<&Trace>,
) -> ExitCode {
    let id = id.clone();
    let dir = match ModuleSource::parse(source) {
        Ok(ModuleSource::Path(dir)) => dir,
        Ok(other) => return refuse(output, format!("{other}: local runs take a path: source")),
        Err(e) => return refuse(output, e),
    };
    let dir = match std::fs::canonicalize(&dir) {
        Ok(d) => d,
        Err(e) => return refuse(output, format!("module source folder {}: {e}", dir.display())),
    };
    // SEC-3: the folder is inspected (no link out of it, its size) before
    // Nix reads it, as every fetch is.
    if let Err(e) =
        slipway_jobs::fetch::fetch(&config, &ModuleSource::Path(dir.clone()), config.sources.nix_timeout).await
    {
        return refuse(output, e);
    }
    let configuration: serde_json::Value = match std::fs::read_to_string(file)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| format!("not JSON: {e}")))
    {
        Ok(v) => v,
        Err(e) => return refuse(output, format!("configuration {}: {e}", file.display())),
    };
    if let Err(e) = slipway_jobs::sandbox::check(&config).await {
        return refuse(output, e);
    }
    let outputs = match build_outputs(&config, &dir).await {
        Ok(o) => o,
        Err(e) => return refuse(output, format!("module source {}: {e}", dir.display())),
    };
    let checker = match Checker::new(outputs) {
        Ok(c) => c,
        Err(e) => return refuse(output, e),
    };
    let scratch = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => return refuse(output, format!("cannot create a scratch folder: {e}")),
    };
    let db = match slipway_jobs::store::open_sqlite(&scratch.path().join("run.db")).await {
        Ok(db) => db,
        Err(e) => return refuse(output, e),
    };
    let source = OneSource { reference: format!("path:{}", dir.display()), checker: std::sync::Arc::new(checker) };
    let kind = match job {
        LocalJob::Deploy => BuildKind::Deploy,
        LocalJob::Destroy => BuildKind::Destroy,
    };
    let request = SubmitRequest {
        deployment: id.clone(),
        configuration,
        module_source: Some(source.reference.clone()),
        // A local run has no shared queue to protect.
        queueing: Queueing { kind, limit: None },
        dry_run,
        requested_by: None,
        plan_ttl: std::time::Duration::from_secs(3600),
        health_gate: None,
    };
    if dry_run {
        // A dry run compares with what the provider state holds; its
        // throw-away database only needs to know the deployment.
        let known = async {
            let mut conn = db.acquire().await?;
            let snapshot = slipway_jobs::store::deployments::Snapshot {
                id: id.as_str(),
                configuration: &serde_json::Value::Null,
                module_source: None,
                domain: None,
                instances: &[],
                names: None,
            };
            slipway_jobs::store::deployments::upsert(&mut conn, snapshot, slipway_jobs::store::now_ms()).await
        };
        if let Err(e) = known.await {
            return refuse(output, e);
        }
    }
    // A local run writes the secrets it is given and its deploy reads them:
    // its OPENBAO_TOKEN needs both the api's and the workers' policies.
    let secrets = match config.openbao.as_ref().map(slipway_jobs::openbao::OpenBao::new).transpose() {
        Ok(s) => s,
        Err(e) => return refuse(output, format!("OPENBAO_TOKEN: {e}")),
    };
    let accepted = match submit::submit(&db, &source, secrets.as_ref(), request).await {
        Ok(a) => a,
        Err(submit::SubmitError::InvalidConfiguration(listing)) => {
            eprintln!("slipway-worker run: {} ({}):", listing.message(), source.reference);
            for p in &listing.problems {
                // Shown escaped: a key may hold control characters (a NUL, say).
                let path = if p.path.is_empty() { "/".to_owned() } else { p.path.escape_debug().to_string() };
                eprintln!("  {path} ({}): {}", p.kind, p.message);
            }
            if listing.omitted > 0 {
                eprintln!("  … and {} more problems, not listed", listing.omitted);
            }
            if output == Output::Json {
                let body = serde_json::json!({
                    "error": "invalid_configuration",
                    "message": listing.message(),
                    "details": { "problems": listing.problems, "omitted": listing.omitted },
                });
                println!("{body}");
            }
            return ExitCode::from(INVALID_INPUT);
        }
        Err(e) => return refuse(output, e),
    };
    let build_id = accepted.build_id;
    if let Some(trace) = trace {
        trace.build(&build_id);
    }
    let ctx = Ctx::new(db, Arc::new(config), format!("local-{}", std::process::id()), true);
    let report = match build_job::run(BuildJob { build_id }, &ctx).await {
        Ok(Ran::Finished(report)) => report,
        Ok(other) => return refuse(output, format!("the build did not run: {other:?}")),
        Err(e) => return refuse(output, e),
    };
    match output {
        Output::Text => {
            print!("{}", report.to_text());
            let state = async { slipway_jobs::read::deployment(&mut ctx.db.acquire().await?, id.as_str()).await };
            match state.await {
                _ if dry_run => {}
                Ok(Some(read)) => println!("  deployment {id} is {}", read.state.as_str()),
                _ => {}
            }
        }
        Output::Json => println!("{}", serde_json::to_string_pretty(&report).expect("report serialises")),
    }
    if report.status == BuildStatus::Succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
