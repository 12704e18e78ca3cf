//! A deploy and OpenBao trouble (`docs/OPENBAO.md`): a worker's token that
//! OpenBao stops accepting during a deploy fails the build with
//! `operator_secrets` and the cause, and nothing is cleared; an OpenBao
//! that cannot be reached when the deploy reads is waited for. Real
//! OpenBao (behind a loopback door the test opens), the worker's job bodies
//! in-process, effects that wait for the test.

use serde_json::json;
use slipway_jobs::jobs::build_job::{self as build, Ran};
use slipway_jobs::jobs::report::Reason;
use slipway_jobs::state::{BuildKind, BuildStatus};
use slipway_jobs::store::queue::BuildJob;
use slipway_jobs::store::Engine;
use slipway_jobs::submit::{self, Queueing, SubmitRequest};
use slipway_jobs::test_support::{checker, demo, source_with_deploy, wait_for, world, AnySource, TestOpenBao};
use std::time::Duration;

/// Submits `configuration` to `id` with the api's token; the build's id.
async fn submitted(
    w: &slipway_jobs::test_support::World,
    bao: &TestOpenBao,
    id: &str,
    source: &str,
    configuration: serde_json::Value,
) -> String {
    let request = SubmitRequest {
        deployment: slipway_jobs::id::DeploymentId::parse(id).unwrap(),
        configuration,
        module_source: Some(source.to_owned()),
        queueing: Queueing { kind: BuildKind::Deploy, limit: None },
        dry_run: false,
        requested_by: None,
        plan_ttl: std::time::Duration::from_secs(3600),
        health_gate: None,
    };
    submit::submit(&w.ctx.db, &AnySource(checker()), Some(&bao.api()), request).await.expect("accepted").build_id
}

#[tokio::test]
async fn a_worker_token_that_expires_during_a_deploy_fails_it_with_the_cause_and_clears_nothing() {
    let bao = TestOpenBao::new().await;
    let token = bao.mint_token(&[bao.policy_names().1]).await;
    let mut keys = bao.keys(true);
    {
        use secrecy::ExposeSecret;
        keys.iter_mut().find(|(k, _)| *k == "OPENBAO_TOKEN").unwrap().1 = token.expose_secret().to_owned();
    }
    let keys: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let w = world(Engine::Sqlite, &keys).await;
    // The effect says it runs, waits for the test, then reports its node.
    let script = r#"#!/bin/sh
touch "$STATE_DIR/effect.started"
while [ ! -e "$STATE_DIR/effect.go" ]; do sleep 0.02; done
cat > "$SBOM_OUT_DIR/nodes.json" <<'JSON'
{"nodes": [{"name": "peertube", "dnsNames": [], "outcome": "deployed", "system": "/nix/store/x-peertube", "error": null}]}
JSON
echo '{"bomFormat": "CycloneDX", "specVersion": "1.5", "components": []}' > "$SBOM_OUT_DIR/peertube.cdx.json"
exit 0
"#;
    let source = source_with_deploy(&w.db.path("waits"), script);
    let mut set = demo();
    set["applications"]["peertube"]["smtpPassword"] = json!("cleared-later-value");
    submitted(&w, &bao, "demo", &source, set).await;
    let mut clear = demo();
    clear["applications"]["peertube"]["secretsClear"] = json!(["smtpPassword"]);
    let build_id = submitted(&w, &bao, "demo", &source, clear).await;
    let entry = "demo/secret/peertube-operator-secrets/smtpPassword".to_owned();
    assert!(bao.entries().await.contains(&entry));

    let ctx = w.ctx.clone();
    let job = BuildJob { build_id: build_id.clone() };
    let running = tokio::spawn(async move { build::run(job, &ctx).await });
    let state = w.ctx.provider_state_dir("demo");
    wait_for("the effect to start", Duration::from_secs(60), || async {
        state.join("effect.started").exists().then_some(())
    })
    .await;
    // The worker's token ends while the effect runs.
    {
        use secrecy::ExposeSecret;
        let body = json!({ "token": token.expose_secret() });
        let (status, answer) = bao.root_call("POST", "auth/token/revoke", Some(body)).await;
        assert!((200..300).contains(&status), "{status} {answer}");
    }
    std::fs::write(state.join("effect.go"), "").unwrap();
    let report = match tokio::time::timeout(Duration::from_secs(60), running).await.unwrap().unwrap().unwrap() {
        Ran::Finished(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(report.status, BuildStatus::Failed, "{report:?}");
    assert_eq!(report.reason.map(Reason::as_str), Some("operator_secrets"), "{report:?}");
    let error = report.error.clone().unwrap_or_default();
    assert!(error.contains("token_expired") && error.contains("no longer accepts"), "{error}");
    assert!(bao.entries().await.contains(&entry), "the entry was cleared with a token that had ended");
}

/// A loopback door to OpenBao at `upstream`: closes every connection at
/// once (OpenBao cannot be reached) until `open` is set, then forwards
/// each. Gives its address and how many connections it closed.
async fn door(
    upstream: String,
    open: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    let closed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = closed.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            if !open.load(Ordering::SeqCst) {
                counted.fetch_add(1, Ordering::SeqCst);
                drop(client);
                continue;
            }
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    (addr, closed)
}

#[tokio::test]
async fn a_deploy_waits_for_an_openbao_that_cannot_be_reached_and_succeeds_once_it_is_back() {
    use std::sync::atomic::Ordering;
    let bao = TestOpenBao::new().await;
    let open = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (addr, closed) = door(bao.addr.trim_start_matches("http://").to_owned(), open.clone()).await;
    let mut keys = bao.keys(true);
    keys.iter_mut().find(|(k, _)| *k == "OPENBAO_ADDR").unwrap().1 = addr;
    let keys: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let w = world(Engine::Sqlite, &keys).await;
    let script = r#"#!/bin/sh
cut -f6 "$OPERATOR_SECRETS_FILE" | xargs cat > "$STATE_DIR/handed"
cat > "$SBOM_OUT_DIR/nodes.json" <<'JSON'
{"nodes": [{"name": "peertube", "dnsNames": [], "outcome": "deployed", "system": "/nix/store/x-peertube", "error": null}]}
JSON
echo '{"bomFormat": "CycloneDX", "specVersion": "1.5", "components": []}' > "$SBOM_OUT_DIR/peertube.cdx.json"
exit 0
"#;
    let source = source_with_deploy(&w.db.path("reads"), script);
    let mut set = demo();
    set["applications"]["peertube"]["smtpPassword"] = json!("value-after-the-outage");
    let build_id = submitted(&w, &bao, "demo", &source, set).await;
    let ctx = w.ctx.clone();
    let job = BuildJob { build_id: build_id.clone() };
    let running = tokio::spawn(async move { build::run(job, &ctx).await });
    // The worker finds OpenBao away, and asks again.
    wait_for("the worker to ask the closed door again", Duration::from_secs(30), || async {
        (closed.load(Ordering::SeqCst) >= 3).then_some(())
    })
    .await;
    assert!(!running.is_finished(), "the build ended while OpenBao was away");
    open.store(true, Ordering::SeqCst);
    let report = match tokio::time::timeout(Duration::from_secs(90), running).await.unwrap().unwrap().unwrap() {
        Ran::Finished(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(report.status, BuildStatus::Succeeded, "{report:?}");
    let handed = std::fs::read_to_string(w.ctx.provider_state_dir("demo").join("handed")).unwrap();
    assert_eq!(handed, "value-after-the-outage");
}
