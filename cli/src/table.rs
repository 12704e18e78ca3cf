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
}
