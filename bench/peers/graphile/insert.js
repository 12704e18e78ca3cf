// Bulk-inserts N no-op jobs with workerUtils.addJobs, BATCH jobs per call (one
// transaction each, like the Slipway bench's push_tasks batches). As for every
// queue in scripts/bench: statistics are those of the empty table (VACUUM
// ANALYZE before the insert) and a CHECKPOINT follows it.
// Usage: node insert.js N [BATCH=5000]      prints one JSON line
const { makeWorkerUtils } = require("graphile-worker");
const { connectionString, logger, nowMs, Pool } = require("./common");

const N = parseInt(process.argv[2] || "20000", 10);
const BATCH = parseInt(process.argv[3] || "5000", 10);

(async () => {
  const pool = new Pool({ connectionString, max: 1 });
  await pool.query("vacuum analyze graphile_worker._private_jobs");
  await pool.query("vacuum analyze graphile_worker._private_job_queues");
  await pool.query("vacuum analyze graphile_worker._private_tasks");
  const utils = await makeWorkerUtils({ connectionString, logger });
  const t0 = nowMs();
  for (let start = 0; start < N; start += BATCH) {
    const specs = [];
    for (let i = start; i < Math.min(N, start + BATCH); i++) specs.push({ identifier: "noop", payload: { seq: i } });
    await utils.addJobs(specs);
  }
  const insertMs = nowMs() - t0;
  await utils.release();
  await pool.query("checkpoint");
  await pool.end();
  console.log(JSON.stringify({ queue: "graphile-worker", mode: "insert", jobs: N, batch: BATCH, insert_ms: Math.round(insertMs), insert_jobs_per_s: Math.round(N / (insertMs / 1000)) }));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
