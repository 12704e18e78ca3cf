//! The module sources an api serves (MS-6, MS-7, MS-8, EV-1): the built-in
//! source's baked outputs, and any allowed source's outputs built on the
//! `nix` queue and cached.
//!
//! A lookup of a source's outputs goes: parse (MS-1) → allowlist (MS-6,
//! before anything is fetched) → this process's memory → this host's disk
//! (`<SLIPWAY_STATE_DIR>/outputs/`, pinned revisions only) → the database
//! (`nix_results`, shared by every api and worker) → a miss. On a miss one
//! transaction, holding the key's lock, reserves a fleet-wide nix slot
//! (`NIX_SLOTS`; none free: [`Lookup::Busy`]), writes the `computing` row and
//! queues the `schema_build`; concurrent misses of the same (source,
//! provider) find that row and wait for the same job. `get_for` answers
//! [`Lookup::Computing`] at once; a submit waits up to `NIX_TIMEOUT` (plus
//! the time to record the result).
//!
//! Results live: a pinned revision's outputs forever; a `ref` source's for
//! [`REF_TTL`] for `get_for` (then it is resolved and built again), while a
//! submit resolves the branch anew each time, so it stores the revision the
//! branch names now; a failure for
//! [`FAILURE_TTL`], so a poller reads it before the next call builds again. A
//! `computing` row older than twice `NIX_TIMEOUT` plus a minute (its job was
//! lost) is started over.

use super::policy::{CheckerFor, NamesEval, Resolved, SourcePolicy, Sources};
use crate::nix::{BuiltSchema, FailureCode, Names, NixFailure};
use crate::source::{GitPin, ModuleSource};
use crate::store::nix_results::{self as rows, NewNixJob, NixKind, NixStatus};
use crate::store::queue::{push, NixJob};
use crate::store::{now_ms, Db, StoreError};
use crate::submit::SubmitError;
use crate::validate::Checker;
use futures::future::BoxFuture;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// How long a `ref` source's outputs are served before it is resolved again.
pub const REF_TTL: Duration = Duration::from_secs(300);

/// How long a failed build is answered before a call builds again.
pub const FAILURE_TTL: Duration = Duration::from_secs(60);

/// How often a waiting submit looks at its job's row.
const WAIT_POLL: Duration = Duration::from_millis(100);

/// How long a submit waits for a worker to start its names eval before it
/// withdraws the eval and stores without it (EV-1: a submit does not wait
/// for a busy or stopping fleet).
pub const NAMES_PICKUP: Duration = Duration::from_secs(10);

/// A source's built outputs, with its schema compiled once, on first use.
#[derive(Debug)]
pub struct SourceSchema {
    /// What the schema build made.
    pub built: BuiltSchema,
    checker: OnceLock<Result<Arc<Checker>, NixFailure>>,
}

impl SourceSchema {
    fn new(built: BuiltSchema) -> Self {
        Self { built, checker: OnceLock::new() }
    }

    /// The checker of these outputs (schema compiled), or why there is none.
    pub fn checker(&self) -> Result<Arc<Checker>, NixFailure> {
        self.checker
            .get_or_init(|| {
                let outputs = self.built.outputs()?;
                Checker::new(outputs).map(Arc::new).map_err(|e| NixFailure {
                    code: FailureCode::BuildFailed,
                    output: Some("schema".into()),
                    message: format!("{}: {e}", self.built.pinned),
                })
            })
            .clone()
    }
}

/// Where a lookup stands.
#[derive(Debug, Clone)]
pub enum Lookup<T> {
    /// The result.
    Ready(T),
    /// A job computes it; ask again.
    Computing,
    /// Every fleet-wide nix slot is busy: nothing was queued (MS-7).
    Busy,
    /// The job ended without it.
    Failed(NixFailure),
    /// A waiting caller only: no live worker serves the `nix` queue, or none
    /// started the job within [`NAMES_PICKUP`] (it was withdrawn).
    Unserved,
}

/// A cached result and until when it may be served (Unix ms; `None`: forever).
#[derive(Debug, Clone)]
struct Entry {
    schema: Arc<SourceSchema>,
    until: Option<i64>,
}

/// The sources of an api (see the module doc).
#[derive(Debug)]
pub struct FleetSources {
    /// Where module sources may come from.
    pub policy: SourcePolicy,
    /// The built-in source's outputs, schema compiled (MS-5).
    pub built_in: Arc<Checker>,
    db: Db,
    provider: String,
    slots: u32,
    timeout: Duration,
    disk: PathBuf,
    memory: Mutex<HashMap<String, Entry>>,
    heartbeat: Duration,
}

impl FleetSources {
    /// Sources served with `db`'s `nix` queue, as `config` sets them: its
    /// policy, provider, fleet-wide nix slots and `NIX_TIMEOUT`
    /// ([`crate::config::SourcesConfig`]); pinned outputs are also kept
    /// under `SLIPWAY_STATE_DIR/outputs/`, and `SLIPWAY_HEARTBEAT` tells a
    /// live worker of the `nix` queue. `built_in` is the built-in source's
    /// outputs.
    pub fn new(config: &crate::config::Config, built_in: Checker, db: Db) -> Self {
        Self {
            policy: SourcePolicy::of(&config.sources),
            built_in: Arc::new(built_in),
            db,
            provider: config.sources.provider.clone(),
            slots: config.sources.nix_slots,
            timeout: config.sources.nix_timeout,
            disk: config.state_dir.join("outputs"),
            memory: Mutex::new(HashMap::new()),
            heartbeat: config.heartbeat,
        }
    }

    /// `NIX_TIMEOUT`.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How long a waiter waits for a job it queued: `NIX_TIMEOUT` plus the
    /// time to record the result.
    pub fn wait_limit(&self) -> Duration {
        self.timeout + crate::jobs::nix::LEASE_MARGIN
    }

    fn key(&self, source: &str) -> String {
        format!("schema {} {source}", self.provider)
    }

    fn disk_file(&self, key: &str) -> PathBuf {
        use sha2::{Digest, Sha256};
        self.disk.join(format!("{}.json", &hex::encode(Sha256::digest(key.as_bytes()))[..32]))
    }

    /// The outputs of `source` (already parsed and allowed), from a cache or
    /// the `nix` queue; with `wait`, waits for a job it finds or queues.
    pub async fn schema(&self, source: &ModuleSource, wait: bool) -> Result<Lookup<Arc<SourceSchema>>, StoreError> {
        let reference = source.to_string();
        let key = self.key(&reference);
        let now = now_ms();
        let pinned = matches!(source, ModuleSource::Git { pin: GitPin::Rev(_), .. });
        // A submit resolves a branch anew (it stores the revision it names
        // now); get_for serves a branch's outputs for REF_TTL.
        let ttl = match (pinned, wait) {
            (true, _) => None,
            (false, true) => Some(Duration::ZERO),
            (false, false) => Some(REF_TTL),
        };
        if ttl != Some(Duration::ZERO) {
            if let Some(entry) = self.memory.lock().expect("source cache lock").get(&key) {
                if entry.until.is_none_or(|until| now < until) {
                    return Ok(Lookup::Ready(Arc::clone(&entry.schema)));
                }
            }
        }
        if pinned {
            if let Some(built) = std::fs::read(self.disk_file(&key)).ok().and_then(|b| serde_json::from_slice(&b).ok())
            {
                return Ok(Lookup::Ready(self.remember(&key, built, None)));
            }
        }
        let until = (!pinned).then(|| now + REF_TTL.as_millis() as i64);
        let job = NewNixJob {
            key: &key,
            kind: NixKind::SchemaBuild,
            source: &reference,
            provider: &self.provider,
            input: None,
        };
        if wait && !self.nix_served().await? {
            // A finished row may still serve; nothing new is queued.
            return Ok(match self.find_finished(&key, ttl).await? {
                Some(Lookup::Ready(result)) => self.ready(&key, result, pinned, until),
                Some(other) => other.map_never(),
                None => Lookup::Unserved,
            });
        }
        match self.find_or_queue(&job, ttl).await? {
            Lookup::Computing if wait => match self.wait(&key, Some(NAMES_PICKUP)).await? {
                Lookup::Ready(result) => Ok(self.ready(&key, result, pinned, until)),
                Lookup::Computing => Ok(Lookup::Unserved),
                other => Ok(other.map_never()),
            },
            Lookup::Ready(result) => Ok(self.ready(&key, result, pinned, until)),
            other => Ok(other.map_never()),
        }
    }

    /// The finished row of `key`, if one may still be served.
    async fn find_finished(&self, key: &str, ttl: Option<Duration>) -> Result<Option<Lookup<Value>>, StoreError> {
        let Some(row) = rows::find(&mut self.db.acquire().await?, key).await? else { return Ok(None) };
        Ok(answer_of(&row, now_ms(), ttl, None))
    }

    /// Parses a finished row's result and caches it.
    fn ready(&self, key: &str, result: Value, pinned: bool, until: Option<i64>) -> Lookup<Arc<SourceSchema>> {
        let built: BuiltSchema = match serde_json::from_value(result) {
            Ok(b) => b,
            Err(e) => {
                return Lookup::Failed(NixFailure {
                    code: FailureCode::BuildFailed,
                    output: None,
                    message: format!("the stored result of this build is not readable: {e}"),
                })
            }
        };
        if pinned {
            let file = self.disk_file(key);
            let tmp = file.with_extension(format!("tmp{}", std::process::id()));
            let written = std::fs::create_dir_all(&self.disk)
                .and_then(|()| std::fs::write(&tmp, serde_json::to_vec(&built).expect("outputs serialise")))
                .and_then(|()| std::fs::rename(&tmp, &file));
            if let Err(e) = written {
                tracing::warn!(error = %e, "cannot keep a source's outputs on disk; they stay in memory");
            }
        }
        Lookup::Ready(self.remember(key, built, until))
    }

    fn remember(&self, key: &str, built: BuiltSchema, until: Option<i64>) -> Arc<SourceSchema> {
        let schema = Arc::new(SourceSchema::new(built));
        self.memory
            .lock()
            .expect("source cache lock")
            .insert(key.to_owned(), Entry { schema: Arc::clone(&schema), until });
        schema
    }

    /// The row of `job.key` as it stands, or a new job queued for it (one
    /// transaction holding the key's lock). `ttl`: a finished row older than
    /// that is built again (`None`: never).
    async fn find_or_queue(&self, job: &NewNixJob<'_>, ttl: Option<Duration>) -> Result<Lookup<Value>, StoreError> {
        let mut tx = self.db.begin_write().await?;
        tx.lock_name(job.key).await?;
        let now = now_ms();
        let stale_after = (2 * self.timeout + Duration::from_secs(60)).as_millis() as i64;
        let row = rows::find(&mut tx, job.key).await?;
        if let Some(answer) = row.and_then(|row| answer_of(&row, now, ttl, Some(stale_after))) {
            tx.rollback().await?;
            return Ok(answer);
        }
        let lease = now + (2 * self.timeout + crate::jobs::nix::LEASE_MARGIN).as_millis() as i64;
        if !rows::reserve_slot(&mut tx, job.key, self.slots, now, lease).await? {
            tx.rollback().await?;
            return Ok(Lookup::Busy);
        }
        rows::start_over(&mut tx, job, now).await?;
        push(&mut tx, &NixJob { key: job.key.to_owned() }, None).await?;
        tx.commit().await?;
        Ok(Lookup::Computing)
    }

    /// Waits for the row of `key` to end, up to [`Self::wait_limit`]:
    /// [`Lookup::Computing`] when no worker started the job by then, or by
    /// `pickup` (the job is then withdrawn, if no worker started it meanwhile).
    async fn wait(&self, key: &str, pickup: Option<Duration>) -> Result<Lookup<Value>, StoreError> {
        let now = tokio::time::Instant::now();
        let until = now + self.wait_limit();
        let pickup = pickup.map(|p| now + p);
        loop {
            let row = rows::find(&mut self.db.acquire().await?, key).await?;
            let started = row.as_ref().is_some_and(|r| r.started_at.is_some());
            match row {
                Some(row) if row.status == NixStatus::Done => return Ok(parse_result(row.result.as_deref())),
                Some(row) if row.status == NixStatus::Failed => {
                    return Ok(Lookup::Failed(parse_failure(row.failure.as_deref())))
                }
                None => return Ok(Lookup::Computing),
                Some(_) => {}
            }
            if !started && pickup.is_some_and(|p| tokio::time::Instant::now() >= p) {
                let mut tx = self.db.begin_write().await?;
                let withdrawn = rows::withdraw(&mut tx, key).await?;
                tx.commit().await?;
                if withdrawn {
                    return Ok(Lookup::Computing);
                }
            }
            if tokio::time::Instant::now() >= until && !started {
                return Ok(Lookup::Computing);
            }
            if tokio::time::Instant::now() >= until {
                return Ok(Lookup::Failed(NixFailure {
                    code: FailureCode::Timeout,
                    output: None,
                    message: format!(
                        "no result within NIX_TIMEOUT ({}s): the job still waits for a worker of the nix queue, or runs",
                        self.timeout.as_secs()
                    ),
                }));
            }
            tokio::time::sleep(WAIT_POLL).await;
        }
    }

    /// EV-1: runs the names eval of `configuration` (no secret values) on the
    /// source stored with it (`None`: the built-in source) and waits for it.
    /// `Busy` when every nix slot is taken; `Computing` when no live worker
    /// serves the `nix` queue (nothing is queued) or none started the eval
    /// within [`Self::wait_limit`].
    ///
    /// The result is kept by (source revision, configuration): a source
    /// pinned to a git revision fixes what the eval reads, so a submit of the
    /// same configuration at the same revision (and provider) takes the
    /// stored result, and one that waits while the same eval runs waits for
    /// that job, not a new one ([`names_key`]). A source that floats (the
    /// built-in one without a self-pin, whose files are the worker's own, or
    /// a `path:` source) is evaluated anew each time. Results are kept as
    /// long as the sweep keeps names rows (`NIX_RESULTS_KEPT`).
    pub async fn names(&self, stored_source: Option<&str>, configuration: &Value) -> Result<Lookup<Names>, StoreError> {
        let input = configuration.to_string();
        let kept = stored_source.and_then(|source| names_key(&self.provider, source, &input));
        let mut found = false;
        if let Some(key) = &kept {
            let row = rows::find(&mut self.db.acquire().await?, key).await?;
            if let Some(row) =
                row.as_ref().filter(|r| r.status == NixStatus::Done && r.input.as_deref() == Some(&input))
            {
                return Ok(names_of(parse_result(row.result.as_deref())));
            }
            found = row.is_some();
        }
        let (served, slots_full) = self.nix_state().await?;
        if !served {
            return Ok(Lookup::Computing);
        }
        if !found && slots_full {
            // Nothing to wait for and no slot to run it: the submit goes on
            // without opening a write transaction (its database-bound path).
            return Ok(Lookup::Busy);
        }
        let key = kept.unwrap_or_else(|| format!("names {}", ulid::Ulid::generate().to_string().to_lowercase()));
        let job = NewNixJob {
            key: &key,
            kind: NixKind::NamesEval,
            source: stored_source.unwrap_or(""),
            provider: &self.provider,
            input: Some(&input),
        };
        match self.find_or_queue(&job, None).await? {
            Lookup::Computing => {}
            Lookup::Ready(value) => return Ok(names_of(Lookup::Ready(value))),
            other => return Ok(other.map_never()),
        }
        Ok(names_of(self.wait(&key, Some(NAMES_PICKUP)).await?))
    }

    /// Whether a live worker serves the `nix` queue.
    pub async fn nix_served(&self) -> Result<bool, StoreError> {
        Ok(self.nix_state().await?.0)
    }

    /// Whether a live worker serves the `nix` queue, and whether every
    /// fleet-wide nix slot is held now: one statement, no transaction (a
    /// snapshot), on the path of every submit that evaluates its names.
    async fn nix_state(&self) -> Result<(bool, bool), StoreError> {
        use crate::store::queue::{MISSED_HEARTBEATS, NIX_QUEUE};
        let window = (self.heartbeat * MISSED_HEARTBEATS).as_secs() as i64 + 1;
        let (workers, held) = crate::store::heartbeats::served_and_slots_held(
            &mut self.db.acquire().await?,
            NIX_QUEUE,
            window,
            self.slots,
            now_ms(),
        )
        .await?;
        Ok((workers > 0, held >= i64::from(self.slots)))
    }

    /// The checker and stored source of a submit (MS-6, MS-8, MG-7): the
    /// built-in source for an absent source without a self-pin; the
    /// self-pin's outputs, falling back to the built-in ones when they cannot
    /// be had; an explicit source's outputs, waited for, without fallback.
    pub async fn checker_for(&self, requested: Option<&str>) -> Result<(Arc<Checker>, Option<String>), SubmitError> {
        let (source, fallback) = match self.policy.resolve(requested)? {
            Resolved::BuiltIn { pin: None } => return Ok((Arc::clone(&self.built_in), None)),
            Resolved::BuiltIn { pin: Some(pin) } => (pin, true),
            Resolved::Explicit(source) => (source, false),
        };
        let parsed = ModuleSource::parse(&source)?;
        let found = match self.schema(&parsed, true).await? {
            Lookup::Ready(schema) => {
                schema.checker().map(|c| (c, schema.built.pinned.clone())).map_err(SubmitError::SourceOutputs)
            }
            Lookup::Busy => Err(SubmitError::NixBusy),
            Lookup::Unserved => Err(SubmitError::NixUnserved),
            Lookup::Computing => Err(SubmitError::SourceOutputs(NixFailure {
                code: FailureCode::Timeout,
                output: None,
                message: "the source's schema build could not be followed".into(),
            })),
            Lookup::Failed(f) => Err(SubmitError::SourceOutputs(f)),
        };
        match found {
            Ok((checker, pinned)) => Ok((checker, Some(pinned))),
            Err(e) if fallback => {
                tracing::warn!(error = %e, source = %source, "the self-pin's outputs cannot be had; validating with the built-in source");
                Ok((Arc::clone(&self.built_in), Some(source)))
            }
            Err(e) => Err(e),
        }
    }

    /// EV-1 for a submit: the names eval, or why it was skipped (every nix
    /// slot busy, no live worker serves the `nix` queue or started the eval
    /// within [`NAMES_PICKUP`], or the fetch or eval failed on the worker's
    /// side). Only the module refusing the configuration refuses the submit,
    /// and a worker that cannot write to its own storage
    /// (`storage_unavailable`): a deploy on that host would fail the same
    /// way, so nothing is stored and the client is told to try again.
    pub async fn names_for_submit(
        &self,
        stored_source: Option<&str>,
        configuration: &Value,
    ) -> Result<NamesEval, SubmitError> {
        match self.names(stored_source, configuration).await? {
            Lookup::Ready(names) => Ok(NamesEval::Evaluated(names)),
            Lookup::Busy => Ok(NamesEval::Busy(format!(
                "every nix slot (NIX_SLOTS {}) is busy; the deploy evaluates the configuration itself",
                self.slots
            ))),
            Lookup::Computing | Lookup::Unserved => Ok(NamesEval::Skipped(format!(
                "no live worker of the nix queue ran the names eval (none serves the queue, or none started it within {}s); the deploy evaluates the configuration itself",
                NAMES_PICKUP.as_secs()
            ))),
            // The module refused the configuration: so does the submit.
            Lookup::Failed(f) if f.code == FailureCode::BuildFailed && f.output.as_deref() == Some("names") => {
                Err(SubmitError::SourceOutputs(f))
            }
            Lookup::Failed(f) if f.code == FailureCode::StorageUnavailable => Err(SubmitError::SourceOutputs(f)),
            Lookup::Failed(f) => Ok(NamesEval::Skipped(format!(
                "the names eval did not run to its end ({}); the deploy evaluates the configuration itself",
                f.message
            ))),
        }
    }
}

/// The key a names eval's result is kept under, when `source` fixes what the
/// eval reads (a git source pinned to a revision): `names <provider>
/// <source> <SHA-256 of the configuration>`. `None` for a source that floats.
pub fn names_key(provider: &str, source: &str, input: &str) -> Option<String> {
    use sha2::{Digest, Sha256};
    match ModuleSource::parse(source) {
        Ok(ModuleSource::Git { pin: GitPin::Rev(_), .. }) => {
            Some(format!("names {provider} {source} {}", hex::encode(Sha256::digest(input.as_bytes()))))
        }
        _ => None,
    }
}

/// A names eval's stored result as [`Names`], or why it is not one.
fn names_of(lookup: Lookup<Value>) -> Lookup<Names> {
    match lookup {
        Lookup::Ready(value) => match serde_json::from_value(value) {
            Ok(names) => Lookup::Ready(names),
            Err(e) => Lookup::Failed(NixFailure {
                code: FailureCode::BuildFailed,
                output: Some("names".into()),
                message: format!("nodes.json is not of its documented shape: {e}"),
            }),
        },
        other => other.map_never(),
    }
}

impl<T> Lookup<T> {
    /// This lookup when it is not [`Lookup::Ready`] (panics otherwise).
    fn map_never<U>(self) -> Lookup<U> {
        match self {
            Lookup::Ready(_) => unreachable!("map_never of a ready lookup"),
            Lookup::Computing => Lookup::Computing,
            Lookup::Busy => Lookup::Busy,
            Lookup::Failed(f) => Lookup::Failed(f),
            Lookup::Unserved => Lookup::Unserved,
        }
    }
}

/// What a row answers at `now`, or `None` when it must be built again: a
/// result younger than `ttl` (`None`: any age), a failure younger than
/// [`FAILURE_TTL`] (but never a `storage_unavailable` one), or, when `stale_after` is given, a job still computing
/// that is younger than that (ms).
fn answer_of(row: &rows::NixRow, now: i64, ttl: Option<Duration>, stale_after: Option<i64>) -> Option<Lookup<Value>> {
    let age = now - row.finished_at.unwrap_or(row.created_at);
    match row.status {
        NixStatus::Computing => stale_after.filter(|stale| now - row.created_at < *stale).map(|_| Lookup::Computing),
        NixStatus::Done if ttl.is_none_or(|ttl| age < ttl.as_millis() as i64) => {
            Some(parse_result(row.result.as_deref()))
        }
        NixStatus::Failed if age < FAILURE_TTL.as_millis() as i64 => {
            let failure = parse_failure(row.failure.as_deref());
            // The worker's storage, not the source: the next request tries again.
            (failure.code != FailureCode::StorageUnavailable).then_some(Lookup::Failed(failure))
        }
        _ => None,
    }
}

fn parse_result(text: Option<&str>) -> Lookup<Value> {
    match text.map(serde_json::from_str::<Value>) {
        Some(Ok(v)) => Lookup::Ready(v),
        _ => Lookup::Failed(NixFailure {
            code: FailureCode::BuildFailed,
            output: None,
            message: "the stored result of this job is not readable".into(),
        }),
    }
}

fn parse_failure(text: Option<&str>) -> NixFailure {
    text.and_then(|t| serde_json::from_str(t).ok()).unwrap_or(NixFailure {
        code: FailureCode::BuildFailed,
        output: None,
        message: "the job failed without saying why".into(),
    })
}

impl Sources for FleetSources {
    fn checker_for<'a>(&'a self, requested: Option<&'a str>) -> BoxFuture<'a, Result<CheckerFor, SubmitError>> {
        Box::pin(FleetSources::checker_for(self, requested))
    }

    fn names<'a>(
        &'a self,
        stored_source: Option<&'a str>,
        configuration: &'a Value,
    ) -> BoxFuture<'a, Result<NamesEval, SubmitError>> {
        Box::pin(self.names_for_submit(stored_source, configuration))
    }
}
