//! Why a build exists and who asked for it (the run history, PRODUCT.md
//! §13 "Safe change"): its [`Trigger`] and its [`Provenance`], stored on
//! the build (`builds.trigger_kind`, `builds.provenance`). Never a secret
//! value: secrets appear by name and KV version only.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Why a build was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// A front-end's `PUT /deployments/{id}`.
    Submit,
    /// A front-end's `DELETE /deployments/{id}`.
    Delete,
    /// A plan: `PUT /deployments/{id}?dry_run=true`.
    DryRun,
    /// `POST /deployments/{id}/apply`: a plan activated.
    Apply,
    /// `POST /deployments/{id}/rollback`.
    Rollback,
    /// A failed health gate's rollback to the previous successful build.
    AutoRollback,
    /// A wave of a rollout (`POST /rollouts`, RO-1): the rollout's id is
    /// the build's `provenance.rollout`.
    Rollout,
}

impl Trigger {
    /// Every trigger, in the order the history's filter lists them.
    pub const ALL: [Trigger; 7] =
        [Self::Submit, Self::Delete, Self::DryRun, Self::Apply, Self::Rollback, Self::AutoRollback, Self::Rollout];

    /// The stored and wire name (`auto_rollback`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Submit => "submit",
            Self::Delete => "delete",
            Self::DryRun => "dry_run",
            Self::Apply => "apply",
            Self::Rollback => "rollback",
            Self::AutoRollback => "auto_rollback",
            Self::Rollout => "rollout",
        }
    }

    /// The trigger of a build stored before triggers were recorded: a
    /// destroy was a delete, a dry run a plan, anything else a submit.
    pub fn of_legacy(kind: crate::state::BuildKind, dry_run: bool) -> Self {
        match (kind, dry_run) {
            (crate::state::BuildKind::Destroy, _) => Self::Delete,
            (_, true) => Self::DryRun,
            _ => Self::Submit,
        }
    }

    /// Whether the build it makes rolls the deployment back.
    pub fn is_rollback(self) -> bool {
        matches!(self, Self::Rollback | Self::AutoRollback)
    }
}

impl std::str::FromStr for Trigger {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL.into_iter().find(|t| t.as_str() == s).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|t| t.as_str()).collect();
            format!("unknown trigger {}: one of {}", crate::id::quoted(s), names.join(", "))
        })
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who asked for a build: the token's `sub` and `iss`, and the `Origin`
/// header when a browser sent the request. `None` fields were not given
/// (a local run has none; a build of an automatic rollback carries the
/// requester of the build whose gate failed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RequestedBy {
    /// The token's `sub`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub sub: Option<String>,
    /// The token's `iss`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub iss: Option<String>,
    /// The request's `Origin` header, when a browser sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub origin: Option<String>,
    /// FS-1: the tenant the build is queued for (the token's tenant claim,
    /// `SLIPWAY_TENANT_CLAIM`), when it has one; otherwise its `iss` and
    /// `sub` are. Kept in the build's `tenant` column, not in its history.
    #[serde(skip)]
    pub tenant: Option<String>,
}

impl RequestedBy {
    /// The tenant a build asked for by this requester is queued for
    /// (FS-1): the tenant claim, else `iss` and `sub` joined by a newline.
    pub fn tenant(&self) -> String {
        match &self.tenant {
            Some(t) => t.clone(),
            None => format!("{}\n{}", self.iss.as_deref().unwrap_or(""), self.sub.as_deref().unwrap_or("")),
        }
    }
}

/// The health gate a deploy waits for before it succeeds: every deployed
/// instance `ready` within `timeout_ms`, else the build fails
/// `health_gate` (and, with `rollback`, the deployment is rolled back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HealthGate {
    /// How long the instances have to become ready, in milliseconds.
    pub timeout_ms: u64,
    /// Roll back to the previous successful build when the gate fails.
    pub rollback: bool,
}

impl HealthGate {
    /// The longest gate: a day.
    pub const LONGEST: std::time::Duration = std::time::Duration::from_secs(86_400);

    /// A gate of `timeout` (a duration as the settings write it: `90s`,
    /// `5m`, `1h`, or whole seconds), 1 s to a day; why not otherwise.
    pub fn new(timeout: &str, rollback: bool) -> Result<Self, String> {
        let d = crate::config::parse_duration(timeout)
            .filter(|d| *d >= std::time::Duration::from_secs(1) && *d <= Self::LONGEST)
            .ok_or_else(|| {
                format!(
                    "the health gate's timeout {} is not a duration from 1s to 24h (such as 90s, 5m or 1h)",
                    crate::id::quoted(timeout)
                )
            })?;
        Ok(Self { timeout_ms: d.as_millis() as u64, rollback })
    }

    /// The `HEALTH_GATE` setting: `<timeout>` or `<timeout>,rollback`.
    pub fn from_setting(value: &str) -> Result<Self, String> {
        match value.split_once(',') {
            None => Self::new(value.trim(), false),
            Some((timeout, "rollback")) => Self::new(timeout.trim(), true),
            Some((_, other)) => Err(format!("unknown part {}: expected rollback", crate::id::quoted(other))),
        }
    }
}

/// What a plan was made from: an apply is refused (`409 plan_stale`) when
/// any of it moved, and past `expires_at` (`410 plan_expired`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PlanInputs {
    /// The deployment's ST-3 version when the plan was made (every submit,
    /// apply and rollback raises it).
    pub deployment_version: i64,
    /// The deployment's active build then (its latest successful deploy),
    /// if any.
    #[schema(required = true)]
    pub active_build: Option<String>,
    /// The operator secrets' KV versions then (`<application>.<field>` →
    /// version), which an apply reads.
    pub secret_versions: BTreeMap<String, u64>,
    /// The fields the plan's configuration gave new values for: a plan
    /// never stores a value, so such a plan cannot be applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_values_given: Vec<String>,
    /// SHA-256 (hex) of the migrated configuration planned.
    pub configuration_sha256: String,
    /// Unix ms after which the plan can no longer be applied (`PLAN_TTL`).
    pub expires_at: i64,
    /// Whether its module source declares the `plan` capability
    /// (`meta.json`): its deploy effect refuses to activate other systems
    /// than an apply expects. A plan of a source without it cannot be applied.
    #[serde(default)]
    pub source_supports_plans: bool,
}

/// What a build records besides its configuration: who asked, what it
/// was made from, what it must activate and what it waits for. Stored as
/// JSON in `builds.provenance`; absent fields were not given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// Who asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<RequestedBy>,
    /// The plan an apply activates, or the build a rollback returns to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub based_on: Option<String>,
    /// Node name → the system store path this build must activate (an
    /// apply: the plan's; the effect refuses to activate anything else).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_systems: Option<BTreeMap<String, String>>,
    /// A plan's inputs (a dry run only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanInputs>,
    /// The health gate the deploy waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_gate: Option<HealthGate>,
    /// The names eval (EV-1) of its configuration, as the deployment's
    /// snapshot holds it, so a rollback to this build restores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Value>,
    /// TF-1 domain of its configuration, for the same reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// The rollout that queued it (trigger `rollout`, RO-1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<String>,
}

impl Provenance {
    /// Whether nothing is recorded (stored as NULL).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}
