//! The `nix` queue's job body (§6 `schema_build`, `names_eval`; MS-7, EV-1).
//!
//! 1. Read the job's `nix_results` row; a row that is no longer `computing`
//!    (another worker ended it) is left alone.
//! 2. Hold the fleet-wide slot reserved for it when it was queued (a lease
//!    that expired while the job waited is taken again if one is free;
//!    otherwise the job ends `timeout`: no worker ran it in time).
//! 3. Fetch the source into this host's cache and run the build or the eval,
//!    every `git` and Nix process contained, all under one `NIX_TIMEOUT`.
//! 4. Record the result, or the failure with the tools' log, and free the
//!    slot, in one transaction. A job's failure is its result: never retried.

use super::{Ctx, Job, JobError};
use crate::fetch;
use crate::nix::{BuiltSchema, FailureCode, Limits, NixFailure, NixRun};
use crate::source::ModuleSource;
use crate::store::nix_results::{self as rows, NixKind, NixRow, NixStatus};
use crate::store::queue::NixJob;
use crate::store::{now_ms, StoreError};
use serde_json::Value;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How much longer than `NIX_TIMEOUT` a slot lease lasts once the job runs:
/// the time to record the result.
pub const LEASE_MARGIN: Duration = Duration::from_secs(30);

impl Job for NixJob {
    type Output = ();
    const NAME: &'static str = "nix";

    async fn run(self, ctx: &Ctx) -> Result<(), JobError> {
        Ok(run(self, ctx).await?)
    }

    /// `job.kind` is `names_eval` or `schema_build`, by the key's kind.
    fn span(&self, worker: &str) -> tracing::Span {
        let kind = if self.key.starts_with("names ") { "names_eval" } else { "schema_build" };
        tracing::info_span!("job", job.kind = kind, worker.name = %worker)
    }
}

/// Runs one `nix`-queue job to its recorded end.
pub async fn run(job: NixJob, ctx: &Ctx) -> Result<(), StoreError> {
    let row = rows::find(&mut ctx.db.acquire().await?, &job.key).await?;
    let Some(row) = row.filter(|r| r.status == NixStatus::Computing) else {
        return Ok(());
    };
    let timeout = ctx.config.sources.nix_timeout;
    let held = {
        let mut tx = ctx.db.begin_write().await?;
        let now = now_ms();
        let until = now + (timeout + LEASE_MARGIN).as_millis() as i64;
        let held = rows::extend_slot(&mut tx, &row.key, now, until).await?
            || rows::reserve_slot(&mut tx, &row.key, ctx.config.sources.nix_slots, now, until).await?;
        if held {
            rows::mark_started(&mut tx, &row.key, &ctx.worker, now).await?;
        }
        tx.commit().await?;
        held
    };
    let started = Instant::now();
    let mut log = String::new();
    let outcome = if held {
        tracing::info!(kind = row.kind.as_str(), source = %row.source, "nix job started");
        compute(&row, ctx, &mut log).await.map_err(|f| storage_fault_of(f, &log))
    } else {
        Err(NixFailure {
            code: FailureCode::Timeout,
            output: None,
            message: format!(
                "no worker ran this job within NIX_TIMEOUT ({}s) while a nix slot was free; try again",
                timeout.as_secs()
            ),
        })
    };
    let text =
        outcome.as_ref().map(Value::to_string).map_err(|f| serde_json::to_string(f).expect("a failure serialises"));
    let mut tx = ctx.db.begin_write().await?;
    rows::finish(&mut tx, &row.key, row.created_at, text.as_deref().map_err(String::as_str), &log, now_ms()).await?;
    rows::release_slot(&mut tx, &row.key).await?;
    tx.commit().await?;
    match &outcome {
        Ok(_) => tracing::info!(kind = row.kind.as_str(), ms = started.elapsed().as_millis() as u64, "nix job done"),
        Err(f) => {
            tracing::warn!(kind = row.kind.as_str(), code = f.code.as_str(), error = %f.message, "nix job failed")
        }
    }
    Ok(())
}

/// A build that failed with a storage fault in its log (Nix or git could
/// not write: the Nix store's or the state folder's disk is full) is
/// `storage_unavailable`, not the source's failure.
fn storage_fault_of(failure: NixFailure, log: &str) -> NixFailure {
    match (failure.code, crate::storage::fault_in_log(log)) {
        (FailureCode::BuildFailed | FailureCode::FetchFailed, Some(words)) => NixFailure {
            code: FailureCode::StorageUnavailable,
            message: format!("the worker's storage failed while it ran this job ({words}): {}", failure.message),
            ..failure
        },
        _ => failure,
    }
}

/// Fetches the row's source and runs its build or eval.
async fn compute(row: &NixRow, ctx: &Ctx, log: &mut String) -> Result<Value, NixFailure> {
    // Checked before anything is fetched: the name goes into a Nix string.
    crate::nix::check_provider(&row.provider).map_err(|message| NixFailure {
        code: FailureCode::BuildFailed,
        output: None,
        message,
    })?;
    let timeout = ctx.config.sources.nix_timeout;
    let until = Instant::now() + timeout;
    let fetch_started = Instant::now();
    let fetched = source_dir(&row.source, ctx, timeout).await?;
    let fetch_ms = fetch_started.elapsed().as_millis() as u64;
    let work = work_dir(ctx, &row.key);
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| NixFailure {
        code: FailureCode::of_write(&e),
        output: None,
        message: format!("the worker cannot create a work folder in its state folder: {e}"),
    })?;
    let marker = format!("slipway-nix:{}", &row.key.chars().take(80).collect::<String>());
    let policy = crate::sandbox::Policy::new(&ctx.config).map_err(|message| NixFailure {
        code: FailureCode::BuildFailed,
        output: None,
        message,
    })?;
    let nix = NixRun {
        dir: &fetched.dir,
        provider: &row.provider,
        work: &work,
        until,
        marker: &marker,
        policy: &policy,
        limits: Limits::of(&ctx.config),
    };
    let result = match row.kind {
        NixKind::SchemaBuild => {
            nix.build_schema(&fetched.pinned, fetched.revision.as_deref(), log).await.map(|mut built: BuiltSchema| {
                built.timings_ms.insert("fetch".into(), fetch_ms);
                serde_json::to_value(built).expect("outputs serialise")
            })
        }
        NixKind::NamesEval => {
            let configuration: Value = serde_json::from_str(row.input.as_deref().unwrap_or("null")).map_err(|e| {
                NixFailure { code: FailureCode::BuildFailed, output: Some("names".into()), message: e.to_string() }
            })?;
            nix.eval_names(&configuration, log).await.map(|names| serde_json::to_value(names).expect("names serialise"))
        }
    };
    // Its out links are GC roots of Nix: they go with the folder.
    if let Err(e) = crate::nix::output::remove_folder_and_roots(&work) {
        tracing::warn!(folder = %work.display(), error = %e, "cannot remove a nix job's work folder");
    }
    result
}

/// The folder of a source on this host (`""`: the built-in source the
/// worker deploys from, `SLIPWAY_DEFAULT_SOURCE_DIR`), fetching it if needed.
pub(crate) async fn source_dir(source: &str, ctx: &Ctx, deadline: Duration) -> Result<fetch::Fetched, NixFailure> {
    if source.is_empty() {
        return Ok(fetch::Fetched {
            dir: ctx.config.sources.default_source_dir.clone(),
            revision: None,
            pinned: String::new(),
        });
    }
    let parsed = ModuleSource::parse(source).map_err(|e| NixFailure {
        code: FailureCode::FetchFailed,
        output: None,
        message: e.to_string(),
    })?;
    fetch::fetch(&ctx.config, &parsed, deadline).await.map_err(|e| {
        // Logged once as "nix job failed" where the job ends; the tool's
        // output only at debug.
        tracing::debug!(error = %e, log = e.log(), "fetching a module source failed");
        NixFailure::from_fetch(&e)
    })
}

/// This job's own folder on this host.
fn work_dir(ctx: &Ctx, key: &str) -> PathBuf {
    use sha2::{Digest, Sha256};
    let digest = hex::encode(Sha256::digest(key.as_bytes()));
    ctx.config.state_dir.join("nix").join(format!("{}-{}", &digest[..16], std::process::id()))
}
