//! Text output for people: aligned tables and short summaries of the api's
//! JSON answers (`--output json` prints the answers themselves).

use serde_json::Value;

/// Rows under a header, each column as wide as its widest cell, two spaces apart.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        padded.join("  ").trim_end().to_owned()
    };
    let mut out = vec![line(header.iter().map(|h| h.to_string()).collect())];
    out.extend(rows.iter().map(|r| line(r.clone())));
    out.join("\n")
}

/// A JSON value as a cell: strings bare, `null` as `-`.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(cell).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// A duration in milliseconds as `850ms`, `42s`, `3m05s`, `2h10m`.
pub fn age(ms: &Value) -> String {
    let Some(ms) = ms.as_i64() else { return "-".into() };
    let s = ms / 1000;
    match s {
        _ if ms < 1000 => format!("{ms}ms"),
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// `slipway status`: the deployment, its last build, its instances.
pub fn deployment(d: &Value) -> String {
    let mut out = vec![
        format!("deployment  {}", cell(&d["id"])),
        format!("state       {}", cell(&d["state"])),
        format!("domain      {}", cell(&d["domain"])),
        format!("source      {}", d["module_source"].as_str().unwrap_or("built-in")),
        format!("updated     {}", cell(&d["updated_at"])),
    ];
    let b = &d["last_build"];
    if b.is_object() {
        out.push(format!("last build  {} ({} {})", cell(&b["id"]), cell(&b["kind"]), cell(&b["status"])));
        if let Some(e) = b["error"].as_str() {
            out.push(format!("error       {e}"));
        }
    }
    let rows: Vec<Vec<String>> = d["deployed_instances"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            let fields = i.as_object().map(|o| o.iter().filter(|(k, _)| *k != "readiness").collect::<Vec<_>>());
            let name = fields
                .unwrap_or_default()
                .iter()
                .find(|(k, _)| ["name", "application", "fqdn"].contains(&k.as_str()))
                .map(|(_, v)| cell(v))
                .unwrap_or_else(|| i.to_string());
            vec![name, cell(&i["readiness"]["state"])]
        })
        .collect();
    if !rows.is_empty() {
        out.push(String::new());
        out.push(render(&["INSTANCE", "READINESS"], &rows));
    }
    out.join("\n")
}

/// `slipway sbom <id>`: one row per node.
pub fn sboms(list: &Value) -> String {
    let rows: Vec<Vec<String>> = list["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            vec![cell(&n["node"]), cell(&n["status"]), cell(&n["build_id"]), cell(&n["created_at"]), cell(&n["reason"])]
        })
        .collect();
    render(&["NODE", "STATUS", "BUILD", "CREATED", "REASON"], &rows)
}

/// `slipway queues`: one row per queue.
pub fn queues(q: &Value) -> String {
    let rows: Vec<Vec<String>> = q["queues"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|q| {
            vec![
                cell(&q["queue"]),
                cell(&q["waiting"]),
                cell(&q["scheduled"]),
                cell(&q["running"]),
                age(&q["oldest_waiting_ms"]),
            ]
        })
        .collect();
    render(&["QUEUE", "WAITING", "SCHEDULED", "RUNNING", "OLDEST WAIT"], &rows)
}

/// `slipway workers`: one row per worker process.
pub fn workers(w: &Value) -> String {
    let rows: Vec<Vec<String>> = w["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| {
            let alive = if w["alive"].as_bool() == Some(true) { "yes" } else { "no" };
            vec![
                cell(&w["name"]),
                cell(&w["host"]),
                cell(&w["queues"]),
                cell(&w["slots_in_use"]),
                format!("{} ({} ago)", cell(&w["last_heartbeat"]), age(&w["heartbeat_age_ms"])),
                alive.into(),
            ]
        })
        .collect();
    if rows.is_empty() {
        return format!("no worker beat in the last {}", age(&Value::from(w["window_s"].as_i64().unwrap_or(0) * 1000)));
    }
    render(&["NAME", "HOST", "QUEUES", "SLOTS IN USE", "LAST HEARTBEAT", "ALIVE"], &rows)
}

/// The last line of `deploy --follow`: how the build ended.
pub fn build_summary(b: &Value) -> String {
    let mut line = format!("build {} {}", cell(&b["id"]), cell(&b["status"]));
    if let Some(ms) = b["duration_ms"].as_i64() {
        line.push_str(&format!(" after {}", age(&Value::from(ms))));
    }
    if let Some(e) = b["error"].as_str() {
        line.push_str(&format!(": {e}"));
    }
    line
}

/// A size difference in bytes for people: `+1.43 MiB`, `-512 B`, `0 B`.
pub fn size_delta(bytes: i64) -> String {
    let size = indicatif::HumanBytes(bytes.unsigned_abs());
    match bytes.signum() {
        1 => format!("+{size}"),
        -1 => format!("-{size}"),
        _ => size.to_string(),
    }
}

/// A package of a closure diff as `name version` (`name` alone without a version).
fn package(name: &Value, version: &Value) -> String {
    match version.as_str().filter(|v| !v.is_empty()) {
        Some(v) => format!("{} {v}", cell(name)),
        None => cell(name),
    }
}

/// A node's closure diff (`change.closure` of a plan's report): a count
/// line, then one line per package, `+` added, `-` removed, `~` changed.
fn closure(c: &Value) -> Vec<String> {
    let list = |key: &str| c[key].as_array().cloned().unwrap_or_default();
    let (added, removed, changed) = (list("added"), list("removed"), list("changed"));
    let delta = c.get("size_delta").or(c.get("sizeDelta")).and_then(Value::as_i64);
    let mut head = format!("  closure  {} added, {} removed, {} changed", added.len(), removed.len(), changed.len());
    if let Some(delta) = delta {
        head.push_str(&format!("; size {}", size_delta(delta)));
    }
    let mut lines = vec![head];
    lines.extend(added.iter().map(|p| format!("    + {}", package(&p["name"], &p["version"]))));
    lines.extend(removed.iter().map(|p| format!("    - {}", package(&p["name"], &p["version"]))));
    lines.extend(
        changed.iter().map(|p| format!("    ~ {} {} → {}", cell(&p["name"]), cell(&p["before"]), cell(&p["after"]))),
    );
    lines
}

/// `slipway plan`: the plan build `b` (a `GET /builds/{id}` view of a dry
/// run that succeeded) per node, with its action, its system before and
/// after and its closure diff, then how to apply it (`apply`, the command).
pub fn plan(b: &Value, apply: &str) -> String {
    let nodes = b["report"]["nodes"].as_array().cloned().unwrap_or_default();
    let action = |n: &Value| n["change"]["action"].as_str().or(n["outcome"].as_str()).unwrap_or("unknown").to_owned();
    let mut counts: Vec<(String, usize)> = Vec::new();
    for node in &nodes {
        match counts.iter_mut().find(|(a, _)| *a == action(node)) {
            Some((_, n)) => *n += 1,
            None => counts.push((action(node), 1)),
        }
    }
    let counted: Vec<String> = counts.iter().map(|(a, n)| format!("{n} {a}")).collect();
    let noun = if nodes.len() == 1 { "node" } else { "nodes" };
    let mut out = vec![format!(
        "plan {} of deployment {}: {} {noun}{}",
        cell(&b["id"]),
        cell(&b["deployment_id"]),
        nodes.len(),
        if counted.is_empty() { String::new() } else { format!(" ({})", counted.join(", ")) }
    )];
    let system = |v: &Value| v.as_str().unwrap_or("none").to_owned();
    for node in &nodes {
        out.push(String::new());
        out.push(format!("{}  {}", cell(&node["name"]), action(node)));
        if node["outcome"] == "failed" {
            out.push(format!("  failed   {}", node["error"].as_str().unwrap_or("(no reason given)")));
        }
        let change = &node["change"];
        if change.is_object() {
            let (before, after) = (system(&change["before"]), system(&change["after"]));
            if before == after {
                out.push(format!("  system   {after} (unchanged)"));
            } else {
                out.push(format!("  system   {before} → {after}"));
            }
            if change["closure"].is_object() {
                out.extend(closure(&change["closure"]));
            }
        } else if let Some(s) = node["system"].as_str() {
            out.push(format!("  system   {s}"));
        }
    }
    out.push(String::new());
    let given: Vec<String> = b["plan"]["secret_values_given"].as_array().into_iter().flatten().map(cell).collect();
    if given.is_empty() {
        let until = b["plan"]["expires_at"].as_str().map(|t| format!(" (until {t})")).unwrap_or_default();
        out.push(format!("apply this plan{until} with:"));
        out.push(format!("  {apply}"));
    } else {
        out.push(format!(
            "this plan cannot be applied: it gave new values for operator secrets {}, and a plan never stores a \
             value; submit the configuration with `slipway deploy` instead",
            given.join(", ")
        ));
    }
    out.join("\n")
}

/// `slipway history`: one row per build of a page of `GET
/// /deployments/{id}/builds`, newest first.
pub fn history(page: &Value) -> String {
    let rows: Vec<Vec<String>> = page["builds"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| {
            let who = b["requested_by"]["sub"].as_str().unwrap_or("-").to_owned();
            vec![
                cell(&b["id"]),
                cell(&b["queued_at"]),
                cell(&b["trigger"]),
                cell(&b["status"]),
                who,
                b["changes"].as_str().unwrap_or("-").to_owned(),
            ]
        })
        .collect();
    if rows.is_empty() {
        return "no builds".into();
    }
    render(&["BUILD", "QUEUED", "TRIGGER", "STATUS", "WHO", "CHANGES"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let text = render(&["A", "LONG"], &[vec!["wide cell".into(), "x".into()], vec!["y".into(), "z".into()]]);
        assert_eq!(text, "A          LONG\nwide cell  x\ny          z");
    }

    #[test]
    fn ages_read_in_the_largest_sensible_unit() {
        for (ms, text) in
            [(json!(850), "850ms"), (json!(42_000), "42s"), (json!(185_000), "3m05s"), (json!(7_800_000), "2h10m")]
        {
            assert_eq!(age(&ms), text);
        }
        assert_eq!(age(&Value::Null), "-");
    }

    #[test]
    fn size_deltas_are_signed_and_read_in_binary_units() {
        assert_eq!(size_delta(1_500_000), "+1.43 MiB");
        assert_eq!(size_delta(-512), "-512 B");
        assert_eq!(size_delta(0), "0 B");
    }

    #[test]
    fn a_plan_shows_each_node_s_action_systems_and_closure_diff_and_the_command_that_applies_it() {
        let build = json!({
            "id": "demo.p", "deployment_id": "demo",
            "plan": { "expires_at": "2030-01-01T00:00:00.000Z", "secret_values_given": [] },
            "report": { "nodes": [
                { "name": "web", "outcome": "planned", "change": {
                    "action": "update", "before": "/nix/store/a-web", "after": "/nix/store/b-web",
                    "addLinks": [], "removeLinks": [],
                    "closure": {
                        "added": [{ "name": "openssl", "version": "3.0.13" }],
                        "removed": [{ "name": "oldtool", "version": "" }],
                        "changed": [{ "name": "nginx", "before": "1.24.0", "after": "1.26.0" }],
                        "sizeDelta": -2_048
                    }
                } },
                { "name": "db", "outcome": "planned", "change": {
                    "action": "unchanged", "before": "/nix/store/c-db", "after": "/nix/store/c-db"
                } },
                { "name": "new", "outcome": "planned", "change": { "action": "add", "before": null, "after": "/nix/store/d-new" } }
            ] }
        });
        let text = plan(&build, "slipway apply demo demo.p");
        let expected = "\
plan demo.p of deployment demo: 3 nodes (1 update, 1 unchanged, 1 add)

web  update
  system   /nix/store/a-web → /nix/store/b-web
  closure  1 added, 1 removed, 1 changed; size -2.00 KiB
    + openssl 3.0.13
    - oldtool
    ~ nginx 1.24.0 → 1.26.0

db  unchanged
  system   /nix/store/c-db (unchanged)

new  add
  system   none → /nix/store/d-new

apply this plan (until 2030-01-01T00:00:00.000Z) with:
  slipway apply demo demo.p";
        assert_eq!(text, expected);
    }

    #[test]
    fn a_plan_that_gave_secret_values_says_it_cannot_be_applied() {
        let build = json!({ "id": "demo.p", "deployment_id": "demo", "report": { "nodes": [] },
                            "plan": { "secret_values_given": ["mastodon.translationApiKey"] } });
        let text = plan(&build, "slipway apply demo demo.p");
        assert!(text.contains("cannot be applied") && text.contains("mastodon.translationApiKey"), "{text}");
        assert!(!text.contains("slipway apply"), "{text}");
    }

    #[test]
    fn the_history_shows_who_asked_and_a_dash_when_nobody_is_known() {
        let page = json!({ "builds": [
            { "id": "demo.2", "queued_at": "2030-01-01T00:00:02.000Z", "trigger": "rollback", "status": "queued",
              "requested_by": { "sub": "alice" }, "changes": "1 replaced: /configuration/domain" },
            { "id": "demo.1", "queued_at": "2030-01-01T00:00:01.000Z", "trigger": "submit", "status": "succeeded",
              "requested_by": null, "changes": "no change" }
        ], "next": null });
        let text = history(&page);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["BUILD", "QUEUED", "TRIGGER", "STATUS", "WHO", "CHANGES"]
        );
        assert!(
            lines[1].starts_with("demo.2") && lines[1].contains("rollback") && lines[1].contains("alice"),
            "{text}"
        );
        assert!(lines[2].contains(" - ") && lines[2].ends_with("no change"), "{text}");
        assert_eq!(history(&json!({ "builds": [], "next": null })), "no builds");
    }
}
