//! `slipway rollout start|status|pause|resume|cancel [--follow]` (RO-1):
//! the rollout routes of the api, and a progress bar that follows one.

use crate::client::{path_id, Client, Failure};
use crate::screen::Screen;
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;

/// How often `--follow` reads the rollout.
const POLL: Duration = Duration::from_secs(1);

/// What `slipway rollout` does.
#[derive(Subcommand)]
pub enum Action {
    /// Starts a rollout of a module source revision to many deployments in waves (POST /rollouts).
    Start {
        /// The target: `git+<url>?rev=<commit>` or `?ref=<branch>` (a ref is pinned once, at start).
        #[arg(long)]
        source: String,
        /// The deployments, comma separated, in the order they are rolled out.
        #[arg(long, value_delimiter = ',', conflicts_with = "repository", required_unless_present = "repository")]
        deployments: Vec<String>,
        /// Instead of --deployments: every live deployment whose source is this repository.
        #[arg(long)]
        repository: Option<String>,
        /// The waves' sizes, comma separated: a number of deployments or a share reached by the
        /// end of the wave (`1,25%,100%`); the first wave is the canaries.
        #[arg(long, value_delimiter = ',', required = true)]
        waves: Vec<String>,
        /// Failures allowed per wave and in all (default 0).
        #[arg(long)]
        max_failures: Option<u32>,
        /// Failures allowed in one wave (overrides --max-failures for it).
        #[arg(long)]
        max_failures_per_wave: Option<u32>,
        /// Failures allowed in the whole rollout (overrides --max-failures for it).
        #[arg(long)]
        max_failures_total: Option<u32>,
        /// The pause between waves (`30s`, `5m`).
        #[arg(long)]
        pause: Option<String>,
        /// Each build's health gate: `<timeout>` or `<timeout>,rollback`.
        #[arg(long)]
        health_gate: Option<String>,
        /// Show a progress bar until the rollout ends; exit 4 unless it completes.
        #[arg(long)]
        follow: bool,
    },
    /// Shows a rollout's state, waves and deployments (GET /rollouts/{id}); without an id, the
    /// latest rollouts.
    Status {
        /// The rollout id.
        id: Option<String>,
        /// Show a progress bar until the rollout ends; exit 4 unless it completes.
        #[arg(long)]
        follow: bool,
    },
    /// Queues nothing more until resumed; builds already queued go on.
    Pause {
        /// The rollout id.
        id: String,
    },
    /// Goes on from where the rollout paused.
    Resume {
        /// The rollout id.
        id: String,
        /// Show a progress bar until the rollout ends.
        #[arg(long)]
        follow: bool,
    },
    /// Queues nothing more, for good; builds already queued finish.
    Cancel {
        /// The rollout id.
        id: String,
    },
}

/// Whether a rollout's state is one it never leaves.
fn ended(state: &str) -> bool {
    matches!(state, "halted" | "cancelled" | "completed")
}

/// The `start` body from its options.
#[allow(clippy::too_many_arguments)]
fn start_body(
    source: String,
    deployments: Vec<String>,
    repository: Option<String>,
    waves: Vec<String>,
    max_failures: Option<u32>,
    per_wave: Option<u32>,
    total: Option<u32>,
    pause: Option<String>,
    health_gate: Option<String>,
) -> Result<Value, Failure> {
    let waves: Vec<Value> =
        waves.iter().map(|w| w.trim().parse::<u64>().map(|n| json!(n)).unwrap_or_else(|_| json!(w.trim()))).collect();
    let mut body = json!({ "module_source": source, "waves": waves });
    match repository {
        Some(repository) => body["select"] = json!({ "repository": repository }),
        None => body["deployments"] = json!(deployments),
    }
    let both = max_failures.unwrap_or(0);
    body["max_failures"] = json!({ "per_wave": per_wave.unwrap_or(both), "total": total.unwrap_or(both) });
    if let Some(pause) = pause {
        body["pause"] = json!(pause);
    }
    if let Some(gate) = health_gate {
        let (timeout, rollback) = match gate.split_once(',') {
            None => (gate.as_str(), false),
            Some((timeout, "rollback")) => (timeout, true),
            Some(_) => {
                return Err(Failure::Usage(format!("--health-gate {gate}: expected <timeout> or <timeout>,rollback")))
            }
        };
        body["health_gate"] = json!({ "timeout": timeout, "rollback": rollback });
    }
    Ok(body)
}

/// A rollout in a few lines: its state, target, waves and the deployments that did not succeed.
pub fn text(rollout: &Value) -> String {
    let mut lines = vec![format!(
        "rollout {}: {} (wave {} of {}), {} failures, target {}",
        rollout["id"].as_str().unwrap_or("?"),
        rollout["state"].as_str().unwrap_or("?"),
        rollout["wave"],
        rollout["waves"].as_array().map_or(0, Vec::len),
        rollout["failures"],
        rollout["module_source"].as_str().unwrap_or("?"),
    )];
    if let Some(reason) = rollout["reason"].as_str() {
        lines.push(format!("  {reason}"));
    }
    for wave in rollout["waves"].as_array().into_iter().flatten() {
        let counts: Vec<String> =
            wave["counts"].as_object().into_iter().flatten().map(|(status, n)| format!("{n} {status}")).collect();
        lines.push(format!("  wave {} ({}): {}", wave["wave"], wave["size"], counts.join(", ")));
    }
    for d in rollout["deployments"].as_array().into_iter().flatten() {
        let status = d["status"].as_str().unwrap_or("?");
        if matches!(status, "failed" | "skipped" | "overridden" | "cancelled") {
            let build = d["build_id"].as_str().map(|b| format!(" build {b}")).unwrap_or_default();
            let reason = d["reason"].as_str().map(|r| format!(": {r}")).unwrap_or_default();
            lines.push(format!("  {} {status}{build}{reason}", d["deployment_id"].as_str().unwrap_or("?")));
        }
    }
    lines.join("\n")
}

/// The latest rollouts, one line each.
fn list_text(list: &Value) -> String {
    let rows: Vec<String> = list["rollouts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            format!(
                "{}  {:<9}  wave {}/{}  {} failures  {}",
                r["id"].as_str().unwrap_or("?"),
                r["state"].as_str().unwrap_or("?"),
                r["wave"],
                r["waves"].as_array().map_or(0, Vec::len),
                r["failures"],
                r["module_source"].as_str().unwrap_or("?"),
            )
        })
        .collect();
    if rows.is_empty() {
        "no rollouts".to_owned()
    } else {
        rows.join("\n")
    }
}

/// How many deployments of `rollout` are done (not pending or queued), and in all.
fn progress(rollout: &Value) -> (u64, u64) {
    let mut done = 0;
    let mut all = 0;
    for wave in rollout["waves"].as_array().into_iter().flatten() {
        for (status, n) in wave["counts"].as_object().into_iter().flatten() {
            let n = n.as_u64().unwrap_or(0);
            all += n;
            if !matches!(status.as_str(), "pending" | "queued") {
                done += n;
            }
        }
    }
    (done, all)
}

/// Reads rollout `id` until it ended, with a progress bar on a terminal (a
/// JSON line per change with `--output json`); the rollout at its end.
async fn follow(client: &Client, id: &str, json_out: bool, screen: Screen) -> Result<Value, Failure> {
    let path = format!("/rollouts/{}", path_id("rollout id", id)?);
    let bar = if json_out || !screen.out { ProgressBar::hidden() } else { ProgressBar::new(0) };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} deployments, {msg} ({elapsed})").expect("a valid template"),
    );
    let mut last = Value::Null;
    loop {
        let rollout = client.get(&path).await?;
        let (done, all) = progress(&rollout);
        bar.set_length(all);
        bar.set_position(done);
        bar.set_message(format!(
            "wave {} of {}, {}",
            rollout["wave"],
            rollout["waves"].as_array().map_or(0, Vec::len),
            rollout["state"].as_str().unwrap_or("?")
        ));
        if json_out && (rollout["state"] != last["state"] || rollout["waves"] != last["waves"]) {
            screen.println(&screen.json(&json!({ "event": "rollout", "rollout": rollout })));
        }
        if ended(rollout["state"].as_str().unwrap_or("")) {
            bar.finish_and_clear();
            return Ok(rollout);
        }
        last = rollout;
        tokio::time::sleep(POLL).await;
    }
}

/// The end of a followed rollout: exit 4 unless it completed.
fn outcome(rollout: &Value) -> Result<(), Failure> {
    match rollout["state"].as_str() {
        Some("completed") => Ok(()),
        state => Err(Failure::BuildUnsuccessful {
            build_id: format!("rollout {}", rollout["id"].as_str().unwrap_or("?")),
            status: state.unwrap_or("?").to_owned(),
            reason: rollout["reason"].as_str().map(str::to_owned),
        }),
    }
}

/// Runs `action` against the api; `json_out` for `--output json`.
pub async fn run(client: &Client, action: Action, json_out: bool, screen: Screen) -> Result<(), Failure> {
    let show = |value: &Value, human: String| {
        if json_out {
            screen.println(&screen.json(value));
        } else {
            screen.println(&human);
        }
    };
    let (rollout, and_follow) = match action {
        Action::Start {
            source,
            deployments,
            repository,
            waves,
            max_failures,
            max_failures_per_wave,
            max_failures_total,
            pause,
            health_gate,
            follow,
        } => {
            let body = start_body(
                source,
                deployments,
                repository,
                waves,
                max_failures,
                max_failures_per_wave,
                max_failures_total,
                pause,
                health_gate,
            )?;
            let (_, rollout) = client.json(client.request(Method::POST, "/rollouts")?.json(&body)).await?;
            (rollout, follow)
        }
        Action::Status { id: None, .. } => {
            let list = client.get("/rollouts").await?;
            show(&list, list_text(&list));
            return Ok(());
        }
        Action::Status { id: Some(id), follow } => {
            (client.get(&format!("/rollouts/{}", path_id("rollout id", &id)?)).await?, follow)
        }
        Action::Pause { id } => (control(client, &id, "pause").await?, false),
        Action::Resume { id, follow } => (control(client, &id, "resume").await?, follow),
        Action::Cancel { id } => (control(client, &id, "cancel").await?, false),
    };
    if !and_follow {
        show(&rollout, text(&rollout));
        return Ok(());
    }
    if !json_out {
        screen.println(&format!(
            "rollout {}: {} to {}",
            rollout["id"].as_str().unwrap_or("?"),
            rollout["state"].as_str().unwrap_or("?"),
            rollout["module_source"].as_str().unwrap_or("?")
        ));
    }
    let id = rollout["id"].as_str().unwrap_or_default().to_owned();
    let end = follow(client, &id, json_out, screen).await?;
    if !json_out {
        screen.println(&text(&end));
    }
    outcome(&end)
}

/// `POST /rollouts/{id}/<what>`: the rollout then.
async fn control(client: &Client, id: &str, what: &str) -> Result<Value, Failure> {
    let path = format!("/rollouts/{}/{what}", path_id("rollout id", id)?);
    Ok(client.json(client.request(Method::POST, &path)?).await?.1)
}
