//! The webhook store and fan-out (WH-1) on both engines, in-process: the
//! channel's events fanned out once, in order, only those subscribed and
//! recorded after the endpoint; the oldest pending delivery of each
//! deployment is the only one due; the sweep keeps each deployment's
//! newest delivery, from which the fan-out continues.

use slipway_jobs::state::BuildKind;
use slipway_jobs::store::webhooks::{self as rows, Attempted, NewEndpoint};
use slipway_jobs::store::{events, now_ms, Engine};
use slipway_jobs::test_support::world;
use slipway_jobs::webhooks::sources::fan_out;

async fn every_new_event_is_fanned_out_once_in_order_and_the_sweep_keeps_each_subject_s_newest(engine: Engine) {
    let w = world(engine, &[]).await;
    // Recorded before the endpoint: never delivered.
    w.queue("early", BuildKind::Deploy, None).await;
    let mut tx = w.ctx.db.begin_write().await.unwrap();
    let start_seq = events::last_seq(&mut tx).await.unwrap();
    let (all, some) = (vec!["*".to_owned()], vec!["deployment.destroying".to_owned()]);
    for (id, events) in [("wh_all", &all), ("wh_some", &some)] {
        let new = NewEndpoint {
            id,
            url: "https://panel.example/hook",
            events,
            description: None,
            secret: "whsec_x",
            start_seq,
            now: now_ms(),
        };
        rows::insert(&mut tx, &new).await.unwrap();
    }
    tx.commit().await.unwrap();
    w.queue("a", BuildKind::Deploy, None).await;
    w.queue("b", BuildKind::Deploy, None).await;
    w.queue("a", BuildKind::Destroy, None).await;

    let fan = |id: &'static str| {
        let db = w.ctx.db.clone();
        async move {
            let mut tx = db.begin_write().await.unwrap();
            let endpoint = rows::get(&mut tx, id).await.unwrap().unwrap();
            let n = fan_out(&mut tx, &endpoint, now_ms()).await.unwrap();
            tx.commit().await.unwrap();
            n
        }
    };
    let created = fan("wh_all").await;
    assert_eq!(fan("wh_all").await, 0, "a second fan-out created deliveries again");
    assert_eq!(fan("wh_some").await, 1, "only the subscribed type is fanned out");
    let mut conn = w.ctx.db.acquire().await.unwrap();
    let log = rows::deliveries(&mut conn, "wh_all", None, 100).await.unwrap();
    assert_eq!(log.len(), created);
    assert!(log.iter().all(|d| d.subject != "early"), "an event from before the endpoint was fanned out");
    let a: Vec<(i64, &str)> =
        log.iter().rev().filter(|d| d.subject == "a").map(|d| (d.n, d.event_type.as_str())).collect();
    assert_eq!(a.first(), Some(&(1, "deployment.building")), "{a:?}");
    assert!(a.windows(2).all(|p| p[0].0 < p[1].0), "{a:?}");

    // Due: the oldest pending of each deployment only.
    let due = rows::due(&mut conn, "wh_all", now_ms(), 100).await.unwrap();
    let mut subjects: Vec<(&str, i64)> = due.iter().map(|d| (d.subject.as_str(), d.n)).collect();
    subjects.sort();
    assert_eq!(subjects, [("a", 1), ("b", 1)]);
    drop(conn);

    // Every delivery of `a` delivered long ago: the sweep keeps its newest.
    let mut tx = w.ctx.db.begin_write().await.unwrap();
    for d in log.iter().filter(|d| d.subject == "a") {
        let done = Attempted {
            id: &d.id,
            status: "delivered",
            next_try_at: None,
            error: None,
            http_status: Some(204),
            excerpt: None,
            now: 1,
        };
        rows::record_attempt(&mut tx, &done).await.unwrap();
    }
    let swept = rows::sweep(&mut tx, now_ms()).await.unwrap();
    assert_eq!(swept as usize, a.len() - 1, "all but the newest of a");
    let newest = rows::last_fanned_out(&mut tx, "wh_all", "deployment", "a").await.unwrap();
    assert_eq!(newest, a.last().unwrap().0);
    tx.commit().await.unwrap();
    assert_eq!(fan("wh_all").await, 0, "a swept subject was fanned out again");
}

slipway_jobs::on_both_engines!(every_new_event_is_fanned_out_once_in_order_and_the_sweep_keeps_each_subject_s_newest);
