//! Operator secrets at submit (PRODUCT.md §8, docs/OPENBAO.md) over the
//! router, against a real OpenBao with the api's policy: one test per rule
//! of the seed, each checking the entries OpenBao holds, the configuration
//! the api stores and, where it matters, the rows it writes.

use crate::common;

use axum::http::{Method, StatusCode};
use common::*;
use secrecy::SecretString;
use serde_json::{json, Value};
use slipway_jobs::store::{Engine, Q};
use slipway_jobs::test_support::{closed_loopback_port, wait_for, TestOpenBao};
use std::collections::BTreeSet;

/// The application and the secret field of the built-in source these tests
/// use, and the field's old name (nix/core/applications/mastodon.nix).
const APP: &str = "mastodon";
const FIELD: &str = "translationApiKey";
const OLD_FIELD: &str = "deeplApiKey";
const INSTANCE: &str = "mastodon-operator-secrets";

/// Where `bao.entries()` shows the entry of `field` of deployment `id`.
fn entry(id: &str, field: &str) -> String {
    format!("{id}/secret/{INSTANCE}/{field}")
}

fn entries_of(list: &[String]) -> BTreeSet<String> {
    list.iter().cloned().collect()
}

/// A harness whose api keeps its secrets in `bao`, with the api's token.
async fn harness_for(engine: Engine, bao: &TestOpenBao) -> Harness {
    let keys = bao.keys(false);
    let keys: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (*k, v.as_str())).collect();
    harness_with(engine, &keys).await
}

/// The demo configuration with `APP`'s settings changed by `edit`.
fn demo_with(edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> Value {
    let mut config = demo();
    edit(config["applications"][APP].as_object_mut().expect("the demo has mastodon"));
    config
}

/// The demo configuration giving `FIELD` the value `value`.
fn with_value(value: Value) -> Value {
    demo_with(|app| {
        app.insert(FIELD.into(), value);
    })
}

/// Submits `configuration` to deployment `id`, which must be accepted, and
/// checks the answer does not hold any of `hidden`.
async fn accepted(h: &Harness, id: &str, configuration: Value, hidden: &[&str]) -> Value {
    let (status, body) = h.put(id, &json!({ "configuration": configuration })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    for value in hidden {
        assert!(!body.to_string().contains(value), "the answer holds a secret value: {body}");
    }
    body
}

/// `APP`'s settings in deployment `id`'s stored configuration, as `GET
/// /deployments/{id}` shows them.
async fn stored_app(h: &Harness, id: &str) -> Value {
    let (status, body) = h.call(Method::GET, &format!("/deployments/{id}"), Some(&all()), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["configuration"]["applications"][APP].clone()
}

/// One text column of a row, read directly from the database.
async fn column(h: &Harness, sql: &str, id: &str) -> Option<String> {
    let mut conn = h.db.acquire().await.unwrap();
    let row = Q::new(sql).text(id).fetch_optional(&mut conn).await.unwrap();
    row.and_then(|r| r.opt_text("value").unwrap())
}

/// Every stored configuration of deployment `id` (the deployment's and its
/// builds'), as the database holds them.
async fn stored_rows(h: &Harness, id: &str) -> Vec<String> {
    let mut conn = h.db.acquire().await.unwrap();
    let mut rows = Vec::new();
    for sql in [
        "SELECT configuration FROM deployments WHERE id = $1",
        "SELECT configuration FROM builds WHERE deployment_id = $1",
    ] {
        let found = Q::new(sql).text(id).fetch_all(&mut conn).await.unwrap();
        rows.extend(found.iter().map(|r| r.text("configuration").unwrap()));
    }
    rows
}

/// The pins of deployment `id`'s newest build (`builds.operator_secrets`).
async fn newest_pins(h: &Harness, id: &str) -> Value {
    let text = column(
        h,
        "SELECT operator_secrets AS value FROM builds WHERE deployment_id = $1 ORDER BY seq DESC LIMIT 1",
        id,
    )
    .await
    .expect("the newest build pins its operator secrets");
    serde_json::from_str(&text).unwrap()
}

/// The version `pins` give `FIELD` of `APP`, if it is set.
fn pinned(pins: &Value) -> Option<u64> {
    pins["set"].as_array()?.iter().find(|p| p["application"] == APP && p["field"] == FIELD)?["version"].as_u64()
}

/// Replaces deployment `id`'s stored configuration, as an older release
/// that kept the value of a field not yet secret would have stored it.
async fn store_directly(h: &Harness, id: &str, configuration: &Value) {
    let mut conn = h.db.acquire().await.unwrap();
    let changed = Q::new("UPDATE deployments SET configuration = $1 WHERE id = $2")
        .text(configuration.to_string())
        .text(id)
        .execute(&mut conn)
        .await
        .unwrap();
    assert_eq!(changed, 1);
}

async fn rows(h: &Harness) -> (i64, i64, i64) {
    (h.count("deployments").await, h.count("builds").await, h.count("jobs").await)
}

// Rule 1 ----------------------------------------------------------------

async fn a_value_goes_to_its_entry_and_the_stored_configuration_keeps_only_its_name(engine: Engine) {
    let bao = TestOpenBao::new().await;
    let h = harness_for(engine, &bao).await;
    let value = "rule-1-value-Zq8";
    accepted(&h, "demo", with_value(json!(value)), &[value]).await;

    assert_eq!(bao.entries().await, BTreeSet::from([entry("demo", FIELD)]));
    assert_eq!(bao.value_at(&entry("demo", FIELD)).await.as_deref(), Some(value));
    let app = stored_app(&h, "demo").await;
    assert_eq!(app["secretsSet"], json!([FIELD]), "{app}");
    assert_eq!(app["secretsClear"], json!([]), "{app}");
    assert!(app.get(FIELD).is_none(), "the stored configuration holds the field: {app}");
    let (_, read) = h.call(Method::GET, "/deployments/demo", Some(&all()), None).await;
    assert!(!read.to_string().contains(value), "GET shows the value: {read}");
    let stored = stored_rows(&h, "demo").await;
    assert_eq!(stored.len(), 2, "the deployment and its build");
    for row in stored {
        assert!(!row.contains(value), "a stored configuration holds the value: {row}");
        assert!(row.contains(FIELD), "a stored configuration lacks the field's name: {row}");
    }
    assert_eq!(rows(&h).await, (1, 1, 1));
}

// Rule 2 ----------------------------------------------------------------

async fn an_empty_or_null_value_keeps_the_entry_an_earlier_submit_wrote(engine: Engine) {
    let bao = TestOpenBao::new().await;
    let h = harness_for(engine, &bao).await;
    let value = "rule-2-value-Kx3";
    accepted(&h, "demo", with_value(json!(value)), &[value]).await;
    let api = bao.api();
    let version = api.current_version("demo", INSTANCE, FIELD).await.unwrap();
    assert_eq!(version, Some(1));

    for (what, config) in
        [("an empty string", with_value(json!(""))), ("null", with_value(Value::Null)), ("no field at all", demo())]
    {
        let (status, body) = h.put("demo", &json!({ "configuration": config })).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{what}: {body}");
        assert_eq!(bao.value_at(&entry("demo", FIELD)).await.as_deref(), Some(value), "{what}");
        assert_eq!(api.current_version("demo", INSTANCE, FIELD).await.unwrap(), version, "{what}: written again");
        let app = stored_app(&h, "demo").await;
        assert_eq!(app["secretsSet"], json!([FIELD]), "{what}: an earlier submit's field is not listed: {app}");
        assert!(app.get(FIELD).is_none(), "{what}: {app}");
    }
    assert_eq!(bao.entries().await, BTreeSet::from([entry("demo", FIELD)]));
}

// Rule 3 ----------------------------------------------------------------

async fn a_renamed_field_without_an_entry_is_copied_from_its_old_name_which_stays(engine: Engine) {
    let bao = TestOpenBao::new().await;
    let h = harness_for(engine, &bao).await;
    let api = bao.api();
    let old = "rule-3-old-value-Pw2";
    api.write("demo", INSTANCE, OLD_FIELD, &SecretString::from(old.to_owned())).await.unwrap();

    accepted(&h, "demo", demo(), &[old]).await;
    assert_eq!(bao.entries().await, entries_of(&[entry("demo", FIELD), entry("demo", OLD_FIELD)]));
    assert_eq!(bao.value_at(&entry("demo", FIELD)).await.as_deref(), Some(old), "the value is copied");
    assert_eq!(bao.value_at(&entry("demo", OLD_FIELD)).await.as_deref(), Some(old), "the old entry stays");
    assert_eq!(api.current_version("demo", INSTANCE, OLD_FIELD).await.unwrap(), Some(1));
    let app = stored_app(&h, "demo").await;
    assert_eq!(app["secretsSet"], json!([FIELD]), "{app}");
    assert_eq!(pinned(&newest_pins(&h, "demo").await), Some(1), "the build reads the copy");
}

async fn a_value_for_a_renamed_field_replaces_the_copy_and_the_old_entry_stays(engine: Engine) {
    let bao = TestOpenBao::new().await;
    let h = harness_for(engine, &bao).await;
    let api = bao.api();
    let (old, new) = ("rule-3-old-value-Lm7", "rule-3-new-value-Rt5");
    api.write("demo", INSTANCE, OLD_FIELD, &SecretString::from(old.to_owned())).await.unwrap();

    accepted(&h, "demo", with_value(json!(new)), &[old, new]).await;
    assert_eq!(bao.entries().await, entries_of(&[entry("demo", FIELD), entry("demo", OLD_FIELD)]));
    assert_eq!(bao.value_at(&entry("demo", FIELD)).await.as_deref(), Some(new));
    assert_eq!(api.current_version("demo", INSTANCE, FIELD).await.unwrap(), Some(1), "no copy was written first");
    assert_eq!(bao.value_at(&entry("demo", OLD_FIELD)).await.as_deref(), Some(old), "the old entry is untouched");
    assert_eq!(api.current_version("demo", INSTANCE, OLD_FIELD).await.unwrap(), Some(1));
    assert_eq!(stored_app(&h, "demo").await["secretsSet"], json!([FIELD]));
}

// Rule 4 ----------------------------------------------------------------

async fn a_cleared_field_without_a_value_leaves_secrets_set_and_its_entry_stays(engine: Engine) {
    let bao = TestOpenBao::new().await;
    let h = harness_for(engine, &bao).await;
    let value = "rule-4-value-Hd9";
    accepted(&h, "demo", with_value(json!(value)), &[value]).await;

    let clear = demo_with(|app| {
        app.insert("secretsClear".into(), json!([FIELD]));
    });
    accepted(&h, "demo", clear, &[value]).await;
    let app = stored_app(&h, "demo").await;
    assert_eq!(app["secretsSet"], json!([]), "{app}");
    assert_eq!(app["secretsClear"], json!([FIELD]), "{app}");
    assert_eq!(bao.entries().await, BTreeSet::from([entry("demo", FIELD)]), "the api deletes nothing");
    assert_eq!(bao.value_at(&entry("demo", FIELD)).await.as_deref(), Some(value));
    let pins = newest_pins(&h, "demo").await;
    assert_eq!(pinned(&pins), None, "{pins}");
    assert_eq!(pins["clear"], json!([{ "application": APP, "field": FIELD }]), "{pins}");
}

async fn a_cleared_renamed_field_is_not_copied_from_its_old_name(engine: Engine) {
    let bao = TestOpenBao::new().await;
    let h = harness_for(engine, &bao).await;
    let old = "rule-4-old-value-Ne4";
    bao.api().write("demo", INSTANCE, OLD_FIELD, &SecretString::from(old.to_owned())).await.unwrap();

    let clear = demo_with(|app| {
        app.insert("secretsClear".into(), json!([FIELD]));
    });
    accepted(&h, "demo", clear, &[old]).await;
    assert_eq!(bao.entries().await, BTreeSet::from([entry("demo", OLD_FIELD)]), "no copy under the new name");
    assert_eq!(bao.value_at(&entry("demo", OLD_FIELD)).await.as_deref(), Some(old));
    let app = stored_app(&h, "demo").await;
    assert_eq!(app["secretsSet"], json!([]), "{app}");
    assert_eq!(app["secretsClear"], json!([FIELD]), "{app}");
}

// Rule 5 ----------------------------------------------------------------

async fn a_value_wins_over_a_clear_of_the_same_field(engine: Engine) {
    let bao = TestOpenBao::new().await;
    let h = harness_for(engine, &bao).await;
    let value = "rule-5-value-Vb1";
    let both = demo_with(|app| {
        app.insert(FIELD.into(), json!(value));
        app.insert("secretsClear".into(), json!([FIELD]));
    });
    accepted(&h, "demo", both, &[value]).await;
    assert_eq!(bao.value_at(&entry("demo", FIELD)).await.as_deref(), Some(value));
    let app = stored_app(&h, "demo").await;
    assert_eq!(app["secretsSet"], json!([FIELD]), "{app}");
    assert_eq!(app["secretsClear"], json!([]), "{app}");
    let pins = newest_pins(&h, "demo").await;
    assert_eq!(pinned(&pins), Some(1), "{pins}");
    assert_eq!(pins["clear"], json!([]), "{pins}");
}

// Rule 6 ----------------------------------------------------------------

async fn names_that_are_not_secret_fields_leave_secrets_clear(engine: Engine) {
    let bao = TestOpenBao::new().await;
    let h = harness_for(engine, &bao).await;
    let config = demo_with(|app| {
        app.insert("secretsClear".into(), json!(["domain", "subdomain", FIELD, "bogus", OLD_FIELD, FIELD]));
    });
    accepted(&h, "demo", config, &[]).await;
    let app = stored_app(&h, "demo").await;
    assert_eq!(app["secretsClear"], json!([FIELD]), "{app}");
    assert_eq!(app["secretsSet"], json!([]), "{app}");
    assert!(bao.entries().await.is_empty());
}

// Rule 7 ----------------------------------------------------------------

async fn without_openbao_a_secret_value_is_refused_naming_its_field_and_nothing_is_stored(engine: Engine) {
    let h = harness(engine).await;
    let value = "rule-7-value-Gy6";
    let (status, body) = h.put("demo", &json!({ "configuration": with_value(json!(value)) })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_error_shape(&body, "invalid_configuration");
    assert!(!body.to_string().contains(value), "the value is echoed: {body}");
    let problems = body["details"]["problems"].as_array().expect("problems");
    let want = format!("/applications/{APP}/{FIELD}");
    assert!(
        problems.iter().any(|p| p["path"] == want.as_str() && p["kind"] == "secret"),
        "no secret problem at {want}: {body}"
    );
    assert_eq!(rows(&h).await, (0, 0, 0));
    // Without a value, the same configuration is kept as usual.
    accepted(&h, "demo", with_value(json!("")), &[]).await;
    assert_eq!(stored_app(&h, "demo").await["secretsSet"], json!([]));
}

// Rule 8 ----------------------------------------------------------------

/// A submit with `value` that OpenBao's state refuses: `503
/// service_unavailable`, the value not in the answer, nothing stored.
async fn refused_for_the_secret_store(h: &Harness, value: &str) {
    let (status, body) = h.put("demo", &json!({ "configuration": with_value(json!(value)) })).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_error_shape(&body, "service_unavailable");
    assert!(!body.to_string().contains(value), "the value is echoed: {body}");
    assert_eq!(rows(h).await, (0, 0, 0), "something was stored: {body}");
}

#[tokio::test]
async fn a_sealed_openbao_refuses_the_submit_with_503_and_it_is_accepted_once_unsealed() {
    let bao = TestOpenBao::private().await;
    let h = harness_for(Engine::Sqlite, &bao).await;
    let value = "rule-8-sealed-value-Ua2";
    bao.seal().await;
    refused_for_the_secret_store(&h, value).await;
    bao.unseal().await;
    assert!(bao.entries().await.is_empty(), "a refused submit wrote an entry");
    accepted(&h, "demo", with_value(json!(value)), &[value]).await;
    assert_eq!(bao.value_at(&entry("demo", FIELD)).await.as_deref(), Some(value));
    assert_eq!(stored_app(&h, "demo").await["secretsSet"], json!([FIELD]));
    assert_eq!(rows(&h).await, (1, 1, 1));
}

#[tokio::test]
async fn an_openbao_stopped_after_start_refuses_the_submit_with_503() {
    let mut bao = TestOpenBao::private().await;
    let h = harness_for(Engine::Sqlite, &bao).await;
    bao.stop();
    refused_for_the_secret_store(&h, "rule-8-stopped-value-Ic0").await;
}

async fn an_unreachable_openbao_refuses_the_submit_with_503(engine: Engine) {
    let addr = format!("http://{}", closed_loopback_port());
    let h = harness_with(engine, &[("OPENBAO_ADDR", &addr), ("OPENBAO_TOKEN", "some-token")]).await;
    refused_for_the_secret_store(&h, "rule-8-unreachable-value-Oc3").await;
}

/// A harness whose api holds `token` instead of the api's token.
async fn harness_with_token(engine: Engine, bao: &TestOpenBao, token: &SecretString) -> Harness {
    use secrecy::ExposeSecret;
    let mut keys = bao.keys(false);
    for (k, v) in &mut keys {
        if *k == "OPENBAO_TOKEN" {
            *v = token.expose_secret().to_owned();
        }
    }
    let keys: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (*k, v.as_str())).collect();
    harness_with(engine, &keys).await
}

async fn a_token_openbao_refuses_gets_503_and_nothing_is_stored(engine: Engine) {
    let bao = TestOpenBao::new().await;
    // No policy at all: with `no_default_policy`, `default` is dropped too.
    // (An empty list would inherit the root token's policies.)
    let powerless = bao.mint_token(&["default"]).await;
    let h = harness_with_token(engine, &bao, &powerless).await;
    refused_for_the_secret_store(&h, "rule-8-refused-value-Ae8").await;
    assert!(bao.entries().await.is_empty());
}

async fn a_token_that_may_list_but_not_write_gets_503_and_nothing_is_stored(engine: Engine) {
    let bao = TestOpenBao::new().await;
    // The worker's token lists an application's entries but writes nothing.
    let h = harness_with_token(engine, &bao, &bao.worker_token).await;
    refused_for_the_secret_store(&h, "rule-8-unwritten-value-Qz7").await;
    assert!(bao.entries().await.is_empty());
}

// Rule 9 ----------------------------------------------------------------

async fn a_submit_refused_by_another_check_writes_nothing_to_openbao(engine: Engine) {
    let bao = TestOpenBao::new().await;
    let h = harness_for(engine, &bao).await;
    let value = "rule-9-value-Sy4";
    let mut config = with_value(json!(value));
    config["stray"] = json!(true);
    let (status, body) = h.put("demo", &json!({ "configuration": config })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_error_shape(&body, "invalid_configuration");
    assert!(!body.to_string().contains(value), "the value is echoed: {body}");
    assert!(bao.entries().await.is_empty(), "a refused submit wrote to OpenBao");
    assert_eq!(rows(&h).await, (0, 0, 0));
    // A refusal of a deployment that exists leaves its entries as they were.
    accepted(&h, "demo", with_value(json!("rule-9-kept")), &[]).await;
    let mut config = with_value(json!(value));
    config["applications"][APP]["enable"] = json!("yes");
    let (status, body) = h.put("demo", &json!({ "configuration": config })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(bao.value_at(&entry("demo", FIELD)).await.as_deref(), Some("rule-9-kept"));
    assert_eq!(bao.api().current_version("demo", INSTANCE, FIELD).await.unwrap(), Some(1));
    assert_eq!(rows(&h).await, (1, 1, 1));
}

// Rule 10 ---------------------------------------------------------------

/// Stores deployment `id` (a submit without secrets), then rewrites its row
/// as a release before `field` became secret would have kept it, with
/// `value` in `field`.
async fn stored_by_an_older_release(h: &Harness, id: &str, field: &str, value: &str) {
    accepted(h, id, demo(), &[]).await;
    let mut old = demo();
    let app = old["applications"][APP].as_object_mut().unwrap();
    app.remove("secretsSet");
    app.remove("secretsClear");
    app.insert(field.into(), json!(value));
    store_directly(h, id, &old).await;
    let row = column(h, "SELECT configuration AS value FROM deployments WHERE id = $1", id).await.unwrap();
    assert!(row.contains(value), "the older row is in place: {row}");
}

async fn a_value_an_older_stored_configuration_holds_moves_to_openbao(engine: Engine) {
    let bao = TestOpenBao::new().await;
    let h = harness_for(engine, &bao).await;
    let value = "rule-10-stored-value-Tf5";
    stored_by_an_older_release(&h, "demo", FIELD, value).await;

    accepted(&h, "demo", demo(), &[value]).await;
    assert_eq!(bao.entries().await, BTreeSet::from([entry("demo", FIELD)]));
    assert_eq!(bao.value_at(&entry("demo", FIELD)).await.as_deref(), Some(value));
    let app = stored_app(&h, "demo").await;
    assert_eq!(app["secretsSet"], json!([FIELD]), "{app}");
    assert!(app.get(FIELD).is_none(), "{app}");
    let row = column(&h, "SELECT configuration AS value FROM deployments WHERE id = $1", "demo").await.unwrap();
    assert!(!row.contains(value), "the deployment row still holds the value: {row}");
    assert_eq!(pinned(&newest_pins(&h, "demo").await), Some(1));
}

async fn a_value_an_older_stored_configuration_holds_under_the_old_name_moves_to_the_new_name(engine: Engine) {
    let bao = TestOpenBao::new().await;
    let h = harness_for(engine, &bao).await;
    let value = "rule-10-old-name-value-Jk6";
    stored_by_an_older_release(&h, "demo", OLD_FIELD, value).await;

    accepted(&h, "demo", demo(), &[value]).await;
    assert_eq!(bao.entries().await, BTreeSet::from([entry("demo", FIELD)]), "written under the new name only");
    assert_eq!(bao.value_at(&entry("demo", FIELD)).await.as_deref(), Some(value));
    let app = stored_app(&h, "demo").await;
    assert_eq!(app["secretsSet"], json!([FIELD]), "{app}");
    assert!(app.get(FIELD).is_none() && app.get(OLD_FIELD).is_none(), "{app}");
    let row = column(&h, "SELECT configuration AS value FROM deployments WHERE id = $1", "demo").await.unwrap();
    assert!(!row.contains(value), "the deployment row still holds the value: {row}");
}

// Rule 11 ---------------------------------------------------------------

async fn each_build_pins_the_version_its_submit_wrote_or_kept(engine: Engine) {
    let bao = TestOpenBao::new().await;
    let h = harness_for(engine, &bao).await;
    let api = bao.api();
    let current = || api.current_version("demo", INSTANCE, FIELD);

    accepted(&h, "demo", with_value(json!("rule-11-first")), &[]).await;
    let written = current().await.unwrap().expect("an entry");
    assert_eq!(pinned(&newest_pins(&h, "demo").await), Some(written));

    accepted(&h, "demo", with_value(json!("")), &[]).await;
    assert_eq!(current().await.unwrap(), Some(written), "an empty value writes nothing");
    assert_eq!(pinned(&newest_pins(&h, "demo").await), Some(written), "the kept version is pinned");

    accepted(&h, "demo", with_value(json!("rule-11-second")), &[]).await;
    assert_eq!(current().await.unwrap(), Some(written + 1));
    assert_eq!(pinned(&newest_pins(&h, "demo").await), Some(written + 1));
    assert_eq!(written, 1);
    assert_eq!(bao.value_at(&entry("demo", FIELD)).await.as_deref(), Some("rule-11-second"));
    assert_eq!(h.count("builds").await, 3);
    let pins = newest_pins(&h, "demo").await;
    assert!(!pins.to_string().contains("rule-11"), "pins hold a value: {pins}");
}

// Rule 12 ---------------------------------------------------------------

async fn deployments_whose_ids_share_a_prefix_never_see_each_others_entries(engine: Engine) {
    let bao = TestOpenBao::new().await;
    let h = harness_for(engine, &bao).await;
    accepted(&h, "a", with_value(json!("rule-12-value-of-a")), &[]).await;
    for id in ["a-b", "ab", "b"] {
        accepted(&h, id, demo(), &[]).await;
        assert_eq!(stored_app(&h, id).await["secretsSet"], json!([]), "{id} sees a's entry");
    }
    assert_eq!(bao.entries().await, BTreeSet::from([entry("a", FIELD)]), "a's entry appears elsewhere");

    accepted(&h, "a-b", with_value(json!("rule-12-value-of-a-b")), &[]).await;
    assert_eq!(bao.entries().await, entries_of(&[entry("a", FIELD), entry("a-b", FIELD)]));
    accepted(&h, "a", demo(), &[]).await;
    assert_eq!(bao.value_at(&entry("a", FIELD)).await.as_deref(), Some("rule-12-value-of-a"));
    assert_eq!(bao.value_at(&entry("a-b", FIELD)).await.as_deref(), Some("rule-12-value-of-a-b"));
    assert_eq!(bao.api().current_version("a", INSTANCE, FIELD).await.unwrap(), Some(1));
    for id in ["ab", "b"] {
        accepted(&h, id, demo(), &[]).await;
        assert_eq!(stored_app(&h, id).await["secretsSet"], json!([]), "{id} sees another's entry");
    }
    assert_eq!(bao.entries().await, entries_of(&[entry("a", FIELD), entry("a-b", FIELD)]));
}

// What a careful operator expects besides the seed's rules ---------------

async fn a_secret_value_with_a_control_character_is_refused_naming_its_field(engine: Engine) {
    let bao = TestOpenBao::new().await;
    let h = harness_for(engine, &bao).await;
    let value = "colour-\u{1b}[31m-key";
    let (status, body) = h.put("demo", &json!({ "configuration": with_value(json!(value)) })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_error_shape(&body, "invalid_configuration");
    let want = format!("/applications/{APP}/{FIELD}");
    let problem = body["details"]["problems"].as_array().unwrap().iter().find(|p| p["path"] == want.as_str());
    assert!(problem.is_some_and(|p| p["message"].as_str().unwrap().contains("control character")), "{body}");
    assert!(!body.to_string().contains("colour-"), "the value is echoed: {body}");
    assert!(bao.entries().await.is_empty());
    // Tabs and line breaks are text.
    accepted(&h, "demo", with_value(json!("line one\n\tline two\r\n")), &["line one"]).await;
    assert_eq!(bao.value_at(&entry("demo", FIELD)).await.as_deref(), Some("line one\n\tline two\r\n"));
}

async fn an_api_without_openbao_refuses_a_deployment_whose_secrets_openbao_keeps(engine: Engine) {
    let bao = TestOpenBao::new().await;
    let h = harness_for(engine, &bao).await;
    accepted(&h, "demo", with_value(json!("kept-by-openbao-Jk2")), &[]).await;
    // A replica configured without OpenBao, on the same database.
    let url = h.database.url.clone();
    let other = harness_on(slipway_jobs::test_support::TestDatabase::new(engine).await, Some(url), &[]).await;
    let before = stored_rows(&h, "demo").await;
    let (status, body) = other.put("demo", &json!({ "configuration": demo() })).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_error_shape(&body, "service_unavailable");
    assert!(body["message"].as_str().unwrap().contains("OPENBAO_ADDR"), "{body}");
    assert_eq!(rows(&h).await, (1, 1, 1), "the replica stored something");
    assert_eq!(stored_rows(&h, "demo").await, before, "the replica changed the stored configuration");
    // A secret value sent there is the replica's fault too, not the body's.
    let (status, body) =
        other.put("demo", &json!({ "configuration": with_value(json!("sent-to-a-replica-Qx4")) })).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body["message"].as_str().unwrap().contains("OPENBAO_ADDR"), "{body}");
    assert!(!body.to_string().contains("sent-to-a-replica-Qx4"), "{body}");
    assert_eq!(stored_rows(&h, "demo").await, before, "the replica changed the stored configuration");
    // A deployment without secrets in OpenBao is served as usual there.
    let (status, body) = other.put("fresh", &json!({ "configuration": demo() })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
}

async fn a_secret_that_openbao_lost_is_named_in_a_warning(engine: Engine) {
    let bao = TestOpenBao::new().await;
    let h = harness_for(engine, &bao).await;
    let first = accepted(&h, "demo", with_value(json!("lost-value-Vb5")), &[]).await;
    assert!(first.get("warnings").is_none(), "{first}");
    bao.worker().destroy_all_versions("demo", INSTANCE, FIELD).await.unwrap();
    let answer = accepted(&h, "demo", demo(), &[]).await;
    let warnings = answer["warnings"].as_array().unwrap_or_else(|| panic!("no warnings: {answer}"));
    assert_eq!(warnings.len(), 1, "{answer}");
    assert!(warnings[0].as_str().unwrap().contains(&format!("/applications/{APP}/{FIELD}")), "{answer}");
    assert_eq!(stored_app(&h, "demo").await["secretsSet"], json!([]));
}

#[tokio::test]
async fn readyz_says_when_openbao_cannot_serve_the_api_without_being_unready() {
    let bao = TestOpenBao::private().await;
    let h = harness_for(Engine::Sqlite, &bao).await;
    let (status, body) = h.call(Method::GET, "/readyz", None, None).await;
    assert_eq!((status, &body["openbao"]), (StatusCode::OK, &json!("ok")), "{body}");
    assert_eq!(body["warnings"], json!([]), "{body}");
    bao.seal().await;
    let (status, body) = h.call(Method::GET, "/readyz", None, None).await;
    assert_eq!((status, &body["openbao"]), (StatusCode::OK, &json!("unavailable")), "{body}");
    assert!(body["warnings"][0].as_str().unwrap().contains("sealed"), "{body}");
    bao.unseal().await;
    let powerless = bao.mint_token(&["default"]).await;
    let h = harness_with_token(Engine::Sqlite, &bao, &powerless).await;
    let (_, body) = h.call(Method::GET, "/readyz", None, None).await;
    assert!(body["warnings"][0].as_str().unwrap().contains("403"), "{body}");
}

// Tokens: renewal, expiry told from a denied path, rate limits, taking
// back what a refused submit wrote (docs/OPENBAO.md) ---------------------

/// How many renewals `/metrics` counts with `outcome`.
async fn renewals(h: &Harness, outcome: &str) -> u64 {
    let (_, body) = h.call(Method::GET, "/metrics", None, None).await;
    let text = body["raw"].as_str().map(str::to_owned).unwrap_or_else(|| body.to_string());
    let needle = format!("slipway_openbao_token_renewals_total{{outcome=\"{outcome}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&needle)).map_or(0, |n| n.trim().parse().unwrap_or(0))
}

/// Whether OpenBao (asked with the root token) still knows `token`.
async fn token_valid(bao: &TestOpenBao, token: &SecretString) -> bool {
    use secrecy::ExposeSecret;
    let body = json!({ "token": token.expose_secret() });
    bao.root_call("POST", "auth/token/lookup", Some(body)).await.0 == 200
}

#[tokio::test]
async fn a_renewable_token_with_a_short_ttl_stays_valid_past_its_ttl_under_a_running_api() {
    let bao = TestOpenBao::new().await;
    let ttl = std::time::Duration::from_secs(4);
    let token = bao.mint_token_with(&[bao.policy_names().0], json!({ "ttl": "4s", "renewable": true })).await;
    let minted = std::time::Instant::now();
    let h = harness_with_token(Engine::Sqlite, &bao, &token).await;
    // Renewed every third of its TTL: past the TTL, with renewals counted.
    wait_for("the api to renew its token past its TTL", std::time::Duration::from_secs(30), || async {
        (minted.elapsed() > ttl + std::time::Duration::from_secs(2) && renewals(&h, "renewed").await >= 3).then_some(())
    })
    .await;
    assert!(token_valid(&bao, &token).await, "the token expired under a running api");
    let (status, body) = h.call(Method::GET, "/readyz", None, None).await;
    assert_eq!((status, &body["openbao_token"]), (StatusCode::OK, &json!("ok")), "{body}");
    let (_, metrics) = h.call(Method::GET, "/metrics", None, None).await;
    assert!(metrics.to_string().contains("slipway_openbao_token_ttl_seconds"), "{metrics}");
    accepted(&h, "demo", with_value(json!("renewed-token-value-Rn2")), &["renewed-token-value-Rn2"]).await;
}

#[tokio::test]
async fn a_token_that_ends_before_the_longest_job_is_expiring_in_readyz() {
    let bao = TestOpenBao::new().await;
    // NIX_TIMEOUT is 300 s by default; this token cannot live 60 s.
    let token = bao
        .mint_token_with(&[bao.policy_names().0], json!({ "ttl": "30s", "explicit_max_ttl": "60s", "renewable": true }))
        .await;
    let h = harness_with_token(Engine::Sqlite, &bao, &token).await;
    let body = wait_for("readyz to say the token is expiring", std::time::Duration::from_secs(20), || async {
        let (status, body) = h.call(Method::GET, "/readyz", None, None).await;
        (status == StatusCode::OK && body["openbao_token"] == json!("expiring")).then_some(body)
    })
    .await;
    let warnings = body["warnings"].to_string();
    assert!(warnings.contains("OpenBao token") && warnings.contains("longest job"), "{body}");
}

#[tokio::test]
async fn an_expired_token_is_told_from_a_denied_path_in_errors_and_readyz() {
    let bao = TestOpenBao::new().await;
    let token = bao.mint_token_with(&[bao.policy_names().0], json!({ "ttl": "2s", "renewable": false })).await;
    let h = harness_with_token(Engine::Sqlite, &bao, &token).await;
    wait_for("the token to expire", std::time::Duration::from_secs(20), || async {
        (!token_valid(&bao, &token).await).then_some(())
    })
    .await;
    let (status, body) = h.put("demo", &json!({ "configuration": with_value(json!("expired-value-Tx1")) })).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_error_shape(&body, "service_unavailable");
    assert_eq!(body["details"]["openbao"]["cause"], json!("token_expired"), "{body}");
    assert!(body["message"].as_str().unwrap().contains("no longer accepts this api's token"), "{body}");
    let body = wait_for("readyz to say the token expired", std::time::Duration::from_secs(60), || async {
        let (status, body) = h.call(Method::GET, "/readyz", None, None).await;
        (status == StatusCode::SERVICE_UNAVAILABLE).then_some(body)
    })
    .await;
    assert_eq!(body["details"]["openbao_token"], json!("expired"), "{body}");
    // A valid token whose policy denies the write: the path, not the token.
    let h = harness_with_token(Engine::Sqlite, &bao, &bao.worker_token).await;
    let (status, body) = h.put("demo", &json!({ "configuration": with_value(json!("denied-value-Pd2")) })).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["details"]["openbao"]["cause"], json!("path_denied"), "{body}");
    assert!(bao.entries().await.is_empty());
}

#[tokio::test]
async fn a_rate_limited_openbao_gets_503_with_retry_after_in_the_error_shape() {
    use tower::ServiceExt;
    let bao = TestOpenBao::private().await;
    let h = harness_for(Engine::Sqlite, &bao).await;
    // One request a minute on the KV mount: the submit's list passes, its
    // write is refused with 429 past the client's retries.
    let quota = json!({ "path": format!("{}/", bao.mount), "rate": 1, "interval": "60s" });
    let (status, answer) = bao.root_call("PUT", "sys/quotas/rate-limit/slipway-test", Some(quota)).await;
    assert!((200..300).contains(&status), "{status} {answer}");
    let body = json!({ "configuration": with_value(json!("limited-value-Rl3")) });
    let request = axum::http::Request::builder()
        .method(Method::PUT)
        .uri("/deployments/demo")
        .header("authorization", format!("Bearer {}", all()))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    let started = std::time::Instant::now();
    let answer = h.router.clone().oneshot(request).await.unwrap();
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    let retry_after = answer.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    let retry_after: u64 = retry_after.expect("a Retry-After header").parse().expect("seconds");
    assert!(retry_after >= 1, "{retry_after}");
    let bytes = http_body_util::BodyExt::collect(answer.into_body()).await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert_error_shape(&body, "service_unavailable");
    assert_eq!(body["details"]["openbao"]["cause"], json!("rate_limited"), "{body}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(12),
        "past the submit's budget: {:?}",
        started.elapsed()
    );
    bao.root_call("DELETE", "sys/quotas/rate-limit/slipway-test", None).await;
    assert!(bao.entries().await.is_empty(), "a refused submit left an entry");
}

#[tokio::test]
async fn a_submit_refused_after_its_first_write_leaves_no_version_it_wrote() {
    let mut bao = TestOpenBao::private().await;
    let h = harness_for(Engine::Sqlite, &bao).await;
    accepted(&h, "demo", with_value(json!("kept-value-Kv1")), &[]).await;
    // The api's policy, less the writes to peertube's entries: mastodon's
    // entry is written first, then peertube's write is denied.
    let denied = format!(
        "{}\npath \"{}/data/{}/demo/secret/peertube-operator-secrets/*\" {{\n  capabilities = [\"deny\"]\n}}\n",
        bao.policy("slipway-api.hcl"),
        bao.mount,
        bao.root
    );
    bao.load_policy("slipway-api-no-peertube", &denied).await;
    let token = bao.mint_token(&["slipway-api-no-peertube"]).await;
    let h = harness_with_token(Engine::Sqlite, &bao, &token).await;
    let mut config = with_value(json!("refused-value-Rf4"));
    config["applications"]["peertube"]["smtpPassword"] = json!("refused-smtp-Rf5");
    let (status, body) = h.put("demo", &json!({ "configuration": config })).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["details"]["openbao"]["cause"], json!("path_denied"), "{body}");
    // Mastodon's entry gives the kept value again: the refused submit's
    // version (2) is destroyed, and no live version is newer than 1.
    let (_, metadata) =
        bao.root_call("GET", &format!("{}/metadata/{}/{}", bao.mount, bao.root, entry("demo", FIELD)), None).await;
    let versions = metadata["data"]["versions"].as_object().unwrap_or_else(|| panic!("{metadata}"));
    for (version, meta) in versions {
        let live = meta["destroyed"] == json!(false) && meta["deletion_time"] == json!("");
        assert_eq!(live, version == "1", "version {version}: {meta}");
    }
    assert_eq!(bao.value_at(&entry("demo", FIELD)).await, None, "the latest version is the destroyed one");
    assert_eq!(bao.api().current_version("demo", INSTANCE, FIELD).await.unwrap(), Some(1));
    assert_eq!(
        bao.api().read("demo", INSTANCE, FIELD).await.unwrap().map(|v| {
            use secrecy::ExposeSecret;
            v.expose_secret().to_owned()
        }),
        Some("kept-value-Kv1".to_owned())
    );
    // The next submit keeps the field at version 1.
    let h = harness_for(Engine::Sqlite, &bao).await;
    accepted(&h, "demo", demo(), &[]).await;
    assert_eq!(pinned(&newest_pins(&h, "demo").await), Some(1));
}

slipway_jobs::on_both_engines!(
    a_value_goes_to_its_entry_and_the_stored_configuration_keeps_only_its_name,
    an_empty_or_null_value_keeps_the_entry_an_earlier_submit_wrote,
    a_renamed_field_without_an_entry_is_copied_from_its_old_name_which_stays,
    a_value_for_a_renamed_field_replaces_the_copy_and_the_old_entry_stays,
    a_cleared_field_without_a_value_leaves_secrets_set_and_its_entry_stays,
    a_cleared_renamed_field_is_not_copied_from_its_old_name,
    a_value_wins_over_a_clear_of_the_same_field,
    names_that_are_not_secret_fields_leave_secrets_clear,
    without_openbao_a_secret_value_is_refused_naming_its_field_and_nothing_is_stored,
    an_unreachable_openbao_refuses_the_submit_with_503,
    a_token_openbao_refuses_gets_503_and_nothing_is_stored,
    a_token_that_may_list_but_not_write_gets_503_and_nothing_is_stored,
    a_submit_refused_by_another_check_writes_nothing_to_openbao,
    a_value_an_older_stored_configuration_holds_moves_to_openbao,
    a_value_an_older_stored_configuration_holds_under_the_old_name_moves_to_the_new_name,
    each_build_pins_the_version_its_submit_wrote_or_kept,
    deployments_whose_ids_share_a_prefix_never_see_each_others_entries,
    a_secret_value_with_a_control_character_is_refused_naming_its_field,
    an_api_without_openbao_refuses_a_deployment_whose_secrets_openbao_keeps,
    a_secret_that_openbao_lost_is_named_in_a_warning,
);
