//! What only a worker reads: the queues it serves, its build slots, the
//! effects' deadlines, the readiness probes' reach and the retention.

use std::time::Duration;

/// A worker's settings ([`super::Config::worker`]); the api ignores them.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// `SLIPWAY_QUEUES`: the queues this worker serves, of `builds`,
    /// `nix` and `maintenance`; default all. `--queues` overrides it.
    pub queues: Vec<String>,
    /// `BUILD_SLOTS`: concurrent builds per worker (§6).
    pub build_slots: u32,
    /// `BUILD_PREFETCH`: build jobs a worker claims from the queue at once;
    /// `None`: as many as it has slots. More than the slots makes a worker
    /// with many short builds drain faster (one claim and one acknowledgement
    /// per batch); the jobs it holds wait for one of its slots, not for
    /// another worker.
    pub build_prefetch: Option<u32>,
    /// `DEPLOY_TIMEOUT` (§6).
    pub deploy_timeout: Duration,
    /// `DESTROY_TIMEOUT` (§6).
    pub destroy_timeout: Duration,
    /// `DEPLOY_SBOM_TIMEOUT`, passed to the deploy effect.
    pub deploy_sbom_timeout: Duration,
    /// `READY_TIMEOUT` (§10): how long after a successful deploy its
    /// instances are probed before those not ready are `not_ready`.
    pub ready_timeout: Duration,
    /// `RETENTION`.
    pub retention: Duration,
    /// `SLIPWAY_READINESS_CONNECT`: the `connect` addresses a module
    /// source's `meta.readiness` may name (SEC-3: the probe goes from the
    /// worker's network, not from a sandbox), each `<ip>:<port>` or
    /// `http://<host>:<port>` as the source writes it; empty (the empty
    /// string in the file) allows any. Default: the local provider's front
    /// door, `http://127.0.0.1:8470`.
    pub readiness_connect: Vec<String>,
}
