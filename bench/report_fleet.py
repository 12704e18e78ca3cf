#!/usr/bin/env python3
"""Renders the fleet section of docs/BENCHMARKS.md from the JSON lines of
`slipway-fleet-bench` (one per fleet size), and fits the capacity model.

Usage: report_fleet.py RESULT_JSONL COMMAND GIT_STATE QUIET [--splice DOC]
  Prints the section (between its marker comments). With --splice, replaces
  the section in DOC (or appends it when DOC has none).

The model (docs/OPERATOR-GUIDE.md, "Sizing PostgreSQL for a fleet"):
PostgreSQL's CPU, in cores, is base + W x c_idle + B x (c_build + W x
c_wake) for W workers and B builds a second: each new job wakes every idle
worker of its queue, and each wake is a fetch, so a build's cost grows with
the fleet. base and c_idle come from the idle windows of the smallest and the
largest fleet (a line through the two); c_build and c_wake from their loaded
windows, each less its own idle window, per build finished (a line through
the two). The fleet sizes between them are predicted from those coefficients
and their measured build rate, and compared with their measurement: the bar
is the prediction within 25 % of the measured CPU. WAL bytes a second follow
the same shape.
"""
import json
import subprocess
import sys
import time

from splice import splice as splice_section

BEGIN = "<!-- scripts/bench: fleet section; `scripts/bench --only fleet` rewrites it -->"
END = "<!-- scripts/bench: end of the fleet section -->"
BAR_PCT = 25


def rate(window, key):
    """`key` of a window per second of it."""
    return window[key] / window["seconds"]


def per_build(r, key):
    """`key` a build: the loaded window's rate less the idle window's, per
    build finished a second."""
    b = r["loaded"]["builds_per_s"]
    return (rate(r["loaded"], key) - rate(r["idle"], key)) / b if b else float("nan")


def line(x0, y0, x1, y1):
    """(intercept, slope) of the line through two points."""
    slope = (y1 - y0) / (x1 - x0)
    return y0 - x0 * slope, slope


def fit(results, key):
    """(base, c_idle, c_build, c_wake) of `key`, from the smallest and the
    largest fleet."""
    lo, hi = results[0], results[-1]
    base, c_idle = line(lo["workers"], rate(lo["idle"], key), hi["workers"], rate(hi["idle"], key))
    c_build, c_wake = line(lo["workers"], per_build(lo, key), hi["workers"], per_build(hi, key))
    return base, c_idle, c_build, c_wake


def predict(model, workers, builds_per_s):
    base, c_idle, c_build, c_wake = model
    return base + workers * c_idle + builds_per_s * (c_build + workers * c_wake)


def builds_per_core(model, workers):
    """Builds a second one core carries beside `workers` idle workers."""
    base, c_idle, c_build, c_wake = model
    return (1 - base - workers * c_idle) / (c_build + workers * c_wake)


def pct(x):
    return f"{100 * x:.1f} %"


def kb(x):
    return f"{x / 1024:.1f} KB"


def render(results, command, git, quiet):
    results = sorted(results, key=lambda r: r["workers"])
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    first = results[0]
    cpu_model = fit(results, "pg_cpu_s")
    wal_model = fit(results, "wal_bytes")
    base, c_idle, c_build, c_wake = cpu_model
    w_base, w_idle, w_build, w_wake = wal_model
    sizes = ", ".join(f"{r['workers']:,}" for r in results)
    lines = [
        BEGIN,
        "",
        "## How big a fleet one PostgreSQL coordinates",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `{command}` (code at {git}); "
        f"{cpu}, {first['cores']} cores; {rustc}; {first['profile']} build; "
        + ("a quiet machine." if quiet == "yes" else "**the machine was not quiet** (other work ran): "
           "PostgreSQL's CPU is its own processes' time, steadier than wall time, but contention inflates it."),
        "",
        f"`bench/fleet` (`slipway-fleet-bench`) runs the database side of {sizes} worker processes in one process, "
        "each with its own identity, without Nix: per simulated worker one apalis worker per database queue "
        "(`builds`, `nix`, `callbacks`, `readiness`, `rollouts`) built by the worker's own "
        "`QueueSettings::postgres`, so apalis registers, beats, looks for orphaned jobs and polls as in "
        f"`slipway-worker work`, with `SLIPWAY_HEARTBEAT={first['heartbeat_s']}s` and "
        f"`SLIPWAY_POSTGRES_POLL={first['poll_ms'] / 1000:g}s` (the defaults are 5 s and 1 s: 1,000 workers "
        "on them would need several PostgreSQL cores for their polls and beats alone, see the operator guide); "
        "Slipway's keep-alive every half heartbeat; the clock read every minute. Builds come in through the "
        "submit's own transaction (`store::submit`), are claimed and recorded by the build frame's store calls "
        f"(one log chunk, an SBOM of {first['components']} components of which a few change each build, the "
        "run report, readiness rows, the readiness job, the next dispatch, the channel event) and 'run' as a "
        f"sleep of {first['build_ms'] / 1000:g} s on {first['slots']} build slots per worker; the readiness job "
        "makes one round that finds the instance ready. Each fleet size gets a fresh database. "
        "**Idle**: no builds. **Loaded**: builds submitted at "
        f"{first['rate']:g} a second whatever the fleet's size, measured after a warm-up. "
        "*PostgreSQL CPU* is the CPU time of the server's backends serving the bench's database "
        "(`/proc/PID/schedstat`), in cores (CPU seconds a second); *WAL* is `pg_current_wal_lsn()`'s advance "
        "(server-wide: *other commits* says whether anything else wrote meanwhile). Per build is the loaded "
        "window less the idle window of the same fleet, divided by the builds finished in the window. "
        "The simulated workers share their connections: worker *i* uses pool *i mod P*, each pool with its own "
        "LISTEN (a real worker holds one LISTEN and up to 16 pooled connections; see the operator guide for "
        "what a fleet past `max_connections` needs).",
        "",
        "| workers | connections | idle: PostgreSQL CPU | per idle worker a minute: CPU, WAL, transactions "
        "| loaded: offered, finished builds/s | loaded: PostgreSQL CPU | per build: CPU, WAL, transactions "
        "| claim wait p50 / p99 | left queued | simulator CPU, machine busy |",
        "| ---: | ---: | ---: | --- | --- | ---: | --- | --- | ---: | --- |",
    ]
    for r in results:
        idle, loaded, n = r["idle"], r["loaded"], r["workers"]
        b = loaded["builds_per_s"]
        i_cpu, l_cpu = rate(idle, "pg_cpu_s"), rate(loaded, "pg_cpu_s")
        per_build_cpu = per_build(r, "pg_cpu_s")
        per_build_wal = per_build(r, "wal_bytes")
        wait = loaded["claim_wait_ms"]
        wait_text = f"{wait['p50']:.0f} / {wait['p99']:.0f} ms" if wait["n"] else "—"
        lines.append(
            f"| {n:,} | {idle['pg_backends']} ({r['pools']} pools) | {pct(i_cpu)} of a core "
            f"| {1000 * 60 * i_cpu / n:.1f} ms, {kb(60 * rate(idle, 'wal_bytes') / n)}, "
            f"{60 * rate(idle, 'xacts') / n:.0f} "
            f"| {loaded['offered_per_s']:.1f}, {b:.1f} | {pct(l_cpu)} of a core "
            f"| {1000 * per_build_cpu:.1f} ms, {kb(per_build_wal)}, {per_build(r, 'xacts'):.0f} | {wait_text} "
            f"| {loaded['backlog']} "
            f"| {pct(rate(loaded, 'client_cpu_s'))}, {loaded['machine_busy_pct']:.0f} % |"
        )
    lines += [
        "",
        "Commits of other databases during the idle / loaded windows (negative: a database was dropped): "
        + "; ".join(f"{r['workers']:,} workers {r['idle']['other_xacts']} / {r['loaded']['other_xacts']}" for r in results)
        + ". Every PostgreSQL process (background writers and other databases included), loaded: "
        + "; ".join(f"{r['workers']:,} workers {pct(rate(r['loaded'], 'pg_all_cpu_s'))} of a core" for r in results)
        + ". Errors of the simulated workers: "
        + ", ".join(str(r["errors"]) for r in results)
        + ".",
        "",
        "### The capacity model",
        "",
        f"Fitted on the smallest and the largest fleet ({results[0]['workers']:,} and {results[-1]['workers']:,} "
        "workers): PostgreSQL CPU in cores = base + W × c_idle + B × (c_build + W × c_wake) for W workers and B "
        "builds a second, and WAL bytes a second the same way. c_wake is the fleet's part of a build: each job "
        "pushed (a build's, then its readiness round's) wakes every idle worker of its queue through its "
        "LISTEN, and each wake is a fetch.",
        "",
        "| coefficient | CPU | WAL |",
        "| --- | ---: | ---: |",
        f"| base (no worker) | {pct(base)} of a core | {kb(w_base)}/s |",
        f"| c_idle: one idle worker | {1000 * 60 * c_idle:.1f} ms a minute ({pct(c_idle)} of a core) "
        f"| {kb(60 * w_idle)} a minute |",
        f"| c_build: one build lifecycle | {1000 * c_build:.2f} ms | {kb(w_build)} |",
        f"| c_wake: one build, per worker of the fleet | {1000 * c_wake:.3f} ms | {w_wake:.0f} B |",
        "",
    ]
    idle_per_core = (1 - base) / c_idle if c_idle > 0 else float("inf")
    big = results[-1]
    carried = ", ".join(
        f"{builds_per_core(cpu_model, w):,.1f} builds/s beside {w:,} workers" for w in (r["workers"] for r in results)
    )
    lines += [
        f"One PostgreSQL core carries about **{idle_per_core:,.0f} idle workers** (no builds), and {carried} "
        f"(a build costing {1000 * (c_build + big['workers'] * c_wake):.0f} ms of CPU in a fleet of "
        f"{big['workers']:,})."
        + f" Measured at {big['workers']:,} workers: {big['loaded']['builds_per_s']:.1f} builds/s finished of "
        f"{big['loaded']['offered_per_s']:.1f} offered, claims waiting {big['loaded']['claim_wait_ms']['p50']} ms "
        f"(p50) and {big['loaded']['claim_wait_ms']['p99']} ms (p99), {big['loaded']['backlog']} builds left "
        "queued at the window's end.",
        "",
        "| fleet | measured CPU | predicted CPU | off by | measured WAL/s | predicted WAL/s | off by |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    checks = []
    for r in results:
        for window, label in (("idle", "idle"), ("loaded", "loaded")):
            b = r["loaded"]["builds_per_s"] if window == "loaded" else 0.0
            m_cpu, m_wal = rate(r[window], "pg_cpu_s"), rate(r[window], "wal_bytes")
            p_cpu, p_wal = predict(cpu_model, r["workers"], b), predict(wal_model, r["workers"], b)
            off_cpu = (p_cpu - m_cpu) / m_cpu if m_cpu else float("nan")
            off_wal = (p_wal - m_wal) / m_wal if m_wal else float("nan")
            fitted = r is results[0] or r is results[-1]
            mark = "" if r[window]["other_xacts"] == 0 else " ‡"
            lines.append(
                f"| {r['workers']:,} {label}{' (fitted)' if fitted else ''} | {pct(m_cpu)} | {pct(p_cpu)} "
                f"| {100 * off_cpu:+.0f} % | {kb(m_wal)}{mark} | {kb(p_wal)} | {100 * off_wal:+.0f} % |"
            )
            if not fitted:
                checks.append((r["workers"], label, m_cpu, p_cpu, off_cpu, m_wal, p_wal, off_wal))
    lines += [
        "",
        "‡ Other databases committed during the window (or one was dropped): the server-wide WAL figure holds "
        "their writes too, and the WAL coefficients fitted on it are unreliable; the CPU figures are the bench's "
        "own backends' and are not affected.",
    ]
    lines += ["", "### Bars of issue 32", "", "| Bar | Target | This run | met / not met |", "| --- | --- | --- | --- |"]
    for n, label, m_cpu, p_cpu, off_cpu, m_wal, p_wal, off_wal in checks:
        met = "met" if abs(off_cpu) <= BAR_PCT / 100 else "not met"
        lines.append(
            f"| Fleet: the model's PostgreSQL CPU at {n:,} workers ({label}) against the measurement "
            f"| within {BAR_PCT} % | {pct(p_cpu)} predicted, {pct(m_cpu)} measured ({100 * off_cpu:+.0f} %) | {met} |"
        )
        lines.append(
            f"| Fleet: the model's WAL at {n:,} workers ({label}) against the measurement "
            f"| reported | {kb(p_wal)}/s predicted, {kb(m_wal)}/s measured ({100 * off_wal:+.0f} %) | — |"
        )
    lines.append(
        f"| Fleet: idle workers one PostgreSQL core carries | reported | {idle_per_core:,.0f} "
        f"({1000 * 60 * c_idle:.1f} ms CPU and {kb(60 * w_idle)} WAL per worker a minute) | — |"
    )
    lines.append(
        f"| Fleet: builds/s one PostgreSQL core carries beside {big['workers']:,} workers | reported "
        f"| {builds_per_core(cpu_model, big['workers']):,.1f} ({1000 * (c_build + big['workers'] * c_wake):.0f} ms "
        f"CPU and {kb(w_build + big['workers'] * w_wake)} WAL per build) | — |"
    )
    lines.append(
        f"| Fleet: builds/s achieved at {big['workers']:,} workers | reported "
        f"| {big['loaded']['builds_per_s']:.1f} of {big['loaded']['offered_per_s']:.1f} offered, claim wait p99 "
        f"{big['loaded']['claim_wait_ms']['p99']} ms | — |"
    )
    lines += ["", "Raw results (one line per fleet size):", "", "```text"]
    lines += [json.dumps(r, sort_keys=True) for r in results]
    lines += ["```", "", END]
    return "\n".join(lines)


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    results = [json.loads(line) for line in open(sys.argv[1]) if line.strip().startswith("{")]
    if len(results) < 2:
        sys.exit("report_fleet.py: needs the results of at least two fleet sizes")
    section = render(results, sys.argv[2], sys.argv[3], sys.argv[4])
    if "--splice" in sys.argv:
        doc = sys.argv[sys.argv.index("--splice") + 1]
        splice_section(doc, BEGIN, END, section)
    else:
        print(section)


if __name__ == "__main__":
    main()
