//! What a configuration that Slipway does not store (a draft in a form)
//! serves (TF-2; seed 000 "What a configuration serves"): where each
//! application's value sits, which applications changed between two
//! configurations, and the sections a form edits one at a time.
//!
//! A draft may be in an older shape than the module source's current one, so
//! each configuration is first migrated with the source's renames, as a
//! submit would migrate it (MG-2; [`crate::renames::migrate`]). Each side is
//! then read at its own paths (from [`Meta`]), so that a change of shape, such
//! as a move below another branch, does not mark every application as
//! changed. The paths come from the source's `meta.json`, never from parsing
//! a section identifier.

use crate::renames::{self, Rename};
use crate::source::outputs::{get_path, Meta};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// Where one application's value sits in a configuration, after migration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ApplicationPath {
    /// The path of the application's value: object keys from the root.
    pub path: Vec<String>,
    /// Whether the configuration holds a value there (`null` included).
    pub present: bool,
    /// The section that edits the application (an opaque id, see [`Section`]).
    pub section: String,
}

/// The answer of [`application_paths`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ApplicationPaths {
    /// Every application of the source, by key, with its place in the
    /// configuration.
    pub applications: BTreeMap<String, ApplicationPath>,
    /// With a previous configuration only: the keys of the applications whose
    /// value differs between the two (sorted; a value present on one side
    /// only counts as changed). Absent from the JSON without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub changed: Option<Vec<String>>,
}

/// One section of the form (`meta.json` `sections`), as a configuration holds it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Section {
    /// The section's id. Opaque: a front-end must not parse it (at present it
    /// is the key of an application).
    pub id: String,
    /// Human name.
    pub title: String,
    /// Where the section's value sits in the configuration.
    pub path: Vec<String>,
    /// Whether the configuration holds a value there (`null` included).
    pub present: bool,
    /// The section's value after migration; `null` when not present.
    pub value: Value,
}

/// The answer of [`sections`].
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Sections {
    /// Every section, in the order of `meta.json`.
    pub sections: Vec<Section>,
}

/// Where each application's value sits in `configuration` and, with
/// `previous`, which applications changed (TF-2).
///
/// Both configurations are migrated with `renames` first (entries that
/// cannot apply are left as they are, MG-3); each side's value is then read
/// at the application's path in that side, and the two values compared as
/// JSON (key order does not count).
pub fn application_paths(
    meta: &Meta,
    renames: &[Rename],
    configuration: &Value,
    previous: Option<&Value>,
) -> ApplicationPaths {
    let current = migrated(configuration, renames);
    let previous = previous.map(|p| migrated(p, renames));
    let applications = meta
        .applications
        .iter()
        .map(|(key, app)| {
            let place = ApplicationPath {
                present: get_path(&current, &app.path).is_some(),
                path: app.path.clone(),
                section: app.section.clone(),
            };
            (key.clone(), place)
        })
        .collect();
    let changed = previous.map(|previous| {
        meta.applications
            .iter()
            .filter(|(_, app)| get_path(&current, &app.path) != get_path(&previous, &app.path))
            .map(|(key, _)| key.clone())
            .collect()
    });
    ApplicationPaths { applications, changed }
}

/// The sections of `configuration` that a form edits one at a time, each
/// with its value after migration with `renames` (TF-2, MG-4).
pub fn sections(meta: &Meta, renames: &[Rename], configuration: &Value) -> Sections {
    let current = migrated(configuration, renames);
    let sections = meta
        .sections
        .iter()
        .map(|s| {
            let value = get_path(&current, &s.path);
            Section {
                id: s.id.clone(),
                title: s.title.clone(),
                path: s.path.clone(),
                present: value.is_some(),
                value: value.cloned().unwrap_or(Value::Null),
            }
        })
        .collect();
    Sections { sections }
}

/// `configuration` in the source's current shape, as a submit migrates it.
fn migrated(configuration: &Value, renames: &[Rename]) -> Value {
    let mut value = configuration.clone();
    renames::migrate(&mut value, renames);
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::outputs::{AppMeta, SectionMeta};
    use serde_json::json;

    fn meta() -> Meta {
        let app = |key: &str| AppMeta {
            path: vec!["applications".into(), key.into()],
            enable: vec!["enable".into()],
            subdomain: vec!["subdomain".into()],
            default_subdomain: key.into(),
            section: key.into(),
            title: key.to_uppercase(),
            web_ui: true,
            secrets: vec![],
        };
        Meta {
            domain: vec!["domain".into()],
            applications: BTreeMap::from([("a".into(), app("a")), ("b".into(), app("b"))]),
            sections: vec![SectionMeta {
                id: "a".into(),
                path: vec!["applications".into(), "a".into()],
                title: "A".into(),
            }],
            catalog: vec![],
            readiness: Default::default(),
            capabilities: Vec::new(),
        }
    }

    #[test]
    fn an_application_stored_in_an_old_shape_is_read_at_its_current_path() {
        let renames = [Rename::new(["apps", "*"], ["applications", "*"])];
        let old = json!({ "apps": { "a": { "enable": true } } });
        let paths = application_paths(&meta(), &renames, &old, None);
        assert!(paths.applications["a"].present);
        assert!(!paths.applications["b"].present);
        assert_eq!(paths.changed, None);
    }

    #[test]
    fn a_change_of_shape_alone_changes_no_application() {
        let renames = [Rename::new(["apps", "*"], ["applications", "*"])];
        let old = json!({ "apps": { "a": { "enable": true }, "b": { "enable": false } } });
        let new = json!({ "applications": { "b": { "enable": true }, "a": { "enable": true } } });
        let paths = application_paths(&meta(), &renames, &new, Some(&old));
        assert_eq!(paths.changed, Some(vec!["b".to_owned()]));
    }

    #[test]
    fn an_application_present_on_one_side_only_has_changed() {
        let old = json!({ "applications": { "a": {} } });
        let new = json!({ "applications": { "b": {} } });
        let paths = application_paths(&meta(), &[], &new, Some(&old));
        assert_eq!(paths.changed, Some(vec!["a".to_owned(), "b".to_owned()]));
    }

    #[test]
    fn a_stored_null_section_is_present_and_a_missing_one_is_not() {
        let answer = sections(&meta(), &[], &json!({ "applications": { "a": null } }));
        assert_eq!(answer.sections.len(), 1);
        assert!(answer.sections[0].present);
        assert_eq!(answer.sections[0].value, Value::Null);
        let answer = sections(&meta(), &[], &json!({}));
        assert!(!answer.sections[0].present);
    }
}
