#!/usr/bin/env python3
"""Renders the get_for section of docs/BENCHMARKS.md from the JSON line of
scripts/lib/bench-get-for.

Usage: report_get_for.py RESULT_JSON COMMAND GIT_STATE [--splice DOC]
  Prints the section (between its marker comments). With --splice, replaces
  the section in DOC (or appends it when DOC has none).
"""
import json
import subprocess
import sys
import time

from splice import splice as splice_section

BEGIN = "<!-- scripts/bench: get_for section; `scripts/bench --only get_for` rewrites it -->"
END = "<!-- scripts/bench: end of the get_for section -->"
TARGET_P99_US = 1000


def ms(us):
    return f"{us / 1000:.3f}"


def render(result, command, git):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    c1, c8 = result["c1"], result["c8"]
    met = "met" if c1["p99_us"] <= TARGET_P99_US else "**not met**"
    return [
        BEGIN,
        "",
        "## get_for: a cache hit",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `{command}` (code at {git}); "
        f"{cpu}, 2 cores; {rustc}.",
        "",
        "`POST /schema/get_for` of a pinned git source (`file://`, a copy of `nix/`) whose outputs were built once "
        "on the `nix` queue: each answer is the whole schema (about 7 KB of JSON) from the api's memory, with the "
        "token verified, the source parsed and allowlisted. A release `slipway-api` on SQLite, driven by `wrk` over "
        f"loopback for {result['seconds']} s, first one connection at a time, then eight.",
        "",
        "| connections | requests/s | p50 ms | p90 ms | p99 ms | max ms | errors |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *[
            f"| {r['connections']} | {r['requests_per_s']:,.0f} | {ms(r['p50_us'])} | {ms(r['p90_us'])} | "
            f"{ms(r['p99_us'])} | {ms(r['max_us'])} | {r['errors']} |"
            for r in (c1, c8)
        ],
        "",
        "| target | goal | measured | |",
        "| --- | --- | --- | --- |",
        f"| get_for cache hit p99, one connection | ≤ 1 ms | {ms(c1['p99_us'])} ms | {met} |",
        "",
        END,
    ]


def splice(doc, lines):
    splice_section(doc, BEGIN, END, "\n".join(lines))



def main(argv):
    if len(argv) not in (4, 6) or (len(argv) == 6 and argv[4] != "--splice"):
        sys.exit(__doc__)
    result = json.loads(open(argv[1]).read().strip().splitlines()[-1])
    lines = render(result, argv[2], argv[3])
    print("\n".join(lines))
    if len(argv) == 6:
        splice(argv[5], lines)


if __name__ == "__main__":
    main(sys.argv)
