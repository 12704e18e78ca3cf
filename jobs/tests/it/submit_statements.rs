//! How many statements a submit sends, counted from sqlx's own statement
//! events (`sqlx::query`). Alone in its test binary: tracing caches whether
//! a call site is wanted, so another test's thread without a subscriber
//! could hide this thread's events.

use slipway_jobs::precondition::Precondition;
use slipway_jobs::store::{Db, Engine, Q};
use slipway_jobs::test_support::{checker, submit_demo_if, world, AnySource};
use std::sync::{Arc, Mutex};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Collects the text of every statement sqlx sends (its
/// `sqlx::query` events) on this thread while it is the default subscriber.
#[derive(Clone, Default)]
struct Statements(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> Layer<S> for Statements {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != "sqlx::query" {
            return;
        }
        // The statement's text: sqlx's `summary`, or its whole text in
        // `db.statement` when the summary shortened it.
        #[derive(Default)]
        struct Text {
            summary: String,
            whole: String,
        }
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.record_str(field, &format!("{value:?}"));
            }
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                match field.name() {
                    "summary" => self.summary = value.to_owned(),
                    "message" if self.summary.is_empty() => self.summary = value.to_owned(),
                    "db.statement" => self.whole = value.trim().to_owned(),
                    _ => {}
                }
            }
        }
        let mut text = Text::default();
        event.record(&mut text);
        self.0.lock().unwrap().push(if text.whole.is_empty() { text.summary } else { text.whole });
    }
}

/// The statements `submit_demo` of deployment `id` sends (PostgreSQL runs
/// them on the calling thread, so a thread's subscriber sees them all).
async fn statements_of_a_submit(db: &Db, sources: &AnySource, id: &str) -> Vec<String> {
    statements_of_a_conditional_submit(db, sources, id, None).await.0
}

/// [`statements_of_a_submit`] with `precondition`, and whether it was accepted.
async fn statements_of_a_conditional_submit(
    db: &Db,
    sources: &AnySource,
    id: &str,
    precondition: Option<&Precondition>,
) -> (Vec<String>, bool) {
    let seen = Statements::default();
    let subscriber = tracing_subscriber::registry().with(
        seen.clone()
            .with_filter(tracing_subscriber::filter::Targets::new().with_target("sqlx::query", tracing::Level::TRACE)),
    );
    let accepted = {
        let _default = tracing::subscriber::set_default(subscriber);
        // Other tests of this binary run sqlx on other threads with no
        // subscriber: a `sqlx::query` callsite they registered while this
        // one was being set may have cached "never"; ask every callsite again.
        tracing::callsite::rebuild_interest_cache();
        submit_demo_if(db, sources, id, 1000, precondition).await
    };
    let accepted = match accepted {
        Ok(_) => true,
        Err(slipway_jobs::submit::SubmitError::PreconditionFailed(_)) => false,
        Err(e) => panic!("the submit failed: {e}"),
    };
    let statements = seen.0.lock().unwrap().clone();
    (statements, accepted)
}

/// A submit's transaction is four round trips on PostgreSQL: `BEGIN` (which
/// sqlx does not log), the deployment's upsert (which takes its lock and the
/// admission lock), one statement that supersedes, inserts the build, pushes
/// its job, records the event and counts the queue, and `COMMIT`; for a new
/// deployment and for one whose queued deploy it supersedes alike (it was
/// seventeen). Nothing before it: without OpenBao, the check that no
/// earlier build pins secrets OpenBao keeps (the demo configuration has
/// secret fields) rides in the second statement. After the
/// commit, and only then, one statement sends the wake-ups of the job and
/// of the channel event (`Conn::notify`): no statement of the transaction
/// notifies, so the submits' commits can share a WAL flush.
#[tokio::test]
async fn a_submit_on_postgres_is_four_round_trips() {
    let w = world(Engine::Postgres, &[]).await;
    let sources = AnySource(checker());
    for (what, id) in [("a new deployment", "fresh"), ("a deployment with a queued deploy", "fresh")] {
        let statements = statements_of_a_submit(&w.ctx.db, &sources, id).await;
        println!("{what}: {} statements: {statements:#?}", statements.len());
        let starts: Vec<&str> = statements.iter().map(|s| s.split_whitespace().next().unwrap_or("")).collect();
        assert_eq!(starts, ["INSERT", "WITH", "COMMIT", "SELECT"], "{what}: {statements:#?}");
        assert!(statements[1].contains("kept_pins"), "{what}: the kept secrets are not read: {statements:#?}");
        assert!(
            statements[..3].iter().all(|s| !s.contains("pg_notify")),
            "{what}: a wake-up inside the transaction: {statements:#?}"
        );
        let wakeups = &statements[3];
        assert_eq!(wakeups.matches("pg_notify").count(), 2, "{what}: the job's and the event's wake-ups: {wakeups}");
    }
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let rows = Q::new("SELECT status, dispatched FROM builds ORDER BY seq").fetch_all(&mut conn).await.unwrap();
    let rows: Vec<(String, i64)> =
        rows.iter().map(|r| (r.text("status").unwrap(), r.int("dispatched").unwrap())).collect();
    assert_eq!(rows, [("superseded".to_owned(), 1), ("queued".to_owned(), 1)], "Q-7 and ST-2");
}

/// IK-1: a submit with `If-Match` is the same four round trips, its check
/// inside the upsert; one whose version is stale is refused by that same
/// statement, and rolled back without a second.
#[tokio::test]
async fn a_conditional_submit_on_postgres_is_four_round_trips_too() {
    let w = world(Engine::Postgres, &[]).await;
    let sources = AnySource(checker());
    let (_, accepted) = statements_of_a_conditional_submit(&w.ctx.db, &sources, "fresh", None).await;
    assert!(accepted);
    let current = Precondition::Version(vec![1]);
    let (statements, accepted) = statements_of_a_conditional_submit(&w.ctx.db, &sources, "fresh", Some(&current)).await;
    assert!(accepted, "{statements:#?}");
    let starts: Vec<&str> = statements.iter().map(|s| s.split_whitespace().next().unwrap_or("")).collect();
    assert_eq!(starts, ["INSERT", "WITH", "COMMIT", "SELECT"], "{statements:#?}");
    assert!(statements[0].contains("deployments.version IN (1)"), "{statements:#?}");
    let (statements, accepted) = statements_of_a_conditional_submit(&w.ctx.db, &sources, "fresh", Some(&current)).await;
    assert!(!accepted, "a stale version was accepted");
    let starts: Vec<&str> = statements.iter().map(|s| s.split_whitespace().next().unwrap_or("")).collect();
    assert_eq!(starts, ["INSERT", "ROLLBACK"], "{statements:#?}");
}
