//! Idempotency keys (`idempotency_keys`, migration 0022; IK-1): what the
//! api's `Idempotency-Key` layer (`api/src/idempotency.rs`) claims before a
//! request runs and the answer it stores after, so that a retry with the
//! same key is answered the first answer again instead of running twice.
//!
//! A key belongs to one token subject ([`Scope`]: `iss` and `sub`). Each
//! function is one statement on the caller's connection.

use super::{Conn, StoreError, Q};

/// Whose key it is: the token's `iss` (`""` without one) and `sub`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope<'a> {
    /// The token's `iss` claim, `""` when it has none.
    pub iss: &'a str,
    /// The token's `sub` claim.
    pub sub: &'a str,
}

/// A request claiming a key: what it is and how long it may hold it.
#[derive(Debug, Clone, Copy)]
pub struct NewClaim<'a> {
    /// The key's owner.
    pub scope: Scope<'a>,
    /// The key as sent.
    pub key: &'a str,
    /// SHA-256 of the request (32 bytes).
    pub fingerprint: &'a [u8],
    /// A value unique to this request: only it can answer or release the key.
    pub claim: &'a str,
    /// Now, Unix ms.
    pub now: i64,
    /// Until when (Unix ms) the key is in flight without an answer; past
    /// it, another request with the key may take it over.
    pub lease_until: i64,
    /// Until when (Unix ms) the key and its answer are kept.
    pub expires_at: i64,
}

/// A key as another request left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// SHA-256 of the request that holds it.
    pub fingerprint: Vec<u8>,
    /// Its answer, once stored; `None` while in flight.
    pub answer: Option<Answer>,
}

/// A stored answer, replayed as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The headers kept (name, value).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

/// Claims `c.key` for a request: `true` when this request holds it now (the
/// key was free, expired, or in flight past its lease); `false` when another
/// request holds it or answered it ([`get`] then says how).
pub async fn claim(conn: &mut Conn, c: &NewClaim<'_>) -> Result<bool, StoreError> {
    let row = Q::new(
        "INSERT INTO idempotency_keys (iss, sub, idem_key, fingerprint, claim, status, headers, body, created_at,
                                       lease_until, expires_at)
         VALUES ($1, $2, $3, $4, $5, NULL, NULL, NULL, $6, $7, $8)
         ON CONFLICT (iss, sub, idem_key) DO UPDATE SET fingerprint = excluded.fingerprint, claim = excluded.claim,
             status = NULL, headers = NULL, body = NULL, created_at = excluded.created_at,
             lease_until = excluded.lease_until, expires_at = excluded.expires_at
         WHERE idempotency_keys.expires_at <= $6
            OR (idempotency_keys.status IS NULL AND idempotency_keys.lease_until <= $6)
         RETURNING claim",
    )
    .text(c.scope.iss)
    .text(c.scope.sub)
    .text(c.key)
    .bytes(c.fingerprint)
    .text(c.claim)
    .int(c.now)
    .int(c.lease_until)
    .int(c.expires_at)
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
}

/// The key `key` of `scope` as it stands at `now`; `None` when there is
/// none, or it expired.
pub async fn get(conn: &mut Conn, scope: Scope<'_>, key: &str, now: i64) -> Result<Option<Held>, StoreError> {
    let row = Q::new(
        "SELECT fingerprint, status, headers, body FROM idempotency_keys
         WHERE iss = $1 AND sub = $2 AND idem_key = $3 AND expires_at > $4",
    )
    .text(scope.iss)
    .text(scope.sub)
    .text(key)
    .int(now)
    .fetch_optional(conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let answer = match row.opt_int("status")? {
        None => None,
        Some(status) => {
            let headers: Vec<(String, String)> = super::json_col(
                &row.opt_text("headers")?.unwrap_or_else(|| "[]".to_owned()),
                "idempotency_keys.headers",
            )?;
            Some(Answer {
                status: u16::try_from(status)
                    .map_err(|_| StoreError::Corrupt(format!("idempotency_keys.status {status}")))?,
                headers,
                body: row.bytes("body")?,
            })
        }
    };
    Ok(Some(Held { fingerprint: row.bytes("fingerprint")?, answer }))
}

/// Stores the answer of the request that holds `key` by `claim`; `false`
/// when it no longer holds it (taken over after its lease).
pub async fn answer(
    conn: &mut Conn,
    scope: Scope<'_>,
    key: &str,
    claim: &str,
    answer: &Answer,
) -> Result<bool, StoreError> {
    let headers = serde_json::to_string(&answer.headers).expect("headers serialise");
    let n = Q::new(
        "UPDATE idempotency_keys SET status = $5, headers = $6, body = $7
         WHERE iss = $1 AND sub = $2 AND idem_key = $3 AND claim = $4 AND status IS NULL",
    )
    .text(scope.iss)
    .text(scope.sub)
    .text(key)
    .text(claim)
    .int(i64::from(answer.status))
    .text(headers)
    .bytes(answer.body.clone())
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// Lets go of `key` without an answer (its answer is not one to replay: a
/// retry should run again); only while `claim` holds it.
pub async fn release(conn: &mut Conn, scope: Scope<'_>, key: &str, claim: &str) -> Result<(), StoreError> {
    Q::new(
        "DELETE FROM idempotency_keys WHERE iss = $1 AND sub = $2 AND idem_key = $3 AND claim = $4 AND status IS NULL",
    )
    .text(scope.iss)
    .text(scope.sub)
    .text(key)
    .text(claim)
    .execute(conn)
    .await?;
    Ok(())
}

/// Deletes the keys that expired by `now` (the retention sweep); how many.
pub async fn sweep(conn: &mut Conn, now: i64) -> Result<u64, StoreError> {
    Q::new("DELETE FROM idempotency_keys WHERE expires_at <= $1").int(now).execute(conn).await
}
