//! Support for tests that run against both engines (issue: every storage
//! test runs on SQLite and on PostgreSQL, each in its own database).
//!
//! [`TestDatabase::new`] makes a fresh SQLite file in a temporary folder, or
//! a fresh PostgreSQL database on the server named by
//! `SLIPWAY_TEST_POSTGRES` (default `postgres://postgres@127.0.0.1:5432/postgres`),
//! dropped again when the value is dropped. [`on_both_engines!`] turns one
//! `async fn name(engine: Engine)` into two tests, `name::sqlite` and
//! `name::postgres`.

mod database;
mod openbao;
mod processes;
mod sources;
mod stub_server;
mod wait;
mod world;

pub use database::{migrated_before, postgres_admin_url, TestDatabase};
pub use openbao::{closed_loopback_port, TestOpenBao};
pub use processes::{
    free_port, newest, process_runs, processes, processes_in_pid_namespace, processes_with, slipway_command, start,
    Process, Running,
};
pub use sources::{checker, sleepy_nix_source, source_with_deploy, AnySource, SLEEPY_BUILDER_SECS};
pub use stub_server::{Behaviour, Reply, StubServer};
pub use wait::{poll, wait_for};
pub use world::{claim_as, record_success, submit_demo, submit_demo_if, world, World};

use std::path::PathBuf;

/// Turns each `async fn name(engine: Engine)` into the tests `name::sqlite`
/// and `name::postgres`.
#[macro_export]
macro_rules! on_both_engines {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test]
                async fn sqlite() {
                    super::$name($crate::store::Engine::Sqlite).await
                }
                #[tokio::test]
                async fn postgres() {
                    super::$name($crate::store::Engine::Postgres).await
                }
            }
        )*
    };
}

/// The repository's root folder.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `examples/demo.json`, the configuration of the quickstart's demo.
pub fn demo() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(repo().join("examples/demo.json")).expect("examples/demo.json"))
        .expect("examples/demo.json is JSON")
}
