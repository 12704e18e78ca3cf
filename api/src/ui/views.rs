//! The dashboard's HTML, rendered by maud: every value passes through
//! maud's escaping (`(value)` in a template), so a deployment id, a log
//! line or an error message can never become markup. No inline script or
//! style: the page's content security policy allows neither.

use crate::routes::rfc3339;
use maud::{html, Markup, DOCTYPE};
use serde::Deserialize;
use slipway_jobs::history::{BuildDiff, WaitingFor};
use slipway_jobs::jobs::report::Report;
use slipway_jobs::read::DeploymentRead;
use slipway_jobs::state::{BuildKind, BuildStatus};
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
                        a #nav-webhooks href="#/webhooks" hidden { "Webhooks" }
                        a #nav-rollouts href="#/rollouts" hidden { "Rollouts" }
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
/// deployed instances with their readiness, and its builds, newest first,
/// each with why it was queued, who asked, and its buttons (Rollback,
/// Apply) as of `now_ms`.
pub fn deployment(read: &DeploymentRead, builds: &[BuildRow], now_ms: i64) -> Markup {
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
                    thead { tr {
                        th { "Build" } th { "Kind" } th { "Trigger" } th { "Status" } th { "Who" } th { "Attempts" }
                        th { "Queued" } th { "Took" } th { span.hint { "Actions" } }
                    } }
                    tbody {
                        @for b in builds {
                            tr data-build=(b.id) data-trigger=(b.trigger.as_str()) {
                                td { a href=(format!("#/deployments/{}/builds/{}", row.id, b.id)) { code { (b.id) } } }
                                td { (b.kind.as_str()) @if b.dry_run { " (dry run)" } }
                                td { (b.trigger.as_str()) }
                                td { (badge(b.status.as_str())) }
                                td.who { (requester(b)) }
                                td { (b.attempts) }
                                td { (when(b.queued_at)) }
                                td { @if let (Some(s), Some(f)) = (b.started_at, b.finished_at) { (duration(f - s)) } @else { "—" } }
                                td.actions { (actions(b, now_ms)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Who asked for `b`: its token's `sub`, or `—` when it is not known.
fn requester(b: &BuildRow) -> &str {
    b.provenance.requested_by.as_ref().and_then(|r| r.sub.as_deref()).unwrap_or("—")
}

/// Whether `b` can be rolled back to: a deploy that succeeded, not a dry run.
pub fn is_rollback_target(b: &BuildRow) -> bool {
    b.kind == BuildKind::Deploy && !b.dry_run && b.status == BuildStatus::Succeeded
}

/// Whether plan `b` may be offered for an apply at `now_ms`: `None` when
/// `b` is no plan that succeeded, `Some(Ok)` when it may be applied, else
/// `Some(Err)` with why not, in a few words. The api checks again (a plan
/// goes stale when its deployment moves) and says why it refuses.
pub fn plan_appliable(b: &BuildRow, now_ms: i64) -> Option<Result<(), &'static str>> {
    let plan = b.provenance.plan.as_ref()?;
    if !b.dry_run || b.kind != BuildKind::Deploy || b.status != BuildStatus::Succeeded {
        return None;
    }
    Some(if !plan.secret_values_given.is_empty() {
        Err("gave secret values")
    } else if !plan.source_supports_plans {
        Err("its module source cannot apply plans")
    } else if now_ms > plan.expires_at {
        Err("expired")
    } else {
        Ok(())
    })
}

/// The buttons of a build: **Rollback** for a build that can be rolled
/// back to, **Apply** for a plan that may be applied (a plan that may not
/// says why). The page's script sends them (`data-action`).
fn actions(b: &BuildRow, now_ms: i64) -> Markup {
    html! {
        @if is_rollback_target(b) {
            button.action type="button" data-action="rollback" data-deployment=(b.deployment_id) data-build=(b.id)
                title="Deploy this build's configuration, module source revision and secret versions again" { "Rollback" }
        }
        @match plan_appliable(b, now_ms) {
            Some(Ok(())) => {
                button.action type="button" data-action="apply" data-deployment=(b.deployment_id) data-build=(b.id)
                    title="Deploy exactly the systems this plan built" { "Apply" }
            }
            Some(Err(why)) => span.hint { "plan " (why) }
            None => {}
        }
    }
}

/// What one build fragment shows besides the build row and its log.
pub struct BuildExtras<'a> {
    /// What it changed from the build before it.
    pub changes: &'a BuildDiff,
    /// Why it waits, while it is queued.
    pub waiting_for: Option<&'a WaitingFor>,
    /// Now, Unix ms (a running build's time so far, a plan's expiry).
    pub now_ms: i64,
}

/// One build (`/ui/fragments/builds/{id}`): its status, why it was queued
/// and who asked, why it waits while queued, what it changed, a plan's
/// per-node diff, its run report once it has one, and its log. A build
/// still queued or running leaves the log for the page to stream
/// (`data-live`); a finished one shows it whole.
pub fn build(b: &BuildRow, log: &str, extras: &BuildExtras<'_>) -> Markup {
    let live = !b.status.is_terminal();
    let now_ms = extras.now_ms;
    let link = |id: &str| html! { a href=(format!("#/deployments/{}/builds/{id}", b.deployment_id)) { code { (id) } } };
    html! {
        section.build data-build=(b.id) data-status=(b.status.as_str()) data-live=(live) data-trigger=(b.trigger.as_str()) {
            h3 { "Build " code { (b.id) } " " (badge(b.status.as_str())) " " span.actions { (actions(b, now_ms)) } }
            dl {
                dt { "Kind" } dd { (b.kind.as_str()) @if b.dry_run { " (dry run: a plan, it changes nothing)" } }
                dt { "Trigger" } dd.trigger { (b.trigger.as_str()) }
                dt { "Requested by" } dd.who { (requested_by(b)) }
                @if let Some(based_on) = &b.provenance.based_on {
                    dt { @if b.trigger.is_rollback() { "Returns to" } @else { "Plan applied" } }
                    dd { (link(based_on)) }
                }
                @if let Some(waiting) = extras.waiting_for {
                    dt { "Waiting for" } dd.waiting { (waiting_for(waiting, &link)) }
                }
                @if let Some(phase) = &b.phase {
                    dt { "Phase" } dd.phase { (phase) @if phase == "verifying" { ": the health gate waits for every instance to be ready" } }
                }
                @if let Some(gate) = &b.provenance.health_gate {
                    dt { "Health gate" }
                    dd.gate {
                        (gate.timeout_ms / 1000) " s" @if gate.rollback { ", rolls back when it fails" }
                        @if let Some(verdict) = b.report.as_ref().and_then(|r| r["health_gate"]["verdict"].as_str()) {
                            " — " (verdict)
                        }
                    }
                }
                dt { "Attempts" } dd { (b.attempts) }
                dt { "Worker" } dd { (b.worker.as_deref().unwrap_or("—")) }
                dt { "Queued" } dd { (when(b.queued_at)) }
                dt { "Started" } dd { (maybe_when(b.started_at)) }
                dt { "Finished" } dd { (maybe_when(b.finished_at)) }
                @if let Some(s) = b.started_at {
                    dt { "Took" } dd { (duration(b.finished_at.unwrap_or(now_ms) - s)) @if live { " so far" } }
                }
                @if let Some(plan) = &b.provenance.plan {
                    dt { "Plan expires" } dd { (when(plan.expires_at)) }
                    @if !plan.secret_values_given.is_empty() {
                        dt { "Cannot be applied" }
                        dd {
                            "it gave new values for operator secrets " (plan.secret_values_given.join(", "))
                            ", and a plan never stores a value: submit the configuration instead"
                        }
                    }
                }
                @if let Some(reason) = &b.reason { dt { "Reason" } dd { code { (reason) } } }
                @if let Some(error) = &b.error { dt { "Error" } dd.error { (error) } }
            }
            (changes(extras.changes, &link))
            @if b.dry_run {
                @if let Some(report) = &b.report {
                    h4 { "Plan" }
                    (plan_diff(report))
                }
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

/// Who asked for `b`: the token's `sub`, its issuer and the browser's origin, as known.
fn requested_by(b: &BuildRow) -> Markup {
    let Some(r) = &b.provenance.requested_by else { return html! { "—" } };
    html! {
        (r.sub.as_deref().unwrap_or("—"))
        @if let Some(iss) = &r.iss { " " span.hint { "(issuer " (iss) ")" } }
        @if let Some(origin) = &r.origin { " " span.hint { "from " (origin) } }
    }
}

/// Why a queued build waits, as a sentence.
fn waiting_for(waiting: &WaitingFor, link: &dyn Fn(&str) -> Markup) -> Markup {
    match waiting {
        WaitingFor::Deployment { build_id } => {
            html! { "an earlier build of this deployment to end: " (link(build_id)) }
        }
        WaitingFor::Slot { position } => html! { "a free build slot (number " (position) " in the queue)" },
        WaitingFor::Worker => html! { "a worker: none serving the builds queue is alive" },
    }
}

/// What a build changed from the one before it: the one-line summary,
/// and each operation of the patch (its path; secrets appear by version).
fn changes(diff: &BuildDiff, link: &dyn Fn(&str) -> Markup) -> Markup {
    let ops = diff.patch.as_array().map_or(&[][..], Vec::as_slice);
    html! {
        h4 { "Changes" }
        p.changes {
            (diff.summary)
            @if let Some(previous) = &diff.previous_build_id { " " span.hint { "(from build " (link(previous)) ")" } }
            @else { " " span.hint { "(the deployment's first build)" } }
        }
        @if !ops.is_empty() {
            details.patch {
                summary { (ops.len()) " operation" @if ops.len() != 1 { "s" } " (RFC 6902)" }
                ul {
                    @for op in ops {
                        li {
                            code { (op["op"].as_str().unwrap_or("?")) " " (op["path"].as_str().unwrap_or("?")) }
                            @if let Some(value) = op.get("value") {
                                " " span.hint { (short_json(value)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `value` as compact JSON, cut to 120 characters.
fn short_json(value: &serde_json::Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(120) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

/// A node of a plan's report, as far as the plan diff reads it.
#[derive(Deserialize)]
struct PlannedNode {
    name: String,
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    change: Option<PlannedChange>,
}

/// A node's `change` in a plan (MODULE-SOURCE.md, `nodes.json`).
#[derive(Deserialize)]
struct PlannedChange {
    action: String,
    #[serde(default)]
    before: Option<String>,
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    closure: Option<ClosureDiff>,
}

/// The packages a node's closure gains, loses and changes, and its size difference.
#[derive(Deserialize)]
struct ClosureDiff {
    #[serde(default)]
    added: Vec<Package>,
    #[serde(default)]
    removed: Vec<Package>,
    #[serde(default)]
    changed: Vec<ChangedPackage>,
    #[serde(default, alias = "sizeDelta")]
    size_delta: Option<i64>,
}

/// A package added or removed.
#[derive(Deserialize)]
struct Package {
    name: String,
    #[serde(default)]
    version: String,
}

/// A package in both closures with other versions.
#[derive(Deserialize)]
struct ChangedPackage {
    name: String,
    #[serde(default)]
    before: String,
    #[serde(default)]
    after: String,
}

/// A plan's per-node diff: each node's action, its system before and
/// after, and its closure diff when the module source gave one. Nodes of
/// a shape this version does not read are left to the run report.
fn plan_diff(report: &serde_json::Value) -> Markup {
    let nodes: Vec<PlannedNode> = report["nodes"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .filter_map(|n| serde_json::from_value(n.clone()).ok())
        .collect();
    html! {
        @if nodes.is_empty() {
            p.empty { "The plan names no node." }
        } @else {
            table.plan {
                thead { tr { th { "Node" } th { "Action" } th { "System before" } th { "System after" } th { "Closure" } } }
                tbody {
                    @for node in &nodes {
                        @let action = node.change.as_ref().map_or(node.outcome.as_deref().unwrap_or("—"), |c| c.action.as_str());
                        tr data-node=(node.name) data-action=(action) {
                            td { (node.name) }
                            td {
                                (badge(action))
                                @if let Some(error) = &node.error { " " span.error { (error) } }
                            }
                            @if let Some(c) = &node.change {
                                td { code { (c.before.as_deref().unwrap_or("—")) } }
                                td { code { (c.after.as_deref().unwrap_or("—")) } }
                                td { @if let Some(closure) = &c.closure { (closure_diff(closure)) } @else { "—" } }
                            } @else {
                                td { "—" } td { "—" } td { "—" }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A closure diff: counts and the size difference, then each package.
fn closure_diff(c: &ClosureDiff) -> Markup {
    let count = c.added.len() + c.removed.len() + c.changed.len();
    html! {
        span.closure-summary {
            (c.added.len()) " added, " (c.removed.len()) " removed, " (c.changed.len()) " changed"
            @if let Some(delta) = c.size_delta { "; size " (size_delta(delta)) }
        }
        @if count > 0 {
            ul.closure {
                @for p in &c.added { li.added { "+ " (p.name) " " (p.version) } }
                @for p in &c.removed { li.removed { "− " (p.name) " " (p.version) } }
                @for p in &c.changed { li.changed { "~ " (p.name) " " (p.before) " → " (p.after) } }
            }
        }
    }
}

/// A size difference in bytes: `+1.4 MiB`, `−512 B`, `0 B` (binary units).
pub fn size_delta(bytes: i64) -> String {
    let sign = match bytes.signum() {
        1 => "+",
        -1 => "−",
        _ => "",
    };
    let n = bytes.unsigned_abs();
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < units.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{sign}{n} B")
    } else {
        format!("{sign}{value:.1} {}", units[unit])
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

    /// A diff as the history gives it, with hostile text in its summary and patch.
    fn hostile_diff() -> BuildDiff {
        BuildDiff {
            build_id: "demo.20260101T000000Z.abcdef".into(),
            previous_build_id: Some(r#"demo."><i>prev</i>"#.into()),
            patch: serde_json::json!([
                { "op": "replace", "path": "/configuration/<u>path</u>", "value": "<marquee>v</marquee>" }
            ]),
            summary: "1 replaced: /configuration/<u>path</u>".into(),
        }
    }

    fn render(b: &BuildRow, log: &str, diff: &BuildDiff, waiting_for: Option<&WaitingFor>) -> String {
        build(b, log, &BuildExtras { changes: diff, waiting_for, now_ms: 20_000 }).into_string()
    }

    #[test]
    fn a_build_that_verifies_shows_its_phase_and_its_gate() {
        let mut row = build_row(BuildStatus::Running);
        row.phase = Some("verifying".into());
        row.provenance.health_gate = Some(slipway_jobs::provenance::HealthGate { timeout_ms: 300_000, rollback: true });
        let diff = slipway_jobs::history::diff(&row, None);
        let html = render(&row, "", &diff, None);
        assert!(html.contains("verifying: the health gate waits for every instance to be ready"), "{html}");
        assert!(html.contains("300 s, rolls back when it fails"), "{html}");
    }

    #[test]
    fn every_value_in_a_build_fragment_is_escaped() {
        let mut row = build_row(BuildStatus::Failed);
        row.provenance.requested_by = Some(slipway_jobs::provenance::RequestedBy {
            sub: Some("<b>alice</b>".into()),
            iss: Some(r#""><script>alert(4)</script>"#.into()),
            origin: Some("<em>origin</em>".into()),
            tenant: None,
        });
        row.provenance.based_on = Some(r#"demo."><s>based</s>"#.into());
        let html = render(&row, "<script>alert(3)</script>\n", &hostile_diff(), None);
        for raw in ["<script>", "<img", "<b>", "onerror=\"alert", "<i>", "<u>", "<marquee>", "<s>", "<em>"] {
            assert!(!html.contains(raw), "{raw} reached the page unescaped: {html}");
        }
        assert!(html.contains("&lt;script&gt;alert(3)&lt;/script&gt;"), "{html}");
        assert!(html.contains("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"), "{html}");
        assert!(html.contains("&lt;b&gt;alice&lt;/b&gt;"), "{html}");
        assert!(html.contains("1 replaced: /configuration/&lt;u&gt;path&lt;/u&gt;"), "{html}");
        assert!(html.contains(r#"data-live="false""#), "{html}");
    }

    #[test]
    fn every_value_of_a_plan_s_diff_and_a_queued_build_s_wait_is_escaped() {
        let mut row = build_row(BuildStatus::Succeeded);
        row.dry_run = true;
        row.report = Some(serde_json::json!({ "nodes": [{
            "name": "<h1>node</h1>", "outcome": "planned", "error": "<blink>e</blink>",
            "change": {
                "action": "<x-action>", "before": "<p>before</p>", "after": "<p>after</p>",
                "closure": {
                    "added": [{ "name": "<tt>added</tt>", "version": "<tt>1</tt>" }],
                    "removed": [{ "name": "<kbd>removed</kbd>", "version": "2" }],
                    "changed": [{ "name": "<var>changed</var>", "before": "<q>1</q>", "after": "<q>2</q>" }],
                    "sizeDelta": 3_145_728
                }
            }
        }] }));
        let html = render(&row, "", &hostile_diff(), None);
        for raw in ["<h1>", "<blink>", "<x-action>", "<p>", "<tt>", "<kbd>", "<var>", "<q>"] {
            assert!(!html.contains(raw), "{raw} reached the page unescaped: {html}");
        }
        assert!(html.contains("&lt;tt&gt;added&lt;/tt&gt;") && html.contains("+3.0 MiB"), "{html}");

        let mut queued = build_row(BuildStatus::Queued);
        queued.error = None;
        let waiting = WaitingFor::Deployment { build_id: r#"demo."><b>ahead</b>"#.into() };
        let html = render(&queued, "", &hostile_diff(), Some(&waiting));
        assert!(!html.contains("<b>ahead"), "{html}");
        assert!(
            html.contains("an earlier build of this deployment to end") && html.contains("&lt;b&gt;ahead"),
            "{html}"
        );
    }

    #[test]
    fn a_plan_shows_each_node_s_systems_and_closure_and_an_apply_button_until_it_expires() {
        let mut row = build_row(BuildStatus::Succeeded);
        row.dry_run = true;
        row.trigger = slipway_jobs::provenance::Trigger::DryRun;
        row.provenance.plan = Some(slipway_jobs::provenance::PlanInputs {
            deployment_version: 1,
            active_build: None,
            secret_versions: Default::default(),
            secret_values_given: Vec::new(),
            configuration_sha256: String::new(),
            expires_at: 30_000,
            source_supports_plans: true,
        });
        row.report = Some(serde_json::json!({ "nodes": [{
            "name": "web", "outcome": "planned",
            "change": { "action": "update", "before": "/nix/store/a-web", "after": "/nix/store/b-web",
                        "closure": { "added": [{ "name": "openssl", "version": "3.0.13" }], "removed": [],
                                     "changed": [{ "name": "nginx", "before": "1.24", "after": "1.26" }],
                                     "size_delta": -2048 } }
        }] }));
        let html = render(&row, "", &hostile_diff(), None);
        assert!(html.contains(r#"<tr data-node="web" data-action="update">"#), "{html}");
        for text in ["/nix/store/a-web", "/nix/store/b-web", "+ openssl 3.0.13", "~ nginx 1.24 → 1.26", "−2.0 KiB"]
        {
            assert!(html.contains(text), "{text} is not shown: {html}");
        }
        assert!(html.contains(r#"data-action="apply""#), "{html}");
        assert!(!html.contains(r#"data-action="rollback""#), "a plan is no rollback target: {html}");
        let expired = build(&row, "", &BuildExtras { changes: &hostile_diff(), waiting_for: None, now_ms: 40_000 });
        let expired = expired.into_string();
        assert!(!expired.contains(r#"data-action="apply""#) && expired.contains("plan expired"), "{expired}");

        let deploy = build_row(BuildStatus::Succeeded);
        let html = render(&deploy, "", &hostile_diff(), None);
        assert!(html.contains(r#"data-action="rollback""#) && !html.contains(r#"data-action="apply""#), "{html}");
    }

    #[test]
    fn size_deltas_are_signed_and_read_in_binary_units() {
        assert_eq!(size_delta(512), "+512 B");
        assert_eq!(size_delta(-1_572_864), "−1.5 MiB");
        assert_eq!(size_delta(0), "0 B");
    }

    #[test]
    fn a_running_build_leaves_its_log_to_the_stream_and_a_finished_one_shows_it() {
        let running = render(&build_row(BuildStatus::Running), "already written", &hostile_diff(), None);
        assert!(running.contains(r#"data-live="true""#), "{running}");
        assert!(!running.contains("already written"), "{running}");
        let done = render(&build_row(BuildStatus::Succeeded), "all of it", &hostile_diff(), None);
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
