#!/usr/bin/env python3
"""Renders the tcp section of docs/BENCHMARKS.md from the JSON line of
`slipway-queue-bench large-statement`.

Usage: report_tcp.py RESULT_JSON COMMAND GIT_STATE [--splice DOC]
  Prints the section (between its marker comments). With --splice, replaces
  the section in DOC (or appends it when DOC has none).
"""
import json
import subprocess
import sys
import time

from splice import splice as splice_section

BEGIN = "<!-- scripts/bench: tcp section; `scripts/bench --only tcp` rewrites it -->"
END = "<!-- scripts/bench: end of the tcp section -->"


def render(result, command, git):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    lines = [
        BEGIN,
        "",
        "## Large statements over TCP",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `{command}` (code at {git}); "
        f"{cpu}, 2 cores; {rustc}.",
        "",
        "One statement carrying a configuration (JSON text sent as a parameter, stored as `jsonb` as a submit "
        "stores one), timed end to end over TCP to 127.0.0.1:5432, on a plain sqlx 0.9.0 connection (which leaves "
        "`TCP_NODELAY` off) and on a connection of Slipway's own pool (`store::open_postgres`, which sets it on "
        f"every connection), alternating, {result['runs']} statements per size and connection after 3 of warm-up "
        "(`slipway-queue-bench large-statement`).",
        "",
        "| configuration | plain sqlx p50 ms | p99 ms | Slipway's pool p50 ms | p99 ms | p50 saved |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for s in result["sizes"]:
        plain, ours = s["plain_sqlx_ms"], s["slipway_pool_ms"]
        lines.append(
            f"| {s['bytes'] / 1024:.0f} KiB | {plain['p50']:.2f} | {plain['p99']:.2f} | {ours['p50']:.2f} | "
            f"{ours['p99']:.2f} | {plain['p50'] - ours['p50']:.2f} ms |"
        )
    # Issue 14, item 6: a statement over ~64 kB must not wait for the
    # server's delayed ACK (about 40 ms) on Slipway's connections.
    lines += ["", "| Bar | Target | This run | met / not met |", "| --- | --- | --- | --- |"]
    for s in result["sizes"]:
        if s["bytes"] < 64 * 1024:
            continue
        ours, plain = s["slipway_pool_ms"], s["plain_sqlx_ms"]
        stalled = ours["p50"] >= plain["p50"] + 30 or (s["bytes"] <= 256 * 1024 and ours["p50"] >= 40)
        lines.append(
            f"| Large statement over TCP, {s['bytes'] / 1024:.0f} KiB, Slipway's pool p50 | no delayed-ACK stall "
            f"(< 40 ms up to 256 KiB, never 30 ms over a plain connection) | {ours['p50']:.2f} ms (plain "
            f"{plain['p50']:.2f} ms) | {'**not met**' if stalled else 'met'} |"
        )
    lines += [
        "",
        "A statement larger than one TCP segment's worth of unacknowledged data leaves its last piece waiting "
        "for the server's delayed ACK (about 40 ms on Linux) unless the connection sets `TCP_NODELAY`. sqlx 0.9.0 "
        "does not (its earlier releases did; the fix is merged upstream, not released), and gives no access to "
        "its socket, so each new connection of Slipway's pool sets the option on the process's sockets to the "
        "database's port (`jobs/src/store/nodelay.rs`; `jobs/tests/it/postgres_tcp.rs` checks every pooled "
        "connection has it and that a plain one does not).",
        "",
        END,
    ]
    return "\n".join(lines)


def main():
    result = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
    section = render(result, sys.argv[2], sys.argv[3])
    if "--splice" in sys.argv:
        doc = sys.argv[sys.argv.index("--splice") + 1]
        splice_section(doc, BEGIN, END, section)
    else:
        print(section)


if __name__ == "__main__":
    main()
