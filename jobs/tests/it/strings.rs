//! What passes validation must deploy (issue 7 item 5): every string and key
//! of a configuration reaches the node exactly. A real deploy of the
//! reference module source (`nix/`) with real Nix, then each activated
//! node's `configuration.nix` is evaluated and compared, byte for byte, with
//! what was submitted.

use serde_json::{json, Map, Value};
use slipway_jobs::state::{BuildKind, BuildStatus};
use slipway_jobs::store::Engine;
use slipway_jobs::test_support::{demo, world};
use std::path::Path;
use std::process::Command;

/// Text that a Nix printer easily gets wrong: Nix's own escapes and
/// interpolation, CR in every position, control characters, non-ASCII,
/// comment and keyword look-alikes. (NUL is refused at submit: no Nix string
/// can hold it.)
fn tricky() -> Vec<String> {
    let mut all: Vec<String> = [
        "\r",
        "a\rb",
        "a\r\nb",
        "\r\n\r\n",
        "a\n",
        "\t",
        "${x}",
        "$${x}",
        "$$",
        "$",
        "a$",
        "$\\",
        "''${x}",
        "''",
        "'''",
        "'",
        "\\",
        "\\\\",
        "\\${x}",
        "\\n",
        "\"",
        "\\\"",
        "\u{1}\u{8}\u{b}\u{c}\u{e}\u{1b}\u{1f}\u{7f}",
        "é ü ß 😀 \u{85}\u{a0}\u{2028}\u{2029}\u{feff}\u{fffd}",
        "# not a comment",
        "/* not a comment */",
        "let x = 1; in x",
        "",
        " spaced ",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    // Every control character but NUL, one by one.
    all.extend((1u8..0x20).chain([0x7f]).map(|b| format!("<{}>", b as char)));
    all
}

/// Keys that are not plain Nix identifiers, or look like keywords: each
/// must be quoted (or not) so that it reads back as itself.
fn tricky_keys() -> Vec<String> {
    let mut keys = tricky();
    keys.extend(
        [
            "let",
            "in",
            "or",
            "rec",
            "inherit",
            "with",
            "assert",
            "if",
            "then",
            "else",
            "true",
            "null",
            "__curPos",
            "__functor",
            "__overrides",
            "_",
            "a'",
            "-a",
            "1a",
            "a.b",
            "a b",
            "a-b_c'",
        ]
        .map(str::to_owned),
    );
    // An identifier far longer than any option name.
    keys.push("k".repeat(600_000));
    keys
}

/// An e-mail address that the schema's pattern accepts, carrying `text`.
fn email(text: &str) -> String {
    format!("{}x@example.org", text.replace(['@', ' '], "_"))
}

/// The demo configuration with the tricky text in every free-text field of
/// every application: e-mail addresses, moderator names, PeerTube's blocked
/// instances (keys and values) and settings, Pixelfed's bucket.
fn configuration() -> Value {
    let strings = tricky();
    let all = strings.concat();
    let mut config = demo();
    let apps = &mut config["applications"];
    apps["mastodon"]["adminEmail"] = json!(email(&all));
    apps["mastodon"]["moderators"] =
        strings.iter().map(|s| json!({ "username": s, "role": "moderator" })).collect::<Vec<_>>().into();
    apps["peertube"]["adminEmail"] = json!(email("\r\n${x}''\\\"é\u{7f}"));
    let blocked: Map<String, Value> =
        tricky_keys().into_iter().zip(strings.iter().cycle()).map(|(k, v)| (k, json!(v))).collect();
    apps["peertube"]["blockedInstances"] = blocked.into();
    apps["peertube"]["settings"]["instance"] = json!({ "name": all, "shortDescription": "\r" });
    apps["pixelfed"] = json!({
        "enable": true,
        "adminEmail": email("\r"),
        "storage": { "backend": "s3", "s3Bucket": all },
        "secretsSet": [],
        "secretsClear": [],
    });
    config
}

/// Evaluates a node's `configuration.nix` to JSON with Nix.
fn evaluate(file: &Path) -> Value {
    let out = Command::new("nix-instantiate")
        .args(["--eval", "--strict", "--json"])
        .arg(file)
        .env("NIX_CONFIG", "substituters =")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every key and value of `submitted` is in `node` at the same place, byte
/// for byte (the node may have more: defaults the source filled in).
fn assert_reached(submitted: &Value, node: &Value, at: &str) {
    match (submitted, node) {
        (Value::Object(s), Value::Object(n)) => {
            for (key, value) in s {
                let here = format!("{at}/{}", key.chars().take(40).collect::<String>());
                let Some(got) = n.get(key) else { panic!("{here:?}: the key did not reach the node") };
                assert_reached(value, got, &here);
            }
        }
        (Value::Array(s), Value::Array(n)) => {
            assert_eq!(s.len(), n.len(), "{at:?}: the list has another length on the node");
            for (i, (value, got)) in s.iter().zip(n).enumerate() {
                assert_reached(value, got, &format!("{at}/{i}"));
            }
        }
        _ => assert_eq!(submitted, node, "{at:?}: the value changed on its way to the node"),
    }
}

#[tokio::test]
async fn every_string_and_key_of_a_configuration_reaches_the_node_byte_for_byte() {
    let w = world(Engine::Sqlite, &[]).await;
    let submitted = configuration();
    let id = w.queue_configuration("strings", BuildKind::Deploy, None, submitted.clone()).await;
    let report = w.run(&id).await;
    assert_eq!(report.status, BuildStatus::Succeeded, "{report:?}");

    for app in ["mastodon", "peertube", "pixelfed"] {
        let file = w.ctx.provider_state_dir("strings").join("nodes").join(app).join("system/configuration.nix");
        let node = evaluate(&file);
        let mut sent = submitted["applications"][app].clone();
        for own in ["enable", "subdomain", "secretsSet", "secretsClear"] {
            sent.as_object_mut().unwrap().remove(own);
        }
        assert_reached(&sent, &node["services"][app], &format!("/applications/{app}"));
    }
}

/// A whole number written with a fraction (`500.0`: JSON Schema's integer
/// includes it, Nix reads it as a float) reaches the node as that integer,
/// in a module option and inside a JSON-valued one; the largest 64-bit
/// integer and the smallest reach it exactly.
#[tokio::test]
async fn a_whole_number_written_with_a_fraction_reaches_the_node_as_that_integer() {
    let w = world(Engine::Sqlite, &[]).await;
    let mut config = demo();
    config["applications"]["mastodon"]["maxPostLength"] = json!(500.0);
    config["applications"]["peertube"]["transcoding"]["threads"] = json!(3.0);
    config["applications"]["peertube"]["settings"]["signup"]["userLimit"] = json!(i64::MAX);
    let id = w.queue_configuration("numbers", BuildKind::Deploy, None, config).await;
    let report = w.run(&id).await;
    assert_eq!(report.status, BuildStatus::Succeeded, "{report:?}");
    let node = |app: &str| {
        evaluate(&w.ctx.provider_state_dir("numbers").join("nodes").join(app).join("system/configuration.nix"))
    };
    let (mastodon, peertube) = (node("mastodon"), node("peertube"));
    assert_eq!(mastodon["services"]["mastodon"]["maxPostLength"], json!(500));
    assert_eq!(peertube["services"]["peertube"]["transcoding"]["threads"], json!(3));
    assert_eq!(peertube["services"]["peertube"]["settings"]["signup"]["userLimit"], json!(i64::MAX));
}

/// A whole number beyond Nix's 64-bit integers cannot reach a node: it is
/// refused at submit with its path, whatever the schema allows.
#[tokio::test]
async fn a_whole_number_beyond_64_bits_is_refused_with_its_path() {
    let checker = slipway_jobs::test_support::checker();
    for (value, path) in [
        (json!(u64::MAX), "/applications/peertube/settings/signup/userLimit"),
        (json!(1e20), "/applications/peertube/settings/signup/userLimit"),
    ] {
        let mut config = demo();
        config["applications"]["peertube"]["settings"]["signup"]["userLimit"] = value;
        let listing = checker.check(config, Some("no secrets")).unwrap_err();
        let problem = listing.problems.iter().find(|p| p.path == path).unwrap_or_else(|| panic!("{listing:?}"));
        assert_eq!(problem.kind, "unsupported_number", "{problem:?}");
    }
}
