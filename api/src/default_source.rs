//! The built-in module source's outputs, baked into the binary (MS-5).
//!
//! `scripts/gen-default-source` regenerates `api/default-source/` from
//! `nix/core` with Nix; `api/tests/it/default_source_parity.rs` rebuilds them
//! and fails on any difference. Public procedures serve only these.

use slipway_jobs::source::outputs::SourceOutputs;

/// `schema.json` of the default provider.
pub const SCHEMA: &str = include_str!("../default-source/schema.json");
/// `applications.json`.
pub const APPLICATIONS: &str = include_str!("../default-source/applications.json");
/// `renames.json`.
pub const RENAMES: &str = include_str!("../default-source/renames.json");
/// `meta.json`.
pub const META: &str = include_str!("../default-source/meta.json");

/// The parsed outputs. The committed files are checked by the parity test,
/// so a parse failure here is a build defect.
pub fn outputs() -> SourceOutputs {
    SourceOutputs::from_texts(SCHEMA, APPLICATIONS, RENAMES, META).expect("the committed default-source outputs parse")
}
