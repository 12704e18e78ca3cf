//! The dashboard's queues and workers (`GET /ui/fragments/fleet`) against
//! a real worker on either engine: the worker shows alive with the queues
//! it serves; while it holds a build its build slot is in use and the
//! `builds` queue has a job running; once it stops beating (stopped by a
//! failpoint right after it claimed the build) it shows as gone.

use crate::common;

use common::{binary, command, demo, free_port, start, wait_for, Api};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::TestDatabase;
use std::time::Duration;

/// The fleet fragment's HTML (`200`, read with `api`'s token, an operator's).
async fn fleet(api: &Api) -> Option<String> {
    let answer = api.http.get(format!("{}/ui/fragments/fleet", api.base)).bearer_auth(&api.token).send().await.ok()?;
    assert_eq!(answer.status().as_u16(), 200, "GET /ui/fragments/fleet");
    answer.text().await.ok()
}

/// The `<tr>` of the worker whose name starts with `prefix`, if shown.
fn worker_row<'a>(html: &'a str, prefix: &str) -> Option<&'a str> {
    let start = html.find(&format!(r#"<tr data-worker="{prefix}"#))?;
    let end = html[start..].find("</tr>")? + start;
    Some(&html[start..end])
}

async fn a_worker_shows_alive_with_its_queues_then_its_slot_in_use_then_gone_once_it_stops_beating(engine: Engine) {
    let db = TestDatabase::new(engine).await;
    let port = free_port();
    let _api = start(command(&binary("slipway-api"), &db, port), &db, "api.log");
    let mut worker = command(&binary("slipway-worker"), &db, port);
    worker.args(["work", "--name", "fleetview"]).env("SLIPWAY_FAILPOINTS", "build_claimed=stop");
    let _worker = start(worker, &db, "worker.log");
    let mut api = Api::connect(&db, port).await;
    api.token = Api::operator_token(&db, port);

    // Its queues' apalis workers register one by one as they start.
    let alive = wait_for("the worker to show alive with its five queues", Duration::from_secs(60), || async {
        let html = fleet(&api).await?;
        let row = worker_row(&html, "fleetview@")?;
        (row.contains("s-alive") && row.contains("<td>builds, callbacks, nix, readiness, rollouts</td>"))
            .then(|| row.to_owned())
    })
    .await;
    assert!(
        alive.contains("<td>builds, callbacks, nix, readiness, rollouts</td><td>0</td>"),
        "no slot in use yet: {alive}"
    );

    let (status, accepted) = api.submit("demo", &demo()).await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    // The worker claims the build and stops itself there: one slot in use,
    // one job running on the builds queue.
    let busy = wait_for("the build slot to show in use", Duration::from_secs(60), || async {
        let html = fleet(&api).await?;
        let row = worker_row(&html, "fleetview@")?;
        row.contains("</td><td>1</td><td>").then(|| html.clone())
    })
    .await;
    assert!(
        busy.contains(r#"<tr data-queue="builds"><td>builds</td><td>0</td><td>—</td><td>0</td><td>1</td>"#),
        "{busy}"
    );

    // Stopped, it misses its heartbeats (2 s each here): gone after two.
    let gone = wait_for("the stopped worker to show gone", Duration::from_secs(60), || async {
        let html = fleet(&api).await?;
        worker_row(&html, "fleetview@").filter(|r| r.contains("s-gone")).map(str::to_owned)
    })
    .await;
    assert!(gone.contains("</td><td>1</td><td>"), "the build is still held by the stopped worker: {gone}");
}

slipway_jobs::on_both_engines!(
    a_worker_shows_alive_with_its_queues_then_its_slot_in_use_then_gone_once_it_stops_beating
);
