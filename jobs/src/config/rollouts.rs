//! What rollouts read (RO-1), on the api and the workers alike.

/// The bounds of a rollout ([`super::Config::rollouts`]).
#[derive(Debug, Clone)]
pub struct RolloutsConfig {
    /// `ROLLOUT_MAX_DEPLOYMENTS` (default 10000): the most deployments one
    /// `POST /rollouts` may name or select; a request over it is refused
    /// (`400 too_many_deployments`) before anything is read or checked.
    pub max_deployments: u32,
}
