//! The workspace of one build attempt: its module source, its work
//! folder, the environment its effect gets, and the watch on its claim and
//! on cancel requests. Deploy and destroy run through `run_kind`, which
//! runs the effect (`run_effect`) and judges how it ended with what the
//! kind adds (`Kind`).

use super::build_log::DbLog;
use super::effect_output::{read_nodes, read_times};
use super::operator_secrets::{self, Handed};
use super::outcome::{blank_report, cancelled, claim_lost, fail, Outcome};
use super::report::{Reason, Report};
use super::timing::{now_us, EffectSpan};
use super::{Ctx, RECORD_PATIENCE};
use crate::config::Config;
use crate::effect::{EffectOutcome, EffectSpec, LogSink, Stop};
use crate::source::ModuleSource;
use crate::store::builds::{self, BuildRow};
use crate::store::Db;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a build kind adds to the run every build gets ([`run_kind`]): its
/// effect, its deadline, and how an effect that ran is judged.
pub(crate) trait Kind {
    /// The effect run: `core/effects/<EFFECT>` of the build's module source.
    const EFFECT: &'static str;
    /// The setting that bounds the effect's run, as a timeout's error names it.
    const TIMEOUT_SETTING: &'static str;
    /// What the kind reads from the effect's output folder besides the
    /// report's nodes (a deploy: the nodes' SBOMs).
    type Read;
    /// How long the effect may run (`TIMEOUT_SETTING` of `config`).
    fn deadline(config: &Config) -> Duration;
    /// Reads what the effect left in its output folder `sbom_dir` (its
    /// `SBOM_OUT_DIR`): the nodes into `report`, a problem as one of its
    /// warnings. Read whatever way the effect ended.
    fn read(build: &BuildRow, report: &mut Report, sbom_dir: &Path) -> Self::Read;
    /// The outcome of an effect that exited with `code`.
    fn exited(build: &BuildRow, report: Report, code: i32, read: Self::Read) -> Outcome;
    /// The outcome once judged, with what the kind does after its effect
    /// (`run`: how the effect went).
    fn after(build: &BuildRow, ctx: &Ctx, judged: Outcome, run: &EffectRun) -> Outcome;
}

/// Runs a claimed build of kind `K`: resolves its module source, runs
/// `K`'s effect in the attempt's work folder ([`run_effect`]), and judges
/// how it ended: a timeout, a cancel or a lost claim the same way for
/// every kind, an exit as `K` says. The outcome carries when the effect ran.
/// Never fails: a problem is a failed build's report.
pub(crate) async fn run_kind<K: Kind>(build: &BuildRow, ctx: &Ctx) -> Outcome {
    let report = blank_report(build);
    let no_change = Outcome::unchanged;
    let source = match resolve_source(build, ctx).await {
        Ok(dir) => dir,
        Err(e) => return no_change(fail(report, Reason::SourceUnavailable, e)),
    };
    let deadline = K::deadline(&ctx.config);
    let run = match run_effect(build, ctx, &source, K::EFFECT, deadline).await {
        Ok(run) => run,
        Err((reason, e)) => return no_change(fail(report, reason, e)),
    };
    let mut report = report;
    let read = K::read(build, &mut report, &run.work.join("sbom"));
    let judged = match run.outcome {
        EffectOutcome::TimedOut => no_change(fail(
            report,
            Reason::Timeout,
            format!("the {} ran past {} ({}s) and was killed", K::EFFECT, K::TIMEOUT_SETTING, deadline.as_secs()),
        )),
        EffectOutcome::Stopped(Stop::Cancel) => no_change(cancelled(report)),
        EffectOutcome::Stopped(Stop::ClaimLost) => no_change(claim_lost(report)),
        EffectOutcome::Exited(code) => K::exited(build, report, code, read),
    };
    let mut judged = K::after(build, ctx, judged, &run);
    judged.effect = Some(run.span);
    judged
}

/// Prepares the attempt's work folder (with an empty `sbom/` folder, the
/// effect's `SBOM_OUT_DIR`) and runs one of the source's effects with the
/// environment of Q-4. Returns how it ended, the attempt's work folder, and
/// when it started and was gone, with what it said of its Nix time
/// (`timings.json`, [`super::timing::EffectTimes`]).
///
/// Everything here is scoped to this attempt: it stops only older attempts'
/// effects on this host, removes only older attempts' folders, and runs the
/// effect only while this worker still holds the build's claim (checked
/// before the start and every second while it runs; the deployment's lock,
/// which the effect holds, keeps a late start from running beside the
/// attempt that took over).
async fn run_effect(
    build: &BuildRow,
    ctx: &Ctx,
    source: &Path,
    effect: &str,
    deadline: Duration,
) -> Result<EffectRun, (Reason, String)> {
    let work = ctx.attempt_dir(&build.id, build.attempts);
    let state = ctx.provider_state_dir(&build.deployment_id);
    let deploy = effect == "deploy";
    // A plan's systems are kept alive by GC roots of its own, outside the
    // provider state a dry run must not touch.
    let plan_roots = (deploy && build.dry_run).then(|| ctx.plan_roots_dir(&build.deployment_id, &build.id));
    // An apply activates only its plan's systems.
    let expected = match build.provenance.expected_systems.as_ref().filter(|_| deploy && !build.dry_run) {
        Some(systems) => Some(expected_systems_text(systems).map_err(|e| (Reason::WorkerError, e))?),
        None => None,
    };
    // A worker that died (or was taken for dead) on this host may have left
    // an older attempt's effect running: stop it before running again (Q-1;
    // one build of a deployment at a time). A first attempt has no older
    // one, and the scan of every process's environment is skipped.
    if build.attempts > 1 {
        let (id, attempt) = (build.id.clone(), build.attempts);
        let stale = tokio::task::spawn_blocking(move || crate::effect::kill_stale(&id, attempt)).await.unwrap_or(0);
        if stale > 0 {
            tracing::warn!(processes = stale, "stopped an older attempt's effect left running on this host");
        }
    }
    // A database that does not answer now is no reason to give up: the
    // claim is watched while the effect runs, and the lock keeps a late
    // start from running beside the attempt that took over.
    let status = async { builds::claim_status(&mut ctx.db.acquire().await?, build).await };
    if status.await.is_ok_and(|status| !status.held) {
        let now = now_us();
        let span = EffectSpan { spawned_us: now, ended_us: now, times: None };
        return Ok(EffectRun { outcome: EffectOutcome::Stopped(Stop::ClaimLost), work, span, secrets_problem: None });
    }
    let prepare = || -> std::io::Result<PathBuf> {
        // Older attempts' folders go; this attempt starts from a clean one.
        for entry in std::fs::read_dir(ctx.work_dir(&build.id)).into_iter().flatten().flatten() {
            let older = entry
                .file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("attempt-")?.parse::<i64>().ok())
                .is_some_and(|n| n < build.attempts);
            if older {
                std::fs::remove_dir_all(entry.path())?;
            }
        }
        if work.exists() {
            std::fs::remove_dir_all(&work)?;
        }
        std::fs::create_dir_all(work.join("sbom"))?;
        std::fs::create_dir_all(&state)?;
        if let Some(dir) = &plan_roots {
            std::fs::create_dir_all(dir)?;
        }
        if let Some(text) = &expected {
            std::fs::write(work.join(EXPECTED_SYSTEMS_FILE), text)?;
        }
        let file = work.join("configuration.json");
        std::fs::write(&file, serde_json::to_vec_pretty(&build.configuration).expect("configuration serialises"))?;
        Ok(file)
    };
    let worker_error = |e: String| (Reason::WorkerError, e);
    let policy = crate::sandbox::Policy::new(&ctx.config).map_err(worker_error)?;
    let config_file = prepare()
        .and_then(|file| {
            // The effect runs as the sandbox user: its own folders are its to write.
            policy.give(&work)?;
            policy.give(&state)?;
            if let Some(dir) = &plan_roots {
                policy.give(dir)?;
            }
            Ok(file)
        })
        .map_err(|e| worker_error(format!("cannot prepare the build's work folder: {e}")))?;
    let abs = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()).display().to_string();
    let (work_abs, state_abs, source_abs) = (abs(&work), abs(&state), abs(source));
    let handed = if deploy && !build.dry_run {
        operator_secrets::hand_over(build, ctx, &work, &policy).await.map_err(|e| {
            operator_secrets::take_back(&work);
            (Reason::OperatorSecrets, e)
        })?
    } else {
        Handed::none()
    };
    let mut env = vec![
        ("DEPLOYMENT_ID".to_owned(), build.deployment_id.clone()),
        ("BUILD_ID".to_owned(), build.id.clone()),
        ("CONFIGURATION_FILE".to_owned(), abs(&config_file)),
        ("MODULE_SOURCE_DIR".to_owned(), source_abs.clone()),
        ("STATE_DIR".to_owned(), state_abs.clone()),
        ("SBOM_OUT_DIR".to_owned(), abs(&work.join("sbom"))),
        ("DEPLOY_SBOM_TIMEOUT".to_owned(), ctx.config.worker.deploy_sbom_timeout.as_secs().to_string()),
        ("PROVIDER".to_owned(), ctx.config.sources.provider.clone()),
    ];
    env.extend(handed.env.iter().cloned());
    if build.dry_run {
        // §11: evaluate and build, activate nothing, store no SBOM.
        env.push(("DRY_RUN".to_owned(), "1".to_owned()));
    }
    if let Some(dir) = &plan_roots {
        env.push(("PLAN_ROOTS_DIR".to_owned(), abs(dir)));
    }
    if deploy && !build.dry_run {
        // Each node keeps its latest systems for rollbacks.
        env.push(("KEEP_GENERATIONS".to_owned(), ctx.config.safe_change.keep_generations.to_string()));
    }
    if expected.is_some() {
        env.push(("EXPECTED_SYSTEMS_FILE".to_owned(), abs(&work.join(EXPECTED_SYSTEMS_FILE))));
    }
    let spec = EffectSpec {
        program: source.join("core/effects").join(effect),
        args: Vec::new(),
        dir: work.clone(),
        env,
        deadline,
        build: build.id.clone(),
        attempt: build.attempts,
        lock: ctx.deployment_lock(&build.deployment_id),
        scratch: work.join("tmp"),
        sandbox: crate::sandbox::Sandbox {
            policy,
            view: crate::sandbox::View {
                read: vec![source.to_path_buf()],
                write: [work.clone(), state.clone()].into_iter().chain(plan_roots.clone()).collect(),
                network: ctx.config.sandbox.effect_network,
            },
        },
    };
    // Each folder as the effect sees it, and as the worker's configuration names it.
    let plans = plan_roots.as_ref().map(|dir| (abs(dir), dir, "$PLAN_ROOTS_DIR"));
    let paths = [
        (work_abs, &work, "."),
        (state_abs, &state, "$STATE_DIR"),
        (source_abs, &source.to_path_buf(), "$MODULE_SOURCE_DIR"),
    ]
    .into_iter()
    .chain(plans)
    .flat_map(|(canonical, given, to)| [(canonical, to.to_owned()), (given.display().to_string(), to.to_owned())])
    .filter(|(from, _)| from.starts_with('/'))
    .collect();
    let log = DbLog::open(ctx.db.clone(), build, ctx.echo_log, paths, handed.values.clone()).await;
    if build.attempts > 1 {
        // Earlier attempts' output is above this line in the same log.
        let line = format!("slipway: attempt {} of this build starts here (a worker took it over)\n", build.attempts);
        log.append(&line).await;
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(build.cancel_requested.then_some(Stop::Cancel));
    let watcher = tokio::spawn(watch_claim(ctx.db.clone(), build.clone(), stop_tx));
    let spawned_us = now_us();
    let outcome = crate::effect::run(&spec, &log, stop_rx).await;
    operator_secrets::take_back(&work);
    let ended_us = now_us();
    watcher.abort();
    if deploy && !build.dry_run {
        // The effect cannot write Nix's roots folder: the roots of the
        // links it removed (pruned generations, removed nodes) go here.
        match crate::nix::output::remove_dangling_roots_into(&state) {
            Ok(0) => {}
            Ok(n) => tracing::debug!(roots = n, "removed the GC roots of links the deploy removed"),
            Err(e) => tracing::warn!(error = %e, "cannot remove the GC roots of links the deploy removed"),
        }
    }
    let span = EffectSpan { spawned_us, ended_us, times: read_times(&work.join("sbom")) };
    let mut secrets_problem = None;
    if let Ok(EffectOutcome::Exited(_)) = &outcome {
        let nodes = read_nodes(&work.join("sbom"), &mut Vec::new());
        let failed = handed.clear(nodes.as_deref(), &build.deployment_id, &log).await;
        if !failed.is_empty() {
            secrets_problem = Some(format!("could not clear operator secrets from OpenBao: {}", failed.join("; ")));
        }
    }
    // Output written while the database was away is stored before the end
    // is recorded (which waits for the database as long).
    log.flush(RECORD_PATIENCE).await;
    let outcome = outcome.map_err(|e| (Reason::WorkerError, e.to_string()))?;
    Ok(EffectRun { outcome, work, span, secrets_problem })
}

/// The file, in the attempt's work folder, that an apply's effect gets as
/// `EXPECTED_SYSTEMS_FILE`.
const EXPECTED_SYSTEMS_FILE: &str = "expected-systems";

/// The text of `EXPECTED_SYSTEMS_FILE`: one `<node>` TAB `<system store
/// path>` line per node. A node name or path that cannot be written so
/// (empty, or holding a tab, a line break or another control character,
/// or a `/` in a node's name) is an error naming it.
fn expected_systems_text(systems: &std::collections::BTreeMap<String, String>) -> Result<String, String> {
    let plain = |s: &str| !s.is_empty() && !s.chars().any(char::is_control);
    let mut text = String::new();
    for (node, system) in systems {
        if !plain(node) || node.contains('/') || node.starts_with('.') {
            return Err(format!("the plan's node {} cannot be named to the effect", crate::id::quoted(node)));
        }
        if !plain(system) {
            return Err(format!("the plan's system of node {node} cannot be named to the effect"));
        }
        text.push_str(&format!("{node}\t{system}\n"));
    }
    Ok(text)
}

/// How an effect run by [`run_effect`] went.
pub(crate) struct EffectRun {
    /// How the effect ended.
    pub(crate) outcome: EffectOutcome,
    /// The attempt's work folder, with what the effect left in `sbom/`.
    pub(crate) work: PathBuf,
    /// When it started and was gone, and its own account of its Nix time.
    pub(crate) span: EffectSpan,
    /// §8: the operator secrets the build cleared that could not be
    /// deleted from OpenBao, when any (the build fails with
    /// `operator_secrets`).
    pub(crate) secrets_problem: Option<String>,
}

/// How often a running build looks for a cancel request and its claim.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Sends why the effect must stop: someone asked to cancel the build, or
/// this worker no longer holds its claim.
async fn watch_claim(db: Db, build: BuildRow, tx: tokio::sync::watch::Sender<Option<Stop>>) {
    // The claim was just checked before the effect started: the first look is one period later.
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + WATCH_EVERY, WATCH_EVERY);
    loop {
        tick.tick().await;
        let status = async { builds::claim_status(&mut db.acquire().await?, &build).await };
        let stop = match status.await {
            Ok(status) if !status.held => Stop::ClaimLost,
            Ok(status) if status.cancel_requested => Stop::Cancel,
            // A database outage is not a reason to stop the effect.
            _ => continue,
        };
        let _ = tx.send(Some(stop));
        return;
    }
}

/// The folder holding the build's module source on this host: the built-in
/// one (`SLIPWAY_DEFAULT_SOURCE_DIR`) for a build without a source, a
/// `path:` folder as it is, a git source's stored revision from this host's
/// source cache, fetched first if this host has not (within `NIX_TIMEOUT`);
/// either tree inspected first (SEC-3: no link out of it, its size), as
/// every [`crate::fetch::fetch`] does.
async fn resolve_source(build: &BuildRow, ctx: &Ctx) -> Result<PathBuf, String> {
    let dir = match build.module_source.as_deref() {
        None => ctx.config.sources.default_source_dir.clone(),
        Some(s) => {
            let source = ModuleSource::parse(s).map_err(|e| e.to_string())?;
            let fetched = crate::fetch::fetch(&ctx.config, &source, ctx.config.sources.nix_timeout).await;
            fetched
                .map_err(|e| {
                    // Logged once as "build failed" where the build ends;
                    // the tool's output only at debug.
                    tracing::debug!(build.id = %build.id, error = %e, log = e.log(), "cannot fetch the build's module source");
                    e.to_string()
                })?
                .dir
        }
    };
    if dir.join("core/default.nix").is_file() {
        Ok(dir)
    } else {
        Err(format!("module source folder {} has no core/default.nix", dir.display()))
    }
}
