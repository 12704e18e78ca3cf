//! The integration tests of `slipway-api`, one binary with a module per
//! concern (one link of the whole stack instead of one per file). Run
//! one concern with `cargo test -p slipway-api --test it <module>::`.

mod common;
mod route_table;

mod auth;
mod auth_matrix;
mod cors;
mod dashboard;
mod database_start;
mod default_source_parity;
mod delete_callbacks;
mod deployments;
mod drafts;
mod error_shape;
mod fd_limit;
mod guides;
mod idempotency;
mod metrics;
mod openapi;
mod operations;
mod public;
mod quickstart;
mod script_help;
mod secrets;
mod shutdown;
mod sqlite_wal;
mod stream_limits;
mod stream_tickets;
mod submit;
mod tenants;
mod token_keys;
mod unknown_parameters;
mod validation;
