//! Prometheus metrics (docs/METRICS.md): every family's name, help text
//! and labels, recorded with the `metrics` crate's types into a
//! `metrics-exporter-prometheus` recorder that each process owns (no global
//! recorder: a test's router has its own).
//!
//! What each process records: the api its HTTP requests and its submits'
//! admission refusals ([`Metrics::http_request`],
//! [`Metrics::admission_refused`]), and at each scrape the fleet read from
//! the database ([`fleet_text`] of a [`crate::store::fleet::Fleet`]); a
//! worker the builds it ran ([`Metrics::build_finished`]). Label values are
//! only ever taken from fixed sets (route templates, methods, statuses,
//! build kinds and outcomes, queue and pool names, refusal codes): never an
//! id, a token, a secret or a configuration value.

use metrics::{Key, KeyName, Label, Metadata, Recorder, SharedString};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use std::time::Duration;

/// Counter `{route, method, status}`: HTTP requests the api answered.
pub const HTTP_REQUESTS: &str = "slipway_http_requests_total";
/// Histogram `{route, method}`: seconds from a request to its answer's head.
pub const HTTP_DURATION: &str = "slipway_http_request_duration_seconds";
/// Counter `{kind, outcome}`: builds a worker ran to an end it recorded.
pub const BUILDS: &str = "slipway_builds_total";
/// Histogram `{kind, outcome}`: seconds a build's effect ran.
pub const BUILD_DURATION: &str = "slipway_build_duration_seconds";
/// Gauge `{queue}`: jobs due that no worker has taken.
pub const QUEUE_DEPTH: &str = "slipway_queue_depth";
/// Gauge `{queue}`: how long the oldest of those has waited, in seconds.
pub const QUEUE_OLDEST: &str = "slipway_queue_oldest_waiting_seconds";
/// Gauge `{pool}`: slots held now.
pub const SLOTS_IN_USE: &str = "slipway_slots_in_use";
/// Gauge: workers whose heartbeat is within the takeover window.
pub const WORKERS_ALIVE: &str = "slipway_workers_alive";
/// Counter `{reason}`: submits refused by the queue or nix caps.
pub const ADMISSION_REFUSALS: &str = "slipway_admission_refusals_total";
/// Counter `{outcome}`: reloads of the api's token keys file (SEC-4).
pub const KEY_RELOADS: &str = "slipway_token_key_reloads_total";
/// Counter `{outcome}`: webhook delivery attempts a worker made (WH-1), by
/// outcome (`delivered`, `retrying`, `failed`); never an endpoint, URL or id.
pub const WEBHOOK_DELIVERIES: &str = "slipway_webhook_deliveries_total";

/// Gauge: seconds left before this process's OpenBao token expires, as
/// its last lookup or renewal said (docs/OPENBAO.md).
pub const OPENBAO_TOKEN_TTL: &str = "slipway_openbao_token_ttl_seconds";
/// Counter `{outcome}`: renewals of this process's OpenBao token
/// (`renewed`, `failed`).
pub const OPENBAO_TOKEN_RENEWALS: &str = "slipway_openbao_token_renewals_total";

/// Gauge `{kind}`: event streams the api holds open now, by kind
/// (`deployment_events`, `build_log`).
pub const STREAMS_OPEN: &str = "slipway_streams_open";
/// Gauge: the most event streams any one token subject holds open on the
/// api now (the subject itself is never a label).
pub const STREAMS_BUSIEST_SUBJECT: &str = "slipway_streams_busiest_subject";
/// Counter `{limit}`: event streams refused by a cap (`subject`:
/// `SLIPWAY_STREAMS_PER_SUBJECT`; `api`: `SLIPWAY_STREAMS_PER_API`).
pub const STREAMS_REFUSED: &str = "slipway_streams_refused_total";

/// Gauge: bytes of the SQLite write-ahead log at this process's last look
/// (SQLite only).
pub const SQLITE_WAL_BYTES: &str = "slipway_sqlite_wal_bytes";
/// Counter `{outcome}`: checkpoints of the SQLite write-ahead log this
/// process ran because it was past `SLIPWAY_SQLITE_WAL_LIMIT`
/// (`truncated`; `checkpointed`: copied whole, its truncation left to the
/// next commit because someone was in the way; `blocked`: a reader of an
/// older snapshot kept it from completing; `failed`: a database error).
pub const SQLITE_CHECKPOINTS: &str = "slipway_sqlite_checkpoints_total";

/// Counter `{storage}`: answers `503 storage_unavailable` the api gave
/// because a host's storage could not be written (`worker`: a worker's
/// state folder or Nix store; `database`: the database's disk).
pub const STORAGE_FAULTS: &str = "slipway_storage_faults_total";

/// Gauge `{host}`: this host's wall clock minus the database's, in
/// seconds, at the last reading (every minute). `host` is this
/// process's host name: one series per process.
pub const CLOCK_SKEW: &str = "slipway_clock_skew_seconds";

/// The `route` of a request no route matched.
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// The least upper bound of [`HTTP_DURATION`]'s buckets, in seconds: 1 ms.
pub const HTTP_FIRST_BUCKET: f64 = 0.001;

/// The upper bound [`Metrics::new`] gives [`HTTP_DURATION`]'s buckets
/// without a configuration: the defaults of `SLIPWAY_REQUEST_TIMEOUT` (30 s)
/// and `NIX_TIMEOUT` (300 s), the larger.
pub const DEFAULT_HTTP_CEILING: Duration = Duration::from_secs(300);

/// Buckets of [`HTTP_DURATION`], in seconds: 1 ms, 2.5 ms, 5 ms, 10 ms, …
/// (1, 2.5 and 5 times each power of ten) up to the first at or past
/// `ceiling`, the longest a request may take: the larger of
/// `SLIPWAY_REQUEST_TIMEOUT` and `NIX_TIMEOUT` (a `get_for` or a submit
/// may wait on a Nix build). A request that runs into its timeout then
/// lands in a finite bucket, not only in `+Inf`.
pub fn http_buckets(ceiling: Duration) -> Vec<f64> {
    let ceiling = ceiling.as_secs_f64();
    let mut buckets = Vec::new();
    let mut decade = HTTP_FIRST_BUCKET;
    loop {
        for step in [1.0, 2.5, 5.0] {
            // Rounded to the decade's digits, so the `le` labels read `0.0025`, not `0.0025000000000000005`.
            let bound = (decade * step * 1e6).round() / 1e6;
            buckets.push(bound);
            if bound >= ceiling {
                return buckets;
            }
        }
        decade *= 10.0;
    }
}
/// Buckets of [`BUILD_DURATION`], in seconds: 1 s to 2 h (a deploy's default deadline is 1 h).
const BUILD_BUCKETS: [f64; 12] = [1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0];

/// Why a submit was refused by a cap (the label `reason` of
/// [`ADMISSION_REFUSALS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `QUEUE_SIZE` builds already wait (`503 queue_full`).
    QueueFull,
    /// Every `NIX_SLOTS` slot is busy and the source's outputs must be
    /// built (`503 nix_busy`).
    NixBusy,
}

impl Refusal {
    /// The label value: the error code the client got.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::NixBusy => "nix_busy",
        }
    }
}

/// One process's metrics: its recorder and the handle that renders it.
/// Cheap to clone (shared).
#[derive(Clone)]
pub struct Metrics {
    recorder: std::sync::Arc<PrometheusRecorder>,
    handle: PrometheusHandle,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Where the `metrics` types want a call site: these are Slipway's own.
const METADATA: Metadata<'static> = Metadata::new("slipway", metrics::Level::INFO, Some(module_path!()));

impl Metrics {
    /// A recorder with every family described and the histograms' buckets
    /// set, the HTTP ones up to [`DEFAULT_HTTP_CEILING`].
    pub fn new() -> Self {
        Self::with_http_ceiling(DEFAULT_HTTP_CEILING)
    }

    /// [`Metrics::new`] with [`HTTP_DURATION`]'s buckets reaching
    /// `ceiling` ([`http_buckets`]): the api passes the larger of its
    /// request timeout and `NIX_TIMEOUT`.
    pub fn with_http_ceiling(ceiling: Duration) -> Self {
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(HTTP_DURATION.to_owned()), &http_buckets(ceiling))
            .and_then(|b| b.set_buckets_for_metric(Matcher::Full(BUILD_DURATION.to_owned()), &BUILD_BUCKETS))
            .expect("the bucket lists are not empty");
        let recorder = builder.build_recorder();
        let describe =
            |name: &'static str, help: &'static str| (KeyName::from_const_str(name), SharedString::const_str(help));
        for (name, help) in [
            describe(HTTP_REQUESTS, "HTTP requests answered, by route template, method and status."),
            describe(ADMISSION_REFUSALS, "Submits refused by a cap (queue_full: QUEUE_SIZE; nix_busy: NIX_SLOTS)."),
            describe(
                KEY_RELOADS,
                "Reloads of the token keys file (SLIPWAY_JWT_KEYS_FILE), by outcome (loaded, failed).",
            ),
            describe(BUILDS, "Builds this worker ran to a recorded end, by kind and outcome."),
            describe(
                WEBHOOK_DELIVERIES,
                "Webhook delivery attempts this worker made, by outcome (delivered, retrying, failed).",
            ),
            describe(OPENBAO_TOKEN_RENEWALS, "Renewals of this process's OpenBao token, by outcome (renewed, failed)."),
            describe(
                STORAGE_FAULTS,
                "Answers 503 storage_unavailable because a host's storage could not be written, by storage (worker, \
                 database).",
            ),
            describe(
                SQLITE_CHECKPOINTS,
                "Checkpoints of the SQLite write-ahead log past SLIPWAY_SQLITE_WAL_LIMIT, by outcome (truncated, \
                 checkpointed, blocked, failed).",
            ),
            describe(
                STREAMS_REFUSED,
                "Event streams refused by a cap, by limit (subject: SLIPWAY_STREAMS_PER_SUBJECT; api: \
                 SLIPWAY_STREAMS_PER_API).",
            ),
        ] {
            recorder.describe_counter(name, None, help);
        }
        for (name, help) in [
            describe(HTTP_DURATION, "Seconds from a request to its answer's head, by route template and method."),
            describe(BUILD_DURATION, "Seconds a build's effect ran, by kind and outcome."),
        ] {
            recorder.describe_histogram(name, None, help);
        }
        for (name, help) in [
            describe(
                OPENBAO_TOKEN_TTL,
                "Seconds left before this process's OpenBao token expires, at its last lookup.",
            ),
            describe(STREAMS_OPEN, "Event streams this api holds open now, by kind (deployment_events, build_log)."),
            describe(STREAMS_BUSIEST_SUBJECT, "The most event streams one token subject holds open on this api now."),
            describe(
                CLOCK_SKEW,
                "This host's wall clock minus the database's, in seconds, at the last reading (positive: ahead).",
            ),
            describe(SQLITE_WAL_BYTES, "Bytes of the SQLite write-ahead log at this process's last look."),
        ] {
            recorder.describe_gauge(name, None, help);
        }
        let handle = recorder.handle();
        Self { recorder: std::sync::Arc::new(recorder), handle }
    }

    /// Records one answered request: `route` is the route's template (or
    /// [`UNMATCHED_ROUTE`]), `method` one of a fixed set, `status` the
    /// answer's, `elapsed` the time to its head.
    pub fn http_request(&self, route: &str, method: &'static str, status: u16, elapsed: Duration) {
        let labels =
            [Label::new("route", route.to_owned()), Label::from_static_parts("method", method), status_label(status)];
        self.recorder.register_counter(&Key::from_parts(HTTP_REQUESTS, labels.to_vec()), &METADATA).increment(1);
        self.recorder
            .register_histogram(&Key::from_parts(HTTP_DURATION, labels[..2].to_vec()), &METADATA)
            .record(elapsed.as_secs_f64());
    }

    /// Records a submit refused by a cap.
    pub fn admission_refused(&self, reason: Refusal) {
        let key = Key::from_parts(ADMISSION_REFUSALS, vec![Label::from_static_parts("reason", reason.as_str())]);
        self.recorder.register_counter(&key, &METADATA).increment(1);
    }

    /// Records a build that ran to an end this worker recorded: its kind
    /// (`deploy`, `destroy`), its outcome (`succeeded`, `failed`,
    /// `cancelled`) and how long its effect ran.
    pub fn build_finished(&self, kind: crate::state::BuildKind, outcome: crate::state::BuildStatus, ran: Duration) {
        let labels = vec![
            Label::from_static_parts("kind", kind.as_str()),
            Label::from_static_parts("outcome", outcome.as_str()),
        ];
        self.recorder.register_counter(&Key::from_parts(BUILDS, labels.clone()), &METADATA).increment(1);
        self.recorder.register_histogram(&Key::from_parts(BUILD_DURATION, labels), &METADATA).record(ran.as_secs_f64());
    }

    /// Records the webhook delivery attempts of one delivery job.
    pub fn webhook_deliveries(&self, tally: &crate::webhooks::Tally) {
        for (outcome, n) in [("delivered", tally.delivered), ("retrying", tally.retrying), ("failed", tally.failed)] {
            let key = Key::from_parts(WEBHOOK_DELIVERIES, vec![Label::from_static_parts("outcome", outcome)]);
            self.recorder.register_counter(&key, &METADATA).increment(n);
        }
    }

    /// Makes sure the build families show (at zero) before the first build
    /// ends, for every kind and the outcomes a run can have.
    pub fn register_builds(&self) {
        use crate::state::{BuildKind, BuildStatus};
        for kind in [BuildKind::Deploy, BuildKind::Destroy] {
            for outcome in [BuildStatus::Succeeded, BuildStatus::Failed, BuildStatus::Cancelled] {
                let labels = vec![
                    Label::from_static_parts("kind", kind.as_str()),
                    Label::from_static_parts("outcome", outcome.as_str()),
                ];
                self.recorder.register_counter(&Key::from_parts(BUILDS, labels), &METADATA).absolute(0);
            }
        }
    }

    /// Records one reload of the token keys file: `loaded` when its keys
    /// went live, otherwise `failed` (the keys before it stay live).
    pub fn key_reload(&self, loaded: bool) {
        let key = Key::from_parts(KEY_RELOADS, vec![Label::from_static_parts("outcome", reload_outcome(loaded))]);
        self.recorder.register_counter(&key, &METADATA).increment(1);
    }

    /// Makes sure both outcomes of [`KEY_RELOADS`] show (at zero) before the
    /// first reload.
    pub fn register_key_reloads(&self) {
        for loaded in [true, false] {
            let key = Key::from_parts(KEY_RELOADS, vec![Label::from_static_parts("outcome", reload_outcome(loaded))]);
            self.recorder.register_counter(&key, &METADATA).absolute(0);
        }
    }

    /// Records what the last lookup or renewal of the OpenBao token said:
    /// `ttl` left.
    pub fn openbao_token_ttl(&self, ttl: Duration) {
        self.recorder.register_gauge(&Key::from_name(OPENBAO_TOKEN_TTL), &METADATA).set(ttl.as_secs_f64());
    }

    /// Records one renewal of the OpenBao token: `renewed` or `failed`.
    pub fn openbao_token_renewal(&self, renewed: bool) {
        let key = Key::from_parts(OPENBAO_TOKEN_RENEWALS, vec![Label::from_static_parts("outcome", renewal(renewed))]);
        self.recorder.register_counter(&key, &METADATA).increment(1);
    }

    /// Makes sure both outcomes of [`OPENBAO_TOKEN_RENEWALS`] show (at zero)
    /// in a process that holds an OpenBao token, before the first renewal.
    pub fn register_openbao_token(&self) {
        for renewed in [true, false] {
            let key =
                Key::from_parts(OPENBAO_TOKEN_RENEWALS, vec![Label::from_static_parts("outcome", renewal(renewed))]);
            self.recorder.register_counter(&key, &METADATA).absolute(0);
        }
    }

    /// Records the event streams open now: `open` of each kind
    /// (`deployment_events`, `build_log`) and the most any one subject holds.
    pub fn streams_open(&self, open: [(&'static str, u32); 2], busiest_subject: u32) {
        for (kind, n) in open {
            let key = Key::from_parts(STREAMS_OPEN, vec![Label::from_static_parts("kind", kind)]);
            self.recorder.register_gauge(&key, &METADATA).set(f64::from(n));
        }
        self.recorder
            .register_gauge(&Key::from_name(STREAMS_BUSIEST_SUBJECT), &METADATA)
            .set(f64::from(busiest_subject));
    }

    /// Records one event stream refused by the cap `limit` (`subject`, `api`).
    pub fn stream_refused(&self, limit: &'static str) {
        let key = Key::from_parts(STREAMS_REFUSED, vec![Label::from_static_parts("limit", limit)]);
        self.recorder.register_counter(&key, &METADATA).increment(1);
    }

    /// Makes sure the stream families show (at zero) before the first stream.
    pub fn register_streams(&self) {
        self.streams_open([("deployment_events", 0), ("build_log", 0)], 0);
        for limit in ["subject", "api"] {
            let key = Key::from_parts(STREAMS_REFUSED, vec![Label::from_static_parts("limit", limit)]);
            self.recorder.register_counter(&key, &METADATA).absolute(0);
        }
    }

    /// Records the SQLite write-ahead log's size, in bytes.
    pub fn sqlite_wal_bytes(&self, bytes: u64) {
        self.recorder.register_gauge(&Key::from_name(SQLITE_WAL_BYTES), &METADATA).set(bytes as f64);
    }

    /// Records one checkpoint of the write-ahead log: `truncated`,
    /// `blocked` or `failed`.
    pub fn sqlite_checkpoint(&self, outcome: &'static str) {
        let key = Key::from_parts(SQLITE_CHECKPOINTS, vec![Label::from_static_parts("outcome", outcome)]);
        self.recorder.register_counter(&key, &METADATA).increment(1);
    }

    /// Makes sure the write-ahead log's families show (at zero) in a
    /// process on SQLite before its first look.
    pub fn register_sqlite_wal(&self) {
        self.sqlite_wal_bytes(0);
        for outcome in ["truncated", "checkpointed", "blocked", "failed"] {
            let key = Key::from_parts(SQLITE_CHECKPOINTS, vec![Label::from_static_parts("outcome", outcome)]);
            self.recorder.register_counter(&key, &METADATA).absolute(0);
        }
    }

    /// Records one answer `503 storage_unavailable` for `storage`
    /// (`worker`, `database`).
    pub fn storage_fault(&self, storage: &'static str) {
        let key = Key::from_parts(STORAGE_FAULTS, vec![Label::from_static_parts("storage", storage)]);
        self.recorder.register_counter(&key, &METADATA).increment(1);
    }

    /// Records this host's clock skew from the database, in seconds.
    pub fn clock_skew(&self, host: &str, skew_s: f64) {
        let key = Key::from_parts(CLOCK_SKEW, vec![Label::new("host", host.to_owned())]);
        self.recorder.register_gauge(&key, &METADATA).set(skew_s);
    }

    /// Makes sure [`STORAGE_FAULTS`] shows (at zero) for both storages.
    pub fn register_storage_faults(&self) {
        for storage in ["worker", "database"] {
            let key = Key::from_parts(STORAGE_FAULTS, vec![Label::from_static_parts("storage", storage)]);
            self.recorder.register_counter(&key, &METADATA).absolute(0);
        }
    }

    /// Makes sure the refusal family shows (at zero) before the first refusal.
    pub fn register_refusals(&self) {
        for reason in [Refusal::QueueFull, Refusal::NixBusy] {
            let key = Key::from_parts(ADMISSION_REFUSALS, vec![Label::from_static_parts("reason", reason.as_str())]);
            self.recorder.register_counter(&key, &METADATA).absolute(0);
        }
    }

    /// The Prometheus text format of everything recorded.
    pub fn render(&self) -> String {
        self.handle.render()
    }

    /// Folds the histograms' recent samples in; run every few seconds so
    /// that they do not pile up between scrapes.
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }
}

/// Whether an `Authorization` header is `Bearer <token>` (the metrics
/// token, `SLIPWAY_METRICS_TOKEN`), compared in a time that does not depend
/// on where they differ.
pub fn bearer_matches(header: Option<&str>, token: &str) -> bool {
    let Some(sent) = header.and_then(|h| h.strip_prefix("Bearer ")) else { return false };
    let (a, b) = (sent.trim().as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// The `outcome` label of [`KEY_RELOADS`].
fn reload_outcome(loaded: bool) -> &'static str {
    if loaded {
        "loaded"
    } else {
        "failed"
    }
}

/// The `outcome` label of [`OPENBAO_TOKEN_RENEWALS`].
fn renewal(renewed: bool) -> &'static str {
    if renewed {
        "renewed"
    } else {
        "failed"
    }
}

/// The `status` label: one of the three-digit statuses (bounded by HTTP itself).
fn status_label(status: u16) -> Label {
    Label::new("status", status.to_string())
}

/// The Prometheus text of the fleet as read from the database at a scrape:
/// [`QUEUE_DEPTH`] and [`QUEUE_OLDEST`] per queue, [`SLOTS_IN_USE`] per pool
/// and [`WORKERS_ALIVE`]. Rendered by a recorder of its own, made for the
/// scrape, so a scrape that cannot read the fleet shows none of it rather
/// than stale values.
pub fn fleet_text(fleet: &crate::store::fleet::Fleet) -> String {
    let recorder = PrometheusBuilder::new().build_recorder();
    let gauge = |name: &'static str, help: &'static str| {
        recorder.describe_gauge(KeyName::from_const_str(name), None, SharedString::const_str(help));
    };
    gauge(QUEUE_DEPTH, "Jobs due on each queue that no worker has taken yet.");
    gauge(QUEUE_OLDEST, "Seconds the oldest job due on each queue has waited for a worker (0 when none waits).");
    gauge(SLOTS_IN_USE, "Slots held now, per pool (builds: builds running; nix: nix slot leases held).");
    gauge(WORKERS_ALIVE, "Workers whose heartbeat is within the takeover window.");
    let set = |name: &'static str, labels: Vec<Label>, value: f64| {
        recorder.register_gauge(&Key::from_parts(name, labels), &METADATA).set(value);
    };
    for q in &fleet.queues {
        set(QUEUE_DEPTH, vec![Label::from_static_parts("queue", q.queue)], q.waiting as f64);
        set(QUEUE_OLDEST, vec![Label::from_static_parts("queue", q.queue)], q.oldest_waiting_s as f64);
    }
    for (pool, held) in &fleet.slots {
        set(SLOTS_IN_USE, vec![Label::from_static_parts("pool", pool)], *held as f64);
    }
    set(WORKERS_ALIVE, Vec::new(), fleet.workers_alive as f64);
    recorder.handle().render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{BuildKind, BuildStatus};

    #[test]
    fn the_metrics_bearer_must_match_whole() {
        assert!(bearer_matches(Some("Bearer s3cret"), "s3cret"));
        for sent in [None, Some("Bearer s3cre"), Some("Bearer s3cret2"), Some("s3cret"), Some("Basic s3cret")] {
            assert!(!bearer_matches(sent, "s3cret"), "{sent:?}");
        }
    }

    #[test]
    fn http_buckets_reach_from_one_millisecond_to_the_ceiling_given() {
        for ceiling in [1, 30, 300, 301, 3600] {
            let b = http_buckets(Duration::from_secs(ceiling));
            assert_eq!(b[0], 0.001, "{b:?}");
            assert!(b.windows(2).all(|w| w[0] < w[1]), "{b:?}");
            let last = *b.last().unwrap();
            assert!(last >= ceiling as f64 && b[b.len() - 2] < ceiling as f64, "{ceiling}: {b:?}");
        }
        assert_eq!(http_buckets(Duration::from_secs(30))[..4], [0.001, 0.0025, 0.005, 0.01]);
    }

    #[test]
    fn every_family_renders_with_its_help_type_and_labels() {
        let m = Metrics::new();
        m.http_request("/deployments/{id}", "GET", 200, Duration::from_millis(30));
        m.admission_refused(Refusal::QueueFull);
        m.register_key_reloads();
        m.key_reload(false);
        m.build_finished(BuildKind::Deploy, BuildStatus::Succeeded, Duration::from_secs(42));
        m.register_openbao_token();
        m.openbao_token_renewal(true);
        m.openbao_token_ttl(Duration::from_secs(1200));
        let text = m.render();
        for want in [
            "# TYPE slipway_http_requests_total counter",
            "slipway_http_requests_total{route=\"/deployments/{id}\",method=\"GET\",status=\"200\"} 1",
            "# TYPE slipway_http_request_duration_seconds histogram",
            "slipway_http_request_duration_seconds_bucket{route=\"/deployments/{id}\",method=\"GET\",le=\"0.05\"} 1",
            "slipway_http_request_duration_seconds_count{route=\"/deployments/{id}\",method=\"GET\"} 1",
            "slipway_admission_refusals_total{reason=\"queue_full\"} 1",
            "# TYPE slipway_token_key_reloads_total counter",
            "slipway_token_key_reloads_total{outcome=\"failed\"} 1",
            "slipway_token_key_reloads_total{outcome=\"loaded\"} 0",
            "slipway_builds_total{kind=\"deploy\",outcome=\"succeeded\"} 1",
            "slipway_build_duration_seconds_bucket{kind=\"deploy\",outcome=\"succeeded\",le=\"60\"} 1",
            "# HELP slipway_builds_total Builds this worker ran",
            "slipway_openbao_token_renewals_total{outcome=\"renewed\"} 1",
            "slipway_openbao_token_renewals_total{outcome=\"failed\"} 0",
            "# TYPE slipway_openbao_token_ttl_seconds gauge",
            "slipway_openbao_token_ttl_seconds 1200",
        ] {
            assert!(text.contains(want), "{want} missing from:\n{text}");
        }
        let fleet = crate::store::fleet::Fleet {
            queues: vec![crate::store::fleet::QueueDepth { queue: "builds", waiting: 3, oldest_waiting_s: 7 }],
            slots: vec![("builds", 2), ("nix", 0)],
            workers_alive: 1,
        };
        let text = fleet_text(&fleet);
        for want in [
            "# TYPE slipway_queue_depth gauge",
            "slipway_queue_depth{queue=\"builds\"} 3",
            "slipway_queue_oldest_waiting_seconds{queue=\"builds\"} 7",
            "slipway_slots_in_use{pool=\"builds\"} 2",
            "slipway_slots_in_use{pool=\"nix\"} 0",
            "slipway_workers_alive 1",
        ] {
            assert!(text.contains(want), "{want} missing from:\n{text}");
        }
    }
}
