//! The dashboard's HTML, rendered by maud: every value passes through
//! maud's escaping (`(value)` in a template), so a deployment id, a log
//! line or an error message can never become markup. No inline script or
//! style: the page's content security policy allows neither.

use crate::routes::rfc3339;
use maud::{html, Markup, DOCTYPE};
use slipway_jobs::jobs::report::Report;
use slipway_jobs::read::DeploymentRead;
use slipway_jobs::store::builds::BuildRow;
use slipway_jobs::store::fleet::{QueueLoad, WorkerView};
use slipway_jobs::store::instance_readiness::ReadinessRow;

/// The shell at `/ui`: the token form, the navigation and the element the
/// fragments are swapped into. It shows no data of its own; everything
/// else comes from `/ui/fragments/…` fetched with the tab's token.
pub fn shell() -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="no-referrer";
                title { "Slipway" }
                link rel="stylesheet" href="/ui/dashboard.css";
                script src="/ui/dashboard.js" defer {}
            }
            body {
                header.top {
                    a.brand href="#/" { "Slipway" }
                    nav #nav hidden {
                        a href="#/" { "Deployments" }
                        a #nav-fleet href="#/fleet" hidden { "Queues and workers" }
                        a href="#/submit" { "Submit" }
                    }
                    span #who {}
                    button #forget type="button" hidden { "Forget token" }
                }
                main {
                    form #token-form hidden {
                        h2 { "Sign in with a token" }
                        p {
                            "Paste a bearer token (a JWT your front-end or "
                            code { "slipway-api token" }
                            " issued). It is kept in this browser tab only (session storage) and sent as the "
                            code { "Authorization" }
                            " header; closing the tab forgets it."
                        }
                        label for="token-input" { "Token" }
                        textarea #token-input name="token" rows="4" autocomplete="off" spellcheck="false" required {}
                        button type="submit" { "Use this token" }
                    }
                    form #submit-form hidden {
                        h2 { "Submit a configuration" }
                        p { "Queues a deploy of the configuration, as " code { "PUT /deployments/{id}" } " does." }
                        label for="submit-id" { "Deployment id" }
                        input #submit-id name="id" required autocomplete="off" spellcheck="false";
                        label for="submit-source" { "Module source (optional)" }
                        input #submit-source name="module_source" autocomplete="off" spellcheck="false";
                        label for="submit-configuration" { "Configuration (JSON)" }
                        textarea #submit-configuration name="configuration" rows="14" spellcheck="false" required {}
                        button type="submit" { "Deploy" }
                    }
                    p #status role="status" {}
                    div #view {}
                }
            }
        }
    }
}

/// A state, status or readiness as a badge: `<span class="badge s-active">active</span>`.
fn badge(kind: &str) -> Markup {
    html! { span class=(format!("badge s-{kind}")) { (kind) } }
}

/// A timestamp (Unix ms) as RFC 3339 in a `<time>`.
fn when(ms: i64) -> Markup {
    let text = rfc3339(ms);
    html! { time datetime=(text) { (text) } }
}

fn maybe_when(ms: Option<i64>) -> Markup {
    match ms {
        Some(ms) => when(ms),
        None => html! { "—" },
    }
}

/// Milliseconds as `850 ms`, `12.3 s`, `4 min 05 s` or `2 h 03 min`.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{} min {:02} s", ms / 60_000, (ms / 1000) % 60),
        _ => format!("{} h {:02} min", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

/// Readiness of deployed instances as `2/3 ready`.
fn readiness_summary(read: &DeploymentRead) -> String {
    let ready = read.readiness.iter().filter(|r| r.state == slipway_jobs::probe::State::Ready).count();
    format!("{ready}/{} ready", read.deployed_instances.len())
}

/// The deployments list (`/ui/fragments/deployments`). Shows no build ids:
/// the list is about deployments; a deployment's view has its builds.
/// `fleet`: whether this token may see the queues and workers.
pub fn deployments(reads: &[DeploymentRead], everything: bool, fleet: bool) -> Markup {
    html! {
        section.deployments data-fleet=(fleet) {
            h2 { "Deployments" }
            @if everything {
                p.hint { "Every deployment, most recently submitted first (at most 100)." }
            } @else {
                p.hint { "The deployments this token names." }
            }
            @if reads.is_empty() {
                p.empty { "No deployments yet." }
            } @else {
                table {
                    thead { tr { th { "Deployment" } th { "State" } th { "Instances" } th { "Last build" } th { "Updated" } } }
                    tbody {
                        @for read in reads {
                            @let id = &read.deployment.id;
                            tr data-deployment=(id) {
                                td { a href=(format!("#/deployments/{id}")) { (id) } }
                                td { (badge(read.state.as_str())) }
                                td {
                                    @if read.deployed_instances.is_empty() {
                                        "—"
                                    } @else {
                                        (readiness_summary(read))
                                    }
                                }
                                td {
                                    @if let Some(b) = &read.last_build {
                                        (b.kind.as_str()) " " (badge(b.status.as_str()))
                                    } @else { "—" }
                                }
                                td { (when(read.deployment.updated_at)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn readiness_cells(row: Option<&ReadinessRow>) -> Markup {
    match row {
        None => html! { td { "—" } td {} td {} },
        Some(r) => html! {
            td { (badge(r.state.as_str())) @if let Some(why) = &r.reason { " " span.reason { (why) } } }
            td { (r.probes) }
            td { (maybe_when(r.checked_at)) }
        },
    }
}

/// One deployment (`/ui/fragments/deployments/{id}`): its state, its
/// deployed instances with their readiness, and its builds, newest first.
pub fn deployment(read: &DeploymentRead, builds: &[BuildRow]) -> Markup {
    let row = &read.deployment;
    let latest = builds.first().map(|b| b.id.as_str()).unwrap_or("");
    html! {
        section.deployment data-deployment=(row.id) data-state=(read.state.as_str()) data-latest-build=(latest) {
            h2 { "Deployment " code { (row.id) } " " span #deployment-state { (badge(read.state.as_str())) } }
            dl {
                dt { "Module source" } dd { (row.module_source.as_deref().unwrap_or("built-in")) }
                dt { "Domain" } dd { (row.domain.as_deref().unwrap_or("—")) }
                dt { "Submitted" } dd { (when(row.created_at)) }
                dt { "Updated" } dd { (when(row.updated_at)) }
            }
            h3 { "Instances" }
            @if read.deployed_instances.is_empty() {
                p.empty { "No deployed instances." }
            } @else {
                table.instances {
                    thead { tr { th { "Instance" } th { "URL" } th { "Readiness" } th { "Probes" } th { "Checked" } } }
                    tbody {
                        @for instance in &read.deployed_instances {
                            tr {
                                td { (instance.name) }
                                td { a href=(instance.url) rel="noopener noreferrer" target="_blank" { (instance.url) } }
                                (readiness_cells(read.readiness.iter().find(|r| r.instance == instance.name)))
                            }
                        }
                    }
                }
            }
            h3 { "Builds" }
            @if builds.is_empty() {
                p.empty { "No builds." }
            } @else {
                table.builds {
                    thead { tr { th { "Build" } th { "Kind" } th { "Status" } th { "Attempts" } th { "Queued" } th { "Took" } } }
                    tbody {
                        @for b in builds {
                            tr data-build=(b.id) {
                                td { a href=(format!("#/deployments/{}/builds/{}", row.id, b.id)) { code { (b.id) } } }
                                td { (b.kind.as_str()) @if b.dry_run { " (dry run)" } }
                                td { (badge(b.status.as_str())) }
                                td { (b.attempts) }
                                td { (when(b.queued_at)) }
                                td { @if let (Some(s), Some(f)) = (b.started_at, b.finished_at) { (duration(f - s)) } @else { "—" } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// One build (`/ui/fragments/builds/{id}`): its status, its run report
/// once it has one, and its log. A build still queued or running leaves the
/// log for the page to stream (`data-live`); a finished one shows it whole.
pub fn build(b: &BuildRow, log: &str, now_ms: i64) -> Markup {
    let live = !b.status.is_terminal();
    html! {
        section.build data-build=(b.id) data-status=(b.status.as_str()) data-live=(live) {
            h3 { "Build " code { (b.id) } " " (badge(b.status.as_str())) }
            dl {
                dt { "Kind" } dd { (b.kind.as_str()) @if b.dry_run { " (dry run)" } }
                dt { "Attempts" } dd { (b.attempts) }
                dt { "Worker" } dd { (b.worker.as_deref().unwrap_or("—")) }
                dt { "Queued" } dd { (when(b.queued_at)) }
                dt { "Started" } dd { (maybe_when(b.started_at)) }
                dt { "Finished" } dd { (maybe_when(b.finished_at)) }
                @if let Some(s) = b.started_at {
                    dt { "Took" } dd { (duration(b.finished_at.unwrap_or(now_ms) - s)) @if live { " so far" } }
                }
                @if let Some(reason) = &b.reason { dt { "Reason" } dd { code { (reason) } } }
                @if let Some(error) = &b.error { dt { "Error" } dd.error { (error) } }
            }
            @if let Some(report) = &b.report {
                h4 { "Run report" }
                (run_report(report))
            }
            h4 { "Log" @if live { " " span.live { "live" } } }
            pre.log #build-log data-live=(live) data-build=(b.id) { @if !live { (log) } }
        }
    }
}

/// The run report as a table of nodes, or as JSON when it is of a shape
/// this version does not know.
fn run_report(value: &serde_json::Value) -> Markup {
    let Ok(report) = serde_json::from_value::<Report>(value.clone()) else {
        return html! { pre.report { (serde_json::to_string_pretty(value).unwrap_or_default()) } };
    };
    html! {
        p.summary {
            (report.summary.nodes) " nodes, " (report.summary.failed) " failed, "
            (report.summary.sboms_ready) " SBOMs stored; took " (duration(report.duration_ms))
            @if let Some(code) = report.exit_code { "; effect exit code " (code) }
        }
        @if !report.warnings.is_empty() {
            ul.warnings { @for w in &report.warnings { li { (w) } } }
        }
        @if !report.nodes.is_empty() {
            table.report {
                thead { tr { th { "Node" } th { "Outcome" } th { "DNS names" } th { "Change" } th { "Error" } } }
                tbody {
                    @for node in &report.nodes {
                        tr {
                            td { (node.name) }
                            td { (badge(node.outcome.as_str())) }
                            td { (node.dns_names.join(", ")) }
                            td { @if let Some(c) = &node.change { (c.action) } @else { "—" } }
                            td.error { (node.error.as_deref().unwrap_or("")) }
                        }
                    }
                }
            }
        }
    }
}

/// The queues and workers (`/ui/fragments/fleet`). `live_window_ms`: how
/// recent a heartbeat must be for a worker to count as alive.
pub fn fleet(queues: &[QueueLoad], workers: &[WorkerView], live_window_ms: i64) -> Markup {
    let alive = |w: &WorkerView| w.heartbeat_age_ms <= live_window_ms;
    let serving = |queue: &str| workers.iter().filter(|w| alive(w) && w.queues.iter().any(|q| q == queue)).count();
    html! {
        section.fleet {
            h2 { "Queues" }
            table.queues {
                thead { tr { th { "Queue" } th { "Waiting" } th { "Oldest waiting" } th { "Scheduled" } th { "Running" } th { "Live workers" } } }
                tbody {
                    @for q in queues {
                        tr data-queue=(q.queue) {
                            td { (q.queue) }
                            td { (q.waiting) }
                            td { @if let Some(ms) = q.oldest_waiting_ms { (duration(ms)) } @else { "—" } }
                            td { (q.scheduled) }
                            td { (q.running) }
                            td { (serving(&q.queue)) }
                        }
                    }
                }
            }
            h2 { "Workers" }
            p.hint {
                "Workers that beat within the last hour; alive when the last heartbeat is at most "
                (duration(live_window_ms)) " old. Build slots in use are the builds a worker runs now."
            }
            @if workers.is_empty() {
                p.empty { "No worker has beaten within the last hour." }
            } @else {
                table.workers {
                    thead { tr { th { "Worker" } th { "Host" } th { "Queues" } th { "Build slots in use" } th { "Last heartbeat" } } }
                    tbody {
                        @for w in workers {
                            tr data-worker=(w.name) {
                                td { code { (w.name) } }
                                td { @if let Some(host) = &w.host { (host) } @else { "—" } }
                                td { (w.queues.join(", ")) }
                                td { (w.slots_in_use) }
                                td { (badge(if alive(w) { "alive" } else { "gone" })) " " (duration(w.heartbeat_age_ms)) " ago" }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slipway_jobs::state::{BuildKind, BuildStatus};

    fn build_row(status: BuildStatus) -> BuildRow {
        BuildRow {
            id: "demo.20260101T000000Z.abcdef".into(),
            seq: 1,
            deployment_id: "demo".into(),
            kind: BuildKind::Deploy,
            status,
            reason: Some("effect_failed".into()),
            error: Some(r#"<img src=x onerror="alert(1)">"#.into()),
            configuration: serde_json::json!({}),
            module_source: None,
            instances: Vec::new(),
            report: Some(serde_json::json!({ "unknown": "<script>alert(2)</script>" })),
            attempts: 1,
            cancel_requested: false,
            worker: Some(r#""><b>worker</b>"#.into()),
            version: 1,
            queued_at: 0,
            started_at: Some(1_000),
            finished_at: Some(13_300),
            callback_url: None,
            callback: None,
            operator_secrets: None,
            readiness: None,
            dry_run: false,
            trigger: slipway_jobs::provenance::Trigger::Submit,
            provenance: Default::default(),
            phase: None,
        }
    }

    #[test]
    fn every_value_in_a_build_fragment_is_escaped() {
        let html = build(&build_row(BuildStatus::Failed), "<script>alert(3)</script>\n", 20_000).into_string();
        for raw in ["<script>", "<img", "<b>", "onerror=\"alert"] {
            assert!(!html.contains(raw), "{raw} reached the page unescaped: {html}");
        }
        assert!(html.contains("&lt;script&gt;alert(3)&lt;/script&gt;"), "{html}");
        assert!(html.contains("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"), "{html}");
        assert!(html.contains(r#"data-live="false""#), "{html}");
    }

    #[test]
    fn a_running_build_leaves_its_log_to_the_stream_and_a_finished_one_shows_it() {
        let running = build(&build_row(BuildStatus::Running), "already written", 20_000).into_string();
        assert!(running.contains(r#"data-live="true""#), "{running}");
        assert!(!running.contains("already written"), "{running}");
        let done = build(&build_row(BuildStatus::Succeeded), "all of it", 20_000).into_string();
        assert!(done.contains("all of it"), "{done}");
    }

    #[test]
    fn durations_read_in_the_unit_that_fits() {
        assert_eq!(duration(850), "850 ms");
        assert_eq!(duration(12_300), "12.3 s");
        assert_eq!(duration(245_000), "4 min 05 s");
        assert_eq!(duration(7_380_000), "2 h 03 min");
        assert_eq!(duration(-5), "0 ms");
    }
}
