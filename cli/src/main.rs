//! `slipway`: Slipway's client command line, for people without a
//! front-end. It speaks only HTTP to the api (`--url`), with a bearer token
//! (`--token`); see `slipway --help` and docs/CLI.md.

mod client;
mod follow;
mod rollout;
mod screen;
mod table;
mod token;
mod webhook;

use clap::{Parser, Subcommand, ValueEnum};
use client::{path_id, query_value, Client, Failure};
use follow::{Resume, Seen};
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::Method;
use screen::Screen;
use serde_json::{json, Value};
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

/// The api's base URL when neither `--url` nor `SLIPWAY_URL` is given.
const DEFAULT_URL: &str = "http://127.0.0.1:8080";

const EXIT_CODES: &str = "\
Exit codes:
    0  done (with --follow, logs -f or plan: the build succeeded)
    1  the api refused or failed the request (its error code and message are shown; a stale
       plan's apply lists what moved since the plan)
    2  bad usage or input (a missing token, an unreadable file, a bad option)
    3  the api could not be reached at --url
    4  the followed build (or a plan's build) failed, was cancelled or was superseded
    5  the api is busy for now (HTTP 503 or 429, such as queue_full); try again after the Retry-After shown
  130  stopped by Ctrl-C while following; the build goes on (the command to follow it again is shown)
  141  the reader of the output went away (`slipway logs -f … | head`): ended by SIGPIPE, quietly

On a terminal, control characters in what the api and builds send (escape sequences, carriage
returns) are shown as escapes such as \\x1b; --raw, or output to a pipe or file, keeps them as sent.";

#[derive(Parser)]
#[command(
    name = "slipway",
    version,
    about = "Slipway's client: deploy, plan, apply, roll back, watch and remove deployments over the HTTP API.",
    after_help = EXIT_CODES
)]
struct Cli {
    /// The api's base URL.
    #[arg(long, env = "SLIPWAY_URL", default_value = DEFAULT_URL, global = true)]
    url: String,
    /// A bearer token (a JWT from your front-end, or `slipway-api token` in development). Never printed.
    #[arg(long, env = "SLIPWAY_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,
    /// `text` for people (tables), `json` for scripts (one JSON document; NDJSON for streams).
    #[arg(long, value_enum, default_value_t = Output::Text, global = true)]
    output: Output,
    /// Write log text, messages and names exactly as the api sent them, terminal control
    /// characters included, even to a terminal (by default a terminal gets them escaped).
    #[arg(long, global = true)]
    raw: bool,
    /// While following a build (logs -f, --follow): how long the api may be away (unreachable or
    /// cutting the stream) before giving up with exit code 3; `90s`, `10m`, `1h`.
    #[arg(long, global = true, default_value = "10m", value_parser = follow::parse_duration)]
    give_up_after: Duration,
    #[command(subcommand)]
    command: Command,
}

/// How results are printed.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Text,
    Json,
}

/// Why a build was queued, as `history --trigger` takes it.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Trigger {
    /// A submitted configuration (`slipway deploy`).
    #[value(name = "submit")]
    Submit,
    /// A delete.
    #[value(name = "delete")]
    Delete,
    /// A plan (`slipway plan`, `deploy --dry-run`).
    #[value(name = "dry_run")]
    DryRun,
    /// An applied plan.
    #[value(name = "apply")]
    Apply,
    /// A rollback someone asked for.
    #[value(name = "rollback")]
    Rollback,
    /// A rollback after a failed health gate.
    #[value(name = "auto_rollback")]
    AutoRollback,
    /// A wave of a rollout (`slipway rollout`).
    #[value(name = "rollout")]
    Rollout,
}

impl Trigger {
    /// The api's name of the trigger.
    fn as_str(self) -> &'static str {
        match self {
            Trigger::Submit => "submit",
            Trigger::Delete => "delete",
            Trigger::DryRun => "dry_run",
            Trigger::Apply => "apply",
            Trigger::Rollback => "rollback",
            Trigger::AutoRollback => "auto_rollback",
            Trigger::Rollout => "rollout",
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Submits a configuration (PUT /deployments/{id}) and queues its deploy.
    Deploy {
        /// The deployment id.
        id: String,
        /// The configuration as JSON (`-` for standard input). A file with a top-level
        /// `configuration` is sent as the whole request body (it may name a `module_source`).
        #[arg(short = 'f', long = "file")]
        file: String,
        /// The module source to deploy with (default: the body's, else the built-in one).
        #[arg(long)]
        module_source: Option<String>,
        /// Evaluate and build only; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Hold the deploy until every instance it deployed is ready, failing it
        /// `health_gate` after this long (`90s`, `5m`, `1h`; the api's HEALTH_GATE
        /// applies when not given).
        #[arg(long, value_name = "TIMEOUT")]
        health_gate: Option<String>,
        /// With --health-gate: roll back to the previous successful deploy when the
        /// gate fails.
        #[arg(long, requires = "health_gate")]
        rollback_on_failure: bool,
        /// Show the build's log and progress until it ends; exit 4 unless it succeeds.
        #[arg(long)]
        follow: bool,
    },
    /// Shows a deployment: its state, last build and instances (GET /deployments/{id}).
    Status {
        /// The deployment id.
        id: String,
    },
    /// Prints a build's log (GET /builds/{id}); with -f, streams it until the build ends.
    Logs {
        /// The build id (`slipway status` shows the last one).
        build_id: String,
        /// Follow the live log until the build ends; exit 4 unless it succeeds.
        #[arg(short = 'f', long)]
        follow: bool,
    },
    /// Deletes a deployment: queues a destroy of what it deployed (DELETE /deployments/{id}).
    Delete {
        /// The deployment id.
        id: String,
        /// Show the destroy's log and progress until it ends; exit 4 unless it succeeds.
        #[arg(long)]
        follow: bool,
    },
    /// Plans a change: a dry run of the configuration (PUT /deployments/{id}?dry_run=true),
    /// waited for, then per node what a deploy would change and the command that applies it.
    ///
    /// A plan activates nothing. Its build is waited for (a spinner shows its latest log line;
    /// --follow shows the whole log), then each node is shown with its action (add, update,
    /// unchanged, remove), the system before and after, and the packages its closure gains,
    /// loses or changes with the size difference. `slipway apply <id> <plan>` then deploys
    /// exactly those systems, unless the deployment moved meanwhile.
    Plan {
        /// The deployment id.
        id: String,
        /// The configuration as JSON (`-` for standard input), as for `deploy`.
        #[arg(short = 'f', long = "file")]
        file: String,
        /// The module source to plan with (default: the body's, else the built-in one).
        #[arg(long)]
        source: Option<String>,
        /// Show the plan build's whole log while it runs, not only its latest line.
        #[arg(long)]
        follow: bool,
    },
    /// Applies a plan: deploys exactly the systems it planned (POST /deployments/{id}/apply).
    ///
    /// Refused, with nothing queued, when anything the plan was made from moved since
    /// (`plan_stale`: each reason is listed), when it expired (`plan_expired`), or when it
    /// cannot be applied (`plan_not_appliable`).
    Apply {
        /// The deployment id.
        id: String,
        /// The plan: the build id `slipway plan` printed.
        plan: String,
        /// Show the deploy's log and progress until it ends; exit 4 unless it succeeds.
        #[arg(long)]
        follow: bool,
    },
    /// Rolls a deployment back to an earlier successful deploy (POST /deployments/{id}/rollback).
    ///
    /// The new deploy uses that build's configuration, module source revision and secret
    /// versions. Without --to, the target is the last successful deploy before the active one.
    Rollback {
        /// The deployment id.
        id: String,
        /// The build to return to (a successful deploy of the deployment; `slipway history` lists them).
        #[arg(long)]
        to: Option<String>,
        /// Show the rollback's log and progress until it ends; exit 4 unless it succeeds.
        #[arg(long)]
        follow: bool,
    },
    /// Shows a deployment's run history, newest first (GET /deployments/{id}/builds): each
    /// build's id, when it was queued, why (its trigger), its status, who asked and what it changed.
    History {
        /// The deployment id.
        id: String,
        /// Only the builds of this trigger.
        #[arg(long, value_enum)]
        trigger: Option<Trigger>,
        /// How many builds to show, 1 to 100.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u16).range(1..=100))]
        limit: u16,
        /// Start after this build (older builds only): the build id the previous page ended with.
        #[arg(long)]
        before: Option<String>,
    },
    /// Cancels a build: at once while queued, or stopped by its worker while it runs.
    Cancel {
        /// The build id.
        build_id: String,
    },
    /// Lists a deployment's SBOMs per node, or prints one node's CycloneDX document.
    Sbom {
        /// The deployment id.
        id: String,
        /// The node whose CycloneDX JSON to print.
        #[arg(long)]
        node: Option<String>,
    },
    /// Shows the token's claims and expiry, decoded without checking its signature.
    ///
    /// Only the api can tell a genuine token. Tokens come from your front-end, or from
    /// `slipway-api token [--operator]` run where the api's secret is at hand.
    Token,
    /// Operators: each queue's waiting, scheduled and running jobs and the oldest wait
    /// (GET /queues; needs a token with the operator claim).
    Queues,
    /// Operators: the workers seen in the last hour with host, queues, slots in use and
    /// last heartbeat (GET /workers; needs a token with the operator claim).
    Workers,
    /// Operators: signed webhook endpoints and their delivery log (/webhooks; needs a token
    /// with the operator claim).
    Webhook {
        #[command(subcommand)]
        command: webhook::WebhookCommand,
    },
    /// Operators: roll one module source revision out to many deployments in waves
    /// (/rollouts; needs a token with the operator claim).
    Rollout {
        #[command(subcommand)]
        action: rollout::Action,
    },
}

fn main() -> ExitCode {
    // A reader that stops early (`slipway logs -f | head`) ends this
    // process quietly, as it ends `cat`, instead of a panic on the next
    // print: Rust ignores SIGPIPE unless told otherwise.
    // SAFETY: restores the default action of one signal before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    let output = cli.output;
    let screen = Screen::detect(cli.raw);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime starts");
    match runtime.block_on(run(cli, screen)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            report(&failure, output, screen);
            ExitCode::from(failure.exit_code())
        }
    }
}

/// Writes `failure` to standard error: a sentence, or (`--output json`) one
/// JSON object with the api's `error`, `message` and `details`.
fn report(failure: &Failure, output: Output, screen: Screen) {
    if output == Output::Json {
        let body = match failure {
            Failure::Api { status, code, message, details, retry_after } => {
                let mut body = json!({ "error": code, "message": message, "details": details, "status": status });
                if let Some(wait) = retry_after {
                    body["retry_after"] = json!(wait);
                }
                body
            }
            Failure::Interrupted { build_id, again } => {
                json!({ "error": "interrupted", "message": failure.to_string(), "details": { "build_id": build_id, "again": again } })
            }
            Failure::BuildUnsuccessful { build_id, status, reason } => {
                json!({ "error": "build_unsuccessful", "message": failure.to_string(), "details": { "build_id": build_id, "status": status, "reason": reason } })
            }
            Failure::Unreachable { url, .. } => {
                json!({ "error": "unreachable", "message": failure.to_string(), "details": { "url": url } })
            }
            Failure::Usage(_) => json!({ "error": "usage", "message": failure.to_string(), "details": null }),
            Failure::Protocol(_) => json!({ "error": "protocol", "message": failure.to_string(), "details": null }),
        };
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{}", Screen { out: screen.err, err: screen.err }.json(&body));
        return;
    }
    match failure {
        Failure::Api { code, message, details, status, retry_after } => {
            let mut line = format!("slipway: error {code} (HTTP {status}): {message}");
            if let Some(after) = retry_after {
                line.push_str(&format!(" (Retry-After: {after}; try again {})", client::retry_after_words(after)));
            }
            screen.eprintln(&line);
            for problem in
                details.get("problems").or(details.get("errors")).and_then(Value::as_array).into_iter().flatten()
            {
                screen.eprintln(&format!("  - {}", problem_line(problem)));
            }
            // A stale plan: what moved since it was made, one sentence each.
            for moved in details.get("moved").and_then(Value::as_array).into_iter().flatten() {
                screen.eprintln(&format!("  - {}", moved.as_str().map_or(moved.to_string(), str::to_owned)));
            }
        }
        other => screen.eprintln(&format!("slipway: {other}")),
    }
}

/// One problem of a refused configuration, as a line: `path: message`.
fn problem_line(problem: &Value) -> String {
    match (problem.get("path").and_then(Value::as_str), problem.get("message").and_then(Value::as_str)) {
        (Some(path), Some(message)) => format!("{path}: {message}"),
        _ => problem.to_string(),
    }
}

async fn run(cli: Cli, screen: Screen) -> Result<(), Failure> {
    let output = cli.output;
    if let Command::Token = cli.command {
        return token::show(cli.token.as_deref(), output == Output::Json, screen);
    }
    // Ctrl-C while following stops the follow, not the build: listen from
    // before anything is printed, so that no press ends the process unsaid.
    let following = matches!(
        cli.command,
        Command::Logs { follow: true, .. }
            | Command::Deploy { follow: true, .. }
            | Command::Delete { follow: true, .. }
            | Command::Plan { .. }
            | Command::Apply { follow: true, .. }
            | Command::Rollback { follow: true, .. }
    );
    let mut interrupt =
        if following { tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok() } else { None };
    let follow = Follow {
        resume: Resume { give_up_after: cli.give_up_after, stall: follow::STALL },
        again: again_prefix(&cli.url, output),
    };
    let cli_url = cli.url.clone();
    let client = Client::new(&cli.url, cli.token)?;
    match cli.command {
        Command::Deploy { id, file, module_source, dry_run, health_gate, rollback_on_failure, follow: and_follow } => {
            let id = path_id("deployment id", &id)?;
            let mut body = submit_body(&file, module_source)?;
            if let Some(timeout) = health_gate {
                body["health_gate"] = json!({ "timeout": timeout, "rollback": rollback_on_failure });
            }
            let path = format!("/deployments/{id}{}", if dry_run { "?dry_run=true" } else { "" });
            let (_, accepted) = client.json(client.request(Method::PUT, &path)?.json(&body)).await?;
            let build = accepted["build_id"].as_str().unwrap_or_default().to_owned();
            if and_follow {
                if output == Output::Text {
                    screen.println(&format!("deployment {id}: build {build} queued"));
                }
                return follow_build(&client, &build, output, screen, &follow, &mut interrupt).await;
            }
            print(output, screen, &accepted, || {
                let mut text = format!("deployment {id}: build {build} queued");
                for warning in accepted["warnings"].as_array().into_iter().flatten() {
                    text.push_str(&format!(
                        "\nwarning: {}",
                        warning.as_str().map_or(warning.to_string(), str::to_owned)
                    ));
                }
                text
            });
        }
        Command::Status { id } => {
            let view = client.get(&format!("/deployments/{}", path_id("deployment id", &id)?)).await?;
            print(output, screen, &view, || table::deployment(&view));
        }
        Command::Logs { build_id, follow: and_follow } => {
            let build_id = path_id("build id", &build_id)?;
            if and_follow {
                let json = output == Output::Json;
                let streamed = follow::follow_log(&client, build_id, follow.resume, |seen| match (seen, json) {
                    (Seen::Log { id, text }, true) => {
                        screen.println(&screen.json(&json!({ "event": "log", "id": id, "text": text })))
                    }
                    (Seen::Log { text, .. }, false) => screen.print(text),
                    (Seen::End { status }, true) => {
                        screen.println(&screen.json(&json!({ "event": "end", "status": status })))
                    }
                    (Seen::End { .. }, false) => {}
                });
                let build = until_interrupted(streamed, &mut interrupt, || follow.interrupted(build_id)).await?;
                return follow::outcome(&build);
            }
            let build = client.get(&format!("/builds/{build_id}")).await?;
            match output {
                Output::Json => screen.println(
                    &screen.json(&json!({ "build_id": build["id"], "status": build["status"], "log": build["log"] })),
                ),
                Output::Text => {
                    let log = build["log"].as_str().unwrap_or_default();
                    screen.print(log);
                    if !log.is_empty() && !log.ends_with('\n') {
                        screen.println("");
                    }
                }
            }
        }
        Command::Delete { id, follow: and_follow } => {
            let id = path_id("deployment id", &id)?;
            let (_, accepted) = client.json(client.request(Method::DELETE, &format!("/deployments/{id}"))?).await?;
            let build = accepted["build_id"].as_str().unwrap_or_default().to_owned();
            // A repeated delete answers the destroy already queued, running
            // or done; `idle` means it is done and nothing was queued now.
            let said = match accepted["state"].as_str() {
                Some("idle") => format!("deployment {id}: already deleted (destroy build {build} succeeded)"),
                _ => format!("deployment {id}: destroy build {build} queued"),
            };
            if and_follow {
                if output == Output::Text {
                    screen.println(&said);
                }
                return follow_build(&client, &build, output, screen, &follow, &mut interrupt).await;
            }
            print(output, screen, &accepted, || said.clone());
        }
        Command::Plan { id, file, source, follow: show_log } => {
            let id = path_id("deployment id", &id)?;
            let body = submit_body(&file, source)?;
            let path = format!("/deployments/{id}?dry_run=true");
            let (_, accepted) = client.json(client.request(Method::PUT, &path)?.json(&body)).await?;
            let build = accepted["build_id"].as_str().unwrap_or_default().to_owned();
            if output == Output::Text {
                screen.println(&format!("deployment {id}: plan {build} queued"));
                for warning in accepted["warnings"].as_array().into_iter().flatten() {
                    screen
                        .println(&format!("warning: {}", warning.as_str().map_or(warning.to_string(), str::to_owned)));
                }
            }
            let view = watch_build(&client, &build, output, screen, &follow, &mut interrupt, show_log).await?;
            match (output, follow::outcome(&view)) {
                (Output::Json, outcome) => {
                    let line = if show_log { json!({ "event": "build", "build": view }) } else { view };
                    screen.println(&screen.json(&line));
                    outcome?;
                }
                (Output::Text, Err(failed)) => {
                    screen.println(&table::build_summary(&view));
                    return Err(failed);
                }
                (Output::Text, Ok(())) => {
                    let apply = format!("{} apply {id} {build}", again_prefix(&cli_url, Output::Text));
                    screen.println(&table::plan(&view, &apply));
                }
            }
        }
        Command::Apply { id, plan, follow: and_follow } => {
            let id = path_id("deployment id", &id)?;
            let request = client.request(Method::POST, &format!("/deployments/{id}/apply"))?;
            let (_, accepted) = client.json(request.json(&json!({ "plan": plan }))).await?;
            let build = accepted["build_id"].as_str().unwrap_or_default().to_owned();
            let said = format!("deployment {id}: apply of plan {plan} queued as build {build}");
            if and_follow {
                if output == Output::Text {
                    screen.println(&said);
                }
                return follow_build(&client, &build, output, screen, &follow, &mut interrupt).await;
            }
            print(output, screen, &accepted, || said.clone());
        }
        Command::Rollback { id, to, follow: and_follow } => {
            let id = path_id("deployment id", &id)?;
            let mut request = client.request(Method::POST, &format!("/deployments/{id}/rollback"))?;
            if let Some(to) = &to {
                request = request.json(&json!({ "to": to }));
            }
            let (_, accepted) = client.json(request).await?;
            let build = accepted["build_id"].as_str().unwrap_or_default().to_owned();
            // Without --to the api picked the target: the new build names it.
            let target = match to {
                Some(to) => Some(to),
                None if output == Output::Text => client
                    .get(&format!("/builds/{}", path_id("build id", &build)?))
                    .await
                    .ok()
                    .and_then(|b| b["based_on"].as_str().map(str::to_owned)),
                None => None,
            };
            let said = match target {
                Some(target) => format!("deployment {id}: rollback to build {target} queued as build {build}"),
                None => format!("deployment {id}: rollback queued as build {build}"),
            };
            if and_follow {
                if output == Output::Text {
                    screen.println(&said);
                }
                return follow_build(&client, &build, output, screen, &follow, &mut interrupt).await;
            }
            print(output, screen, &accepted, || said.clone());
        }
        Command::History { id, trigger, limit, before } => {
            let id = path_id("deployment id", &id)?;
            let mut query = format!("limit={limit}");
            if let Some(trigger) = trigger {
                query.push_str(&format!("&trigger={}", trigger.as_str()));
            }
            if let Some(before) = &before {
                query.push_str(&format!("&before={}", query_value(before)));
            }
            let page = client.get(&format!("/deployments/{id}/builds?{query}")).await?;
            print(output, screen, &page, || {
                let mut text = table::history(&page);
                if let Some(next) = page["next"].as_str() {
                    let mut more = format!("{} history {id} --limit {limit}", again_prefix(&cli_url, Output::Text));
                    if let Some(trigger) = trigger {
                        more.push_str(&format!(" --trigger {}", trigger.as_str()));
                    }
                    text.push_str(&format!("\nolder builds: {more} --before {next}"));
                }
                text
            });
        }
        Command::Cancel { build_id } => {
            let path = format!("/builds/{}/cancel", path_id("build id", &build_id)?);
            let (_, answer) = client.json(client.request(Method::POST, &path)?).await?;
            print(output, screen, &answer, || match answer["status"].as_str() {
                Some("cancelled") => format!("build {build_id} cancelled"),
                _ => format!("build {build_id} cancelling: its worker stops the effect"),
            });
        }
        Command::Sbom { id, node } => {
            let id = path_id("deployment id", &id)?;
            match node {
                // The document as the api sent it, in both output modes
                // (escaped on a terminal, like everything the api sends).
                Some(node) => {
                    let bytes = client.get_bytes(&format!("/sbom/{id}?node={}", query_value(&node))).await?;
                    if screen.out {
                        screen.println(&screen::lossless_text(&bytes));
                    } else {
                        let mut out = std::io::stdout().lock();
                        let _ = out.write_all(&bytes).and_then(|()| out.write_all(b"\n")).and_then(|()| out.flush());
                    }
                }
                None => {
                    let list = client.get(&format!("/sbom-list/{id}")).await?;
                    print(output, screen, &list, || table::sboms(&list));
                }
            }
        }
        Command::Queues => {
            let queues = client.get("/queues").await?;
            print(output, screen, &queues, || table::queues(&queues));
        }
        Command::Workers => {
            let workers = client.get("/workers").await?;
            print(output, screen, &workers, || table::workers(&workers));
        }
        Command::Webhook { command } => {
            let (answer, text) = webhook::run(&client, command).await?;
            print(output, screen, &answer, || text);
        }
        Command::Rollout { action } => rollout::run(&client, action, output == Output::Json, screen).await?,
        Command::Token => unreachable!("handled above"),
    }
    Ok(())
}

/// Prints `value` as JSON, or the text `human` makes, through `screen`.
fn print(output: Output, screen: Screen, value: &Value, human: impl FnOnce() -> String) {
    match output {
        Output::Json => screen.println(&screen.json(value)),
        Output::Text => screen.println(&human()),
    }
}

/// How this run follows a build: how it resumes, and how to follow again.
struct Follow {
    resume: Resume,
    /// `slipway` with the options that must be repeated to follow again
    /// (`--url` unless it came from `SLIPWAY_URL` or is the default, `--output json`).
    again: String,
}

impl Follow {
    /// [`Failure::Interrupted`] for build `build`, with the command that follows it again.
    fn interrupted(&self, build: &str) -> Failure {
        Failure::Interrupted { build_id: build.to_owned(), again: format!("{} logs -f {build}", self.again) }
    }
}

/// The start of a command that repeats this run's connection and output
/// options: `slipway [--url URL] [--output json]`. The token is never
/// repeated (it comes from `SLIPWAY_TOKEN` or `--token` as before).
fn again_prefix(url: &str, output: Output) -> String {
    let mut again = String::from("slipway");
    let from_env = std::env::var("SLIPWAY_URL").is_ok_and(|v| v == url);
    if !from_env && url != DEFAULT_URL {
        again.push_str(&format!(" --url {url}"));
    }
    if output == Output::Json {
        again.push_str(" --output json");
    }
    again
}

/// Runs `work` unless `interrupt` (SIGINT) comes first, then `stopped()`.
async fn until_interrupted<T>(
    work: impl std::future::Future<Output = Result<T, Failure>>,
    interrupt: &mut Option<tokio::signal::unix::Signal>,
    stopped: impl FnOnce() -> Failure,
) -> Result<T, Failure> {
    match interrupt {
        Some(signal) => tokio::select! {
            result = work => result,
            _ = signal.recv() => Err(stopped()),
        },
        None => work.await,
    }
}

/// The body of a submit from file `file` (`-`: standard input).
fn submit_body(file: &str, module_source: Option<String>) -> Result<Value, Failure> {
    let text = if file == "-" {
        std::io::read_to_string(std::io::stdin()).map_err(|e| Failure::Usage(format!("reading standard input: {e}")))?
    } else {
        std::fs::read_to_string(file).map_err(|e| Failure::Usage(format!("reading {file}: {e}")))?
    };
    let value: Value = serde_json::from_str(&text).map_err(|e| Failure::Usage(format!("{file} is not JSON: {e}")))?;
    let mut body = match value {
        Value::Object(ref map) if map.contains_key("configuration") => value,
        Value::Object(_) => json!({ "configuration": value }),
        _ => return Err(Failure::Usage(format!("{file}: expected a JSON object (the configuration)"))),
    };
    if let Some(source) = module_source {
        body["module_source"] = json!(source);
    }
    Ok(body)
}

/// Follows build `build` to its end: a spinner with its latest log line and
/// the log above it (text, on standard error), or NDJSON of the log then the
/// final build view (json). `Ok` only when the build succeeded; Ctrl-C
/// clears the spinner and ends with [`Failure::Interrupted`].
async fn follow_build(
    client: &Client,
    build: &str,
    output: Output,
    screen: Screen,
    follow: &Follow,
    interrupt: &mut Option<tokio::signal::unix::Signal>,
) -> Result<(), Failure> {
    let view = watch_build(client, build, output, screen, follow, interrupt, true).await?;
    match output {
        Output::Json => screen.println(&screen.json(&json!({ "event": "build", "build": view }))),
        Output::Text => screen.println(&table::build_summary(&view)),
    }
    follow::outcome(&view)
}

/// Waits for build `build` to end, reading its log stream, and gives its
/// final view (`GET /builds/{id}`), whatever its status. Text shows a
/// spinner with the latest log line on standard error, and with `show_log`
/// the whole log above it; json prints the log as NDJSON `log` events with
/// `show_log`, and nothing without. Ctrl-C clears the spinner and ends
/// with [`Failure::Interrupted`].
async fn watch_build(
    client: &Client,
    build: &str,
    output: Output,
    screen: Screen,
    follow: &Follow,
    interrupt: &mut Option<tokio::signal::unix::Signal>,
    show_log: bool,
) -> Result<Value, Failure> {
    let json = output == Output::Json;
    let spinner = if json { ProgressBar::hidden() } else { ProgressBar::new_spinner() };
    spinner.set_style(ProgressStyle::with_template("{spinner} {elapsed} {msg}").expect("a valid template"));
    spinner.enable_steady_tick(Duration::from_millis(120));
    spinner.set_message(format!("build {build}: waiting for its log"));
    let streamed = follow::follow_log(client, build, follow.resume, |seen| match seen {
        Seen::Log { id, text } => {
            if json {
                if show_log {
                    screen.println(&screen.json(&json!({ "event": "log", "id": id, "text": text })));
                }
                return;
            }
            if show_log {
                spinner.suspend(|| {
                    let mut err = std::io::stderr().lock();
                    let _ = write!(err, "{}", screen.err(text));
                    if !text.ends_with('\n') {
                        let _ = writeln!(err);
                    }
                });
            }
            // The spinner's line is this program's own: always escaped.
            if let Some(line) = text.lines().rev().find(|l| !l.trim().is_empty()) {
                let line: String = screen::escape(line).chars().take(100).collect();
                spinner.set_message(format!("build {build}: {line}"));
            }
        }
        Seen::End { status } => spinner.set_message(format!("build {build}: {}", screen::escape(status))),
    });
    let result = until_interrupted(streamed, interrupt, || follow.interrupted(build)).await;
    spinner.finish_and_clear();
    result
}
