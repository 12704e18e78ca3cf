#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod config;
pub mod effect;
pub mod failpoint;
pub mod id;
pub mod jobs;
pub mod migrate;
pub mod nix;
pub mod source;
pub mod state;
pub mod store;
pub mod submit;
pub mod test_support;
pub mod validate;
