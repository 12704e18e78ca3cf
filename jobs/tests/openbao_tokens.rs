//! A worker's OpenBao token that OpenBao stops accepting during a deploy
//! (`docs/OPENBAO.md`, "Tokens"): the build fails with `operator_secrets`
//! and the cause, and nothing is cleared. Real OpenBao, the worker's job
//! bodies in-process, an effect that waits for the test.

use serde_json::json;
use slipway_jobs::jobs::build::{self, Ran};
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
