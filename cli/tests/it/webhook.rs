//! `slipway webhook …` against the real api (WH-1): an endpoint added with
//! a secret read from a file, listed, shown, disabled with its reason,
//! given a new secret shown once, its (empty) delivery log, a redelivery of
//! an unknown delivery refused, deleted; a refused URL and a token without
//! the operator claim end with exit code 1 and the api's code.

use crate::common;

use common::Fleet;

#[tokio::test]
async fn an_operator_adds_lists_shows_disables_rotates_and_deletes_a_webhook() {
    let origin = "https://panel.example";
    let fleet = Fleet::start_with(None, &[("SLIPWAY_ALLOWED_ORIGINS", origin)], false).await;
    let operator = fleet.token(true);
    let secret_file = tempfile::NamedTempFile::new().unwrap();
    let secret = "whsec_KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=";
    std::fs::write(secret_file.path(), format!("{secret}\n")).unwrap();
    let url = format!("{origin}/hooks/slipway");

    let add = fleet
        .slipway(
            &operator,
            &[
                "webhook",
                "add",
                &url,
                "--events",
                "deployment.active,deployment.failed",
                "--secret-file",
                secret_file.path().to_str().unwrap(),
                "--description",
                "the panel",
            ],
        )
        .await;
    assert_eq!(add.code, 0, "{add:#?}");
    assert!(add.stdout.contains(&format!("secret: {secret}")), "the secret is shown once: {add:#?}");
    let id = add.stdout.lines().next().unwrap().strip_prefix("webhook ").unwrap().to_owned();
    assert!(id.starts_with("wh_"), "{add:#?}");

    let list = fleet.slipway(&operator, &["webhook", "list"]).await;
    assert_eq!(list.code, 0, "{list:#?}");
    let row = list.stdout.lines().find(|l| l.starts_with(&id)).unwrap_or_else(|| panic!("{list:#?}"));
    assert!(row.contains("deployment.active,deployment.failed") && row.contains(&url), "{list:#?}");
    assert!(!list.stdout.contains("whsec_"), "a list shows no secret: {list:#?}");

    let disabled = fleet.slipway(&operator, &["webhook", "update", &id, "--disable"]).await;
    assert_eq!(disabled.code, 0, "{disabled:#?}");
    let show = fleet.slipway(&operator, &["webhook", "show", &id]).await;
    assert!(show.stdout.contains("enabled: no"), "{show:#?}");
    assert!(show.stdout.contains("disabled because: disabled by an operator"), "{show:#?}");
    assert!(!show.stdout.contains("whsec_"), "{show:#?}");

    let rotated = fleet.slipway(&operator, &["--output", "json", "webhook", "update", &id, "--rotate-secret"]).await;
    assert_eq!(rotated.code, 0, "{rotated:#?}");
    let new_secret = rotated.json()["secret"].as_str().unwrap().to_owned();
    assert!(new_secret.starts_with("whsec_") && new_secret != secret, "{rotated:#?}");

    let log = fleet.slipway(&operator, &["webhook", "deliveries", &id]).await;
    assert_eq!((log.code, log.stdout.trim()), (0, "no delivery yet"), "{log:#?}");
    let unknown = "msg_01ARZ3NDEKTSV4RRFFQ69G5FAV";
    let redeliver = fleet.slipway(&operator, &["webhook", "redeliver", &id, unknown]).await;
    assert_eq!(redeliver.code, 1, "{redeliver:#?}");
    assert!(redeliver.stderr.contains("error not_found (HTTP 404)"), "{redeliver:#?}");

    let deleted = fleet.slipway(&operator, &["webhook", "delete", &id]).await;
    assert_eq!((deleted.code, deleted.stdout.trim()), (0, format!("webhook {id} deleted").as_str()), "{deleted:#?}");
    let gone = fleet.slipway(&operator, &["webhook", "show", &id]).await;
    assert_eq!(gone.code, 1, "{gone:#?}");
}

#[tokio::test]
async fn a_refused_url_and_a_token_without_the_operator_claim_exit_1_with_the_api_s_code() {
    let fleet = Fleet::start_with(None, &[("SLIPWAY_ALLOWED_ORIGINS", "https://panel.example")], false).await;
    let refused = fleet.slipway(&fleet.token(true), &["webhook", "add", "https://evil.example/hook"]).await;
    assert_eq!(refused.code, 1, "{refused:#?}");
    assert!(refused.stderr.contains("error invalid_webhook_url (HTTP 400)"), "{refused:#?}");
    let user = fleet.slipway(&fleet.token(false), &["webhook", "list"]).await;
    assert_eq!(user.code, 1, "{user:#?}");
    assert!(user.stderr.contains("error forbidden (HTTP 403)"), "{user:#?}");
}
