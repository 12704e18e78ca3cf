//! Building a module source's outputs and evaluating its `names` with Nix
//! (MS-2, MS-7): every `nix-instantiate` and `nix-build` runs contained like
//! an effect ([`crate::effect::run_tool`]), under one deadline. Used by the
//! `nix` queue's jobs and by `slipway-worker run`. Only workers run Nix.
//!
//! A source is untrusted code (SEC-3): its evaluation may read only its own
//! tree, whatever the host's Nix settings (`EVAL_OPTIONS` and the
//! sandbox's, on every command line); its builds reach no network
//! ([`derivation`]); its documents are read only as regular files within
//! `SLIPWAY_OUTPUT_LIMIT` ([`output`]); and a run out of memory or time
//! ends the job ([`NixFailure`]).

pub mod derivation;
mod failure;
pub mod output;

pub use failure::{human_size, ran_out_of_memory, FailureCode, NixFailure};

use crate::effect::{run_tool, EffectOutcome};
use crate::source::outputs::SourceOutputs;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The document outputs of MS-2: attribute and the file its out path holds.
pub const DOCUMENTS: [(&str, &str); 4] = [
    ("schema", "schema.json"),
    ("applicationSchemas", "applications.json"),
    ("renames", "renames.json"),
    ("meta", "meta.json"),
];

/// What a `schema_build` made of one (revision, provider): each document
/// output of MS-2 that built, and why each other one did not, plus whether
/// the `names` function is there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuiltSchema {
    /// The source as fetched: `git+<url>?rev=<commit>` or `path:<dir>`.
    pub pinned: String,
    /// The commit built, for a git source.
    pub revision: Option<String>,
    /// Each built document by attribute (`schema`, `applicationSchemas`, `renames`, `meta`).
    pub documents: BTreeMap<String, Value>,
    /// Each output that has no result (documents and `names`), and why.
    pub failures: BTreeMap<String, NixFailure>,
    /// Milliseconds each step took (`fetch`, `eval`, `build`).
    pub timings_ms: BTreeMap<String, u64>,
}

impl BuiltSchema {
    /// One document, or why it is not there.
    pub fn document(&self, attribute: &str) -> Result<&Value, NixFailure> {
        match (self.documents.get(attribute), self.failures.get(attribute)) {
            (Some(doc), _) => Ok(doc),
            (None, Some(why)) => Err(why.clone()),
            (None, None) => Err(NixFailure::new(
                FailureCode::OutputMissing,
                Some(attribute),
                format!("{}: no {attribute} output was built", self.pinned),
            )),
        }
    }

    /// The outputs a submit validates with (MS-2): `schema` and `meta` are
    /// needed; a missing `renames` migrates nothing (MG-5) and missing
    /// `applicationSchemas` serve no application schema.
    pub fn outputs(&self) -> Result<SourceOutputs, NixFailure> {
        let optional = |attribute: &str| self.documents.contains_key(attribute);
        Ok(SourceOutputs {
            schema: self.document("schema")?.clone(),
            meta: self.parsed("meta")?,
            renames: if optional("renames") { self.parsed("renames")? } else { Vec::new() },
            applications: if optional("applicationSchemas") {
                self.parsed("applicationSchemas")?
            } else {
                BTreeMap::new()
            },
        })
    }

    /// One document read as `T` (`renames` as `Vec<Rename>`, `meta` as
    /// [`crate::source::outputs::Meta`], …), or why it cannot be: not built, or not
    /// of its documented shape (`build_failed`).
    pub fn parsed<T: serde::de::DeserializeOwned>(&self, attribute: &str) -> Result<T, NixFailure> {
        serde_json::from_value(self.document(attribute)?.clone()).map_err(|e| {
            NixFailure::new(
                FailureCode::BuildFailed,
                Some(attribute),
                format!("{}: {attribute} is not of its documented shape: {e}", self.pinned),
            )
        })
    }
}

/// A provider name as it may go into a Nix string (letters, digits, `-`, `_`, `.`).
pub fn check_provider(name: &str) -> Result<(), String> {
    if !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
        Ok(())
    } else {
        Err(format!("provider {name:?} is not a name of letters, digits, '-', '_' and '.'"))
    }
}

/// The expression every build of a source goes through: `core/default.nix`
/// of `dir`, called with the provider when it takes one (an older `core`
/// may not).
/// It also lists the attribute names (`-A __slipwayAttributeNames`).
const CORE_EXPR: &str = r#"{ dir, providerName }:
let
  f = import (dir + "/core/default.nix");
  core = if builtins.isFunction f
    then (if (builtins.functionArgs f) ? provider then f { provider = { name = providerName; }; } else f { })
    else f;
in core // { __slipwayAttributeNames = builtins.attrNames core; }"#;

/// The Nix settings of Slipway's own evaluations of a source besides the
/// sandbox's ([`crate::sandbox::Policy::nix_options`]), passed on each
/// command line so no `nix.conf`, `NIX_CONFIG` or `NIX_PATH` of the host can
/// change them (SEC-3): no search path but the `-I` entries of the run, no
/// experimental feature (`builtins.fetchTree` and `builtins.getFlake` read
/// paths that restricted evaluation does not check; content-addressed and
/// impure derivations), no plugin (which could add builtins), and the store
/// through the daemon.
const EVAL_OPTIONS: &[(&str, &str)] =
    &[("nix-path", ""), ("experimental-features", ""), ("plugin-files", ""), ("store", "daemon")];

/// The bounds on what a source's outputs may be (SEC-3), from
/// `SLIPWAY_OUTPUT_LIMIT` and `SLIPWAY_NODE_LIMIT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest document output, in bytes.
    pub output: u64,
    /// The most nodes a `names` output may list.
    pub nodes: u32,
}

impl Limits {
    /// The limits of `config`.
    pub fn of(config: &crate::config::Config) -> Self {
        Self { output: config.sandbox.output_limit, nodes: config.sandbox.node_limit }
    }
}

/// A build in progress: the source folder, the provider, and the deadline
/// shared by every Nix run of one job.
#[derive(Debug, Clone)]
pub struct NixRun<'a> {
    /// The fetched source.
    pub dir: &'a Path,
    /// The provider's name (`SLIPWAY_PROVIDER`), checked by [`check_provider`].
    pub provider: &'a str,
    /// A folder of this job's own (out links, configuration file); the caller removes it.
    pub work: &'a Path,
    /// When the job's `NIX_TIMEOUT` ends.
    pub until: Instant,
    /// Marks the job's processes (`SLIPWAY_EFFECT`).
    pub marker: &'a str,
    /// The sandbox every Nix run of the job runs in (SEC-3).
    pub policy: &'a crate::sandbox::Policy,
    /// The bounds on the outputs read.
    pub limits: Limits,
}

/// Output of a failed Nix run, for the operator's log.
pub type NixLog = String;

impl NixRun<'_> {
    fn left(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }

    fn timeout(&self, what: &str) -> NixFailure {
        NixFailure::new(
            FailureCode::Timeout,
            None,
            format!("{what} ran past NIX_TIMEOUT and was stopped; every process it started was killed"),
        )
    }

    /// The command line of an evaluation of [`CORE_EXPR`]: the sandbox's
    /// options and [`EVAL_OPTIONS`], the search path entries of `grants`
    /// (`-I name=path`: restricted evaluation reads no path outside the
    /// store but the source and these), then `args`. Every value of a
    /// request goes in as a string (`--argstr`) or a file, never as Nix
    /// code.
    pub(crate) fn eval_command(&self, grants: &[(&str, &Path)], args: &[&str]) -> Vec<String> {
        let dir = self.dir.display().to_string();
        let mut argv: Vec<String> = self.policy.nix_options();
        for (name, value) in EVAL_OPTIONS {
            argv.extend(["--option".to_owned(), name.to_string(), value.to_string()]);
        }
        argv.extend(["-I".into(), format!("source={dir}")]);
        for (name, path) in grants {
            argv.extend(["-I".into(), format!("{name}={}", path.display())]);
        }
        argv.extend(["-E".into(), CORE_EXPR.into()]);
        argv.extend(["--argstr", "dir", &dir, "--argstr", "providerName", self.provider].map(String::from));
        argv.extend(args.iter().map(|a| a.to_string()));
        argv
    }

    /// Runs `program argv…` in the job's sandbox (the source read-only, the
    /// work folder writable; the host's network only for an evaluation
    /// that may fetch from `SLIPWAY_NIX_ALLOWED_URIS`): its output when it
    /// exited 0, `None` when it failed, and the failure when it timed out
    /// or ran out of memory (never run again). `output` names the output
    /// concerned, for the failure.
    async fn run(
        &self,
        program: &str,
        argv: &[String],
        network: bool,
        output: Option<&str>,
        log: &mut NixLog,
    ) -> Result<Option<String>, NixFailure> {
        if self.left().is_zero() {
            return Err(self.timeout("the build"));
        }
        self.policy.give(self.work).map_err(|e| {
            NixFailure::new(FailureCode::BuildFailed, None, format!("cannot prepare the work folder: {e}"))
        })?;
        let view = crate::sandbox::View {
            read: vec![self.dir.to_path_buf()],
            write: vec![self.work.to_path_buf()],
            network: network && !self.policy.allowed_uris.is_empty(),
        };
        let sandbox = crate::sandbox::Sandbox { policy: self.policy.clone(), view };
        let run = run_tool(sandbox, self.work, program, argv, &[], self.marker, self.left())
            .await
            .map_err(|e| NixFailure::new(FailureCode::BuildFailed, None, e.to_string()))?;
        log.push_str(&run.output);
        match run.outcome {
            EffectOutcome::Exited(0) => Ok(Some(run.output)),
            EffectOutcome::TimedOut => Err(self.timeout("the build")),
            outcome if failure::ran_out_of_memory(&outcome, &run.output) => {
                Err(NixFailure::out_of_memory(output, self.policy.memory))
            }
            _ => Ok(None),
        }
    }

    /// The attribute names of the source's `core`.
    async fn attributes(&self, log: &mut NixLog) -> Result<Vec<String>, NixFailure> {
        let argv = self.eval_command(&[], &["--eval", "--json", "--strict", "-A", "__slipwayAttributeNames"]);
        let run = self.run("nix-instantiate", &argv, true, None, log).await;
        let failed = || {
            NixFailure::new(
                FailureCode::BuildFailed,
                None,
                "core/default.nix of this source does not evaluate".to_owned(),
            )
        };
        let text = run?.ok_or_else(failed)?;
        // The JSON is the last line (warnings may come first).
        let line = text.lines().rev().find(|l| l.starts_with('[')).ok_or_else(failed)?;
        serde_json::from_str(line).map_err(|_| failed())
    }

    /// Builds every document output of MS-2 the source has, and checks it
    /// has `names` (a `schema_build`). A document larger than
    /// `SLIPWAY_OUTPUT_LIMIT` is `output_too_large` and one that is not a
    /// regular file of its output `source_unsafe`, each unread and its
    /// store path deleted; a run out of memory or time ends the whole
    /// build ([`NixFailure`]), not retried.
    pub async fn build_schema(
        &self,
        pinned: &str,
        revision: Option<&str>,
        log: &mut NixLog,
    ) -> Result<BuiltSchema, NixFailure> {
        let mut built = BuiltSchema {
            pinned: pinned.to_owned(),
            revision: revision.map(str::to_owned),
            documents: BTreeMap::new(),
            failures: BTreeMap::new(),
            timings_ms: BTreeMap::new(),
        };
        let started = Instant::now();
        let attributes = self.attributes(log).await?;
        built.timings_ms.insert("eval".into(), started.elapsed().as_millis() as u64);
        let has_schema = attributes.iter().any(|a| a == "schema");
        let absent = |attribute: &str| {
            if has_schema {
                NixFailure::new(
                    FailureCode::SourceTooOld,
                    Some(attribute),
                    format!("{pinned}: this source's core is older than the {attribute} output; use a newer revision"),
                )
            } else {
                NixFailure::new(
                    FailureCode::OutputMissing,
                    Some(attribute),
                    format!(
                        "{pinned}: core/default.nix has no {attribute} output, so it is not a Slipway module source"
                    ),
                )
            }
        };
        let wanted: Vec<&str> =
            DOCUMENTS.iter().map(|(a, _)| *a).filter(|a| attributes.iter().any(|x| x == a)).collect();
        for (attribute, _) in DOCUMENTS.iter().filter(|(a, _)| !wanted.contains(a)) {
            built.failures.insert(attribute.to_string(), absent(attribute));
        }
        if !attributes.iter().any(|a| a == "names") {
            built.failures.insert("names".into(), absent("names"));
        }
        let started = Instant::now();
        // One build for all; when it fails, one each, to say which failed.
        // A run out of memory or time is not tried again (`?`).
        let all = self.build_attributes(&wanted, "outputs", &[], &[], log).await?;
        let results: Vec<(&str, Option<Built>)> = match all {
            Some(outs) => wanted.iter().copied().zip(outs.into_iter().map(Some)).collect(),
            None => {
                let mut each = Vec::new();
                for (i, attribute) in wanted.iter().enumerate() {
                    let out = self.build_attributes(&[attribute], &format!("output-{i}"), &[], &[], log).await?;
                    each.push((*attribute, out.and_then(|mut o| o.pop())));
                }
                each
            }
        };
        for (attribute, out) in results {
            let file = DOCUMENTS.iter().find(|(a, _)| *a == attribute).map(|(_, f)| *f).expect("a document");
            let document = match out {
                None => Err(NixFailure::new(
                    FailureCode::BuildFailed,
                    Some(attribute),
                    format!("{pinned}: the {attribute} output did not build (nix-build -A {attribute} failed)"),
                )),
                Some(out) => self.read_output(pinned, attribute, &out, file, log).await.and_then(|bytes| {
                    serde_json::from_slice::<Value>(&bytes).map_err(|e| {
                        NixFailure::new(
                            FailureCode::BuildFailed,
                            Some(attribute),
                            format!("{pinned}: the {attribute} output did not build ({file} is not JSON: {e})"),
                        )
                    })
                }),
            };
            match document {
                Ok(doc) => {
                    built.documents.insert(attribute.to_owned(), doc);
                }
                Err(failure) => {
                    built.failures.insert(attribute.to_owned(), failure);
                }
            }
        }
        built.timings_ms.insert("build".into(), started.elapsed().as_millis() as u64);
        Ok(built)
    }

    /// Builds `attributes` of the source (with `args` and the search path
    /// entries `grants` besides the source): one `nix-instantiate` writes
    /// their derivations (GC roots `<work>/<name>.drv`, `-2`, …), the
    /// derivations Nix would build are checked ([`derivation`]), then one
    /// `nix-build` builds them (out links `<work>/<name>`, …). Each
    /// attribute must be one derivation. The derivation and out path of
    /// each, in order; `None` when the evaluation or a build failed.
    async fn build_attributes(
        &self,
        attributes: &[&str],
        name: &str,
        args: &[&str],
        grants: &[(&str, &Path)],
        log: &mut NixLog,
    ) -> Result<Option<Vec<Built>>, NixFailure> {
        if attributes.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let output = (attributes.len() == 1).then(|| attributes[0]);
        let root = self.work.join(format!("{name}.drv"));
        let root_text = root.display().to_string();
        let mut tail: Vec<&str> = args.to_vec();
        tail.extend(["--add-root", &root_text, "--indirect"]);
        for attribute in attributes {
            tail.extend(["-A", attribute]);
        }
        let argv = self.eval_command(grants, &tail);
        if self.run("nix-instantiate", &argv, true, output, log).await?.is_none() {
            return Ok(None);
        }
        let link = |i: usize| if i == 0 { root.clone() } else { PathBuf::from(format!("{root_text}-{}", i + 1)) };
        let mut built = Vec::new();
        for (i, attribute) in attributes.iter().enumerate() {
            let drv = std::fs::read_link(link(i)).ok().map(|p| p.display().to_string());
            let Some(drv) = drv.filter(|d| output::is_store_path(d) && d.ends_with(".drv")) else {
                log.push_str(&format!("slipway: {attribute} is not one derivation\n"));
                return Ok(None);
            };
            let parsed = derivation::read(Path::new(&drv));
            let Some(out) = parsed.ok().and_then(|d| d.output("out").map(str::to_owned)) else {
                log.push_str(&format!("slipway: {drv} has no out output\n"));
                return Ok(None);
            };
            built.push(Built { drv, out });
        }
        if link(attributes.len()).symlink_metadata().is_ok() {
            log.push_str("slipway: an attribute is more than one derivation\n");
            return Ok(None);
        }
        if !self.check_builds(&built, output, log).await? {
            return Ok(None);
        }
        let out_link = self.work.join(name).display().to_string();
        let mut argv: Vec<String> = self.policy.nix_options();
        for (option, value) in EVAL_OPTIONS {
            argv.extend(["--option".to_owned(), option.to_string(), value.to_string()]);
        }
        argv.extend(["-o".to_owned(), out_link]);
        argv.extend(built.iter().map(|b| b.drv.clone()));
        if self.run("nix-build", &argv, false, output, log).await?.is_none() {
            return Ok(None);
        }
        Ok(Some(built))
    }

    /// Refuses, before anything is built, a derivation Nix would build for
    /// `built` that would reach the network ([`derivation`]): `source_unsafe`
    /// naming it. False when the dry run itself failed, or did not say how
    /// an output missing from the store would be had (fails closed).
    async fn check_builds(&self, built: &[Built], output: Option<&str>, log: &mut NixLog) -> Result<bool, NixFailure> {
        let listing = self.work.join("dry-run.txt");
        let mut argv: Vec<String> = vec![
            "-c".into(),
            r#"exec nix-store --realise --dry-run "$@" 2>"$0" >&2"#.into(),
            listing.display().to_string(),
        ];
        argv.extend(built.iter().map(|b| b.drv.clone()));
        let ran = self.run("sh", &argv, false, output, log).await?;
        let text = output::read_file(&listing, derivation::DRV_LIMIT).unwrap_or_default();
        let text = String::from_utf8_lossy(&text).into_owned();
        let _ = std::fs::remove_file(&listing);
        if ran.is_none() {
            log.push_str(&text);
            return Ok(false);
        }
        if let Some(unsaid) = built
            .iter()
            .find(|b| Path::new(&b.out).symlink_metadata().is_err() && !text.contains(&b.drv) && !text.contains(&b.out))
        {
            log.push_str(&format!("slipway: the dry run does not say how {} would be built or fetched\n", unsaid.out));
            return Ok(false);
        }
        for drv in derivation::to_build(&text) {
            let why = if output::is_store_path(&drv) {
                match derivation::read(Path::new(&drv)) {
                    Ok(d) => d.refusal(&self.policy.allowed_uris).map(str::to_owned),
                    Err(e) => Some(format!("cannot be read ({e})")),
                }
            } else {
                Some("is not a derivation of the store".to_owned())
            };
            if let Some(why) = why {
                let name = drv.rsplit('/').next().unwrap_or(&drv);
                return Err(NixFailure::new(
                    FailureCode::SourceUnsafe,
                    output,
                    format!(
                        "the source's outputs would build {name}, which Slipway refuses: it {why}; a source's outputs \
                         build without a network and fetch only from SLIPWAY_NIX_ALLOWED_URIS (with builtin:fetchurl)"
                    ),
                ));
            }
        }
        Ok(true)
    }

    /// The bytes of document `file` of `attribute`'s build, within
    /// `SLIPWAY_OUTPUT_LIMIT` ([`output::read_document`]). A refused one is
    /// `output_too_large` or `source_unsafe`, and its store paths are
    /// deleted ([`NixRun::reclaim`]).
    async fn read_output(
        &self,
        pinned: &str,
        attribute: &str,
        built: &Built,
        file: &str,
        log: &mut NixLog,
    ) -> Result<Vec<u8>, NixFailure> {
        let refused = match output::read_document(&built.out, file, self.limits.output) {
            Ok(bytes) => return Ok(bytes),
            Err(refused) => refused,
        };
        let failure = match refused {
            output::Refused::TooLarge { size } => NixFailure::new(
                FailureCode::OutputTooLarge,
                Some(attribute),
                format!(
                    "{pinned}: the {attribute} output's {file} is {size} bytes, more than SLIPWAY_OUTPUT_LIMIT ({}); \
                     it was not read",
                    failure::human_size(self.limits.output)
                ),
            ),
            output::Refused::Unsafe(why) => NixFailure::new(
                FailureCode::SourceUnsafe,
                Some(attribute),
                format!("{pinned}: the {attribute} output was not read: {why}"),
            ),
            output::Refused::Unreadable(why) => {
                return Err(NixFailure::new(
                    FailureCode::BuildFailed,
                    Some(attribute),
                    format!("{pinned}: the {attribute} output did not build ({why})"),
                ))
            }
        };
        self.reclaim(built, log).await;
        Err(failure)
    }

    /// Deletes a refused output's store path and its derivation: the job's
    /// links to them go, then `nix-store --delete` (through the daemon, in
    /// the sandbox: an untrusted user may delete a path nothing keeps
    /// alive). A path kept alive elsewhere stays, and the log says so.
    async fn reclaim(&self, built: &Built, log: &mut NixLog) {
        output::unlink_roots(self.work, &built.out);
        output::unlink_roots(self.work, &built.drv);
        let argv = vec!["--delete".to_owned(), built.out.clone(), built.drv.clone()];
        // Its output (the collector's notes on every stale root of the
        // host) stays out of the job's log.
        let mut ignored = String::new();
        match self.run("nix-store", &argv, false, None, &mut ignored).await {
            Ok(Some(_)) => log.push_str(&format!("slipway: deleted {} and {}\n", built.out, built.drv)),
            _ => log.push_str(&format!("slipway: {} was not deleted: something else keeps it\n", built.out)),
        }
    }

    /// Evaluates `names` on `configuration` (a `names_eval`, EV-1): the
    /// nodes with their DNS names and the applications it disables, as
    /// `nodes.json`. The configuration goes to Nix as a file of this job
    /// (`configuration.json`, its path with `--argstr configFile`, the only
    /// path besides the source the evaluation may read), never as code; it
    /// must hold no secret value. A `nodes.json` past
    /// `SLIPWAY_OUTPUT_LIMIT` or listing more than `SLIPWAY_NODE_LIMIT`
    /// nodes is `output_too_large`.
    pub async fn eval_names(&self, configuration: &Value, log: &mut NixLog) -> Result<Names, NixFailure> {
        let attributes = self.attributes(log).await?;
        if !attributes.iter().any(|a| a == "names") {
            let (code, why) = if attributes.iter().any(|a| a == "schema") {
                (FailureCode::SourceTooOld, "this source's core is older than the names output")
            } else {
                (FailureCode::OutputMissing, "core/default.nix has no names output")
            };
            return Err(NixFailure::new(code, Some("names"), why));
        }
        let failed = |why: String| NixFailure::new(FailureCode::BuildFailed, Some("names"), why);
        let file = self.configuration_file(configuration)?;
        let file_text = file.display().to_string();
        let args = ["--argstr", "configFile", file_text.as_str()];
        let built = self.build_attributes(&["names"], "names", &args, &[("configuration", &file)], log).await?;
        let Some(built) = built.and_then(|mut b| b.pop()) else {
            let reason = log
                .lines()
                .rev()
                .find(|l| l.contains("error:"))
                .map(|l| l.trim().trim_start_matches("error:").trim().to_owned())
                .unwrap_or_else(|| "nix-build -A names failed".into());
            return Err(failed(format!("the names eval refused this configuration: {reason}")));
        };
        let bytes = self.read_output("the names eval", "names", &built, "nodes.json", log).await?;
        let value: Value =
            serde_json::from_slice(&bytes).map_err(|e| failed(format!("nodes.json is not JSON: {e}")))?;
        let count = value.get("nodes").and_then(Value::as_array).map_or(0, Vec::len);
        if count > self.limits.nodes as usize {
            self.reclaim(&built, log).await;
            return Err(NixFailure::new(
                FailureCode::OutputTooLarge,
                Some("names"),
                format!(
                    "the names output lists {count} nodes, more than SLIPWAY_NODE_LIMIT ({}); it was not kept",
                    self.limits.nodes
                ),
            ));
        }
        serde_json::from_value(value).map_err(|e| failed(format!("nodes.json is not of its documented shape: {e}")))
    }

    /// Writes `configuration` as `<work>/configuration.json`; its path. A
    /// file that cannot be written is the worker's fault
    /// ([`FailureCode::of_write`]).
    fn configuration_file(&self, configuration: &Value) -> Result<PathBuf, NixFailure> {
        let file = self.work.join("configuration.json");
        std::fs::write(&file, serde_json::to_vec(configuration).expect("a configuration serialises")).map_err(|e| {
            NixFailure::new(
                FailureCode::of_write(&e),
                Some("names"),
                format!("the worker cannot write the configuration into its state folder: {e}"),
            )
        })?;
        Ok(file)
    }
}

/// One attribute built: its derivation and its `out` path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Built {
    drv: String,
    out: String,
}

/// What the `names` output says of a configuration (`nodes.json`, EV-1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Names {
    /// The nodes a deploy stands up.
    pub nodes: Vec<NamedNode>,
    /// The applications the configuration disables.
    #[serde(default)]
    pub disabled_applications: Vec<String>,
}

/// One node of [`Names`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamedNode {
    /// The node's name.
    pub name: String,
    /// The DNS names it publishes.
    #[serde(default)]
    #[schema(required = true)]
    pub dns_names: Vec<String>,
    /// The store path of its `configuration.nix`, when the eval gives it.
    #[serde(default)]
    #[schema(required = true)]
    pub configuration: Option<String>,
}

#[cfg(test)]
mod tests;
