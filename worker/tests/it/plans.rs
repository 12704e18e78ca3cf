//! Plans, apply and rollback, the module source's side
//! (docs/MODULE-SOURCE.md "deploy"): a dry run's closure diff per node and
//! the GC roots that keep its planned systems alive, the generations a
//! real deploy keeps for rollbacks, and an apply's deploy that activates
//! nothing when the configuration no longer builds its plan's systems.
//! Real Nix and the reference source's real effects, run by the worker's
//! job bodies (in-process, or `slipway-worker run deploy`); the expected
//! closure diff is computed here from `nix-store -qR` on its own. Polls
//! nothing: every build here runs to its end before the test reads it.

use crate::common;

use common::{binary, demo, repo};
use serde_json::{json, Value};
use slipway_jobs::jobs::report::{ChangedPackage, Closure, NodeOutcome, Package, Reason, Report};
use slipway_jobs::state::{BuildKind, BuildStatus};
use slipway_jobs::store::{Engine, Q};
use slipway_jobs::test_support::{checker, world, AnySource, World};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A copy of the reference source (`nix/`) in `dir`, which a test may change.
fn source_copy(dir: &Path) -> PathBuf {
    let copy = dir.join("source");
    let status = Command::new("cp").arg("-r").arg(repo().join("nix")).arg(&copy).status().unwrap();
    assert!(status.success(), "cannot copy the reference source");
    copy
}

/// The demo with mastodon renamed, peertube disabled and pixelfed enabled.
fn changed() -> Value {
    let mut c = demo();
    c["applications"]["mastodon"]["subdomain"] = json!("chat");
    c["applications"]["peertube"]["enable"] = json!(false);
    c["applications"]["pixelfed"] =
        json!({ "enable": true, "adminEmail": "pixels@demo.example.org", "secretsSet": [], "secretsClear": [] });
    c
}

/// Queues a build of `configuration` for deployment `id` through the
/// built-in source (the world's `SLIPWAY_DEFAULT_SOURCE_DIR`), a dry run
/// or not, and runs it to its end.
async fn run(world: &World, id: &str, configuration: Value, dry_run: bool) -> Report {
    let request = slipway_jobs::submit::SubmitRequest {
        deployment: slipway_jobs::id::DeploymentId::parse(id).unwrap(),
        configuration,
        module_source: None,
        queueing: slipway_jobs::submit::Queueing { kind: BuildKind::Deploy, limit: None },
        dry_run,
        requested_by: None,
        plan_ttl: std::time::Duration::from_secs(3600),
        health_gate: None,
    };
    let accepted = slipway_jobs::submit::submit(&world.ctx.db, &AnySource(checker()), None, request).await.unwrap();
    world.run(&accepted.build_id).await
}

/// `nix-store` with `args`: its output's lines.
fn nix_store(args: &[&str]) -> Vec<String> {
    let out = Command::new("nix-store").args(args).output().unwrap();
    assert!(out.status.success(), "nix-store {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect()
}

/// The packages of `system`'s closure (none for `None`), by name, each with
/// its set of versions, and the closure's NAR size in bytes: a store
/// path's name less its hash, split at its first `-` followed by a digit.
fn closure(system: Option<&str>) -> (BTreeMap<String, BTreeSet<String>>, i64) {
    let Some(system) = system else { return (BTreeMap::new(), 0) };
    let mut packages: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut size = 0;
    for path in nix_store(&["-qR", system]) {
        let (_, name) = path.rsplit_once('/').unwrap().1.split_once('-').unwrap();
        let split =
            name.char_indices().find(|&(i, c)| c == '-' && name[i + 1..].starts_with(|d: char| d.is_ascii_digit()));
        let (package, version) = match split {
            Some((i, _)) => (&name[..i], &name[i + 1..]),
            None => (name, ""),
        };
        packages.entry(package.to_owned()).or_default().insert(version.to_owned());
        size += nix_store(&["-q", "--size", &path])[0].parse::<i64>().unwrap();
    }
    (packages, size)
}

/// The closure diff of `before` and `after` as `nix store diff-closures`
/// groups it, computed from the store here.
fn expected_diff(before: Option<&str>, after: Option<&str>) -> Closure {
    let ((old, old_size), (new, new_size)) = (closure(before), closure(after));
    let versions = |set: &BTreeSet<String>| set.iter().cloned().collect::<Vec<_>>().join(", ");
    let mut diff = Closure { size_delta: new_size - old_size, ..Closure::default() };
    for (name, set) in &new {
        match old.get(name) {
            None => diff.added.push(Package { name: name.clone(), version: versions(set) }),
            Some(was) if was != set => {
                diff.changed.push(ChangedPackage { name: name.clone(), before: versions(was), after: versions(set) })
            }
            Some(_) => {}
        }
    }
    for (name, set) in old.iter().filter(|(name, _)| !new.contains_key(*name)) {
        diff.removed.push(Package { name: name.clone(), version: versions(set) });
    }
    diff
}

/// Every path under `dir` with what it is: a link's target, a file's
/// bytes, or a folder.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut found = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            let what = if let Ok(target) = std::fs::read_link(&path) {
                format!("link to {}", target.display())
            } else if path.is_dir() {
                stack.push(path.clone());
                "folder".to_owned()
            } else {
                format!("file {:?}", std::fs::read(&path).unwrap())
            };
            found.insert(path, what);
        }
    }
    found
}

/// The targets of Nix's indirect GC roots (`gcroots/auto`) that point into `dir`.
fn roots_into(dir: &Path) -> BTreeSet<PathBuf> {
    let roots =
        Path::new(&std::env::var("NIX_STATE_DIR").unwrap_or_else(|_| "/nix/var/nix".into())).join("gcroots/auto");
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    std::fs::read_dir(roots)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .filter(|target| target.starts_with(&dir))
        .collect()
}

#[tokio::test]
async fn a_dry_runs_closure_diff_is_the_stores_and_its_plan_roots_keep_the_planned_systems() {
    let dir = tempfile::tempdir().unwrap();
    let source = source_copy(dir.path());
    let world = world(Engine::Sqlite, &[("SLIPWAY_DEFAULT_SOURCE_DIR", source.to_str().unwrap())]).await;
    let deployed = run(&world, "plans", demo(), false).await;
    assert_eq!(deployed.status, BuildStatus::Succeeded, "{}", deployed.to_text());
    let state = world.ctx.provider_state_dir("plans");
    let before = (snapshot(&state), roots_into(&state));

    // A new release of nodejs, which mastodon, peertube and the gateway's
    // dashboard run, besides the configuration's own changes.
    let packages = source.join("core/packages/default.nix");
    let text = std::fs::read_to_string(&packages).unwrap();
    assert!(text.contains("version = \"20.15.0\""), "the reference source's nodejs moved");
    std::fs::write(&packages, text.replace("version = \"20.15.0\"", "version = \"20.16.0\"")).unwrap();
    let plan = run(&world, "plans", changed(), true).await;
    assert_eq!(plan.status, BuildStatus::Succeeded, "{}", plan.to_text());

    let roots = world.ctx.plan_roots_dir("plans", &plan.build_id);
    for node in &plan.nodes {
        let change = node.change.as_ref().unwrap();
        let closure = change.closure.as_ref().unwrap_or_else(|| panic!("{}: no closure in {change:?}", node.name));
        let expected = expected_diff(change.before.as_deref(), change.after.as_deref());
        assert_eq!(closure, &expected, "{}'s closure diff", node.name);
        let root = roots.join(&node.name);
        match &change.after {
            Some(system) => {
                assert_eq!(std::fs::read_link(&root).unwrap(), Path::new(system), "{}'s plan root", node.name);
                assert!(roots_into(&roots).contains(&std::fs::canonicalize(&roots).unwrap().join(&node.name)));
            }
            None => assert!(root.symlink_metadata().is_err(), "{} is removed, yet has a plan root", node.name),
        }
    }
    let by_name = |name: &str| plan.nodes.iter().find(|n| n.name == name).unwrap().change.clone().unwrap();
    let nodejs = ChangedPackage { name: "nodejs".into(), before: "20.15.0".into(), after: "20.16.0".into() };
    assert!(by_name("mastodon").closure.unwrap().changed.contains(&nodejs), "{}", plan.to_text());
    assert!(by_name("pixelfed").closure.unwrap().added.iter().any(|p| p.name == "pixelfed"));
    let removed = by_name("peertube").closure.unwrap();
    assert!(removed.removed.iter().any(|p| p.name == "peertube") && removed.size_delta < 0, "{removed:?}");
    assert!(plan.to_text().contains(" packages, "), "{}", plan.to_text());
    // The report says it with `size_delta`.
    let json = serde_json::to_value(&plan).unwrap();
    let mastodon = json["nodes"].as_array().unwrap().iter().find(|n| n["name"] == "mastodon").unwrap();
    assert!(mastodon["change"]["closure"]["size_delta"].is_i64(), "{mastodon}");
    assert_eq!((snapshot(&state), roots_into(&state)), before, "the dry run changed the provider state");

    // An applied plan's roots go, with Nix's roots into them.
    slipway_jobs::jobs::sweep::drop_plan_roots(&world.ctx, "plans", &plan.build_id).unwrap();
    assert!(!roots.exists() && roots_into(&roots).is_empty(), "the plan's roots stayed");

    // A dry run whose pixelfed does not evaluate is no plan to apply: the
    // roots of the systems it built go when it ends.
    let text = std::fs::read_to_string(&packages).unwrap();
    let broken = text.replace("deps = [ php imagemagick ]", "deps = [ php imagemagick (throw \"a broken package\") ]");
    assert_ne!(broken, text, "the reference source's pixelfed moved");
    std::fs::write(&packages, broken).unwrap();
    let failed = run(&world, "plans", changed(), true).await;
    assert_eq!(
        (failed.status, failed.reason),
        (BuildStatus::Failed, Some(Reason::NodesFailed)),
        "{}",
        failed.to_text()
    );
    assert!(failed.nodes.iter().any(|n| n.outcome == NodeOutcome::Planned), "{}", failed.to_text());
    let roots = world.ctx.plan_roots_dir("plans", &failed.build_id);
    assert!(!roots.exists() && roots_into(&roots).is_empty(), "a failed plan's roots stayed");
}

#[test]
fn after_three_deploys_each_node_keeps_exactly_its_two_newest_generations() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!("path:{}", repo().join("nix").display());
    let mut builds = Vec::new();
    for subdomain in ["social", "chat", "talk"] {
        let mut config = demo();
        config["applications"]["mastodon"]["subdomain"] = json!(subdomain);
        let file = dir.path().join("config.json");
        std::fs::write(&file, config.to_string()).unwrap();
        let out = Command::new(binary("slipway-worker"))
            .args(["run", "deploy", "--source", &source, "--config", file.to_str().unwrap(), "--output", "json"])
            .env("SLIPWAY_STATE_DIR", dir.path().join("state"))
            .env("KEEP_GENERATIONS", "2")
            .env_remove("SLIPWAY_CONFIG")
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        assert!(out.status.success(), "{report}\n{}", String::from_utf8_lossy(&out.stderr));
        builds.push(report);
    }
    let nodes = dir.path().join("state/provider/local/nodes");
    let newest: Vec<&str> = builds[1..].iter().map(|b| b["build_id"].as_str().unwrap()).collect();
    for node in ["gateway", "mastodon", "peertube"] {
        let generations = nodes.join(node).join("generations");
        let mut kept: Vec<String> = std::fs::read_dir(&generations)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        kept.sort();
        let mut want: Vec<String> = newest.iter().map(|b| b.to_string()).collect();
        want.sort();
        assert_eq!(kept, want, "{node}'s generations");
        for build in &builds[1..] {
            let system = build["nodes"].as_array().unwrap().iter().find(|n| n["name"] == node).unwrap()["system"]
                .as_str()
                .unwrap()
                .to_owned();
            let link = generations.join(build["build_id"].as_str().unwrap());
            assert_eq!(std::fs::read_link(&link).unwrap(), Path::new(&system), "{node}'s generation");
        }
        // Nix's roots: the profile link and the two generations, no more.
        let canonical = std::fs::canonicalize(nodes.join(node)).unwrap();
        let mut want: BTreeSet<PathBuf> = newest.iter().map(|b| canonical.join("generations").join(b)).collect();
        want.insert(canonical.join("system"));
        assert_eq!(roots_into(&nodes.join(node)), want, "{node}'s GC roots");
    }
    let mastodon: Vec<&str> = builds
        .iter()
        .map(|b| {
            b["nodes"].as_array().unwrap().iter().find(|n| n["name"] == "mastodon").unwrap()["system"].as_str().unwrap()
        })
        .collect();
    assert_eq!(mastodon.iter().collect::<BTreeSet<_>>().len(), 3, "each deploy activated another system");
}

#[tokio::test]
async fn a_deploy_that_would_activate_another_system_than_its_plans_fails_plan_mismatch_and_changes_nothing() {
    let world = world(Engine::Sqlite, &[]).await;
    let deployed = run(&world, "apply", demo(), false).await;
    assert_eq!(deployed.status, BuildStatus::Succeeded, "{}", deployed.to_text());
    let systems: BTreeMap<String, String> =
        deployed.nodes.iter().map(|n| (n.name.clone(), n.system.clone().unwrap())).collect();
    let state = world.ctx.provider_state_dir("apply");
    let before = (snapshot(&state), roots_into(&state));
    let sboms = || async {
        let mut conn = world.ctx.db.acquire().await.unwrap();
        serde_json::to_value(slipway_jobs::store::sboms::list(&mut conn, "apply").await.unwrap()).unwrap()
    };
    let sboms_before = sboms().await;

    // The plan said another mastodon (the api's apply stores such a
    // build; here the provenance is set by hand on a queued deploy).
    let mut expected = systems.clone();
    let (_, mastodon) = systems["mastodon"].rsplit_once('/').unwrap();
    let planned = format!(
        "{}/{}",
        slipway_jobs::nix::output::store_dir().display(),
        mastodon.replacen(|c: char| c != '0', "0", 1)
    );
    expected.insert("mastodon".into(), planned.clone());
    let request = slipway_jobs::submit::SubmitRequest {
        deployment: slipway_jobs::id::DeploymentId::parse("apply").unwrap(),
        configuration: demo(),
        module_source: None,
        queueing: slipway_jobs::submit::Queueing { kind: BuildKind::Deploy, limit: None },
        dry_run: false,
        requested_by: None,
        plan_ttl: std::time::Duration::from_secs(3600),
        health_gate: None,
    };
    let build =
        slipway_jobs::submit::submit(&world.ctx.db, &AnySource(checker()), None, request).await.unwrap().build_id;
    let provenance = slipway_jobs::provenance::Provenance { expected_systems: Some(expected), ..Default::default() };
    let mut conn = world.ctx.db.acquire().await.unwrap();
    Q::new("UPDATE builds SET provenance = $1 WHERE id = $2")
        .text(serde_json::to_string(&provenance).unwrap())
        .text(build.as_str())
        .execute(&mut conn)
        .await
        .unwrap();
    drop(conn);
    let report = world.run(&build).await;

    assert_eq!(
        (report.status, report.reason),
        (BuildStatus::Failed, Some(Reason::PlanMismatch)),
        "{}",
        report.to_text()
    );
    assert_eq!(report.exit_code, Some(3));
    let error = report.error.clone().unwrap();
    assert!(error.contains(&format!("mastodon: expected {planned}, actual {}", systems["mastodon"])), "{error}");
    assert!(!error.contains("gateway") && !error.contains("peertube"), "only mastodon differs: {error}");
    assert!(report.nodes.iter().all(|n| n.outcome == NodeOutcome::Failed));
    assert_eq!(world.build(&build).await.reason.as_deref(), Some("plan_mismatch"));
    assert_eq!((snapshot(&state), roots_into(&state)), before, "a node's link or the state folder changed");
    for (node, system) in &systems {
        assert_eq!(&std::fs::read_link(state.join("nodes").join(node).join("system")).unwrap(), Path::new(system));
    }
    assert_eq!(sboms().await, sboms_before, "the deployment's SBOMs changed");
}
