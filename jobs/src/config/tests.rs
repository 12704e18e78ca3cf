//! The loader's unit tests: defaults, each key's errors, the file and the
//! environment, and the operator's documents.

use super::*;

#[test]
fn defaults_follow_the_specification() {
    let c = Config::from_keys(&BTreeMap::new()).unwrap();
    assert_eq!(c.database.url, "sqlite://.slipway/slipway.db");
    assert_eq!(c.api.bind, "127.0.0.1:8080");
    assert_eq!(c.worker.build_slots, 4);
    assert_eq!(c.worker.build_prefetch, None);
    assert_eq!(c.worker.deploy_timeout, Duration::from_secs(3600));
    assert_eq!(c.worker.retention, Duration::from_secs(14 * 86400));
    assert_eq!(c.api.jwt_audience, "slipway");
    assert_eq!(c.api.request_timeout, Duration::from_secs(30));
    assert_eq!(c.api.body_timeout, Duration::from_secs(60));
    assert_eq!(c.api.shutdown_grace, Duration::from_secs(10));
    assert_eq!((c.api.streams_per_subject, c.api.streams_per_api), (100, 10_000));
    assert_eq!((c.database.sqlite_wal_limit, c.database.sqlite_checkpoint_every), (64 << 20, Duration::from_secs(30)));
    assert_eq!(c.clock_skew_limit, Duration::from_secs(2));
}

#[test]
fn a_list_of_queues_names_known_queues_and_at_least_one() {
    assert_eq!(parse_queues(None).unwrap(), ["builds", "nix", "callbacks", "readiness", "maintenance", "rollouts"]);
    assert_eq!(parse_queues(Some(" nix, nix ")).unwrap(), ["nix"]);
    for bad in [",", "bogus", "nix,bogus", "NIX"] {
        assert!(parse_queues(Some(bad)).is_err(), "{bad}");
    }
}

fn openbao(pairs: &[(&str, &str)]) -> Result<Option<OpenBaoConfig>, String> {
    let keys = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Config::from_keys(&keys).map(|c| c.openbao).map_err(|e| e.to_string())
}

#[test]
fn openbao_is_configured_only_by_an_address_and_takes_the_default_mount_and_root() {
    assert!(openbao(&[]).unwrap().is_none());
    assert!(openbao(&[("OPENBAO_ADDR", ""), ("OPENBAO_MOUNT", "kv")]).unwrap().is_none());
    let c = openbao(&[("OPENBAO_ADDR", "http://127.0.0.1:8200/"), ("OPENBAO_TOKEN", "s.tok")]).unwrap().unwrap();
    assert_eq!(
        (c.addr.as_str(), c.mount.as_str(), c.root.as_str()),
        ("http://127.0.0.1:8200", "secret", "deployments")
    );
    let c = openbao(&[
        ("OPENBAO_ADDR", "https://bao.example/proxy/"),
        ("OPENBAO_TOKEN", "s.tok\n"),
        ("OPENBAO_MOUNT", "/team/kv/"),
        ("OPENBAO_ROOT", "slipway/deployments"),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(
        (c.addr.as_str(), c.mount.as_str(), c.root.as_str()),
        ("https://bao.example/proxy", "team/kv", "slipway/deployments")
    );
    use secrecy::ExposeSecret;
    assert_eq!(c.token.expose_secret(), "s.tok");
}

#[test]
fn an_openbao_address_without_a_token_names_the_missing_key() {
    for token in [None, Some(""), Some("  ")] {
        let mut pairs = vec![("OPENBAO_ADDR", "http://127.0.0.1:8200")];
        pairs.extend(token.map(|t| ("OPENBAO_TOKEN", t)));
        let err = openbao(&pairs).unwrap_err();
        assert!(err.starts_with("OPENBAO_TOKEN is not set"), "{err}");
    }
    let err = openbao(&[("OPENBAO_TOKEN", "s.never-shown")]).unwrap_err();
    assert!(err.starts_with("OPENBAO_ADDR is not set"), "{err}");
    assert!(!err.contains("s.never-shown"), "the token is echoed: {err}");
}

#[test]
fn a_malformed_openbao_key_is_named_and_the_token_never_shows() {
    let token = ("OPENBAO_TOKEN", "s.never-shown");
    for (key, value) in [
        ("OPENBAO_ADDR", "127.0.0.1:8200"),
        ("OPENBAO_ADDR", "ftp://bao.example"),
        ("OPENBAO_ADDR", "http://bao.example/?x=1"),
        ("OPENBAO_ADDR", "http://user:s.never-shown@bao.example"),
        ("OPENBAO_MOUNT", "a//b"),
        ("OPENBAO_MOUNT", "../secret"),
        ("OPENBAO_MOUNT", "sec ret"),
        ("OPENBAO_ROOT", "."),
        ("OPENBAO_ROOT", "deploy%2Fments"),
        ("OPENBAO_ROOT", "/"),
    ] {
        let mut pairs = vec![("OPENBAO_ADDR", "http://127.0.0.1:8200"), token];
        pairs.retain(|(k, _)| *k != key);
        pairs.push((key, value));
        let err = openbao(&pairs).unwrap_err();
        assert!(err.starts_with(&format!("{key}:")), "{value}: {err}");
        assert!(!err.contains("never-shown"), "the token is echoed: {err}");
    }
}

#[test]
fn the_debug_form_of_a_configuration_never_shows_the_openbao_token() {
    let keys = BTreeMap::from([
        ("OPENBAO_ADDR".to_owned(), "http://127.0.0.1:8200".to_owned()),
        ("OPENBAO_TOKEN".to_owned(), "s.never-shown".to_owned()),
    ]);
    let c = Config::from_keys(&keys).unwrap();
    let debug = format!("{c:?} {:?} {:#?}", c.openbao, c.openbao);
    assert!(debug.contains("http://127.0.0.1:8200") && !debug.contains("never-shown"), "{debug}");
}

#[test]
fn a_key_of_a_feature_this_release_does_not_have_is_refused_by_name() {
    for (key, _) in UNSUPPORTED {
        let keys = BTreeMap::from([(key.to_string(), "something".to_owned())]);
        let err = Config::from_keys(&keys).unwrap_err().to_string();
        assert!(err.starts_with(key) && err.contains("not supported by this release"), "{err}");
        assert!(!err.contains("something"), "the value is echoed: {err}");
    }
}

#[test]
fn relative_folders_are_taken_from_the_starting_folder() {
    let keys = BTreeMap::from([
        ("SLIPWAY_STATE_DIR".to_owned(), "state".to_owned()),
        ("SLIPWAY_DEFAULT_SOURCE_DIR".to_owned(), "nix".to_owned()),
    ]);
    let c = Config::from_keys(&keys).unwrap();
    let here = std::env::current_dir().unwrap();
    assert_eq!((c.state_dir, c.sources.default_source_dir), (here.join("state"), here.join("nix")));
    let c = Config::from_keys(&BTreeMap::new()).unwrap();
    assert!(c.state_dir.is_absolute(), "{}", c.state_dir.display());
}

#[test]
fn a_token_keys_file_is_taken_from_the_starting_folder() {
    let keys = BTreeMap::from([("SLIPWAY_JWT_KEYS_FILE".to_owned(), "keys/jwks.json".to_owned())]);
    let c = Config::from_keys(&keys).unwrap();
    assert_eq!(c.api.jwt_keys_file, Some(std::env::current_dir().unwrap().join("keys/jwks.json")));
    assert_eq!(Config::from_keys(&BTreeMap::new()).unwrap().api.jwt_keys_file, None);
}

#[test]
fn a_metrics_address_must_be_an_ip_and_a_port_and_the_token_never_shows() {
    let keys = BTreeMap::from([("SLIPWAY_METRICS_ADDR".to_owned(), "localhost".to_owned())]);
    let err = Config::from_keys(&keys).unwrap_err().to_string();
    assert!(err.starts_with("SLIPWAY_METRICS_ADDR:"), "{err}");
    let keys = BTreeMap::from([
        ("SLIPWAY_METRICS_ADDR".to_owned(), " 127.0.0.1:9185".to_owned()),
        ("SLIPWAY_METRICS_TOKEN".to_owned(), "m.never-shown".to_owned()),
    ]);
    let c = Config::from_keys(&keys).unwrap();
    assert_eq!(c.metrics.addr.as_deref(), Some("127.0.0.1:9185"));
    assert!(!format!("{c:?}").contains("never-shown"), "the metrics token shows in {c:?}");
    assert!(Config::from_keys(&BTreeMap::new()).unwrap().metrics.addr.is_none());
}

#[test]
fn a_malformed_value_names_its_key() {
    let keys = BTreeMap::from([("DEPLOY_TIMEOUT".to_owned(), "soon".to_owned())]);
    let err = Config::from_keys(&keys).unwrap_err().to_string();
    assert!(err.starts_with("DEPLOY_TIMEOUT:"), "{err}");
}

#[test]
fn a_configuration_file_with_an_unknown_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("slipway.toml");
    std::fs::write(&file, "DATABASE_URL = \"sqlite://x.db\"\nBUILD_SLOT = 3\n").unwrap();
    let err = Config::load_file(&file, std::iter::empty()).unwrap_err().to_string();
    assert!(err.contains("BUILD_SLOT"), "{err}");
}

#[test]
fn a_configuration_file_that_is_not_toml_is_refused_with_the_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("slipway.toml");
    std::fs::write(&file, "BUILD_SLOTS = 3\nQUEUE_SIZE = = 7\n").unwrap();
    let err = Config::load_file(&file, std::iter::empty()).unwrap_err().to_string();
    assert!(err.contains("line 2, column "), "{err}");
}

#[test]
fn a_number_out_of_range_is_refused_by_its_key_with_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("slipway.toml");
    std::fs::write(&file, "QUEUE_SIZE = 5000000000\n").unwrap();
    let err = Config::load_file(&file, std::iter::empty()).unwrap_err().to_string();
    assert!(err.starts_with("QUEUE_SIZE:") && err.contains("4294967295"), "{err}");
}

#[test]
fn the_environment_wins_over_the_configuration_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("slipway.toml");
    std::fs::write(&file, "BUILD_SLOTS = 3\nQUEUE_SIZE = 7\n").unwrap();
    let env = [("BUILD_SLOTS".to_owned(), "5".to_owned())];
    let c = Config::load_file(&file, env.into_iter()).unwrap();
    assert_eq!((c.worker.build_slots, c.api.queue_size), (5, 7));
}

#[test]
fn an_empty_variable_leaves_the_configuration_file_value_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("slipway.toml");
    std::fs::write(&file, "SLIPWAY_JWT_ISSUER = \"https://panel.example\"\nSLIPWAY_JWT_AUDIENCE = \"panel\"\n")
        .unwrap();
    let env = [("SLIPWAY_JWT_ISSUER".to_owned(), String::new()), ("SLIPWAY_JWT_AUDIENCE".to_owned(), String::new())];
    let c = Config::load_file(&file, env.into_iter()).unwrap();
    assert_eq!((c.api.jwt_issuer.as_deref(), c.api.jwt_audience.as_str()), (Some("https://panel.example"), "panel"));
}

#[test]
fn slipway_log_wins_over_rust_log_which_wins_over_the_default() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    };
    let both = &[("SLIPWAY_LOG", "debug"), ("RUST_LOG", "trace")];
    assert_eq!(log_filter(env(both)), ("SLIPWAY_LOG", "debug".to_owned()));
    assert_eq!(log_filter(env(&[("RUST_LOG", "warn")])), ("RUST_LOG", "warn".to_owned()));
    let empty = &[("SLIPWAY_LOG", ""), ("RUST_LOG", "warn")];
    assert_eq!(log_filter(env(empty)), ("RUST_LOG", "warn".to_owned()));
    assert_eq!(log_filter(env(&[])), ("default", DEFAULT_LOG_FILTER.to_owned()));
}

/// The operator's reference is in the project: every key, the variables
/// read outside [`KEYS`], and error messages that point to it.
#[test]
fn every_key_is_documented_in_docs_configuration() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/CONFIGURATION.md");
    let doc = std::fs::read_to_string(path).expect("docs/CONFIGURATION.md");
    let missing: Vec<&str> = KEYS
        .iter()
        .copied()
        .chain(["SLIPWAY_CONFIG", "SLIPWAY_LOG", "RUST_LOG", "SLIPWAY_LOG_FORMAT"])
        .filter(|k| !doc.contains(&format!("`{k}`")))
        .collect();
    assert!(missing.is_empty(), "not in docs/CONFIGURATION.md: {missing:?}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("slipway.toml");
    std::fs::write(&file, "BUILD_SLOT = 3\n").unwrap();
    let err = Config::load_file(&file, std::iter::empty()).unwrap_err().to_string();
    assert!(err.contains("docs/CONFIGURATION.md"), "{err}");
}

/// The operator's documents stand on their own: they never send the
/// reader to files outside the project.
#[test]
fn the_operator_documents_point_only_inside_the_project() {
    for doc in ["README.md", "docs/CONFIGURATION.md"] {
        let path = format!("{}/../{doc}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap().to_lowercase();
        for outside in ["product.md", "../shared", "seeds/", "seed 0"] {
            assert!(!text.contains(outside), "{doc} mentions {outside}");
        }
    }
}

#[test]
fn allowed_origins_are_normalised_and_a_bad_one_is_named_with_its_key() {
    let keys = BTreeMap::from([(
        "SLIPWAY_ALLOWED_ORIGINS".to_owned(),
        "https://Panel.example:443, http://localhost:3000/".to_owned(),
    )]);
    let c = Config::from_keys(&keys).unwrap();
    assert_eq!(c.allowed_origins.iter().collect::<Vec<_>>(), ["https://panel.example", "http://localhost:3000"]);
    assert!(!c.callback_allow_private);
    let keys = BTreeMap::from([(
        "SLIPWAY_ALLOWED_ORIGINS".to_owned(),
        "https://panel.example,https://panel.example/app".to_owned(),
    )]);
    let err = Config::from_keys(&keys).unwrap_err().to_string();
    assert!(err.starts_with("SLIPWAY_ALLOWED_ORIGINS:") && err.contains("\"https://panel.example/app\""), "{err}");
    let keys = BTreeMap::from([("SLIPWAY_CALLBACK_ALLOW_PRIVATE".to_owned(), "true".to_owned())]);
    assert!(Config::from_keys(&keys).unwrap().callback_allow_private);
}

#[test]
fn an_empty_trusted_sources_list_allows_all() {
    let keys = BTreeMap::from([("SLIPWAY_TRUSTED_SOURCES".to_owned(), String::new())]);
    assert!(Config::from_keys(&keys).unwrap().sources.trusted_sources.is_empty());
}

#[test]
fn plans_and_rollbacks_default_to_an_hour_and_five_generations_without_a_health_gate() {
    let c = Config::from_keys(&BTreeMap::new()).unwrap();
    assert_eq!(c.safe_change.plan_ttl, Duration::from_secs(3600));
    assert_eq!(c.safe_change.keep_generations, 5);
    assert_eq!(c.safe_change.health_gate, None);
}

#[test]
fn a_health_gate_setting_is_a_timeout_with_or_without_rollback_and_anything_else_is_named() {
    use crate::provenance::HealthGate;
    let gate = |v: &str| {
        let keys = BTreeMap::from([("HEALTH_GATE".to_owned(), v.to_owned())]);
        Config::from_keys(&keys).map(|c| c.safe_change.health_gate)
    };
    assert_eq!(gate("5m").unwrap(), Some(HealthGate { timeout_ms: 300_000, rollback: false }));
    assert_eq!(gate("90s,rollback").unwrap(), Some(HealthGate { timeout_ms: 90_000, rollback: true }));
    assert_eq!(gate("off").unwrap(), None);
    for bad in ["5m,later", "0s", "2d", "soon"] {
        let e = gate(bad).unwrap_err().to_string();
        assert!(e.contains("HEALTH_GATE") && e.contains(bad), "{bad}: {e}");
    }
}
