//! Every URL of `testdata/cases/callback-urls.json` (DL-2), against
//! `check_url` with the case file's own allowlist: the expectations are the
//! file's, none is typed here.

use serde::Deserialize;
use slipway_jobs::callback::{check_url, Origins};

#[derive(Deserialize)]
struct Cases {
    allowed_origins: Vec<String>,
    allowed: Vec<String>,
    refused: Vec<String>,
}

fn cases() -> Cases {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/cases/callback-urls.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path} is not the case file's shape: {e}"))
}

#[test]
fn every_allowed_callback_url_of_the_case_file_passes() {
    let cases = cases();
    let origins = Origins::parse(&cases.allowed_origins).expect("the case file's allowlist parses");
    assert!(!cases.allowed.is_empty(), "the case file lists no allowed URL");
    let refused: Vec<String> = cases
        .allowed
        .iter()
        .filter_map(|url| check_url(url, &origins).err().map(|why| format!("{url:?}: {why}")))
        .collect();
    assert!(refused.is_empty(), "allowed by the case file, refused here:\n{}", refused.join("\n"));
}

#[test]
fn every_refused_callback_url_of_the_case_file_is_refused_with_a_reason() {
    let cases = cases();
    let origins = Origins::parse(&cases.allowed_origins).expect("the case file's allowlist parses");
    assert!(!cases.refused.is_empty(), "the case file lists no refused URL");
    let mut passed = Vec::new();
    for url in &cases.refused {
        match check_url(url, &origins) {
            Ok(parsed) => passed.push(format!("{url:?} (read as {parsed})")),
            Err(why) => assert!(!why.to_string().trim().is_empty(), "{url:?} is refused without a reason"),
        }
    }
    assert!(passed.is_empty(), "refused by the case file, allowed here:\n{}", passed.join("\n"));
}
