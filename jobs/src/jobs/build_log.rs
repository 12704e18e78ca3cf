//! A build's log in the database: the effect's output appended as
//! it comes, bounded, with this host's paths and the operator secrets
//! handed to the effect hidden.

use crate::effect::LogSink;
use crate::store::builds::{self, BuildRow};
use crate::store::Db;
use futures::future::BoxFuture;
use futures::FutureExt;

/// The most a build's log keeps, in bytes; output beyond it is counted, not stored.
pub const LOG_LIMIT: i64 = 8 * 1024 * 1024;

/// Appends effect output to the build's log in the database, up to
/// [`LOG_LIMIT`] bytes over all attempts of the build.
/// Only the worker that holds the build's claim writes; each attempt
/// numbers its chunks apart ([`builds::log_base`]). Paths of this host are
/// shown relative to the attempt's work folder (`./sbom/…`) or by the
/// variable that names them (`$STATE_DIR/…`, `$MODULE_SOURCE_DIR/…`), so
/// token holders never see the server's layout; an operator secret value
/// handed to the effect is shown as `[redacted]` (a value split across two
/// writes of the effect is not recognised).
pub(crate) struct DbLog {
    db: Db,
    build: BuildRow,
    echo: bool,
    /// Host paths and what the log shows instead, longest first.
    paths: Vec<(String, String)>,
    /// Operator secret values handed to the effect: shown as `[redacted]`.
    hidden: Vec<secrecy::SecretString>,
    /// Next chunk number and bytes stored so far.
    end: std::sync::Mutex<(i64, i64)>,
    /// Chunks not stored yet (the database was away), in order: sent before
    /// the next chunk, and waited for when the effect ends ([`DbLog::flush`]).
    unsent: std::sync::Mutex<std::collections::VecDeque<(i64, String)>>,
}

impl DbLog {
    pub(crate) async fn open(
        db: Db,
        build: &BuildRow,
        echo: bool,
        paths: Vec<(String, String)>,
        hidden: Vec<secrecy::SecretString>,
    ) -> Self {
        let start = (builds::log_base(build.attempts) + 1, 0);
        // A first attempt's log is empty: only the claim holder appends, and
        // the build had no holder before it (one round trip less per build).
        let end = if build.attempts <= 1 {
            start
        } else {
            let end = async { builds::log_end(&mut db.acquire().await?, &build.id, build.attempts).await };
            end.await.unwrap_or(start)
        };
        let mut paths = paths;
        paths.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
        let mut hidden = hidden;
        hidden.retain(|v| !secrecy::ExposeSecret::expose_secret(v).is_empty());
        Self {
            db,
            build: build.clone(),
            echo,
            paths,
            hidden,
            end: std::sync::Mutex::new(end),
            unsent: Default::default(),
        }
    }

    /// Stores the chunks not stored yet, in order; `false` when the
    /// database is still away (they stay for the next try). A chunk refused
    /// because another worker holds the build now is dropped.
    async fn send_unsent(&self) -> bool {
        loop {
            let Some((seq, text)) = self.unsent.lock().expect("unsent log lock").front().cloned() else { return true };
            let appended = async { builds::append_log(&mut self.db.acquire().await?, &self.build, seq, &text).await };
            match appended.await {
                Ok(stored) => {
                    if !stored {
                        tracing::debug!("build log not appended: another worker holds the build now");
                    }
                    self.unsent.lock().expect("unsent log lock").pop_front();
                }
                Err(e) => {
                    tracing::debug!(error = %e, "cannot append to the build log yet; keeping the output");
                    return false;
                }
            }
        }
    }

    /// Waits, trying again every few seconds, until every chunk is stored or
    /// `patience` has passed (then says how much output was lost).
    pub(crate) async fn flush(&self, patience: std::time::Duration) {
        let started = std::time::Instant::now();
        let mut wait = std::time::Duration::from_millis(250);
        let mut told = false;
        while !self.send_unsent().await {
            if !told {
                tracing::warn!("the effect has ended; cannot record the build's end yet: the database is away, so its log and outcome wait for it");
                told = true;
            }
            if started.elapsed() >= patience {
                let lost = self.unsent.lock().expect("unsent log lock").len();
                tracing::warn!(chunks = lost, "the database stayed away; part of the build log is lost");
                return;
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(std::time::Duration::from_secs(4));
        }
    }
}

/// Replaces each host path `from` in `text` by `to` where the path ends
/// there (followed by `/`, the end, or a character that cannot continue a
/// file name such as a space or quote).
pub(crate) fn hide_paths(text: &str, paths: &[(String, String)]) -> String {
    let mut out = text.to_owned();
    for (from, to) in paths {
        if from.is_empty() || !out.contains(from.as_str()) {
            continue;
        }
        let mut result = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(at) = rest.find(from.as_str()) {
            let after = &rest[at + from.len()..];
            let ends = after.chars().next().is_none_or(|c| !(c.is_alphanumeric() || "-_.+".contains(c)));
            result.push_str(&rest[..at]);
            result.push_str(if ends { to } else { from });
            rest = after;
        }
        result.push_str(rest);
        out = result;
    }
    out
}

impl LogSink for DbLog {
    fn append<'a>(&'a self, chunk: &'a str) -> BoxFuture<'a, ()> {
        async move {
            let mut chunk = std::borrow::Cow::Borrowed(chunk);
            for value in &self.hidden {
                let value = secrecy::ExposeSecret::expose_secret(value);
                if chunk.contains(value) {
                    chunk = chunk.replace(value, "[redacted]").into();
                }
            }
            if self.echo {
                eprint!("{chunk}");
            }
            let chunk = hide_paths(&chunk, &self.paths);
            let (seq, text) = {
                let mut end = self.end.lock().expect("log position lock");
                let (seq, bytes) = *end;
                let room = LOG_LIMIT - bytes;
                let text = if room <= 0 {
                    None
                } else if chunk.len() as i64 <= room {
                    Some(chunk.clone())
                } else {
                    let mut cut = room as usize;
                    while !chunk.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    Some(format!(
                        "{}\nslipway: the log reached {} MiB; further output is not stored\n",
                        &chunk[..cut],
                        LOG_LIMIT / 1024 / 1024
                    ))
                };
                *end = (seq + 1, bytes + chunk.len() as i64);
                (seq, text)
            };
            if let Some(text) = text {
                self.unsent.lock().expect("unsent log lock").push_back((seq, text));
            }
            self.send_unsent().await;
        }
        .boxed()
    }
}
