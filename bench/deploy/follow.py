#!/usr/bin/env python3
"""The deploy bench's client (scripts/lib/bench-deploy): submits deployments
of the no-op module source and follows each on its deployment channel
(GET /deployments/{id}/events, server-sent events) until it is `active`, as
a front-end would. Standard library only.

Usage: follow.py BASE TOKEN SOURCE LABEL single RUNS
       follow.py BASE TOKEN SOURCE LABEL burst COUNT
       follow.py BASE TOKEN - LABEL reference FILE

`single`: RUNS deployments one after another (each submitted once the one
before is active). `burst`: COUNT deployments submitted at once (one thread
each, released together), with the machine's CPU use meanwhile (busy share,
and CPU seconds of the api, the workers, PostgreSQL and this client, from
/proc). Prints one JSON line: per deployment, the
submit's answer time, submit -> `active` as the client saw it, and the
build's own timings (GET /builds/{id}, `report.timings`), from which the
effect's run time is taken out. `reference`: the configuration in FILE
(examples/demo.json) with the built-in source, under a domain this Nix store
has never built (cold: every node's system and SBOM is built), then the same
again (warm); prints both builds' timings.
"""
import datetime
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cpu  # noqa: E402  (bench/cpu.py)


def connect(base):
    u = urllib.parse.urlsplit(base)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=120)


NOOP = {"domain": "bench.example.org"}


def deploy(base, token, source, dep_id, configuration=NOOP):
    """Submits `dep_id` and follows it to a terminal state; returns its figures."""
    body = {"configuration": configuration}
    if source != "-":
        body["module_source"] = source
    body = json.dumps(body)
    auth = {"Authorization": f"Bearer {token}"}
    conn = connect(base)
    t0 = time.perf_counter()
    e0 = time.time()
    retries = 0
    while True:
        conn.request("PUT", f"/deployments/{dep_id}", body, {**auth, "Content-Type": "application/json"})
        answer = conn.getresponse()
        accepted = json.loads(answer.read())
        # A busy api (its database connections all taken) answers 503: a
        # front-end tries again, and so does this client, counting it.
        if answer.status != 503 or retries >= 200:
            break
        retries += 1
        time.sleep(0.05)
    t_submit = time.perf_counter()
    if answer.status != 202:
        raise RuntimeError(f"submit of {dep_id} answered {answer.status}: {accepted}")
    build_id = accepted["build_id"]
    while True:
        conn.request("GET", f"/deployments/{dep_id}/events", headers={**auth, "Accept": "text/event-stream"})
        stream = conn.getresponse()
        if stream.status != 503 or retries >= 400:
            break
        stream.read()
        retries += 1
        time.sleep(0.05)
    if stream.status != 200:
        raise RuntimeError(f"events of {dep_id} answered {stream.status}")
    state = None
    while True:
        line = stream.fp.readline()
        if not line:
            break
        if line.startswith(b"data:"):
            event = json.loads(line[5:])
            state = event["state"]
            if event.get("build_id") == build_id and state in ("active", "failed"):
                break
    t_end = time.perf_counter()
    e_end = time.time()
    conn.close()
    conn = connect(base)
    conn.request("GET", f"/builds/{build_id}", headers=auth)
    build = json.loads(conn.getresponse().read())
    conn.close()
    timings = (build.get("report") or {}).get("timings") or {}
    effect = timings.get("nix_eval_ms", 0) + timings.get("nix_build_ms", 0) + timings.get("effect_ms", 0)
    to_active = (t_end - t0) * 1000
    epoch = lambda text: datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    # Around the build's wall time (same host, same clock): the submit up to
    # the build stored, and from its end written to `active` at the client.
    before = (epoch(build["queued_at"]) - e0) * 1000 if build.get("queued_at") else None
    after = (e_end - epoch(build["finished_at"])) * 1000 if build.get("finished_at") else None
    return {
        "before_stored_ms": before,
        "after_written_ms": after,
        "state": state,
        "retries": retries,
        "t0": t0,
        "t_end": t_end,
        "submit_ms": (t_submit - t0) * 1000,
        "to_active_ms": to_active,
        "effect_ms": effect,
        "overhead_ms": to_active - effect,
        "timings": timings,
    }


def pct(values, p):
    v = sorted(values)
    if not v:
        return None
    k = max(0, min(len(v) - 1, int(round(p / 100 * len(v) + 0.5)) - 1))
    return round(v[k], 3)


def summary(runs):
    def of(key):
        vals = [r[key] for r in runs]
        return {"p50": pct(vals, 50), "p99": pct(vals, 99), "max": round(max(vals), 3)}

    parts = ["queue_wait_ms", "claim_ms", "prepare_ms", "effect_ms", "collect_ms", "record_ms", "sbom_store_ms"]
    build_parts = {p: pct([r["timings"].get(p, 0) for r in runs], 50) for p in parts}
    return {
        "runs": len(runs),
        "failed": sum(1 for r in runs if r["state"] != "active"),
        "retries_503": sum(r["retries"] for r in runs),
        "submit_ms": of("submit_ms"),
        "to_active_ms": of("to_active_ms"),
        "effect_ms": of("effect_ms"),
        "overhead_ms": of("overhead_ms"),
        "before_stored_ms": of("before_stored_ms"),
        "after_written_ms": of("after_written_ms"),
        "build_parts_p50_ms": build_parts,
        "slowest": [slow(i, r) for i, r in sorted(enumerate(runs), key=lambda x: -x[1]["overhead_ms"])[:3]],
    }


def slow(i, r):
    """One of the slowest runs, part by part: where its overhead went."""
    parts = ["queue_wait_ms", "claim_ms", "prepare_ms", "collect_ms", "record_ms", "sbom_store_ms"]
    round_or_none = lambda v: None if v is None else round(v, 1)
    return {
        "index": i,
        "overhead_ms": round(r["overhead_ms"], 1),
        "submit_ms": round(r["submit_ms"], 1),
        "before_stored_ms": round_or_none(r["before_stored_ms"]),
        "after_written_ms": round_or_none(r["after_written_ms"]),
        **{p: r["timings"].get(p) for p in parts},
    }


def main(argv):
    if len(argv) != 7 or argv[5] not in ("single", "burst", "reference"):
        sys.exit(__doc__)
    base, token, source, label, mode = argv[1], argv[2], argv[3], argv[4], argv[5]
    stamp = f"{int(time.time() * 1000) % 100000000:08d}"
    if mode == "reference":
        configuration = json.load(open(argv[6]))
        configuration["domain"] = f"r{stamp}.example.org"
        out = {"label": label, "mode": mode}
        for kind in ("cold", "warm"):
            run = deploy(base, token, source, f"ref{stamp}", configuration)
            out[kind] = {k: run[k] for k in ("state", "submit_ms", "to_active_ms", "timings")}
        print(json.dumps(out))
        return
    n = int(argv[6])
    if mode == "single":
        runs = [deploy(base, token, source, f"s{stamp}-{i}") for i in range(n)]
        out = {"label": label, "mode": mode, **summary(runs)}
    else:
        runs = [None] * n
        errors = []
        gate = threading.Barrier(n)

        def one(i):
            try:
                gate.wait()
                runs[i] = deploy(base, token, source, f"b{stamp}-{i}")
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        before = cpu.snapshot()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cpu_use = cpu.used(before, cpu.settled(), client_pids=(str(os.getpid()),))
        if errors:
            sys.exit(f"{len(errors)} deployments failed: {errors[0]}")
        drain = (max(r["t_end"] for r in runs) - min(r["t0"] for r in runs)) * 1000
        out = {"label": label, "mode": mode, "drain_ms": round(drain, 1),
               "deploys_per_s": round(n / (drain / 1000), 1), "cpu": cpu_use, **summary(runs)}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv)
