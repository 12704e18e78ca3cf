//! The deployment channel's events (DL-3) and a destroy's reconcile push
//! (DL-2) as the job bodies write them, on both engines, builds run
//! in-process with real effects.

use secrecy::SecretString;
use serde_json::json;
use slipway_jobs::id::DeploymentId;
use slipway_jobs::jobs::callback;
use slipway_jobs::state::{BuildKind, BuildStatus, DeploymentState};
use slipway_jobs::store::queue::{CallbackJob, CALLBACKS_QUEUE};
use slipway_jobs::store::{builds, events, Engine, Q};
use slipway_jobs::submit::{self, Callback, Cancel};
use slipway_jobs::test_support::{world, World};

fn demo_id() -> DeploymentId {
    DeploymentId::parse("demo").unwrap()
}

async fn all_events(w: &World) -> Vec<(i64, DeploymentState, Option<String>)> {
    let mut conn = w.ctx.db.acquire().await.unwrap();
    events::since(&mut conn, "demo", 0, 100).await.unwrap().into_iter().map(|e| (e.n, e.state, e.build_id)).collect()
}

async fn callback_jobs(w: &World) -> i64 {
    let table = match w.ctx.db.engine() {
        Engine::Sqlite => "Jobs",
        Engine::Postgres => "apalis.jobs",
    };
    let mut conn = w.ctx.db.acquire().await.unwrap();
    Q::new(format!("SELECT COUNT(*) AS n FROM {table} WHERE job_type = $1"))
        .text(CALLBACKS_QUEUE)
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .int("n")
        .unwrap()
}

/// Builds whose callback token column still holds a value.
async fn stored_tokens(w: &World) -> i64 {
    let mut conn = w.ctx.db.acquire().await.unwrap();
    Q::new("SELECT COUNT(*) AS n FROM builds WHERE callback_token IS NOT NULL")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .int("n")
        .unwrap()
}

fn callback(token: &str) -> Callback {
    Callback { url: "http://127.0.0.1:9/reconcile".into(), token: SecretString::from(token.to_owned()) }
}

async fn every_change_of_the_derived_state_is_one_numbered_event(engine: Engine) {
    use DeploymentState::*;
    let w = world(engine, &[]).await;
    let first = w.queue("demo", BuildKind::Deploy, None).await;
    w.run(&first).await;
    // A deploy cancelled before it ran changes nothing in the end: the
    // state goes back to the build before it.
    let second = w.queue("demo", BuildKind::Deploy, None).await;
    assert_eq!(submit::cancel(&w.ctx.db, &second).await.unwrap(), Cancel::Cancelled);
    let destroy = submit::delete(&w.ctx.db, &demo_id(), None, None).await.unwrap().unwrap().accepted.build_id;
    // A repeated delete changes nothing either.
    submit::delete(&w.ctx.db, &demo_id(), None, None).await.unwrap().unwrap();
    w.run(&destroy).await;
    let want = vec![
        (1, Building, Some(first.clone())),
        (2, Active, Some(first.clone())),
        (3, Building, Some(second.clone())),
        (4, Active, Some(first.clone())),
        (5, Destroying, Some(destroy.clone())),
        (6, Idle, Some(destroy.clone())),
    ];
    assert_eq!(all_events(&w).await, want);
    // Recording again without a change writes nothing.
    let mut tx = w.ctx.db.begin_write().await.unwrap();
    assert_eq!(events::record(&mut tx, "demo", 0).await.unwrap(), None);
    tx.commit().await.unwrap();
    assert_eq!(all_events(&w).await.len(), want.len());
}

slipway_jobs::on_both_engines!(every_change_of_the_derived_state_is_one_numbered_event);

async fn a_destroy_that_reaches_idle_queues_one_push_that_only_one_worker_can_take(engine: Engine) {
    let w = world(engine, &[]).await;
    let deploy = w.queue("demo", BuildKind::Deploy, None).await;
    w.run(&deploy).await;
    let deleted = submit::delete(&w.ctx.db, &demo_id(), Some(&callback("first-token")), None).await.unwrap().unwrap();
    assert!(deleted.callback_stored);
    // A repeat while the destroy waits replaces the callback.
    let again = submit::delete(&w.ctx.db, &demo_id(), Some(&callback("second-token")), None).await.unwrap().unwrap();
    assert!(again.callback_stored);
    assert_eq!(again.accepted.build_id, deleted.accepted.build_id);
    let destroy = deleted.accepted.build_id;
    assert_eq!(callback_jobs(&w).await, 0, "a push was queued before the destroy ended");
    w.run(&destroy).await;
    assert_eq!(w.build(&destroy).await.callback.unwrap()["state"], "queued");
    assert_eq!(callback_jobs(&w).await, 1);

    let mut tx = w.ctx.db.begin_write().await.unwrap();
    let taken = builds::take_callback(&mut tx, &destroy, 0).await.unwrap();
    tx.commit().await.unwrap();
    let (deployment, _, token) = taken.expect("the push is taken");
    assert_eq!((deployment.as_str(), token.as_str()), ("demo", "second-token"));
    assert_eq!(stored_tokens(&w).await, 0, "the token stayed after the push was taken");
    let mut tx = w.ctx.db.begin_write().await.unwrap();
    assert_eq!(builds::take_callback(&mut tx, &destroy, 0).await.unwrap(), None, "taken twice");
    tx.commit().await.unwrap();

    // A worker that took the push and died leaves it `sending`; the job
    // handed out again sends nothing, and says the push was interrupted.
    assert_eq!(w.build(&destroy).await.callback.unwrap()["state"], "sending");
    callback::run(CallbackJob::reconcile(destroy.clone()), &w.ctx).await.unwrap();
    let outcome = w.build(&destroy).await.callback.unwrap();
    assert_eq!((&outcome["state"], &outcome["error"]), (&json!("failed"), &json!("interrupted")), "{outcome}");
    callback::run(CallbackJob::reconcile(destroy.clone()), &w.ctx).await.unwrap();
    assert_eq!(w.build(&destroy).await.callback.unwrap(), outcome, "a third delivery changed the outcome");
    // After idle, a delete's callback is not stored: nothing would send it.
    let late = submit::delete(&w.ctx.db, &demo_id(), Some(&callback("late-token")), None).await.unwrap().unwrap();
    assert!(!late.callback_stored);
    assert_eq!(late.accepted.state, DeploymentState::Idle);
    assert_eq!(stored_tokens(&w).await, 0);
}

slipway_jobs::on_both_engines!(a_destroy_that_reaches_idle_queues_one_push_that_only_one_worker_can_take);

async fn a_destroy_that_fails_or_is_cancelled_drops_the_token_and_queues_no_push(engine: Engine) {
    let w = world(engine, &[]).await;
    // Cancelled before it ran.
    let deploy = w.queue("demo", BuildKind::Deploy, None).await;
    w.run(&deploy).await;
    let destroy = submit::delete(&w.ctx.db, &demo_id(), Some(&callback("cancelled-token")), None)
        .await
        .unwrap()
        .unwrap()
        .accepted
        .build_id;
    assert_eq!(submit::cancel(&w.ctx.db, &destroy).await.unwrap(), Cancel::Cancelled);
    let outcome = w.build(&destroy).await.callback.unwrap();
    assert_eq!(outcome["state"], "not_sent", "{outcome}");

    // Failed: a source whose destroy effect exits 1.
    let root = w.db.path("failing-destroy");
    let effects = root.join("core/effects");
    std::fs::create_dir_all(&effects).unwrap();
    std::fs::write(root.join("core/default.nix"), "{ provider ? {} }: { }\n").unwrap();
    for (name, body) in [
        ("deploy", "#!/bin/sh\necho '{\"nodes\": []}' > \"$SBOM_OUT_DIR/nodes.json\"\n"),
        ("destroy", "#!/bin/sh\necho cannot tear down >&2\nexit 1\n"),
    ] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(effects.join(name), body).unwrap();
        std::fs::set_permissions(effects.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let source = format!("path:{}", root.display());
    let other = w.queue("other", BuildKind::Deploy, Some(&source)).await;
    w.run(&other).await;
    let id = DeploymentId::parse("other").unwrap();
    let destroy =
        submit::delete(&w.ctx.db, &id, Some(&callback("failed-token")), None).await.unwrap().unwrap().accepted.build_id;
    let report = w.run(&destroy).await;
    assert_eq!(report.status, BuildStatus::Failed, "{report:?}");
    let outcome = w.build(&destroy).await.callback.unwrap();
    assert_eq!(outcome["state"], "not_sent", "{outcome}");
    assert_eq!(callback_jobs(&w).await, 0);
    assert_eq!(stored_tokens(&w).await, 0);
}

slipway_jobs::on_both_engines!(a_destroy_that_fails_or_is_cancelled_drops_the_token_and_queues_no_push);

/// Waits at most 30 s for `follow` to be woken: whether it was.
async fn woken(follow: &mut slipway_jobs::channel::Follow) -> bool {
    tokio::time::timeout(std::time::Duration::from_secs(30), follow.woken()).await.is_ok()
}

/// The api's deployment channel comes back after PostgreSQL refused and
/// dropped every connection for 3 s: once it listens again it wakes every
/// followed deployment (what was notified meanwhile is lost), then only
/// the followers of the deployment a notification names.
#[tokio::test]
async fn the_deployment_channel_listens_again_after_postgres_refused_every_connection() {
    use slipway_jobs::channel::Hub;
    use std::time::Duration;
    let w = world(Engine::Postgres, &[]).await;
    let hub = Hub::new(w.ctx.db.clone());
    let mut demo = hub.follow("demo");
    let mut other = hub.follow("other");
    assert!(woken(&mut demo).await && woken(&mut other).await, "the hub never listened");

    let outage = std::time::Instant::now();
    let mut dropped = 0;
    while outage.elapsed() < Duration::from_secs(3) {
        dropped += w.db.accept_connections(false).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(dropped > 0, "the hub's connection was not dropped");
    w.db.accept_connections(true).await;
    assert!(woken(&mut demo).await && woken(&mut other).await, "the hub did not wake every follower again");

    // A notification of `demo` wakes its follower and not `other`'s. The
    // hub may listen once more first (a connection the outage's last round
    // refused), which wakes both at once: what was sent before it may be
    // lost, so it is sent again.
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let mut relistened = 0;
    loop {
        Q::new("SELECT pg_notify($1, $2)").text(events::NOTIFY_CHANNEL).text("demo").execute(&mut conn).await.unwrap();
        assert!(woken(&mut demo).await, "a notification went unheard");
        if !other.is_woken() {
            break;
        }
        relistened += 1;
        assert!(relistened < 3, "every notification woke the followers of another deployment");
        other.woken().await;
    }
}

/// The hub forgets a deployment when its last follower goes, and a
/// deployment's followers share one topic.
async fn the_hub_forgets_a_deployment_when_its_last_follower_goes(engine: Engine) {
    use slipway_jobs::channel::Hub;
    let w = world(engine, &[]).await;
    let hub = Hub::new(w.ctx.db.clone());
    let first = hub.follow("demo");
    let second = hub.follow("demo");
    let other = hub.follow("other");
    assert_eq!(hub.followed(), 2);
    drop(first);
    assert_eq!(hub.followed(), 2, "demo still has a follower");
    drop(second);
    assert_eq!(hub.followed(), 1);
    drop(other);
    assert_eq!(hub.followed(), 0);
}

slipway_jobs::on_both_engines!(the_hub_forgets_a_deployment_when_its_last_follower_goes);
