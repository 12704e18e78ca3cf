"""Enqueue→start latency: a worker runs idle in this process (LISTEN/NOTIFY);
from its own connection this script defers one job every SPACING_MS, noting
the time just before the call; the task notes when it starts. Same process,
same clock. Usage: latency.py [N=200] [SPACING_MS=20] [CONCURRENCY=10] [WARMUP=20]"""
import asyncio
import contextlib
import json
import sys

import psycopg

from bench_app import CONNINFO, PROBE, app, client_app, now_ms, summary

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
SPACING = int(sys.argv[2]) if len(sys.argv) > 2 else 20
CONCURRENCY = int(sys.argv[3]) if len(sys.argv) > 3 else 10
WARMUP = int(sys.argv[4]) if len(sys.argv) > 4 else 20


async def main():
    # No checkpoint pending from earlier measurements (as in every driver).
    with psycopg.connect(CONNINFO, autocommit=True) as c:
        c.execute("checkpoint")
    # The enqueuing side has its own app and connection, as a web process would.
    client = client_app()
    async with app.open_async(), client.open_async():
        noop = client.configure_task("noop", queue="bench")
        worker = asyncio.create_task(app.run_worker_async(concurrency=CONCURRENCY, wait=True, install_signal_handlers=False))
        await asyncio.sleep(0.5)
        for i in range(1, WARMUP + 1):
            await noop.defer_async(seq=-i)
            await asyncio.sleep(SPACING / 1000)
        for _ in range(2000):
            if PROBE["count"] >= WARMUP:
                break
            await asyncio.sleep(0.005)
        await asyncio.sleep(1)
        sent, commit = {}, []
        t0 = now_ms()
        for seq in range(N):
            await asyncio.sleep(max(0.0, (t0 + seq * SPACING - now_ms()) / 1000))
            t = now_ms()
            sent[seq] = t
            await noop.defer_async(seq=seq)
            commit.append(now_ms() - t)
        for _ in range(2000):
            if PROBE["count"] >= WARMUP + N:
                break
            await asyncio.sleep(0.005)
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker
    starts = PROBE["starts"]
    lat = [starts[s] - t for s, t in sent.items() if s in starts]
    print(json.dumps({
        "queue": "procrastinate", "mode": "latency", "jobs": N, "spacing_ms": SPACING, "concurrency": CONCURRENCY,
        "wakeup": "LISTEN/NOTIFY", "enqueue_to_start_ms": summary(lat), "enqueue_commit_ms": summary(commit),
        "missing": N - len(lat), "ok": len(lat) == N,
    }))


asyncio.run(main())
