//! Storage faults the api answered `503 storage_unavailable` for (a
//! worker's state folder or Nix store, or the database's disk, full or
//! failing), remembered so that an operator hears of them: logged at ERROR
//! when a stretch of them begins (then at most once a minute while it goes
//! on), counted in `slipway_storage_faults_total{storage}`, and given as a
//! `/readyz` warning for [`WARN_FOR`] after the last one.

use crate::error::StorageFault;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use slipway_jobs::metrics::Metrics;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long after the last fault `/readyz` still warns of it.
pub const WARN_FOR: Duration = Duration::from_secs(300);

/// How often a stretch of faults of one storage is logged again.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// The storage faults seen lately, by storage. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct StorageHealth {
    metrics: Metrics,
    last: Arc<Mutex<BTreeMap<&'static str, Seen>>>,
}

#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    logged: Instant,
    message: String,
}

impl StorageHealth {
    /// Nothing seen yet; the counter shows at zero for both storages.
    pub fn new(metrics: Metrics) -> Self {
        metrics.register_storage_faults();
        Self { metrics, last: Arc::default() }
    }

    /// An answer said `storage` could not be written (`message`, which
    /// holds no secret: it is what the client was told).
    pub fn fault(&self, storage: &'static str, message: &str) {
        self.metrics.storage_fault(storage);
        let now = Instant::now();
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let log = last.get(storage).is_none_or(|s| now.duration_since(s.logged) >= LOG_EVERY);
        let logged = if log { now } else { last[storage].logged };
        if log {
            tracing::error!(storage, error = message, "storage cannot be written: requests that need it answer 503");
        }
        last.insert(storage, Seen { at: now, logged, message: message.to_owned() });
    }

    /// One warning per storage with a fault in the last [`WARN_FOR`].
    pub fn warnings(&self) -> Vec<String> {
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        last.iter()
            .filter(|(_, s)| s.at.elapsed() < WARN_FOR)
            .map(|(storage, s)| {
                let what = match *storage {
                    "database" => "the database's disk",
                    _ => "a worker's state folder or Nix store",
                };
                format!(
                    "{what} could not be written {} s ago, and requests that need it answered 503 \
                     storage_unavailable: {}",
                    s.at.elapsed().as_secs(),
                    s.message
                )
            })
            .collect()
    }
}

/// Router middleware: tells the app's [`StorageHealth`] of every answer
/// marked with a [`StorageFault`].
pub async fn watch(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    if let Some(StorageFault { storage, message }) = response.extensions().get::<StorageFault>() {
        app.storage.fault(storage, message);
    }
    response
}
