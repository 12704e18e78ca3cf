//! Rollouts (RO-1): one module source revision rolled out to many
//! deployments in waves.
//!
//! [`start`] resolves the target source once (its revision is pinned for
//! the whole rollout), splits the deployments into waves, and runs the
//! preflight: each deployment's stored configuration is migrated and
//! validated against the target revision (a refused one is `skipped`,
//! named with the reason, and counts as a failure of its wave) and
//! name-evaluated (bounded by `NIX_SLOTS` like any submit's eval). The
//! rollout, its deployments and the driver's first job commit together.
//!
//! The driver is the `rollouts` queue's [`RolloutJob`] ([`tick`]). Each step
//! reads the wave under way; settles each queued deployment whose build
//! ended (`succeeded`, `failed`, or `overridden` when a front-end's newer
//! submit superseded it, Q-7); queues each pending deployment's deploy in a
//! transaction of its own that also records the deployment as `queued`
//! with the build's id (so a step that dies half-way queues no deployment
//! twice and skips none); and once every build of the wave ended, halts the
//! rollout past its failure budget, completes it after the last wave, or
//! starts the next wave after the pause. Each step pushes the next one
//! (`tick + 1`) in the transaction that changes the rollout; a job whose
//! tick is not the rollout's is stale and does nothing, so a step handed
//! out twice acts once. A deployment submitted, deleted or destroyed since
//! the preflight is `overridden` and gets no rollout build: the newer
//! submit wins.
//!
//! A rollout build is an ordinary deploy (trigger `rollout`, the rollout's
//! id in its provenance) queued as a rollback queues one
//! ([`crate::safe_change`]): the deployment's snapshot becomes the
//! prepared configuration at the pinned revision, its queued deploys are
//! superseded, and it waits its turn (ST-2), under the Q-3 bound (a full
//! queue leaves the rest of the wave pending until a later step).

use crate::id::{new_build_id, DeploymentId};
use crate::jobs::{Ctx, Job, JobError};
use crate::provenance::{HealthGate, Provenance, RequestedBy, Trigger};
use crate::secrets::SecretPins;
use crate::source::policy::{NamesEval, Sources};
use crate::source::ModuleSource;
use crate::state::{BuildKind, BuildStatus, DeploymentState};
use crate::store::queue::{self, RolloutJob};
use crate::store::rollouts::{self, EntryRow, RolloutRow};
use crate::store::submit::{lock_and_upsert, write_build, AdmissionLock, WriteBuild, ADMISSION_LOCK};
use crate::store::{builds, deployments, now_ms, Conn, Db, StoreError};
use crate::submit::SubmitError;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::time::Duration;

/// How often a running rollout's driver looks at the builds of its wave.
pub const POLL: Duration = Duration::from_secs(1);

/// The most waves one rollout may have.
pub const MAX_WAVES: usize = 100;

/// The longest pause between waves: a day.
pub const LONGEST_PAUSE: Duration = Duration::from_secs(86_400);

/// Why a rollout request is refused. Nothing is written then.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    /// `400 invalid_rollout`: the request is not a rollout (what is wrong).
    #[error("{0}")]
    Invalid(String),
    /// `400 unknown_deployments`: deployments named that do not exist
    /// (the first [`NAMED`], and how many in all).
    #[error("{} of the deployments named do not exist: {}{}", .total, .named.join(", "), if *.total > .named.len() { ", …" } else { "" })]
    UnknownDeployments {
        /// The first unknown ids.
        named: Vec<String>,
        /// How many are unknown.
        total: usize,
    },
    /// `400 too_many_deployments`: over `ROLLOUT_MAX_DEPLOYMENTS`.
    #[error("the rollout names {count} deployments, more than ROLLOUT_MAX_DEPLOYMENTS ({limit}); split it")]
    TooMany {
        /// How many were named (or selected).
        count: usize,
        /// `ROLLOUT_MAX_DEPLOYMENTS`.
        limit: u32,
    },
    /// `404`: no such rollout.
    #[error("no rollout {0}")]
    NotFound(String),
    /// `409 rollout_ended`: a pause, resume or cancel of a rollout that
    /// halted, was cancelled or completed.
    #[error("rollout {id} is {state}: it can no longer be paused, resumed or cancelled")]
    Ended {
        /// The rollout.
        id: String,
        /// Its state.
        state: String,
    },
    /// The target source cannot be had (as a submit's would be refused).
    #[error(transparent)]
    Source(#[from] SubmitError),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How many unknown deployment ids a refusal names.
pub const NAMED: usize = 20;

/// Which deployments a rollout takes.
#[derive(Debug, Clone)]
pub enum Selection {
    /// These ids, in this order.
    Ids(Vec<String>),
    /// Every live deployment whose stored source is this repository (the
    /// URL without `git+` and without `?rev`/`?ref`), by id.
    Repository(String),
}

/// A wave's size as asked for: a number of deployments, or the share of
/// the rollout's deployments reached by the end of the wave (`"25%"`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WaveSize {
    /// This many deployments.
    Count(u64),
    /// Up to this percentage of all the deployments, counting the earlier waves.
    Percent(f64),
}

impl WaveSize {
    /// A wave size from its JSON (a whole number ≥ 1, or `"<p>%"` with
    /// 0 < p ≤ 100); why not otherwise.
    pub fn parse(value: &Value) -> Result<Self, String> {
        if let Some(n) = value.as_u64() {
            return if n >= 1 { Ok(Self::Count(n)) } else { Err("a wave of 0 deployments".into()) };
        }
        let text = value.as_str().ok_or_else(|| format!("{value} is neither a number nor a percentage"))?;
        let p = text
            .strip_suffix('%')
            .and_then(|p| p.trim().parse::<f64>().ok())
            .filter(|p| p.is_finite() && *p > 0.0 && *p <= 100.0)
            .ok_or_else(|| format!("{} is not a percentage from 0% (excluded) to 100%", crate::id::quoted(text)))?;
        Ok(Self::Percent(p))
    }
}

/// Each wave's number of deployments, for `total` deployments: a count as
/// it is; a percentage up to that share of `total` (rounded up) minus the
/// earlier waves. The waves must add up to `total` exactly, and none may
/// be empty.
pub fn resolve_waves(sizes: &[WaveSize], total: u64) -> Result<Vec<u64>, String> {
    if sizes.is_empty() {
        return Err("waves is empty: give at least one wave".into());
    }
    if sizes.len() > MAX_WAVES {
        return Err(format!("{} waves: at most {MAX_WAVES}", sizes.len()));
    }
    let mut out = Vec::with_capacity(sizes.len());
    let mut reached = 0u64;
    for (i, size) in sizes.iter().enumerate() {
        let n = match *size {
            WaveSize::Count(n) => n,
            WaveSize::Percent(p) => {
                let upto = ((total as f64) * p / 100.0).ceil() as u64;
                upto.checked_sub(reached).filter(|n| *n > 0).ok_or_else(|| {
                    format!("wave {} ({p}%) reaches no deployment past the earlier waves' {reached}", i + 1)
                })?
            }
        };
        reached = reached.saturating_add(n);
        out.push(n);
    }
    if reached != total {
        return Err(format!("the waves add up to {reached} deployments, but the rollout has {total}"));
    }
    Ok(out)
}

/// The failures a rollout may have: failed builds and preflight skips.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// In one wave (default 0).
    #[serde(default)]
    pub per_wave: u32,
    /// In the whole rollout (default 0).
    #[serde(default)]
    pub total: u32,
}

/// What a rollout asks for (`POST /rollouts`, already parsed).
#[derive(Debug, Clone)]
pub struct StartRequest {
    /// The target module source (`git+<url>?rev=…` or `?ref=…`).
    pub module_source: String,
    /// The deployments.
    pub selection: Selection,
    /// The waves' sizes, the first the canaries.
    pub waves: Vec<WaveSize>,
    /// The failure budgets.
    pub max_failures: Budget,
    /// The pause between waves.
    pub pause: Duration,
    /// The health gate of each build; `None`: readiness.
    pub health_gate: Option<HealthGate>,
    /// Who asks.
    pub requested_by: Option<RequestedBy>,
}

/// What the preflight made of a deployment's stored configuration,
/// checked against the target revision (stored as
/// `rollout_deployments.prepared`; never a secret value).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Prepared {
    /// The migrated configuration.
    pub configuration: Value,
    /// TF-1 instances.
    pub instances: Vec<crate::source::outputs::Instance>,
    /// How its instances are probed.
    pub readiness: crate::source::outputs::ReadinessMeta,
    /// TF-1 domain.
    #[serde(default)]
    pub domain: Option<String>,
    /// The names eval, when it ran.
    #[serde(default)]
    pub names: Option<Value>,
}

/// Starts a rollout (see the module doc): the rollout as
/// [`view`] answers it.
pub async fn start(
    db: &Db,
    sources: &dyn Sources,
    nix_slots: u32,
    max_deployments: u32,
    request: StartRequest,
) -> Result<RolloutView, RolloutError> {
    if request.pause > LONGEST_PAUSE {
        return Err(RolloutError::Invalid("pause is longer than a day".into()));
    }
    let ids = select(db, &request.selection, max_deployments).await?;
    let sizes = resolve_waves(&request.waves, ids.len() as u64).map_err(RolloutError::Invalid)?;
    // Resolved once: a `ref` is pinned to the revision its outputs were built from.
    let (checker, pinned) = sources.checker_for(Some(&request.module_source)).await?;
    let pinned = pinned.ok_or_else(|| RolloutError::Invalid("the target module source has no revision".into()))?;
    let mut rows = std::collections::HashMap::new();
    {
        let mut conn = db.acquire().await?;
        for chunk in ids.chunks(500) {
            rows.extend(deployments::get_many(&mut conn, chunk).await?);
        }
    }
    let mut entries: Vec<rollouts::NewEntry> = Vec::with_capacity(ids.len());
    let mut to_name = Vec::new();
    let mut conn = db.acquire().await?;
    let waves = sizes.iter().enumerate().flat_map(|(w, n)| std::iter::repeat_n(w as i64, *n as usize));
    for (id, wave) in ids.iter().zip(waves) {
        let row = rows.get(id).ok_or_else(|| RolloutError::UnknownDeployments { named: vec![id.clone()], total: 1 })?;
        let deciding = builds::deciding(&mut conn, id).await?;
        if deciding.is_some_and(|b| b.kind == BuildKind::Destroy) {
            entries.push((id.clone(), wave, "skipped", Some("the deployment is destroyed".into()), row.version, None));
            continue;
        }
        match checker.check(row.configuration.clone(), None) {
            Ok(checked) => {
                let prepared = Prepared {
                    configuration: checked.configuration,
                    instances: checked.instances,
                    readiness: checked.readiness,
                    domain: checked.domain,
                    names: None,
                };
                to_name.push(entries.len());
                entries.push((id.clone(), wave, "pending", None, row.version, Some(json!(prepared))));
            }
            Err(listing) => {
                let problems: Vec<String> =
                    listing.problems.iter().take(3).map(|p| format!("{}: {}", p.path, p.message)).collect();
                let reason = format!(
                    "the target revision refuses its stored configuration ({} problems): {}",
                    listing.total(),
                    problems.join("; ")
                );
                entries.push((id.clone(), wave, "skipped", Some(reason), row.version, None));
            }
        }
    }
    drop(conn);
    name_all(sources, &pinned, nix_slots, &mut entries, &to_name).await?;
    let now = now_ms();
    let row = RolloutRow {
        id: format!("rollout-{}", ulid::Ulid::generate().to_string().to_lowercase()),
        state: "running".into(),
        module_source: pinned,
        requested_source: request.module_source.clone(),
        waves: sizes,
        max_failures_per_wave: i64::from(request.max_failures.per_wave),
        max_failures: i64::from(request.max_failures.total),
        pause_ms: request.pause.as_millis() as i64,
        health_gate: request.health_gate,
        wave: 0,
        next_at: 0,
        tick: 1,
        reason: None,
        requested_by: request.requested_by,
        created_at: now,
        updated_at: now,
    };
    let skipped: Vec<Value> =
        entries.iter().filter(|e| e.2 == "skipped").map(|e| json!({ "deployment_id": e.0, "reason": e.3 })).collect();
    let mut tx = db.begin_write().await?;
    rollouts::insert(&mut tx, &row).await?;
    rollouts::insert_entries(&mut tx, &row.id, &entries).await?;
    let body = json!({
        "type": "rollout.started", "rollout_id": row.id, "module_source": row.module_source,
        "deployments": entries.len(), "waves": row.waves, "skipped": skipped,
    });
    rollouts::record_event(&mut tx, &row.id, "rollout.started", &body, now).await?;
    wave_started(&mut tx, &row, now).await?;
    queue::push(&mut tx, &RolloutJob { rollout_id: row.id.clone(), tick: row.tick }, None).await?;
    tx.commit().await?;
    tracing::info!(rollout.id = %row.id, deployments = entries.len(), module_source = %row.module_source, "rollout started");
    let mut conn = db.acquire().await?;
    view_in(&mut conn, &row.id).await?.ok_or_else(|| RolloutError::NotFound(row.id.clone()))
}

/// The names eval of each prepared entry at `to_name`, `nix_slots` at a
/// time (each as a submit's: skipped when every slot is busy).
async fn name_all(
    sources: &dyn Sources,
    pinned: &str,
    nix_slots: u32,
    entries: &mut [rollouts::NewEntry],
    to_name: &[usize],
) -> Result<(), RolloutError> {
    use futures::StreamExt as _;
    let jobs: Vec<(usize, Value)> =
        to_name.iter().filter_map(|i| Some((*i, entries[*i].5.as_ref()?.get("configuration")?.clone()))).collect();
    let named: Vec<(usize, Result<NamesEval, SubmitError>)> = futures::stream::iter(jobs)
        .map(|(i, configuration)| async move { (i, sources.names(Some(pinned), &configuration).await) })
        .buffer_unordered(nix_slots.max(1) as usize)
        .collect()
        .await;
    for (i, names) in named {
        if let NamesEval::Evaluated(names) = names? {
            if let Some(prepared) = entries[i].5.as_mut() {
                prepared["names"] = serde_json::to_value(names).expect("names serialise");
            }
        }
    }
    Ok(())
}

/// The ids a selection takes, checked: known, not repeated, within `max`.
async fn select(db: &Db, selection: &Selection, max: u32) -> Result<Vec<String>, RolloutError> {
    let ids = match selection {
        Selection::Ids(ids) => {
            if ids.len() > max as usize {
                return Err(RolloutError::TooMany { count: ids.len(), limit: max });
            }
            if ids.is_empty() {
                return Err(RolloutError::Invalid("deployments is empty: name at least one deployment".into()));
            }
            let mut seen = std::collections::HashSet::new();
            for id in ids {
                DeploymentId::parse(id).map_err(|e| RolloutError::Invalid(format!("deployments: {e}")))?;
                if !seen.insert(id.as_str()) {
                    return Err(RolloutError::Invalid(format!("deployment {id} is named twice")));
                }
            }
            let mut conn = db.acquire().await?;
            let mut unknown = Vec::new();
            for chunk in ids.chunks(500) {
                let known = deployments::get_many(&mut conn, chunk).await?;
                unknown.extend(chunk.iter().filter(|id| !known.contains_key(*id)).cloned());
            }
            if !unknown.is_empty() {
                let total = unknown.len();
                unknown.truncate(NAMED);
                return Err(RolloutError::UnknownDeployments { named: unknown, total });
            }
            ids.clone()
        }
        Selection::Repository(url) => {
            let url = url.strip_prefix("git+").unwrap_or(url);
            let live = rollouts::live_sources(&mut db.acquire().await?).await?;
            let ids: Vec<String> = live
                .into_iter()
                .filter(|(_, source)| matches!(ModuleSource::parse(source), Ok(ModuleSource::Git { url: u, .. }) if u == url))
                .map(|(id, _)| id)
                .collect();
            if ids.is_empty() {
                return Err(RolloutError::Invalid(format!(
                    "no live deployment's module source is repository {}",
                    crate::id::quoted(url)
                )));
            }
            if ids.len() > max as usize {
                return Err(RolloutError::TooMany { count: ids.len(), limit: max });
            }
            ids
        }
    };
    Ok(ids)
}

/// Records `rollout.wave_started` of `row`'s wave under way.
async fn wave_started(tx: &mut Conn, row: &RolloutRow, now: i64) -> Result<(), StoreError> {
    let body = json!({
        "type": "rollout.wave_started", "rollout_id": row.id, "wave": row.wave + 1,
        "waves": row.waves.len(), "size": row.waves.get(row.wave as usize), "not_before_ms": row.next_at,
    });
    rollouts::record_event(tx, &row.id, "rollout.wave_started", &body, now).await
}

/// An entry's outcome once its build ended, from the build's status.
fn settled(entry: &EntryRow) -> Option<(&'static str, Option<String>)> {
    if entry.status != "queued" {
        return None;
    }
    match entry.build_status.as_deref() {
        Some("succeeded") => Some(("succeeded", None)),
        Some("failed") => Some(("failed", entry.build_error.clone())),
        Some("cancelled") => Some(("failed", Some("the build was cancelled".into()))),
        Some("superseded") => {
            Some(("overridden", Some("a newer submit of the deployment superseded the build".into())))
        }
        None => Some(("failed", Some("the build is gone".into()))),
        _ => None,
    }
}

/// Whether an entry's status counts against the failure budgets.
fn is_failure(status: &str) -> bool {
    matches!(status, "failed" | "skipped")
}

impl Job for RolloutJob {
    type Output = ();
    const NAME: &'static str = "rollout";

    async fn run(self, ctx: &Ctx) -> Result<(), JobError> {
        Ok(tick(ctx, self).await?)
    }

    fn span(&self, worker: &str) -> tracing::Span {
        tracing::info_span!("job", job.kind = "rollout", rollout.id = %self.rollout_id, worker.name = %worker)
    }
}

/// What queuing one deployment's build came to.
enum Queued {
    /// Done (queued, or found overridden).
    Done,
    /// The Q-3 bound is reached: the rest waits for a later step.
    Full,
    /// The rollout moved on (paused, cancelled, another step): stop.
    Stale,
}

/// One step of the driver (see the module doc).
pub async fn tick(ctx: &Ctx, job: RolloutJob) -> Result<(), StoreError> {
    let db = &ctx.db;
    let mut tx = db.begin_write().await?;
    let Some(mut row) = rollouts::lock(&mut tx, &job.rollout_id).await? else { return Ok(()) };
    if row.tick != job.tick || row.state != "running" {
        return Ok(());
    }
    let mut wave = rollouts::entries(&mut tx, &row.id, Some(row.wave)).await?;
    for entry in &mut wave {
        if let Some((status, reason)) = settled(entry) {
            rollouts::set_entry(&mut tx, &row.id, entry.position, status, entry.build_id.as_deref(), reason.as_deref())
                .await?;
            entry.status = status.to_owned();
            entry.reason = reason;
        }
    }
    let now = now_ms();
    let pending: Vec<EntryRow> = wave.iter().filter(|e| e.status == "pending").cloned().collect();
    if !pending.is_empty() && now >= row.next_at {
        tx.commit().await?;
        let mut full = false;
        for entry in &pending {
            match queue_one(ctx, &row, entry).await? {
                Queued::Done => crate::failpoint::hit("rollout_build_queued"),
                Queued::Full => {
                    full = true;
                    break;
                }
                Queued::Stale => return Ok(()),
            }
        }
        if full {
            tracing::info!(rollout.id = %row.id, "the build queue is full (QUEUE_SIZE): the rest of the wave waits");
        }
        let mut tx = db.begin_write().await?;
        let Some(mut row) = rollouts::lock(&mut tx, &job.rollout_id).await? else { return Ok(()) };
        if row.tick != job.tick || row.state != "running" {
            return Ok(());
        }
        next_step(&mut tx, &mut row, Some(POLL), now).await?;
        return tx.commit().await;
    }
    if !pending.is_empty() {
        let wait = Duration::from_millis(u64::try_from(row.next_at - now).unwrap_or(0));
        next_step(&mut tx, &mut row, Some(wait), now).await?;
        return tx.commit().await;
    }
    if wave.iter().any(|e| e.status == "queued") {
        next_step(&mut tx, &mut row, Some(POLL), now).await?;
        return tx.commit().await;
    }
    // Every build of the wave ended: judge it.
    let all = rollouts::entries(&mut tx, &row.id, None).await?;
    let wave_failures = wave.iter().filter(|e| is_failure(&e.status)).count() as i64;
    let failures = all.iter().filter(|e| e.wave <= row.wave && is_failure(&e.status)).count() as i64;
    let failed: Vec<Value> = all
        .iter()
        .filter(|e| e.wave <= row.wave && is_failure(&e.status))
        .map(|e| json!({ "deployment_id": e.deployment_id, "build_id": e.build_id, "status": e.status, "reason": e.reason }))
        .collect();
    let counts = json!({
        "succeeded": wave.iter().filter(|e| e.status == "succeeded").count(),
        "failed": wave.iter().filter(|e| e.status == "failed").count(),
        "skipped": wave.iter().filter(|e| e.status == "skipped").count(),
        "overridden": wave.iter().filter(|e| e.status == "overridden").count(),
    });
    let body = json!({
        "type": "rollout.wave_completed", "rollout_id": row.id, "wave": row.wave + 1, "counts": counts,
        "failures": wave_failures,
    });
    rollouts::record_event(&mut tx, &row.id, "rollout.wave_completed", &body, now).await?;
    if wave_failures > row.max_failures_per_wave || failures > row.max_failures {
        let builds: Vec<String> = all
            .iter()
            .filter(|e| e.wave <= row.wave && e.status == "failed")
            .filter_map(|e| e.build_id.clone())
            .collect();
        let skipped = all.iter().filter(|e| e.wave <= row.wave && e.status == "skipped").count();
        row.state = "halted".into();
        row.reason = Some(format!(
            "wave {} ended with {wave_failures} failures (budget {} a wave), {failures} in all (budget {}): failed \
             builds {}{}",
            row.wave + 1,
            row.max_failures_per_wave,
            row.max_failures,
            if builds.is_empty() { "none".to_owned() } else { builds.join(", ") },
            if skipped > 0 { format!(", and {skipped} deployments skipped by the preflight") } else { String::new() }
        ));
        let body = json!({
            "type": "rollout.halted", "rollout_id": row.id, "wave": row.wave + 1, "reason": row.reason,
            "failed_builds": builds, "failures": failed,
        });
        rollouts::record_event(&mut tx, &row.id, "rollout.halted", &body, now).await?;
        tracing::warn!(rollout.id = %row.id, reason = row.reason.as_deref().unwrap_or(""), "rollout halted");
        row.tick += 1;
        rollouts::update(&mut tx, &row, now).await?;
        return tx.commit().await;
    }
    if row.wave + 1 >= row.waves.len() as i64 {
        row.state = "completed".into();
        let body = json!({ "type": "rollout.completed", "rollout_id": row.id, "failures": failed });
        rollouts::record_event(&mut tx, &row.id, "rollout.completed", &body, now).await?;
        tracing::info!(rollout.id = %row.id, "rollout completed");
        row.tick += 1;
        rollouts::update(&mut tx, &row, now).await?;
        return tx.commit().await;
    }
    row.wave += 1;
    row.next_at = now + row.pause_ms;
    wave_started(&mut tx, &row, now).await?;
    let wait = Duration::from_millis(u64::try_from(row.pause_ms).unwrap_or(0));
    next_step(&mut tx, &mut row, (!wait.is_zero()).then_some(wait), now).await?;
    tx.commit().await
}

/// Moves `row` to its next tick and pushes that step, after `delay`.
async fn next_step(tx: &mut Conn, row: &mut RolloutRow, delay: Option<Duration>, now: i64) -> Result<(), StoreError> {
    row.tick += 1;
    rollouts::update(tx, row, now).await?;
    queue::push(tx, &RolloutJob { rollout_id: row.id.clone(), tick: row.tick }, delay).await
}

/// Queues `entry`'s deploy in a transaction of its own that also records
/// it `queued` (or `overridden`: submitted, deleted or destroyed since the
/// preflight), unless the rollout moved on or it is no longer pending.
async fn queue_one(ctx: &Ctx, step: &RolloutRow, entry: &EntryRow) -> Result<Queued, StoreError> {
    let mut tx = ctx.db.begin_write().await?;
    let Some(row) = rollouts::lock(&mut tx, &step.id).await? else { return Ok(Queued::Stale) };
    if row.tick != step.tick || row.state != "running" {
        return Ok(Queued::Stale);
    }
    let now_entry = rollouts::entries(&mut tx, &row.id, Some(row.wave)).await?;
    if !now_entry.iter().any(|e| e.position == entry.position && e.status == "pending") {
        return Ok(Queued::Done);
    }
    let id = entry.deployment_id.as_str();
    let overridden = |why: &str| why.to_owned();
    let why = if !tx.lock_deployment(id).await? {
        Some(overridden("the deployment was deleted since the rollout started"))
    } else {
        let deployment = deployments::get(&mut tx, id).await?;
        let deciding = builds::deciding(&mut tx, id).await?;
        match deployment {
            _ if deciding.is_some_and(|b| b.kind == BuildKind::Destroy) => {
                Some(overridden("the deployment was deleted since the rollout started"))
            }
            Some(d) if d.version != entry.version => Some(format!(
                "the deployment was submitted since the preflight (version {} then, {} now): the newer submit wins",
                entry.version, d.version
            )),
            None => Some(overridden("the deployment is gone")),
            Some(_) => None,
        }
    };
    if let Some(why) = why {
        rollouts::set_entry(&mut tx, &row.id, entry.position, "overridden", None, Some(&why)).await?;
        tx.commit().await?;
        return Ok(Queued::Done);
    }
    // the rollout's builds count against QUEUE_SIZE like a submit's.
    tx.lock_name(ADMISSION_LOCK).await?;
    let limit = i64::from(ctx.config.api.queue_size);
    if crate::store::submit::admission_count(&mut tx, limit).await? >= limit {
        tx.rollback().await?;
        return Ok(Queued::Full);
    }
    let prepared: Prepared = entry
        .prepared
        .clone()
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("rollout_deployments.prepared: {e}")))?
        .ok_or_else(|| StoreError::Corrupt("rollout_deployments.prepared is missing".into()))?;
    let deployment =
        DeploymentId::parse(id).map_err(|e| StoreError::Corrupt(format!("rollout_deployments.deployment_id: {e}")))?;
    let snapshot = deployments::Snapshot {
        id,
        configuration: &prepared.configuration,
        module_source: Some(&row.module_source),
        domain: prepared.domain.as_deref(),
        instances: &prepared.instances,
        names: prepared.names.as_ref(),
    };
    lock_and_upsert(&mut tx, id, Some(snapshot), AdmissionLock::None, None, now_ms()).await?;
    let pins = SecretPins {
        set: builds::latest_secret_pins(&mut tx, id).await?.map(|p| p.set).unwrap_or_default(),
        clear: Vec::new(),
    };
    let provenance = Provenance {
        requested_by: row.requested_by.clone(),
        health_gate: row.health_gate,
        names: prepared.names.clone(),
        domain: prepared.domain.clone(),
        rollout: Some(row.id.clone()),
        ..Provenance::default()
    };
    let now = now_ms();
    let build_id = new_build_id(&deployment, crate::clock::now());
    let new = builds::NewBuild {
        id: &build_id,
        deployment_id: id,
        kind: BuildKind::Deploy,
        configuration: &prepared.configuration,
        module_source: Some(&row.module_source),
        instances: &prepared.instances,
        operator_secrets: Some(&pins),
        readiness: Some(&prepared.readiness),
        dry_run: false,
        trigger: Trigger::Rollout,
        provenance: Some(&provenance),
    };
    let building = DeploymentState::derive(Some((BuildKind::Deploy, BuildStatus::Queued)));
    let how = WriteBuild { supersede: true, event: Some(building), cap: 0, check_kept_secrets: false };
    write_build(&mut tx, new, how, now).await?;
    rollouts::set_entry(&mut tx, &row.id, entry.position, "queued", Some(&build_id), None).await?;
    // A crash here rolls the build and its record back together.
    crate::failpoint::hit("rollout_build_uncommitted");
    tx.commit().await?;
    tracing::info!(rollout.id = %row.id, deployment.id = %id, build.id = %build_id, "rollout build queued");
    Ok(Queued::Done)
}

/// A rollout as the api answers it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RolloutView {
    /// Its id.
    pub id: String,
    /// `running`, `paused`, `halted`, `cancelled` or `completed`.
    pub state: String,
    /// The target, pinned to the revision every build of the rollout deploys.
    pub module_source: String,
    /// The target as it was asked for.
    pub requested_source: String,
    /// The wave under way (or the last one), from 1.
    pub wave: i64,
    /// The failure budgets.
    pub max_failures: Budget,
    /// The pause between waves, in milliseconds.
    pub pause_ms: i64,
    /// The health gate of each build; absent: readiness.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub health_gate: Option<HealthGate>,
    /// Failed builds and preflight skips so far.
    pub failures: i64,
    /// Why it halted or was cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub reason: Option<String>,
    /// Who started it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub requested_by: Option<RequestedBy>,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub updated_at: i64,
    /// Each wave's progress.
    pub waves: Vec<WaveView>,
    /// Each deployment's progress, in the rollout's order (absent in a listing).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub deployments: Option<Vec<EntryView>>,
}

/// One wave's progress.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct WaveView {
    /// From 1.
    pub wave: i64,
    /// How many deployments it has.
    pub size: u64,
    /// Its deployments by status (`pending`, `queued`, `succeeded`,
    /// `failed`, `overridden`, `skipped`, `cancelled`).
    pub counts: std::collections::BTreeMap<String, u64>,
}

/// One deployment's progress.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct EntryView {
    /// The deployment.
    pub deployment_id: String,
    /// Its wave, from 1.
    pub wave: i64,
    /// `pending`, `queued`, `succeeded`, `failed`, `overridden` (a newer
    /// submit won), `skipped` (refused by the preflight) or `cancelled`
    /// (the rollout was cancelled before its wave).
    pub status: String,
    /// The rollout's build of it, once queued.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub build_id: Option<String>,
    /// That build's status now.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub build_status: Option<String>,
    /// Why it failed, was skipped or overridden.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub reason: Option<String>,
}

fn view_of(row: &RolloutRow, entries: &[EntryRow], with_entries: bool) -> RolloutView {
    let mut waves: Vec<WaveView> = row
        .waves
        .iter()
        .enumerate()
        .map(|(i, size)| WaveView { wave: i as i64 + 1, size: *size, counts: Default::default() })
        .collect();
    let status_of = |e: &EntryRow| settled(e).map_or_else(|| e.status.clone(), |(s, _)| s.to_owned());
    for e in entries {
        if let Some(w) = waves.get_mut(e.wave as usize) {
            *w.counts.entry(status_of(e)).or_default() += 1;
        }
    }
    RolloutView {
        id: row.id.clone(),
        state: row.state.clone(),
        module_source: row.module_source.clone(),
        requested_source: row.requested_source.clone(),
        wave: row.wave + 1,
        max_failures: Budget {
            per_wave: u32::try_from(row.max_failures_per_wave).unwrap_or(0),
            total: u32::try_from(row.max_failures).unwrap_or(0),
        },
        pause_ms: row.pause_ms,
        health_gate: row.health_gate,
        failures: entries.iter().filter(|e| is_failure(&status_of(e))).count() as i64,
        reason: row.reason.clone(),
        requested_by: row.requested_by.clone(),
        created_at: row.created_at,
        updated_at: row.updated_at,
        waves,
        deployments: with_entries.then(|| {
            entries
                .iter()
                .map(|e| {
                    let settled = settled(e);
                    EntryView {
                        deployment_id: e.deployment_id.clone(),
                        wave: e.wave + 1,
                        status: status_of(e),
                        build_id: e.build_id.clone(),
                        build_status: e.build_status.clone(),
                        reason: settled.and_then(|(_, r)| r).or_else(|| e.reason.clone()),
                    }
                })
                .collect()
        }),
    }
}

/// Rollout `id` with its waves and deployments.
pub async fn view_in(conn: &mut Conn, id: &str) -> Result<Option<RolloutView>, StoreError> {
    let Some(row) = rollouts::get(conn, id).await? else { return Ok(None) };
    let entries = rollouts::entries(conn, id, None).await?;
    Ok(Some(view_of(&row, &entries, true)))
}

/// Rollout `id` (see [`view_in`]).
pub async fn view(db: &Db, id: &str) -> Result<Option<RolloutView>, StoreError> {
    view_in(&mut db.acquire().await?, id).await
}

/// The rollouts, newest first, at most `limit`, with their waves (not
/// their deployments).
pub async fn list(db: &Db, limit: i64) -> Result<Vec<RolloutView>, StoreError> {
    let mut conn = db.acquire().await?;
    let rows = rollouts::list(&mut conn, None, limit).await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let entries = rollouts::entries(&mut conn, &row.id, None).await?;
        out.push(view_of(&row, &entries, false));
    }
    Ok(out)
}

/// What an operator asks of a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Queue nothing more until resumed (builds queued go on).
    Pause,
    /// Go on from where it paused.
    Resume,
    /// Queue nothing more, for good; builds already queued are left to
    /// finish (they are ordinary deploys, cancelled like any).
    Cancel,
}

/// Pauses, resumes or cancels rollout `id`; the rollout then. Pausing a
/// paused or resuming a running rollout changes nothing; a rollout that
/// ended is refused ([`RolloutError::Ended`]).
pub async fn control(db: &Db, id: &str, control: Control) -> Result<RolloutView, RolloutError> {
    let mut tx = db.begin_write().await?;
    let Some(mut row) = rollouts::lock(&mut tx, id).await? else { return Err(RolloutError::NotFound(id.to_owned())) };
    if !matches!(row.state.as_str(), "running" | "paused") {
        return Err(RolloutError::Ended { id: id.to_owned(), state: row.state });
    }
    let now = now_ms();
    let (state, kind) = match control {
        Control::Pause => ("paused", "rollout.paused"),
        Control::Resume => ("running", "rollout.resumed"),
        Control::Cancel => ("cancelled", "rollout.cancelled"),
    };
    if row.state != state {
        row.state = state.to_owned();
        row.tick += 1;
        if control == Control::Cancel {
            row.reason = Some("cancelled by an operator".into());
            for e in rollouts::entries(&mut tx, id, None).await?.iter().filter(|e| e.status == "pending") {
                let why = "the rollout was cancelled before this deployment's build was queued";
                rollouts::set_entry(&mut tx, id, e.position, "cancelled", None, Some(why)).await?;
            }
        }
        rollouts::update(&mut tx, &row, now).await?;
        if control == Control::Resume {
            queue::push(&mut tx, &RolloutJob { rollout_id: row.id.clone(), tick: row.tick }, None).await?;
        }
        let body = json!({ "type": kind, "rollout_id": id, "wave": row.wave + 1 });
        rollouts::record_event(&mut tx, id, kind, &body, now).await?;
    }
    let view = view_in(&mut tx, id).await?.ok_or_else(|| RolloutError::NotFound(id.to_owned()))?;
    tx.commit().await?;
    Ok(view)
}
