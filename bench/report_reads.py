#!/usr/bin/env python3
"""Renders the reads section of docs/BENCHMARKS.md from the JSON line of
`slipway-serve-bench reads`.

Usage: report_reads.py RESULT_JSON COMMAND GIT_STATE QUIET [--splice DOC]
  Prints the section (between its marker comments). With --splice, replaces
  the section in DOC (or appends it when DOC has none).
"""
import json
import re
import subprocess
import sys
import time

from splice import splice as splice_section

BEGIN = "<!-- scripts/bench: reads section; `scripts/bench --only reads` rewrites it -->"
END = "<!-- scripts/bench: end of the reads section -->"
BAR = 1.5
ENGINE = {"postgres": "PostgreSQL", "sqlite": "SQLite"}


def us(v):
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.0f} µs"


def render(r, command, git, quiet):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    engines = r["engines"]
    first = engines[0]
    lines = [
        BEGIN,
        "",
        "## Reads at scale",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `{command}` (code at {git}); "
        f"{cpu}, 2 cores; {rustc}; "
        + ("a quiet machine." if quiet == "yes" else "**the machine was not quiet** (other builds ran): ratios hold, absolute times do not.")
        ,
        "",
        f"Two databases per engine, seeded in bulk straight into the tables (`bench/serve/src/seed.rs`, not "
        f"through the api): {first['small']['deployments']:,} deployments and {first['big']['deployments']:,} "
        "(10 builds each on average: 99 in 100 with 8, one with 208; build ids and times as the code writes "
        "them; the last build of each `succeeded` but 20 `queued` and 2 `running` in all; earlier ones 5 % "
        "failed, some cancelled and superseded, 1 % destroys and 1 % dry runs; readiness rows, two SBOM rows "
        "and a two-chunk log for each deployment's last build). On each, a release `slipway-api` started as an "
        "operator starts it, and each read sent one at a time over one keep-alive loopback connection, cycling "
        f"through 1,000 sampled deployments or builds (1,000 ids over 100 deployments on the small one), "
        f"{r['seconds']:g} s each after a warm-up. Both databases of an engine are up at once, each with its "
        "api, and each read is timed on them in turns (five slices each, small then big), so a slow spell of "
        "the machine lands on both sides of a ratio. PostgreSQL's database was `VACUUM ANALYZE`d after the seed "
        "(autovacuum's steady state) and both engines' bulk loads were checkpointed before the reads; SQLite's "
        "database was not analysed (Slipway never runs `ANALYZE`).",
        "",
        "| engine | deployments | builds | seed | `VACUUM ANALYZE` | database |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for e in engines:
        for size in ("small", "big"):
            s = e[size]
            v = f"{s['vacuum_analyze_s']:.1f} s" if e["engine"] == "postgres" else "—"
            lines.append(
                f"| {ENGINE[e['engine']]} | {s['deployments']:,} | {s['rows']['builds']:,} | {s['seed_s']:.1f} s | {v} | "
                f"{s['database_mb']:,.0f} MB |"
            )
    lines += [""]
    bars = []
    for e in engines:
        name = ENGINE[e["engine"]]
        lines += [
            f"### {name}",
            "",
            f"| read | answer | {e['small']['deployments']:,}: p50 | p99 | {e['big']['deployments']:,}: p50 | p99 | "
            "p50 big/small | p99 big/small |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for s, b, ratio in zip(e["small"]["reads"], e["big"]["reads"], e["ratios"]):
            lines.append(
                f"| `{s['read']}` | {b['answer_bytes'] / 1000:.1f} kB | {us(s['p50_us'])} | {us(s['p99_us'])} | "
                f"{us(b['p50_us'])} | {us(b['p99_us'])} | {ratio['p50_ratio']:.2f}× | {ratio['p99_ratio']:.2f}× |"
            )
            bars.append((f"{name}: `{s['read']}` p50, {e['big']['deployments']:,} vs "
                         f"{e['small']['deployments']:,} deployments", ratio["p50_ratio"]))
        cs, cb = e["small"]["admission_count"], e["big"]["admission_count"]
        ratio = cb["p50_us"] / cs["p50_us"]
        lines += [
            "",
            f"The Q-3 admission count (`store::submit::admission_count`, what admission runs before a submit's "
            f"body is read: the span bound, counted near `QUEUE_SIZE`), {cs['runs']:,} times on one pooled "
            f"connection (its answer: {cs['queued']}): "
            f"p50 {us(cs['p50_us'])} (p99 {us(cs['p99_us'])}) over {e['small']['rows']['builds']:,} builds, "
            f"p50 {us(cb['p50_us'])} (p99 {us(cb['p99_us'])}) over {e['big']['rows']['builds']:,}: "
            f"{ratio:.2f}×.",
            "",
        ]
        bars.append((f"{name}: admission count p50 (O(1) in finished builds), {e['big']['rows']['builds']:,} vs "
                     f"{e['small']['rows']['builds']:,} builds", ratio))
    lines += [
        "### Plans on the big database",
        "",
        "Each read's statements (the store functions' own SQL, with a sampled deployment or build; `{columns}` "
        "stands for the row's columns). PostgreSQL: `EXPLAIN (ANALYZE, BUFFERS)` of the generic plan (`PREPARE`, "
        "`plan_cache_mode = force_generic_plan`), the plan a pooled connection's prepared statement settles on. "
        "SQLite: `EXPLAIN QUERY PLAN` by the bundled SQLite the binaries link.",
        "",
    ]
    for e in engines:
        lines += [f"#### {ENGINE[e['engine']]}", ""]
        for p in e["big"]["plans"]:
            sql = p["sql"].replace(p["sql"][p["sql"].find("SELECT ") + 7:p["sql"].find(" FROM builds")], "{columns}") \
                if p["sql"].startswith("SELECT id, seq, deployment_id") else p["sql"]
            params = p["params"] if len(p["params"]) <= 3 else \
                p["params"][:2] + [f"… ({len(p['params'])} in all)"]
            lines += [
                f"`{p['function']}` ({p['read']}), parameters {', '.join(params)}:",
                "",
                "```",
                short_lists(sql),
                "",
                short_lists(p["plan"]),
                "```",
                "",
            ]
    lines += [
        "### What the plans showed (found while building this bench)",
        "",
        "On SQLite, `builds::latest_succeeded` (every `GET /deployments/{id}`, and 100 times per "
        "`GET /deployments?ids=`) was planned through `builds_by_status (status=?)`: every succeeded build of "
        "every deployment, filtered and sorted, since without statistics SQLite takes one indexed equality as "
        "good as another. Migration 0016 replaces `builds_waiting (deployment_id, status, dispatched)` with "
        "`builds_by_deployment_status (deployment_id, status, seq)`, which both engines now walk backwards from "
        "the deployment's newest build of that status (`dispatch_next`'s two lookups use it as they used the "
        "old one). PostgreSQL, with statistics, already used `builds_by_deployment`.",
        "",
        "`GET /deployments?ids=` ran the single read once per id: 500 statements for 100 ids, whose per-statement "
        "cost on SQLite grew with the database (1.53× at 53bf904, 27.5 ms at 100,000 deployments). It now reads "
        "all its ids in five statements (`deployments::get_many`, three `builds::newest_of_each`, "
        "`readiness::of_deployments`), each looking up every id the way the single read looks up one, through "
        "the same indexes (the plans above).",
        "",
        "The admission count reads only the queued entries of an index led by `status` (`builds_by_status` until migration 0025 dropped it; now `builds_queued_by_seq` or `builds_by_fair_tag`): index-only, a few buffers, "
        "whatever the finished builds. On PostgreSQL one more thing can make it grow: a build that left "
        "`queued` leaves its old index entry until a vacuum removes it; the first count after that finds the "
        "row dead and marks the entry so later counts skip it without the heap, but they still read its index "
        "page (measured while building the bench: 50,000 builds moved through `queued` without a vacuum took "
        "one count from 4 to 7,086 buffers and 56 ms, then every later count 79 buffers and 0.4 ms). Autovacuum "
        "bounds that by its threshold, 20 % of the table's rows by default.",
        "",
        "| Bar | Target | This run | met / not met |",
        "| --- | --- | --- | --- |",
    ]
    for label, ratio in bars:
        lines.append(f"| {label} | ≤ {BAR}× | {ratio:.2f}× | {'met' if ratio <= BAR else 'not met'} |")
    lines += ["", END]
    return "\n".join(lines)


def short_lists(text):
    """A long run of placeholders (`$1, $2, …, $100`) cut to its ends."""
    return re.sub(r"\$1, \$2, (\$\d+, )+(\$\d+)", r"$1, $2, …, \2", text)


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
