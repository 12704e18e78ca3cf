//! The dashboard's webhooks page (`/ui/fragments/webhooks`, WH-1): for an
//! operator's token only, every endpoint with its state (why it was
//! disabled, since when it fails) and its latest deliveries. Never a
//! secret: the store's reads leave it out.

use crate::auth::Auth;
use crate::error::ApiError;
use crate::routes::rfc3339;
use crate::state::AppState;
use axum::extract::State;
use maud::{html, Markup};
use slipway_jobs::store::webhooks::{self as rows, Delivery, Endpoint};

/// The most endpoints the page shows.
pub const ENDPOINTS_SHOWN: i64 = 100;
/// The latest deliveries shown per endpoint.
pub const DELIVERIES_SHOWN: i64 = 10;

/// `GET /ui/fragments/webhooks`: `403` for a token without the operator claim.
pub async fn fragment(State(app): State<AppState>, auth: Auth) -> Result<Markup, ApiError> {
    if !super::may_see_fleet(&auth.0) {
        return Err(ApiError::forbidden(
            "this token may not see the webhooks (it needs the operator claim: slipway-api token --operator)",
        ));
    }
    let mut conn = app.db.acquire().await?;
    let endpoints = rows::list(&mut conn, None, ENDPOINTS_SHOWN).await?;
    let mut shown = Vec::with_capacity(endpoints.len());
    for endpoint in endpoints {
        let deliveries = rows::deliveries(&mut conn, &endpoint.id, None, DELIVERIES_SHOWN).await?;
        shown.push((endpoint, deliveries));
    }
    Ok(view(&shown))
}

fn time(ms: Option<i64>) -> Markup {
    match ms {
        Some(ms) => {
            let text = rfc3339(ms);
            html! { time datetime=(text) { (text) } }
        }
        None => html! { "—" },
    }
}

fn badge(kind: &str) -> Markup {
    html! { span class=(format!("badge s-{kind}")) { (kind) } }
}

/// The page: one section per endpoint.
pub fn view(endpoints: &[(Endpoint, Vec<Delivery>)]) -> Markup {
    html! {
        section.webhooks {
            h2 { "Webhooks" }
            p.hint {
                "Signed endpoints (Standard Webhooks) and their latest deliveries. Register and change them with "
                code { "slipway webhook" } " or " code { "POST /webhooks" } "."
            }
            @if endpoints.is_empty() {
                p.empty { "No webhook endpoint is registered." }
            }
            @for (e, deliveries) in endpoints {
                article.webhook data-webhook=(e.id) {
                    h3 { code { (e.id) } " " (badge(if e.enabled { "enabled" } else { "disabled" })) }
                    dl {
                        dt { "URL" } dd { code { (e.url) } }
                        dt { "Events" } dd { (e.events.join(", ")) }
                        @if let Some(description) = &e.description { dt { "Description" } dd { (description) } }
                        @if !e.enabled {
                            dt { "Disabled" } dd.disabled-reason {
                                (time(e.disabled_at)) " — "
                                (e.disabled_reason.as_deref().unwrap_or("no reason recorded"))
                            }
                        }
                        @if e.failing_since.is_some() { dt { "Failing since" } dd { (time(e.failing_since)) } }
                    }
                    @if deliveries.is_empty() {
                        p.empty { "No delivery yet." }
                    } @else {
                        table.deliveries {
                            thead { tr { th { "Delivery" } th { "Event" } th { "Deployment" } th { "Status" } th { "Attempts" } th { "Last error" } th { "Next try" } th { "Created" } } }
                            tbody {
                                @for d in deliveries {
                                    tr data-delivery=(d.id) data-status=(d.status) {
                                        td { code { (d.id) } }
                                        td { (d.event_type) }
                                        td { (d.subject) " #" (d.n) }
                                        td { (badge(&d.status)) }
                                        td { (d.attempts) }
                                        td {
                                            @match (&d.last_error, d.last_status) {
                                                (Some(error), Some(status)) => { (error) " (" (status) ")" }
                                                (Some(error), None) => { (error) }
                                                (None, Some(status)) => { (status) }
                                                (None, None) => { "—" }
                                            }
                                        }
                                        td { (time(d.next_try_at.filter(|_| d.status == "pending"))) }
                                        td { (time(Some(d.created_at))) }
                                    }
                                }
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

    #[test]
    fn an_endpoint_s_url_reason_and_deliveries_are_escaped() {
        let endpoint = Endpoint {
            id: "wh_x".into(),
            url: "https://panel.example/<script>".into(),
            events: vec!["*".into()],
            description: Some("<b>panel</b>".into()),
            enabled: false,
            disabled_reason: Some("<img src=x onerror=alert(1)>".into()),
            disabled_at: Some(0),
            failing_since: Some(0),
            start_seq: 0,
            pump: 0,
            pump_at: 0,
            created_at: 0,
            updated_at: 0,
        };
        let html = view(&[(endpoint, Vec::new())]).into_string();
        assert!(!html.contains("<script>") && !html.contains("<img") && !html.contains("<b>"), "{html}");
        assert!(html.contains("disabled-reason"), "{html}");
    }
}
