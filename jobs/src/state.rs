//! Builds and the deployment state derived from them (ST-1).

use serde::{Deserialize, Serialize};

/// What a build does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BuildKind {
    /// Runs `core/effects/deploy`.
    Deploy,
    /// Runs `core/effects/destroy`.
    Destroy,
}

/// Where a build is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BuildStatus {
    /// Accepted, waiting for a worker (or for an earlier build of its deployment, ST-2).
    Queued,
    /// A worker runs its effect.
    Running,
    /// The effect succeeded.
    Succeeded,
    /// The effect failed, timed out, or could not start; see the build's reason.
    Failed,
    /// Stopped on request (before it ran, or while it ran).
    Cancelled,
    /// A newer submit of the same deployment made it pointless before it
    /// ran; it never runs.
    Superseded,
}

impl BuildStatus {
    /// True once the build can no longer change.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled | Self::Superseded)
    }
}

/// A deployment's state, derived from its latest build, never stored (ST-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeploymentState {
    /// No build, or the last destroy succeeded.
    Idle,
    /// A deploy is queued or running.
    Building,
    /// The last deploy succeeded.
    Active,
    /// A destroy is queued or running.
    Destroying,
    /// The last build failed.
    Failed,
}

impl DeploymentState {
    /// ST-1: the state given the build that decides it (`None`: no build
    /// yet): the latest build that ran or may still run
    /// ([`crate::store::builds::deciding`]); builds cancelled before they
    /// started and superseded ones changed nothing and do not count.
    ///
    /// A build cancelled while it ran counts as failed: the infrastructure
    /// is in an unknown, partly changed condition and the operator must act.
    pub fn derive(latest: Option<(BuildKind, BuildStatus)>) -> Self {
        use BuildKind::*;
        use BuildStatus::*;
        match latest {
            None => Self::Idle,
            Some((Deploy, Queued | Running)) => Self::Building,
            Some((Deploy, Succeeded)) => Self::Active,
            Some((Destroy, Queued | Running)) => Self::Destroying,
            Some((Destroy, Succeeded)) => Self::Idle,
            Some((_, Failed | Cancelled | Superseded)) => Self::Failed,
        }
    }
}

impl DeploymentState {
    /// Where the deployment channel ends (DL-3): `active`, `idle` or
    /// `failed`, states no build is on its way out of.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Active | Self::Idle | Self::Failed)
    }
}

macro_rules! text_enum {
    ($t:ty { $($v:ident => $s:literal),* $(,)? }) => {
        impl $t {
            /// The stored spelling.
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$v => $s),* }
            }
        }
        impl std::str::FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s { $($s => Ok(Self::$v),)* other => Err(format!("unknown {}: {other}", stringify!($t))) }
            }
        }
    };
}

text_enum!(BuildKind { Deploy => "deploy", Destroy => "destroy" });
text_enum!(DeploymentState {
    Idle => "idle",
    Building => "building",
    Active => "active",
    Destroying => "destroying",
    Failed => "failed",
});
text_enum!(BuildStatus {
    Queued => "queued",
    Running => "running",
    Succeeded => "succeeded",
    Failed => "failed",
    Cancelled => "cancelled",
    Superseded => "superseded",
});

#[cfg(test)]
mod tests {
    use super::*;
    use BuildKind::*;
    use BuildStatus::*;

    #[test]
    fn state_follows_the_latest_build() {
        let cases = [
            (None, DeploymentState::Idle),
            (Some((Deploy, Queued)), DeploymentState::Building),
            (Some((Deploy, Running)), DeploymentState::Building),
            (Some((Deploy, Succeeded)), DeploymentState::Active),
            (Some((Deploy, Failed)), DeploymentState::Failed),
            (Some((Destroy, Queued)), DeploymentState::Destroying),
            (Some((Destroy, Succeeded)), DeploymentState::Idle),
            (Some((Destroy, Failed)), DeploymentState::Failed),
        ];
        for (latest, want) in cases {
            assert_eq!(DeploymentState::derive(latest), want, "{latest:?}");
        }
    }
}
