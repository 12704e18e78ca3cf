//! `slipway-serve-bench`: the api and the worker as an operator runs them,
//! release binaries as child processes over loopback. `scripts/bench
//! --only reads` and `--only footprint` drive it; see `docs/BENCHMARKS.md`.
//!
//! ```text
//! slipway-serve-bench reads [--engines postgres,sqlite] [--small 100] [--big 100000] [--seconds 5]
//! slipway-serve-bench footprint [--engines sqlite,postgres] [--deploys 8] [--reads 500] [--idle 3]
//! slipway-serve-bench streams [--engines postgres,sqlite] [--deployments 1000] [--streams 10000] [--end-seconds 10]
//! ```
//!
//! - `reads` ([`reads`]): a database of `--small` and one of `--big`
//!   deployments seeded in bulk ([`seed`]), the five reads of issue 14 sent
//!   one at a time over one keep-alive connection to a release
//!   `slipway-api` on each, p50/p99; the plan of each read's statements on
//!   the big one; and the Q-3 admission count timed on both.
//! - `footprint` ([`footprint`]): start to ready, resident memory idle and
//!   after traffic of the api and of a worker, and a worker's start to its
//!   first claim.
//! - `streams` ([`streams`]): one api holding `--streams` deployment
//!   streams from this process: its memory per stream, CPU and database
//!   connections, a reconnect storm with `Last-Event-ID`, and the delay from
//!   each build's recorded end to every follower reading it.
//!
//! The result is one JSON line on stdout; progress goes to stderr.

mod footprint;
mod proc;
mod reads;
mod seed;
mod streams;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "slipway-serve-bench", about = "Reads at scale and footprint of the release binaries")]
struct Cli {
    #[command(subcommand)]
    part: Part,
}

#[derive(Subcommand)]
enum Part {
    /// Reads on a small and a big database, their plans, the admission count.
    Reads(reads::Args),
    /// Start-up times and resident memory of the api and a worker.
    Footprint(footprint::Args),
    /// 10,000 deployment streams on one api: memory, CPU, connections, delay, a reconnect storm.
    Streams(streams::Args),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let result = match Cli::parse().part {
        Part::Reads(args) => reads::run(args).await?,
        Part::Footprint(args) => footprint::run(args).await?,
        Part::Streams(args) => streams::run(args).await?,
    };
    println!("{result}");
    Ok(())
}
