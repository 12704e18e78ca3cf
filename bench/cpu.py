#!/usr/bin/env python3
"""CPU time by who spends it, from /proc (Linux), for the benchmarks: the
machine's busy share between two snapshots and the CPU seconds of each group
of processes (the api, the workers, PostgreSQL, the load client, the rest).

A process's figure is its own and its reaped children's time (utime, stime,
cutime, cstime; stat(5) fields 14 to 17), so a PostgreSQL backend that ends
inside the window is counted through the postmaster that reaps it.

As a module: `snapshot()` and `used(before, after, client_pids=...)`.
As a command (scripts/lib/bench-submit, scripts/bench):
  cpu.py run FILE -- COMMAND [ARG...]
      runs COMMAND (its output passes through; exits with its status) and
      writes to FILE one JSON object: busy_pct, cores, and CPU seconds by
      group over COMMAND's run, COMMAND itself (with its children) being
      the client: the load generator, wrk or pgbench
"""
import json
import os
import resource
import subprocess
import sys
import time

# (command-name prefix, group); the first prefix that matches wins.
GROUPS = (("slipway-api", "api"), ("slipway-worke", "workers"), ("postgres", "postgres"))


def snapshot():
    """Machine-wide busy and idle ticks, and CPU ticks per process."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    procs = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
        except OSError:
            continue
        comm = text[text.index("(") + 1:text.rindex(")")]
        rest = text[text.rindex(")") + 2:].split()
        procs[pid] = (comm, sum(int(x) for x in rest[11:15]))
    return {"total": sum(fields[:8]), "idle": fields[3] + fields[4], "procs": procs}


def settled():
    """A snapshot taken once no process has started or ended since the one
    before it (up to 2 s). A snapshot reads each process in turn, so a
    process reaped while it runs is lost from it when its parent was read
    first: a PostgreSQL backend ends just after its client closes the
    connection, and a snapshot taken as pgbench exits missed half of the
    server's work."""
    last = snapshot()
    for _ in range(100):
        time.sleep(0.02)
        snap = snapshot()
        if snap["procs"].keys() == last["procs"].keys():
            return snap
        last = snap
    return last


def used(before, after, client=(), client_pids=()):
    """Busy share of the machine between two snapshots (percent of every
    core), and CPU seconds by group: api, workers, postgres, client (the
    processes whose command name is in `client`, or whose pid is in
    `client_pids`) and other."""
    hz = os.sysconf("SC_CLK_TCK")
    total = after["total"] - before["total"]
    seconds = {"api": 0.0, "workers": 0.0, "postgres": 0.0, "client": 0.0, "other": 0.0}
    for pid, (comm, ticks) in after["procs"].items():
        spent = ticks - before["procs"].get(pid, (comm, 0))[1]
        if comm in client or pid in client_pids:
            group = "client"
        else:
            group = next((g for prefix, g in GROUPS if comm.startswith(prefix)), "other")
        seconds[group] += spent / hz
    return {
        "busy_pct": round(100 * (1 - (after["idle"] - before["idle"]) / total), 1) if total else None,
        "cores": os.cpu_count(),
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
    }


def main(argv):
    if len(argv) >= 5 and argv[1] == "run" and argv[3] == "--":
        before = snapshot()
        start = resource.getrusage(resource.RUSAGE_CHILDREN)
        status = subprocess.call(argv[4:])
        end = resource.getrusage(resource.RUSAGE_CHILDREN)
        result = used(before, settled(), client_pids=(str(os.getpid()),))
        # This process's own ticks hold the command's once reaped: the
        # client's figure is the command's usage alone.
        result["seconds"]["client"] = round(
            (end.ru_utime - start.ru_utime) + (end.ru_stime - start.ru_stime), 3)
        with open(argv[2], "w") as f:
            json.dump(result, f)
        return status
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
