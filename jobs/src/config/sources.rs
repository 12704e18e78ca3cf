//! Where module sources may come from and how their Nix runs are bounded
//! (MS-1, MS-6, MS-7, MS-8): read by the api (the `get_for` routes and a
//! submit's checks) and by workers (fetches, builds, the `nix` queue).

use std::path::PathBuf;
use std::time::Duration;

/// Module sources and the `nix` queue ([`super::Config::sources`]).
#[derive(Debug, Clone)]
pub struct SourcesConfig {
    /// `SLIPWAY_TRUSTED_SOURCES`: module-source allowlist (URL prefixes);
    /// `Some(vec![])` (the empty string) allows all.
    pub trusted_sources: Vec<String>,
    /// `SLIPWAY_ALLOW_PATH_SOURCES`: accept `path:` module sources over HTTP
    /// and fetch `git+file://` repositories (MS-1, SEC-3: local runs and
    /// tests only). Default `false`.
    pub allow_path_sources: bool,
    /// `SLIPWAY_DEFAULT_SOURCE_DIR`: the folder holding the built-in module
    /// source's `core/` that workers deploy a deployment without a source
    /// from; made absolute against the starting folder.
    pub default_source_dir: PathBuf,
    /// `SLIPWAY_SELF_SOURCE`: the self-pin (MS-8); unset: sources float.
    pub self_source: Option<String>,
    /// `SLIPWAY_PROVIDER`: the provider whose effects this worker runs,
    /// passed to them as `PROVIDER`. Default `local`, the reference
    /// source's only provider.
    pub provider: String,
    /// `NIX_TIMEOUT` (MS-7): one deadline covering a `nix`-queue job's
    /// fetch and build; default 300 s.
    pub nix_timeout: Duration,
    /// `NIX_SLOTS` (MS-7): schema builds and names evals running at once,
    /// fleet-wide; default 2.
    pub nix_slots: u32,
}
