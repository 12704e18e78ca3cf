"""Drains the queued no-op jobs with PROCS worker processes (wait=False: work
until no job is left, then exit), each with CONCURRENCY, procrastinate's
defaults otherwise (LISTEN/NOTIFY on, jobs kept: delete_jobs=never).
jobs_per_s = N / (last process done − first job started), as in the Slipway
bench. Usage: drain.py PROCS CONCURRENCY N    prints one JSON line
(internally re-runs itself as `drain.py --child CONCURRENCY`)"""
import asyncio
import json
import subprocess
import sys

import psycopg

from bench_app import CONNINFO, PROBE, app, now_ms


async def child(concurrency: int):
    async with app.open_async():
        await app.run_worker_async(concurrency=concurrency, wait=False, install_signal_handlers=False)
    print(json.dumps({"count": PROBE["count"], "first": PROBE["first"], "done": now_ms()}))


def main(procs: int, concurrency: int, n: int):
    launch = now_ms()
    children = [subprocess.Popen([sys.executable, __file__, "--child", str(concurrency)], stdout=subprocess.PIPE, text=True)
                for _ in range(procs)]
    results = []
    for p in children:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"worker process exited with {p.returncode}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    with psycopg.connect(CONNINFO) as c:
        left = c.execute("select count(*) from procrastinate_jobs where status in ('todo', 'doing')").fetchone()[0]
        succeeded = c.execute("select count(*) from procrastinate_jobs where status = 'succeeded'").fetchone()[0]
    ran = sum(r["count"] for r in results)
    first = min(r["first"] for r in results if r["first"])
    done = max(r["done"] for r in results)
    print(json.dumps({
        "queue": "procrastinate", "mode": "drain", "jobs": n, "procs": procs, "concurrency": concurrency,
        "jobs_run": ran, "per_proc": [r["count"] for r in results], "jobs_left": left, "succeeded_rows": succeeded,
        "first_job_after_launch_ms": round(first - launch),
        "drain_ms": round(done - first), "jobs_per_s": round(ran / ((done - first) / 1000)),
        "wall_ms": round(done - launch), "jobs_per_s_wall": round(ran / ((done - launch) / 1000)),
        "ok": ran == n and left == 0 and succeeded == n,
    }))


if sys.argv[1] == "--child":
    asyncio.run(child(int(sys.argv[2])))
else:
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
