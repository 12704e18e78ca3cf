//! One clock for the fleet. Every time that more than one process compares
//! (a job's due time, a lease, a deadline, a ticket's expiry, a retention
//! cutoff, the stored `queued_at` and `finished_at`, a build id's stamp)
//! comes from the database's clock, never from the host's wall clock, which
//! may be minutes off when NTP fails on one host: a job pushed by any api is
//! due to every worker at once, and retention counts from the
//! database's time.
//!
//! The api and the worker read the database's clock when they start and
//! every [`CHECK_EVERY`] after ([`ClockWatch`]), and keep an anchor: the
//! database's time at that reading, corrected by half the round trip, and
//! the monotonic instant it was taken. [`now_ms`] is the anchor plus the
//! monotonic time since, so times taken in one process never jump with the
//! host's wall clock and durations between them are monotonic durations;
//! a reading never moves [`now_ms`] backwards. Before the first reading
//! (tools and tests that open no database) it is the host's wall clock.
//!
//! On PostgreSQL the database's clock is its server's (`clock_timestamp()`).
//! SQLite has no server: every process on one SQLite file runs on the host
//! that holds it, so its clock is that host's, as SQLite reads it; what
//! still matters there is that durations and the times of one process do
//! not jump when the wall clock is stepped.
//!
//! Each reading also compares the host's wall clock with the database's:
//! past `SLIPWAY_CLOCK_SKEW_LIMIT` (default 2 s) the process logs a warning
//! naming the skew, the api's `/readyz` warns, and the gauge
//! `slipway_clock_skew_seconds{host}` shows it (docs/OPERATOR-GUIDE.md,
//! "Clocks").

use crate::metrics::Metrics;
use crate::store::{Db, StoreError};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

/// How often a process reads the database's clock again.
pub const CHECK_EVERY: Duration = Duration::from_secs(60);

/// The database's time (µs since the epoch) at a monotonic instant.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    db_us: i64,
    at: Instant,
}

static ANCHOR: RwLock<Option<Anchor>> = RwLock::new(None);

/// The latest time [`now_us`] returned, so that a new anchor never makes
/// it go backwards.
static LAST_US: AtomicI64 = AtomicI64::new(i64::MIN);

/// The host's wall clock, µs since the epoch.
pub fn host_now_us() -> i64 {
    (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000) as i64
}

/// The fleet's time now, µs since the epoch: the database's clock as last
/// read, advanced on the monotonic clock (the host's wall clock before any
/// reading). Never goes backwards within a process.
pub fn now_us() -> i64 {
    let anchor = *ANCHOR.read().unwrap_or_else(PoisonError::into_inner);
    let candidate = match anchor {
        Some(a) => a.db_us.saturating_add(i64::try_from(a.at.elapsed().as_micros()).unwrap_or(i64::MAX)),
        None => host_now_us(),
    };
    let last = LAST_US.fetch_max(candidate, Ordering::AcqRel);
    candidate.max(last)
}

/// [`now_us`] in milliseconds.
pub fn now_ms() -> i64 {
    now_us().div_euclid(1000)
}

/// [`now_us`] as a date and time (UTC).
pub fn now() -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(now_us()) * 1000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// One reading of the database's clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// The host's wall clock minus the database's, in seconds (positive:
    /// this host is ahead).
    pub skew_s: f64,
}

/// Reads the database's clock and anchors [`now_us`] to it; how far the
/// host's wall clock is from it.
pub async fn sync(db: &Db) -> Result<Reading, StoreError> {
    // Only the query is timed, not the wait for a pooled connection.
    let mut conn = db.acquire().await?;
    let before = Instant::now();
    let host_before = host_now_us();
    let db_ms = crate::store::db_now_ms(&mut conn).await?;
    let round_trip = before.elapsed();
    drop(conn);
    let half = i64::try_from(round_trip.as_micros() / 2).unwrap_or(0);
    // The reading was taken about half-way through the round trip.
    let db_us = db_ms * 1000 + half;
    let at = Instant::now();
    *ANCHOR.write().unwrap_or_else(PoisonError::into_inner) = Some(Anchor { db_us, at });
    let host_mid = host_before + half;
    let skew_s = (host_mid - (db_us - half)) as f64 / 1e6;
    Ok(Reading { skew_s })
}

/// A process's watch over its clock: [`sync`] now and every
/// [`CHECK_EVERY`], a skew past the limit logged (once when it begins,
/// once when it ends), exported as `slipway_clock_skew_seconds{host}` and
/// given by [`ClockWatch::warning`]. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct ClockWatch {
    limit: Duration,
    host: String,
    metrics: Metrics,
    skewed: Arc<Mutex<Option<f64>>>,
}

impl ClockWatch {
    /// A watch that warns past `limit`, naming this host ([`hostname`]).
    pub fn new(limit: Duration, metrics: Metrics) -> Self {
        let host = hostname();
        Self { limit, host, metrics, skewed: Arc::default() }
    }

    /// One reading, with its log line, gauge and warning state; the
    /// reading, or the error when the database did not answer (the anchor
    /// is kept).
    pub async fn check(&self, db: &Db) -> Result<Reading, StoreError> {
        let reading = sync(db).await?;
        self.metrics.clock_skew(&self.host, reading.skew_s);
        let off = reading.skew_s.abs() > self.limit.as_secs_f64();
        let mut skewed = self.skewed.lock().unwrap_or_else(PoisonError::into_inner);
        match (off, skewed.is_some()) {
            (true, false) => tracing::warn!(
                host = %self.host,
                skew_s = reading.skew_s,
                limit_s = self.limit.as_secs_f64(),
                "this host's clock is off from the database's by more than SLIPWAY_CLOCK_SKEW_LIMIT: Slipway takes \
                 every shared time from the database, but fix the host's time synchronisation (NTP)"
            ),
            (false, true) => {
                tracing::info!(host = %self.host, skew_s = reading.skew_s, "this host's clock agrees with the database's again")
            }
            _ => {}
        }
        *skewed = off.then_some(reading.skew_s);
        Ok(reading)
    }

    /// Checks every [`CHECK_EVERY`] until the process ends (the first
    /// check is the caller's); spawn it.
    pub async fn run(self, db: Db) {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + CHECK_EVERY, CHECK_EVERY);
        loop {
            tick.tick().await;
            if let Err(e) = self.check(&db).await {
                tracing::debug!(error = %e, "the database's clock could not be read; keeping the last reading");
            }
        }
    }

    /// A warning for readiness while this host's clock is off by more than
    /// the limit: the host, the skew, and what to do.
    pub fn warning(&self) -> Option<String> {
        let skew = (*self.skewed.lock().unwrap_or_else(PoisonError::into_inner))?;
        let way = if skew > 0.0 { "ahead of" } else { "behind" };
        Some(format!(
            "the clock of host {} is {:.1} s {way} the database's (more than SLIPWAY_CLOCK_SKEW_LIMIT, {} s): \
             Slipway takes every shared time from the database, but the host's time synchronisation (NTP) needs \
             fixing",
            self.host,
            skew.abs(),
            self.limit.as_secs_f64()
        ))
    }
}

/// This host's name (`/etc/hostname`, else the kernel's), or `host`: the
/// label of the skew gauge, and the host part of a worker's name.
pub fn hostname() -> String {
    ["/etc/hostname", "/proc/sys/kernel/hostname"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .map(|h| h.trim().to_owned())
        .find(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_never_goes_backwards_when_a_new_anchor_is_behind() {
        let first = now_us();
        *ANCHOR.write().unwrap() = Some(Anchor { db_us: first - 3_600_000_000, at: Instant::now() });
        let after = now_us();
        assert!(after >= first, "{after} < {first}");
        *ANCHOR.write().unwrap() = None;
    }
}
