//! The job queues (§6): their names, the jobs they carry, how a job is
//! pushed in the caller's transaction, and how a worker takes jobs
//! from a queue on either engine ([`QueueSettings`], the one place apalis's
//! storage is configured: the fleet worker and the queue benchmark use it).
//!
//! apalis traps handled here: the queue name is always set explicitly (the
//! default is the Rust type's name, so a renamed type would orphan its
//! queue); idle workers poll (SQLite's update hook only sees its own
//! process's writes; on PostgreSQL LISTEN/NOTIFY wakes them and a poll
//! covers a job handed out again after its worker died, which sends no
//! notification); apalis looks for dead workers' jobs on each of its
//! heartbeats, set to half of Slipway's so a dead worker's jobs go out again
//! within half a heartbeat of the missed-beat window.

use super::{Conn, StoreError};
use apalis::prelude::{BackendExt, PollSnapshot, PollStrategy, PollWith, Strategy, TaskBuilder, TaskId};
use apalis_postgres::PostgresStorage;
use apalis_sqlite::SqliteStorage;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::sync::mpsc;

/// The queue deploys and destroys share (§6).
pub const BUILDS_QUEUE: &str = "builds";

/// How many times apalis may hand a build job out. A build whose worker died
/// is handed out again; the job body itself never asks for a retry of a
/// failed effect (the build is failed instead), so this bounds only crashes
/// and database outages.
pub const BUILD_JOB_ATTEMPTS: usize = 20;

/// Heartbeats a worker may miss before its builds go to another worker.
pub const MISSED_HEARTBEATS: u32 = 2;

/// A deploy or destroy job: the build to run (its kind is on the row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildJob {
    /// The ST-4 build id.
    pub build_id: String,
}

/// Pushes a [`BuildJob`] for `build_id` into the `builds` queue in `conn`'s
/// transaction, to run at once or after `delay`.
pub async fn push_build_job(conn: &mut Conn, build_id: &str, delay: Option<Duration>) -> Result<(), StoreError> {
    let job = BuildJob { build_id: build_id.to_owned() };
    push(conn, BUILDS_QUEUE, &job, BUILD_JOB_ATTEMPTS, delay).await
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

/// Pushes `payload` into `queue` in `conn`'s transaction, under a new ULID,
/// to be handed out at most `attempts` times, at once or after `delay`.
async fn push<J: Serialize>(
    conn: &mut Conn,
    queue: &str,
    payload: &J,
    attempts: usize,
    delay: Option<Duration>,
) -> Result<(), StoreError> {
    let args = serde_json::to_vec(payload).expect("job payload serialises");
    let task = TaskBuilder::new(args).task_id(TaskId::from(ulid::Ulid::generate())).max_attempts(attempts);
    // Always from the fleet's clock: apalis would take this host's wall
    // clock, and a host ahead would push jobs no worker sees as due.
    let run_at = match delay {
        Some(delay) => run_at_second(super::now_ms(), delay),
        None => u64::try_from(super::now_ms().div_euclid(1000)).unwrap_or(0),
    };
    conn.push_job(queue, task.run_at_timestamp(run_at).build()).await
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

/// How long an idle SQLite worker waits before it looks for jobs again: a
/// submit's build waits half of it on average (SQLite tells no other
/// process of an insert), so it is the largest part of a deploy's overhead
/// on SQLite; a look is one indexed read (docs/DECISIONS.md).
pub const SQLITE_POLL: Duration = Duration::from_millis(100);
/// How long an idle PostgreSQL worker waits, besides LISTEN/NOTIFY: the
/// default of `SLIPWAY_POSTGRES_POLL` ([`JobFeed::poll`]).
pub const POSTGRES_POLL: Duration = Duration::from_secs(1);

/// When an idle apalis worker looks for jobs again: every `period`, and
/// (PostgreSQL) when a notification of a new job arrives.
///
/// Used instead of apalis's interval strategy, which can lose its timer: when
/// its delay has elapsed it makes the next one without polling it, so after
/// a fetch that returned nothing (and a heartbeat timer that fired while the
/// fetch ran, which apalis does not look at during a fetch) no timer is left
/// to wake the worker, and it never looks for jobs again. Under load (a
/// fetch slower than half a heartbeat) a SQLite worker stopped taking jobs
/// in 6 of 48 runs of the worker stop tests. This one leaves its timer armed
/// after every poll.
///
/// Every wake is a fetch: apalis fetches each time its worker's task is
/// polled while it has no job in hand. So the worker's task is woken only by
/// its own timer and by its queue's [`JobFeed`] wakes, never by the notification channel
/// itself, which carries every queue's inserts.
pub struct Wakeups {
    period: Duration,
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    notifications: Option<mpsc::Receiver<Woken>>,
}

impl Wakeups {
    /// Wakes every `period`, and on each item of `notifications` when given.
    pub fn new(period: Duration, notifications: Option<mpsc::Receiver<Woken>>) -> Self {
        Self { period, timer: Box::pin(tokio::time::sleep(period)), notifications }
    }
}

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
/// inserts (apalis's notify strategy woke every worker of every queue on
/// each insert: 131 fetches a second by one idle `nix` worker while the api
/// took 330 submits a second, issue 14). At most one wake waits unread per
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
    /// clone of the feed is dropped and it next hears something); workers
    /// also look every `poll`.
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
    /// time the feed listens again.
    pub fn subscribe(&self, queue: &str) -> mpsc::Receiver<Woken> {
        let (sender, receiver) = mpsc::channel(1);
        self.subscribers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((queue.to_owned(), sender));
        receiver
    }
}

/// The payload of an [`INSERT_CHANNEL`] notification (what it is read for).
#[derive(Deserialize)]
struct Inserted {
    job_type: String,
    id: String,
}

impl PollStrategy for Wakeups {
    fn poll_drive(&mut self, cx: &mut std::task::Context<'_>, _: &PollSnapshot) -> std::task::Poll<Option<()>> {
        use std::future::Future as _;
        let mut woke = false;
        // Until it is pending, so that the timer is always armed on return.
        while self.timer.as_mut().poll(cx).is_ready() {
            self.timer.as_mut().reset(tokio::time::Instant::now() + self.period);
            woke = true;
        }
        if let Some(notifications) = self.notifications.as_mut() {
            while let std::task::Poll::Ready(item) = notifications.poll_recv(cx) {
                if item.is_none() {
                    // The listener ended: the timer alone wakes the worker.
                    self.notifications = None;
                    break;
                }
                woke = true;
            }
        }
        if woke {
            std::task::Poll::Ready(Some(()))
        } else {
            std::task::Poll::Pending
        }
    }
}

/// How a worker takes jobs from one queue: the queue, how many jobs it
/// claims at once, and Slipway's heartbeat.
#[derive(Debug, Clone, Copy)]
pub struct QueueSettings {
    /// The queue's name.
    pub queue: &'static str,
    /// Jobs claimed at once (`BUILD_PREFETCH` for builds).
    pub batch_size: usize,
    /// Slipway's heartbeat (`SLIPWAY_HEARTBEAT`); apalis beats twice as
    /// often and declares a worker dead after [`MISSED_HEARTBEATS`] of ours.
    pub heartbeat: Duration,
}

impl QueueSettings {
    /// apalis's heartbeat and how many of its beats a worker may miss.
    fn beats(&self) -> (Duration, usize) {
        (apalis_heartbeat(self.heartbeat), (MISSED_HEARTBEATS * 2) as usize)
    }

    /// The queue's storage on SQLite, polled every [`SQLITE_POLL`].
    pub fn sqlite<J>(&self, pool: &sqlx::SqlitePool) -> PollWith<SqliteStorage<J>, Strategy> {
        let (beat, missed) = self.beats();
        let config = apalis_sqlite::Config::default()
            .queue(self.queue)
            .batch_size(self.batch_size)
            .heartbeat_interval(beat)
            .missed_heartbeats(missed);
        let wake = Strategy::new().apply(Wakeups::new(SQLITE_POLL, None));
        SqliteStorage::<J>::new(pool).with_config(config).poll_with_strategy(wake)
    }

    /// The queue's storage on PostgreSQL, woken by `feed` (LISTEN/NOTIFY)
    /// and polled every [`JobFeed::poll`].
    pub fn postgres<J>(&self, pool: &sqlx::PgPool, feed: &JobFeed) -> PollWith<PostgresStorage<J>, Strategy> {
        let (beat, missed) = self.beats();
        let config = apalis_postgres::Config::default()
            .queue(self.queue)
            .batch_size(self.batch_size)
            .heartbeat_interval(beat)
            .missed_heartbeats(missed);
        let wake = Strategy::new().apply(Wakeups::new(feed.poll(), Some(feed.subscribe(self.queue))));
        PostgresStorage::<J>::new(pool).with_config(config).poll_with_strategy(wake)
    }
}

/// apalis's heartbeat interval for Slipway's `heartbeat`: half of it, so
/// apalis declares a worker dead after [`MISSED_HEARTBEATS`] of Slipway's
/// beats (twice as many of its own).
pub fn apalis_heartbeat(heartbeat: Duration) -> Duration {
    heartbeat / 2
}

/// The queue of schema builds and names evals (§6, MS-7).
pub const NIX_QUEUE: &str = "nix";

/// The queues a worker serves unless told otherwise: builds, the
/// `nix` queue, `callbacks` (reconcile pushes) and `maintenance` (the
/// retention sweep).
pub const ALL_QUEUES: [&str; 5] = [BUILDS_QUEUE, NIX_QUEUE, CALLBACKS_QUEUE, READINESS_QUEUE, MAINTENANCE_QUEUE];

/// The periodic sweep's queue name (it runs on apalis-cron in each worker
/// that serves it, not from the database).
pub const MAINTENANCE_QUEUE: &str = "maintenance";

/// A worker's `nix`-queue worker is named `<worker name>-nix`: it beats
/// and is handed back with the worker ([`super::heartbeats::keep_alive`]).
pub const NIX_WORKER_SUFFIX: &str = "-nix";

/// A worker's `callbacks`-queue worker is named `<worker name>-callbacks`,
/// beating and handed back with the worker like the `nix` one.
pub const CALLBACKS_WORKER_SUFFIX: &str = "-callbacks";

/// The apalis workers one worker process runs besides its `builds` one,
/// by name suffix: kept alive and handed back together.
pub const SIBLING_SUFFIXES: [&str; 3] = [NIX_WORKER_SUFFIX, CALLBACKS_WORKER_SUFFIX, READINESS_WORKER_SUFFIX];

/// A `schema_build` or `names_eval` job: the key of its `nix_results` row,
/// which holds its kind and input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NixJob {
    /// The `nix_results` key.
    pub key: String,
}

/// How many times apalis may hand a nix job out: a worker that died with it
/// leaves it to another; the job's own failures are its result (§6: no retry).
pub const NIX_JOB_ATTEMPTS: usize = 3;

/// Pushes a [`NixJob`] for `key` into the `nix` queue in `conn`'s transaction.
pub async fn push_nix_job(conn: &mut Conn, key: &str) -> Result<(), StoreError> {
    push(conn, NIX_QUEUE, &NixJob { key: key.to_owned() }, NIX_JOB_ATTEMPTS, None).await
}

/// The queue of reconcile pushes (DL-2).
pub const CALLBACKS_QUEUE: &str = "callbacks";

/// How many pushes one worker sends at once.
pub const CALLBACKS_CONCURRENCY: usize = 16;

/// A `reconcile_push` job: the destroy build whose callback to send (the
/// URL and token stay on the build row; a job payload outlives the push in
/// apalis's table, so it never carries the token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallbackJob {
    /// The destroy build.
    pub build_id: String,
}

/// How many times apalis may hand a push job out: a worker that died with it
/// leaves it to another, which finds it taken (`sending`) and sends nothing
/// (DL-2: the push is sent at most once, never retried).
pub const CALLBACK_JOB_ATTEMPTS: usize = 3;

/// Pushes a [`CallbackJob`] for `build_id` into the `callbacks` queue in
/// `conn`'s transaction.
pub async fn push_callback_job(conn: &mut Conn, build_id: &str) -> Result<(), StoreError> {
    push(conn, CALLBACKS_QUEUE, &CallbackJob { build_id: build_id.to_owned() }, CALLBACK_JOB_ATTEMPTS, None).await
}

/// The queue of readiness probes (§10).
pub const READINESS_QUEUE: &str = "readiness";

/// The suffix of the apalis worker that serves the `readiness` queue.
pub const READINESS_WORKER_SUFFIX: &str = "-readiness";

/// How many readiness jobs one worker runs at once (each probes one
/// deployment's instances, within 5 s per probe).
pub const READINESS_CONCURRENCY: usize = 16;

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

/// How many times apalis may hand a readiness job out (a job that could not
/// record its probes goes back).
pub const READINESS_JOB_ATTEMPTS: usize = 5;

/// Pushes a [`ReadinessJob`] into the `readiness` queue in `conn`'s
/// transaction, to run after `delay` (at once for `None`); a delayed job
/// carries the end of its delay (`not_before_ms`) and never runs before it.
pub async fn push_readiness_job(
    conn: &mut Conn,
    job: &ReadinessJob,
    delay: Option<Duration>,
) -> Result<(), StoreError> {
    let mut job = job.clone();
    job.not_before_ms = delay.map(|d| super::now_ms().saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)));
    push(conn, READINESS_QUEUE, &job, READINESS_JOB_ATTEMPTS, delay).await
}

#[cfg(test)]
mod tests {
    use super::{PollSnapshot, PollStrategy, Wakeups};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    use std::time::Duration;

    /// Counts its wakes and tells a waiting test of each.
    #[derive(Default)]
    struct Counter {
        wakes: AtomicUsize,
        notify: tokio::sync::Notify,
    }

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.wakes.fetch_add(1, Ordering::SeqCst);
            self.notify.notify_one();
        }
    }

    async fn woken(counter: &Counter, after: usize) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while counter.wakes.load(Ordering::SeqCst) <= after {
                counter.notify.notified().await;
            }
        })
        .await
        .expect("the strategy woke the worker again");
    }

    #[tokio::test]
    async fn the_poll_strategy_keeps_a_timer_armed_after_it_fires() {
        let counter = Arc::new(Counter::default());
        let waker = Waker::from(Arc::clone(&counter));
        let mut cx = Context::from_waker(&waker);
        let mut wake = Wakeups::new(Duration::from_millis(20), None);
        assert!(wake.poll_drive(&mut cx, &PollSnapshot::default()).is_pending());
        woken(&counter, 0).await;
        // The worker looks once after the period ended, then not again (its
        // fetch runs, finds nothing and parks): the strategy must wake it
        // again by itself.
        assert_eq!(wake.poll_drive(&mut cx, &PollSnapshot::default()), Poll::Ready(Some(())));
        let seen = counter.wakes.load(Ordering::SeqCst);
        woken(&counter, seen).await;
    }
}
