//! The integration tests of `slipway-jobs`, one binary with a module per
//! concern (one link of the whole stack instead of one per file). Run
//! one concern with `cargo test -p slipway-jobs --test it <module>::`.

mod builds;
mod callback_push;
mod callback_urls;
mod cases_match_shared;
mod channel_events;
mod containment;
mod doc_paths;
mod fleet;
mod git_fetch;
mod group_commit;
mod lifecycle;
mod migration_cases;
mod notifications;
mod openbao;
mod openbao_tokens;
mod postgres_tcp;
mod postgres_tls;
mod queue_wakeups;
mod read_indexes;
mod readiness;
mod sbom_check;
mod sbom_real_tools;
mod sbom_store;
mod schema_formats;
mod secrets_check;
mod strings;
mod submit_path;
mod submit_statements;
mod timings;
mod webhook_store;
