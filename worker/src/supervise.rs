//! Restarting a failed apalis queue worker without stopping the others.
//!
//! apalis's [`Monitor`](apalis::prelude::Monitor) polls every queue worker
//! of the process inside one future, and asks its `should_restart` callback
//! (a plain function) from inside that poll. A pause taken there (a thread
//! sleep) stops every queue worker of the process for as long: their fetches
//! and heartbeats, with a transaction left open mid-way. After a database
//! outage each queue worker fails and restarts on its own, so the pauses
//! add up, long enough for another worker to take the process for dead and
//! take over the build it was starting.
//!
//! So the callback only records the failure ([`Supervisor::failed`]); the
//! pause is taken by the restarted worker itself: the factory that builds it
//! wraps its storage in [`Supervised`], which holds back the worker's first
//! registration and fetch until the pause is over, while everything else of
//! the process keeps running.

use apalis::prelude::{Backend, WorkerContext};
use apalis_core::backend::{BackendConfig, WireFormatBackend};
use slipway_jobs::jobs::{Ctx, Rejoining};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The pause before a queue worker starts again after an error: 100 ms,
/// doubling with each failure that follows within a minute of the
/// previous one, up to 5 s; a failure after a quiet minute starts over.
#[derive(Debug, Default)]
pub(crate) struct Restarts {
    /// Failures in the current run of failures.
    count: u32,
    /// When the last one happened.
    last: Option<Instant>,
    /// The pause the next start of the worker waits, not yet taken.
    pending: Option<Duration>,
}

impl Restarts {
    const FIRST: Duration = Duration::from_millis(100);
    const MOST: Duration = Duration::from_secs(5);
    const QUIET: Duration = Duration::from_secs(60);

    /// Records a failure at `now` and returns how long to wait.
    pub(crate) fn next(&mut self, now: Instant) -> Duration {
        if self.last.is_some_and(|last| now.duration_since(last) > Self::QUIET) {
            self.count = 0;
        }
        self.last = Some(now);
        let wait = Self::FIRST.saturating_mul(1 << self.count.min(16)).min(Self::MOST);
        self.count += 1;
        wait
    }
}

/// The restart bookkeeping of one process's queue workers: each backs off
/// on its own failures only, while a run of failures is reported once for
/// the process (the first failure after a quiet minute of all of them).
#[derive(Debug, Clone, Default)]
pub(crate) struct Supervisor(Arc<Mutex<Failures>>);

#[derive(Debug, Default)]
struct Failures {
    /// Each queue worker's restarts, by worker name.
    by_worker: HashMap<String, Restarts>,
    /// When any queue worker of the process last failed.
    last: Option<Instant>,
}

impl Supervisor {
    /// Records that queue worker `name` failed at `now` (from apalis's
    /// `should_restart` callback, which must not wait): its next start
    /// waits the returned pause. Also says whether this failure begins a
    /// run of failures of the process's queue workers (to log it once).
    pub(crate) fn failed(&self, name: &str, now: Instant) -> (Duration, bool) {
        let mut failures = self.0.lock().expect("restart bookkeeping lock");
        let first = failures.last.is_none_or(|last| now.duration_since(last) > Restarts::QUIET);
        failures.last = Some(now);
        let restarts = failures.by_worker.entry(name.to_owned()).or_default();
        let wait = restarts.next(now);
        restarts.pending = Some(wait);
        (wait, first)
    }

    /// The pause queue worker `name` waits before it starts (zero unless it
    /// failed since it last started); taken once.
    fn pause_before_start(&self, name: &str) -> Duration {
        let mut failures = self.0.lock().expect("restart bookkeeping lock");
        failures.by_worker.get_mut(name).and_then(|r| r.pending.take()).unwrap_or(Duration::ZERO)
    }

    /// The storage a (re)start of queue worker `name` of `ctx`'s process
    /// runs on: `backend`, held back for the worker's pause and, on a
    /// restart, until its name can be registered again ([`Ctx::rejoin`]).
    pub(crate) fn hold<B>(&self, name: &str, backend: B, ctx: &Ctx) -> Supervised<B> {
        let pause = self.pause_before_start(name);
        let mut held = Supervised::new(backend, pause);
        if !pause.is_zero() {
            let (ctx, name) = (ctx.clone(), name.to_owned());
            let interval = crate::storage::apalis_heartbeat(ctx.config.heartbeat);
            held.rejoin = Some(Box::pin(async move { ctx.rejoin(&name, interval).await }));
        }
        held
    }
}

/// A queue worker's storage as the supervisor holds it: the worker starts
/// only after a pause (until then it is not ready: no registration, no
/// heartbeat, no fetch; it waits on a timer, not on the thread), and a
/// restarted one only once its row lets apalis register the name again.
/// Everything else is the storage's own.
pub(crate) struct Supervised<B> {
    backend: B,
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
    /// A restart's preparation of the name, run after the pause.
    rejoin: Option<Pin<Box<dyn Future<Output = Rejoining> + Send>>>,
    /// Held from the preparation until the storage has registered (or
    /// failed to): the process's heartbeats leave the name's row alone.
    registering: Option<Rejoining>,
}

impl<B> Supervised<B> {
    /// `backend`, held back for `pause` from now (not at all for zero).
    pub(crate) fn new(backend: B, pause: Duration) -> Self {
        let pause = (!pause.is_zero()).then(|| Box::pin(tokio::time::sleep(pause)));
        Self { backend, pause, rejoin: None, registering: None }
    }

    /// Whether the pause and a restart's preparation are over (registering
    /// the waker while they are not).
    fn started(&mut self, cx: &mut Context<'_>) -> bool {
        if let Some(sleep) = self.pause.as_mut() {
            if sleep.as_mut().poll(cx).is_pending() {
                return false;
            }
            self.pause = None;
        }
        if let Some(rejoin) = self.rejoin.as_mut() {
            let Poll::Ready(guard) = rejoin.as_mut().poll(cx) else { return false };
            self.rejoin = None;
            self.registering = Some(guard);
        }
        true
    }
}

impl<B: Backend> Backend for Supervised<B> {
    type Task = B::Task;
    type Error = B::Error;

    fn poll_ready(&mut self, cx: &mut Context<'_>, worker: &WorkerContext) -> Poll<Result<(), Self::Error>> {
        if !self.started(cx) {
            return Poll::Pending;
        }
        let ready = self.backend.poll_ready(cx, worker);
        // The storage registers on its first readiness: done or failed now.
        if ready.is_ready() {
            self.registering = None;
        }
        ready
    }

    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
        worker: &WorkerContext,
    ) -> Poll<Option<Result<Self::Task, Self::Error>>> {
        if !self.started(cx) {
            return Poll::Pending;
        }
        self.backend.poll_next(cx, worker)
    }

    fn poll_close(&mut self, cx: &mut Context<'_>, worker: &WorkerContext) -> Poll<Result<(), Self::Error>> {
        self.backend.poll_close(cx, worker)
    }
}

// The storage's own configuration, middleware and codec (apalis's delegates).
apalis_core::delegate_config!(Supervised<B>, backend);
apalis_core::delegate_codec!(Supervised<B>, backend);

#[cfg(test)]
mod tests {
    use super::*;
    use apalis::prelude::MemoryStorage;

    #[test]
    fn restarts_back_off_while_failures_go_on_and_start_over_after_a_quiet_minute() {
        let mut r = Restarts::default();
        let t = Instant::now();
        let waits: Vec<u128> = (0..8).map(|i| r.next(t + Duration::from_secs(i)).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(r.next(t + Duration::from_secs(120)), Duration::from_millis(100));
    }

    #[test]
    fn a_failure_pauses_only_the_next_start_of_the_worker_that_failed() {
        let s = Supervisor::default();
        let t = Instant::now();
        assert_eq!(s.pause_before_start("w-nix"), Duration::ZERO, "a first start waits nothing");
        assert_eq!(s.failed("w-nix", t), (Duration::from_millis(100), true));
        assert_eq!(s.failed("w-nix", t), (Duration::from_millis(200), false));
        assert_eq!(s.pause_before_start("w"), Duration::ZERO, "another queue worker's failures pause it");
        assert_eq!(s.pause_before_start("w-nix"), Duration::from_millis(200));
        assert_eq!(s.pause_before_start("w-nix"), Duration::ZERO, "the pause is taken twice");
    }

    #[test]
    fn a_run_of_failures_is_reported_once_for_the_process_and_again_after_a_quiet_minute() {
        let s = Supervisor::default();
        let t = Instant::now();
        assert_eq!(s.failed("w-nix", t), (Duration::from_millis(100), true));
        assert_eq!(s.failed("w", t + Duration::from_secs(1)), (Duration::from_millis(100), false));
        assert_eq!(s.failed("w", t + Duration::from_secs(62)), (Duration::from_millis(100), true));
    }

    /// On a runtime of one thread: the held-back storage is not ready at
    /// first, another task of the same thread runs while it waits (a thread
    /// sleep would hold that task until the pause is over), and it becomes
    /// ready when its timer fires.
    #[tokio::test]
    async fn a_restarted_queue_worker_waits_its_pause_on_a_timer_and_the_thread_runs_on() {
        let worker = WorkerContext::new("w-nix");
        let mut storage = Supervised::new(MemoryStorage::<u32>::new(), Duration::from_millis(300));
        let waker = futures::task::noop_waker();
        let ready_now = storage.poll_ready(&mut Context::from_waker(&waker), &worker).is_ready();
        assert!(!ready_now, "ready before its pause");
        let other = tokio::spawn(async { "the other task" });
        let first = tokio::select! {
            biased;
            done = other => done.unwrap(),
            _ = std::future::poll_fn(|cx| storage.poll_ready(cx, &worker)) => "the storage",
        };
        assert_eq!(first, "the other task", "the pause held the thread");
        let started = std::future::poll_fn(|cx| storage.poll_ready(cx, &worker)).await;
        assert!(started.is_ok(), "{started:?}");
        let again = storage.poll_ready(&mut Context::from_waker(&waker), &worker).is_ready();
        assert!(again, "the pause is taken again after it was over");
    }
}
