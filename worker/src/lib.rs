//! `slipway-worker`'s library: the fleet worker ([`work`]), the one
//! place apalis's storage is configured ([`storage`]) and the process's
//! [`completer`] of apalis's job rows on PostgreSQL, which the queue
//! benchmark (`bench/queue`) builds its queue with. The binary
//! (`src/main.rs`) is the command line around it.

pub mod completer;
mod serve_metrics;
pub mod storage;
mod supervise;
pub mod work;
