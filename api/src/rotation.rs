//! Rotating the token keys without a restart (SEC-4): the keys file
//! (`SLIPWAY_JWT_KEYS_FILE`, [`crate::keys`]) is read again on `SIGHUP`,
//! and when it changes: its [`crate::keys::Stamp`] (inode, size,
//! modification time) is looked at every [`POLL_EVERY`].
//!
//! A reload makes the file's keys live all at once
//! ([`crate::auth::Verifier::reload`]): each request is checked with the
//! keys before it or with the keys after it, never a mix. A reload that
//! fails keeps the keys live before and logs one `ERROR` line naming what
//! is wrong; one that succeeds logs the kids now live at `INFO`. Neither
//! shows a key. Each is counted in `slipway_token_key_reloads_total`
//! (docs/METRICS.md). Without a keys file there is nothing to reload: a
//! `SIGHUP` is logged as such at `WARN`, and no longer ends the process.

use crate::keys::{KeySet, KeysError};
use crate::state::AppState;
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::Signal;

/// How often the keys file's stamp is looked at: a change is live within
/// this (plus the read).
pub const POLL_EVERY: Duration = Duration::from_secs(1);

/// What made a reload happen: the `trigger` field of its log line.
#[derive(Debug, Clone, Copy)]
enum Trigger {
    /// `SIGHUP`: the file is read whether it changed or not.
    Hangup,
    /// The file's stamp changed.
    FileChanged,
}

impl Trigger {
    fn as_str(self) -> &'static str {
        match self {
            Self::Hangup => "SIGHUP",
            Self::FileChanged => "file changed",
        }
    }
}

/// Reloads `app`'s keys file on each signal of `hangup` (`SIGHUP`, set up
/// before the api says it serves, so none is missed) and whenever the file
/// changes, one reload at a time, until the task is dropped. The file is
/// read on a blocking thread.
pub async fn watch(app: AppState, mut hangup: Signal) {
    let mut poll = tokio::time::interval(POLL_EVERY);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let has_file = app.verifier.keys_file().is_some();
    let mut signals = true;
    loop {
        let trigger = tokio::select! {
            received = hangup.recv(), if signals => match received {
                Some(()) => Trigger::Hangup,
                None => {
                    signals = false;
                    continue;
                }
            },
            _ = poll.tick(), if has_file => Trigger::FileChanged,
            else => return,
        };
        let state = app.clone();
        let read = tokio::task::spawn_blocking(move || match trigger {
            Trigger::Hangup => Some(state.verifier.reload()),
            Trigger::FileChanged => state.verifier.reload_if_changed(),
        })
        .await;
        match read {
            Ok(Some(outcome)) => report(&app, trigger, outcome),
            Ok(None) => {}
            Err(e) => tracing::error!(error = %e, "reloading the token keys failed; the keys live before stay live"),
        }
    }
}

/// Logs a reload's outcome once and counts it.
fn report(app: &AppState, trigger: Trigger, outcome: Result<Arc<KeySet>, KeysError>) {
    let file = app.verifier.keys_file().map(|p| p.display().to_string()).unwrap_or_default();
    match outcome {
        Ok(keys) => {
            app.metrics.key_reload(true);
            tracing::info!(trigger = trigger.as_str(), file, kids = ?keys.kids(), "token keys reloaded");
        }
        Err(e @ KeysError::NoFile) => tracing::warn!(trigger = trigger.as_str(), "{e}"),
        Err(e) => {
            app.metrics.key_reload(false);
            tracing::error!(
                trigger = trigger.as_str(),
                kept = ?app.verifier.keys().kids(),
                "token keys not reloaded, the keys live before stay live: {e}"
            );
        }
    }
}
