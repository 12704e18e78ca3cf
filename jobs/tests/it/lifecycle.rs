//! What a deployment's builds do to each other: superseded deploys (Q-7),
//! the state of a deployment whose newest build never ran (ST-1), the
//! order of submit times (ST-2), and what a build's log shows of the host.

use slipway_jobs::jobs::build_job::{self as build, Ran};
use slipway_jobs::state::{BuildKind, BuildStatus, DeploymentState};
use slipway_jobs::store::queue::BuildJob;
use slipway_jobs::store::{builds, Engine};
use slipway_jobs::submit;
use slipway_jobs::test_support::{
    checker, record_success, source_with_deploy, submit_demo, wait_for, world, AnySource,
};

async fn a_build_cancelled_before_it_ran_leaves_the_state_of_the_last_build_that_ran(engine: Engine) {
    let w = world(engine, &[]).await;
    let first = w.queue("demo", BuildKind::Deploy, None).await;
    assert_eq!(w.run(&first).await.status, BuildStatus::Succeeded);
    let second = w.queue("demo", BuildKind::Deploy, None).await;
    assert_eq!(submit::cancel(&w.ctx.db, &second).await.unwrap(), submit::Cancel::Cancelled);
    assert_eq!(w.state("demo").await, DeploymentState::Active, "a build that never started changed nothing");
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let latest = builds::latest(&mut conn, "demo").await.unwrap().unwrap();
    assert_eq!((latest.id.as_str(), latest.status, latest.started_at), (second.as_str(), BuildStatus::Cancelled, None));
    let deciding = builds::deciding(&mut conn, "demo").await.unwrap().unwrap();
    assert_eq!(deciding.id, first);
}

async fn a_newer_submit_supersedes_the_queued_deploys_and_only_the_newest_runs(engine: Engine) {
    let w = world(engine, &[]).await;
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(w.queue("demo", BuildKind::Deploy, None).await);
    }
    let newest = ids.last().unwrap().clone();
    for pair in ids.windows(2) {
        // Each is superseded by the submit that came after it.
        let (b, by) = (w.build(&pair[0]).await, &pair[1]);
        assert_eq!((b.status, b.reason.as_deref()), (BuildStatus::Superseded, Some("superseded")), "{}", b.id);
        assert!(b.error.as_deref().unwrap().contains(by.as_str()), "{:?}", b.error);
        assert_eq!(b.started_at, None);
    }
    assert_eq!(w.build(&newest).await.status, BuildStatus::Queued);
    // Each was dispatched before the next superseded it: their jobs run nothing.
    assert_eq!(w.dispatched().await, ids);
    for id in &ids[..19] {
        let again = build::run(BuildJob { build_id: id.clone() }, &w.ctx).await.unwrap();
        assert!(matches!(again, Ran::AlreadyFinished), "{again:?}");
    }
    assert_eq!(w.run(&newest).await.status, BuildStatus::Succeeded);
    assert_eq!(w.state("demo").await, DeploymentState::Active);
}

async fn a_deploy_and_a_destroy_never_supersede_each_other(engine: Engine) {
    let w = world(engine, &[]).await;
    let before = w.queue("demo", BuildKind::Deploy, None).await;
    let destroy = w.queue("demo", BuildKind::Destroy, None).await;
    let after = w.queue("demo", BuildKind::Deploy, None).await;
    for id in [&before, &destroy, &after] {
        assert_eq!(w.build(id).await.status, BuildStatus::Queued, "{id}");
    }
    // A deploy after the destroy is superseded by a newer one; the deploy
    // before the destroy and the destroy itself stay.
    let newest = w.queue("demo", BuildKind::Deploy, None).await;
    assert_eq!(w.build(&after).await.status, BuildStatus::Superseded);
    for id in [&before, &destroy, &newest] {
        assert_eq!(w.build(id).await.status, BuildStatus::Queued, "{id}");
    }
    for id in [&before, &destroy, &newest] {
        assert_eq!(w.run(id).await.status, BuildStatus::Succeeded, "{id}");
    }
    assert_eq!(w.state("demo").await, DeploymentState::Active);
}

async fn concurrent_submits_to_one_deployment_are_timed_in_submit_order(engine: Engine) {
    let w = world(engine, &[]).await;
    let sources = AnySource(checker());
    let submits = (0..24).map(|_| submit_demo(&w.ctx.db, &sources, "demo", 1000));
    for answer in futures::future::join_all(submits).await {
        answer.unwrap();
    }
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let mut list = builds::list(&mut conn, "demo", None, 100, None).await.unwrap();
    list.reverse();
    assert_eq!(list.len(), 24);
    for pair in list.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(a.queued_at <= b.queued_at, "{} queued at {} after {} at {}", a.id, a.queued_at, b.id, b.queued_at);
        // The id's timestamp (second 2 of `<deployment>.<time>.<random>`) sorts the same way.
        let time = |id: &str| id.split('.').nth(1).unwrap().to_owned();
        assert!(time(&a.id) <= time(&b.id), "{} before {}", a.id, b.id);
    }
}

async fn a_build_log_shows_no_absolute_path_of_the_host(engine: Engine) {
    let w = world(engine, &[]).await;
    let script = r#"#!/bin/sh
echo "work $PWD"
echo "configuration $CONFIGURATION_FILE"
echo "sbom $SBOM_OUT_DIR/web.cdx.json"
echo "state $STATE_DIR/nodes"
echo "source $MODULE_SOURCE_DIR/core"
echo "scratch $TMPDIR"
echo '{"nodes": [{"name": "web", "dnsNames": [], "outcome": "deployed"}]}' > "$SBOM_OUT_DIR/nodes.json"
echo '{"bomFormat": "CycloneDX", "specVersion": "1.5", "components": []}' > "$SBOM_OUT_DIR/web.cdx.json"
"#;
    let source = source_with_deploy(&w.db.path("paths"), script);
    let id = w.queue("demo", BuildKind::Deploy, Some(&source)).await;
    assert_eq!(w.run(&id).await.status, BuildStatus::Succeeded);
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let log = builds::log(&mut conn, &id).await.unwrap().unwrap();
    let host = w.db.dir.path().display().to_string();
    assert!(!log.contains(&host), "the log shows the host's folder {host}:\n{log}");
    for line in [
        "work .\n",
        "configuration ./configuration.json\n",
        "sbom ./sbom/web.cdx.json\n",
        "state $STATE_DIR/nodes\n",
        "source $MODULE_SOURCE_DIR/core\n",
        "scratch /tmp\n",
    ] {
        assert!(log.contains(line), "{line:?} is not in the log:\n{log}");
    }
}

/// `GET /deployments?ids=` reads many deployments in a few statements:
/// each read is the one `GET /deployments/{id}` gives, in the order asked,
/// a repeated id read twice and an unknown one left out, with the latest,
/// the deciding and the latest succeeded build told apart.
async fn reading_many_deployments_at_once_gives_what_reading_each_gives(engine: Engine) {
    let w = world(engine, &[]).await;
    // a: a deploy that ran, then one cancelled before it ran.
    let ran = w.queue("a", BuildKind::Deploy, None).await;
    record_success(&w.ctx.db, &ran).await;
    let cancelled = w.queue("a", BuildKind::Deploy, None).await;
    assert_eq!(submit::cancel(&w.ctx.db, &cancelled).await.unwrap(), submit::Cancel::Cancelled);
    // b: a deploy that ran, then a destroy waiting; c: a deploy waiting.
    let deployed = w.queue("b", BuildKind::Deploy, None).await;
    record_success(&w.ctx.db, &deployed).await;
    w.queue("b", BuildKind::Destroy, None).await;
    w.queue("c", BuildKind::Deploy, None).await;

    let ids: Vec<String> = ["c", "unknown", "a", "b", "a"].map(String::from).to_vec();
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let many = slipway_jobs::read::deployments(&mut conn, &ids).await.unwrap();
    let mut each = Vec::new();
    for id in &ids {
        each.extend(slipway_jobs::read::deployment(&mut conn, id).await.unwrap());
    }
    let ids_read: Vec<&str> = many.iter().map(|r| r.deployment.id.as_str()).collect();
    assert_eq!(ids_read, ["c", "a", "b", "a"]);
    assert_eq!(format!("{many:#?}"), format!("{each:#?}"));
    let a = &many[1];
    let picked = [&a.last_build, &a.state_build].map(|b| b.as_ref().map(|b| b.id.clone()));
    assert_eq!(picked, [Some(cancelled), Some(ran)], "the latest and the deciding build of a");
    assert_eq!(many[2].state, DeploymentState::Destroying, "b waits for its destroy");
    assert_eq!(many[0].state, DeploymentState::Building, "c waits for its deploy");
}

slipway_jobs::on_both_engines!(
    reading_many_deployments_at_once_gives_what_reading_each_gives,
    a_build_cancelled_before_it_ran_leaves_the_state_of_the_last_build_that_ran,
    a_newer_submit_supersedes_the_queued_deploys_and_only_the_newest_runs,
    a_deploy_and_a_destroy_never_supersede_each_other,
    concurrent_submits_to_one_deployment_are_timed_in_submit_order,
    a_build_log_shows_no_absolute_path_of_the_host,
);

/// Output an effect writes while the database is away is kept and stored
/// once it is back: the log misses no line.
#[tokio::test]
async fn a_build_log_keeps_the_output_written_while_the_database_was_away() {
    let w = world(Engine::Postgres, &[]).await;
    let script = r#"#!/bin/sh
for i in 1 2 3 4 5 6 7 8; do
  echo "tick $i"
  echo "$i" > "$STATE_DIR/ticks"
  [ "$i" = 2 ] && while [ ! -e "$STATE_DIR/resume" ]; do sleep 0.05; done
  sleep 0.3
done
echo '{"nodes": [{"name": "web", "dnsNames": [], "outcome": "deployed"}]}' > "$SBOM_OUT_DIR/nodes.json"
echo '{"bomFormat": "CycloneDX", "specVersion": "1.5", "components": []}' > "$SBOM_OUT_DIR/web.cdx.json"
"#;
    let source = source_with_deploy(&w.db.path("ticks"), script);
    let id = w.queue("demo", BuildKind::Deploy, Some(&source)).await;
    let ctx = w.ctx.clone();
    let job = BuildJob { build_id: id.clone() };
    let running = tokio::spawn(async move { build::run(job, &ctx).await });
    let state = w.ctx.provider_state_dir("demo");
    let tick = || std::fs::read_to_string(state.join("ticks")).ok().and_then(|t| t.trim().parse::<u32>().ok());
    wait_for("the effect's second tick", std::time::Duration::from_secs(60), || async {
        (tick() == Some(2)).then_some(())
    })
    .await;
    // The database goes away while the effect writes ticks 3 to 8.
    w.db.accept_connections(false).await;
    std::fs::write(state.join("resume"), "").unwrap();
    wait_for("the effect's last tick", std::time::Duration::from_secs(60), || async {
        (tick() == Some(8)).then_some(())
    })
    .await;
    w.db.accept_connections(true).await;
    let ran = tokio::time::timeout(std::time::Duration::from_secs(120), running).await.unwrap().unwrap().unwrap();
    assert!(matches!(ran, Ran::Finished(ref r) if r.status == BuildStatus::Succeeded), "{ran:?}");
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let log = builds::log(&mut conn, &id).await.unwrap().unwrap();
    for i in 1..=8 {
        assert!(log.contains(&format!("tick {i}\n")), "tick {i} is missing from the log:\n{log}");
    }
}
