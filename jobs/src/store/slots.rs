//! Fleet-wide slots (MS-7, seed 002 "Cost and latency"): a named pool of `cap`
//! slots shared by every worker and api replica on one database. Acquiring
//! never waits: when every slot is taken the caller is refused at once (the
//! api answers `503`). A slot is a lease: a holder that dies without releasing
//! it frees it when the lease expires, so a crash never shrinks the pool.

use super::{now_ms, Db, StoreError, Q};
use std::time::Duration;

/// A held slot; release it with [`release`] (or let the lease run out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The pool, for example `nix`.
    pub pool: String,
    /// Who holds it (unique per acquisition).
    pub holder: String,
    /// Unix ms after which the slot is free again.
    pub expires_at: i64,
}

/// Takes a slot of `pool` for `holder` for at most `lease`, or `None` at once
/// when all `cap` slots are held. Acquisitions are serialised per pool (the
/// SQLite write lock; a transaction-scoped advisory lock on PostgreSQL).
pub async fn try_acquire(
    db: &Db,
    pool: &str,
    cap: u32,
    holder: &str,
    lease: Duration,
) -> Result<Option<Lease>, StoreError> {
    let now = now_ms();
    let mut tx = db.begin_write().await?;
    tx.lock_name(&format!("slots:{pool}")).await?;
    Q::new("DELETE FROM slots WHERE pool = $1 AND expires_at < $2").text(pool).int(now).execute(&mut tx).await?;
    let held =
        Q::new("SELECT COUNT(*) AS n FROM slots WHERE pool = $1").text(pool).fetch_one(&mut tx).await?.int("n")?;
    if held >= i64::from(cap) {
        tx.rollback().await?;
        return Ok(None);
    }
    let expires_at = now + lease.as_millis() as i64;
    Q::new("INSERT INTO slots (pool, holder, acquired_at, expires_at) VALUES ($1, $2, $3, $4)")
        .text(pool)
        .text(holder)
        .int(now)
        .int(expires_at)
        .execute(&mut tx)
        .await?;
    tx.commit().await?;
    Ok(Some(Lease { pool: pool.to_owned(), holder: holder.to_owned(), expires_at }))
}

/// Gives a slot back.
pub async fn release(db: &Db, lease: &Lease) -> Result<(), StoreError> {
    Q::new("DELETE FROM slots WHERE pool = $1 AND holder = $2")
        .text(&lease.pool)
        .text(&lease.holder)
        .execute_on(db)
        .await?;
    Ok(())
}

/// How many slots of `pool` are held now (expired leases not counted).
pub async fn held(db: &Db, pool: &str) -> Result<i64, StoreError> {
    let mut conn = db.acquire().await?;
    Q::new("SELECT COUNT(*) AS n FROM slots WHERE pool = $1 AND expires_at >= $2")
        .text(pool)
        .int(now_ms())
        .fetch_one(&mut conn)
        .await?
        .int("n")
}
