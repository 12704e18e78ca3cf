//! Wake-ups for the deployment channel (DL-3) across api replicas.
//!
//! Events are rows ([`crate::store::events`]), written by whichever
//! process changed a deployment: this api, another replica, or a worker on
//! another host. One [`Hub`] per api process learns that a deployment has
//! new events and wakes the streams that follow it, which then read the
//! rows (so a missed wake-up delays an event, never loses it):
//!
//! - on PostgreSQL it LISTENs on [`events::NOTIFY_CHANNEL`], which the
//!   writing transaction notifies at commit, with a
//!   [`crate::store::listen::Listener`] (which connects again with backoff
//!   and logs the loss and the return); once it listens again, every stream
//!   is woken once (notifications sent meanwhile are lost);
//! - on SQLite, whose writers are serialised, it polls for rows past the
//!   last `seq` it saw every [`SQLITE_POLL`].
//!
//! A stream follows one deployment ([`Hub::follow`]): the hub keeps one
//! topic per deployment that has followers, so a wake-up reaches only that
//! deployment's streams (not every stream of the process), and the
//! followers of one deployment woken together share one read of its new
//! events ([`Follow::read`]) instead of one read each.
//!
//! The hub starts with the first stream and runs for the life of the process.

use crate::store::listen::{Heard, Listener};
use crate::store::{events, Db, StoreError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;
use tokio::sync::watch;

/// How often the hub looks for new events on SQLite.
pub const SQLITE_POLL: Duration = Duration::from_millis(100);

/// How long the hub waits before it tries again after a database error.
const RETRY: Duration = Duration::from_secs(1);

/// The followed deployments, each with its topic.
type Topics = Mutex<HashMap<Arc<str>, Arc<Topic>>>;

/// One followed deployment: a wake-up count that grows with every
/// notification of its events (or of any deployment's, after the hub missed
/// some), and the last read of its events, shared by its followers.
#[derive(Debug)]
struct Topic {
    wakes: watch::Sender<u64>,
    last_read: tokio::sync::Mutex<Option<SharedRead>>,
}

/// One read of a deployment's events ([`events::since`]), kept for the
/// other followers woken with the reader.
#[derive(Debug)]
struct SharedRead {
    /// The wake-up count when the read began: every event notified up to
    /// it had committed, so the read saw it.
    count: u64,
    /// The events read came after this number.
    after: i64,
    /// At most `limit` events, oldest first.
    events: Arc<[events::Event]>,
    /// The page limit the read had; a full page means more may follow.
    limit: i64,
}

/// The process's wake-up source for deployment streams, and the signal
/// that ends every stream when the process stops.
#[derive(Debug)]
pub struct Hub {
    db: Db,
    started: OnceLock<()>,
    topics: Arc<Topics>,
    closing: watch::Sender<bool>,
}

impl Hub {
    /// A hub over `db`; nothing runs until the first [`Hub::follow`].
    pub fn new(db: Db) -> Self {
        Self { db, started: OnceLock::new(), topics: Arc::default(), closing: watch::Sender::new(false) }
    }

    /// Ends every stream of this process (a graceful shutdown waits for
    /// open responses, and a stream would never end by itself).
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Resolves once [`Hub::close`] was called (at once if it was).
    pub fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.closing.subscribe();
        async move {
            let _ = rx.wait_for(|closed| *closed).await;
        }
    }

    /// Follows deployment `id` from now on: every wake-up of it after this
    /// call resolves [`Follow::woken`] (starting the hub's task on first
    /// use). Subscribe before the stream's first read, so that nothing
    /// committed after that read goes unnoticed.
    pub fn follow(&self, id: &str) -> Follow {
        self.started.get_or_init(|| {
            tokio::spawn(run(self.db.clone(), self.topics.clone()));
        });
        let mut topics = self.topics.lock().unwrap_or_else(PoisonError::into_inner);
        let topic = topics
            .entry(Arc::from(id))
            .or_insert_with(|| Arc::new(Topic { wakes: watch::Sender::new(0), last_read: Default::default() }))
            .clone();
        let wakes = topic.wakes.subscribe();
        let seen = *wakes.borrow();
        Follow { id: Arc::from(id), topic, wakes: Some(wakes), seen, topics: self.topics.clone() }
    }

    /// Deployments followed now (each with one or more streams).
    pub fn followed(&self) -> usize {
        self.topics.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

/// One stream's subscription to a deployment's wake-ups ([`Hub::follow`]);
/// the deployment is forgotten by the hub when its last follower drops.
#[derive(Debug)]
pub struct Follow {
    id: Arc<str>,
    topic: Arc<Topic>,
    wakes: Option<watch::Receiver<u64>>,
    /// The wake-up count this follower last saw.
    seen: u64,
    topics: Arc<Topics>,
}

impl Follow {
    /// Resolves when the deployment may have new events: a wake-up came
    /// since the last call (or since [`Hub::follow`]). Wake-ups that came
    /// meanwhile count as one.
    pub async fn woken(&mut self) {
        let wakes = self.wakes.as_mut().expect("a follow's receiver lives until it drops");
        // The sender lives in the topic this follow holds: never closed.
        let _ = wakes.changed().await;
        self.seen = *wakes.borrow_and_update();
    }

    /// Whether a wake-up came since the last [`Follow::woken`] (or since
    /// [`Hub::follow`]), without waiting or taking it.
    pub fn is_woken(&self) -> bool {
        self.wakes.as_ref().is_some_and(|w| w.has_changed().unwrap_or(false))
    }

    /// The deployment followed.
    pub fn deployment(&self) -> &str {
        &self.id
    }

    /// The deployment's events numbered after `after`, oldest first, at
    /// most `limit`, as [`events::since`] reads them on a connection of
    /// `db`. The followers woken by the same wake-ups share one read: a read
    /// that began after this follower's last wake-up, from a number no later
    /// than `after`, is used again (unless it was a full page from an
    /// earlier number); otherwise this follower reads, and its read is kept
    /// for the others. `fresh` skips the shared read (a periodic recheck).
    pub async fn read(&self, db: &Db, after: i64, limit: i64, fresh: bool) -> Result<Vec<events::Event>, StoreError> {
        let mut last = self.topic.last_read.lock().await;
        if let Some(r) = last.as_ref().filter(|r| !fresh && r.count >= self.seen && r.limit == limit) {
            let full = r.events.len() as i64 >= r.limit;
            if r.after == after || (r.after < after && !full) {
                return Ok(r.events.iter().filter(|e| e.n > after).cloned().collect());
            }
        }
        let count = *self.topic.wakes.borrow();
        let read = events::since(&mut db.acquire().await?, &self.id, after, limit).await?;
        *last = Some(SharedRead { count, after, events: read.clone().into(), limit });
        Ok(read)
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        let mut topics = self.topics.lock().unwrap_or_else(PoisonError::into_inner);
        drop(self.wakes.take());
        if self.topic.wakes.receiver_count() == 0 {
            topics.remove(&self.id);
        }
    }
}

/// Wakes the followers of `id`, or of every deployment (`None`).
fn wake(topics: &Topics, id: Option<&str>) {
    let topics = topics.lock().unwrap_or_else(PoisonError::into_inner);
    let bump = |t: &Arc<Topic>| t.wakes.send_modify(|n| *n = n.wrapping_add(1));
    match id {
        Some(id) => topics.get(id).into_iter().for_each(bump),
        None => topics.values().for_each(bump),
    }
}

/// The hub's task: forever, on the engine's way.
async fn run(db: Db, topics: Arc<Topics>) {
    match db {
        Db::Postgres(pool) => listen(pool, topics).await,
        db @ Db::Sqlite(_) => poll(db, topics).await,
    }
}

async fn listen(pool: sqlx::PgPool, topics: Arc<Topics>) {
    let mut listener = Listener::new(&pool, "deployment channel", &[events::NOTIFY_CHANNEL]);
    loop {
        match listener.recv().await {
            Heard::Notification(n) => wake(&topics, Some(n.payload())),
            // It listens (again): events committed before are read by the
            // streams themselves, and what was notified meanwhile is lost,
            // so everyone looks.
            Heard::Listening => wake(&topics, None),
        }
    }
}

async fn poll(db: Db, topics: Arc<Topics>) {
    let mut seen = None;
    loop {
        let step = async {
            let mut conn = db.acquire().await?;
            match seen {
                None => Ok::<_, StoreError>((Vec::new(), events::last_seq(&mut conn).await?)),
                Some(seq) => events::after(&mut conn, seq).await,
            }
        };
        match step.await {
            Ok((ids, newest)) => {
                if seen.is_none() {
                    wake(&topics, None);
                }
                for id in ids {
                    wake(&topics, Some(&id));
                }
                seen = Some(newest);
                tokio::time::sleep(SQLITE_POLL).await;
            }
            Err(e) => {
                tracing::debug!(error = %e, "the deployment channel cannot poll yet");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}
