//! Readiness probes (PRODUCT.md §10) against real HTTP servers on
//! loopback: one that answers as the instance, one that answers for
//! another host, one without the header, a redirect (never followed), one
//! that hangs, a refused connection, a 404, a 429 with `Retry-After`, a
//! 500 retried once; then the `readiness` job's rounds and deadline on a
//! real database of each engine. Never sleeps to synchronise.

use slipway_jobs::outbound::Class;
use slipway_jobs::probe::{probe, State, PROBE_DEADLINE};
use slipway_jobs::source::outputs::{Instance, ReadinessMeta};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::{Behaviour, Reply, StubServer as Server};
use std::sync::Arc;
use std::time::Duration;

/// The instance `app.example.test`, reached through `server` as a plain-HTTP front door.
fn instance() -> Instance {
    Instance {
        name: "app".into(),
        domain: "app.example.test".into(),
        url: "https://app.example.test/".into(),
        section: Some("app".into()),
    }
}

fn through(server: &Server) -> ReadinessMeta {
    ReadinessMeta { connect: Some(format!("http://{}", server.addr)), ..ReadinessMeta::default() }
}

fn answering(f: impl Fn(usize, &str) -> Reply + Send + Sync + 'static) -> Behaviour {
    Arc::new(f)
}

/// Answers 200 naming the host it was asked for.
fn as_itself() -> Behaviour {
    answering(|_, host| Reply::Answer(200, vec![("X-Instance-Host", host.split(':').next().unwrap().to_owned())]))
}

#[tokio::test]
async fn an_instance_that_answers_200_naming_its_own_host_is_ready() {
    let server = Server::start(as_itself()).await;
    let p = probe(&instance(), &through(&server), &[]).await;
    assert_eq!((p.state, p.reason.as_deref()), (State::Ready, None));
    assert_eq!(server.hosts().as_slice(), ["app.example.test"], "asked under its own name");
}

#[tokio::test]
async fn a_200_naming_another_host_or_none_is_wrong_host() {
    let other =
        Server::start(answering(|_, _| Reply::Answer(200, vec![("X-Instance-Host", "hub.example.test".into())]))).await;
    let p = probe(&instance(), &through(&other), &[]).await;
    assert_eq!(p.state, State::WrongHost);
    assert!(p.reason.as_deref().unwrap().contains("hub.example.test"), "{p:?}");
    let nameless = Server::start(answering(|_, _| Reply::Answer(200, vec![]))).await;
    let p = probe(&instance(), &through(&nameless), &[]).await;
    assert_eq!(p.state, State::WrongHost);
    assert!(p.reason.as_deref().unwrap().contains("X-Instance-Host"), "{p:?}");
}

#[tokio::test]
async fn a_200_naming_its_own_host_and_then_another_is_not_ready() {
    let own_first = |_: usize, host: &str| {
        let host = host.split(':').next().unwrap().to_owned();
        Reply::Answer(200, vec![("X-Instance-Host", host), ("X-Instance-Host", "hub.example.test".into())])
    };
    let two = Server::start(answering(own_first)).await;
    let p = probe(&instance(), &through(&two), &[]).await;
    assert_eq!(p.state, State::WrongHost, "{p:?}");
    assert!(p.reason.as_deref().unwrap().contains("X-Instance-Host 2 times"), "{p:?}");
    // Its own name twice is no better: one server answers once.
    let twice = Server::start(answering(|_, host| {
        let host = host.split(':').next().unwrap().to_owned();
        Reply::Answer(200, vec![("X-Instance-Host", host.clone()), ("x-instance-host", host)])
    }))
    .await;
    assert_eq!(probe(&instance(), &through(&twice), &[]).await.state, State::WrongHost);
}

#[tokio::test]
async fn a_404_under_the_probe_path_is_not_found() {
    let server = Server::start(answering(|_, _| Reply::Answer(404, vec![]))).await;
    let p = probe(&instance(), &through(&server), &[]).await;
    assert_eq!(p.state, State::NotFound);
    assert!(p.reason.as_deref().unwrap().contains("/api/version"), "{p:?}");
}

#[tokio::test]
async fn a_redirect_is_never_followed_and_never_ready() {
    let target = Server::start(as_itself()).await;
    let location = format!("http://{}/api/version", target.addr);
    let server = Server::start(answering(move |_, _| Reply::Answer(302, vec![("Location", location.clone())]))).await;
    let p = probe(&instance(), &through(&server), &[]).await;
    assert_eq!(p.state, State::Pending);
    assert!(p.reason.as_deref().unwrap().contains("never followed"), "{p:?}");
    assert_eq!(target.requests(), 0, "the redirect was followed");
}

#[tokio::test]
async fn a_server_that_hangs_is_pending_after_the_probe_deadline() {
    let server = Server::start(answering(|_, _| Reply::Hang)).await;
    let started = std::time::Instant::now();
    let p = probe(&instance(), &through(&server), &[]).await;
    assert_eq!(p.state, State::Pending);
    assert!(p.reason.as_deref().unwrap().contains("no answer within"), "{p:?}");
    assert!(started.elapsed() < PROBE_DEADLINE + Duration::from_secs(3), "{:?}", started.elapsed());
    assert!(p.class.is_retryable());
}

/// SEC-3: the module source names `connect`, and the probe goes from the
/// worker's own network: an address the operator did not list
/// (`SLIPWAY_READINESS_CONNECT`) is never connected to.
#[tokio::test]
async fn a_connect_the_operator_did_not_list_is_never_probed() {
    let server = Server::start(as_itself()).await;
    let listed = ["http://127.0.0.1:8470".to_owned()];
    let p = probe(&instance(), &through(&server), &listed).await;
    assert_eq!(p.state, State::Pending, "{p:?}");
    assert!(p.reason.as_deref().unwrap_or_default().contains("SLIPWAY_READINESS_CONNECT"), "{p:?}");
    assert_eq!(server.requests(), 0, "the worker connected to an address the source chose");
    let listed = [format!("http://{}/", server.addr)];
    assert_eq!(probe(&instance(), &through(&server), &listed).await.state, State::Ready);
}

#[tokio::test]
async fn a_refused_connection_is_pending_with_why() {
    let closed = slipway_jobs::test_support::closed_loopback_port();
    let settings = ReadinessMeta { connect: Some(format!("http://{closed}")), ..ReadinessMeta::default() };
    let p = probe(&instance(), &settings, &[]).await;
    assert_eq!(p.state, State::Pending);
    assert!(p.reason.as_deref().unwrap().starts_with("no answer"), "{p:?}");
}

#[tokio::test]
async fn a_429_carries_its_retry_after_and_a_500_is_asked_once_more() {
    let busy = Server::start(answering(|_, _| Reply::Answer(429, vec![("Retry-After", "7".into())]))).await;
    let p = probe(&instance(), &through(&busy), &[]).await;
    assert_eq!(p.class, Class::RetryLater { after: Some(Duration::from_secs(7)) });
    assert!(slipway_jobs::probe::pause(1, &p.class) >= Duration::from_secs(7));
    assert_eq!(busy.requests(), 1, "a 429 is not asked again at once");
    let flaky = Server::start(answering(|n, host| {
        if n == 0 {
            Reply::Answer(500, vec![])
        } else {
            Reply::Answer(200, vec![("X-Instance-Host", host.to_owned())])
        }
    }))
    .await;
    let p = probe(&instance(), &through(&flaky), &[]).await;
    assert_eq!(p.state, State::Ready, "{p:?}");
    assert_eq!(flaky.requests(), 2);
    let broken = Server::start(answering(|_, _| Reply::Answer(502, vec![]))).await;
    let p = probe(&instance(), &through(&broken), &[]).await;
    assert_eq!((p.state, broken.requests()), (State::Pending, 2), "{p:?}");
    assert!(p.class.is_retryable());
}

#[tokio::test]
async fn an_address_to_connect_to_keeps_the_instances_url_and_name() {
    let server = Server::start(as_itself()).await;
    // As `curl --resolve`: the instance's own URL (here plain HTTP on the
    // server's port), its name resolved to the address given.
    let instance = Instance {
        name: "app".into(),
        domain: "app.example.test".into(),
        url: format!("http://app.example.test:{}/", server.addr.port()),
        section: None,
    };
    let settings = ReadinessMeta { connect: Some(server.addr.to_string()), ..ReadinessMeta::default() };
    let p = probe(&instance, &settings, &[]).await;
    assert_eq!(p.state, State::Ready, "{p:?}");
    assert_eq!(server.hosts()[0], format!("app.example.test:{}", server.addr.port()));
}

#[tokio::test]
async fn the_probe_path_and_header_come_from_the_settings() {
    let server = Server::start(answering(|_, host| Reply::Answer(200, vec![("X-Served-For", host.to_owned())]))).await;
    let settings = ReadinessMeta {
        path: "/healthz".into(),
        header: "X-Served-For".into(),
        connect: Some(format!("http://{}", server.addr)),
    };
    assert_eq!(probe(&instance(), &settings, &[]).await.state, State::Ready);
    assert_eq!(
        probe(&instance(), &through(&server), &[]).await.state,
        State::WrongHost,
        "the default header is not sent"
    );
}

/// The job: rounds until ready, a later round never undoes ready, and the
/// deadline makes what is not ready `not_ready` with its last reason.
async fn the_readiness_job_probes_until_ready_or_the_deadline(engine: Engine) {
    use slipway_jobs::jobs::readiness::run;
    use slipway_jobs::store::queue::ReadinessJob;
    use slipway_jobs::store::{instance_readiness as rows, now_ms, Q};
    // The test's server listens on a port of its own: any connect is allowed.
    let world = slipway_jobs::test_support::world(engine, &[("SLIPWAY_READINESS_CONNECT", "")]).await;
    let id = "ready-job";
    let build = world.queue(id, slipway_jobs::state::BuildKind::Deploy, None).await;
    // The first two probes of `social` find another host, then itself;
    // `tube` is never there.
    let server = Server::start(answering(|n, host| {
        if host.starts_with("social.") && n >= 2 {
            Reply::Answer(200, vec![("X-Instance-Host", host.to_owned())])
        } else if host.starts_with("social.") {
            Reply::Answer(200, vec![("X-Instance-Host", "hub.example.test".into())])
        } else {
            Reply::Answer(404, vec![])
        }
    }))
    .await;
    let settings = serde_json::to_string(&through(&server)).unwrap();
    let mut conn = world.ctx.db.acquire().await.unwrap();
    Q::new("UPDATE builds SET readiness = $1 WHERE id = $2")
        .text(settings)
        .text(&build)
        .execute(&mut conn)
        .await
        .unwrap();
    let b = slipway_jobs::store::builds::get(&mut conn, &build).await.unwrap().unwrap();
    let instances: Vec<Instance> =
        b.instances.iter().filter(|i| i.name == "mastodon" || i.name == "peertube").cloned().collect();
    assert_eq!(instances.len(), 2, "{:?}", b.instances);
    let now = now_ms();
    rows::begin(&mut conn, id, &build, &instances, now, now + 3_600_000).await.unwrap();
    drop(conn);
    let job = ReadinessJob { deployment_id: id.into(), build_id: build.clone(), not_before_ms: None };
    let states = || async {
        let mut conn = world.ctx.db.acquire().await.unwrap();
        rows::of_deployment(&mut conn, id)
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.instance, r.state, r.reason))
            .collect::<Vec<_>>()
    };
    run(job.clone(), &world.ctx).await.unwrap();
    let after_one = states().await;
    assert_eq!(after_one[0].1, State::WrongHost, "{after_one:?}");
    assert_eq!(after_one[1].1, State::NotFound, "{after_one:?}");
    run(job.clone(), &world.ctx).await.unwrap();
    run(job.clone(), &world.ctx).await.unwrap();
    let later = states().await;
    assert_eq!(later[0].1, State::Ready, "{later:?}");
    assert_eq!(later[1].1, State::NotFound, "{later:?}");
    // The deadline passes: the one not ready becomes not_ready, with its reason.
    let mut conn = world.ctx.db.acquire().await.unwrap();
    Q::new("UPDATE instance_readiness SET deadline_at = $1 WHERE deployment_id = $2")
        .int(now_ms() - 1)
        .text(id)
        .execute(&mut conn)
        .await
        .unwrap();
    drop(conn);
    run(job.clone(), &world.ctx).await.unwrap();
    let end = states().await;
    assert_eq!(end[0].1, State::Ready, "{end:?}");
    assert_eq!(end[1].1, State::NotReady, "{end:?}");
    assert!(end[1].2.as_deref().unwrap().contains("404"), "{end:?}");
    // A late probe (run wait-ready's) neither reopens what the deadline
    // closed nor undoes ready.
    let mut conn = world.ctx.db.acquire().await.unwrap();
    let late =
        |instance: &'static str| rows::Found { instance, state: State::Pending, reason: Some("late"), at: now_ms() };
    assert!(!rows::record(&mut conn, id, &build, &late("peertube")).await.unwrap(), "not_ready was reopened");
    assert!(!rows::record(&mut conn, id, &build, &late("mastodon")).await.unwrap(), "ready was undone");
    let ready = rows::Found { instance: "peertube", state: State::Ready, reason: None, at: now_ms() };
    assert!(rows::record(&mut conn, id, &build, &ready).await.unwrap(), "a late ready is recorded");
    drop(conn);
    // A finished deployment is not probed again.
    let asked = server.requests();
    run(job, &world.ctx).await.unwrap();
    assert_eq!(server.requests(), asked);
}

slipway_jobs::on_both_engines!(the_readiness_job_probes_until_ready_or_the_deadline);
