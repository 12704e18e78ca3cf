//! Following a build: its log is server-sent events at `GET
//! /builds/{id}/log` (`log` events `{"text"}`, then one `end` event
//! `{"build_id", "status"}`), read with `eventsource-stream` over reqwest's
//! byte stream. A stream cut before its `end` (an api restarting, a
//! network outage, a proxy) is resumed with `Last-Event-ID`, so no chunk is
//! shown twice and none is lost; a resumed stream of a build that has ended
//! answers `204`.
//!
//! Resuming waits with exponential backoff and jitter (from
//! [`FIRST_DELAY`] doubling to [`MOST_DELAY`], each wait drawn between half
//! and all of it) and goes on until the build ends, or until the api has
//! been away for the [`Resume::give_up_after`] the person chose
//! (`--give-up-after`, 10 minutes by default). A stream that delivers nothing, not even the api's
//! keep-alive comment, for [`STALL`] counts as cut. A stream the api ends
//! with `token_expired` is not resumed (the same token would be refused):
//! the follow fails naming it, and the build goes on.

use crate::client::{api_error, Client, Failure};
use eventsource_stream::Eventsource as _;
use futures::StreamExt as _;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::time::{Duration, Instant};

/// The first wait before resuming a cut stream.
pub const FIRST_DELAY: Duration = Duration::from_millis(250);

/// The longest wait between two tries to resume.
pub const MOST_DELAY: Duration = Duration::from_secs(8);

/// How long a stream, or a try to open one, may deliver no byte before it
/// counts as cut: three of the api's 15 s keep-alive intervals.
pub const STALL: Duration = Duration::from_secs(45);

/// How a cut stream is resumed.
#[derive(Clone, Copy, Debug)]
pub struct Resume {
    /// How long the api may be away (unreachable, answering 502, 503 or
    /// 504, or cutting every stream before it delivers anything) before
    /// the follow gives up with exit code 3.
    pub give_up_after: Duration,
    /// See [`STALL`].
    pub stall: Duration,
}

/// What a followed log stream delivers.
pub enum Seen<'a> {
    /// A piece of the log (`id` is the event's id).
    Log { id: &'a str, text: &'a str },
    /// The build ended with `status`.
    End { status: &'a str },
}

/// Since when the api has been away, and what was seen last.
struct Outage {
    since: Instant,
    delay: Duration,
    why: String,
}

/// Why a stream ended before its `end` event.
#[derive(Debug, thiserror::Error)]
enum Cut {
    #[error("{0}")]
    Read(String),
    #[error("no byte for {0:?}, not even a keep-alive")]
    Stalled(Duration),
}

/// Streams build `build_id`'s log from its start, calling `on` for each
/// chunk and at the end; returns the build's final view (`GET /builds/{id}`).
/// The first request's failure is returned at once (a wrong `--url` or
/// token); after that, a cut stream is resumed as the module doc says.
pub async fn follow_log(
    client: &Client,
    build_id: &str,
    resume: Resume,
    mut on: impl FnMut(Seen<'_>),
) -> Result<Value, Failure> {
    let mut last_id: Option<String> = None;
    let mut outage: Option<Outage> = None;
    loop {
        if let Some(away) = &mut outage {
            let gone = away.since.elapsed();
            if gone >= resume.give_up_after {
                return Err(Failure::Unreachable {
                    url: client.base().to_owned(),
                    cause: format!(
                        "the log stream of build {build_id} broke and could not be resumed for {}s \
                         (--give-up-after): {}",
                        gone.as_secs(),
                        away.why
                    ),
                });
            }
            tokio::time::sleep(jittered(away.delay).min(resume.give_up_after - gone)).await;
            away.delay = (away.delay * 2).min(MOST_DELAY);
        }
        let mut request = client.request(Method::GET, &format!("/builds/{build_id}/log"))?;
        if let Some(id) = &last_id {
            request = request.header("Last-Event-ID", id);
        }
        let sent = tokio::time::timeout(resume.stall, client.send(request.header("Accept", "text/event-stream"))).await;
        let answer = match (sent, &mut outage) {
            (Ok(Ok(answer)), _) => answer,
            // The api is still away: try again after the next wait.
            (Ok(Err(Failure::Unreachable { cause, .. })), Some(away)) => {
                away.why = cause;
                continue;
            }
            (Err(_), Some(away)) => {
                away.why = format!("no answer within {:?}", resume.stall);
                continue;
            }
            (Ok(Err(e)), _) => return Err(e),
            (Err(_), None) => {
                return Err(Failure::Unreachable {
                    url: client.base().to_owned(),
                    cause: format!("no answer within {:?}", resume.stall),
                })
            }
        };
        let status = answer.status();
        if status == StatusCode::NO_CONTENT {
            // The stream had ended: the build is over.
            break;
        }
        if !status.is_success() {
            let headers = answer.headers().clone();
            let bytes = answer.bytes().await.unwrap_or_default();
            let failure = api_error(status, &headers, &bytes);
            // A gateway, an api starting up, or one holding too many
            // streams for the moment: still away.
            if let (Some(away), 429 | 502..=504) = (&mut outage, status.as_u16()) {
                away.why = failure.to_string();
                if let Some(Ok(wait)) = retry_after_secs(&failure) {
                    away.delay = away.delay.max(Duration::from_secs(wait).min(MOST_DELAY));
                }
                continue;
            }
            return Err(failure);
        }
        let opened = Instant::now();
        let stall = resume.stall;
        let timed = futures::stream::unfold(Box::pin(answer.bytes_stream()), move |mut inner| async move {
            match tokio::time::timeout(stall, inner.next()).await {
                Ok(Some(Ok(chunk))) => Some((Ok(chunk), inner)),
                Ok(Some(Err(e))) => Some((Err(Cut::Read(crate::client::chain(&e))), inner)),
                Ok(None) => None,
                Err(_) => Some((Err(Cut::Stalled(stall)), inner)),
            }
        });
        let mut events = Box::pin(timed.eventsource());
        let mut ended = false;
        let mut delivered = false;
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
                    delivered = true;
                    on(Seen::Log { id: &event.id, text: data["text"].as_str().unwrap_or_default() })
                }
                "end" => {
                    on(Seen::End { status: data["status"].as_str().unwrap_or("unknown") });
                    ended = true;
                    break;
                }
                // The token expired: resuming with it would be refused.
                "token_expired" => {
                    let said = data["message"].as_str().unwrap_or("the token expired");
                    return Err(Failure::Api {
                        status: 401,
                        code: "token_expired".into(),
                        message: format!(
                            "{said} (build {build_id} goes on; follow it again with a fresh SLIPWAY_TOKEN)"
                        ),
                        details: data.clone(),
                        retry_after: None,
                    });
                }
                _ => {}
            }
        }
        if ended {
            break;
        }
        let why = cut.unwrap_or_else(|| "the api closed it".into());
        // A stream that worked for a while starts a new outage; one cut
        // before it showed anything continues the one under way.
        match &mut outage {
            Some(away) if !delivered && opened.elapsed() < MOST_DELAY => away.why = why,
            _ => outage = Some(Outage { since: Instant::now(), delay: FIRST_DELAY, why }),
        }
    }
    client.get(&format!("/builds/{build_id}")).await
}

/// `Retry-After` of an api refusal, in seconds, when it is a number.
fn retry_after_secs(failure: &Failure) -> Option<Result<u64, std::num::ParseIntError>> {
    match failure {
        Failure::Api { retry_after: Some(v), .. } => Some(v.parse()),
        _ => None,
    }
}

/// A wait between half of `delay` and all of it, drawn afresh each time
/// (so that many followers cut at once do not come back at once).
fn jittered(delay: Duration) -> Duration {
    use std::hash::{BuildHasher as _, Hasher as _};
    // Each `RandomState` is seeded anew: a random number without a crate.
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    delay / 2 + delay.mul_f64((random as f64 / u64::MAX as f64) / 2.0)
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

/// A duration as `--give-up-after` takes it: a number with `s`, `m` or
/// `h` (seconds without a unit), such as `90s`, `10m`, `1h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let n: u64 = number.parse().map_err(|_| format!("{text:?}: expected a number and s, m or h, such as 10m"))?;
    let seconds = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        _ => return Err(format!("{text:?}: the unit is s, m or h, such as 10m")),
    };
    Ok(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_between_half_of_its_delay_and_all_of_it_and_varies() {
        let waits: Vec<Duration> = (0..50).map(|_| jittered(Duration::from_secs(8))).collect();
        assert!(waits.iter().all(|w| *w >= Duration::from_secs(4) && *w <= Duration::from_secs(8)), "{waits:?}");
        assert!(waits.iter().any(|w| *w != waits[0]), "{waits:?}");
    }

    #[test]
    fn give_up_after_reads_seconds_minutes_and_hours() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("45s"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("soon").is_err() && parse_duration("5d").is_err() && parse_duration("").is_err());
    }
}
