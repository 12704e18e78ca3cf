//! The dashboard's rollouts (RO-1): `GET /ui/fragments/rollouts`, the
//! latest rollouts with each wave's progress, and
//! `GET /ui/fragments/rollouts/{id}`, one rollout's waves and deployments.
//! Operator tokens only, as `GET /rollouts`.

use crate::auth::Auth;
use crate::error::ApiError;
use crate::routes::rollouts::RolloutIdPath;
use crate::state::AppState;
use axum::extract::State;
use maud::{html, Markup};
use slipway_jobs::rollout::{self, RolloutView, WaveView};

/// A wave's counts as one line (`2 succeeded, 1 queued`).
fn counts(wave: &WaveView) -> String {
    let parts: Vec<String> = wave.counts.iter().map(|(status, n)| format!("{n} {status}")).collect();
    if parts.is_empty() {
        "—".to_owned()
    } else {
        parts.join(", ")
    }
}

fn badge(kind: &str) -> Markup {
    html! { span class=(format!("badge s-{kind}")) { (kind) } }
}

/// The latest rollouts.
pub fn list(rollouts: &[RolloutView]) -> Markup {
    html! {
        section.rollouts {
            h2 { "Rollouts" }
            @if rollouts.is_empty() {
                p.empty { "No rollout yet (POST /rollouts, or slipway rollout start)." }
            } @else {
                table.rollouts {
                    thead { tr { th { "Rollout" } th { "State" } th { "Wave" } th { "Failures" } th { "Target" } } }
                    tbody {
                        @for r in rollouts {
                            tr data-rollout=(r.id) {
                                td { a href=(format!("#/rollouts/{}", r.id)) { code { (r.id) } } }
                                td { (badge(&r.state)) }
                                td { (r.wave) " of " (r.waves.len()) }
                                td { (r.failures) }
                                td { code { (r.module_source) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// One rollout: its state, target, waves and deployments.
pub fn one(r: &RolloutView) -> Markup {
    html! {
        section.rollout data-rollout=(r.id) data-state=(r.state) {
            h2 { "Rollout " code { (r.id) } " " (badge(&r.state)) }
            dl {
                dt { "Target" } dd { code { (r.module_source) } }
                @if r.requested_source != r.module_source {
                    dt { "Asked for" } dd { code { (r.requested_source) } }
                }
                dt { "Failures" } dd { (r.failures) " (budget " (r.max_failures.per_wave) " a wave, " (r.max_failures.total) " in all)" }
                @if let Some(reason) = &r.reason { dt { "Reason" } dd { (reason) } }
            }
            h3 { "Waves" }
            table.waves {
                thead { tr { th { "Wave" } th { "Size" } th { "Deployments" } } }
                tbody {
                    @for w in &r.waves {
                        tr data-wave=(w.wave) class=[(w.wave == r.wave).then_some("current")] {
                            td { (w.wave) } td { (w.size) } td { (counts(w)) }
                        }
                    }
                }
            }
            h3 { "Deployments" }
            table.deployments {
                thead { tr { th { "Deployment" } th { "Wave" } th { "Status" } th { "Build" } th { "Reason" } } }
                tbody {
                    @for d in r.deployments.iter().flatten() {
                        tr data-deployment=(d.deployment_id) {
                            td { a href=(format!("#/deployments/{}", d.deployment_id)) { (d.deployment_id) } }
                            td { (d.wave) }
                            td { (badge(&d.status)) }
                            td {
                                @if let Some(b) = &d.build_id {
                                    a href=(format!("#/deployments/{}/builds/{b}", d.deployment_id)) { code { (b) } }
                                } @else { "—" }
                            }
                            td { @if let Some(reason) = &d.reason { (reason) } }
                        }
                    }
                }
            }
        }
    }
}

/// `403` unless the token may see the fleet (an operator's).
fn operator(auth: &Auth) -> Result<(), ApiError> {
    auth.require_operator()
}

/// `GET /ui/fragments/rollouts`: the latest 100 rollouts.
pub async fn rollouts_view(State(app): State<AppState>, auth: Auth) -> Result<Markup, ApiError> {
    operator(&auth)?;
    Ok(list(&rollout::list(&app.db, 100).await?))
}

/// `GET /ui/fragments/rollouts/{id}`: one rollout; `404` for an unknown one.
pub async fn rollout_view(
    State(app): State<AppState>,
    auth: Auth,
    RolloutIdPath(id): RolloutIdPath,
) -> Result<Markup, ApiError> {
    operator(&auth)?;
    let view = rollout::view(&app.db, &id).await?;
    let view = view.ok_or_else(|| ApiError::not_found(format!("no rollout {}", slipway_jobs::id::quoted(&id))))?;
    Ok(one(&view))
}
