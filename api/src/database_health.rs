//! Database outages, logged once each.
//!
//! While the database is away every request that needs it answers `503`
//! (and a load balancer polls `GET /readyz` every few seconds); one log line
//! per answer would bury everything else. [`DatabaseHealth`] turns those
//! answers into two lines per outage: an ERROR when the first answer finds
//! the database away, and an INFO when it answers again. Its return is found
//! by a probe that runs only during an outage, every [`PROBE_EVERY`], so it
//! is logged even when no request comes.

use crate::error::DatabaseAway;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use slipway_jobs::store::Db;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// How often the database is asked during an outage whether it is back.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// Whether the database is away, and since when. Cheap to clone; clones
/// share the state.
#[derive(Debug, Clone)]
pub struct DatabaseHealth {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    db: Db,
    /// When the current outage began; `None` while the database answers.
    away_since: Mutex<Option<Instant>>,
}

impl DatabaseHealth {
    /// Watches `db`, which is taken to answer until told otherwise.
    pub fn new(db: Db) -> Self {
        Self { inner: Arc::new(Inner { db, away_since: Mutex::new(None) }) }
    }

    /// True during an outage.
    pub fn is_away(&self) -> bool {
        self.inner.away_since.lock().expect("health lock").is_some()
    }

    /// A request found the database away (`why`: the driver's words, never
    /// the URL). Returns true, logs at ERROR and starts the probe (when
    /// called inside a tokio runtime) only when this begins an outage;
    /// further calls during it do nothing.
    pub fn away(&self, why: &str) -> bool {
        {
            let mut since = self.inner.away_since.lock().expect("health lock");
            if since.is_some() {
                return false;
            }
            *since = Some(Instant::now());
        }
        tracing::error!(
            error = why,
            "the database is away: requests that need it answer 503 until it is back (logged once per outage)"
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(probe(Arc::downgrade(&self.inner)));
        }
        true
    }

    /// The database answered. Returns true and logs at INFO only when this
    /// ends an outage.
    pub fn answered(&self) -> bool {
        let Some(since) = self.inner.away_since.lock().expect("health lock").take() else { return false };
        tracing::info!(outage_secs = since.elapsed().as_secs_f64(), "the database answers again");
        true
    }
}

/// Asks the database every [`PROBE_EVERY`] until it answers (or the app or
/// its pool is gone), then ends the outage.
async fn probe(inner: Weak<Inner>) {
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        let Some(inner) = inner.upgrade() else { return };
        let health = DatabaseHealth { inner };
        if !health.is_away() {
            return;
        }
        let answer = async { slipway_jobs::store::ping(&mut health.inner.db.acquire().await?).await };
        match answer.await {
            Ok(()) => {
                health.answered();
                return;
            }
            // Closed at shutdown: it will not come back.
            Err(e) if e.is_closed() => return,
            Err(_) => {}
        }
    }
}

/// Router middleware: tells the app's [`DatabaseHealth`] about every answer
/// given because the database is away (marked with [`DatabaseAway`]).
pub async fn watch(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    if let Some(DatabaseAway(why)) = response.extensions().get::<DatabaseAway>() {
        app.database_health.away(why);
    }
    response
}
