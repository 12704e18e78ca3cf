//! Conditional writes to a deployment (RFC 9110 §13.1.1–2; PRODUCT.md
//! IK-1 "two browser tabs never overwrite each other silently"): the
//! deployment's `version` is its strong entity tag (`"<version>"`), and a
//! submit or delete carries at most one [`Precondition`], checked in the
//! write's own transaction, under the deployment's lock.

/// What the deployment must be for a write to go ahead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Precondition {
    /// `If-Match: *`: the deployment exists.
    Exists,
    /// `If-Match: "3", "4"`: the deployment exists and its version is one
    /// of these (strong comparison: a weak tag never matches, so it is not
    /// here). Empty: a list of tags none of which can match.
    Version(Vec<i64>),
    /// `If-None-Match: *` (a `PUT` only): the deployment does not exist yet
    /// (create only).
    Absent,
}

impl Precondition {
    /// Whether it holds for a deployment whose version is `version`
    /// (`None`: no such deployment).
    pub fn holds(&self, version: Option<i64>) -> bool {
        match (self, version) {
            (Self::Exists, v) => v.is_some(),
            (Self::Version(tags), Some(v)) => tags.contains(&v),
            (Self::Version(_), None) => false,
            (Self::Absent, v) => v.is_none(),
        }
    }

    /// Whether it needs the deployment to exist already: a write that
    /// inserted it (its version is then 1) does not satisfy it.
    pub(crate) fn needs_existing(&self) -> bool {
        matches!(self, Self::Exists | Self::Version(_))
    }

    /// SQL that is true when the existing deployment whose version is
    /// `column` may be replaced. Versions are integers, written as such.
    pub(crate) fn update_sql(&self, column: &str) -> String {
        match self {
            Self::Exists => "1 = 1".to_owned(),
            Self::Version(tags) if tags.is_empty() => "1 = 0".to_owned(),
            Self::Version(tags) => {
                format!("{column} IN ({})", tags.iter().map(i64::to_string).collect::<Vec<_>>().join(", "))
            }
            Self::Absent => "1 = 0".to_owned(),
        }
    }
}

/// The strong entity tag of a deployment at `version`: `"<version>"`.
pub fn etag(version: i64) -> String {
    format!("\"{version}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_precondition_holds_as_rfc_9110_says() {
        assert!(Precondition::Exists.holds(Some(1)));
        assert!(!Precondition::Exists.holds(None));
        assert!(Precondition::Version(vec![2, 3]).holds(Some(3)));
        assert!(!Precondition::Version(vec![2, 3]).holds(Some(4)));
        assert!(!Precondition::Version(vec![2]).holds(None));
        assert!(!Precondition::Version(vec![]).holds(Some(1)));
        assert!(Precondition::Absent.holds(None));
        assert!(!Precondition::Absent.holds(Some(1)));
        assert_eq!(Precondition::Version(vec![2, 3]).update_sql("v"), "v IN (2, 3)");
    }
}
