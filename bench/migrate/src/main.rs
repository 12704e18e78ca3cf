//! `slipway-migrate-bench`: how long a submit's migrate + validate takes on a
//! large configuration (`Checker::check`, the call `jobs/src/submit.rs`
//! makes), and whether it grows linearly with the configuration's size.
//! `scripts/bench --only migrate` drives it; see `docs/BENCHMARKS.md`.
//!
//! ```text
//! slipway-migrate-bench [--sizes-mb 0.1,1,10] [--entries 1000] [--seconds 3] [--source-dir api/default-source]
//! ```
//!
//! Everything is generated in code, deterministically: no input file.
//!
//! - **The source**: the built-in one (`api/default-source/`: its schema,
//!   meta and renames), with its renames table grown to `--entries` entries.
//!   The built-in entries and one more (`peertube.blocklist →
//!   peertube.blockedInstances`) come first, so they are the entries that
//!   move values and every later entry is checked against them. The filler
//!   entries after them name nothing in the configuration, as most entries
//!   of a long history do, in the proportions of the built-in table: 1 in 10
//!   a `*` over the items of the big moderators list, 2 a `*` over the
//!   applications, 4 a literal path of one application, 3 a value rename
//!   under peertube's settings.
//! - **The configuration**: stored in the old shape, so the table has work
//!   to do: chains (`domainName → domain → subdomain`, `email → contactEmail
//!   → adminEmail`, `signup.limit → maxUsers → userLimit`), one moderators
//!   list whose every item is renamed (`moderators.*.name → username`) and
//!   one map moved as a whole (`blocklist`), the two of them grown until
//!   the configuration, written as compact JSON, reaches the size asked.
//!   After migration it is valid: [`Checker::check`] answers `Ok`, which the
//!   bench asserts before it measures.
//!
//! Per size, four timings, each repeated for `--seconds` (at least 30
//! times, at most 2,000) after 3 warm-up runs, on a fresh clone of the
//! configuration (the clone and the drop of the result are not timed):
//! `check` (migrate + validate, what a submit runs, of the configuration in
//! its old shape), `check_current` (the same of the migrated configuration,
//! as most submits are: the table finds nothing to move), `migrate` (the
//! rename engine alone, old shape) and `validate` (`Checker::check` of the
//! migrated configuration with an empty table: schema, text Nix cannot
//! carry, secrets). The result is one JSON line on stdout; progress goes to
//! stderr.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _};
use clap::Parser;
use serde_json::{json, Map, Value};
use slipway_jobs::renames::{migrate, Rename, RenameKind};
use slipway_jobs::source::outputs::SourceOutputs;
use slipway_jobs::validate::Checker;

#[derive(Parser)]
#[command(name = "slipway-migrate-bench", about = "Migrate + validate of large configurations (Checker::check)")]
struct Cli {
    /// Configuration sizes, in MB (10^6 bytes of compact JSON).
    #[arg(long, value_delimiter = ',', default_value = "0.1,1,10")]
    sizes_mb: Vec<f64>,
    /// Entries of the renames table.
    #[arg(long, default_value_t = 1000)]
    entries: usize,
    /// Seconds of repetitions per timing and size (at least 30, at most 2,000 repetitions).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// The built-in source's outputs (schema.json, applications.json, renames.json, meta.json).
    #[arg(long, default_value = "api/default-source")]
    source_dir: std::path::PathBuf,
}

const MIN_REPS: usize = 30;
const MAX_REPS: usize = 2_000;
const WARM_UP: usize = 3;
const SECRETS_REFUSED: &str = "secret values are refused";

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let builtin = SourceOutputs::read_dir(&cli.source_dir)
        .with_context(|| format!("reading the built-in source's outputs from {}", cli.source_dir.display()))?;
    let builtin_entries = builtin.renames.len();
    let table = renames_table(&builtin.renames, cli.entries);
    ensure!(table.len() == cli.entries, "the built-in table alone has more than {} entries", cli.entries);
    let with_table = Checker::new(SourceOutputs { renames: table.clone(), ..builtin.clone() })?;
    let without_table = Checker::new(SourceOutputs { renames: Vec::new(), ..builtin })?;

    let budget = Duration::from_secs_f64(cli.seconds);
    let mut results = Vec::new();
    for &mb in &cli.sizes_mb {
        let configuration = configuration_of((mb * 1e6) as usize);
        let bytes = serde_json::to_vec(&configuration)?.len();
        let nodes = count_nodes(&configuration);

        // What the bench measures must be a submit that passes.
        let mut migrated = configuration.clone();
        let skipped = migrate(&mut migrated, &table);
        ensure!(skipped.is_empty(), "the generated table skips entries: {skipped:?}");
        ensure!(migrated != configuration, "the generated table moves nothing");
        let checked = with_table.check(configuration.clone(), Some(SECRETS_REFUSED));
        if let Err(listing) = &checked {
            anyhow::bail!("the generated configuration does not pass: {:?}", listing.problems);
        }
        drop(checked);

        eprintln!("[migrate-bench] {mb} MB: {bytes} bytes, {nodes} JSON values");
        let check = time(budget, &configuration, |c| with_table.check(c, Some(SECRETS_REFUSED)).is_ok());
        let migrate_only = time(budget, &configuration, |mut c| {
            migrate(&mut c, &table);
            c
        });
        let validate = time(budget, &migrated, |c| without_table.check(c, Some(SECRETS_REFUSED)).is_ok());
        let check_current = time(budget, &migrated, |c| with_table.check(c, Some(SECRETS_REFUSED)).is_ok());
        eprintln!(
            "[migrate-bench] {mb} MB: check p50 {:.2} ms, p99 {:.2} ms ({} runs); migrate p50 {:.2} ms; \
             validate p50 {:.2} ms; check of the current shape p50 {:.2} ms",
            check.p50, check.p99, check.runs, migrate_only.p50, validate.p50, check_current.p50
        );
        results.push(json!({
            "size_mb": mb,
            "bytes": bytes,
            "json_values": nodes,
            "check_ms": check.to_json(),
            "check_current_ms": check_current.to_json(),
            "migrate_ms": migrate_only.to_json(),
            "validate_ms": validate.to_json(),
        }));
    }
    let line = json!({
        "name": "migrate_validate",
        "entries": table.len(),
        "builtin_entries": builtin_entries,
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "sizes": results,
    });
    println!("{line}");
    Ok(())
}

/// The built-in entries, the entry that moves the blocklist, then filler
/// entries (see the crate doc) up to `entries` in all.
fn renames_table(builtin: &[Rename], entries: usize) -> Vec<Rename> {
    let mut table = builtin.to_vec();
    table
        .push(Rename::new(["applications", "peertube", "blocklist"], ["applications", "peertube", "blockedInstances"]));
    let apps = ["mastodon", "peertube", "pixelfed"];
    let mut i = 0;
    while table.len() < entries {
        let app = apps[i % apps.len()];
        let (old, new) = (format!("legacy{i}"), format!("option{i}"));
        // In the proportions of the built-in table: 1 in 10 over the items
        // of a list, 2 over the applications, 7 literal (3 of them values).
        let entry = match i % 10 {
            0 => Rename::new(
                ["applications", "mastodon", "moderators", "*", &old],
                ["applications", "mastodon", "moderators", "*", &new],
            ),
            1 | 2 => Rename::new(["applications", "*", &old], ["applications", "*", &new]),
            3..=6 => Rename::new(["applications", app, &old], ["applications", app, &new]),
            _ => Rename {
                kind: RenameKind::Value,
                ..Rename::new(
                    ["applications", "peertube", "settings", &old, "value"],
                    ["applications", "peertube", "settings", &new, "value"],
                )
            },
        };
        table.push(entry);
        i += 1;
    }
    table
}

fn moderator(i: usize) -> Value {
    json!({"name": format!("member{i:07}"), "role": if i.is_multiple_of(10) { "admin" } else { "moderator" }})
}

fn blocked(i: usize) -> (String, Value) {
    (format!("spam{i:07}.example.net"), json!(format!("spam and abuse reports, ticket {i:07}")))
}

/// A configuration in the old shape whose compact JSON is about `bytes`
/// long (never shorter than its fixed part): a moderators list and a
/// blocklist of equal length make up the rest.
fn configuration_of(bytes: usize) -> Value {
    let base = |n: usize| {
        let moderators: Vec<Value> = (0..n).map(moderator).collect();
        let blocklist: Map<String, Value> = (0..n).map(blocked).collect();
        json!({
            "domain": "bench.example.org",
            "applications": {
                "mastodon": {
                    "enable": true,
                    "domainName": "social",
                    "email": "admin@bench.example.org",
                    "deeplApiKey": "",
                    "registrations": "approval",
                    "moderators": moderators,
                },
                "peertube": {
                    "enable": true,
                    "adminEmail": "root@bench.example.org",
                    "blocklist": blocklist,
                    "settings": {"signup": {"limit": 100, "enabled": true}, "instance": {"name": "Bench"}},
                    "transcoding": {"enable": true, "resolutions": ["480p", "720p"], "threads": 2},
                },
                "pixelfed": {
                    "enable": true,
                    "adminEmail": "pix@bench.example.org",
                    "maxPhotoSize": 20000,
                    "storage": {"backend": "local"},
                },
            },
        })
    };
    let size = |v: &Value| serde_json::to_vec(v).map_or(0, |text| text.len());
    let fixed = size(&base(0));
    let per_pair = size(&base(1000)).saturating_sub(fixed) / 1000;
    base(bytes.saturating_sub(fixed) / per_pair.max(1))
}

fn count_nodes(value: &Value) -> usize {
    1 + match value {
        Value::Object(map) => map.values().map(count_nodes).sum(),
        Value::Array(items) => items.iter().map(count_nodes).sum(),
        _ => 0,
    }
}

/// Milliseconds of one timing over its runs.
struct Timing {
    runs: usize,
    p50: f64,
    p99: f64,
    min: f64,
    max: f64,
}

impl Timing {
    fn to_json(&self) -> Value {
        let round = |ms: f64| (ms * 1000.0).round() / 1000.0;
        json!({"runs": self.runs, "p50": round(self.p50), "p99": round(self.p99), "min": round(self.min), "max": round(self.max)})
    }
}

/// Runs `run` on fresh clones of `input` for `budget` (within the
/// repetition bounds), timing each call alone; the clone before and the
/// drop of the result after are outside the timing.
fn time<T>(budget: Duration, input: &Value, mut run: impl FnMut(Value) -> T) -> Timing {
    for _ in 0..WARM_UP {
        drop(run(input.clone()));
    }
    let mut samples = Vec::new();
    let started = Instant::now();
    while samples.len() < MAX_REPS && (samples.len() < MIN_REPS || started.elapsed() < budget) {
        let fresh = input.clone();
        let t0 = Instant::now();
        let out = run(fresh);
        samples.push(t0.elapsed().as_secs_f64() * 1e3);
        drop(out);
    }
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1];
    Timing { runs: samples.len(), p50: at(0.5), p99: at(0.99), min: samples[0], max: samples[samples.len() - 1] }
}
