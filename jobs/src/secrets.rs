//! Operator secrets at submit (PRODUCT.md §8, seed 000 "Secrets of the
//! operator"): what a submit does with the secret fields of each
//! application, rule by rule.
//!
//! The checks ([`crate::validate::Checker::check`]) take every secret
//! value out of the configuration and give, per application present, an
//! [`AppSecrets`]: the values given, the `secretsClear` list, the secret
//! fields and the renames of secret fields. After every other check has
//! passed and the names eval ran on the configuration without secrets,
//! [`plan`] decides, from the entries that exist in the secret store, what
//! to write and copy and what the stored configuration's `secretsSet` and
//! `secretsClear` say:
//!
//! 1. A non-empty value is written to the entry of its field, and the field
//!    joins `secretsSet`.
//! 2. An empty or null value keeps the existing entry: `secretsSet` lists
//!    every field that has an entry (also those an earlier submit set).
//! 3. A renamed field with no entry under its new name, no value and no
//!    clear, is copied from the old name's entry when that exists (the old
//!    entry stays: a node reads it until its next deploy).
//! 4. A field in `secretsClear` without a value leaves `secretsSet`, and
//!    neither its entry nor an old name's is read (nor copied).
//! 5. A value wins over a clear: the field leaves `secretsClear`.
//! 6. Names that are not secret fields leave `secretsClear`.
//! 7. Nothing is ever deleted here (the deploy deletes cleared entries once
//!    the nodes no longer name them).
//!
//! `place_secrets` applies the plan to OpenBao for a submit, and
//! `take_back` destroys what a refused submit wrote.

use crate::id::DeploymentId;
use crate::openbao::{OpenBao, OpenBaoError};
use crate::validate::{pointer_of, Checked, Checker, SECRETS_CLEAR, SECRETS_SET};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeSet;

/// The operator secrets a build's deploy gives its nodes, pinned at its
/// submit (stored with the build, `builds.operator_secrets`): each field
/// set, with the OpenBao KV version the submit wrote or kept, and each field
/// cleared. Names and version numbers only, never a value.
///
/// The deploy reads exactly these versions, so a version written by a
/// submit that then failed to commit (or was refused by Q-3 after the
/// write) is never deployed (`docs/DECISIONS.md`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretPins {
    /// The fields that hold a value, with the version to read.
    #[serde(default)]
    pub set: Vec<Pin>,
    /// The fields whose entry the deploy deletes, with every version, once
    /// the nodes run a configuration that no longer names them.
    #[serde(default)]
    pub clear: Vec<Cleared>,
}

impl SecretPins {
    /// Whether a field holds a value in OpenBao (`set` is not empty).
    pub fn keeps_values(&self) -> bool {
        !self.set.is_empty()
    }

    /// Whether there is nothing to read or clear.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.clear.is_empty()
    }

    /// The version pinned for `field` of `application`.
    pub fn version_of(&self, application: &str, field: &str) -> Option<u64> {
        self.set.iter().find(|p| p.application == application && p.field == field).map(|p| p.version)
    }
}

/// A secret field that holds a value, and the version its build reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    /// The application's key in `applications`.
    pub application: String,
    /// The secret field.
    pub field: String,
    /// The OpenBao KV version (from 1).
    pub version: u64,
}

/// A secret field a build clears.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cleared {
    /// The application's key in `applications`.
    pub application: String,
    /// The secret field.
    pub field: String,
}

/// One application's secrets in a submitted configuration.
#[derive(Debug, Clone, Default)]
pub struct AppSecrets {
    /// The application's key in `applications` (its vars instance is
    /// `<application>-operator-secrets`).
    pub application: String,
    /// Where the application's settings sit in the configuration.
    pub path: Vec<String>,
    /// Its secret fields, as the module source declares them.
    pub fields: Vec<String>,
    /// The non-empty values the submit gives, by field.
    pub given: Vec<(String, SecretString)>,
    /// The submit's `secretsClear`, as given (filtered by [`plan`]).
    pub clear: Vec<String>,
    /// Renames of its secret fields in the source's renames: `(old, new)`.
    pub renamed: Vec<(String, String)>,
}

impl AppSecrets {
    /// The vars instance of the application's secrets (seed 000).
    pub fn instance(&self) -> String {
        format!("{}-operator-secrets", self.application)
    }

    /// Whether `field` is given a value.
    pub fn gives(&self, field: &str) -> bool {
        self.given.iter().any(|(f, _)| f == field)
    }

    /// Whether `field` is a secret field of this application.
    pub fn is_secret(&self, field: &str) -> bool {
        self.fields.iter().any(|f| f == field)
    }
}

/// What a submit does with one application's secrets, given the entries
/// that exist ([`plan`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Fields whose given value is written (rule 1).
    pub write: Vec<String>,
    /// `(old, new)`: entries copied from an old name (rule 3).
    pub copy: Vec<(String, String)>,
    /// The stored `secretsSet`: sorted, secret fields only.
    pub secrets_set: Vec<String>,
    /// The stored `secretsClear`: secret fields without a value, as listed.
    pub secrets_clear: Vec<String>,
}

/// Decides what a submit does with `app`'s secrets when `existing` entries
/// (field names) are in the store. `existing` must not be read for a field
/// in the clear list (rule 4): the caller lists entries, it never reads
/// values, except the old entry of a copy.
pub fn plan(app: &AppSecrets, existing: &[String]) -> Plan {
    // Rules 5 and 6: the clear list keeps secret fields without a value, once each.
    let mut secrets_clear: Vec<String> = Vec::new();
    for f in &app.clear {
        if app.is_secret(f) && !app.gives(f) && !secrets_clear.contains(f) {
            secrets_clear.push(f.clone());
        }
    }
    let cleared = |f: &str| secrets_clear.iter().any(|c| c == f);
    let exists = |f: &str| existing.iter().any(|e| e == f);
    let write: Vec<String> = app.given.iter().map(|(f, _)| f.clone()).filter(|f| app.is_secret(f)).collect();
    // Rule 3: a copy only where the new name has nothing, gets nothing and
    // is not cleared; the old name's entry must exist.
    let mut copy = Vec::new();
    for (old, new) in &app.renamed {
        let taken = copy.iter().any(|(_, n): &(String, String)| n == new);
        if app.is_secret(new) && !exists(new) && !app.gives(new) && !cleared(new) && exists(old) && !taken {
            copy.push((old.clone(), new.clone()));
        }
    }
    // Rules 1, 2 and 4.
    let mut set: BTreeSet<String> = BTreeSet::new();
    set.extend(existing.iter().filter(|f| app.is_secret(f)).cloned());
    set.extend(write.iter().cloned());
    set.extend(copy.iter().map(|(_, new)| new.clone()));
    set.retain(|f| !cleared(f));
    Plan { write, copy, secrets_set: set.into_iter().collect(), secrets_clear }
}

// The placement of a submit's secrets in OpenBao (`submit::submit` calls
// these after every check passed and the names eval ran).

/// A version a submit wrote to OpenBao (a value given, or a copy).
pub(crate) struct Written {
    instance: String,
    field: String,
    version: u64,
}

/// Takes back the versions a refused submit wrote (`docs/OPENBAO.md`):
/// destroys each, so no build can read it and the entry's latest live
/// version is what it was (the entry's version counter stays advanced, and
/// an entry this submit created stays, with no live version). A version
/// that cannot be destroyed (OpenBao away, the token expired) is logged:
/// no build pins it, so none deploys it.
pub(crate) async fn take_back(bao: &OpenBao, id: &DeploymentId, written: &[Written]) {
    for w in written {
        match bao.destroy_version(id.as_str(), &w.instance, &w.field, w.version).await {
            Ok(()) => tracing::info!(
                deployment = %id, instance = %w.instance, field = %w.field, version = w.version,
                "a refused submit's operator secret version was destroyed"
            ),
            Err(e) => tracing::warn!(
                deployment = %id, instance = %w.instance, field = %w.field, version = w.version, error = %e,
                "a refused submit's operator secret version could not be destroyed; no build pins it"
            ),
        }
    }
}

/// A dry run's `secretsSet` and `secretsClear` (§11): what a real submit
/// would store, from the fields the deployment's latest build set and the
/// values given now ([`plan`]), without asking OpenBao.
pub(crate) fn plan_secrets_without_store(previous: &SecretPins, checked: &mut Checked) {
    for app in &checked.secrets {
        let existing: Vec<String> =
            previous.set.iter().filter(|p| p.application == app.application).map(|p| p.field.clone()).collect();
        let plan = plan(app, &existing);
        write_secret_lists(&mut checked.configuration, &app.path, plan.secrets_set, plan.secrets_clear);
    }
}

/// Sets the application at `path`'s `secretsSet` and `secretsClear` to
/// what a submit stores: each list when it is not empty or the key is
/// there already (an absent empty list stays absent).
fn write_secret_lists(configuration: &mut Value, path: &[String], set: Vec<String>, clear: Vec<String>) {
    let settings = path.iter().try_fold(configuration, |v, seg| v.get_mut(seg.as_str()));
    let settings = settings.and_then(Value::as_object_mut).expect("the checks found the application's settings here");
    for (key, list) in [(SECRETS_SET, set), (SECRETS_CLEAR, clear)] {
        if !list.is_empty() || settings.contains_key(key) {
            settings.insert(key.into(), Value::from(list));
        }
    }
}

/// §8, after every check passed and the names eval ran: for each
/// application with secret fields, lists which entries OpenBao has, writes
/// the values given (and the values an old stored configuration still
/// holds in fields that became secret), copies renamed fields
/// ([`plan`]), and sets the stored configuration's `secretsSet` and
/// `secretsClear`. `previous` is what the deployment's latest build pinned,
/// `stored` its stored configuration (if any). Gives the versions the build
/// reads: the version written or copied, else, for an entry kept, the
/// version the deployment's latest build pinned (while that version still
/// exists), else the entry's current version. Deletes nothing; each version
/// written is added to `written` as soon as it is (the caller takes them
/// back when the submit is refused after). Also gives a warning for each
/// field the previous build pinned that OpenBao no longer has (and that is
/// not cleared): its nodes lose it. An error is OpenBao's refusal or
/// absence.
pub(crate) async fn place_secrets(
    bao: &OpenBao,
    checker: &Checker,
    id: &DeploymentId,
    previous: &SecretPins,
    stored: Option<Value>,
    checked: &mut Checked,
    written: &mut Vec<Written>,
) -> Result<(SecretPins, Vec<String>), OpenBaoError> {
    let mut pins = SecretPins::default();
    let mut warnings = Vec::new();
    if checked.secrets.is_empty() {
        return Ok((pins, warnings));
    }
    let old_values = stored.map(|c| checker.stored_secret_values(c)).unwrap_or_default();
    for app in &mut checked.secrets {
        // Old stored values move now, unless the submit gives or clears the field.
        for (application, field, value) in &old_values {
            if *application == app.application
                && app.is_secret(field)
                && !app.gives(field)
                && !app.clear.contains(field)
            {
                app.given.push((field.clone(), value.clone()));
            }
        }
        let instance = app.instance();
        let existing = bao.list(id.as_str(), &instance).await?;
        let plan = plan(app, &existing);
        let mut versions: Vec<(String, u64)> = Vec::new();
        for field in &plan.write {
            let (_, value) = app.given.iter().find(|(f, _)| f == field).expect("plan writes given fields");
            let version = bao.write(id.as_str(), &instance, field, value).await?;
            written.push(Written { instance: instance.clone(), field: field.clone(), version });
            versions.push((field.clone(), version));
        }
        for (old, new) in &plan.copy {
            if let Some(version) = bao.copy(id.as_str(), &instance, old, new).await? {
                written.push(Written { instance: instance.clone(), field: new.clone(), version });
                versions.push((new.clone(), version));
            }
        }
        let mut secrets_set = Vec::new();
        for field in &plan.secrets_set {
            let version = match versions.iter().find(|(f, _)| f == field) {
                Some((_, v)) => Some(*v),
                None => {
                    let current = bao.current_version(id.as_str(), &instance, field).await?;
                    match (current, previous.version_of(&app.application, field)) {
                        (Some(current), Some(pinned)) if pinned <= current => Some(pinned),
                        (current, _) => current,
                    }
                }
            };
            // An entry deleted since it was listed is no longer set.
            if let Some(version) = version {
                pins.set.push(Pin { application: app.application.clone(), field: field.clone(), version });
                secrets_set.push(field.clone());
            }
        }
        for lost in previous.set.iter().filter(|p| p.application == app.application) {
            if !secrets_set.contains(&lost.field) && !plan.secrets_clear.contains(&lost.field) {
                warnings.push(format!(
                    "{}/{}: an earlier submit set this secret, but OpenBao no longer has its entry; its nodes lose it \
                     at this deploy (give the value again to restore it)",
                    pointer_of(&app.path),
                    lost.field
                ));
            }
        }
        pins.clear.extend(
            plan.secrets_clear.iter().map(|f| Cleared { application: app.application.clone(), field: f.clone() }),
        );
        write_secret_lists(&mut checked.configuration, &app.path, secrets_set, plan.secrets_clear);
    }
    Ok((pins, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(given: &[&str], clear: &[&str]) -> AppSecrets {
        AppSecrets {
            application: "mastodon".into(),
            path: vec!["applications".into(), "mastodon".into()],
            fields: vec!["translationApiKey".into(), "smtpPassword".into()],
            given: given.iter().map(|f| (f.to_string(), SecretString::from(format!("value of {f}")))).collect(),
            clear: clear.iter().map(|f| f.to_string()).collect(),
            renamed: vec![("deeplApiKey".into(), "translationApiKey".into())],
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_value_is_written_and_joins_secrets_set() {
        let p = plan(&app(&["smtpPassword"], &[]), &[]);
        assert_eq!(p.write, names(&["smtpPassword"]));
        assert_eq!(p.secrets_set, names(&["smtpPassword"]));
    }

    #[test]
    fn an_empty_value_keeps_the_entry_an_earlier_submit_wrote() {
        let p = plan(&app(&[], &[]), &names(&["smtpPassword"]));
        assert!(p.write.is_empty());
        assert_eq!(p.secrets_set, names(&["smtpPassword"]));
    }

    #[test]
    fn a_renamed_field_without_an_entry_is_copied_from_its_old_name() {
        let p = plan(&app(&[], &[]), &names(&["deeplApiKey"]));
        assert_eq!(p.copy, vec![("deeplApiKey".to_owned(), "translationApiKey".to_owned())]);
        assert_eq!(p.secrets_set, names(&["translationApiKey"]));
    }

    #[test]
    fn a_value_replaces_the_copy() {
        let p = plan(&app(&["translationApiKey"], &[]), &names(&["deeplApiKey"]));
        assert!(p.copy.is_empty());
        assert_eq!(p.write, names(&["translationApiKey"]));
    }

    #[test]
    fn an_existing_entry_under_the_new_name_is_not_overwritten_by_a_copy() {
        let p = plan(&app(&[], &[]), &names(&["deeplApiKey", "translationApiKey"]));
        assert!(p.copy.is_empty());
    }

    #[test]
    fn a_cleared_field_without_a_value_leaves_secrets_set_and_is_not_copied() {
        let p = plan(&app(&[], &["translationApiKey", "smtpPassword"]), &names(&["smtpPassword", "deeplApiKey"]));
        assert!(p.copy.is_empty());
        assert!(p.secrets_set.is_empty(), "{p:?}");
        assert_eq!(p.secrets_clear, names(&["translationApiKey", "smtpPassword"]));
    }

    #[test]
    fn a_value_wins_over_a_clear() {
        let p = plan(&app(&["smtpPassword"], &["smtpPassword"]), &[]);
        assert!(p.secrets_clear.is_empty());
        assert_eq!(p.secrets_set, names(&["smtpPassword"]));
    }

    #[test]
    fn names_that_are_not_secret_fields_leave_secrets_clear() {
        let p = plan(&app(&[], &["domain", "smtpPassword", "smtpPassword", "deeplApiKey"]), &[]);
        assert_eq!(p.secrets_clear, names(&["smtpPassword"]));
    }

    #[test]
    fn entries_of_names_that_are_not_secret_fields_stay_out_of_secrets_set() {
        let p = plan(&app(&[], &[]), &names(&["somethingElse"]));
        assert!(p.secrets_set.is_empty());
    }
}
