"""Bulk-inserts N no-op jobs with batch_defer_async, BATCH per call (one
transaction each, like the Slipway bench's push_tasks batches). As for every
queue in scripts/bench: statistics are those of the empty table (VACUUM
ANALYZE before the insert) and a CHECKPOINT follows it.
Usage: insert.py N [BATCH=5000]   prints one JSON line"""
import asyncio
import json
import sys
import time

import psycopg

from bench_app import CONNINFO, app, noop

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
BATCH = int(sys.argv[2]) if len(sys.argv) > 2 else 5000


async def main():
    with psycopg.connect(CONNINFO, autocommit=True) as c:
        c.execute("vacuum analyze procrastinate_jobs")
    async with app.open_async():
        t0 = time.perf_counter()
        for start in range(0, N, BATCH):
            await noop.batch_defer_async(*[{"seq": i} for i in range(start, min(N, start + BATCH))])
        insert_ms = (time.perf_counter() - t0) * 1000
    with psycopg.connect(CONNINFO, autocommit=True) as c:
        c.execute("checkpoint")
    print(json.dumps({"queue": "procrastinate", "mode": "insert", "jobs": N, "batch": BATCH,
                      "insert_ms": round(insert_ms), "insert_jobs_per_s": round(N / (insert_ms / 1000))}))


asyncio.run(main())
