//! Keeping a process's OpenBao token alive (`docs/OPENBAO.md`, "Tokens").
//!
//! The api and each worker hold a token of their own (`OPENBAO_TOKEN`). A
//! background task ([`TokenWatch::start`]) looks the token up
//! (`auth/token/lookup-self`) and, when it is renewable, renews it
//! (`auth/token/renew-self`) every third of its TTL, so a token with a
//! short TTL outlives the process. What it learns is the token's state
//! ([`TokenState`]), shown by the api's `GET /readyz` (`openbao_token`) and
//! by the metrics `slipway_openbao_token_ttl_seconds` and
//! `slipway_openbao_token_renewals_total{outcome}`. It logs a renewal that
//! fails, a state that changes, and a token that cannot live as long as the
//! process's longest job (its max TTL, renewed or not, is shorter).

use crate::metrics::Metrics;
use crate::openbao::{OpenBao, OpenBaoError, TokenInfo};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// The longest pause between two looks at the token (a token with a long
/// TTL is still looked at this often, so `/readyz` sees it expire).
pub const LONGEST_PAUSE: Duration = Duration::from_secs(60);

/// The shortest pause between two looks at the token.
pub const SHORTEST_PAUSE: Duration = Duration::from_secs(1);

/// The pause after OpenBao could not be asked (unreachable, sealed, busy).
pub const UNAVAILABLE_PAUSE: Duration = Duration::from_secs(5);

/// What the last look at the token found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenState {
    /// Not looked at yet.
    Unknown,
    /// Valid, and it can live (renewed) at least as long as the longest job.
    Ok,
    /// Valid, but it ends sooner than the longest job could (its max TTL
    /// is near, it cannot be renewed, or its last renewal failed): give the
    /// process a new token before it ends.
    Expiring,
    /// OpenBao no longer accepts it (expired, revoked, unknown): every
    /// operation fails until the process gets a new `OPENBAO_TOKEN`.
    Expired,
    /// Valid, but its policy does not allow it to look itself up: the
    /// policy lacks `auth/token/lookup-self` (`docs/openbao/`), so Slipway
    /// can neither renew it nor tell when it ends.
    Denied,
    /// OpenBao could not be asked (unreachable, sealed, busy).
    Unavailable,
}

impl TokenState {
    /// The word `/readyz` shows: `unknown`, `ok`, `expiring`, `expired`,
    /// `denied`, `unavailable`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Ok => "ok",
            Self::Expiring => "expiring",
            Self::Expired => "expired",
            Self::Denied => "denied",
            Self::Unavailable => "unavailable",
        }
    }
}

/// The state of the token, what OpenBao last said of it, and why it is not
/// `ok` (a sentence, never the token).
#[derive(Debug, Clone)]
pub struct TokenStatus {
    /// The state.
    pub state: TokenState,
    /// The last lookup or renewal that answered.
    pub info: Option<TokenInfo>,
    /// Why the state is not `ok`, for a warning.
    pub problem: Option<String>,
    /// Successful renewals so far.
    pub renewals: u64,
}

/// The token's state, kept up to date by a background task that ends once
/// every clone of this value is dropped. Cheap to clone.
#[derive(Debug, Clone)]
pub struct TokenWatch {
    status: Arc<Mutex<TokenStatus>>,
}

impl TokenWatch {
    /// Starts looking after `bao`'s token on the current tokio runtime:
    /// looks it up at once, renews it when renewable, then again every
    /// third of its TTL (within [`SHORTEST_PAUSE`] and [`LONGEST_PAUSE`]).
    /// `longest_job` is the longest a job of this process may take with
    /// the token (a worker's longest deploy; an api's names eval): a token
    /// that cannot live that long is [`TokenState::Expiring`], logged as a
    /// warning. `metrics` gets the TTL and each renewal.
    pub fn start(bao: OpenBao, longest_job: Duration, metrics: Option<Metrics>) -> Self {
        if let Some(m) = &metrics {
            m.register_openbao_token();
        }
        let status =
            Arc::new(Mutex::new(TokenStatus { state: TokenState::Unknown, info: None, problem: None, renewals: 0 }));
        tokio::spawn(keep(bao, Arc::downgrade(&status), longest_job, metrics));
        Self { status }
    }

    /// The state now.
    pub fn status(&self) -> TokenStatus {
        self.status.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The task: one round, a pause, again, until the watch is dropped.
async fn keep(bao: OpenBao, status: Weak<Mutex<TokenStatus>>, longest_job: Duration, metrics: Option<Metrics>) {
    loop {
        let Some(shared) = status.upgrade() else { return };
        let before = shared.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let (after, pause) = round(&bao, before.clone(), longest_job, metrics.as_ref()).await;
        if after.state != before.state {
            say(&bao, &after, longest_job);
        }
        *shared.lock().unwrap_or_else(|e| e.into_inner()) = after;
        drop(shared);
        tokio::time::sleep(pause).await;
    }
}

/// Logs a change of state.
fn say(bao: &OpenBao, status: &TokenStatus, longest_job: Duration) {
    let problem = status.problem.as_deref().unwrap_or("");
    match status.state {
        TokenState::Ok | TokenState::Unknown => {
            tracing::info!(
                openbao = bao.addr(),
                ttl_s = status.info.as_ref().map(|i| i.ttl.as_secs()),
                "OpenBao token is valid"
            )
        }
        TokenState::Expiring => tracing::warn!(
            openbao = bao.addr(),
            longest_job_s = longest_job.as_secs(),
            "OpenBao token is expiring: {problem}"
        ),
        TokenState::Expired => tracing::error!(openbao = bao.addr(), "OpenBao token is no longer valid: {problem}"),
        TokenState::Denied => tracing::warn!(openbao = bao.addr(), "OpenBao token cannot be looked after: {problem}"),
        TokenState::Unavailable => {
            tracing::warn!(openbao = bao.addr(), "OpenBao token cannot be looked up now: {problem}")
        }
    }
}

/// One look (and renewal): the new status and the pause before the next.
async fn round(
    bao: &OpenBao,
    before: TokenStatus,
    longest_job: Duration,
    metrics: Option<&Metrics>,
) -> (TokenStatus, Duration) {
    let mut status = TokenStatus { problem: None, ..before };
    let looked = bao.lookup_self().await;
    let mut info = match looked {
        Ok(info) => info,
        Err(e) => {
            let (state, pause) = match &e {
                OpenBaoError::TokenInvalid { .. } => (TokenState::Expired, LONGEST_PAUSE / 2),
                OpenBaoError::Refused { status: 401 | 403, .. } => (TokenState::Denied, LONGEST_PAUSE),
                _ => (TokenState::Unavailable, pause_for(status.info.as_ref()).min(UNAVAILABLE_PAUSE)),
            };
            status.state = state;
            status.problem = Some(e.to_string());
            return (status, pause);
        }
    };
    let mut renewal_failed = None;
    if info.renewable && !info.ttl.is_zero() {
        match bao.renew_self().await {
            Ok(renewed) => {
                info = renewed;
                status.renewals += 1;
                if let Some(m) = metrics {
                    m.openbao_token_renewal(true);
                }
            }
            Err(e) => {
                if let Some(m) = metrics {
                    m.openbao_token_renewal(false);
                }
                tracing::warn!(openbao = bao.addr(), error = %e, ttl_s = info.ttl.as_secs(), "renewing the OpenBao token failed");
                if let OpenBaoError::TokenInvalid { .. } = e {
                    status.state = TokenState::Expired;
                    status.problem = Some(e.to_string());
                    return (status, LONGEST_PAUSE / 2);
                }
                renewal_failed = Some(e);
            }
        }
    }
    if let Some(m) = metrics {
        m.openbao_token_ttl(info.ttl);
    }
    let pause = pause_for(Some(&info));
    status.state = TokenState::Ok;
    if let Some(max) = info.max_remaining.filter(|max| *max < longest_job) {
        status.state = TokenState::Expiring;
        status.problem = Some(format!(
            "it ends in {} s at most ({}), sooner than this process's longest job ({} s): give it a token with a \
             longer max TTL",
            max.as_secs(),
            if info.renewable { "its max TTL" } else { "it cannot be renewed" },
            longest_job.as_secs()
        ));
    } else if let Some(e) = renewal_failed {
        status.state = TokenState::Expiring;
        status.problem = Some(format!("its renewal failed ({e}); {} s left", info.ttl.as_secs()));
    }
    status.info = Some(info);
    (status, pause)
}

/// A third of the token's TTL, within the bounds.
fn pause_for(info: Option<&TokenInfo>) -> Duration {
    match info {
        Some(info) if !info.ttl.is_zero() => (info.ttl / 3).clamp(SHORTEST_PAUSE, LONGEST_PAUSE),
        _ => LONGEST_PAUSE,
    }
}
