// Enqueue→start latency: a worker runs idle (run(), woken by LISTEN/NOTIFY);
// from its own connection this script adds one job every SPACING_MS with
// graphile_worker.add_job, noting the time just before the call is sent; the
// task notes when it starts. Same process, same clock.
// Usage: node latency.js CONFIG [N=200] [SPACING_MS=20] [CONCURRENCY=10] [WARMUP=20]
const { run } = require("graphile-worker");
const { connectionString, nowMs, workerOptions, summary, Pool } = require("./common");

const [config = "default", nArg = "200", spacingArg = "20", concArg = "10", warmArg = "20"] = process.argv.slice(2);
const N = +nArg, SPACING = +spacingArg, CONCURRENCY = +concArg, WARMUP = +warmArg;
const sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

(async () => {
  const starts = new Map();
  const taskList = {
    lat: async (payload) => {
      const t = nowMs();
      if (!starts.has(payload.seq)) starts.set(payload.seq, t);
    },
  };
  const pool = new Pool({ connectionString, max: 1 });
  const client = await pool.connect();
  // No checkpoint pending from earlier measurements (as in every driver).
  await client.query("checkpoint");
  const runner = await run(workerOptions(config, CONCURRENCY), taskList);
  const add = (seq) => client.query({ name: "add", text: "select graphile_worker.add_job('lat', json_build_object('seq', $1::int))", values: [seq] });
  await sleep(500);
  // Warm-up: seq < 0, not counted.
  for (let i = 1; i <= WARMUP; i++) {
    await add(-i);
    await sleep(SPACING);
  }
  for (let waited = 0; starts.size < WARMUP && waited < 10000; waited += 5) await sleep(5);
  await sleep(1000);
  const sent = new Map();
  const commit = [];
  const t0 = nowMs();
  for (let seq = 0; seq < N; seq++) {
    await sleep(t0 + seq * SPACING - nowMs());
    const t = nowMs();
    sent.set(seq, t);
    await add(seq);
    commit.push(nowMs() - t);
  }
  for (let waited = 0; starts.size < WARMUP + N && waited < 10000; waited += 5) await sleep(5);
  client.release();
  await pool.end();
  await runner.stop();
  const lat = [];
  for (const [seq, t] of sent) if (starts.has(seq)) lat.push(starts.get(seq) - t);
  console.log(JSON.stringify({
    queue: "graphile-worker", mode: "latency", config, jobs: N, spacing_ms: SPACING, concurrency: CONCURRENCY,
    wakeup: "LISTEN/NOTIFY", enqueue_to_start_ms: summary(lat), enqueue_commit_ms: summary(commit),
    missing: N - lat.length, ok: lat.length === N,
  }));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
