"""The procrastinate app of Slipway's procrastinate drivers: a no-op task.

Connection: PROC_DATABASE_URL (scripts/bench points it at a scratch database).
"""
import os
import time

from procrastinate import App, PsycopgConnector

CONNINFO = os.environ.get("PROC_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/slipway_bench_procrastinate")
app = App(connector=PsycopgConnector(conninfo=CONNINFO))



def client_app() -> App:
    """A second app with a single connection: the enqueuing side of latency.py."""
    return App(connector=PsycopgConnector(conninfo=CONNINFO, min_size=1, max_size=1))


# What the task records, per process.
PROBE = {"count": 0, "first": 0.0, "starts": {}}


def now_ms() -> float:
    return time.time() * 1000.0


@app.task(name="noop", queue="bench")
async def noop(seq: int) -> None:
    t = now_ms()
    if not PROBE["first"]:
        PROBE["first"] = t
    PROBE["count"] += 1
    PROBE["starts"].setdefault(seq, t)


def summary(values):
    s = sorted(values)
    if not s:
        return {"n": 0}

    def pct(p):
        import math
        rank = math.ceil(p / 100 * len(s))
        return round(s[min(max(rank, 1), len(s)) - 1], 2)

    return {"n": len(s), "p50": pct(50), "p95": pct(95), "p99": pct(99), "max": round(s[-1], 2), "min": round(s[0], 2)}
