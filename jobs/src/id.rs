//! Identifiers: deployment ids (ID-1), build ids (ST-4) and DNS labels (ID-2).

use rand::Rng;
use serde::{Deserialize, Serialize};
use std::fmt;
use time::OffsetDateTime;

/// Longest deployment id, in characters (ID-1; seed 000 "Deployment identifiers").
pub const MAX_DEPLOYMENT_ID: usize = 40;
/// Longest slug prefix of a fresh label (ID-2; seed 004 `MaxSlug`).
pub const MAX_SLUG: usize = 25;
/// Length of the random suffix of labels and build ids.
const SUFFIX_LEN: usize = 6;
const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// Longest part of a refused identifier an error quotes, in characters.
const QUOTED: usize = 48;

/// Why an identifier was refused. Each holds the fault as a phrase
/// (`label_fault`): what is wrong and where, quoting the identifier
/// escaped and cut to 48 characters, so the message stays short and one
/// line whatever was sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// ID-1: not a DNS label of 1–40 characters of `[a-z0-9]` with inner `-`.
    #[error("a deployment id is a DNS label of 1 to {MAX_DEPLOYMENT_ID} characters: lower-case letters, digits and inner hyphens; {0}")]
    DeploymentId(String),
    /// ID-2: a slug is lower-case letters, digits and inner hyphens.
    #[error("a slug is lower-case letters, digits and inner hyphens; {0}")]
    Slug(String),
}

/// How an error quotes text it was sent (an id, a key's name): escaped as a
/// Rust string literal and cut to 48 characters, with `…` after a cut, so a
/// message stays one short line whatever was sent.
pub fn quoted(s: &str) -> String {
    let shown: String = s.chars().take(QUOTED).collect();
    format!("{shown:?}{}", if s.chars().nth(QUOTED).is_some() { "…" } else { "" })
}

/// What keeps `s` from being a DNS label body of at most `max` characters,
/// as a phrase for [`IdError`] (`got "Demo", whose character 1 is "D"`);
/// `None` when it is one. The first fault found is named: empty, too
/// long, a character outside `[a-z0-9-]` (counted from 1), then a hyphen
/// at either end.
fn label_fault(s: &str, max: usize) -> Option<String> {
    let chars = s.chars().count();
    if s.is_empty() {
        return Some("got an empty one".to_owned());
    }
    if chars > max {
        return Some(format!("got {chars} characters: {}", quoted(s)));
    }
    if let Some((at, c)) =
        s.chars().enumerate().find(|(_, c)| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Some(format!("got {}, whose character {} is {:?}", quoted(s), at + 1, c.to_string()));
    }
    if s.starts_with('-') {
        return Some(format!("got {}, which starts with a hyphen", quoted(s)));
    }
    s.ends_with('-').then(|| format!("got {}, which ends with a hyphen", quoted(s)))
}

/// An opaque deployment id (ID-1): a DNS label of 1–40 characters. Slipway
/// stores and returns it as given and never parses structure out of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct DeploymentId(String);

impl DeploymentId {
    /// Parses an id; anything but a DNS label of 1–40 characters is [`IdError::DeploymentId`].
    pub fn parse(s: &str) -> Result<Self, IdError> {
        match label_fault(s, MAX_DEPLOYMENT_ID) {
            None => Ok(Self(s.to_owned())),
            Some(fault) => Err(IdError::DeploymentId(fault)),
        }
    }

    /// The id as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for DeploymentId {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, IdError> {
        Self::parse(&s)
    }
}

impl From<DeploymentId> for String {
    fn from(id: DeploymentId) -> String {
        id.0
    }
}

impl fmt::Display for DeploymentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn random_suffix() -> String {
    let mut rng = rand::rng();
    (0..SUFFIX_LEN).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect()
}

/// A fresh build id, `<deployment id>.<YYYYMMDDThhmmssZ>.<6 of [a-z0-9]>` (ST-4,
/// the run-id form of seed 001), from the UTC time `at`.
pub fn new_build_id(deployment: &DeploymentId, at: OffsetDateTime) -> String {
    let at = at.to_offset(time::UtcOffset::UTC);
    format!(
        "{}.{:04}{:02}{:02}T{:02}{:02}{:02}Z.{}",
        deployment,
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        random_suffix()
    )
}

/// A fresh DNS label for `slug` (ID-2, seed 004 `NewLabel`): the slug cut to
/// [`MAX_SLUG`] characters, `-`, and 6 random `[a-z0-9]`.
pub fn new_label(slug: &str) -> Result<String, IdError> {
    if let Some(fault) = label_fault(slug, usize::MAX) {
        return Err(IdError::Slug(fault));
    }
    // The slug is ASCII, so byte and character counts agree.
    let prefix = slug[..slug.len().min(MAX_SLUG)].trim_end_matches('-');
    Ok(format!("{prefix}-{}", random_suffix()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_id_has_the_run_id_form() {
        let id = DeploymentId::parse("demo").unwrap();
        let at = time::macros::datetime!(2026-11-29 22:04:05 UTC);
        let build = new_build_id(&id, at);
        let (head, suffix) = build.rsplit_once('.').unwrap();
        assert_eq!(head, "demo.20261129T220405Z");
        assert_eq!(suffix.len(), 6);
        assert!(suffix.bytes().all(|b| ALPHABET.contains(&b)));
    }

    #[test]
    fn a_refused_id_is_told_its_first_fault_in_a_short_line_whatever_its_length() {
        let long = "a".repeat(100_000);
        let refused = |id: &str| DeploymentId::parse(id).unwrap_err().to_string();
        for (id, fault) in [
            ("", "got an empty one".to_owned()),
            (long.as_str(), format!("got {} characters: \"aaa", long.len())),
            ("deMo", r#"got "deMo", whose character 3 is "M""#.to_owned()),
            ("demo\\", r#"whose character 5 is "\\""#.to_owned()),
            ("dé", r#"whose character 2 is "é""#.to_owned()),
            ("-demo", "which starts with a hyphen".to_owned()),
            ("demo-", "which ends with a hyphen".to_owned()),
        ] {
            let message = refused(id);
            assert!(message.contains(&fault), "{id:?}: {message}");
            assert!(message.len() < 300 && !message.contains('\n'), "{message}");
        }
        let newline = refused(&format!("{}\n{}", "x".repeat(10), "y".repeat(20)));
        assert!(newline.contains(r#"whose character 11 is "\n""#) && !newline.contains('\n'), "{newline}");
        let slug = new_label(&format!("{long}A")).unwrap_err().to_string();
        assert!(slug.contains(&format!("whose character {} is \"A\"", long.len() + 1)) && slug.len() < 300, "{slug}");
    }

    #[test]
    fn a_cut_slug_never_ends_in_a_hyphen() {
        // 25th character is a hyphen: the label must still be a DNS label.
        let slug = "abcdefghijklmnopqrstuvwx-yz";
        let label = new_label(slug).unwrap();
        assert_eq!(label_fault(&label, usize::MAX), None, "{label}");
    }
}
