//! Stream tickets (`stream_tickets`, migration 0020): what a browser's
//! `EventSource` sends instead of the bearer token, which it cannot put in a
//! header. A ticket is minted with the token for exactly one stream
//! ([`insert`]) and opens it once ([`consume`]). Only its SHA-256 is stored;
//! the ticket itself exists only in the answer that minted it.

use super::{Conn, StoreError, Q};

/// One stream a ticket opens: its kind and the deployment or build id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// `GET /deployments/{id}/events`; the id is a deployment id.
    DeploymentEvents,
    /// `GET /builds/{id}/log`; the id is a build id.
    BuildLog,
}

impl StreamKind {
    /// The stored name (`deployment_events`, `build_log`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DeploymentEvents => "deployment_events",
            Self::BuildLog => "build_log",
        }
    }
}

/// A ticket as it is minted: everything but the ticket, which is kept only
/// as its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTicket<'a> {
    /// SHA-256 of the ticket (32 bytes).
    pub hash: &'a [u8],
    /// The stream's kind.
    pub kind: StreamKind,
    /// The deployment id (for [`StreamKind::DeploymentEvents`]) or build id.
    pub stream_id: &'a str,
    /// The `sub` claim of the token that minted it (may be empty).
    pub subject: &'a str,
    /// The deployment the stream belongs to: the scope it is opened with.
    pub deployment_id: &'a str,
    /// The minting token's expiry, Unix ms: the stream ends then.
    pub token_exp_ms: i64,
    /// When it was minted, Unix ms.
    pub created_at: i64,
    /// When it stops opening its stream, Unix ms.
    pub expires_at: i64,
}

/// What a used ticket says of the stream it opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsedTicket {
    /// The `sub` claim of the token that minted it.
    pub subject: String,
    /// The deployment the stream belongs to.
    pub deployment_id: String,
    /// The minting token's expiry, Unix ms.
    pub token_exp_ms: i64,
}

/// Stores a new ticket, and deletes the tickets that expired before `now`
/// (`ticket.created_at`), so that unused tickets do not pile up.
pub async fn insert(conn: &mut Conn, ticket: &NewTicket<'_>) -> Result<(), StoreError> {
    Q::new("DELETE FROM stream_tickets WHERE expires_at <= $1").int(ticket.created_at).execute(conn).await?;
    Q::new(
        "INSERT INTO stream_tickets (hash, kind, stream_id, subject, deployment_id, token_exp, created_at, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bytes(ticket.hash)
    .text(ticket.kind.as_str())
    .text(ticket.stream_id)
    .text(ticket.subject)
    .text(ticket.deployment_id)
    .int(ticket.token_exp_ms)
    .int(ticket.created_at)
    .int(ticket.expires_at)
    .execute(conn)
    .await?;
    Ok(())
}

/// Uses the ticket whose SHA-256 is `hash` for the stream `kind`/`stream_id`
/// at `now` (Unix ms): deletes it and answers what it says, in one
/// statement (`DELETE … RETURNING`), so two requests with one ticket cannot
/// both open a stream. `None` when no such ticket exists, it was used, it
/// is for another stream (it then stays, for its own stream), or it expired
/// (it is deleted all the same).
pub async fn consume(
    conn: &mut Conn,
    hash: &[u8],
    kind: StreamKind,
    stream_id: &str,
    now: i64,
) -> Result<Option<UsedTicket>, StoreError> {
    let row = Q::new(
        "DELETE FROM stream_tickets WHERE hash = $1 AND kind = $2 AND stream_id = $3 \
         RETURNING subject, deployment_id, token_exp, expires_at",
    )
    .bytes(hash)
    .text(kind.as_str())
    .text(stream_id)
    .fetch_optional(conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    if row.int("expires_at")? <= now {
        return Ok(None);
    }
    Ok(Some(UsedTicket {
        subject: row.text("subject")?,
        deployment_id: row.text("deployment_id")?,
        token_exp_ms: row.int("token_exp")?,
    }))
}
