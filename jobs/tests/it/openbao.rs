//! The OpenBao KV version 2 client (`jobs/src/openbao.rs`) against a real
//! `bao server -dev` (`scripts/openbao-up`), with the tokens of the policies
//! in `docs/openbao/` and never the root token: round trips, least
//! privilege, paths that are data and never syntax, and outages.

use secrecy::{ExposeSecret, SecretString};
use slipway_jobs::openbao::{escape_segment, instance_of, OpenBao, OpenBaoError, Part};
use slipway_jobs::test_support::{closed_loopback_port, TestOpenBao};
use std::collections::BTreeSet;
use std::time::Duration;

fn secret(s: &str) -> SecretString {
    SecretString::from(s.to_owned())
}

fn exposed(value: Option<SecretString>) -> Option<String> {
    value.map(|v| v.expose_secret().to_owned())
}

/// Where `entries()` shows the entry of (`id`, `instance`, `field`).
fn relative(id: &str, instance: &str, field: &str) -> String {
    let name = |v: &str| escape_segment(v).expect("a segment");
    format!("{}/secret/{}/{}", name(id), name(instance), name(field))
}

/// The error's sentence, checked to hold neither token nor `values`.
fn sentence(err: &OpenBaoError, bao: &TestOpenBao, values: &[&str]) -> String {
    let text = err.to_string();
    let debug = format!("{err:?}");
    for hidden in
        [bao.api_token.expose_secret(), bao.worker_token.expose_secret()].into_iter().chain(values.iter().copied())
    {
        assert!(
            !text.contains(hidden) && !debug.contains(hidden),
            "an error repeats a token or a value: {text} / {debug}"
        );
    }
    text
}

#[tokio::test]
async fn a_value_the_api_writes_is_read_by_the_worker_and_listed_by_both() {
    let bao = TestOpenBao::new().await;
    let (api, worker) = (bao.api(), bao.worker());
    let app = instance_of("pixelfed");
    assert_eq!(api.write("demo", &app, "apiKey", &secret("s3cret-1")).await.unwrap(), 1, "a new entry is version 1");
    assert_eq!(
        bao.entries().await,
        BTreeSet::from(["demo/secret/pixelfed-operator-secrets/apiKey".to_owned()]),
        "the entry is at <root>/<id>/secret/<application>-operator-secrets/<field>"
    );
    assert_eq!(bao.value_at("demo/secret/pixelfed-operator-secrets/apiKey").await.as_deref(), Some("s3cret-1"));
    assert_eq!(exposed(worker.read("demo", &app, "apiKey").await.unwrap()).as_deref(), Some("s3cret-1"));
    assert_eq!(exposed(api.read("demo", &app, "apiKey").await.unwrap()).as_deref(), Some("s3cret-1"));
    api.write("demo", &app, "smtpPassword", &secret("s3cret-2")).await.unwrap();
    assert_eq!(api.list("demo", &app).await.unwrap(), ["apiKey", "smtpPassword"]);
    assert_eq!(worker.list("demo", &app).await.unwrap(), ["apiKey", "smtpPassword"]);
    // A second write is a new version that replaces the value.
    assert_eq!(api.write("demo", &app, "apiKey", &secret("s3cret-3")).await.unwrap(), 2);
    assert_eq!(exposed(worker.read("demo", &app, "apiKey").await.unwrap()).as_deref(), Some("s3cret-3"));
    assert_eq!(api.current_version("demo", &app, "apiKey").await.unwrap(), Some(2), "the api reads versions");
    assert_eq!(api.current_version("demo", &app, "neverWritten").await.unwrap(), None);
    assert_eq!(
        api.entry_path("demo", &app, "apiKey").unwrap(),
        format!("secret/data/{}/demo/secret/pixelfed-operator-secrets/apiKey", bao.root)
    );
}

#[tokio::test]
async fn what_has_no_entry_reads_as_nothing_and_lists_as_empty() {
    let bao = TestOpenBao::new().await;
    let (api, worker) = (bao.api(), bao.worker());
    let app = instance_of("pixelfed");
    assert!(api.read("demo", &app, "apiKey").await.unwrap().is_none());
    assert!(worker.read("demo", &app, "apiKey").await.unwrap().is_none());
    assert!(api.list("demo", &app).await.unwrap().is_empty());
    assert!(worker.list("never-deployed", &app).await.unwrap().is_empty());
    assert_eq!(api.copy("demo", &app, "oldKey", "apiKey").await.unwrap(), None, "nothing to copy");
    assert!(bao.entries().await.is_empty(), "a copy without a source writes nothing");
    worker.destroy_all_versions("demo", &app, "apiKey").await.expect("deleting what is not there is done");
}

#[tokio::test]
async fn a_rename_copies_the_value_to_the_new_name_and_the_old_entry_stays() {
    let bao = TestOpenBao::new().await;
    let api = bao.api();
    let app = instance_of("pixelfed");
    api.write("demo", &app, "apiToken", &secret("old-name-value")).await.unwrap();
    assert_eq!(api.copy("demo", &app, "apiToken", "apiKey").await.unwrap(), Some(1), "the copy's version");
    let worker = bao.worker();
    assert_eq!(exposed(worker.read("demo", &app, "apiKey").await.unwrap()).as_deref(), Some("old-name-value"));
    assert_eq!(exposed(worker.read("demo", &app, "apiToken").await.unwrap()).as_deref(), Some("old-name-value"));
    assert_eq!(api.list("demo", &app).await.unwrap(), ["apiKey", "apiToken"]);
}

#[tokio::test]
async fn the_worker_deletes_an_entry_with_every_version() {
    let bao = TestOpenBao::new().await;
    let (api, worker) = (bao.api(), bao.worker());
    let app = instance_of("pixelfed");
    api.write("demo", &app, "apiKey", &secret("version-1")).await.unwrap();
    api.write("demo", &app, "apiKey", &secret("version-2")).await.unwrap();
    api.write("demo", &app, "other", &secret("stays")).await.unwrap();
    worker.destroy_all_versions("demo", &app, "apiKey").await.unwrap();
    assert!(worker.read("demo", &app, "apiKey").await.unwrap().is_none());
    assert_eq!(api.current_version("demo", &app, "apiKey").await.unwrap(), None, "no version is left");
    assert_eq!(worker.list("demo", &app).await.unwrap(), ["other"], "no soft-deleted entry is left listed");
    assert_eq!(bao.entries().await, BTreeSet::from([relative("demo", &app, "other")]));
    // Writing the field again starts from nothing: no older version came back.
    api.write("demo", &app, "apiKey", &secret("version-3")).await.unwrap();
    assert_eq!(exposed(worker.read("demo", &app, "apiKey").await.unwrap()).as_deref(), Some("version-3"));
}

#[tokio::test]
async fn the_api_token_cannot_delete_and_the_worker_token_cannot_write() {
    let bao = TestOpenBao::new().await;
    let (api, worker) = (bao.api(), bao.worker());
    let app = instance_of("pixelfed");
    api.write("demo", &app, "apiKey", &secret("kept-value")).await.unwrap();

    let err = api.destroy_all_versions("demo", &app, "apiKey").await.unwrap_err();
    assert!(matches!(err, OpenBaoError::Refused { status: 403, .. }), "{err:?}");
    let text = sentence(&err, &bao, &["kept-value"]);
    assert!(text.contains("delete every version of") && text.contains("403"), "{text}");

    let err = worker.write("demo", &app, "apiKey", &secret("worker-value")).await.unwrap_err();
    assert!(matches!(err, OpenBaoError::Refused { status: 403, .. }), "{err:?}");
    sentence(&err, &bao, &["worker-value", "kept-value"]);
    let err = worker.write("demo", &app, "newKey", &secret("worker-value")).await.unwrap_err();
    assert!(matches!(err, OpenBaoError::Refused { status: 403, .. }), "{err:?}");
    let err = worker.copy("demo", &app, "apiKey", "renamed").await.unwrap_err();
    assert!(matches!(err, OpenBaoError::Refused { status: 403, .. }), "{err:?}");
    sentence(&err, &bao, &["kept-value"]);

    assert_eq!(bao.entries().await, BTreeSet::from([relative("demo", &app, "apiKey")]));
    assert_eq!(bao.value_at(&relative("demo", &app, "apiKey")).await.as_deref(), Some("kept-value"));
}

#[tokio::test]
async fn a_token_reaches_nothing_outside_its_own_root() {
    let mine = TestOpenBao::new().await;
    let theirs = TestOpenBao::new().await;
    let app = instance_of("pixelfed");
    theirs.api().write("demo", &app, "apiKey", &secret("their-value")).await.unwrap();
    // My tokens, pointed at their root.
    let mut config = mine.config(&mine.api_token);
    config.root = theirs.root.clone();
    let api = OpenBao::new(&config).unwrap();
    let mut config = mine.config(&mine.worker_token);
    config.root = theirs.root.clone();
    let worker = OpenBao::new(&config).unwrap();
    for err in [
        api.write("demo", &app, "apiKey", &secret("my-value")).await.unwrap_err(),
        api.read("demo", &app, "apiKey").await.unwrap_err(),
        api.list("demo", &app).await.unwrap_err(),
        worker.read("demo", &app, "apiKey").await.unwrap_err(),
        worker.destroy_all_versions("demo", &app, "apiKey").await.unwrap_err(),
    ] {
        assert!(matches!(err, OpenBaoError::Refused { status: 403, .. }), "{err:?}");
        sentence(&err, &mine, &["their-value", "my-value"]);
    }
    assert_eq!(theirs.value_at(&relative("demo", &app, "apiKey")).await.as_deref(), Some("their-value"));
}

/// Values that could be taken for path syntax somewhere between Slipway and
/// OpenBao's storage: dot segments, slashes, percent forms (once and twice
/// encoded, either case), URL delimiters, backslashes, spaces, controls,
/// unicode in composed, decomposed and full-width forms, and names that
/// spell out another entry's path.
const HOSTILE: &[&str] = &[
    "",
    ".",
    "..",
    "...",
    ".a",
    "a.",
    "a..b",
    "a/b",
    "a/",
    "/a",
    "//",
    "a//b",
    "../victim",
    "..%2Fvictim",
    "a%2Fb",
    "a%2fb",
    "a%252Fb",
    "%2e%2e",
    "%2E%2E",
    "%2e",
    "%",
    "%25",
    "a%20b",
    "a b",
    " ",
    "a?b",
    "a#b",
    "a;b",
    "a&b=c",
    "a+b",
    "*",
    "a\\b",
    "..\\victim",
    "\u{0}",
    "a\nb",
    "é",
    "e\u{301}",
    "ｆｕｌｌ",
    "／",
    "．．",
    "apiKey/",
    "victim/secret/pixelfed-operator-secrets/apiKey",
    "secret",
    "data",
    "metadata",
];

/// The entries a victim deployment and a victim application hold before
/// any hostile write, with their values.
async fn seed_victims(api: &OpenBao) -> Vec<(String, String, String, String)> {
    let pixelfed = instance_of("pixelfed");
    let mastodon = instance_of("mastodon");
    let victims = vec![
        ("victim".to_owned(), pixelfed.clone(), "apiKey".to_owned(), "victim-pixelfed".to_owned()),
        ("victim".to_owned(), mastodon.clone(), "apiKey".to_owned(), "victim-mastodon".to_owned()),
        ("demo".to_owned(), mastodon, "apiKey".to_owned(), "demo-mastodon".to_owned()),
        ("demo".to_owned(), pixelfed, "apiKey".to_owned(), "demo-pixelfed".to_owned()),
    ];
    for (id, instance, field, value) in &victims {
        api.write(id, instance, field, &secret(value)).await.unwrap();
    }
    victims
}

/// Writes one hostile value in the place `part` (the two other parts plain)
/// and checks it was refused changing nothing, or stored as exactly one new
/// entry of its own that reads back; returns the entry when stored.
async fn write_hostile(
    bao: &TestOpenBao,
    api: &OpenBao,
    part: Part,
    hostile: &str,
    value: &str,
    before: &BTreeSet<String>,
) -> Option<String> {
    let pixelfed = instance_of("pixelfed");
    let (id, instance, field) = match part {
        Part::DeploymentId => (hostile.to_owned(), pixelfed, "apiKey".to_owned()),
        Part::Instance => ("demo".to_owned(), hostile.to_owned(), "apiKey".to_owned()),
        Part::Field => ("demo".to_owned(), pixelfed, hostile.to_owned()),
    };
    match api.write(&id, &instance, &field, &secret(value)).await {
        Err(err @ OpenBaoError::Segment { .. }) => {
            assert!(matches!(hostile, "" | "." | ".."), "{part} {hostile:?} refused: {err}");
            assert!(matches!(&err, OpenBaoError::Segment { part: p, .. } if *p == part), "{err:?}");
            sentence(&err, bao, &[value]);
            assert_eq!(&bao.entries().await, before, "a refused {part} {hostile:?} changed an entry");
            None
        }
        Err(err) => panic!("{part} {hostile:?}: {err}"),
        Ok(_version) => {
            let entry = relative(&id, &instance, &field);
            let mut expected = before.clone();
            assert!(expected.insert(entry.clone()), "{part} {hostile:?} landed on an existing entry {entry}");
            assert_eq!(&bao.entries().await, &expected, "{part} {hostile:?} wrote somewhere else than {entry}");
            assert_eq!(bao.value_at(&entry).await.as_deref(), Some(value), "{part} {hostile:?}");
            let read = bao.worker().read(&id, &instance, &field).await.unwrap();
            assert_eq!(exposed(read).as_deref(), Some(value), "{part} {hostile:?} reads back");
            assert!(api.list(&id, &instance).await.unwrap().contains(&field), "{part} {hostile:?} is listed");
            Some(entry)
        }
    }
}

async fn hostile_values_address_only_their_own_entry(part: Part) {
    let bao = TestOpenBao::new().await;
    let api = bao.api();
    let victims = seed_victims(&api).await;
    let mut before = bao.entries().await;
    let mut stored = Vec::new();
    for (i, hostile) in HOSTILE.iter().enumerate() {
        let value = format!("hostile-{i}");
        if let Some(entry) = write_hostile(&bao, &api, part, hostile, &value, &before).await {
            before.insert(entry);
            stored.push((hostile, value));
        }
    }
    assert_eq!(stored.len(), HOSTILE.len() - 3, "only \"\", \".\" and \"..\" are refused");
    // Every victim keeps its value, and lists nothing of the hostile writes
    // (but the folder hostile fields are written to, checked below).
    let worker = bao.worker();
    let pixelfed = instance_of("pixelfed");
    for (id, instance, field, value) in &victims {
        assert_eq!(exposed(worker.read(id, instance, field).await.unwrap()).as_deref(), Some(value.as_str()));
        if part == Part::Field && (id.as_str(), instance) == ("demo", &pixelfed) {
            continue;
        }
        assert_eq!(worker.list(id, instance).await.unwrap(), [field.as_str()], "{id} {instance} lists another's entry");
    }
    // Each hostile value still reads its own, after all the others were written.
    for (hostile, value) in &stored {
        let read = match part {
            Part::DeploymentId => worker.read(hostile, &pixelfed, "apiKey").await,
            Part::Instance => worker.read("demo", hostile, "apiKey").await,
            Part::Field => worker.read("demo", &pixelfed, hostile).await,
        };
        assert_eq!(exposed(read.unwrap()).as_deref(), Some(value.as_str()), "{part} {hostile:?}");
    }
    if part == Part::Field {
        // The fields list back as they were given, none lost, none merged.
        let listed: BTreeSet<String> = api.list("demo", &pixelfed).await.unwrap().into_iter().collect();
        let given: BTreeSet<String> = stored.iter().map(|(h, _)| h.to_string()).chain(["apiKey".to_owned()]).collect();
        assert_eq!(listed, given);
    }
}

#[tokio::test]
async fn a_hostile_deployment_id_is_refused_or_addresses_only_its_own_entry() {
    hostile_values_address_only_their_own_entry(Part::DeploymentId).await;
}

#[tokio::test]
async fn a_hostile_instance_is_refused_or_addresses_only_its_own_entry() {
    hostile_values_address_only_their_own_entry(Part::Instance).await;
}

#[tokio::test]
async fn a_hostile_field_is_refused_or_addresses_only_its_own_entry() {
    hostile_values_address_only_their_own_entry(Part::Field).await;
}

#[tokio::test]
async fn a_name_that_cannot_be_a_segment_is_refused_before_anything_is_sent() {
    // Nothing listens there: a request would be Unavailable, not Segment.
    let bao = TestOpenBao::new().await;
    let mut config = bao.config(&bao.api_token);
    config.addr = format!("http://{}", closed_loopback_port());
    let api = OpenBao::new(&config).unwrap();
    for bad in ["", ".", ".."] {
        let app = instance_of("pixelfed");
        let checks = [
            api.write(bad, &app, "f", &secret("v")).await.unwrap_err(),
            api.read("d", bad, "f").await.unwrap_err(),
            api.list(bad, &app).await.unwrap_err(),
            api.copy("d", &app, "f", bad).await.unwrap_err(),
            api.destroy_all_versions("d", &app, bad).await.unwrap_err(),
        ];
        for err in checks {
            assert!(matches!(err, OpenBaoError::Segment { .. }), "{bad:?}: {err:?}");
        }
    }
}

#[tokio::test]
async fn openbao_that_cannot_be_reached_is_unavailable_for_every_operation() {
    let bao = TestOpenBao::new().await;
    let mut config = bao.config(&bao.api_token);
    let closed = closed_loopback_port();
    config.addr = format!("http://{closed}");
    let api = OpenBao::new(&config).unwrap();
    let app = instance_of("pixelfed");
    for err in [
        api.write("demo", &app, "apiKey", &secret("unsent-value")).await.unwrap_err(),
        api.read("demo", &app, "apiKey").await.unwrap_err(),
        api.list("demo", &app).await.unwrap_err(),
        api.copy("demo", &app, "old", "apiKey").await.unwrap_err(),
        api.destroy_all_versions("demo", &app, "apiKey").await.unwrap_err(),
    ] {
        assert!(matches!(err, OpenBaoError::Unavailable { .. }), "{err:?}");
        let text = sentence(&err, &bao, &["unsent-value"]);
        assert!(text.starts_with(&format!("OpenBao at http://{closed} cannot be reached")), "{text}");
    }
}

#[tokio::test]
async fn openbao_that_does_not_answer_within_the_deadline_is_unavailable() {
    let bao = TestOpenBao::new().await;
    // A socket that accepts connections (the kernel's backlog) and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut config = bao.config(&bao.api_token);
    config.addr = format!("http://{}", silent.local_addr().unwrap());
    let api = OpenBao::new(&config).unwrap().with_timeout(Duration::from_millis(300));
    let err = api.write("demo", &instance_of("pixelfed"), "apiKey", &secret("unsent-value")).await.unwrap_err();
    assert!(matches!(err, OpenBaoError::Unavailable { .. }), "{err:?}");
    let text = sentence(&err, &bao, &["unsent-value"]);
    assert!(text.contains("no answer within 300 ms"), "{text}");
}

#[tokio::test]
async fn a_sealed_openbao_is_sealed_for_every_operation_and_works_again_once_unsealed() {
    // A server of this test's own: sealing the shared one would fail the others.
    let bao = TestOpenBao::private().await;
    let (api, worker) = (bao.api(), bao.worker());
    let app = instance_of("pixelfed");
    api.write("demo", &app, "apiKey", &secret("before-the-seal")).await.unwrap();
    bao.seal().await;
    for err in [
        api.write("demo", &app, "apiKey", &secret("while-sealed")).await.unwrap_err(),
        worker.read("demo", &app, "apiKey").await.unwrap_err(),
        api.list("demo", &app).await.unwrap_err(),
        api.copy("demo", &app, "apiKey", "renamed").await.unwrap_err(),
        worker.destroy_all_versions("demo", &app, "apiKey").await.unwrap_err(),
    ] {
        assert!(matches!(err, OpenBaoError::Sealed { .. }), "{err:?}");
        let text = sentence(&err, &bao, &["before-the-seal", "while-sealed"]);
        assert!(text.contains("is sealed"), "{text}");
    }
    bao.unseal().await;
    assert_eq!(exposed(worker.read("demo", &app, "apiKey").await.unwrap()).as_deref(), Some("before-the-seal"));
    api.write("demo", &app, "apiKey", &secret("after-the-seal")).await.unwrap();
    assert_eq!(exposed(worker.read("demo", &app, "apiKey").await.unwrap()).as_deref(), Some("after-the-seal"));
}

#[tokio::test]
async fn an_openbao_stopped_mid_test_is_unavailable() {
    let mut bao = TestOpenBao::private().await;
    let api = bao.api();
    let app = instance_of("pixelfed");
    api.write("demo", &app, "apiKey", &secret("before-the-stop")).await.unwrap();
    bao.stop();
    let err = api.read("demo", &app, "apiKey").await.unwrap_err();
    assert!(matches!(err, OpenBaoError::Unavailable { .. }), "{err:?}");
    sentence(&err, &bao, &["before-the-stop"]);
}

#[tokio::test]
async fn the_policies_in_docs_are_the_ones_loaded_for_the_tests() {
    let bao = TestOpenBao::new().await;
    for (file, must) in [
        ("slipway-api.hcl", ["\"create\", \"update\", \"read\"", "[\"list\", \"read\"]"]),
        ("slipway-worker.hcl", ["[\"read\"]", "[\"list\", \"delete\"]"]),
    ] {
        let policy = bao.policy(file);
        for needle in must {
            assert!(policy.contains(needle), "{file} lacks {needle}");
        }
        assert!(policy.contains(&format!("path \"secret/data/{}/*\"", bao.root)), "{policy}");
        assert!(policy.contains(&format!("path \"secret/metadata/{}/*\"", bao.root)), "{policy}");
    }
    assert!(!bao.policy("slipway-api.hcl").contains("\"delete\""), "the api deletes nothing");
    // The worker renews its own token (update on auth/token/renew-self) and
    // writes nothing under the root.
    let worker = bao.policy("slipway-worker.hcl");
    let secrets = worker.split("path \"auth/token/").next().unwrap();
    for write in ["\"create\"", "\"update\"", "\"patch\""] {
        assert!(!secrets.contains(write), "workers write nothing");
    }
    for policy in [bao.policy("slipway-api.hcl"), worker] {
        assert!(policy.contains("path \"auth/token/lookup-self\" {\n  capabilities = [\"read\"]"), "{policy}");
        assert!(policy.contains("path \"auth/token/renew-self\" {\n  capabilities = [\"update\"]"), "{policy}");
    }
}

#[test]
fn docs_openbao_shows_the_policy_files_word_for_word() {
    let repo = slipway_jobs::test_support::repo();
    let doc = std::fs::read_to_string(repo.join("docs/OPENBAO.md")).unwrap();
    let blocks: Vec<&str> =
        doc.split("```hcl\n").skip(1).map(|rest| rest.split("```").next().expect("a closed block")).collect();
    let files: Vec<String> = ["slipway-api.hcl", "slipway-worker.hcl"]
        .iter()
        .map(|f| std::fs::read_to_string(repo.join("docs/openbao").join(f)).unwrap())
        .collect();
    assert_eq!(blocks, files, "docs/OPENBAO.md and docs/openbao/*.hcl differ");
}
