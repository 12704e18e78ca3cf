//! The workspace of one build attempt: its work folder, the
//! environment its effect gets, its log in the database, and the watch on
//! its claim and on cancel requests. Deploy and destroy run their effects
//! through `run_effect`.

use super::operator_secrets::{self, Handed};
use super::report::Reason;
use super::timing::{now_us, EffectSpan, EffectTimes};
use super::Ctx;
use crate::effect::{EffectOutcome, EffectSpec, LogSink, Stop};
use crate::store::builds::{self, BuildRow};
use crate::store::Db;
use futures::future::BoxFuture;
use futures::FutureExt;
use std::path::PathBuf;

/// The most a build's log keeps, in bytes; output beyond it is counted, not stored.
pub const LOG_LIMIT: i64 = 8 * 1024 * 1024;

/// Appends effect output to the build's log in the database, up to
/// [`LOG_LIMIT`] bytes over all attempts of the build.
/// Only the worker that holds the build's claim writes; each attempt
/// numbers its chunks apart ([`builds::log_base`]). Paths of this host are
/// shown relative to the attempt's work folder (`./sbom/…`) or by the
/// variable that names them (`$STATE_DIR/…`, `$MODULE_SOURCE_DIR/…`), so
/// token holders never see the server's layout; an operator secret value
/// handed to the effect is shown as `[redacted]` (a value split across two
/// writes of the effect is not recognised).
pub(crate) struct DbLog {
    db: Db,
    build: BuildRow,
    echo: bool,
    /// Host paths and what the log shows instead, longest first.
    paths: Vec<(String, String)>,
    /// Operator secret values handed to the effect: shown as `[redacted]`.
    hidden: Vec<secrecy::SecretString>,
    /// Next chunk number and bytes stored so far.
    end: std::sync::Mutex<(i64, i64)>,
    /// Chunks not stored yet (the database was away), in order: sent before
    /// the next chunk, and waited for when the effect ends ([`DbLog::flush`]).
    unsent: std::sync::Mutex<std::collections::VecDeque<(i64, String)>>,
}

impl DbLog {
    pub(crate) async fn open(
        db: Db,
        build: &BuildRow,
        echo: bool,
        paths: Vec<(String, String)>,
        hidden: Vec<secrecy::SecretString>,
    ) -> Self {
        let start = (builds::log_base(build.attempts) + 1, 0);
        // A first attempt's log is empty: only the claim holder appends, and
        // the build had no holder before it (one round trip less per build).
        let end = if build.attempts <= 1 {
            start
        } else {
            let end = async { builds::log_end(&mut db.acquire().await?, &build.id, build.attempts).await };
            end.await.unwrap_or(start)
        };
        let mut paths = paths;
        paths.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
        let mut hidden = hidden;
        hidden.retain(|v| !secrecy::ExposeSecret::expose_secret(v).is_empty());
        Self {
            db,
            build: build.clone(),
            echo,
            paths,
            hidden,
            end: std::sync::Mutex::new(end),
            unsent: Default::default(),
        }
    }

    /// Stores the chunks not stored yet, in order; `false` when the
    /// database is still away (they stay for the next try). A chunk refused
    /// because another worker holds the build now is dropped.
    async fn send_unsent(&self) -> bool {
        loop {
            let Some((seq, text)) = self.unsent.lock().expect("unsent log lock").front().cloned() else { return true };
            let appended = async { builds::append_log(&mut self.db.acquire().await?, &self.build, seq, &text).await };
            match appended.await {
                Ok(stored) => {
                    if !stored {
                        tracing::debug!("build log not appended: another worker holds the build now");
                    }
                    self.unsent.lock().expect("unsent log lock").pop_front();
                }
                Err(e) => {
                    tracing::debug!(error = %e, "cannot append to the build log yet; keeping the output");
                    return false;
                }
            }
        }
    }

    /// Waits, trying again every few seconds, until every chunk is stored or
    /// `patience` has passed (then says how much output was lost).
    pub(crate) async fn flush(&self, patience: std::time::Duration) {
        let started = std::time::Instant::now();
        let mut wait = std::time::Duration::from_millis(250);
        let mut told = false;
        while !self.send_unsent().await {
            if !told {
                tracing::warn!("the effect has ended; cannot record the build's end yet: the database is away, so its log and outcome wait for it");
                told = true;
            }
            if started.elapsed() >= patience {
                let lost = self.unsent.lock().expect("unsent log lock").len();
                tracing::warn!(chunks = lost, "the database stayed away; part of the build log is lost");
                return;
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(std::time::Duration::from_secs(4));
        }
    }
}

/// Replaces each host path `from` in `text` by `to` where the path ends
/// there (followed by `/`, the end, or a character that cannot continue a
/// file name such as a space or quote).
pub(crate) fn hide_paths(text: &str, paths: &[(String, String)]) -> String {
    let mut out = text.to_owned();
    for (from, to) in paths {
        if from.is_empty() || !out.contains(from.as_str()) {
            continue;
        }
        let mut result = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(at) = rest.find(from.as_str()) {
            let after = &rest[at + from.len()..];
            let ends = after.chars().next().is_none_or(|c| !(c.is_alphanumeric() || "-_.+".contains(c)));
            result.push_str(&rest[..at]);
            result.push_str(if ends { to } else { from });
            rest = after;
        }
        result.push_str(rest);
        out = result;
    }
    out
}

impl LogSink for DbLog {
    fn append<'a>(&'a self, chunk: &'a str) -> BoxFuture<'a, ()> {
        async move {
            let mut chunk = std::borrow::Cow::Borrowed(chunk);
            for value in &self.hidden {
                let value = secrecy::ExposeSecret::expose_secret(value);
                if chunk.contains(value) {
                    chunk = chunk.replace(value, "[redacted]").into();
                }
            }
            if self.echo {
                eprint!("{chunk}");
            }
            let chunk = hide_paths(&chunk, &self.paths);
            let (seq, text) = {
                let mut end = self.end.lock().expect("log position lock");
                let (seq, bytes) = *end;
                let room = LOG_LIMIT - bytes;
                let text = if room <= 0 {
                    None
                } else if chunk.len() as i64 <= room {
                    Some(chunk.clone())
                } else {
                    let mut cut = room as usize;
                    while !chunk.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    Some(format!(
                        "{}\nslipway: the log reached {} MiB; further output is not stored\n",
                        &chunk[..cut],
                        LOG_LIMIT / 1024 / 1024
                    ))
                };
                *end = (seq + 1, bytes + chunk.len() as i64);
                (seq, text)
            };
            if let Some(text) = text {
                self.unsent.lock().expect("unsent log lock").push_back((seq, text));
            }
            self.send_unsent().await;
        }
        .boxed()
    }
}

/// Prepares the attempt's work folder (with an empty `sbom/` folder, the
/// effect's `SBOM_OUT_DIR`) and runs one of the source's effects with the
/// environment of Q-4. Returns how it ended, the attempt's work folder, and
/// when it started and was gone, with what it said of its Nix time
/// (`timings.json`, [`EffectTimes`]).
///
/// Everything here is scoped to this attempt: it stops only older attempts'
/// effects on this host, removes only older attempts' folders, and runs the
/// effect only while this worker still holds the build's claim (checked
/// before the start and every second while it runs; the deployment's lock,
/// which the effect holds, keeps a late start from running beside the
/// attempt that took over).
pub(crate) async fn run_effect(
    build: &BuildRow,
    ctx: &Ctx,
    source: &std::path::Path,
    effect: &str,
    deadline: std::time::Duration,
) -> Result<EffectRun, (Reason, String)> {
    let work = ctx.attempt_dir(&build.id, build.attempts);
    let state = ctx.provider_state_dir(&build.deployment_id);
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
            Ok(file)
        })
        .map_err(|e| worker_error(format!("cannot prepare the build's work folder: {e}")))?;
    let abs = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()).display().to_string();
    let (work_abs, state_abs, source_abs) = (abs(&work), abs(&state), abs(source));
    let handed = if effect == "deploy" && !build.dry_run {
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
                write: vec![work.clone(), state.clone()],
                network: ctx.config.sandbox.effect_network,
            },
        },
    };
    // Each folder as the effect sees it, and as the worker's configuration names it.
    let paths = [
        (work_abs, &work, "."),
        (state_abs, &state, "$STATE_DIR"),
        (source_abs, &source.to_path_buf(), "$MODULE_SOURCE_DIR"),
    ]
    .into_iter()
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
    let span = EffectSpan { spawned_us, ended_us, times: EffectTimes::read(&work.join("sbom")) };
    let mut secrets_problem = None;
    if let Ok(EffectOutcome::Exited(_)) = &outcome {
        let nodes = super::deploy::read_nodes(&work.join("sbom"), &mut Vec::new());
        let failed = handed.clear(nodes.as_deref(), &build.deployment_id, &log).await;
        if !failed.is_empty() {
            secrets_problem = Some(format!("could not clear operator secrets from OpenBao: {}", failed.join("; ")));
        }
    }
    // Output written while the database was away is stored before the end
    // is recorded (which waits for the database as long).
    log.flush(super::build::RECORD_PATIENCE).await;
    let outcome = outcome.map_err(|e| (Reason::WorkerError, e.to_string()))?;
    Ok(EffectRun { outcome, work, span, secrets_problem })
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
