//! `slipway-worker`'s library: the fleet worker ([`work`]), and the one
//! place apalis's storage is configured ([`storage`]), which the queue
//! benchmark (`bench/queue`) builds its queue with. The binary
//! (`src/main.rs`) is the command line around it.

mod serve_metrics;
pub mod storage;
mod supervise;
pub mod work;
