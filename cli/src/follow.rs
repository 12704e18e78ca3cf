//! Following a build: its log is server-sent events at `GET
//! /builds/{id}/log` (`log` events `{"text"}`, then one `end` event
//! `{"build_id", "status"}`), read with `eventsource-stream` over reqwest's
//! byte stream. A stream cut before its `end` is resumed with
//! `Last-Event-ID`, so no chunk is shown twice; a resumed stream of a build
//! that has ended answers `204`.

use crate::client::{api_error, Client, Failure};
use eventsource_stream::Eventsource as _;
use futures::StreamExt as _;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::time::Duration;

/// How many times in a row a cut stream is resumed before giving up.
const RESUMES: u32 = 5;

/// What a followed log stream delivers.
pub enum Seen<'a> {
    /// A piece of the log (`id` is the event's id).
    Log { id: &'a str, text: &'a str },
    /// The build ended with `status`.
    End { status: &'a str },
}

/// Streams build `build_id`'s log from its start, calling `on` for each
/// chunk and at the end; returns the build's final view (`GET /builds/{id}`).
pub async fn follow_log(client: &Client, build_id: &str, mut on: impl FnMut(Seen<'_>)) -> Result<Value, Failure> {
    let mut last_id: Option<String> = None;
    let mut resumes = 0;
    loop {
        let mut request = client.request(Method::GET, &format!("/builds/{build_id}/log"))?;
        if let Some(id) = &last_id {
            request = request.header("Last-Event-ID", id);
        }
        let answer = match client.send(request.header("Accept", "text/event-stream")).await {
            Ok(answer) => answer,
            // An api restarting after a cut (a rolling restart) refuses
            // connections for a moment: try again within the resumes.
            Err(Failure::Unreachable { .. }) if resumes > 0 && resumes < RESUMES => {
                resumes += 1;
                tokio::time::sleep(Duration::from_millis(500 * u64::from(resumes))).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let status = answer.status();
        if status == StatusCode::NO_CONTENT {
            // The stream had ended: the build is over.
            break;
        }
        if !status.is_success() {
            let bytes = answer.bytes().await.map_err(|e| client.unreachable(&e))?;
            return Err(api_error(status, &bytes));
        }
        let mut events = answer.bytes_stream().eventsource();
        let mut ended = false;
        let mut cut = None;
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(e) => e,
                Err(e) => {
                    cut = Some(e.to_string());
                    break;
                }
            };
            if !event.id.is_empty() {
                last_id = Some(event.id.clone());
            }
            let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
            match event.event.as_str() {
                "log" => {
                    resumes = 0;
                    on(Seen::Log { id: &event.id, text: data["text"].as_str().unwrap_or_default() })
                }
                "end" => {
                    on(Seen::End { status: data["status"].as_str().unwrap_or("unknown") });
                    ended = true;
                    break;
                }
                _ => {}
            }
        }
        if ended {
            break;
        }
        resumes += 1;
        if resumes > RESUMES {
            let why = cut.unwrap_or_else(|| "the api closed it".into());
            return Err(Failure::Unreachable {
                url: client.base().to_owned(),
                cause: format!("the log stream of build {build_id} kept breaking ({why})"),
            });
        }
        tokio::time::sleep(Duration::from_millis(500 * u64::from(resumes))).await;
    }
    client.get(&format!("/builds/{build_id}")).await
}

/// `Ok` when `build` (a `GET /builds/{id}` view) succeeded, else
/// [`Failure::BuildUnsuccessful`] with its status and error.
pub fn outcome(build: &Value) -> Result<(), Failure> {
    match build["status"].as_str() {
        Some("succeeded") => Ok(()),
        status => Err(Failure::BuildUnsuccessful {
            build_id: build["id"].as_str().unwrap_or_default().to_owned(),
            status: status.unwrap_or("unknown").to_owned(),
            reason: build["error"].as_str().or(build["reason"].as_str()).map(str::to_owned),
        }),
    }
}
