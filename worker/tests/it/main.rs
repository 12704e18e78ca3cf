//! The integration tests of `slipway-worker`, one binary with a module per
//! concern (one link of the whole stack instead of one per file). Run
//! one concern with `cargo test -p slipway-worker --test it <module>::`.

mod common;
mod origin;
mod tools;

mod admission;
mod backup_restore;
mod browser;
mod channel;
mod chaos;
mod clocks;
mod dashboard;
mod dry_run;
mod durability;
mod end_to_end;
mod fair_shares;
mod fleet_view;
mod hostile_effect;
mod hostile_eval;
mod hostile_fetch;
mod leaks;
mod local_problems;
mod local_run;
mod newer_database;
mod observability;
mod plans;
mod readiness;
mod rollouts;
mod run_migrate;
mod safe_change;
mod sandbox;
mod sbom_standard;
mod secrets;
mod sources;
mod startup;
mod storage_full;
mod systemd_units;
mod takeover;
mod upgrade;
mod webhooks;
