//! PostgreSQL LISTEN that comes back: every listener of a Slipway process
//! (the api's deployment channel, [`crate::channel`]; the worker's job
//! feed, [`super::queue::JobFeed`]) is a [`Listener`].
//!
//! sqlx's `PgListener` makes its connection again once, at once, when it
//! is lost; if the server refuses that one attempt (a restart, a failover,
//! connections refused for a few seconds) the error ends a stream made of
//! it, and apalis-postgres's own listener (`Pubsub`) then stops for good:
//! new jobs were found only by the poll until the worker restarted. A
//! [`Listener`] instead drops a broken connection and connects again with a
//! growing pause ([`RETRY_FIRST`] doubling to [`RETRY_MOST`], with jitter)
//! for as long as it takes, LISTENs on its channels again, and logs one
//! line when it loses its connection (`warn`, "LISTEN lost") and one when
//! it listens again (`info`, "listening again"). Notifications sent while
//! it was not listening are lost: it tells its reader so
//! ([`Heard::Listening`]), who looks for what it may have missed.
//!
//! Its connection comes from the process's pool and is held while it
//! listens (one per listener: count it when sizing `SLIPWAY_DB_POOL`).

use sqlx::postgres::{PgListener, PgNotification};
use std::time::{Duration, Instant};

/// The first pause before connecting again after a failure.
pub const RETRY_FIRST: Duration = Duration::from_millis(100);

/// The longest pause between attempts to connect again.
pub const RETRY_MOST: Duration = Duration::from_secs(5);

/// How long one attempt to connect and LISTEN may take.
const ATTEMPT_DEADLINE: Duration = Duration::from_secs(10);

/// What a [`Listener`] heard.
#[derive(Debug)]
pub enum Heard {
    /// A notification on one of its channels.
    Notification(PgNotification),
    /// It listens (at first, or again after its connection was lost):
    /// anything notified before may have been missed.
    Listening,
}

/// A LISTEN on some channels that connects again, with backoff, whenever
/// its connection is lost (see the module's text).
pub struct Listener {
    pool: sqlx::PgPool,
    name: &'static str,
    channels: Vec<String>,
    connection: Option<PgListener>,
    /// Since when it has not listened (after having listened), and how
    /// many attempts to connect again failed.
    lost: Option<(Instant, u32)>,
    /// Failed attempts before it first listened.
    starting: u32,
}

impl Listener {
    /// A listener named `name` in its log lines (say, "job feed") on
    /// `channels`, with connections from `pool`. Nothing connects until
    /// the first [`Listener::recv`].
    pub fn new(pool: &sqlx::PgPool, name: &'static str, channels: &[&str]) -> Self {
        Self {
            pool: pool.clone(),
            name,
            channels: channels.iter().map(|c| (*c).to_owned()).collect(),
            connection: None,
            lost: None,
            starting: 0,
        }
    }

    /// The next thing heard: a notification, or [`Heard::Listening`] once
    /// it listens (at first and after each reconnection). Waits as long as
    /// the database is away; never fails. Cancel-safe only between
    /// notifications: dropped while it connects, the attempt is abandoned.
    pub async fn recv(&mut self) -> Heard {
        loop {
            let Some(connection) = self.connection.as_mut() else {
                match self.connect().await {
                    Ok(connection) => {
                        self.connection = Some(connection);
                        self.listening();
                        return Heard::Listening;
                    }
                    Err(e) => {
                        let attempt = self.failed(&e);
                        let pause = crate::outbound::backoff(attempt, RETRY_FIRST, RETRY_MOST, None);
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                }
            };
            match connection.try_recv().await {
                Ok(Some(notification)) => return Heard::Notification(notification),
                Ok(None) => self.broke("the connection was closed".to_owned()),
                Err(e) => self.broke(e.to_string()),
            }
        }
    }

    /// One attempt: a connection from the pool, LISTEN on every channel.
    async fn connect(&self) -> Result<PgListener, String> {
        let attempt = async {
            let mut listener = PgListener::connect_with(&self.pool).await?;
            // A lost connection is made again here, with backoff, not by
            // sqlx at once.
            listener.eager_reconnect(false);
            listener.listen_all(self.channels.iter().map(String::as_str)).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        match tokio::time::timeout(ATTEMPT_DEADLINE, attempt).await {
            Ok(Ok(listener)) => Ok(listener),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no connection within {} s", ATTEMPT_DEADLINE.as_secs())),
        }
    }

    /// Its connection broke while it listened: dropped, and the line saying so.
    fn broke(&mut self, error: String) {
        self.connection = None;
        if self.lost.is_none() {
            self.lost = Some((Instant::now(), 0));
            tracing::warn!(
                listener = self.name,
                channels = %self.channels.join(","),
                %error,
                "LISTEN lost; connecting again with backoff (notifications meanwhile are missed; the poll still finds jobs)"
            );
        }
    }

    /// An attempt to connect failed; returns how many failed in a row.
    fn failed(&mut self, error: &str) -> u32 {
        match self.lost.as_mut() {
            Some((_, attempts)) => {
                *attempts += 1;
                tracing::debug!(listener = self.name, attempt = *attempts, %error, "LISTEN: could not connect again yet");
                *attempts
            }
            None => {
                self.starting += 1;
                if self.starting == 1 {
                    tracing::warn!(
                        listener = self.name,
                        channels = %self.channels.join(","),
                        %error,
                        "cannot LISTEN yet; trying again with backoff"
                    );
                }
                self.starting
            }
        }
    }

    /// It listens: the line saying so after a loss or a failed start.
    fn listening(&mut self) {
        let channels = self.channels.join(",");
        if let Some((since, attempts)) = self.lost.take() {
            let down_ms = u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX);
            tracing::info!(listener = self.name, %channels, down_ms, attempts, "listening again");
        } else if std::mem::take(&mut self.starting) > 0 {
            tracing::info!(listener = self.name, %channels, "listening again");
        } else {
            tracing::debug!(listener = self.name, %channels, "listening");
        }
    }
}
