//! Job bodies against a real SQLite database, real effects and real Nix
//! builds of the reference module source (`nix/`).

use slipway_jobs::id::DeploymentId;
use slipway_jobs::jobs::build_job::{self as build, Ran};
use slipway_jobs::jobs::report::Reason;
use slipway_jobs::jobs::{sweep, Ctx};
use slipway_jobs::state::{BuildKind, BuildStatus, DeploymentState};
use slipway_jobs::store::queue::BuildJob;
use slipway_jobs::store::{builds, sboms, Engine, Q};
use slipway_jobs::submit;
use slipway_jobs::test_support::{
    checker, claim_as, processes_in_pid_namespace, source_with_deploy, submit_demo, world, AnySource, World,
};
use std::sync::Arc;

/// The PID namespace the effect of deployment `demo` recorded
/// (`$STATE_DIR/namespace`): where every process it started lives.
fn namespace(w: &World) -> String {
    std::fs::read_to_string(w.ctx.provider_state_dir("demo").join("namespace")).unwrap().trim().to_owned()
}

async fn a_deploy_stores_every_nodes_sbom_and_a_destroy_removes_them(engine: Engine) {
    let w = world(engine, &[]).await;
    let build_id = w.queue("demo", BuildKind::Deploy, None).await;
    let report = w.run(&build_id).await;
    assert_eq!(report.status, BuildStatus::Succeeded, "{report:?}");
    assert_eq!(w.state("demo").await, DeploymentState::Active);
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let list = sboms::list(&mut conn, "demo").await.unwrap();
    let node_names: Vec<&str> = report.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(list.iter().map(|e| e.node.as_str()).collect::<Vec<_>>(), {
        let mut n = node_names.clone();
        n.sort();
        n
    });
    let mut total = 0;
    for entry in &list {
        assert_eq!(entry.status, "ready", "{entry:?}");
        assert_eq!(entry.build_id, build_id);
        let Some(sboms::NodeSbom::Ready(doc)) = sboms::document(&mut conn, "demo", &entry.node).await.unwrap() else {
            panic!("no document for {}", entry.node)
        };
        assert_eq!(doc["bomFormat"], "CycloneDX");
        assert_eq!(doc["specVersion"], "1.5");
        let components = doc["components"].as_array().unwrap();
        assert!(!components.is_empty());
        for c in components {
            assert!(c["purl"].as_str().unwrap().starts_with("pkg:nix/"), "{c}");
        }
        total += components.len() as i64;
    }
    // Nodes share packages, and each shared component is kept once.
    let stored = sboms::component_count(&mut conn).await.unwrap();
    assert!(stored < total, "{stored} stored for {total} listed");
    drop(conn);

    let destroy =
        submit::delete(&w.ctx.db, &DeploymentId::parse("demo").unwrap(), None, None).await.unwrap().unwrap().accepted;
    let report = w.run(&destroy.build_id).await;
    assert_eq!(report.status, BuildStatus::Succeeded, "{report:?}");
    assert_eq!(w.state("demo").await, DeploymentState::Idle);
    let mut conn = w.ctx.db.acquire().await.unwrap();
    assert!(sboms::list(&mut conn, "demo").await.unwrap().is_empty());
    assert_eq!(sboms::component_count(&mut conn).await.unwrap(), 0);
    assert!(!w.ctx.provider_state_dir("demo").join("nodes").exists());
}

async fn an_effect_that_exits_non_zero_fails_the_build_keeps_its_log_and_changes_no_sbom(engine: Engine) {
    let w = world(engine, &[]).await;
    let good = w.queue("demo", BuildKind::Deploy, None).await;
    assert_eq!(w.run(&good).await.status, BuildStatus::Succeeded);
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let before = sboms::list(&mut conn, "demo").await.unwrap();
    drop(conn);

    let broken = source_with_deploy(
        &w.db.path("broken"),
        "#!/bin/sh\necho 'deploy starting'\necho 'no such host' >&2\nexit 3\n",
    );
    let bad = w.queue("demo", BuildKind::Deploy, Some(&broken)).await;
    let report = w.run(&bad).await;
    assert_eq!(report.status, BuildStatus::Failed);
    assert_eq!(report.reason.map(Reason::as_str), Some("effect_failed"));
    assert_eq!(report.exit_code, Some(3));
    assert_eq!(w.state("demo").await, DeploymentState::Failed);
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let log = builds::log(&mut conn, &bad).await.unwrap().unwrap();
    assert!(log.contains("deploy starting") && log.contains("no such host"), "{log}");
    let after = sboms::list(&mut conn, "demo").await.unwrap();
    assert_eq!(
        after.iter().map(|e| (&e.node, &e.build_id)).collect::<Vec<_>>(),
        before.iter().map(|e| (&e.node, &e.build_id)).collect::<Vec<_>>()
    );
}

async fn a_node_that_fails_is_named_in_the_builds_error_and_the_others_are_reported(engine: Engine) {
    let w = world(engine, &[]).await;
    let script = r#"#!/bin/sh
cat > "$SBOM_OUT_DIR/nodes.json" <<'JSON'
{"nodes": [{"name": "web", "dnsNames": ["web.example.org"], "outcome": "deployed", "system": "/nix/store/x-web", "error": null},
           {"name": "db", "dnsNames": [], "outcome": "failed", "system": null, "error": "disk full"}]}
JSON
echo '{"bomFormat": "CycloneDX", "specVersion": "1.5", "components": []}' > "$SBOM_OUT_DIR/web.cdx.json"
echo 'not built' > "$SBOM_OUT_DIR/db.error"
exit 1
"#;
    let source = source_with_deploy(&w.db.path("partial"), script);
    let id = w.queue("demo", BuildKind::Deploy, Some(&source)).await;
    let report = w.run(&id).await;
    assert_eq!(report.status, BuildStatus::Failed);
    assert_eq!(report.reason.map(Reason::as_str), Some("nodes_failed"));
    let error = report.error.unwrap();
    assert!(error.contains("db (disk full)"), "{error}");
    assert_eq!(report.nodes.len(), 2);
    let mut conn = w.ctx.db.acquire().await.unwrap();
    assert!(sboms::list(&mut conn, "demo").await.unwrap().is_empty(), "a failed build changes no SBOM");
}

async fn a_deploy_past_its_deadline_is_killed_with_its_whole_process_group(engine: Engine) {
    let w = world(engine, &[("DEPLOY_TIMEOUT", "1s")]).await;
    let script = "#!/bin/sh\nreadlink /proc/self/ns/pid > \"$STATE_DIR/namespace\"\nsh -c 'touch \"$STATE_DIR/child.started\"; exec sleep 600' &\nwhile [ ! -e \"$STATE_DIR/child.started\" ]; do sleep 0.01; done\necho started\nwait\n";
    let source = source_with_deploy(&w.db.path("slow"), script);
    let id = w.queue("demo", BuildKind::Deploy, Some(&source)).await;
    let report = w.run(&id).await;
    assert_eq!(report.status, BuildStatus::Failed);
    assert_eq!(report.reason.map(Reason::as_str), Some("timeout"));
    // The background `sleep` is gone (or a zombie waiting to be reaped): not running.
    let left = processes_in_pid_namespace(&namespace(&w));
    assert!(left.is_empty(), "the effect's child survived its deadline: {left:?}");
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let log = builds::log(&mut conn, &id).await.unwrap().unwrap();
    assert!(log.contains("started") && log.contains("deadline"), "{log}");
}

async fn later_builds_of_a_deployment_wait_and_are_dispatched_in_submit_order(engine: Engine) {
    let w = world(engine, &[]).await;
    // A deploy and then a destroy: neither supersedes the other (Q-7).
    let first = w.queue("demo", BuildKind::Deploy, None).await;
    let second = w.queue("demo", BuildKind::Destroy, None).await;
    let other = w.queue("other", BuildKind::Deploy, None).await;
    // One job per deployment at a time; other deployments are not held back.
    assert_eq!(w.jobs().await, 2);
    assert_eq!(w.dispatched().await, [first.clone(), other.clone()]);
    w.run(&first).await;
    // The destroy's job, and the readiness round of the deploy that succeeded.
    assert_eq!(w.jobs().await, 4);
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let b = builds::get(&mut conn, &second).await.unwrap().unwrap();
    assert_eq!(b.status, BuildStatus::Queued);
    // Listed in submit order: the second build of demo is dispatched now.
    assert_eq!(w.dispatched().await, [first, second, other]);
}

async fn a_build_whose_worker_died_is_taken_over_and_its_effect_run_again(engine: Engine) {
    let w = world(engine, &[]).await;
    let id = w.queue("demo", BuildKind::Deploy, None).await;
    // A worker claimed it and died before recording anything.
    let claimed = claim_as(&w.ctx.db, &id, "dead-worker").await;
    assert_eq!((claimed.status, claimed.attempts), (BuildStatus::Running, 1));
    let report = w.run(&id).await;
    assert_eq!(report.status, BuildStatus::Succeeded);
    assert_eq!(report.attempt, 2);
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let b = builds::get(&mut conn, &id).await.unwrap().unwrap();
    assert_eq!((b.attempts, b.worker.as_deref()), (2, Some("test-worker")));
}

async fn a_repeated_delivery_of_a_finished_build_runs_nothing(engine: Engine) {
    let w = world(engine, &[]).await;
    let id = w.queue("demo", BuildKind::Deploy, None).await;
    w.run(&id).await;
    let again = build::run(BuildJob { build_id: id.clone() }, &w.ctx).await.unwrap();
    assert!(matches!(again, Ran::AlreadyFinished), "{again:?}");
}

async fn a_cancelled_queued_build_never_runs_and_hands_its_turn_to_the_next(engine: Engine) {
    let w = world(engine, &[]).await;
    let first = w.queue("demo", BuildKind::Deploy, None).await;
    let second = w.queue("demo", BuildKind::Destroy, None).await;
    assert_eq!(submit::cancel(&w.ctx.db, &first).await.unwrap(), submit::Cancel::Cancelled);
    assert_eq!(w.dispatched().await, [first.clone(), second.clone()]);
    let again = build::run(BuildJob { build_id: first.clone() }, &w.ctx).await.unwrap();
    assert!(matches!(again, Ran::AlreadyFinished), "{again:?}");
    assert_eq!(
        submit::cancel(&w.ctx.db, &first).await.unwrap(),
        submit::Cancel::AlreadyFinished(BuildStatus::Cancelled)
    );
    assert_eq!(w.run(&second).await.status, BuildStatus::Succeeded);
}

async fn a_running_build_cancelled_on_request_has_its_effect_killed(engine: Engine) {
    let w = world(engine, &[]).await;
    let script = "#!/bin/sh\nreadlink /proc/self/ns/pid > \"$STATE_DIR/namespace\"\nsh -c 'touch \"$STATE_DIR/child.started\"; exec sleep 600' &\nwhile [ ! -e \"$STATE_DIR/child.started\" ]; do sleep 0.01; done\necho started\nwait\n";
    let source = source_with_deploy(&w.db.path("slow"), script);
    let id = w.queue("demo", BuildKind::Deploy, Some(&source)).await;
    let ctx = w.ctx.clone();
    let job = BuildJob { build_id: id.clone() };
    let running = tokio::spawn(async move { build::run(job, &ctx).await });
    // Wait (with a deadline) until the effect runs, then cancel.
    let started = w.ctx.provider_state_dir("demo").join("child.started");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !started.exists() {
        assert!(std::time::Instant::now() < deadline, "the effect never started");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(submit::cancel(&w.ctx.db, &id).await.unwrap(), submit::Cancel::Requested);
    let report =
        match tokio::time::timeout(std::time::Duration::from_secs(30), running).await.unwrap().unwrap().unwrap() {
            Ran::Finished(r) => r,
            other => panic!("{other:?}"),
        };
    assert_eq!(report.status, BuildStatus::Cancelled);
    assert_eq!(w.state("demo").await, DeploymentState::Failed);
    let left = processes_in_pid_namespace(&namespace(&w));
    assert!(left.is_empty(), "the cancelled effect's child still runs: {left:?}");
}

async fn a_process_that_leaves_the_effects_group_is_killed_at_the_deadline_too(engine: Engine) {
    let w = world(engine, &[("DEPLOY_TIMEOUT", "1s")]).await;
    let script = "#!/bin/sh\nreadlink /proc/self/ns/pid > \"$STATE_DIR/namespace\"\nsetsid sh -c 'touch \"$STATE_DIR/escaped.started\"; exec env -i sleep 600' &\nwhile [ ! -e \"$STATE_DIR/escaped.started\" ]; do sleep 0.01; done\nsleep 600\n";
    let source = source_with_deploy(&w.db.path("escape"), script);
    let id = w.queue("demo", BuildKind::Deploy, Some(&source)).await;
    let started = std::time::Instant::now();
    let report = w.run(&id).await;
    assert_eq!(report.reason.map(Reason::as_str), Some("timeout"));
    // The escaped process holds the log pipe open; the build must not wait for it.
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "took {:?}", started.elapsed());
    let left = processes_in_pid_namespace(&namespace(&w));
    assert!(left.is_empty(), "the escaped process survived: {left:?}");
}

async fn an_effect_that_exits_leaves_no_process_behind(engine: Engine) {
    let w = world(engine, &[]).await;
    let script = r#"#!/bin/sh
readlink /proc/self/ns/pid > "$STATE_DIR/namespace"
setsid sh -c 'touch "$STATE_DIR/escaped.started"; exec env -i sleep 600' &
while [ ! -e "$STATE_DIR/escaped.started" ]; do sleep 0.01; done
echo '{"nodes": [{"name": "web", "dnsNames": [], "outcome": "deployed"}]}' > "$SBOM_OUT_DIR/nodes.json"
echo '{"bomFormat": "CycloneDX", "specVersion": "1.5", "components": []}' > "$SBOM_OUT_DIR/web.cdx.json"
"#;
    let source = source_with_deploy(&w.db.path("leaky"), script);
    let id = w.queue("demo", BuildKind::Deploy, Some(&source)).await;
    let started = std::time::Instant::now();
    let report = w.run(&id).await;
    assert_eq!(report.status, BuildStatus::Succeeded, "{report:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "took {:?}", started.elapsed());
    let left = processes_in_pid_namespace(&namespace(&w));
    assert!(left.is_empty(), "the effect left processes running: {left:?}");
}

async fn a_huge_log_is_stored_up_to_its_limit_without_slowing_the_build(engine: Engine) {
    let w = world(engine, &[]).await;
    let script = "#!/bin/sh\nhead -c 12000000 /dev/zero | tr '\\0' 'x' | fold -w 100\nexit 1\n";
    let source = source_with_deploy(&w.db.path("chatty"), script);
    let id = w.queue("demo", BuildKind::Deploy, Some(&source)).await;
    let started = std::time::Instant::now();
    let report = w.run(&id).await;
    assert_eq!(report.exit_code, Some(1));
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "took {:?}", started.elapsed());
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let log = builds::log(&mut conn, &id).await.unwrap().unwrap();
    let limit = slipway_jobs::jobs::build_log::LOG_LIMIT as usize;
    assert!(log.len() > limit / 2 && log.len() < limit + 1024, "{} bytes stored", log.len());
    assert!(log.contains("further output is not stored"));
}

slipway_jobs::on_both_engines!(
    a_worker_whose_build_was_taken_over_writes_no_more_log,
    concurrent_submits_never_take_more_places_than_the_queue_has,
    a_huge_log_is_stored_up_to_its_limit_without_slowing_the_build,
    a_process_that_leaves_the_effects_group_is_killed_at_the_deadline_too,
    an_effect_that_exits_leaves_no_process_behind,
    the_sweep_empties_old_logs_and_work_folders_and_keeps_the_rows,
    a_cancelled_queued_build_never_runs_and_hands_its_turn_to_the_next,
    a_running_build_cancelled_on_request_has_its_effect_killed,
    a_deploy_stores_every_nodes_sbom_and_a_destroy_removes_them,
    an_effect_that_exits_non_zero_fails_the_build_keeps_its_log_and_changes_no_sbom,
    a_node_that_fails_is_named_in_the_builds_error_and_the_others_are_reported,
    a_deploy_past_its_deadline_is_killed_with_its_whole_process_group,
    later_builds_of_a_deployment_wait_and_are_dispatched_in_submit_order,
    a_build_whose_worker_died_is_taken_over_and_its_effect_run_again,
    a_repeated_delivery_of_a_finished_build_runs_nothing,
    the_sweep_deletes_old_names_evals_and_failed_builds_and_keeps_built_outputs,
);

/// Names evals and failed schema builds that ended over an hour ago go;
/// built outputs (the cache) and recent rows stay; so do the nix folders of
/// dead workers.
async fn the_sweep_deletes_old_names_evals_and_failed_builds_and_keeps_built_outputs(engine: Engine) {
    use slipway_jobs::store::nix_results::{self as rows, NewNixJob, NixKind};
    let w = world(engine, &[]).await;
    let old = slipway_jobs::store::now_ms() - 2 * sweep::NIX_RESULTS_KEPT.as_millis() as i64;
    let mut conn = w.ctx.db.acquire().await.unwrap();
    for (key, kind, outcome, at) in [
        ("names old", NixKind::NamesEval, Ok("{}"), old),
        ("names new", NixKind::NamesEval, Ok("{}"), slipway_jobs::store::now_ms()),
        ("schema failed", NixKind::SchemaBuild, Err("{}"), old),
        ("schema built", NixKind::SchemaBuild, Ok("{}"), old),
    ] {
        let job = NewNixJob { key, kind, source: "", provider: "local", input: None };
        rows::start_over(&mut conn, &job, at).await.unwrap();
        assert!(rows::finish(&mut conn, key, at, outcome, "", at).await.unwrap());
    }
    drop(conn);
    // A dead worker's nix folder goes; this live process's stays.
    let nix = w.ctx.config.state_dir.join("nix");
    let (dead, alive) =
        (nix.join("0123456789abcdef-2147483646"), nix.join(format!("0123456789abcdef-{}", std::process::id())));
    for dir in [&dead, &alive] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let swept = sweep::run(&w.ctx).await.unwrap();
    assert_eq!((swept.nix_results, swept.scratch_dirs), (2, 1));
    assert!(!dead.exists() && alive.exists());
    let mut conn = w.ctx.db.acquire().await.unwrap();
    for (key, kept) in [("names old", false), ("names new", true), ("schema failed", false), ("schema built", true)] {
        assert_eq!(rows::find(&mut conn, key).await.unwrap().is_some(), kept, "{key}");
    }
}

async fn the_sweep_empties_old_logs_and_work_folders_and_keeps_the_rows(engine: Engine) {
    let w = world(engine, &[]).await;
    let id = w.queue("demo", BuildKind::Deploy, None).await;
    w.run(&id).await;
    assert!(w.ctx.work_dir(&id).exists());
    // Within retention (14 days by default): nothing goes.
    assert_eq!(sweep::run(&w.ctx).await.unwrap(), sweep::Swept::default());
    // With a retention that has already passed, the log and work folder go.
    let mut short = (*w.ctx.config).clone();
    short.worker.retention = std::time::Duration::from_millis(1);
    let ctx = Ctx { config: Arc::new(short), ..w.ctx.clone() };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let swept = loop {
        let swept = sweep::run(&ctx).await.unwrap();
        if swept != sweep::Swept::default() || std::time::Instant::now() > deadline {
            break swept;
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(
        swept,
        sweep::Swept { logs: 1, work_dirs: 1, scratch_dirs: 0, nix_results: 0, plan_roots: 0, idempotency_keys: 0 }
    );
    assert!(!w.ctx.work_dir(&id).exists());
    let mut conn = w.ctx.db.acquire().await.unwrap();
    assert_eq!(builds::log(&mut conn, &id).await.unwrap().as_deref(), Some(""));
    assert_eq!(builds::get(&mut conn, &id).await.unwrap().unwrap().status, BuildStatus::Succeeded);
    drop(conn);
    assert_eq!(sweep::run(&ctx).await.unwrap(), sweep::Swept::default(), "a second sweep finds nothing");
}

/// Q-3 under concurrency: many submits at once (as through several apis)
/// admit exactly `QUEUE_SIZE` builds; every other one is refused whole.
async fn concurrent_submits_never_take_more_places_than_the_queue_has(engine: Engine) {
    // A small bound (every submit counts under the exclusive lock), and one
    // above PostgreSQL's max_connections (100 here), so that the first
    // submits commit under the shared lock and the last ones near the bound
    // under the exclusive lock, all at once.
    for (limit, submits) in [(3u32, 16usize), (120, 140)] {
        let w = world(engine, &[]).await;
        let sources = AnySource(checker());
        let submits = (0..submits).map(|i| {
            let (db, sources) = (w.ctx.db.clone(), &sources);
            async move { submit_demo(&db, sources, &format!("bound-{i}"), limit).await }
        });
        let answers = futures::future::join_all(submits).await;
        let accepted = answers.iter().filter(|a| a.is_ok()).count();
        let refused = answers.iter().filter(|a| matches!(a, Err(submit::SubmitError::QueueFull { .. }))).count();
        assert_eq!((accepted, refused), (limit as usize, answers.len() - limit as usize), "limit {limit}");
        let mut conn = w.ctx.db.acquire().await.unwrap();
        assert_eq!(builds::queued_up_to(&mut conn, 1000).await.unwrap(), i64::from(limit));
        // A refused submit wrote nothing: no deployment row, no job.
        let deployments = Q::new("SELECT COUNT(*) AS n FROM deployments").fetch_one(&mut conn).await.unwrap();
        assert_eq!(deployments.int("n").unwrap(), i64::from(limit));
        drop(conn);
        assert_eq!(w.jobs().await, i64::from(limit));
    }
}

/// Two attempts of one build that overlap (the first worker was taken for
/// dead but still runs): their log chunks never collide, and once the build
/// is taken over, only the new attempt writes.
async fn a_worker_whose_build_was_taken_over_writes_no_more_log(engine: Engine) {
    let w = world(engine, &[]).await;
    let id = w.queue("demo", BuildKind::Deploy, None).await;
    let first = claim_as(&w.ctx.db, &id, "worker-a").await;
    let (next, _) = builds::log_end(&mut w.ctx.db.acquire().await.unwrap(), &id, first.attempts).await.unwrap();
    assert!(builds::append_log(&mut w.ctx.db.acquire().await.unwrap(), &first, next, "first attempt\n").await.unwrap());
    let second = claim_as(&w.ctx.db, &id, "worker-b").await;
    assert_eq!(second.attempts, first.attempts + 1);
    let (next_second, bytes) =
        builds::log_end(&mut w.ctx.db.acquire().await.unwrap(), &id, second.attempts).await.unwrap();
    assert_eq!(bytes, "first attempt\n".len() as i64, "the limit counts every attempt's bytes");
    // The stale worker's next chunk is refused; the new attempt's is stored.
    assert!(!builds::append_log(&mut w.ctx.db.acquire().await.unwrap(), &first, next + 1, "stale\n").await.unwrap());
    assert!(builds::append_log(&mut w.ctx.db.acquire().await.unwrap(), &second, next_second, "second attempt\n")
        .await
        .unwrap());
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let log = builds::log(&mut conn, &id).await.unwrap().unwrap();
    assert_eq!(log, "first attempt\nsecond attempt\n");
}

/// A plan's GC root folder (`<state>/plans/<deployment>/<build>`) goes
/// once it is older than `PLAN_TTL`, a younger one stays, and so does its
/// deployment's folder while it holds one.
#[tokio::test]
async fn the_sweep_removes_plan_roots_older_than_the_plan_ttl() {
    let w = world(Engine::Sqlite, &[("PLAN_TTL", "1h")]).await;
    let (old, young) = (w.ctx.plan_roots_dir("demo", "demo.old"), w.ctx.plan_roots_dir("demo", "demo.young"));
    let gone = w.ctx.plan_roots_dir("other", "other.old");
    for dir in [&old, &young, &gone] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("web"), "a plan root stands here").unwrap();
    }
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    for dir in [&old, &gone] {
        std::fs::File::open(dir).unwrap().set_modified(two_hours_ago).unwrap();
    }
    let swept = sweep::run(&w.ctx).await.unwrap();
    assert_eq!(swept.plan_roots, 2);
    assert!(!old.exists() && young.exists(), "the plan older than PLAN_TTL stayed, or the younger one went");
    assert!(!gone.parent().unwrap().exists(), "an emptied deployment's plans folder stayed");
    // An applied plan's folder goes at once.
    sweep::drop_plan_roots(&w.ctx, "demo", "demo.young").unwrap();
    assert!(!young.parent().unwrap().exists());
    assert!(sweep::drop_plan_roots(&w.ctx, "demo", "../escape").is_err());
}
