#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod auth;
pub mod body_deadline;
pub mod database_health;
pub mod default_source;
pub mod error;
pub mod extract;
pub mod fd_limit;
pub mod idempotency;
pub mod keys;
pub mod limits;
pub mod middleware;
pub mod observe;
pub mod openapi;
pub mod precondition;
pub mod rotation;
pub mod router;
pub mod routes;
pub mod serve;
pub mod starting;
pub mod state;
pub mod storage_health;
pub mod stream_caps;
pub mod ui;

pub use router::app;
pub use state::{App, AppState};
