//! Why an operation on OpenBao did not happen ([`OpenBaoError`]), and which
//! part of an entry's path a refused value is ([`Part`]).

use std::time::Duration;

/// Which part of an entry's path a value is, for errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The deployment id.
    DeploymentId,
    /// The instance, `<application>-operator-secrets`.
    Instance,
    /// The secret field's name.
    Field,
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::DeploymentId => "deployment id",
            Self::Instance => "instance",
            Self::Field => "field",
        })
    }
}

/// Why an operation on OpenBao did not happen. The texts are sentences for
/// an operator; none holds the token or a secret value (what OpenBao says is
/// kept only from its `errors` list, cut short, with both scrubbed out).
#[derive(Debug, thiserror::Error)]
pub enum OpenBaoError {
    /// A deployment id, instance or field that cannot be a path segment
    /// (empty, `.` or `..`): nothing was sent.
    #[error("the {part} {value:?} cannot name an OpenBao entry: an empty name, `.` and `..` are not path segments")]
    Segment {
        /// Which part of the path.
        part: Part,
        /// The value given (a name, never a secret).
        value: String,
    },
    /// No answer: the connection was refused or reset, or no answer came
    /// within [`super::REQUEST_TIMEOUT`].
    #[error("OpenBao at {addr} cannot be reached: {reason}")]
    Unavailable {
        /// `OPENBAO_ADDR`.
        addr: String,
        /// What happened.
        reason: String,
    },
    /// OpenBao answered `503` and says it is sealed.
    #[error("OpenBao at {addr} is sealed; it answers again once an operator unseals it")]
    Sealed {
        /// `OPENBAO_ADDR`.
        addr: String,
    },
    /// OpenBao answered that it cannot serve now (`429`, `503` other than
    /// sealed, `504`, or a `500`/`502` twice in a row): try again later, not
    /// before `retry_after` when it said so.
    #[error("OpenBao at {addr} cannot serve now ({status}){}; try again later", .retry_after.map(|a| format!(", asking to be tried again after {} s", a.as_secs())).unwrap_or_default())]
    Busy {
        /// `OPENBAO_ADDR`.
        addr: String,
        /// The HTTP status.
        status: u16,
        /// Its `Retry-After`.
        retry_after: Option<Duration>,
    },
    /// OpenBao answered with another status than the operation expects:
    /// `403` (the token's policy does not allow it, or the token is not
    /// valid), another `4xx`, a `5xx`, or a redirect (never followed).
    #[error("OpenBao refused to {action} {path}: {status}{message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// What was attempted (`write`, `read`, …).
        action: &'static str,
        /// The entry or folder, as OpenBao names it.
        path: String,
        /// `": "` and what OpenBao said, or empty.
        message: String,
    },
    /// OpenBao refused (`403`) an operation and also refuses to look the
    /// token up (`auth/token/lookup-self`, which both policies allow): the
    /// token expired, was revoked, or this OpenBao never knew it (rebuilt).
    /// Retrying does not help: the process needs a new `OPENBAO_TOKEN`.
    #[error("OpenBao at {addr} no longer accepts this process's token (expired, revoked or unknown): {action} {path} was refused; give the process a new OPENBAO_TOKEN")]
    TokenInvalid {
        /// `OPENBAO_ADDR`.
        addr: String,
        /// What was attempted.
        action: &'static str,
        /// The entry or folder, as OpenBao names it.
        path: String,
    },
    /// A success whose body is not what KV version 2 answers (an entry
    /// without a string `value`, a list without `keys`).
    #[error("OpenBao's answer to {action} {path} is not one Slipway understands: {reason}")]
    Malformed {
        /// What was attempted.
        action: &'static str,
        /// The entry or folder, as OpenBao names it.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl OpenBaoError {
    /// Why, as one word for machines (the api's `details.openbao.cause`,
    /// logs): `token_expired` (the token is no longer valid:
    /// [`OpenBaoError::TokenInvalid`]), `path_denied` (a `403` while the
    /// token is valid: its policy does not allow the path), `unreachable`,
    /// `sealed`, `rate_limited` (`429` past [`super::RATE_LIMIT_BUDGET`]), `busy`
    /// (another answer that passes with time), `refused` (any other
    /// status), `malformed`, `invalid_name`.
    pub fn cause(&self) -> &'static str {
        match self {
            Self::Segment { .. } => "invalid_name",
            Self::Unavailable { .. } => "unreachable",
            Self::Sealed { .. } => "sealed",
            Self::Busy { status: 429, .. } => "rate_limited",
            Self::Busy { .. } => "busy",
            Self::TokenInvalid { .. } => "token_expired",
            Self::Refused { status: 401 | 403, .. } => "path_denied",
            Self::Refused { .. } => "refused",
            Self::Malformed { .. } => "malformed",
        }
    }

    /// Whether asking again later may succeed unchanged: OpenBao could not
    /// be reached, is sealed, or answered that it cannot serve now.
    pub fn passes_with_time(&self) -> bool {
        matches!(self, Self::Unavailable { .. } | Self::Sealed { .. } | Self::Busy { .. })
    }

    /// OpenBao's `Retry-After`, when it gave one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Busy { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}
