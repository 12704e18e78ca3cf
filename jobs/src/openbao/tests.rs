//! The client's own tests, without a server; `jobs/tests/it/openbao.rs` runs it
//! against a development OpenBao.

use super::*;

fn client() -> OpenBao {
    OpenBao::new(&OpenBaoConfig {
        addr: "http://127.0.0.1:1".into(),
        token: SecretString::from("s.never-shown"),
        mount: "secret".into(),
        root: "deployments".into(),
    })
    .unwrap()
}

#[test]
fn a_plain_name_is_its_own_segment_and_everything_else_is_escaped() {
    for (value, name) in [
        ("apiKey", "apiKey"),
        ("demo-1", "demo-1"),
        ("pixelfed-operator-secrets", "pixelfed-operator-secrets"),
        ("a.b_c~d", "a.b_c~d"),
        ("...", "..."),
        ("a/b", "a%2Fb"),
        ("a%2Fb", "a%252Fb"),
        ("%2e%2e", "%252e%252e"),
        ("a/", "a%2F"),
        ("/a", "%2Fa"),
        ("é", "%C3%A9"),
        ("ｆｕｌｌ", "%EF%BD%86%EF%BD%95%EF%BD%8C%EF%BD%8C"),
        ("a?b", "a%3Fb"),
        ("a#b", "a%23b"),
        ("a b", "a%20b"),
        ("a\\b", "a%5Cb"),
        ("\0", "%00"),
    ] {
        assert_eq!(escape_segment(value).as_deref(), Some(name), "{value:?}");
        assert_eq!(unescape_segment(name).as_deref(), Some(value), "{name:?}");
    }
    for refused in ["", ".", ".."] {
        assert_eq!(escape_segment(refused), None, "{refused:?}");
    }
}

#[test]
fn only_names_slipway_writes_are_read_back() {
    for name in ["a b", "a/b", "%41", "%2f", "%", "%4", "%ZZ", "%C3", ".", "..", "", "é"] {
        assert_eq!(unescape_segment(name), None, "{name:?}");
    }
}

#[test]
fn entry_paths_follow_the_layout_and_refuse_what_cannot_be_a_segment() {
    let bao = client();
    assert_eq!(
        bao.entry_path("demo", &instance_of("pixelfed"), "apiKey").unwrap(),
        "secret/data/deployments/demo/secret/pixelfed-operator-secrets/apiKey"
    );
    assert_eq!(
        bao.entry_path("../x", &instance_of(".."), "a/../b").unwrap(),
        "secret/data/deployments/..%2Fx/secret/..-operator-secrets/a%2F..%2Fb"
    );
    for (id, instance, field, part) in [
        ("", "i", "f", Part::DeploymentId),
        ("..", "i", "f", Part::DeploymentId),
        ("d", ".", "f", Part::Instance),
        ("d", "i", "", Part::Field),
        ("d", "i", "..", Part::Field),
    ] {
        match bao.entry_path(id, instance, field) {
            Err(OpenBaoError::Segment { part: p, .. }) => assert_eq!(p, part, "{id:?} {instance:?} {field:?}"),
            other => panic!("{id:?} {instance:?} {field:?}: {other:?}"),
        }
    }
}

#[test]
fn a_request_url_keeps_the_escapes_of_a_name() {
    // What `send` builds for a name holding `%`: the URL parser must
    // neither decode it nor take `%252E` for a dot segment.
    let url = reqwest::Url::parse("http://127.0.0.1:8200/v1/secret/data/r/%252E%252E/%252Fa/x%2520y").unwrap();
    assert_eq!(url.path(), "/v1/secret/data/r/%252E%252E/%252Fa/x%2520y");
}

#[test]
fn the_debug_form_of_a_client_never_shows_the_token() {
    let debug = format!("{:?} {:#?}", client(), client());
    assert!(debug.contains("127.0.0.1:1") && !debug.contains("never-shown"), "{debug}");
}

#[test]
fn a_refusal_never_repeats_the_token_or_the_value() {
    let bao = client();
    let answer = Answer {
        status: 400,
        body: br#"{"errors":["bad s.never-shown and hunter2 here"]}"#.to_vec(),
        class: crate::outbound::Class::Refused,
    };
    let err = bao.refusal(action::WRITE, "p", &answer, Some(&SecretString::from("hunter2"))).to_string();
    assert!(!err.contains("never-shown") && !err.contains("hunter2"), "{err}");
    assert!(err.starts_with("OpenBao refused to write p: 400: bad [redacted]"), "{err}");
    let sealed = Answer {
        status: 503,
        body: br#"{"errors":["Vault is sealed"]}"#.to_vec(),
        class: crate::outbound::Class::RetryLater { after: None },
    };
    assert!(matches!(bao.refusal(action::READ, "p", &sealed, None), OpenBaoError::Sealed { .. }));
}
