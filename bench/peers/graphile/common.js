// Shared by Slipway's graphile-worker drivers (scripts/bench).
// Connection: GW_DATABASE_URL (scripts/bench points it at a scratch database).
const { Logger } = require("graphile-worker");
const { Pool } = require("pg");
const { performance } = require("perf_hooks");

const connectionString = process.env.GW_DATABASE_URL || "postgres://postgres@127.0.0.1:5432/slipway_bench_graphile";

// Epoch milliseconds with sub-millisecond resolution, comparable across processes.
const nowMs = () => performance.timeOrigin + performance.now();

// Only warnings and errors, on stderr: stdout carries the JSON result.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`[graphile-worker ${level}] ${message}`);
});

// The two configurations measured:
//  default: the library's defaults, except concurrency (library default 1),
//           set to CONCURRENCY with maxPoolSize CONCURRENCY + 1.
//  batched: in addition, the batching settings graphile-worker documents for
//           its own performance test: a local queue of 500 jobs, completions
//           and failures flushed in batches with no added delay.
function workerOptions(config, concurrency) {
  const options = { connectionString, concurrency, maxPoolSize: concurrency + 1, logger, noHandleSignals: true };
  if (config === "batched") {
    options.preset = { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } };
  } else if (config !== "default") {
    throw new Error(`config must be default or batched, not ${config}`);
  }
  return options;
}

function percentile(sorted, p) {
  if (!sorted.length) return NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(Math.max(rank, 1), sorted.length) - 1];
}

function summary(values) {
  const s = [...values].sort((a, b) => a - b);
  const r = (x) => Math.round(x * 100) / 100;
  return { n: s.length, p50: r(percentile(s, 50)), p95: r(percentile(s, 95)), p99: r(percentile(s, 99)), max: r(s[s.length - 1]), min: r(s[0]) };
}

module.exports = { connectionString, nowMs, logger, workerOptions, summary, Pool };
