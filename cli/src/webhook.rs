//! `slipway webhook …`: the operators' webhook endpoints (WH-1) over the
//! HTTP API (`/webhooks`), with a token carrying the operator claim. A
//! secret is read from a file (or standard input), never from the command
//! line, where other users of the host could read it.

use crate::client::{path_id, query_value, Client, Failure};
use crate::table::render;
use clap::Subcommand;
use reqwest::Method;
use serde_json::{json, Map, Value};

/// The webhook commands.
#[derive(Subcommand)]
pub enum WebhookCommand {
    /// Registers an endpoint (POST /webhooks) and prints it with its secret, shown this once.
    Add {
        /// Where deliveries go: an http(s) URL whose origin is in SLIPWAY_ALLOWED_ORIGINS.
        #[arg(value_name = "URL")]
        endpoint_url: String,
        /// Event types, comma separated (`deployment.active,deployment.failed`), or `*` for all.
        #[arg(long, default_value = "*")]
        events: String,
        /// A file holding a `whsec_` secret to use (`-` for standard input); generated when not given.
        #[arg(long, value_name = "FILE")]
        secret_file: Option<String>,
        /// A note for operators.
        #[arg(long)]
        description: Option<String>,
    },
    /// Lists the endpoints (GET /webhooks).
    List,
    /// Shows an endpoint (GET /webhooks/{id}), with why it is disabled when it is.
    Show {
        /// The webhook id (`wh_…`).
        id: String,
    },
    /// Changes an endpoint (PATCH /webhooks/{id}); prints a new secret once after a rotation.
    Update {
        /// The webhook id (`wh_…`).
        id: String,
        /// A new URL for deliveries (`--url` is the api's own).
        #[arg(long, value_name = "URL")]
        endpoint_url: Option<String>,
        /// New event types, comma separated, or `*`.
        #[arg(long)]
        events: Option<String>,
        /// Enable it again (its pending deliveries resume, in order).
        #[arg(long, conflicts_with = "disable")]
        enable: bool,
        /// Disable it (nothing is sent until it is enabled).
        #[arg(long)]
        disable: bool,
        /// A new description (`""` clears it).
        #[arg(long)]
        description: Option<String>,
        /// Generate a new secret, printed once.
        #[arg(long, conflicts_with = "secret_file")]
        rotate_secret: bool,
        /// A file holding a new `whsec_` secret (`-` for standard input).
        #[arg(long, value_name = "FILE")]
        secret_file: Option<String>,
    },
    /// Deletes an endpoint and its delivery log (DELETE /webhooks/{id}).
    Delete {
        /// The webhook id (`wh_…`).
        id: String,
    },
    /// Shows the delivery log, newest first (GET /webhooks/{id}/deliveries).
    Deliveries {
        /// The webhook id (`wh_…`).
        id: String,
        /// How many deliveries to show, 1 to 100.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u16).range(1..=100))]
        limit: u16,
        /// Start after this delivery (older ones only): the id the previous page ended with.
        #[arg(long)]
        before: Option<String>,
    },
    /// Queues a delivery again, with the same webhook-id and body
    /// (POST /webhooks/{id}/deliveries/{delivery_id}/redeliver).
    Redeliver {
        /// The webhook id (`wh_…`).
        id: String,
        /// The delivery id (`msg_…`).
        delivery_id: String,
    },
}

/// Runs `command`: the api's answer (for `--output json`) and its text for people.
pub async fn run(client: &Client, command: WebhookCommand) -> Result<(Value, String), Failure> {
    match command {
        WebhookCommand::Add { endpoint_url, events, secret_file, description } => {
            let mut body = json!({ "url": endpoint_url, "events": event_list(&events) });
            if let Some(file) = secret_file {
                body["secret"] = json!(read_secret(&file)?);
            }
            if let Some(description) = description {
                body["description"] = json!(description);
            }
            let (_, answer) = client.json(client.request(Method::POST, "/webhooks")?.json(&body)).await?;
            let text = format!(
                "{}\nsecret: {}\n(shown this once: give it to the receiver, which verifies each delivery with it)",
                endpoint(&answer),
                answer["secret"].as_str().unwrap_or_default()
            );
            Ok((answer, text))
        }
        WebhookCommand::List => {
            let list = client.get("/webhooks").await?;
            let rows: Vec<Vec<String>> = list["webhooks"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|w| {
                    vec![
                        text(&w["id"]),
                        if w["enabled"] == true { "yes".into() } else { "no".into() },
                        text(&w["events"]),
                        text(&w["url"]),
                    ]
                })
                .collect();
            let text = if rows.is_empty() {
                "no webhook endpoint".to_owned()
            } else {
                render(&["ID", "ENABLED", "EVENTS", "URL"], &rows)
            };
            Ok((list, text))
        }
        WebhookCommand::Show { id } => {
            let answer = client.get(&format!("/webhooks/{}", path_id("webhook id", &id)?)).await?;
            let text = endpoint(&answer);
            Ok((answer, text))
        }
        WebhookCommand::Update {
            id,
            endpoint_url,
            events,
            enable,
            disable,
            description,
            rotate_secret,
            secret_file,
        } => {
            let mut body = Map::new();
            if let Some(url) = endpoint_url {
                body.insert("url".into(), json!(url));
            }
            if let Some(events) = events {
                body.insert("events".into(), json!(event_list(&events)));
            }
            if enable || disable {
                body.insert("enabled".into(), json!(enable));
            }
            if let Some(description) = description {
                body.insert("description".into(), json!(description));
            }
            if rotate_secret {
                body.insert("rotate_secret".into(), json!(true));
            }
            if let Some(file) = secret_file {
                body.insert("secret".into(), json!(read_secret(&file)?));
            }
            if body.is_empty() {
                return Err(Failure::Usage("nothing to change: give --endpoint-url, --events, --enable, --disable, --description, --rotate-secret or --secret-file".into()));
            }
            let path = format!("/webhooks/{}", path_id("webhook id", &id)?);
            let (_, answer) = client.json(client.request(Method::PATCH, &path)?.json(&Value::Object(body))).await?;
            let mut text = endpoint(&answer);
            if let Some(secret) = answer["secret"].as_str() {
                text.push_str(&format!("\nsecret: {secret}\n(shown this once: give it to the receiver)"));
            }
            Ok((answer, text))
        }
        WebhookCommand::Delete { id } => {
            let path = format!("/webhooks/{}", path_id("webhook id", &id)?);
            client.json(client.request(Method::DELETE, &path)?).await?;
            Ok((json!({ "deleted": id }), format!("webhook {id} deleted")))
        }
        WebhookCommand::Deliveries { id, limit, before } => {
            let id = path_id("webhook id", &id)?;
            let mut query = format!("limit={limit}");
            if let Some(before) = &before {
                query.push_str(&format!("&before={}", query_value(before)));
            }
            let page = client.get(&format!("/webhooks/{id}/deliveries?{query}")).await?;
            let rows: Vec<Vec<String>> = page["deliveries"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|d| {
                    let last = match (d["last_status_code"].as_i64(), d["last_error"].as_str()) {
                        (Some(code), Some(error)) => format!("{error} ({code})"),
                        (Some(code), None) => code.to_string(),
                        (None, Some(error)) => error.to_owned(),
                        (None, None) => "-".to_owned(),
                    };
                    vec![
                        text(&d["id"]),
                        text(&d["event_type"]),
                        format!("{} #{}", text(&d["subject"]), text(&d["n"])),
                        text(&d["status"]),
                        text(&d["attempts"]),
                        last,
                        text(&d["next_try_at"]),
                        text(&d["created_at"]),
                    ]
                })
                .collect();
            let mut text = if rows.is_empty() {
                "no delivery yet".to_owned()
            } else {
                render(&["ID", "EVENT", "SUBJECT", "STATUS", "ATTEMPTS", "LAST ERROR", "NEXT TRY", "CREATED"], &rows)
            };
            if let Some(next) = page["next_before"].as_str() {
                text.push_str(&format!(
                    "\nolder deliveries: slipway webhook deliveries {id} --limit {limit} --before {next}"
                ));
            }
            Ok((page, text))
        }
        WebhookCommand::Redeliver { id, delivery_id } => {
            let path = format!(
                "/webhooks/{}/deliveries/{}/redeliver",
                path_id("webhook id", &id)?,
                path_id("delivery id", &delivery_id)?
            );
            let (_, answer) = client.json(client.request(Method::POST, &path)?).await?;
            Ok((answer, format!("delivery {delivery_id} of webhook {id} queued again")))
        }
    }
}

/// `a,b` or `*` as the api's list.
fn event_list(events: &str) -> Vec<String> {
    events.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_owned).collect()
}

/// The secret in `file` (`-`: standard input), trimmed; never shown in an error.
fn read_secret(file: &str) -> Result<String, Failure> {
    let text = if file == "-" {
        std::io::read_to_string(std::io::stdin()).map_err(|e| Failure::Usage(format!("reading standard input: {e}")))?
    } else {
        std::fs::read_to_string(file).map_err(|e| Failure::Usage(format!("reading {file}: {e}")))?
    };
    Ok(text.trim().to_owned())
}

/// A JSON value as text: strings bare, lists comma separated, `null` as `-`.
fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(text).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// An endpoint, one field a line (never its secret).
fn endpoint(w: &Value) -> String {
    let mut lines = vec![
        format!("webhook {}", text(&w["id"])),
        format!("url: {}", text(&w["url"])),
        format!("events: {}", text(&w["events"])),
        format!("enabled: {}", if w["enabled"] == true { "yes" } else { "no" }),
    ];
    if !w["description"].is_null() {
        lines.push(format!("description: {}", text(&w["description"])));
    }
    if w["enabled"] == false {
        lines.push(format!("disabled at: {}", text(&w["disabled_at"])));
        lines.push(format!("disabled because: {}", text(&w["disabled_reason"])));
    }
    if !w["failing_since"].is_null() {
        lines.push(format!("failing since: {}", text(&w["failing_since"])));
    }
    lines.push(format!("created: {}", text(&w["created_at"])));
    lines.join("\n")
}
