//! §8 at the checks: secret values leave the configuration, with what a
//! submit needs to place them (the built-in source: mastodon's
//! `translationApiKey`, once called `deeplApiKey`, and peertube's
//! `smtpPassword`).

use secrecy::ExposeSecret;
use serde_json::json;
use slipway_jobs::test_support::{checker, demo};

#[test]
fn secret_values_leave_the_configuration_and_come_back_with_their_renames() {
    let mut config = demo();
    config["applications"]["mastodon"]["translationApiKey"] = json!("deepl-key-value");
    config["applications"]["mastodon"]["secretsClear"] = json!(["translationApiKey", "domain"]);
    config["applications"]["peertube"]["smtpPassword"] = json!("");
    let checked = checker().check(config, None).expect("no store refusal asked for");
    let text = checked.configuration.to_string();
    assert!(!text.contains("deepl-key-value"), "the value stayed: {text}");
    let mastodon = checked.secrets.iter().find(|a| a.application == "mastodon").expect("mastodon's secrets");
    assert_eq!(mastodon.instance(), "mastodon-operator-secrets");
    let given: Vec<(&str, &str)> = mastodon.given.iter().map(|(f, v)| (f.as_str(), v.expose_secret())).collect();
    assert_eq!(given, [("translationApiKey", "deepl-key-value")]);
    assert_eq!(mastodon.renamed, [("deeplApiKey".to_owned(), "translationApiKey".to_owned())]);
    // As a preview shows it: the field given is set, and a value wins over a clear.
    assert_eq!(checked.configuration["applications"]["mastodon"]["secretsSet"], json!(["translationApiKey"]));
    assert_eq!(checked.configuration["applications"]["mastodon"]["secretsClear"], json!([]));
    // An empty value is no value.
    let peertube = checked.secrets.iter().find(|a| a.application == "peertube").expect("peertube's secrets");
    assert!(peertube.given.is_empty());
}

#[test]
fn an_old_shape_value_under_the_old_name_is_taken_as_the_renamed_secret() {
    let mut config = demo();
    config["applications"]["mastodon"]["deeplApiKey"] = json!("old-shape-value");
    let checked = checker().check(config, None).expect("migrated and taken");
    assert!(!checked.configuration.to_string().contains("old-shape-value"));
    let mastodon = checked.secrets.iter().find(|a| a.application == "mastodon").unwrap();
    assert_eq!(mastodon.given.iter().map(|(f, _)| f.as_str()).collect::<Vec<_>>(), ["translationApiKey"]);
}

#[test]
fn without_a_secret_store_each_value_is_a_problem_that_never_shows_it() {
    let mut config = demo();
    config["applications"]["mastodon"]["translationApiKey"] = json!("never-shown-value");
    let listing = checker().check(config, Some("no secret store is configured")).unwrap_err();
    let problems = serde_json::to_string(&listing.problems).unwrap();
    assert!(problems.contains("/applications/mastodon/translationApiKey"), "{problems}");
    assert!(!problems.contains("never-shown-value"), "{problems}");
}
