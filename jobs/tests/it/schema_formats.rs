//! A configuration schema's `format` is asserted (docs/MODULE-SOURCE.md,
//! "`format` is checked"): a value that breaks a format JSON Schema 2020-12
//! defines is a problem at its path, as a `pattern` would be; a format no
//! validator knows (the reference source's `password`, a fork's own) is an
//! annotation, and any string passes it.

use serde_json::{json, Value};
use slipway_jobs::source::outputs::SourceOutputs;
use slipway_jobs::test_support::{demo, repo};
use slipway_jobs::validate::Checker;

/// The built-in source's baked outputs, with `format` set on the string
/// PeerTube's instance name is (a fork's schema may say what it likes).
fn checker_with_format(format: &str) -> Checker {
    let mut outputs = SourceOutputs::read_dir(&repo().join("api/default-source")).unwrap();
    let name = outputs
        .schema
        .pointer_mut("/$defs/peertube/properties/settings/properties/instance/properties/name")
        .expect("the reference schema still has PeerTube's instance name; update this test");
    assert_eq!(name["type"], "string", "{name}");
    name["format"] = json!(format);
    Checker::new(outputs).unwrap()
}

fn with_instance_name(name: &str) -> Value {
    let mut configuration = demo();
    configuration["applications"]["peertube"]["settings"]["instance"]["name"] = json!(name);
    configuration
}

const AT: &str = "/applications/peertube/settings/instance/name";

#[test]
fn a_value_that_breaks_a_known_format_is_a_problem_at_its_path() {
    for (format, bad, good) in [
        ("email", "Demo PeerTube", "admin@demo.example.org"),
        ("hostname", "demo_tube.example.org!", "tube.demo.example.org"),
        ("uri", "not a uri", "https://tube.demo.example.org/"),
        ("date", "2026-13-45", "2026-12-05"),
        ("ipv4", "300.1.2.3", "192.0.2.10"),
    ] {
        let checker = checker_with_format(format);
        let listing = checker.check(with_instance_name(bad), None).unwrap_err();
        let problems: Vec<_> = listing.problems.iter().filter(|p| p.path == AT).collect();
        assert_eq!(problems.len(), 1, "{format}: {:?}", listing.problems);
        assert_eq!(problems[0].kind, "schema", "{format}");
        assert!(problems[0].message.contains(format), "{format}: {}", problems[0].message);
        assert!(checker.check(with_instance_name(good), None).is_ok(), "{format}: {good} was refused");
    }
}

#[test]
fn a_format_no_validator_knows_is_an_annotation_and_any_string_passes() {
    for format in ["password", "phone-number"] {
        let checker = checker_with_format(format);
        assert!(checker.check(with_instance_name("Demo PeerTube"), None).is_ok(), "{format}");
    }
}

#[test]
fn the_reference_schemas_secrets_say_format_password_and_take_any_text() {
    let outputs = SourceOutputs::read_dir(&repo().join("api/default-source")).unwrap();
    let text = outputs.schema.to_string();
    let formats: std::collections::BTreeSet<&str> =
        text.split("\"format\":\"").skip(1).filter_map(|rest| rest.split('"').next()).collect();
    assert_eq!(formats, ["password"].into(), "the reference schema uses another format: assert and document it");
    let checker = Checker::new(outputs).unwrap();
    let mut configuration = demo();
    configuration["applications"]["peertube"]["smtpPassword"] = json!("not an email, nor a uri: é ✓");
    let checked = checker.check(configuration, None).unwrap();
    assert!(checked.secrets.iter().any(|s| s.given.iter().any(|(field, _)| field == "smtpPassword")));
}
