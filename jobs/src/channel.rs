//! Wake-ups for the deployment channel (DL-3) across api replicas.
//!
//! Events are rows ([`crate::store::events`]), written by whichever
//! process changed a deployment: this api, another replica, or a worker on
//! another host. One [`Hub`] per api process learns that a deployment has
//! new events and wakes the streams that follow it, which then read the
//! rows themselves (so a missed wake-up delays an event, never loses it):
//!
//! - on PostgreSQL it LISTENs on [`events::NOTIFY_CHANNEL`], which the
//!   writing transaction notifies at commit, with a
//!   [`crate::store::listen::Listener`] (which connects again with backoff
//!   and logs the loss and the return); once it listens again, every stream
//!   is woken once (notifications sent meanwhile are lost);
//! - on SQLite, whose writers are serialised, it polls for rows past the
//!   last `seq` it saw every [`SQLITE_POLL`].
//!
//! The hub starts with the first stream and runs for the life of the process.

use crate::store::listen::{Heard, Listener};
use crate::store::{events, Db};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::{broadcast, watch};

/// How often the hub looks for new events on SQLite.
pub const SQLITE_POLL: Duration = Duration::from_millis(100);

/// How long the hub waits before it tries again after a database error.
const RETRY: Duration = Duration::from_secs(1);

/// A wake-up: this deployment has new events, or any may have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// Deployment id.
    Deployment(Arc<str>),
    /// Every stream should look (the hub may have missed notifications).
    All,
}

impl Wake {
    /// Whether a stream following deployment `id` should look.
    pub fn concerns(&self, id: &str) -> bool {
        match self {
            Self::Deployment(d) => &**d == id,
            Self::All => true,
        }
    }
}

/// The process's wake-up source for deployment streams, and the signal
/// that ends every stream when the process stops.
#[derive(Debug)]
pub struct Hub {
    db: Db,
    sender: OnceLock<broadcast::Sender<Wake>>,
    closing: watch::Sender<bool>,
}

impl Hub {
    /// A hub over `db`; nothing runs until the first [`Hub::subscribe`].
    pub fn new(db: Db) -> Self {
        Self { db, sender: OnceLock::new(), closing: watch::Sender::new(false) }
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

    /// A receiver of every wake-up from now on (starting the hub's task on
    /// first use). A receiver that lags behind gets `Lagged`, which a
    /// stream treats as [`Wake::All`].
    pub fn subscribe(&self) -> broadcast::Receiver<Wake> {
        self.sender
            .get_or_init(|| {
                let (sender, _) = broadcast::channel(1024);
                tokio::spawn(run(self.db.clone(), sender.clone()));
                sender
            })
            .subscribe()
    }
}

/// The hub's task: forever, on the engine's way.
async fn run(db: Db, sender: broadcast::Sender<Wake>) {
    match db {
        Db::Postgres(pool) => listen(pool, sender).await,
        db @ Db::Sqlite(_) => poll(db, sender).await,
    }
}

async fn listen(pool: sqlx::PgPool, sender: broadcast::Sender<Wake>) {
    let mut listener = Listener::new(&pool, "deployment channel", &[events::NOTIFY_CHANNEL]);
    loop {
        match listener.recv().await {
            Heard::Notification(n) => {
                let _ = sender.send(Wake::Deployment(Arc::from(n.payload())));
            }
            // It listens (again): events committed before are read by the
            // streams themselves, and what was notified meanwhile is lost,
            // so everyone looks.
            Heard::Listening => {
                let _ = sender.send(Wake::All);
            }
        }
    }
}

async fn poll(db: Db, sender: broadcast::Sender<Wake>) {
    let mut seen = None;
    loop {
        let step = async {
            let mut conn = db.acquire().await?;
            match seen {
                None => Ok::<_, crate::store::StoreError>((Vec::new(), events::last_seq(&mut conn).await?)),
                Some(seq) => events::after(&mut conn, seq).await,
            }
        };
        match step.await {
            Ok((ids, newest)) => {
                if seen.is_none() {
                    let _ = sender.send(Wake::All);
                }
                for id in ids {
                    let _ = sender.send(Wake::Deployment(Arc::from(id)));
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
