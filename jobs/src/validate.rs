//! Migration and validation of a configuration against a module source
//! (PRODUCT.md §5, MG-3, MG-5, MG-6, and the first steps of MG-7).
//!
//! [`Checker::check`] migrates with the source's renames, validates with its
//! schema, and lists every problem with its path, never only the first.
//! Messages mask the offending values, so a secret typed into the wrong field
//! is never echoed back (SEC-2).
//!
//! What passes must deploy: text that Nix cannot carry to a node exactly (a
//! NUL character, which no Nix string can hold, and the object keys
//! `outPath` and `__toString`, which make Nix read an object as something
//! else) is refused here, in every string and key of the configuration
//! (docs/MODULE-SOURCE.md "Strings and keys").
//!
//! The answer stays small: at most [`MAX_PROBLEMS`] problems are listed, the
//! rest are counted ([`Listing`]), and each problem's path and message are
//! cut to [`MAX_PROBLEM_TEXT`] bytes.

use crate::renames::{self, Skipped};
use crate::secrets::AppSecrets;
use crate::source::outputs::{get_path, Instance, OutputError, SourceOutputs};
use serde::Serialize;
use serde_json::Value;

/// At most this many problems are listed in a refusal: the first ones in
/// the order they are found (skipped renames, schema problems in document
/// order, text Nix cannot carry, secret values); the others are only
/// counted ([`Listing::omitted`]).
pub const MAX_PROBLEMS: usize = 100;

/// A problem's path or message longer than this many bytes is cut at a
/// character boundary and ends with `…`, so a huge key cannot make a huge
/// answer.
pub const MAX_PROBLEM_TEXT: usize = 300;

/// The object keys Nix gives a meaning of their own: an object with
/// `outPath` is read as that path, one with `__toString` as the string it
/// makes (string interpolation, `builtins.toJSON`), so it would not reach a
/// node as the object submitted.
pub const RESERVED_KEYS: [&str; 2] = ["outPath", "__toString"];

/// One problem of a configuration: where, what kind, and a sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// JSON pointer into the configuration (`""` is the whole configuration),
    /// at most [`MAX_PROBLEM_TEXT`] bytes (a longer one is cut and ends with `…`).
    pub path: String,
    /// `schema` (the schema refuses the value), `unexpected_key` (MG-6),
    /// `skipped_rename` (MG-3), `secret` (§8), `unsupported_character` (a
    /// NUL character in a string or key, which Nix cannot carry to a node),
    /// `reserved_key` (one of [`RESERVED_KEYS`]) or `unsupported_number` (a
    /// whole number outside Nix's 64-bit integers).
    pub kind: &'static str,
    /// What is wrong, and the remedy where there is one; never the value.
    /// At most [`MAX_PROBLEM_TEXT`] bytes.
    pub message: String,
}

impl Problem {
    fn new(path: String, kind: &'static str, message: String) -> Self {
        Self { path: bounded(path), kind, message: bounded(message) }
    }
}

/// A refusal's problems (the api's `invalid_configuration` details,
/// `slipway-worker run`'s report): the first [`MAX_PROBLEMS`] found, and how
/// many more were found and only counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Listing {
    /// The problems listed, at most [`MAX_PROBLEMS`], in the order found.
    pub problems: Vec<Problem>,
    /// How many more problems were found and are not listed.
    pub omitted: usize,
}

impl Listing {
    /// Every problem found, listed or not.
    pub fn total(&self) -> usize {
        self.problems.len() + self.omitted
    }

    /// One sentence: how many problems there are in all, and how many are listed.
    pub fn message(&self) -> String {
        match (self.total(), self.omitted) {
            (1, _) => "the configuration has 1 problem; it is listed with its path".to_owned(),
            (n, 0) => format!("the configuration has {n} problems; each is listed with its path"),
            (n, more) => format!(
                "the configuration has {n} problems; the first {} are listed with their paths and {more} more are left out",
                self.problems.len()
            ),
        }
    }
}

/// `text` cut to at most [`MAX_PROBLEM_TEXT`] bytes, ending with `…` when cut.
fn bounded(text: String) -> String {
    cut(text, MAX_PROBLEM_TEXT)
}

fn cut(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
    text
}

/// A key quoted for a sentence; one longer than 60 bytes is cut (after the
/// closing quote, `…`), so that the sentence stays readable.
fn quoted(key: &str) -> String {
    if key.len() <= 60 {
        return format!("{key:?}");
    }
    let mut end = 57;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}…", &key[..end])
}

impl Listing {
    /// Adds a problem as it is found: one of the first [`MAX_PROBLEMS`] is
    /// kept, any other only counted (its sentence is never made).
    fn add(&mut self, problem: impl FnOnce() -> Problem) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(problem());
        } else {
            self.omitted += 1;
        }
    }
}

/// A configuration that passed every check: migrated, secret values taken out.
#[derive(Debug)]
pub struct Checked {
    /// The migrated configuration, without secret values (what is stored).
    pub configuration: Value,
    /// Its domain (TF-1).
    pub domain: Option<String>,
    /// The instances it serves (TF-1).
    pub instances: Vec<Instance>,
    /// The secrets of each application present (§8): the values taken out
    /// and what a submit needs to place them ([`crate::secrets`]).
    pub secrets: Vec<AppSecrets>,
    /// How its instances are probed once deployed (§10), from the source's meta.
    pub readiness: crate::source::outputs::ReadinessMeta,
    /// The renames the migration applied (MG-7): the sender used names the
    /// source has deprecated.
    pub renamed: Vec<renames::Applied>,
}

/// A module source's outputs with its schema compiled once.
pub struct Checker {
    outputs: SourceOutputs,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for Checker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checker").finish_non_exhaustive()
    }
}

/// The read-only list of an application's secret fields that hold a value (§8).
pub const SECRETS_SET: &str = "secretsSet";
/// The list of an application's secret fields to clear (§8).
pub const SECRETS_CLEAR: &str = "secretsClear";

fn pointer(path: &[String]) -> String {
    path.iter().map(|s| segment(s)).collect()
}

/// The JSON pointer of `path` (`["applications", "mastodon"]` →
/// `/applications/mastodon`), as problems name places.
pub fn pointer_of(path: &[String]) -> String {
    pointer(path)
}

/// One JSON-pointer segment: `/` and the key, escaped.
fn segment(key: &str) -> String {
    format!("/{}", key.replace('~', "~0").replace('/', "~1"))
}

/// Whether Nix can hold number `n` as written: a whole number must fit a
/// 64-bit signed integer (Nix's only integers; `1e20` or
/// 18446744073709551615 would wrap or turn into a float on the node).
fn fits_nix(n: &serde_json::Number) -> bool {
    if n.is_i64() {
        return true;
    }
    if n.is_u64() {
        return false;
    }
    // A float: only a whole one that is too large for an integer is refused.
    n.as_f64().is_none_or(|f| f.fract() != 0.0 || f.abs() < 2f64.powi(63))
}

/// Adds a problem for every string and key under `value` (at the JSON
/// pointer `path`) that Nix cannot carry to a node: one holding a NUL
/// character, and each of [`RESERVED_KEYS`]. The sentences name the
/// character or the key, never the value (it may be a secret).
fn undeployable_text(value: &Value, path: &mut String, found: &mut Listing) {
    const NUL: &str =
        "contains a NUL character (U+0000), which no Nix string can hold, so it cannot reach the node; remove it";
    let at = path.len();
    match value {
        Value::String(s) if s.contains('\0') => {
            found.add(|| Problem::new(path.clone(), "unsupported_character", format!("this text {NUL}")))
        }
        Value::Number(n) if !fits_nix(n) => found.add(|| {
            Problem::new(
                path.clone(),
                "unsupported_number",
                "this whole number is outside the 64-bit integers a Nix value can hold \
                 (-9223372036854775808 to 9223372036854775807), so it cannot reach the node"
                    .to_owned(),
            )
        }),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push('/');
                path.push_str(&i.to_string());
                undeployable_text(item, path, found);
                path.truncate(at);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                path.push_str(&segment(key));
                if key.contains('\0') {
                    found.add(|| Problem::new(path.clone(), "unsupported_character", format!("this key {NUL}")));
                }
                if let Some(reserved) = RESERVED_KEYS.iter().find(|r| **r == key) {
                    let reads_as = if *reserved == "outPath" { "the path it names" } else { "the string it makes" };
                    let message = format!(
                        "Nix reads an object with the key {reserved:?} as {reads_as}, \
                         so this object cannot reach the node as written; rename or remove the key"
                    );
                    found.add(|| Problem::new(path.clone(), "reserved_key", message));
                }
                undeployable_text(item, path, found);
                path.truncate(at);
            }
        }
        _ => {}
    }
}

impl Checker {
    /// Compiles the schema of `outputs`; a schema that does not compile is an [`OutputError`].
    ///
    /// `format` is asserted, not only an annotation (as JSON Schema 2020-12
    /// leaves it by default): a value breaking a format the specification
    /// defines (`email`, `hostname`, `uri`, `date`, `ipv4`, …) is a `schema`
    /// problem at its path. A format no validator knows, such as the
    /// `password` of secret fields (MS-2), stays an annotation.
    pub fn new(outputs: SourceOutputs) -> Result<Self, OutputError> {
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(&outputs.schema)
            .map_err(|e| OutputError { file: "schema.json".into(), reason: format!("not a valid JSON Schema: {e}") })?;
        Ok(Self { outputs, validator })
    }

    /// The source outputs this checker uses.
    pub fn outputs(&self) -> &SourceOutputs {
        &self.outputs
    }

    /// MG-7, first steps: migrate, validate (all errors), take the secret
    /// values out (§8). With `secrets_refused` (no secret store), each
    /// secret value is a problem with that sentence; without, the values
    /// are given back in [`Checked::secrets`]. Returns the checked
    /// configuration, or its problems: skipped renames, schema problems,
    /// text Nix cannot carry to a node, and refused secret values, in that
    /// order; at most [`MAX_PROBLEMS`] are listed and the rest counted.
    pub fn check(&self, mut configuration: Value, secrets_refused: Option<&str>) -> Result<Checked, Listing> {
        let renames::Migration { applied: renamed, skipped } =
            renames::migrate_reporting(&mut configuration, &self.outputs.renames);
        self.drop_null_secrets(&mut configuration);
        let mut found = Listing::default();
        for s in &skipped {
            found.add(|| self.skipped_problem(s));
        }
        self.schema_problems(&configuration, &mut found);
        undeployable_text(&configuration, &mut String::new(), &mut found);
        let secrets = self.take_secrets(&mut configuration);
        for app in &secrets {
            for (field, value) in &app.given {
                use secrecy::ExposeSecret as _;
                if value.expose_secret().chars().any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r')) {
                    found.add(|| {
                        Problem::new(
                            format!("{}{}", pointer(&app.path), segment(field)),
                            "secret",
                            "a secret value may hold no control character other than tab and line breaks \
                             (it is delivered to nodes as text, and would not arrive unchanged)"
                                .to_owned(),
                        )
                    });
                }
            }
        }
        if let Some(refused) = secrets_refused {
            for app in &secrets {
                for (field, _) in &app.given {
                    found.add(|| {
                        Problem::new(format!("{}{}", pointer(&app.path), segment(field)), "secret", refused.to_owned())
                    });
                }
            }
        }
        if !found.problems.is_empty() {
            return Err(found);
        }
        let meta = &self.outputs.meta;
        Ok(Checked {
            readiness: meta.readiness.clone(),
            domain: meta.domain_of(&configuration),
            instances: meta.instances_of(&configuration),
            configuration,
            secrets,
            renamed,
        })
    }

    fn skipped_problem(&self, s: &Skipped) -> Problem {
        let path = s.path.as_deref().map(pointer).unwrap_or_default();
        Problem::new(path, "skipped_rename", s.message(&self.outputs.renames))
    }

    fn schema_problems(&self, configuration: &Value, found: &mut Listing) {
        for e in self.validator.iter_errors(configuration) {
            let at = || e.instance_path().as_str().to_owned();
            if let jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } = e.kind() {
                for key in unexpected {
                    found.add(|| {
                        Problem::new(
                            format!("{}{}", at(), segment(key)),
                            "unexpected_key",
                            format!(
                                "the module source has no place for {} here; re-save the form to drop it",
                                quoted(key)
                            ),
                        )
                    });
                }
                continue;
            }
            // A form hint's `else: {not: {required: [k]}}`: name the key, in words.
            if let jsonschema::error::ValidationErrorKind::Not { schema } = e.kind() {
                let keys: Vec<&str> = schema
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if !keys.is_empty() {
                    for key in keys {
                        found.add(|| {
                            Problem::new(
                                format!("{}{}", at(), segment(key)),
                                "schema",
                                format!("{} does not apply with the other choices made here; remove it", quoted(key)),
                            )
                        });
                    }
                    continue;
                }
            }
            found.add(|| Problem::new(at(), "schema", e.masked().to_string()));
        }
    }

    /// §8: a secret field given `null` means "keep what the secret store
    /// has", as an empty value does, so it goes before the schema (which
    /// types the field as a string) sees it.
    fn drop_null_secrets(&self, configuration: &mut Value) {
        for app in self.outputs.meta.applications.values() {
            let settings = app.path.iter().try_fold(&mut *configuration, |v, seg| v.get_mut(seg.as_str()));
            if let Some(Value::Object(obj)) = settings {
                obj.retain(|k, v| !(v.is_null() && app.secrets.contains(k)));
            }
        }
    }

    /// §8, old stored values: the non-empty values that `stored`, a
    /// configuration stored before a field became secret, still holds in
    /// secret fields, as `(application, field, value)`. `stored` is first
    /// migrated with this source's renames, so a value under an old name is
    /// found under its new one. A submit moves these to OpenBao.
    pub fn stored_secret_values(&self, mut stored: Value) -> Vec<(String, String, secrecy::SecretString)> {
        renames::migrate(&mut stored, &self.outputs.renames);
        let mut out = Vec::new();
        for (key, app) in &self.outputs.meta.applications {
            let Some(Value::Object(obj)) = get_path(&stored, &app.path) else { continue };
            for field in &app.secrets {
                if let Some(Value::String(value)) = obj.get(field).filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
                {
                    out.push((key.clone(), field.clone(), secrecy::SecretString::from(value.clone())));
                }
            }
        }
        out
    }

    /// §8: removes every secret field's value and gives, for each
    /// application present, its [`AppSecrets`]: the non-empty values (empty
    /// and null ones mean "keep what the secret store has" and simply go),
    /// the clear list and the renames of its secret fields. What is left
    /// says, as a preview shows it, `secretsSet`: the fields given a value
    /// now (a submit adds the secret store's entries, [`crate::secrets`]),
    /// and `secretsClear`: secret fields without a value (a value wins over a
    /// clear, seed 000).
    fn take_secrets(&self, configuration: &mut Value) -> Vec<AppSecrets> {
        let mut out = Vec::new();
        for (key, app) in &self.outputs.meta.applications {
            if app.secrets.is_empty() || get_path(configuration, &app.path).is_none() {
                continue;
            }
            let Some(obj) = app
                .path
                .iter()
                .try_fold(&mut *configuration, |v, seg| v.get_mut(seg.as_str()))
                .and_then(Value::as_object_mut)
            else {
                continue;
            };
            let mut given = Vec::new();
            for field in &app.secrets {
                if let Some(Value::String(s)) = obj.remove(field) {
                    if !s.is_empty() {
                        given.push((field.clone(), secrecy::SecretString::from(s)));
                    }
                }
            }
            let clear: Vec<String> = match obj.get(SECRETS_CLEAR) {
                Some(Value::Array(list)) => list.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
                _ => Vec::new(),
            };
            let secrets = AppSecrets {
                application: key.clone(),
                path: app.path.clone(),
                fields: app.secrets.clone(),
                given,
                clear,
                renamed: secret_renames(&self.outputs.renames, &app.path, &app.secrets),
            };
            let plan = crate::secrets::plan(&secrets, &[]);
            if obj.contains_key(SECRETS_SET) {
                obj.insert(SECRETS_SET.into(), Value::from(plan.secrets_set));
            }
            if obj.contains_key(SECRETS_CLEAR) {
                obj.insert(SECRETS_CLEAR.into(), Value::from(plan.secrets_clear));
            }
            out.push(secrets);
        }
        out
    }
}

/// The renames of an application's secret fields: `(old name, new name)`
/// for each entry that moves a field of the application at `path` (its
/// segments literal or `*`) to one of its `secrets`.
fn secret_renames(renames: &[renames::Rename], path: &[String], secrets: &[String]) -> Vec<(String, String)> {
    let under =
        |p: &[String]| p.len() == path.len() + 1 && p.iter().zip(path).all(|(a, b)| a == b || a == renames::WILDCARD);
    renames
        .iter()
        .filter(|r| under(&r.from) && under(&r.to))
        .filter_map(|r| Some((r.from.last()?.clone(), r.to.last()?.clone())))
        .filter(|(old, new)| old != new && secrets.contains(new))
        .collect()
}
