#!/usr/bin/env python3
"""Renders the footprint section of docs/BENCHMARKS.md from the JSON line of
`slipway-serve-bench footprint`.

Usage: report_footprint.py RESULT_JSON COMMAND GIT_STATE QUIET [--splice DOC]
  Prints the section (between its marker comments). With --splice, replaces
  the section in DOC (or appends it when DOC has none).
"""
import json
import subprocess
import sys
import time

from splice import splice as splice_section

BEGIN = "<!-- scripts/bench: footprint section; `scripts/bench --only footprint` rewrites it -->"
END = "<!-- scripts/bench: end of the footprint section -->"
RSS_BAR_MB = 30
ENGINE = {"postgres": "PostgreSQL", "sqlite": "SQLite"}


def mem(m):
    return f"{m['rss_mb']:.1f} MB"


def render(r, command, git, quiet):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    engines = r["engines"]
    t = engines[0]["api"]["traffic"]
    lines = [
        BEGIN,
        "",
        "## Footprint",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `{command}` (code at {git}); "
        f"{cpu}, {r['cores']} cores; {rustc}; release binaries of {r['api_binary_mb']:.1f} MB (api) and "
        f"{r['worker_binary_mb']:.1f} MB (worker), built with the workspace's release profile (thin LTO, one "
        "codegen unit: 2 to 3 MB less resident memory than the default profile, docs/DECISIONS.md); "
        + ("a quiet machine." if quiet == "yes" else "**the machine was not quiet** (other builds ran): times are high."),
        "",
        "Each binary started as an operator starts it (`slipway-serve-bench footprint`): resident memory is "
        "`VmRSS` of the process (its children, the effects, not counted), read after it was left idle; *peak* is "
        "`VmHWM`. The api: start to its first `200` from `GET /readyz` (polled every 2 ms) on a new database "
        "(migrations run first) and on a migrated one; then idle; then after traffic over "
        f"{t['connections']} connections at once ({t['submits']} submits of the demo configuration, "
        f"{t['reads']:,} reads: `GET /deployments/{{id}}`, `GET /deployments?ids=`, the builds page and "
        "`GET /readyz`). A worker (`slipway-worker work`, every queue): idle on an empty queue, from start until "
        "`GET /readyz` shows it serving `builds`; then a new worker started with those submits' deploys queued: "
        "start to its first claim (the claimed build's `started_at`, written by the worker, less the moment it "
        "was spawned), and its memory once the deploys (the built-in source's `local` provider, real Nix "
        "builds) are done.",
        "",
        "| | " + " | ".join(ENGINE[e["engine"]] for e in engines) + " |",
        "| --- | " + " | ".join("---" for _ in engines) + " |",
    ]
    rows = [
        ("api: start to ready, new database", lambda e: f"{e['api']['first_start_ready_ms']:.0f} ms"),
        ("api: start to ready, migrated", lambda e: f"{e['api']['start_ready_ms']:.0f} ms"),
        ("api: memory at ready", lambda e: mem(e["api"]["at_ready"])),
        ("api: memory idle", lambda e: f"{mem(e['api']['idle'])} ({e['api']['idle']['threads']} threads)"),
        ("api: memory after traffic (peak)",
         lambda e: f"{mem(e['api']['after_traffic'])} ({e['api']['after_traffic']['peak_rss_mb']:.1f} MB)"),
        ("worker: start to serving", lambda e: f"{e['worker']['start_serving_ms']:.0f} ms"),
        ("worker: memory idle", lambda e: f"{mem(e['worker']['idle'])} ({e['worker']['idle']['threads']} threads)"),
        ("worker: start to first claim", lambda e: f"{e['worker']['start_first_claim_ms']:.0f} ms"),
        ("worker: deploys run",
         lambda e: f"{e['worker']['deploys']} in {e['worker']['deploys_s']:.1f} s "
                   f"({', '.join(f'{k} {v}' for k, v in e['worker']['deploy_outcomes'].items())})"),
        ("worker: memory after deploys (peak)",
         lambda e: f"{mem(e['worker']['after_deploys'])} ({e['worker']['after_deploys']['peak_rss_mb']:.1f} MB)"),
    ]
    for label, cell in rows:
        lines.append(f"| {label} | " + " | ".join(cell(e) for e in engines) + " |")
    lines += ["", "| Bar | Target | This run | met / not met |", "| --- | --- | --- | --- |"]
    for e in engines:
        name = ENGINE[e["engine"]]
        for label, m in [
            ("api idle after start", e["api"]["idle"]),
            ("api idle after traffic", e["api"]["after_traffic"]),
            ("worker idle after start", e["worker"]["idle"]),
            ("worker idle after deploys", e["worker"]["after_deploys"]),
        ]:
            met = "met" if m["rss_mb"] <= RSS_BAR_MB else "not met"
            lines.append(f"| {name}: resident memory, {label} | ≤ {RSS_BAR_MB} MB | {mem(m)} | {met} |")
        lines.append(f"| {name}: api start to ready (migrated) | reported | {e['api']['start_ready_ms']:.0f} ms | — |")
        lines.append(
            f"| {name}: worker start to first claim | reported | {e['worker']['start_first_claim_ms']:.0f} ms | — |"
        )
    lines += ["", END]
    return "\n".join(lines)


def main():
    result = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
    section = render(result, sys.argv[2], sys.argv[3], sys.argv[4])
    if "--splice" in sys.argv:
        doc = sys.argv[sys.argv.index("--splice") + 1]
        splice_section(doc, BEGIN, END, section)
    else:
        print(section)


if __name__ == "__main__":
    main()
