//! The process's completer (PostgreSQL): what every queue worker of the
//! process started and ended, written to apalis's table many jobs at a time
//! by one task of its own, while the workers go on fetching.
//!
//! apalis-postgres writes a worker's starts and ends in a transaction of
//! the worker's own between two fetches: the worker waits for that commit
//! before it claims its next batch, so a batch costs two commits in a row.
//! Here the workers' storages are built without apalis's start and end
//! events ([`crate::storage::QueueSettings::postgres`]); [`CompleteLayer`]
//! sends them to the [`Completer`] instead, which writes whatever has
//! gathered in one statement ([`slipway_jobs::store::completions::record`])
//! while the next fetches run, and what gathers during that write in the
//! next one.
//!
//! A job's own effects are committed by its body before it ends (a build's
//! end in its record transaction, the next build's job with it); only
//! apalis's row (`Done`) waits here, for at most one write. A process that
//! dies before writing it leaves the job as apalis leaves a job whose
//! worker died before its acknowledgement: handed out again once the
//! worker's heartbeat is stale, and its body finds its work done (at least
//! once, as before; docs/DECISIONS.md). A stop writes everything gathered
//! before it hands back what it did not start ([`Completer::flush`]).

use apalis::prelude::{BoxDynError, Task};
use slipway_jobs::store::completions::{record, JobEvent};
use slipway_jobs::store::Db;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Most events one statement writes.
pub const MOST_PER_WRITE: usize = 2_000;

/// What the completer's task is sent.
enum Message {
    /// A job started or ended.
    Event(JobEvent),
    /// Answer once everything sent before is written.
    Flush(oneshot::Sender<()>),
}

/// The process's completer: cheap to clone; its task ends once every clone
/// and every layer made from it are dropped, after writing what it holds.
#[derive(Clone)]
pub struct Completer {
    sender: mpsc::UnboundedSender<Message>,
}

impl Completer {
    /// Starts the completer's task, writing through `db` (PostgreSQL).
    pub fn start(db: Db) -> Self {
        let (sender, receiver) = mpsc::unbounded_channel();
        tokio::spawn(write_all(db, receiver));
        Self { sender }
    }

    /// The layer that sends apalis worker `worker`'s starts and ends here.
    pub fn layer(&self, worker: &str) -> CompleteLayer {
        CompleteLayer { sender: self.sender.clone(), worker: worker.to_owned() }
    }

    /// Resolves once every start and end sent before the call is written
    /// (waiting out a database outage; the caller bounds the wait).
    pub async fn flush(&self) {
        let (done, written) = oneshot::channel();
        if self.sender.send(Message::Flush(done)).is_ok() {
            let _ = written.await;
        }
    }
}

/// The completer's task: waits for an event, takes every other one already
/// sent (up to [`MOST_PER_WRITE`]), writes them in one statement (again,
/// with a backoff, while the database is away), and answers the flushes
/// among them.
async fn write_all(db: Db, mut receiver: mpsc::UnboundedReceiver<Message>) {
    let mut events = Vec::new();
    let mut flushes = Vec::new();
    while let Some(first) = receiver.recv().await {
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Message::Event(event) => events.push(event),
                Message::Flush(done) => flushes.push(done),
            }
            if events.len() < MOST_PER_WRITE {
                next = receiver.try_recv().ok();
            }
        }
        write(&db, &mut events).await;
        for done in flushes.drain(..) {
            let _ = done.send(());
        }
    }
}

/// Writes `events` (one per job: a start whose end is also here is
/// dropped), trying again while the database is away, and empties it.
async fn write(db: &Db, events: &mut Vec<JobEvent>) {
    if events.is_empty() {
        return;
    }
    let ended: std::collections::HashSet<&str> =
        events.iter().filter(|e| !e.is_start()).map(|e| e.id.as_str()).collect();
    let batch: Vec<JobEvent> =
        events.iter().filter(|e| !(e.is_start() && ended.contains(e.id.as_str()))).cloned().collect();
    events.clear();
    let mut wait = Duration::from_millis(100);
    let mut failures = 0u32;
    loop {
        // A crash between a job's end and its acknowledgement (Q-1's tests).
        if batch.iter().any(|e| !e.is_start()) {
            slipway_jobs::failpoint::hit("job_ended_unrecorded");
        }
        let written = match db.acquire().await {
            Ok(mut conn) => record(&mut conn, &batch).await,
            Err(e) => Err(e),
        };
        match written {
            Ok(_) => {
                if failures > 0 {
                    tracing::info!(jobs = batch.len(), "wrote the jobs' starts and ends again");
                }
                return;
            }
            Err(e) => {
                if failures == 0 {
                    tracing::warn!(error = %e, jobs = batch.len(), "could not write the jobs' starts and ends; trying again");
                }
                failures += 1;
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// The apalis middleware that sends a worker's starts and ends to its
/// [`Completer`], in place of apalis-postgres's own (which the storage is
/// built without).
#[derive(Clone)]
pub struct CompleteLayer {
    sender: mpsc::UnboundedSender<Message>,
    worker: String,
}

impl<S> tower::Layer<S> for CompleteLayer {
    type Service = CompleteService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CompleteService { inner, sender: self.sender.clone(), worker: self.worker.clone() }
    }
}

/// [`CompleteLayer`]'s service: the job's start before its handler runs,
/// its end (status, attempt, result) once the handler returned.
#[derive(Clone)]
pub struct CompleteService<S> {
    inner: S,
    sender: mpsc::UnboundedSender<Message>,
    worker: String,
}

impl<S, Args> tower::Service<Task<Args>> for CompleteService<S>
where
    S: tower::Service<Task<Args>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxDynError>,
    Args: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxDynError;
    type Future = futures::future::BoxFuture<'static, Result<S::Response, BoxDynError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, task: Task<Args>) -> Self::Future {
        let ctx = task.ctx().clone();
        let id = ctx.task_id().map(ToString::to_string);
        let (sender, worker) = (self.sender.clone(), self.worker.clone());
        let send = move |status: String, attempt: Option<i64>, result: Option<serde_json::Value>| {
            if let Some(id) = id.clone() {
                let event = JobEvent { id, worker: worker.clone(), status, attempt, result };
                let _ = sender.send(Message::Event(event));
            }
        };
        send("Running".to_owned(), None, None);
        let handled = self.inner.call(task);
        Box::pin(async move {
            let ended = handled.await.map_err(Into::into);
            let result = match &ended {
                Ok(_) => serde_json::json!({ "Ok": null }),
                Err(e) => serde_json::json!({ "Err": e.to_string() }),
            };
            send(ctx.status().to_string(), Some(ctx.attempt() as i64), Some(result));
            ended
        })
    }
}
