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

/// Why an identifier was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// ID-1: not a DNS label of 1–40 characters of `[a-z0-9]` with inner `-`.
    #[error("a deployment id is a DNS label of 1 to {MAX_DEPLOYMENT_ID} characters: lower-case letters, digits and inner hyphens; got {0:?}")]
    DeploymentId(String),
    /// ID-2: a slug is lower-case letters, digits and inner hyphens.
    #[error("a slug is lower-case letters, digits and inner hyphens; got {0:?}")]
    Slug(String),
}

/// True when `s` is a DNS label body: `[a-z0-9]` with inner `-`, not empty.
fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// An opaque deployment id (ID-1): a DNS label of 1–40 characters. Slipway
/// stores and returns it as given and never parses structure out of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct DeploymentId(String);

impl DeploymentId {
    /// Parses an id; anything but a DNS label of 1–40 characters is [`IdError::DeploymentId`].
    pub fn parse(s: &str) -> Result<Self, IdError> {
        if s.len() <= MAX_DEPLOYMENT_ID && is_label(s) {
            Ok(Self(s.to_owned()))
        } else {
            Err(IdError::DeploymentId(s.to_owned()))
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
    if !is_label(slug) {
        return Err(IdError::Slug(slug.to_owned()));
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
    fn a_cut_slug_never_ends_in_a_hyphen() {
        // 25th character is a hyphen: the label must still be a DNS label.
        let slug = "abcdefghijklmnopqrstuvwx-yz";
        let label = new_label(slug).unwrap();
        assert!(is_label(&label), "{label}");
    }
}
