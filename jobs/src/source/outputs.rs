//! What Slipway reads from a module source's outputs (MS-2): the schema,
//! application schemas, renames and `meta.json`, and the typed fields
//! derived from them (TF-1). See `docs/MODULE-SOURCE.md`.

use crate::renames::Rename;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// `meta.json` (MS-2): where the domain and each application sit in a configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    /// Path of the deployment's domain.
    pub domain: Vec<String>,
    /// Applications by key.
    pub applications: BTreeMap<String, AppMeta>,
    /// The sections a form edits one at a time.
    #[serde(default)]
    pub sections: Vec<SectionMeta>,
    /// Catalog components (always on).
    #[serde(default)]
    pub catalog: Vec<CatalogMeta>,
    /// How the instances' readiness is probed (§10).
    #[serde(default)]
    pub readiness: ReadinessMeta,
    /// What the source's effects implement beyond the base contract
    /// (docs/MODULE-SOURCE.md "Capabilities"): [`Meta::PLAN`] is the only
    /// one Slipway knows; other names are kept but mean nothing to it.
    /// Empty for a source that names none.
    #[serde(default)]
    pub capabilities: Vec<String>,
}

/// How a worker probes an instance (PRODUCT.md §10; `meta.json`'s
/// `readiness`): `GET <path>` under the instance's own name, ready only on a
/// `200` whose `<header>` names that name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadinessMeta {
    /// The path asked, from `/` (default `/api/version`).
    #[serde(default = "ReadinessMeta::default_path")]
    pub path: String,
    /// The header that must name the instance's host (default `X-Instance-Host`).
    #[serde(default = "ReadinessMeta::default_header")]
    pub header: String,
    /// Where to connect instead of the address the instance's name resolves
    /// to, for names the workers cannot resolve: `<host>:<port>` keeps the
    /// instance URL's scheme and TLS name (as `curl --resolve` does);
    /// `http://<host>:<port>` asks that plain-HTTP front door (a stand-in on
    /// the machine, such as the local provider's) with the instance's name
    /// in `Host`. `None`: the instance's own address.
    #[serde(default)]
    pub connect: Option<String>,
}

impl ReadinessMeta {
    fn default_path() -> String {
        "/api/version".into()
    }

    fn default_header() -> String {
        "X-Instance-Host".into()
    }
}

impl Default for ReadinessMeta {
    fn default() -> Self {
        Self { path: Self::default_path(), header: Self::default_header(), connect: None }
    }
}

/// One application's place in a configuration; inner paths are relative to `path`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppMeta {
    /// Where the application's value sits.
    pub path: Vec<String>,
    /// Its enable flag.
    pub enable: Vec<String>,
    /// Its subdomain option.
    pub subdomain: Vec<String>,
    /// The subdomain when the option is unset.
    pub default_subdomain: String,
    /// The section that edits it.
    pub section: String,
    /// Human name.
    #[serde(default)]
    pub title: String,
    /// Whether it serves a web UI (then it is an instance, TF-1).
    #[serde(default)]
    pub web_ui: bool,
    /// Its operator-secret fields (§8).
    #[serde(default)]
    pub secrets: Vec<String>,
}

/// A section of the form.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SectionMeta {
    /// The section id (at present an application key).
    pub id: String,
    /// Where its value sits.
    pub path: Vec<String>,
    /// Human name.
    #[serde(default)]
    pub title: String,
}

/// An always-on catalog component.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogMeta {
    /// Component name.
    pub name: String,
    /// Human name.
    #[serde(default)]
    pub title: String,
    /// Its subdomain under the deployment's domain.
    pub subdomain: String,
    /// Whether it serves a web UI (then it is an instance).
    #[serde(default)]
    pub web_ui: bool,
}

/// A served instance (TF-1): an enabled application, or a catalog component with a web UI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Instance {
    /// Application key or catalog component name.
    pub name: String,
    /// Its DNS name.
    pub domain: String,
    /// `https://<domain>/`.
    pub url: String,
    /// The section that edits it; `None` for catalog components.
    #[schema(required = true)]
    pub section: Option<String>,
}

/// Reads the value at `path`, if present.
pub fn get_path<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, seg| v.get(seg.as_str()))
}

impl Meta {
    /// The capability of a source whose dry runs say each node's closure
    /// diff and keep its planned systems alive (`PLAN_ROOTS_DIR`), whose
    /// deploys keep generations (`KEEP_GENERATIONS`) and activate only the
    /// systems expected of them (`EXPECTED_SYSTEMS_FILE`).
    pub const PLAN: &'static str = "plan";

    /// Whether the source implements plans, apply and rollback
    /// ([`Meta::PLAN`] among its capabilities).
    pub fn supports_plans(&self) -> bool {
        self.capabilities.iter().any(|c| c == Self::PLAN)
    }

    /// The deployment's domain, if the configuration sets one.
    pub fn domain_of(&self, configuration: &Value) -> Option<String> {
        get_path(configuration, &self.domain).and_then(Value::as_str).map(str::to_owned)
    }

    /// TF-1: the instances a configuration serves, in a stable order
    /// (applications by key, then catalog components). Empty without a domain.
    pub fn instances_of(&self, configuration: &Value) -> Vec<Instance> {
        let Some(domain) = self.domain_of(configuration) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (name, app) in &self.applications {
            let Some(value) = get_path(configuration, &app.path) else { continue };
            let enabled = get_path(value, &app.enable).and_then(Value::as_bool).unwrap_or(false);
            if !enabled || !app.web_ui {
                continue;
            }
            let sub = get_path(value, &app.subdomain)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .unwrap_or(&app.default_subdomain);
            let host = format!("{sub}.{domain}");
            out.push(Instance {
                name: name.clone(),
                url: format!("https://{host}/"),
                domain: host,
                section: Some(app.section.clone()),
            });
        }
        for c in self.catalog.iter().filter(|c| c.web_ui) {
            let host = format!("{}.{domain}", c.subdomain);
            out.push(Instance { name: c.name.clone(), url: format!("https://{host}/"), domain: host, section: None });
        }
        out
    }
}

/// The four outputs of a source that validation and typed fields need (MS-2).
#[derive(Debug, Clone)]
pub struct SourceOutputs {
    /// `schema.json`.
    pub schema: Value,
    /// `applications.json`: application key → standalone schema.
    pub applications: BTreeMap<String, Value>,
    /// `renames.json`.
    pub renames: Vec<Rename>,
    /// `meta.json`.
    pub meta: Meta,
}

/// An output file that is missing or not of its documented shape.
#[derive(Debug, thiserror::Error)]
#[error("module source output {file}: {reason}")]
pub struct OutputError {
    /// The file name (`schema.json`, …).
    pub file: String,
    /// What is wrong with it.
    pub reason: String,
}

impl SourceOutputs {
    /// Parses the four documents from their JSON texts.
    pub fn from_texts(schema: &str, applications: &str, renames: &str, meta: &str) -> Result<Self, OutputError> {
        fn parse<T: serde::de::DeserializeOwned>(file: &str, text: &str) -> Result<T, OutputError> {
            serde_json::from_str(text).map_err(|e| OutputError { file: file.into(), reason: e.to_string() })
        }
        Ok(Self {
            schema: parse("schema.json", schema)?,
            applications: parse("applications.json", applications)?,
            renames: parse("renames.json", renames)?,
            meta: parse("meta.json", meta)?,
        })
    }

    /// Reads `schema.json`, `applications.json`, `renames.json` and `meta.json` from `dir`.
    pub fn read_dir(dir: &Path) -> Result<Self, OutputError> {
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f)).map_err(|e| OutputError { file: f.into(), reason: e.to_string() })
        };
        Self::from_texts(
            &read("schema.json")?,
            &read("applications.json")?,
            &read("renames.json")?,
            &read("meta.json")?,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Meta;

    fn meta(extra: &str) -> Meta {
        serde_json::from_str(&format!(r#"{{"domain": ["domain"], "applications": {{}}{extra}}}"#)).unwrap()
    }

    #[test]
    fn a_source_without_capabilities_supports_no_plans() {
        let meta = meta("");
        assert!(meta.capabilities.is_empty());
        assert!(!meta.supports_plans());
    }

    #[test]
    fn the_plan_capability_is_found_among_names_slipway_does_not_know() {
        assert!(meta(r#", "capabilities": ["teleport", "plan", "x-later"]"#).supports_plans());
        assert!(!meta(r#", "capabilities": ["plans", "PLAN"]"#).supports_plans());
    }

    #[test]
    fn the_reference_sources_meta_says_it_supports_plans() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../api/default-source/meta.json"));
        let text = text.unwrap();
        let meta: Meta = serde_json::from_str(&text).unwrap();
        assert!(meta.supports_plans(), "{:?}", meta.capabilities);
    }
}
