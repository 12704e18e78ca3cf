//! Every (method, route) of the router (`api/src/router.rs`), with what each
//! reads and who may call it: the one table `auth_matrix.rs` and
//! `error_shape.rs` walk. [`the_table_names_every_route_of`] checks it
//! against the router, so a route missing here fails those tests.
//!
//! A NEW ROUTE MUST BE ADDED TO [`routes`], with its access and inputs.

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use tower::ServiceExt;

/// Who may call a route (SEC-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No token needed; a token, good or bad, changes nothing.
    Public,
    /// Any valid token; the route is not about one deployment.
    Token,
    /// A valid token whose `deployments` claim names the `{id}` (or `*`);
    /// another scope is `403 forbidden`.
    Deployment,
    /// As [`Access::Deployment`] for the deployment of the `{build}`, but
    /// another scope is `404 not_found`: build ids do not reveal which
    /// deployments exist.
    Build,
    /// A valid token with the operator claim (the fleet routes); any other
    /// valid token, whatever deployments it names, is `403 forbidden`.
    Operator,
}

/// What a route reads from the request body.
#[derive(Debug, Clone, Copy)]
pub enum Input {
    /// Nothing.
    None,
    /// A JSON object; a valid one for the calls that should succeed.
    Json(fn() -> Value),
    /// An optional JSON object (`DELETE /deployments/{id}`, DL-2).
    OptionalJson,
}

impl Input {
    /// Whether the route reads its body.
    pub fn reads_body(self) -> bool {
        !matches!(self, Input::None)
    }
}

/// One (method, route) of the router.
#[derive(Debug, Clone)]
pub struct Route {
    /// The method.
    pub method: Method,
    /// Path and query; `{id}` stands for a deployment id, `{build}` for a
    /// build id, `{webhook}` and `{delivery}` for a webhook's and a
    /// delivery's id, `{rollout}` for a rollout's id (none of which exists in the seeded data).
    pub uri: &'static str,
    /// Who may call it.
    pub access: Access,
    /// Its body.
    pub input: Input,
    /// A query string it refuses with `400 invalid_request`, if it reads one.
    pub bad_query: Option<&'static str>,
    /// A stream (DL-3): success is `text/event-stream`, and the token may
    /// also come as `?access_token=` (deprecated), or a ticket as `?ticket=`.
    pub stream: bool,
    /// The media type of a success: `application/json`, but for the
    /// dashboard's HTML, script and style sheet (`/ui`) and the API's
    /// documentation page and its files (`/docs`); an error answer is JSON
    /// on every route.
    pub media: &'static str,
    /// The statuses a call in scope may answer on the seeded data of
    /// `auth_matrix.rs` (success or a domain answer).
    pub in_scope: &'static [u16],
}

impl Route {
    /// The path and query for deployment `id` and build `build`.
    pub fn uri(&self, id: &str, build: &str) -> String {
        self.uri
            .replace("{id}", id)
            .replace("{build}", build)
            .replace("{webhook}", UNKNOWN_WEBHOOK)
            .replace("{delivery}", UNKNOWN_DELIVERY)
            .replace("{rollout}", "rollout-none")
    }

    /// The path alone (no query), for deployment `id` and build `build`.
    pub fn path(&self, id: &str, build: &str) -> String {
        let uri = self.uri(id, build);
        uri.split_once('?').map_or(uri.clone(), |(path, _)| path.to_owned())
    }

    /// Whether the path names a deployment or a build.
    pub fn has_id(&self) -> bool {
        self.uri.contains("{id}") || self.uri.contains("{build}") || self.uri.contains("{rollout}")
    }

    /// `GET /schema` and the like, for messages.
    pub fn name(&self) -> String {
        format!("{} {}", self.method, self.uri)
    }
}

/// A webhook id no endpoint has.
pub const UNKNOWN_WEBHOOK: &str = "wh_01ARZ3NDEKTSV4RRFFQ69G5FAV";
/// A delivery id no delivery has.
pub const UNKNOWN_DELIVERY: &str = "msg_01ARZ3NDEKTSV4RRFFQ69G5FAV";

fn submit_body() -> Value {
    json!({ "configuration": slipway_jobs::test_support::demo() })
}

/// Every (method, route) of the router. A new route must be added here.
pub fn routes() -> Vec<Route> {
    use Access::*;
    let route = |method: Method, uri: &'static str, access: Access, in_scope: &'static [u16]| Route {
        method,
        uri,
        access,
        input: Input::None,
        bad_query: None,
        stream: false,
        media: "application/json",
        in_scope,
    };
    let with_body = |r: Route, body: fn() -> Value| Route { input: Input::Json(body), ..r };
    let with_query = |r: Route, bad: &'static str| Route { bad_query: Some(bad), ..r };
    let stream = |r: Route| Route { stream: true, ..r };
    let media = |r: Route, media: &'static str| Route { media, ..r };
    vec![
        route(Method::GET, "/healthz", Public, &[200]),
        route(Method::GET, "/readyz", Public, &[200]),
        route(Method::GET, "/version", Public, &[200]),
        with_query(route(Method::GET, "/schema", Public, &[200]), "application=a&application=b"),
        with_query(route(Method::GET, "/renames", Public, &[200]), "section=a&section=b"),
        with_body(route(Method::POST, "/application-paths", Public, &[200]), || json!({ "configuration": {} })),
        with_body(route(Method::POST, "/sections", Public, &[200]), || json!({ "configuration": {} })),
        with_body(route(Method::POST, "/labels", Public, &[200]), || json!({ "slug": "demo" })),
        with_query(route(Method::GET, "/deployments?ids={id}", Deployment, &[200]), "ids=a&ids=b"),
        // The empty id: refused as such once the token is checked.
        route(Method::GET, "/deployments/", Token, &[400]),
        route(Method::PUT, "/deployments/", Token, &[400]),
        route(Method::DELETE, "/deployments/", Token, &[400]),
        route(Method::GET, "/deployments/{id}", Deployment, &[200]),
        with_body(route(Method::PUT, "/deployments/{id}", Deployment, &[202]), submit_body),
        Route { input: Input::OptionalJson, ..route(Method::DELETE, "/deployments/{id}", Deployment, &[202]) },
        with_query(route(Method::GET, "/deployments/{id}/builds", Deployment, &[200]), "limit=many"),
        stream(route(Method::GET, "/deployments/{id}/events", Deployment, &[200])),
        // A single-use ticket for that stream (a browser's EventSource cannot send the header).
        route(Method::POST, "/deployments/{id}/events/ticket", Deployment, &[200]),
        // 503 while no worker serves the nix queue for the names eval (EV-2).
        with_body(route(Method::POST, "/deployments/{id}/preview", Deployment, &[200, 503]), submit_body),
        // Not a plan of the deployment: a domain 404.
        with_body(route(Method::POST, "/deployments/{id}/apply", Deployment, &[404]), || json!({ "plan": "nope" })),
        // No successful deploy to return to: a domain 409.
        Route { input: Input::OptionalJson, ..route(Method::POST, "/deployments/{id}/rollback", Deployment, &[409]) },
        with_body(route(Method::POST, "/schema/get_for", Token, &[200]), || json!({})),
        with_body(route(Method::POST, "/renames/get_for", Token, &[200]), || json!({})),
        route(Method::GET, "/builds/{build}", Build, &[200]),
        stream(route(Method::GET, "/builds/{build}/log", Build, &[200])),
        route(Method::POST, "/builds/{build}/log/ticket", Build, &[200]),
        // Cancelled at once while queued, or asked of its worker, or finished.
        route(Method::POST, "/builds/{build}/cancel", Build, &[200, 202, 409]),
        route(Method::GET, "/builds/{build}/diff", Build, &[200]),
        route(Method::GET, "/sbom-list/{id}", Deployment, &[200]),
        // No deploy has produced an SBOM: a domain 404.
        with_query(route(Method::GET, "/sbom/{id}?node=web", Deployment, &[404]), "node=a&node=b"),
        // The dashboard (api/src/ui): a public shell, and fragments authorised like the JSON routes.
        media(route(Method::GET, "/ui", Public, &[200]), "text/html"),
        media(route(Method::GET, "/ui/dashboard.js", Public, &[200]), "text/javascript"),
        media(route(Method::GET, "/ui/dashboard.css", Public, &[200]), "text/css"),
        media(route(Method::GET, "/ui/fragments/deployments", Token, &[200]), "text/html"),
        media(route(Method::GET, "/ui/fragments/deployments/{id}", Deployment, &[200]), "text/html"),
        media(route(Method::GET, "/ui/fragments/builds/{build}", Build, &[200]), "text/html"),
        // Only an operator's token sees the fleet.
        media(route(Method::GET, "/ui/fragments/fleet", Operator, &[200]), "text/html"),
        media(route(Method::GET, "/ui/fragments/webhooks", Operator, &[200]), "text/html"),
        route(Method::GET, "/queues", Operator, &[200]),
        route(Method::GET, "/workers", Operator, &[200]),
        // Webhooks (WH-1), operators only. The seeded service allows no
        // origin, so a registration is refused as a domain 400.
        with_body(
            route(Method::POST, "/webhooks", Operator, &[201, 400]),
            || json!({ "url": "https://panel.example/hook", "events": ["*"] }),
        ),
        route(Method::GET, "/webhooks", Operator, &[200]),
        route(Method::GET, "/webhooks/{webhook}", Operator, &[404]),
        with_body(route(Method::PATCH, "/webhooks/{webhook}", Operator, &[404]), || json!({ "enabled": true })),
        route(Method::DELETE, "/webhooks/{webhook}", Operator, &[404]),
        with_query(route(Method::GET, "/webhooks/{webhook}/deliveries", Operator, &[404]), "limit=many"),
        route(Method::POST, "/webhooks/{webhook}/deliveries/{delivery}/redeliver", Operator, &[404]),
        media(route(Method::GET, "/ui/fragments/rollouts", Operator, &[200]), "text/html"),
        media(route(Method::GET, "/ui/fragments/rollouts/{rollout}", Operator, &[404]), "text/html"),
        // Rollouts (operator tokens only): a rollout of an unknown deployment
        // is refused before its source is looked at; no rollout {id}: 404.
        with_body(
            route(Method::POST, "/rollouts", Operator, &[400]),
            || json!({ "module_source": "git+https://example.org/m?ref=main", "deployments": ["nope"], "waves": [1] }),
        ),
        route(Method::GET, "/rollouts", Operator, &[200]),
        route(Method::GET, "/rollouts/{rollout}", Operator, &[404]),
        route(Method::POST, "/rollouts/{rollout}/pause", Operator, &[404]),
        route(Method::POST, "/rollouts/{rollout}/resume", Operator, &[404]),
        route(Method::POST, "/rollouts/{rollout}/cancel", Operator, &[404]),
        route(Method::GET, "/rollouts/{rollout}/events", Operator, &[404]),
        // The OpenAPI document and its documentation page.
        route(Method::GET, "/openapi.json", Public, &[200]),
        media(route(Method::GET, "/docs", Public, &[200]), "text/html"),
        media(route(Method::GET, "/docs/swagger-ui.css", Public, &[200]), "text/css"),
        media(route(Method::GET, "/docs/swagger-ui-bundle.js", Public, &[200]), "text/javascript"),
        // Public unless SLIPWAY_METRICS_TOKEN is set (docs/METRICS.md).
        media(route(Method::GET, "/metrics", Public, &[200]), "text/plain; version=0.0.4"),
    ]
}

/// The route templates `fn app` of `api/src/router.rs` registers (`.route("…"`),
/// and those of the routers it merges (the dashboard's, `api/src/ui/mod.rs`),
/// in axum's syntax.
pub fn registered_paths() -> BTreeSet<String> {
    let read = |file: &str| {
        std::fs::read_to_string(format!("{}/src/{file}", env!("CARGO_MANIFEST_DIR"))).expect("an api source file")
    };
    let app = read("router.rs");
    // `fn app` to the unit tests, which build little routers of their own.
    let start = app.find("pub fn app(").expect("fn app in router.rs");
    let end = app[start..].find("#[cfg(test)]").map_or(app.len(), |n| start + n);
    let ui = read("ui/mod.rs");
    let start_ui = ui.find("pub fn router(").expect("fn router in ui/mod.rs");
    let mut paths = BTreeSet::new();
    for mut rest in [&app[start..end], &ui[start_ui..]] {
        while let Some(at) = rest.find(".route(") {
            rest = rest[at + ".route(".len()..].trim_start();
            if let Some(quoted) = rest.strip_prefix('"') {
                let end = quoted.find('"').expect("a closing quote");
                paths.insert(quoted[..end].to_owned());
            }
        }
    }
    paths
}

/// The table's template of a path in axum's syntax (`/builds/{id}` for `/builds/{build}`).
fn axum_template(route: &Route) -> String {
    template(route.uri)
}

/// A table uri's path as the router (and the OpenAPI document) writes it:
/// `/builds/{id}` for `/builds/{build}`, `/webhooks/{id}/deliveries/{delivery_id}/redeliver`
/// for `/webhooks/{webhook}/deliveries/{delivery}/redeliver`.
pub fn template(uri: &str) -> String {
    uri.split('?')
        .next()
        .unwrap()
        .replace("{build}", "{id}")
        .replace("{webhook}", "{id}")
        .replace("{delivery}", "{delivery_id}")
        .replace("{rollout}", "{id}")
}

/// Checks the table against `router` (called with `bearer`, valid for
/// everything): every path `router.rs` registers is in the table, and each
/// path's methods are those the router's `405` names in its `Allow` header.
pub async fn the_table_names_every_route_of(router: &Router, bearer: &str) {
    let table = routes();
    let mut methods: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in &table {
        methods.entry(axum_template(r)).or_default().insert(r.method.to_string());
    }
    let registered = registered_paths();
    assert!(registered.len() >= 20, "router.rs was not read right: {registered:?}");
    let missing: Vec<&String> = registered.iter().filter(|p| !methods.contains_key(*p)).collect();
    assert!(missing.is_empty(), "routes of router.rs missing from tests/route_table: {missing:?}");
    for (template, want) in &methods {
        assert!(registered.contains(template), "{template} is in the table but router.rs does not register it");
        let path = template.replace("{id}", "z").replace("{delivery_id}", "z");
        // A method no route takes (PATCH is a webhook's update).
        let request = Request::builder()
            .method(Method::TRACE)
            .uri(&path)
            .header(header::AUTHORIZATION, format!("Bearer {bearer}"))
            .body(Body::empty())
            .unwrap();
        let answer = router.clone().oneshot(request).await.unwrap();
        assert_eq!(answer.status(), StatusCode::METHOD_NOT_ALLOWED, "TRACE {path}");
        let allow: BTreeSet<String> = answer
            .headers()
            .get(header::ALLOW)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .split(',')
            .map(|m| m.trim().to_owned())
            .filter(|m| !m.is_empty() && m != "HEAD")
            .collect();
        assert_eq!(&allow, want, "the methods of {template}: the router's Allow header, then the table's");
    }
}
