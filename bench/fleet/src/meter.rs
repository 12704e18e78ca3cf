//! What PostgreSQL spends over a window, read from outside the workload:
//! CPU of the server's backends serving the scratch database (from
//! `/proc/PID/schedstat`, nanoseconds), CPU of every PostgreSQL process
//! (from `/proc/PID/stat`, clock ticks, reaped children included), the WAL
//! written (`pg_current_wal_lsn()`, server-wide), the commits of this
//! database and of the others (how much of the WAL may be someone else's),
//! and this process's own CPU (the simulator, the "client").
//!
//! These statements read PostgreSQL's statistics views for the measurement
//! only; everything the simulated workers do goes through the store.

use anyhow::Context as _;
use serde_json::{json, Value};
use sqlx::{Connection as _, PgConnection, Row as _};
use std::collections::HashMap;
use std::time::Instant;

/// One reading of the counters.
pub struct Snapshot {
    at: Instant,
    /// CPU ns of each backend of the database, by pid.
    backends: HashMap<i32, u64>,
    /// CPU ticks of every process whose command starts with `postgres`.
    all_postgres_ticks: u64,
    /// The WAL position, in bytes from `0/0`.
    wal: i64,
    /// Commits and rollbacks of the scratch database.
    own_xacts: i64,
    /// Commits and rollbacks of every other database.
    other_xacts: i64,
    /// This process's CPU ticks (user and system).
    client_ticks: u64,
    /// Machine-wide busy and total ticks.
    machine: (u64, u64),
}

/// Reads the counters over a connection of its own to the scratch database
/// (whose backend is left out of the figures).
pub struct Meter {
    conn: PgConnection,
    database: String,
}

impl Meter {
    /// A meter of `database`, reading through `url` (a connection to it).
    pub async fn connect(url: &str, database: &str) -> anyhow::Result<Self> {
        let conn = PgConnection::connect(url).await.context("the meter's connection")?;
        Ok(Self { conn, database: database.to_owned() })
    }

    /// Closes the meter's connection.
    pub async fn close(self) {
        let _ = self.conn.close().await;
    }

    /// Reads every counter now.
    pub async fn snapshot(&mut self) -> anyhow::Result<Snapshot> {
        let pids: Vec<i32> =
            sqlx::query("SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()")
                .bind(&self.database)
                .fetch_all(&mut self.conn)
                .await?
                .iter()
                .map(|r| r.get::<i32, _>(0))
                .collect();
        let row = sqlx::query(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint AS wal,
                    COALESCE(SUM(xact_commit + xact_rollback) FILTER (WHERE datname = $1), 0)::bigint AS own,
                    COALESCE(SUM(xact_commit + xact_rollback) FILTER (WHERE datname IS DISTINCT FROM $1), 0)::bigint AS other
             FROM pg_stat_database",
        )
        .bind(&self.database)
        .fetch_one(&mut self.conn)
        .await?;
        let backends = pids.into_iter().filter_map(|pid| schedstat_ns(pid).map(|ns| (pid, ns))).collect();
        Ok(Snapshot {
            at: Instant::now(),
            backends,
            all_postgres_ticks: postgres_ticks(),
            wal: row.get("wal"),
            own_xacts: row.get("own"),
            other_xacts: row.get("other"),
            client_ticks: stat_ticks("self").unwrap_or(0),
            machine: machine_ticks(),
        })
    }
}

/// What was spent between two snapshots, as JSON: `seconds` of the window;
/// `pg_cpu_s` (the database's backends; a backend that started inside the
/// window counts from its start, one that ended is lost and counted in
/// `backends_lost`), `pg_all_cpu_s` (every PostgreSQL process, any
/// database, background writers included), `wal_bytes` (server-wide),
/// `xacts` (this database's), `other_xacts` (every other database's: when
/// not near zero, part of the WAL is someone else's), `client_cpu_s` and
/// `machine_busy_pct`.
pub fn spent(before: &Snapshot, after: &Snapshot) -> Value {
    let hz = ticks_per_second();
    let mut ns = 0u64;
    let mut lost = 0;
    for (pid, was) in &before.backends {
        match after.backends.get(pid) {
            Some(now) => ns += now.saturating_sub(*was),
            None => lost += 1,
        }
    }
    for (pid, now) in &after.backends {
        if !before.backends.contains_key(pid) {
            ns += now;
        }
    }
    let (busy, total) = (after.machine.0 - before.machine.0, after.machine.1 - before.machine.1);
    json!({
        "seconds": round3((after.at - before.at).as_secs_f64()),
        "pg_cpu_s": round3(ns as f64 / 1e9),
        "pg_backends": after.backends.len(),
        "backends_lost": lost,
        "pg_all_cpu_s": round3(after.all_postgres_ticks.saturating_sub(before.all_postgres_ticks) as f64 / hz),
        "wal_bytes": after.wal - before.wal,
        "xacts": after.own_xacts - before.own_xacts,
        "other_xacts": after.other_xacts - before.other_xacts,
        "client_cpu_s": round3(after.client_ticks.saturating_sub(before.client_ticks) as f64 / hz),
        "machine_busy_pct": if total > 0 { round3(100.0 * busy as f64 / total as f64) } else { 0.0 },
    })
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Linux gives `/proc` times in `USER_HZ` ticks: 100 a second on every
/// architecture it runs on.
fn ticks_per_second() -> f64 {
    100.0
}

/// The time process `pid` has run on a CPU, ns (`/proc/PID/schedstat`'s first field).
fn schedstat_ns(pid: i32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?.split_whitespace().next()?.parse().ok()
}

/// utime + stime + cutime + cstime of `/proc/<which>/stat`, in ticks.
fn stat_ticks(which: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{which}/stat")).ok()?;
    let rest = text.get(text.rfind(')')? + 2..)?;
    Some(rest.split_whitespace().skip(11).take(4).filter_map(|f| f.parse::<u64>().ok()).sum())
}

/// The CPU ticks of every process named `postgres…` (the postmaster holds
/// its reaped backends' time).
fn postgres_ticks() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())).map(str::to_owned))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end().starts_with("postgres"))
        })
        .filter_map(|pid| stat_ticks(&pid))
        .sum()
}

/// Busy and total ticks of the whole machine (`/proc/stat`; idle and iowait are not busy).
fn machine_ticks() -> (u64, u64) {
    let Ok(text) = std::fs::read_to_string("/proc/stat") else { return (0, 0) };
    let fields: Vec<u64> =
        text.lines().next().unwrap_or("").split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    (total - idle, total)
}
