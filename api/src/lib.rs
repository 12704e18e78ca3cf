#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod app;
pub mod auth;
pub mod body_deadline;
pub mod database_health;
pub mod default_source;
pub mod error;
pub mod extract;
pub mod keys;
pub mod observe;
pub mod openapi;
pub mod rotation;
pub mod routes;
pub mod serve;
pub mod starting;
pub mod storage_health;
pub mod stream_caps;
pub mod ui;

pub use app::{app, App, AppState};
