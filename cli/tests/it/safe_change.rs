//! `slipway plan`, `apply`, `rollback` and `history` against the real api
//! and worker building the reference source with real Nix: a deploy, a plan
//! of another configuration shown per node with the command that applies
//! it, that command followed to its end, the run history, a rollback
//! followed to its end, a plan as JSON, and the stale plan's refusal with
//! what moved.

use crate::common;

use common::{demo_file, Fleet};
use serde_json::{json, Value};

/// The triggers of `history --output json`'s builds, newest first.
fn triggers(page: &Value) -> Vec<String> {
    page["builds"].as_array().unwrap().iter().map(|b| b["trigger"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn a_plan_shows_each_node_s_change_and_the_apply_command_which_applies_it_and_a_rollback_returns() {
    let fleet = Fleet::start(None).await;
    let user = fleet.token(false);
    let demo = demo_file();
    let demo = demo.to_str().unwrap();
    let mut changed: Value = serde_json::from_str(&std::fs::read_to_string(demo).unwrap()).unwrap();
    changed["applications"]["mastodon"]["subdomain"] = json!("chat");
    let changed_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(changed_file.path(), changed.to_string()).unwrap();
    let changed_file = changed_file.path().to_str().unwrap();

    let deploy = fleet.slipway(&user, &["deploy", "sc", "-f", demo, "--follow"]).await;
    assert_eq!(deploy.code, 0, "{deploy:#?}");
    let first = deploy.stdout.lines().last().unwrap().split_whitespace().nth(1).unwrap().to_owned();

    // The plan, per node, and the exact command that applies it.
    let plan = fleet.slipway(&user, &["plan", "sc", "-f", changed_file]).await;
    assert_eq!(plan.code, 0, "{plan:#?}");
    let lines: Vec<&str> = plan.stdout.lines().collect();
    assert!(lines[0].starts_with("deployment sc: plan sc.") && lines[0].ends_with(" queued"), "{plan:#?}");
    let plan_id = lines[0].split_whitespace().nth(3).unwrap().to_owned();
    assert!(lines[1].starts_with(&format!("plan {plan_id} of deployment sc: ")), "{plan:#?}");
    let at = lines.iter().position(|l| *l == "mastodon  update").unwrap_or_else(|| panic!("{plan:#?}"));
    let system = lines[at + 1];
    assert!(system.starts_with("  system   /nix/store/") && system.contains(" → /nix/store/"), "{plan:#?}");
    assert!(lines.iter().any(|l| l.ends_with("  unchanged")), "the other nodes are unchanged: {plan:#?}");
    let apply = *lines.last().unwrap();
    assert_eq!(apply, format!("  slipway apply sc {plan_id}"), "{plan:#?}");
    assert!(lines[lines.len() - 2].starts_with("apply this plan (until "), "{plan:#?}");

    // That command, followed to its end.
    let mut args: Vec<&str> = apply.split_whitespace().skip(1).collect();
    args.push("--follow");
    let applied = fleet.slipway(&user, &args).await;
    assert_eq!(applied.code, 0, "{applied:#?}");
    let said = applied.stdout.lines().next().unwrap();
    assert!(said.starts_with(&format!("deployment sc: apply of plan {plan_id} queued as build sc.")), "{applied:#?}");
    assert!(applied.stdout.lines().last().unwrap().contains(" succeeded"), "{applied:#?}");

    // The history: who asked, why, and what changed.
    let history = fleet.slipway(&user, &["--output", "json", "history", "sc"]).await.json();
    assert_eq!(triggers(&history), ["apply", "dry_run", "submit"], "{history}");
    assert_eq!(history["builds"][1]["id"], plan_id.as_str(), "{history}");
    let table = fleet.slipway(&user, &["history", "sc"]).await;
    assert_eq!(table.code, 0, "{table:#?}");
    let rows: Vec<&str> = table.stdout.lines().collect();
    assert_eq!(
        rows[0].split_whitespace().collect::<Vec<_>>(),
        ["BUILD", "QUEUED", "TRIGGER", "STATUS", "WHO", "CHANGES"]
    );
    for (row, trigger) in rows[1..].iter().zip(["apply", "dry_run", "submit"]) {
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!((cells[2], cells[3], cells[4]), (trigger, "succeeded", "developer"), "{table:#?}");
    }
    assert!(rows[1].contains("/configuration/applications/mastodon/subdomain"), "{table:#?}");

    // A rollback, to the build before the active one: the first deploy.
    let rollback = fleet.slipway(&user, &["rollback", "sc", "--follow"]).await;
    assert_eq!(rollback.code, 0, "{rollback:#?}");
    let said = rollback.stdout.lines().next().unwrap();
    assert!(
        said.starts_with(&format!("deployment sc: rollback to build {first} queued as build sc.")),
        "{rollback:#?}"
    );
    let rolled = said.split_whitespace().last().unwrap();
    let only = fleet.slipway(&user, &["--output", "json", "history", "sc", "--trigger", "rollback"]).await.json();
    assert_eq!(triggers(&only), ["rollback"], "{only}");
    assert_eq!(
        (only["builds"][0]["id"].as_str(), only["builds"][0]["based_on"].as_str()),
        (Some(rolled), Some(&*first))
    );
    let table = fleet.slipway(&user, &["history", "sc", "--limit", "1"]).await;
    assert!(table.stdout.lines().nth(1).is_some_and(|r| r.contains(" rollback ")), "{table:#?}");
    assert!(table.stdout.lines().last().unwrap().starts_with("older builds: slipway history sc --limit 1 --before "));

    // A plan as JSON: the plan build's view.
    let again = fleet.slipway(&user, &["--output", "json", "plan", "sc", "-f", changed_file]).await;
    assert_eq!(again.code, 0, "{again:#?}");
    let view = again.json();
    assert_eq!((view["status"].as_str(), view["trigger"].as_str()), (Some("succeeded"), Some("dry_run")), "{view}");
    assert!(view["plan"]["expires_at"].is_string() && view["report"]["nodes"].is_array(), "{view}");

    // The first plan is stale now: refused, with what moved, and nothing queued.
    let before = fleet.slipway(&user, &["--output", "json", "history", "sc"]).await.json();
    let stale = fleet.slipway(&user, &["apply", "sc", &plan_id]).await;
    assert_eq!(stale.code, 1, "{stale:#?}");
    assert!(stale.stderr.starts_with("slipway: error plan_stale (HTTP 409): "), "{stale:#?}");
    assert!(stale.stderr.lines().skip(1).any(|l| l.starts_with("  - ") && l.contains("version")), "{stale:#?}");
    let after = fleet.slipway(&user, &["--output", "json", "history", "sc"]).await.json();
    assert_eq!(after["builds"], before["builds"], "a refused apply queued a build");
    let json = fleet.slipway(&user, &["--output", "json", "apply", "sc", &plan_id]).await;
    let body: Value = serde_json::from_str(json.stderr.trim()).unwrap();
    assert_eq!((body["error"].as_str(), body["status"].as_i64()), (Some("plan_stale"), Some(409)), "{body}");
    assert!(body["details"]["moved"].as_array().is_some_and(|m| !m.is_empty()), "{body}");

    // A health gate reaches the api as the submit's `health_gate` (a bad one is the api's 400, naming it).
    let bad =
        fleet.slipway(&user, &["deploy", "sc", "-f", demo, "--health-gate", "soon", "--rollback-on-failure"]).await;
    assert_eq!(bad.code, 1, "{bad:#?}");
    assert!(bad.stderr.contains("invalid_request") && bad.stderr.contains("health_gate"), "{bad:#?}");
    let unpaired = fleet.slipway(&user, &["deploy", "sc", "-f", demo, "--rollback-on-failure"]).await;
    assert_eq!(unpaired.code, 2, "--rollback-on-failure without --health-gate: {unpaired:#?}");
}
