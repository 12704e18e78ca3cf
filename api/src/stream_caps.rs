//! Caps on the event streams one api holds open (DL-3 streams, SEC-3
//! bounds): each open stream holds a task, a socket and a database read now
//! and then, so a caller may not open them without end. A token subject
//! holds at most `SLIPWAY_STREAMS_PER_SUBJECT` at once and the api at most
//! `SLIPWAY_STREAMS_PER_API`; past either a stream is refused `429
//! too_many_streams` with `Retry-After` and `details.limit` (`subject` or
//! `api`). A stream opened with a ticket counts for the subject of the
//! token that minted it.
//!
//! Counting is in memory, per api process: a front-end spread over several
//! apis gets each api's caps. The counts are exported at each scrape
//! ([`StreamCaps::record`]: `slipway_streams_open{kind}`,
//! `slipway_streams_busiest_subject`) and each refusal as it happens
//! (`slipway_streams_refused_total{limit}`).

use crate::error::ApiError;
use serde_json::json;
use slipway_jobs::metrics::Metrics;
use slipway_jobs::store::tickets::StreamKind;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// `Retry-After` of a `429 too_many_streams`, in seconds: a stream of the
/// same caller, or of anyone, has to end first, which this api cannot
/// foresee.
pub const STREAMS_RETRY_AFTER: u32 = 10;

/// The open event streams of one api and the caps they are held to.
#[derive(Debug, Clone)]
pub struct StreamCaps {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    per_subject: u32,
    per_api: u32,
    open: Mutex<Open>,
    metrics: Metrics,
}

/// What is open now: streams by kind (in [`kind_index`] order) and by subject.
#[derive(Debug, Default)]
struct Open {
    by_kind: [u32; 2],
    by_subject: HashMap<String, u32>,
}

impl Open {
    fn total(&self) -> u32 {
        self.by_kind.iter().sum()
    }
}

/// The place of `kind` in [`Open::by_kind`].
fn kind_index(kind: StreamKind) -> usize {
    match kind {
        StreamKind::DeploymentEvents => 0,
        StreamKind::BuildLog => 1,
    }
}

/// One open stream's place under the caps: it is given back when this is
/// dropped (the stream's task ends, or its request is refused after all).
#[derive(Debug)]
pub struct StreamSlot {
    inner: Arc<Inner>,
    subject: String,
    kind: usize,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.inner.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.by_kind[self.kind] = open.by_kind[self.kind].saturating_sub(1);
        if let Some(n) = open.by_subject.get_mut(&self.subject) {
            *n -= 1;
            if *n == 0 {
                open.by_subject.remove(&self.subject);
            }
        }
    }
}

impl StreamCaps {
    /// Caps of `per_subject` streams per token subject and `per_api` in
    /// all (both at least 1), refusals counted in `metrics`.
    pub fn new(per_subject: u32, per_api: u32, metrics: Metrics) -> Self {
        metrics.register_streams();
        Self { inner: Arc::new(Inner { per_subject, per_api, open: Mutex::default(), metrics }) }
    }

    /// A place for one more stream of `kind` opened by `subject`, or `429
    /// too_many_streams` naming the cap it would pass (`details`: `limit`,
    /// `open`, `max`).
    pub fn open(&self, subject: &str, kind: StreamKind) -> Result<StreamSlot, ApiError> {
        let inner = &self.inner;
        let mut open = inner.open.lock().unwrap_or_else(PoisonError::into_inner);
        let total = open.total();
        if total >= inner.per_api {
            return Err(inner.refused(
                "api",
                total,
                inner.per_api,
                format!(
                    "this api already holds {total} event streams open, its most (SLIPWAY_STREAMS_PER_API); try again \
                     later, or through another api"
                ),
            ));
        }
        let mine = open.by_subject.get(subject).copied().unwrap_or(0);
        if mine >= inner.per_subject {
            return Err(inner.refused(
                "subject",
                mine,
                inner.per_subject,
                format!(
                    "this token's subject already holds {mine} event streams open on this api, its most \
                     (SLIPWAY_STREAMS_PER_SUBJECT); close one first"
                ),
            ));
        }
        *open.by_subject.entry(subject.to_owned()).or_insert(0) += 1;
        open.by_kind[kind_index(kind)] += 1;
        Ok(StreamSlot { inner: inner.clone(), subject: subject.to_owned(), kind: kind_index(kind) })
    }

    /// Sets the stream gauges to what is open now (run at each scrape).
    pub fn record(&self) {
        let open = self.inner.open.lock().unwrap_or_else(PoisonError::into_inner);
        let busiest = open.by_subject.values().copied().max().unwrap_or(0);
        self.inner.metrics.streams_open(
            [
                (StreamKind::DeploymentEvents.as_str(), open.by_kind[0]),
                (StreamKind::BuildLog.as_str(), open.by_kind[1]),
            ],
            busiest,
        );
    }
}

impl Inner {
    /// A refusal by the cap `limit` (`subject`, `api`), counted.
    fn refused(&self, limit: &'static str, open: u32, max: u32, message: String) -> ApiError {
        self.metrics.stream_refused(limit);
        ApiError::too_many_streams(message).with_details(json!({ "limit": limit, "open": open, "max": max }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_past_its_cap_is_refused_and_a_slot_given_back_opens_the_next() {
        let caps = StreamCaps::new(2, 3, Metrics::new());
        let a1 = caps.open("a", StreamKind::DeploymentEvents).unwrap();
        let a2 = caps.open("a", StreamKind::BuildLog).unwrap();
        let refused = caps.open("a", StreamKind::DeploymentEvents).unwrap_err();
        assert_eq!(refused.details.as_ref().unwrap()["limit"], "subject");
        let _b1 = caps.open("b", StreamKind::DeploymentEvents).unwrap();
        let refused = caps.open("b", StreamKind::DeploymentEvents).unwrap_err();
        assert_eq!(refused.details.as_ref().unwrap()["limit"], "api");
        drop(a1);
        let _b2 = caps.open("b", StreamKind::DeploymentEvents).unwrap();
        drop(a2);
        assert!(!caps.inner.open.lock().unwrap().by_subject.contains_key("a"), "a subject with none open is forgotten");
    }
}
