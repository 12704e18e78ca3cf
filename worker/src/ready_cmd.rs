//! `slipway-worker run wait-ready --deployment <id> [--deadline 5m]`
//! (PRODUCT.md §10): probes the instances of the deployment's last
//! successful deploy, as the fleet's `readiness` job does
//! ([`slipway_jobs::probe::probe`]), round after round with a growing
//! pause, until every one is ready or the deadline passes, showing each
//! instance's state as it goes (indicatif on a terminal; a line per change
//! otherwise). What it finds is recorded for `GET /deployments/{id}` too.
//!
//! Exit codes: 0 every instance is ready; 1 the deadline passed first (each
//! instance not ready is named with why); 2 bad input (an unknown
//! deployment, one never deployed, a deadline that is no duration).

use crate::Output;
use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use slipway_jobs::config::Config;
use slipway_jobs::probe::{self, State};
use slipway_jobs::source::outputs::Instance;
use slipway_jobs::state::BuildKind;
use slipway_jobs::store::instance_readiness::{self as rows, Found};
use slipway_jobs::store::{builds, now_ms};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The arguments of `run wait-ready`.
#[derive(Args)]
pub struct WaitReadyArgs {
    /// The deployment whose instances to wait for.
    #[arg(long)]
    deployment: String,
    /// How long to wait at most: 300, 90s, 5m, 1h.
    #[arg(long, default_value = "5m", allow_hyphen_values = true)]
    deadline: String,
    /// Output format of the final summary.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

fn refuse(output: Output, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("slipway-worker run wait-ready: {message}");
    if output == Output::Json {
        println!(
            "{}",
            serde_json::json!({ "error": "invalid_request", "message": message.to_string(), "details": null })
        );
    }
    ExitCode::from(2)
}

/// One instance being waited for.
struct Waiting {
    instance: Instance,
    state: State,
    reason: Option<String>,
    probes: u32,
    bar: ProgressBar,
}

/// Runs `wait-ready`.
pub async fn run(config: Config, args: WaitReadyArgs) -> ExitCode {
    let Some(deadline) = slipway_jobs::config::parse_duration(&args.deadline).filter(|d| !d.is_zero()) else {
        return refuse(
            args.output,
            format!("--deadline {:?}: expected a duration such as 300, 90s, 5m or 1h", args.deadline),
        );
    };
    if let Err(e) = slipway_jobs::id::DeploymentId::parse(&args.deployment) {
        return refuse(args.output, format!("--deployment {:?}: {e}", args.deployment));
    }
    // It only reads: a SQLite file that is not there is a mistyped
    // DATABASE_URL, not a database to create.
    if let Some(path) = config.database.sqlite_path().filter(|p| !p.exists()) {
        return refuse(args.output, format!("no SQLite database at {}: check DATABASE_URL", path.display()));
    }
    let db = match slipway_jobs::store::open(&config).await {
        Ok(db) => db,
        Err(e) => return refuse(args.output, format!("opening the database: {e}")),
    };
    let build = match db.acquire().await {
        Ok(mut conn) => builds::latest_succeeded(&mut conn, &args.deployment).await,
        Err(e) => Err(e),
    };
    let build = match build {
        Ok(Some(b)) if b.kind == BuildKind::Deploy => b,
        Ok(Some(_)) => {
            return refuse(args.output, format!("deployment {} was destroyed: it serves nothing", args.deployment))
        }
        Ok(None) => return refuse(args.output, format!("deployment {} has no successful deploy", args.deployment)),
        Err(e) => return refuse(args.output, format!("reading deployment {}: {e}", args.deployment)),
    };
    let settings = build.readiness.clone().unwrap_or_default();
    let started = Instant::now();
    let progress = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
    let live = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let style = ProgressStyle::with_template("{spinner} {prefix:<12} {msg}").expect("a valid template");
    let mut waiting: Vec<Waiting> = build
        .instances
        .iter()
        .map(|instance| {
            let bar =
                progress.add(ProgressBar::new_spinner().with_style(style.clone()).with_prefix(instance.name.clone()));
            bar.set_message(format!("{} pending", instance.url));
            if live {
                bar.enable_steady_tick(Duration::from_millis(120));
            }
            Waiting { instance: instance.clone(), state: State::Pending, reason: None, probes: 0, bar }
        })
        .collect();
    loop {
        let round = waiting.iter().filter(|w| w.state != State::Ready).map(|w| {
            let (instance, settings) = (w.instance.clone(), &settings);
            let allowed = &config.worker.readiness_connect;
            async move { probe::probe(&instance, settings, allowed).await }
        });
        let probes = futures::future::join_all(round).await;
        let mut pause: Option<Duration> = None;
        let mut conn = db.acquire().await.ok();
        for (w, probe) in waiting.iter_mut().filter(|w| w.state != State::Ready).zip(probes) {
            w.probes += 1;
            let changed = w.state != probe.state || w.reason != probe.reason;
            w.state = probe.state;
            w.reason = probe.reason.clone();
            let text = match &w.reason {
                None => format!("{} ready", w.instance.url),
                Some(why) => format!("{} {}: {why}", w.instance.url, w.state.as_str()),
            };
            if changed && !live {
                progress.suspend(|| eprintln!("{}: {text}", w.instance.name));
            }
            if w.state == State::Ready {
                w.bar.finish_with_message(text);
            } else {
                w.bar.set_message(text);
                let next = probe::pause(w.probes, &probe.class);
                pause = Some(pause.map_or(next, |p| p.min(next)));
            }
            if let Some(conn) = conn.as_mut() {
                let found =
                    Found { instance: &w.instance.name, state: w.state, reason: w.reason.as_deref(), at: now_ms() };
                let _ = rows::record(conn, &build.deployment_id, &build.id, &found).await;
            }
        }
        drop(conn);
        let Some(pause) = pause else { break };
        let left = deadline.saturating_sub(started.elapsed());
        if left.is_zero() {
            break;
        }
        tokio::time::sleep(pause.min(left)).await;
    }
    for w in &waiting {
        if !w.bar.is_finished() {
            w.bar.abandon();
        }
    }
    let ready = waiting.iter().all(|w| w.state == State::Ready);
    if args.output == Output::Json {
        let instances: Vec<serde_json::Value> = waiting
            .iter()
            .map(|w| {
                let state = if w.state == State::Ready { State::Ready } else { State::NotReady };
                serde_json::json!({ "name": w.instance.name, "url": w.instance.url, "state": state,
                                    "last": w.state, "reason": w.reason, "probes": w.probes })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({ "deployment_id": build.deployment_id, "build_id": build.id, "ready": ready, "instances": instances })
        );
    } else if ready {
        println!("every instance of {} is ready ({} s)", build.deployment_id, started.elapsed().as_secs());
    } else {
        println!("not every instance of {} is ready within {} s:", build.deployment_id, deadline.as_secs());
        for w in waiting.iter().filter(|w| w.state != State::Ready) {
            println!(
                "  {} {}: {} ({})",
                w.instance.name,
                w.instance.url,
                w.state.as_str(),
                w.reason.as_deref().unwrap_or("no reason")
            );
        }
    }
    if ready {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
