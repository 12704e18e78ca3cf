// Drains the queued no-op jobs with PROCS worker processes (runOnce: work until
// no job is left, then exit), each with CONCURRENCY, in CONFIG (default|batched).
// jobs_per_s = N / (last process done − first job started), the definition the
// Slipway bench uses; jobs_per_s_wall counts from the launch of the processes.
// Usage: node drain.js PROCS CONCURRENCY CONFIG N      prints one JSON line
// (internally re-runs itself as `node drain.js --child CONCURRENCY CONFIG`)
const { spawn } = require("child_process");
const { runOnce } = require("graphile-worker");
const { connectionString, nowMs, workerOptions, Pool } = require("./common");

async function child(concurrency, config) {
  let count = 0;
  let first = 0;
  const taskList = {
    noop: async () => {
      if (!first) first = nowMs();
      count++;
    },
  };
  await runOnce(workerOptions(config, concurrency), taskList);
  // runOnce resolves once its jobs' completions are written.
  console.log(JSON.stringify({ count, first, done: nowMs() }));
}

function runChild(concurrency, config) {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [__filename, "--child", String(concurrency), config], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    p.stdout.on("data", (d) => (out += d));
    p.on("exit", (code) => (code === 0 ? resolve(JSON.parse(out.trim().split("\n").pop())) : reject(new Error(`worker process exited with ${code}`))));
  });
}

async function main(procs, concurrency, config, n) {
  const launch = nowMs();
  const results = await Promise.all(Array.from({ length: procs }, () => runChild(concurrency, config)));
  const pool = new Pool({ connectionString, max: 1 });
  const { rows } = await pool.query("select count(*)::int as left from graphile_worker._private_jobs");
  await pool.end();
  const ran = results.reduce((s, r) => s + r.count, 0);
  const firsts = results.filter((r) => r.first).map((r) => r.first);
  const first = Math.min(...firsts);
  const done = Math.max(...results.map((r) => r.done));
  const drainMs = done - first;
  console.log(JSON.stringify({
    queue: "graphile-worker", mode: "drain", config, jobs: n, procs, concurrency,
    jobs_run: ran, per_proc: results.map((r) => r.count), jobs_left: rows[0].left,
    first_job_after_launch_ms: Math.round(first - launch),
    drain_ms: Math.round(drainMs), jobs_per_s: Math.round(ran / (drainMs / 1000)),
    wall_ms: Math.round(done - launch), jobs_per_s_wall: Math.round(ran / ((done - launch) / 1000)),
    ok: ran === n && rows[0].left === 0,
  }));
}

const args = process.argv.slice(2);
const run = args[0] === "--child" ? child(+args[1], args[2]) : main(+args[0], +args[1], args[2], +args[3]);
run.catch((e) => {
  console.error(e);
  process.exit(1);
});
