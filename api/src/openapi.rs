//! The api's OpenAPI 3.1 document, generated from the code with utoipa
//! (`GET /openapi.json`, public), and a documentation page over it
//! (`GET /docs`, Swagger UI, whose JavaScript and CSS are compiled into the
//! binary: nothing is fetched from elsewhere at build or at run time).
//!
//! Each handler carries its own `#[utoipa::path]` (parameters, body, the
//! success answers and the errors only it gives); [`CommonAnswers`] adds
//! what every route can answer: `413 payload_too_large` (a body announced
//! over the limit), `431 request_header_fields_too_large`, `500 internal`,
//! on routes that read a body `415 unsupported_media_type` and `408
//! request_timeout`, on routes that change state (`PUT`, `POST`,
//! `DELETE`) `400 invalid_request` (an unknown query parameter), and on
//! authenticated routes `401 unauthorized` and `503
//! service_unavailable` (the database is away). Every error answer is the
//! one shape of [`crate::error::ErrorBody`] (`Error` in the document).
//!
//! `api/tests/it/openapi.rs` fails when a route of the router is missing from the
//! document, checks that every `$ref` resolves, and validates real answers
//! against their documented schemas.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::sync::LazyLock;
use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use crate::routes;

/// The document's root: every route's operation and the shared schemas.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Slipway",
        description = "Slipway's HTTP API: submit NixOS-module deployments, follow their builds, delete them. \
                       Every error answers `{\"error\": code, \"message\": text, \"details\": …}`. \
                       Authenticated routes take `Authorization: Bearer <JWT>`; the two event streams also \
                       take a single-use `?ticket=` minted with the token by `POST …/ticket` (a browser's \
                       EventSource cannot send headers), or, deprecated, the token itself as `?access_token=`."
    ),
    paths(
        routes::health::healthz,
        routes::health::readyz,
        routes::health::version,
        routes::sources::built_in_schema,
        routes::sources::built_in_renames,
        routes::drafts::application_paths,
        routes::drafts::sections,
        routes::drafts::labels,
        routes::deployments::list,
        routes::deployments::empty_id,
        routes::deployments::show,
        routes::deployments::submit,
        routes::deployments::delete,
        routes::deployments::builds,
        routes::deployments::preview,
        routes::changes::apply,
        routes::changes::rollback,
        routes::events::deployment,
        routes::events::ticket_for_events,
        routes::sources::schema,
        routes::sources::renames,
        routes::builds::show,
        routes::events::build_log,
        routes::events::ticket_for_log,
        routes::builds::cancel,
        routes::builds::diff,
        routes::sbom::list,
        routes::sbom::document,
        routes::fleet::queues,
        routes::fleet::workers,
        routes::webhooks::create,
        routes::webhooks::list,
        routes::webhooks::show,
        routes::webhooks::update,
        routes::webhooks::delete,
        routes::webhooks::deliveries,
        routes::webhooks::redeliver,
        routes::rollouts::start,
        routes::rollouts::list,
        routes::rollouts::show,
        routes::rollouts::pause,
        routes::rollouts::resume,
        routes::rollouts::cancel,
        routes::rollouts::events,
    ),
    components(schemas(crate::error::ErrorBody, routes::events::TicketBody)),
    modifiers(&CommonAnswers),
    tags(
        (name = "public", description = "No token: health, version, the built-in module source, drafts, labels"),
        (name = "deployments", description = "Submit, read, list, preview and delete deployments"),
        (name = "builds", description = "A build's status, log and report; cancelling it"),
        (name = "fleet", description = "Operator tokens only: the queues and the workers"),
        (name = "webhooks", description = "Operator tokens only: signed webhook endpoints and their delivery log"),
        (name = "rollouts", description = "Operator tokens only: one module source revision rolled out to many deployments in waves"),
        (name = "streams", description = "Server-sent events: the deployment channel and a build's live log"),
        (name = "sources", description = "Another module source's schema and renames"),
        (name = "sbom", description = "The CycloneDX SBOMs of a deployment's nodes"),
    )
)]
pub struct ApiDoc;

/// The name of the error schema in the document.
const ERROR_SCHEMA: &str = "Error";

/// Adds the security schemes, the answers every route can give, the `PUT`
/// and `DELETE` of `/deployments/` (the same refusal as its `GET`), and an
/// `operationId` unique to each (method, path).
#[derive(Debug)]
pub struct CommonAnswers;

impl Modify for CommonAnswers {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format("JWT").build()),
        );
        components.add_security_scheme(
            "access_token",
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::with_description(
                "access_token",
                "Deprecated: the bearer token as a query parameter, on the two event streams only (it ends up in \
                 proxies' logs and browser history; use `ticket`)",
            ))),
        );
        components.add_security_scheme(
            "ticket",
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::with_description(
                "ticket",
                "A single-use stream ticket (60 s, one stream) from `POST /deployments/{id}/events/ticket` or \
                 `POST /builds/{id}/log/ticket`, on the two event streams only",
            ))),
        );
        if let Some(empty) = doc.paths.paths.get_mut("/deployments/") {
            empty.put = empty.get.clone();
            empty.delete = empty.get.clone();
        }
        for (path, item) in doc.paths.paths.iter_mut() {
            for (method, operation) in operations(item) {
                operation.operation_id = Some(operation_id(method, path));
                if path.contains("{id}")
                    && !path.starts_with("/builds/")
                    && !path.starts_with("/webhooks/")
                    && !path.starts_with("/rollouts/")
                {
                    deployment_id_schema(operation);
                }
                // A delete's body is optional (an empty one deletes without a callback).
                if method == "delete" {
                    if let Some(body) = operation.request_body.as_mut() {
                        body.required = Some(utoipa::openapi::Required::False);
                    }
                }
                let secured = operation.security.as_ref().is_some_and(|s| !s.is_empty());
                let mut common = vec![
                    (413, "`payload_too_large`: the body is larger than 1 MiB"),
                    (431, "`request_header_fields_too_large`: the header section is over 64 KiB or 100 fields"),
                    (500, "`internal`: the service failed; it has been logged"),
                ];
                // Found by schemathesis: a body not sent as JSON.
                if operation.request_body.is_some() {
                    common.push((415, "`unsupported_media_type`: the body is not sent as JSON"));
                    common.push((408, "`request_timeout`: the body paused longer than the read timeout"));
                }
                // Routes that change state refuse a query parameter they do not take.
                if matches!(method, "put" | "post" | "patch" | "delete") {
                    common.push((
                        400,
                        "`invalid_request`: a query parameter this route does not take (named in `details.parameter`)",
                    ));
                }
                if secured {
                    common.push((401, "`unauthorized`: no token, or one that is not valid"));
                    common.push((503, "`service_unavailable`: the database is busy or unreachable; try again"));
                }
                for (status, description) in common {
                    operation.responses.responses.entry(status.to_string()).or_insert_with(|| error(description));
                }
            }
        }
    }
}

/// What a deployment id may be (a DNS label of 1 to 40 characters), as
/// the `{id}` parameter's schema; another answers `400 invalid_deployment_id`.
pub const DEPLOYMENT_ID_PATTERN: &str = "^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$";

/// Gives an operation's `{id}` (a deployment id) the schema of [`DEPLOYMENT_ID_PATTERN`].
fn deployment_id_schema(operation: &mut Operation) {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    for parameter in operation.parameters.iter_mut().flatten() {
        if parameter.name == "id" && parameter.parameter_in == utoipa::openapi::path::ParameterIn::Path {
            let schema = ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(slipway_jobs::id::MAX_DEPLOYMENT_ID))
                .pattern(Some(DEPLOYMENT_ID_PATTERN));
            parameter.schema = Some(RefOr::T(schema.into()));
        }
    }
}

/// An error answer in the one error shape.
fn error(description: &str) -> RefOr<utoipa::openapi::Response> {
    let content = ContentBuilder::new().schema(Some(Ref::from_schema_name(ERROR_SCHEMA))).build();
    RefOr::T(ResponseBuilder::new().description(description).content("application/json", content).build())
}

/// The operations of a path, with their methods.
fn operations(item: &mut PathItem) -> Vec<(&'static str, &mut Operation)> {
    [
        ("get", &mut item.get),
        ("put", &mut item.put),
        ("post", &mut item.post),
        ("patch", &mut item.patch),
        ("delete", &mut item.delete),
    ]
    .into_iter()
    .filter_map(|(method, op)| op.as_mut().map(|op| (method, op)))
    .collect()
}

/// `get_deployments_id_builds` for `GET /deployments/{id}/builds`;
/// `get_deployments_empty` for `GET /deployments/`.
fn operation_id(method: &str, path: &str) -> String {
    let mut words: Vec<String> = path
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    // `/deployments/` (the empty id) is not `/deployments`.
    if path.len() > 1 && path.ends_with('/') {
        words.push("empty".to_owned());
    }
    if words.is_empty() {
        method.to_owned()
    } else {
        format!("{method}_{}", words.join("_"))
    }
}

/// The document as JSON, built once. Its texts come from the handlers' and
/// types' doc comments, less the references to the internal specification
/// they carry (`(MS-6)`, `(seed 004 …)`), which a reader cannot look up.
pub fn document() -> &'static Value {
    static DOC: LazyLock<Value> = LazyLock::new(|| {
        let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the document serialises");
        scrub(&mut doc);
        doc
    });
    &DOC
}

/// Takes the specification references out of every `summary` and `description`.
fn scrub(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                match v {
                    Value::String(text) if key == "summary" || key == "description" => *text = without_rule_ids(text),
                    _ => scrub(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(scrub),
        _ => {}
    }
}

/// Whether `part` is a reference to the internal specification: `MS-6`,
/// `§3`, `seed 004 …`.
fn is_rule_id(part: &str) -> bool {
    let part = part.trim();
    let id = |p: &str| {
        p.split_once('-').is_some_and(|(a, n)| {
            (1..=3).contains(&a.len())
                && a.bytes().all(|b| b.is_ascii_uppercase())
                && !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
        })
    };
    id(part) || part.starts_with('§') || part.starts_with("seed ")
}

/// `text` without its specification references: a parenthesis of them
/// goes, one holding other words keeps those; a leading `EV-1: ` goes;
/// rustdoc's link brackets go.
fn without_rule_ids(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('(') {
        let Some(close) = rest[open..].find(')').map(|n| open + n) else { break };
        out.push_str(&rest[..open]);
        let inner = &rest[open + 1..close];
        let kept: Vec<&str> = inner.split(", ").filter(|p| !is_rule_id(p)).collect();
        if kept.is_empty() {
            let trimmed = out.trim_end_matches([' ', '\n']).len();
            out.truncate(trimmed);
        } else {
            out.push('(');
            out.push_str(&kept.join(", "));
            out.push(')');
        }
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    // Rustdoc's links (`[`READY_TIMEOUT`]`) read as plain code.
    let out = out.replace("[`", "`").replace("`]", "`");
    out.split(' ')
        .filter(|word| !(word.ends_with(':') && is_rule_id(word.trim_end_matches(':'))))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `GET /openapi.json` (public): the OpenAPI 3.1 document.
pub async fn openapi_json() -> Response {
    static TEXT: LazyLock<String> = LazyLock::new(|| document().to_string());
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], TEXT.as_str()).into_response()
}

/// The documentation page: Swagger UI over `/openapi.json`. Its links are
/// relative, so the page also works behind a proxy that mounts the api
/// under a path.
const DOCS_PAGE: &str = r##"<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Slipway API</title>
  <link rel="stylesheet" href="docs/swagger-ui.css">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="docs/swagger-ui-bundle.js"></script>
  <script>
    window.ui = SwaggerUIBundle({ url: "openapi.json", dom_id: "#swagger-ui", validatorUrl: null });
  </script>
</body>
</html>
"##;

/// The content security policy of the documentation page: its scripts
/// are the bundle served beside it and the page's own inline start-up
/// script (allowed by its SHA-256), and it may fetch, show and load from this
/// origin only (Swagger UI's inline styles and `data:` images and fonts
/// aside). Swagger UI's online validator is switched off in the page
/// (`validatorUrl: null`), and this policy would block its badge anyway: a
/// browser opening the page never sends the document's address elsewhere.
pub fn docs_content_security_policy() -> &'static str {
    static POLICY: LazyLock<String> = LazyLock::new(|| {
        use base64::Engine as _;
        use sha2::Digest as _;
        let start = DOCS_PAGE.rfind("<script>").expect("the page's inline script") + "<script>".len();
        let end = start + DOCS_PAGE[start..].find("</script>").expect("its end");
        let hash = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(&DOCS_PAGE[start..end]));
        format!(
            "default-src 'none'; script-src 'self' 'sha256-{hash}'; style-src 'self' 'unsafe-inline'; \
             img-src 'self' data:; font-src 'self' data:; connect-src 'self'; base-uri 'none'; \
             form-action 'none'; frame-ancestors 'none'"
        )
    });
    &POLICY
}

/// `GET /docs` (public): the documentation page, with
/// [`docs_content_security_policy`].
pub async fn docs() -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8")),
            (header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(docs_content_security_policy())),
            (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
        ],
        DOCS_PAGE,
    )
        .into_response()
}

/// `GET /docs/swagger-ui.css` and `GET /docs/swagger-ui-bundle.js`
/// (public): Swagger UI's own files, as the swagger-ui-dist crate ships
/// them inside the binary.
pub fn docs_assets() -> axum::Router {
    swagger_ui_dist::generate_routes(swagger_ui_dist::ApiDefinition {
        uri_prefix: "/docs",
        api_definition: swagger_ui_dist::OpenApiSource::Uri("/openapi.json"),
        title: Some("Slipway API"),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn operation_ids_name_the_method_and_the_path() {
        assert_eq!(super::operation_id("get", "/deployments/{id}/builds"), "get_deployments_id_builds");
        assert_eq!(super::operation_id("post", "/application-paths"), "post_application_paths");
        assert_eq!(super::operation_id("get", "/deployments/"), "get_deployments_empty");
    }

    #[test]
    fn specification_references_are_taken_out_of_the_texts() {
        use super::without_rule_ids as w;
        assert_eq!(w("`GET /schema` (MS-2, MS-5): the schema"), "`GET /schema`: the schema");
        assert_eq!(w("a label (ID-2, seed 004 `NewLabel`)."), "a label.");
        assert_eq!(w("drafts (public, TF-2)"), "drafts (public)");
        assert_eq!(w("EV-1: the names eval (`nodes.json`, EV-1)"), "the names eval (`nodes.json`)");
        assert_eq!(w("limit (1-100, default 100)"), "limit (1-100, default 100)");
        assert_eq!(w("within [`READY_TIMEOUT`] (2 s)"), "within `READY_TIMEOUT` (2 s)");
    }
}
