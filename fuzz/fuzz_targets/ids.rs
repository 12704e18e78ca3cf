//! The deployment id and slug parsers (`jobs/src/id.rs`, ID-1 and ID-2)
//! under a fuzzer.
//!
//! For any text it checks, against an oracle written from the rules and not
//! from the code:
//!
//! - [`DeploymentId::parse`] accepts exactly the DNS labels of 1 to
//!   [`MAX_DEPLOYMENT_ID`] characters of `[a-z0-9-]` that neither start nor
//!   end with a hyphen; an accepted id round-trips through `as_str`,
//!   `Display` and serde (JSON), and serde refuses what `parse` refuses;
//! - a refusal's message is one line, however the text was made;
//! - [`new_label`] accepts exactly the non-empty slugs of `[a-z0-9-]` without
//!   a hyphen at either end (of any length); its label is itself a valid
//!   deployment id, at most [`MAX_SLUG`] + 7 characters, the slug's first
//!   characters (its hyphens at the cut dropped), `-` and six of `[a-z0-9]`;
//! - [`new_build_id`] of an accepted id starts with the id and a dot, for
//!   any time that `time` can hold.
//!
//! Run it with `scripts/fuzz` (docs/TESTING.md).

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use slipway_jobs::id::{new_build_id, new_label, DeploymentId, MAX_DEPLOYMENT_ID, MAX_SLUG};

#[derive(Debug, Arbitrary)]
struct Case {
    /// Read as an id and as a slug.
    text: String,
    /// Seconds since 1970 for a build id.
    at: i64,
}

/// The rule's own reading of a label body: `[a-z0-9-]`, no hyphen at either end.
fn is_label_body(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fuzz_target!(|case: Case| {
    let Case { text, at } = case;

    let parsed = DeploymentId::parse(&text);
    let expected = is_label_body(&text) && text.chars().count() <= MAX_DEPLOYMENT_ID;
    assert_eq!(parsed.is_ok(), expected, "parse({text:?}) = {parsed:?}");
    let from_json = serde_json::from_value::<DeploymentId>(serde_json::Value::String(text.clone()));
    assert_eq!(from_json.is_ok(), expected, "serde and parse disagree on {text:?}");
    match &parsed {
        Ok(id) => {
            assert_eq!(id.as_str(), text);
            assert_eq!(id.to_string(), text);
            let json = serde_json::to_string(id).unwrap();
            assert_eq!(&serde_json::from_str::<DeploymentId>(&json).unwrap(), id);
            if let Ok(at) = time::OffsetDateTime::from_unix_timestamp(at) {
                let build = new_build_id(id, at);
                assert!(build.starts_with(&format!("{text}.")), "{build}");
            }
        }
        Err(e) => {
            let message = e.to_string();
            assert!(!message.contains('\n') && !message.contains('\r'), "a message of two lines: {message:?}");
        }
    }

    let label = new_label(&text);
    assert_eq!(label.is_ok(), is_label_body(&text), "new_label({text:?}) = {label:?}");
    match label {
        Ok(label) => {
            assert!(DeploymentId::parse(&label).is_ok(), "the label {label:?} of {text:?} is not an id");
            assert!(label.len() <= MAX_SLUG + 7, "{label}");
            let (prefix, suffix) = label.rsplit_once('-').unwrap();
            assert_eq!(suffix.len(), 6);
            assert!(suffix.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
            assert_eq!(prefix, text[..text.len().min(MAX_SLUG)].trim_end_matches('-'));
        }
        Err(e) => assert!(!e.to_string().contains('\n'), "{e}"),
    }
});
