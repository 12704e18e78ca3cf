//! How the worker takes jobs from a queue on either engine: the one place
//! apalis's storage is configured ([`QueueSettings`]; the fleet worker and
//! the queue benchmark use it), when an idle apalis worker looks for jobs
//! ([`Wakeups`]), and, on PostgreSQL, who writes its jobs' starts and ends
//! ([`Completing`]: the process's completer, `crate::completer`).
//!
//! apalis traps handled here: the queue name is always set explicitly (the
//! default is the Rust type's name, so a renamed type would orphan its
//! queue); idle workers poll (SQLite's update hook only sees its own
//! process's writes; on PostgreSQL LISTEN/NOTIFY wakes them, through the
//! process's [`JobFeed`], and a poll covers a job handed out again after its
//! worker died, which sends no notification); apalis looks for dead workers'
//! jobs on each of its heartbeats, set to half of Slipway's so a dead
//! worker's jobs go out again within half a heartbeat of the missed-beat
//! window.

use crate::completer::{CompleteLayer, Completer};
use apalis::prelude::{Backend, BackendExt, PollSnapshot, PollStrategy, PollWith, Strategy, WorkerContext};
use apalis_core::backend::{BackendConfig, WireFormatBackend};
use apalis_postgres::PostgresStorage;
use apalis_sqlite::SqliteStorage;
use slipway_jobs::store::queue::{JobFeed, Subscription, MISSED_HEARTBEATS};
use std::time::Duration;

/// How long an idle SQLite worker waits before it looks for jobs again: a
/// submit's build waits half of it on average (SQLite tells no other
/// process of an insert), so it is the largest part of a deploy's overhead
/// on SQLite; a look is one indexed read (docs/DECISIONS.md).
pub const SQLITE_POLL: Duration = Duration::from_millis(100);
/// When an idle apalis worker looks for jobs again: every `period`, and
/// (PostgreSQL) when a notification of a new job arrives.
///
/// Used instead of apalis's interval strategy, which can lose its timer: when
/// its delay has elapsed it makes the next one without polling it, so after
/// a fetch that returned nothing (and a heartbeat timer that fired while the
/// fetch ran, which apalis does not look at during a fetch) no timer is left
/// to wake the worker, and it never looks for jobs again (under load: a
/// fetch slower than half a heartbeat). This one leaves its timer armed
/// after every poll. Not yet reported upstream; it can go once apalis's
/// interval strategy polls every delay it makes (check: the worker stop
/// tests, `stopped_with_sigterm` in `worker/tests/it/durability.rs`, pass on
/// SQLite without it).
///
/// Every wake is a fetch: apalis fetches each time its worker's task is
/// polled while it has no job in hand. So the worker's task is woken only by
/// its own timer and by its queue's [`JobFeed`] wakes, never by the notification channel
/// itself, which carries every queue's inserts.
pub struct Wakeups {
    period: Duration,
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    notifications: Option<Subscription>,
}

impl Wakeups {
    /// Wakes every `period`, and on each item of `notifications` when given.
    pub fn new(period: Duration, notifications: Option<Subscription>) -> Self {
        Self { period, timer: Box::pin(tokio::time::sleep(period)), notifications }
    }
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
    /// and polled every [`JobFeed::poll`]; its jobs' starts and ends are
    /// written by the process's `completer`, not by the storage between
    /// two fetches.
    pub fn postgres<J>(
        &self,
        pool: &sqlx::PgPool,
        feed: &JobFeed,
        completer: &Completer,
    ) -> Completing<PollWith<PostgresStorage<J>, Strategy>> {
        let (beat, missed) = self.beats();
        let config = apalis_postgres::Config::default()
            .queue(self.queue)
            .batch_size(self.batch_size)
            .heartbeat_interval(beat)
            .missed_heartbeats(missed)
            .lock_tasks(false)
            .persist_results(false);
        let wake = Strategy::new().apply(Wakeups::new(feed.poll(), Some(feed.subscribe(self.queue))));
        let storage = PostgresStorage::<J>::new(pool).with_config(config).poll_with_strategy(wake);
        Completing { backend: storage, completer: completer.clone() }
    }
}

/// A PostgreSQL queue's storage whose jobs' starts and ends go to the
/// process's [`Completer`] ([`crate::completer::CompleteLayer`] is its
/// middleware); fetching, heartbeats and hand-backs are the storage's own.
pub struct Completing<B> {
    backend: B,
    completer: Completer,
}

impl<B: Backend> Backend for Completing<B> {
    type Task = B::Task;
    type Error = B::Error;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
        worker: &WorkerContext,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.backend.poll_ready(cx, worker)
    }

    fn poll_next(
        &mut self,
        cx: &mut std::task::Context<'_>,
        worker: &WorkerContext,
    ) -> std::task::Poll<Option<Result<Self::Task, Self::Error>>> {
        self.backend.poll_next(cx, worker)
    }

    fn poll_close(
        &mut self,
        cx: &mut std::task::Context<'_>,
        worker: &WorkerContext,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.backend.poll_close(cx, worker)
    }
}

impl<B: BackendConfig> BackendConfig for Completing<B> {
    type Id = B::Id;
    type Args = B::Args;
    type Kind = B::Kind;
    type Config = B::Config;
    type Layer = CompleteLayer;

    fn config(&self) -> &Self::Config {
        self.backend.config()
    }

    /// The completer's layer, in place of the storage's own (built without
    /// start and end events, its middleware is never asked for).
    fn middleware(&mut self, worker: &mut WorkerContext) -> Self::Layer {
        self.completer.layer(worker.name())
    }
}

apalis_core::delegate_codec!(Completing<B>, backend);

/// apalis's heartbeat interval for Slipway's `heartbeat`: half of it, so
/// apalis declares a worker dead after [`MISSED_HEARTBEATS`] of Slipway's
/// beats (twice as many of its own).
pub fn apalis_heartbeat(heartbeat: Duration) -> Duration {
    heartbeat / 2
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
