//! The job queues (§6): each job kind defined once ([`JobKind`]: its
//! payload, queue, worker-name suffix, attempts and concurrency), the one
//! table of the queues a worker serves ([`KINDS`], from which
//! [`ALL_QUEUES`] and [`SIBLING_SUFFIXES`] come), how a job is pushed in
//! the caller's transaction (Q-1, [`push`]), and the process's one LISTEN
//! that wakes a queue's workers on PostgreSQL ([`JobFeed`]). How a worker
//! takes jobs from a queue (apalis's storage) is the worker's
//! (`slipway_worker::storage`).
//!
//! A queue's name is always set explicitly, never apalis's default (the
//! Rust type's name, so a renamed type would orphan its queue). The job
//! bodies are in [`crate::jobs`], each kind's next to its `Job` impl.

use super::{Conn, StoreError};
use apalis::prelude::{TaskBuilder, TaskId};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::time::Duration;
use tokio::sync::mpsc;

/// A job kind, defined once: its payload (the implementing type, a small
/// serde struct carrying ids), the queue its jobs go to, the apalis worker
/// that serves that queue in each worker process, how many times a job may
/// be handed out and how many one worker runs at once. Its body is
/// `crate::jobs::Job`, implemented next to it.
pub trait JobKind: Serialize + DeserializeOwned + Clone + Send + Sync + Unpin + 'static {
    /// The queue (apalis's `job_type`; a name of `SLIPWAY_QUEUES`).
    const QUEUE: &'static str;
    /// The worker process's apalis worker for the queue is named
    /// `<worker name><WORKER_SUFFIX>` (empty for `builds`): it beats and is
    /// handed back with the worker ([`super::heartbeats::keep_alive`]).
    const WORKER_SUFFIX: &'static str;
    /// How many times apalis may hand a job out.
    const ATTEMPTS: usize;
    /// How many jobs one worker process runs at once.
    const CONCURRENCY: Concurrency;

    /// The payload as [`push`] stores it when delayed by `delay` (`None`:
    /// at once); by default the payload as it is.
    fn delayed(&self, _delay: Option<Duration>) -> Cow<'_, Self> {
        Cow::Borrowed(self)
    }
}

/// How many jobs of a kind one worker process runs at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concurrency {
    /// As many as the process's build slots (`BUILD_SLOTS`, `--slots`), of
    /// `BUILD_PREFETCH` claimed at once.
    BuildSlots,
    /// As many as `NIX_SLOTS` (at least one), which bounds them fleet-wide.
    NixSlots,
    /// This many.
    Fixed(usize),
}

/// A queue a worker process serves, as [`KINDS`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queue {
    /// Its name (`SLIPWAY_QUEUES`, `--queues`).
    pub name: &'static str,
    /// The suffix of the process's worker that serves it
    /// (`<worker name><suffix>`).
    pub worker_suffix: &'static str,
    /// Whether its jobs live in the database (apalis's tables): all but
    /// `maintenance`, which runs on apalis-cron in each worker that serves it.
    pub in_database: bool,
}

impl Queue {
    /// The queue of job kind `J`.
    pub const fn of<J: JobKind>() -> Self {
        Self { name: J::QUEUE, worker_suffix: J::WORKER_SUFFIX, in_database: true }
    }
}

/// Every queue a worker process serves unless told otherwise, in the
/// order they are listed everywhere: `builds`, `nix` (schema builds and
/// names evals), `callbacks` (reconcile pushes), `readiness` (probes) and
/// `maintenance` (the retention sweep), and `rollouts` (the rollouts'
/// driver, RO-1).
pub const KINDS: [Queue; 6] = [
    Queue::of::<BuildJob>(),
    Queue::of::<NixJob>(),
    Queue::of::<CallbackJob>(),
    Queue::of::<ReadinessJob>(),
    Queue { name: MAINTENANCE_QUEUE, worker_suffix: MAINTENANCE_WORKER_SUFFIX, in_database: false },
    Queue::of::<RolloutJob>(),
];

/// Which of [`KINDS`] a derived list takes.
#[derive(Clone, Copy)]
enum Pick {
    /// Every queue.
    All,
    /// The queues whose jobs live in the database.
    InDatabase,
    /// The queues in the database served by an apalis worker other than
    /// the process's `builds` one (a non-empty suffix).
    Siblings,
}

impl Pick {
    /// Whether `queue` is taken.
    const fn takes(self, queue: &Queue) -> bool {
        match self {
            Pick::All => true,
            Pick::InDatabase => queue.in_database,
            Pick::Siblings => queue.in_database && !queue.worker_suffix.is_empty(),
        }
    }

    /// How many of [`KINDS`] it takes.
    const fn count(self) -> usize {
        let (mut n, mut i) = (0, 0);
        while i < KINDS.len() {
            if self.takes(&KINDS[i]) {
                n += 1;
            }
            i += 1;
        }
        n
    }

    /// The names (or, with `suffixes`, the worker suffixes) of the
    /// [`KINDS`] it takes, in order; `N` is [`Pick::count`].
    const fn list<const N: usize>(self, suffixes: bool) -> [&'static str; N] {
        let mut out = [""; N];
        let (mut n, mut i) = (0, 0);
        while i < KINDS.len() {
            if self.takes(&KINDS[i]) {
                out[n] = if suffixes { KINDS[i].worker_suffix } else { KINDS[i].name };
                n += 1;
            }
            i += 1;
        }
        out
    }
}

/// The names of [`KINDS`], in order.
pub const ALL_QUEUES: [&str; Pick::All.count()] = Pick::All.list(false);

/// The names of the [`KINDS`] whose jobs live in the database (every queue
/// but `maintenance`), in order: the queues counted and reported.
pub const DATABASE_QUEUES: [&str; Pick::InDatabase.count()] = Pick::InDatabase.list(false);

/// The apalis workers one worker process runs besides its `builds` one,
/// by name suffix (those of [`KINDS`] in the database): kept alive and
/// handed back together.
pub const SIBLING_SUFFIXES: [&str; Pick::Siblings.count()] = Pick::Siblings.list(true);

/// The queues of [`KINDS`] as an operator reads them: `builds, nix,
/// callbacks, readiness, maintenance and rollouts`.
pub fn queue_names() -> &'static str {
    static NAMES: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| match ALL_QUEUES.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    });
    NAMES.as_str()
}

/// The queue deploys and destroys share (§6).
pub const BUILDS_QUEUE: &str = "builds";

/// Heartbeats a worker may miss before its builds go to another worker.
pub const MISSED_HEARTBEATS: u32 = 2;

/// A deploy or destroy job: the build to run (its kind is on the row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildJob {
    /// The ST-4 build id.
    pub build_id: String,
}

impl JobKind for BuildJob {
    const QUEUE: &'static str = BUILDS_QUEUE;
    const WORKER_SUFFIX: &'static str = "";
    /// A build whose worker died is handed out again; the job body
    /// itself never asks for a retry of a failed effect (the build is
    /// failed instead), so this bounds only crashes and database outages.
    const ATTEMPTS: usize = 20;
    const CONCURRENCY: Concurrency = Concurrency::BuildSlots;
}

/// The payload of `build_id`'s [`BuildJob`] as apalis stores it (JSON
/// text), for a push folded into another statement
/// ([`super::submit::write_build`] on PostgreSQL).
pub fn build_job_payload(build_id: &str) -> String {
    serde_json::to_string(&BuildJob { build_id: build_id.to_owned() }).expect("job payload serialises")
}

/// The `metadata` apalis-sqlite's push writes for a job built as `push`
/// builds it (no metadata set), for a push folded into another statement
/// ([`super::submit::write_build`] on SQLite).
pub const SQLITE_JOB_METADATA: &str = "{}";

/// Pushes `job` into its queue ([`JobKind::QUEUE`]) in `conn`'s
/// transaction, under a new ULID, to be handed out at most
/// [`JobKind::ATTEMPTS`] times, at once or after `delay` (its payload as
/// [`JobKind::delayed`] makes it).
pub async fn push<J: JobKind>(conn: &mut Conn, job: &J, delay: Option<Duration>) -> Result<(), StoreError> {
    push_with_priority(conn, job, delay, 0).await
}

/// [`push`] with an apalis `priority` (fetched highest first, then by
/// `run_at`): a build's place in the fair order
/// ([`super::fair::task_priority`]).
pub async fn push_with_priority<J: JobKind>(
    conn: &mut Conn,
    job: &J,
    delay: Option<Duration>,
    priority: usize,
) -> Result<(), StoreError> {
    let args = serde_json::to_vec(&*job.delayed(delay)).expect("job payload serialises");
    let task = TaskBuilder::new(args)
        .task_id(TaskId::from(ulid::Ulid::generate()))
        .max_attempts(J::ATTEMPTS)
        .priority(priority);
    // Always from the fleet's clock: apalis would take this host's wall
    // clock, and a host ahead would push jobs no worker sees as due.
    let run_at = match delay {
        Some(delay) => run_at_second(super::now_ms(), delay),
        None => u64::try_from(super::now_ms().div_euclid(1000)).unwrap_or(0),
    };
    conn.push_job(J::QUEUE, task.run_at_timestamp(run_at).build()).await
}

/// The Unix second a job delayed by `delay` from `now_ms` (Unix ms) may run
/// at, rounded up: apalis stores whole seconds, and its own `run_after`
/// rounds down, so a pause shorter than a second ran at once (a readiness
/// job then probed every few tens of milliseconds as its deadline neared).
pub fn run_at_second(now_ms: i64, delay: Duration) -> u64 {
    let due_ms =
        u64::try_from(now_ms).unwrap_or(0).saturating_add(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
    due_ms.div_ceil(1000)
}

/// How long an idle PostgreSQL worker waits, besides LISTEN/NOTIFY: the
/// default of `SLIPWAY_POSTGRES_POLL` ([`JobFeed::poll`]). (An idle SQLite
/// worker looks every 100 ms: `slipway_worker::storage::SQLITE_POLL`.)
pub const POSTGRES_POLL: Duration = Duration::from_secs(1);

/// The channel apalis-postgres's trigger notifies each due job's insert on
/// (`{"job_type": <queue>, "id": <job id>, …}`).
pub const INSERT_CHANNEL: &str = "apalis::job::insert";

/// Why a queue's worker is woken by the [`JobFeed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Woken {
    /// A job of its queue was inserted: its id.
    Job(String),
    /// The feed listens (again): jobs inserted meanwhile were not announced.
    Listening,
}

/// The process's one LISTEN on [`INSERT_CHANNEL`] (PostgreSQL), which wakes
/// the apalis workers of the queues whose jobs it hears of: a
/// [`super::listen::Listener`], so it connects again after the database was
/// away (and says so in the log) and then wakes every queue's workers once,
/// since inserts meanwhile went unheard. The workers also look every
/// [`JobFeed::poll`] (`SLIPWAY_POSTGRES_POLL`), which finds what no
/// notification announces: a job handed out again after its worker died,
/// or one whose `run_at` came.
///
/// Replaces apalis-postgres's own listener (`Pubsub`, one connection per
/// queue), which ended for good when the database refused its one attempt
/// to connect again: new builds were then found only by the poll until a
/// restart. Each queue's worker is woken by its own queue's inserts only:
/// every wake costs it a fetch, and the channel carries every queue's
/// inserts (apalis's notify strategy wakes every worker of every queue on
/// each insert; docs/DECISIONS.md has what that cost). At most one wake waits unread per
/// subscriber: a worker that has not looked yet needs one wake, not one per
/// job.
#[derive(Clone)]
pub struct JobFeed {
    poll: Duration,
    subscribers: std::sync::Arc<std::sync::Mutex<Vec<Subscriber>>>,
}

/// A queue's workers, as the [`JobFeed`] wakes them: the queue and where its wakes go.
type Subscriber = (String, mpsc::Sender<Woken>);

impl JobFeed {
    /// Starts the feed's listener on `pool` (in a task that ends once every
    /// clone of the feed and every [`Subscription`] to it are dropped and it
    /// next hears something); workers also look every `poll`.
    pub fn start(pool: &sqlx::PgPool, poll: Duration) -> Self {
        let feed = Self { poll, subscribers: Default::default() };
        let subscribers = std::sync::Arc::downgrade(&feed.subscribers);
        let mut listener = super::listen::Listener::new(pool, "job feed", &[INSERT_CHANNEL]);
        tokio::spawn(async move {
            loop {
                let heard = listener.recv().await;
                let Some(subscribers) = subscribers.upgrade() else { break };
                let mut subscribers = subscribers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let wake = match heard {
                    super::listen::Heard::Listening => Some((None, Woken::Listening)),
                    super::listen::Heard::Notification(n) => {
                        serde_json::from_str::<Inserted>(n.payload()).ok().map(|i| (Some(i.job_type), Woken::Job(i.id)))
                    }
                };
                let Some((queue, wake)) = wake else { continue };
                subscribers.retain(|(subscribed, sender)| {
                    if queue.as_ref().is_some_and(|q| q != subscribed) {
                        return !sender.is_closed();
                    }
                    !matches!(sender.try_send(wake.clone()), Err(mpsc::error::TrySendError::Closed(_)))
                });
            }
        });
        feed
    }

    /// How often a worker looks for jobs besides the feed's wakes.
    pub fn poll(&self) -> Duration {
        self.poll
    }

    /// The wakes of `queue`'s workers from now on: its new jobs, and each
    /// time the feed listens again. The subscription keeps the feed
    /// listening for as long as it lives, whether or not the feed itself
    /// is kept.
    pub fn subscribe(&self, queue: &str) -> Subscription {
        let (sender, receiver) = mpsc::channel(1);
        self.subscribers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((queue.to_owned(), sender));
        Subscription { receiver, _feed: self.clone() }
    }
}

/// One queue's wakes from a [`JobFeed`] ([`JobFeed::subscribe`]), which it
/// keeps listening: a storage built from a feed that its caller then drops
/// (a temporary) is still woken by its queue's inserts, not only by its poll.
pub struct Subscription {
    receiver: mpsc::Receiver<Woken>,
    _feed: JobFeed,
}

impl Subscription {
    /// The next wake; `None` once the feed's listener has ended.
    pub async fn recv(&mut self) -> Option<Woken> {
        self.receiver.recv().await
    }

    /// The next wake if one is waiting, registering `cx` to be woken by the
    /// next one otherwise; `Ready(None)` once the feed's listener has ended.
    pub fn poll_recv(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Woken>> {
        self.receiver.poll_recv(cx)
    }
}

/// The payload of an [`INSERT_CHANNEL`] notification (what it is read for).
#[derive(Deserialize)]
struct Inserted {
    job_type: String,
    id: String,
}

/// The queue of schema builds and names evals (§6, MS-7).
pub const NIX_QUEUE: &str = "nix";

/// The periodic sweep's queue name (it runs on apalis-cron in each worker
/// that serves it, not from the database).
pub const MAINTENANCE_QUEUE: &str = "maintenance";

/// The suffix of the apalis-cron worker that runs the sweep
/// (`<worker name>-sweep`; not in the database).
pub const MAINTENANCE_WORKER_SUFFIX: &str = "-sweep";

/// A `schema_build` or `names_eval` job: the key of its `nix_results` row,
/// which holds its kind and input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NixJob {
    /// The `nix_results` key.
    pub key: String,
}

impl JobKind for NixJob {
    const QUEUE: &'static str = NIX_QUEUE;
    const WORKER_SUFFIX: &'static str = "-nix";
    /// A worker that died with it leaves it to another; the job's own
    /// failures are its result (§6: no retry).
    const ATTEMPTS: usize = 3;
    const CONCURRENCY: Concurrency = Concurrency::NixSlots;
}

/// The queue of reconcile pushes (DL-2).
pub const CALLBACKS_QUEUE: &str = "callbacks";

/// A `reconcile_push` job: the destroy build whose callback to send (the
/// URL and token stay on the build row; a job payload outlives the push in
/// apalis's table, so it never carries the token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallbackJob {
    /// The destroy build (empty for a webhook delivery job).
    pub build_id: String,
    /// Set instead for a webhook endpoint's delivery job (WH-1,
    /// `jobs/src/jobs/webhook.rs`); absent from a reconcile push's payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookPump>,
}

/// A webhook endpoint's delivery job (WH-1), carried by a [`CallbackJob`]
/// on the `callbacks` queue: fan the endpoint's new events out, send what
/// is due, then push its successor. Never carries the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookPump {
    /// The endpoint.
    pub endpoint_id: String,
    /// The generation of the endpoint's job chain it belongs to: a job of
    /// another generation than the endpoint's stops at once.
    pub pump: i64,
    /// Not to run before this, Unix ms (handed out earlier, it puts itself back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before_ms: Option<i64>,
}

impl CallbackJob {
    /// The `reconcile_push` of destroy `build_id`.
    pub fn reconcile(build_id: impl Into<String>) -> Self {
        Self { build_id: build_id.into(), webhook: None }
    }

    /// A webhook endpoint's delivery job.
    pub fn webhook(pump: WebhookPump) -> Self {
        Self { build_id: String::new(), webhook: Some(pump) }
    }
}

impl JobKind for CallbackJob {
    const QUEUE: &'static str = CALLBACKS_QUEUE;
    const WORKER_SUFFIX: &'static str = "-callbacks";
    /// A worker that died with it leaves it to another, which finds it
    /// taken (`sending`) and sends nothing (DL-2: the push is sent at most
    /// once, never retried).
    const ATTEMPTS: usize = 3;
    /// Pushes one worker sends at once.
    const CONCURRENCY: Concurrency = Concurrency::Fixed(16);
}

/// The queue of readiness probes (§10).
pub const READINESS_QUEUE: &str = "readiness";

/// A `readiness` job: probe the instances of deploy `build_id` of
/// `deployment_id` that are not ready yet, then push itself again, later,
/// while some are not and the deadline has not passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadinessJob {
    /// The deployment.
    pub deployment_id: String,
    /// The deploy whose instances are probed.
    pub build_id: String,
    /// Not before this time, Unix ms: the end of the pause the previous
    /// round chose. A job handed out earlier (apalis's clock is whole
    /// seconds, and another host's may run ahead) puts itself back until
    /// then instead of probing. `None` for the first round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before_ms: Option<i64>,
}

impl JobKind for ReadinessJob {
    const QUEUE: &'static str = READINESS_QUEUE;
    const WORKER_SUFFIX: &'static str = "-readiness";
    /// A job that could not record its probes goes back.
    const ATTEMPTS: usize = 5;
    /// Each job probes one deployment's instances, within 5 s per probe.
    const CONCURRENCY: Concurrency = Concurrency::Fixed(16);

    /// A delayed job carries the end of its delay (`not_before_ms`) and
    /// never runs before it; one pushed at once carries none.
    fn delayed(&self, delay: Option<Duration>) -> Cow<'_, Self> {
        let mut job = self.clone();
        job.not_before_ms =
            delay.map(|d| super::now_ms().saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)));
        Cow::Owned(job)
    }
}

/// The queue of the rollouts' driver (RO-1).
pub const ROLLOUTS_QUEUE: &str = "rollouts";

/// A `rollout` job: one step of rollout `rollout_id`'s driver
/// ([`crate::rollout::tick`]). Only the job carrying the rollout's current
/// `tick` acts (each step pushes the next with `tick + 1` in the
/// transaction that changes the rollout); any other is stale and ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutJob {
    /// The rollout.
    pub rollout_id: String,
    /// The driver generation it belongs to (`rollouts.tick`).
    pub tick: i64,
}

impl JobKind for RolloutJob {
    const QUEUE: &'static str = ROLLOUTS_QUEUE;
    const WORKER_SUFFIX: &'static str = "-rollouts";
    /// A step that could not commit goes back; each step is idempotent.
    const ATTEMPTS: usize = 20;
    /// Steps one worker runs at once (each one rollout's).
    const CONCURRENCY: Concurrency = Concurrency::Fixed(4);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_list_of_queues_comes_from_the_one_table_in_its_order() {
        assert_eq!(ALL_QUEUES, ["builds", "nix", "callbacks", "readiness", "maintenance", "rollouts"]);
        assert_eq!(DATABASE_QUEUES, ["builds", "nix", "callbacks", "readiness", "rollouts"]);
        assert_eq!(SIBLING_SUFFIXES, ["-nix", "-callbacks", "-readiness", "-rollouts"]);
    }
}
