//! The integration tests of `slipway-cli`, one binary with a module per
//! concern (one link of the whole stack instead of one per file). Run
//! one concern with `cargo test -p slipway-cli --test it <module>::`.

mod common;

mod cli;
mod rollouts;
mod safe_change;
mod terminal;
mod webhook;
