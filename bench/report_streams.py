#!/usr/bin/env python3
"""Renders the streams section of docs/BENCHMARKS.md from the JSON line of
`slipway-serve-bench streams`.

Usage: report_streams.py RESULT_JSON COMMAND GIT_STATE QUIET [--splice DOC]
  Prints the section (between its marker comments). With --splice, replaces
  the section in DOC (or appends it when DOC has none).
"""
import json
import subprocess
import sys
import time

from splice import splice as splice_section

BEGIN = "<!-- scripts/bench: streams section; `scripts/bench --only streams` rewrites it -->"
END = "<!-- scripts/bench: end of the streams section -->"
ENGINE = {"postgres": "PostgreSQL", "sqlite": "SQLite"}
# The bars of issue 32 for the streams.
KIB_PER_STREAM = 20
P99_MS = 250


def met(ok):
    return "met" if ok else "not met"


def mb(kib):
    return f"{kib * 1024 / 1e6:.1f} MB"


def connections(e, key):
    s = e[key]
    if e["engine"] == "sqlite":
        return f"{s['connections']} (open descriptors of the database file)"
    return f"{s['connections']} ({s['busy']} busy)"


def render(r, command, git, quiet):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    engines = r["engines"]
    n, d = r["streams"], r["deployments"]
    lines = [
        BEGIN,
        "",
        "## Streams: 10,000 followers on one api",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `{command}` (code at {git}); "
        f"{cpu}, {r['cores']} cores; {rustc}; "
        + ("a quiet machine." if quiet == "yes" else "**the machine was not quiet** (other builds ran): times are high."),
        "",
        f"One release `slipway-api` and one client process (`slipway-serve-bench streams`) over loopback: the "
        f"client holds {n:,} `GET /deployments/{{id}}/events` streams, {n // d} on each of {d:,} deployments, "
        "one tokio task each over hyper's HTTP/1.1 client, the events parsed by `eventsource-stream`. The "
        "deployments are written through the real store functions, as a submit and a worker's claim write them "
        "(one deploy running each, its channel at event 1). Each engine in turn:",
        "",
        f"1. **Idle streams.** The {n:,} streams opened {r['open_batch']:,} at a time (each batch once the one "
        "before has read its first events, as tabs open over time; the storm below opens them all at once); "
        "once each has read its first event they are "
        f"left idle {r['idle_s']:.0f} s, then the api's resident memory (`VmRSS`) is read: per stream is its "
        "growth over the count. Its CPU time (`/proc/PID/stat`) over the next 5 s; the database connections it "
        "holds (`pg_stat_activity` by its `application_name`; on SQLite its open descriptors of the database "
        "file) before any stream, with every stream open, and the most at once over the whole run (sampled "
        "every 100 ms).",
        "2. **Reconnect storm.** Every connection dropped at once; once the api has let their sockets go, every "
        "other deployment gets a new event (a newer deploy queued) while nobody follows it; then all "
        f"{n:,} come back at once, each with `Last-Event-ID` of the last event it read. A follower refused "
        "(`429`, `503`) or cut opens again 1 s later with its last id, as a browser's `EventSource` would.",
        f"3. **Builds end.** Every deployment's running build ends as a worker records an end "
        "(`builds::finish`, `builds::dispatch_next`, `events::record`, one transaction), "
        f"{d:,} spread evenly over {r['end_seconds']:.0f} s by 4 writers in the client process; each "
        "follower's delay runs from the moment its build's transaction was sent `COMMIT` to the moment it read "
        "the ending event (one process, one clock). The api learns of it as it learns of a worker's: the "
        "notification on PostgreSQL, its poll of new events on SQLite.",
        "4. **Check.** Each follower's event ids over all its connections must be `1, 2, 3` (its deployment "
        "changed while it was away) or `1, 2`: none read twice, none missing, in order.",
        "",
        "| | " + " | ".join(ENGINE[e["engine"]] for e in engines) + " |",
        "| --- | " + " | ".join("---" for _ in engines) + " |",
    ]
    rows = [
        ("api's open-file limit (raised at start to the hard limit)", lambda e: f"{e['api_fd_limit']:,}"),
        ("api memory, no stream", lambda e: mb(e["before"]["rss_kib"])),
        (f"api memory, {n:,} idle streams", lambda e: mb(e["open"]["rss_kib"])),
        ("memory per idle stream", lambda e: f"{e['per_stream_kib']:.1f} KiB"),
        ("api memory at the end (peak)", lambda e: f"{mb(e['after']['rss_kib'])} ({mb(e['after']['peak_kib'])})"),
        ("api threads", lambda e: f"{e['open']['threads']}"),
        (f"opening {n:,}, {r['open_batch']:,} at a time", lambda e: f"{e['opening']['seconds']:.1f} s, api CPU {e['opening']['cpu_s']:.1f} s, "
                                              f"{e['opening']['refused']} refused"),
        (f"api CPU, {n:,} idle streams", lambda e: f"{100 * e['idle']['cpu_s'] / e['idle']['window_s']:.1f} % of a core"),
        ("database connections, no stream", lambda e: connections(e, "before")),
        (f"database connections, {n:,} streams", lambda e: connections(e, "open")),
        ("database connections, most at once", lambda e: f"{e['connections_most']}"
         + (" (pool 16 + 1 LISTEN)" if e["engine"] == "postgres" else "")),
        ("storm: sockets released after the drop", lambda e: f"{e['storm']['released_ms']:.0f} ms"),
        (f"storm: all {n:,} back, replays read", lambda e: f"{e['storm']['seconds']:.1f} s, api CPU "
                                                         f"{e['storm']['cpu_s']:.1f} s, {e['storm']['replayed']:,} replays"),
        ("storm: refused or cut (opened again)", lambda e: f"{e['storm']['refused']} refused, {e['storm']['cut']} cut"),
        ("builds ended", lambda e: f"{e['ends']['builds']:,} over {e['ends']['spread_s']:.0f} s, api CPU "
                                   f"{e['ends']['cpu_s']:.1f} s"),
        ("recorded end to follower's read, p50", lambda e: f"{e['ends']['p50_ms']:.1f} ms"),
        ("recorded end to follower's read, p99", lambda e: f"{e['ends']['p99_ms']:.1f} ms"),
        ("recorded end to follower's read, max", lambda e: f"{e['ends']['max_ms']:.1f} ms"),
        ("followers: read twice / missed / out of order",
         lambda e: f"{e['check']['read_twice']} / {e['check']['missed']} / {e['check']['out_of_order']}"),
    ]
    for label, cell in rows:
        lines.append(f"| {label} | " + " | ".join(cell(e) for e in engines) + " |")
    lines += [
        "",
        "### Bars of issue 32",
        "",
        "| Bar | Target | This run | met / not met |",
        "| --- | --- | --- | --- |",
    ]
    for e in engines:
        name = ENGINE[e["engine"]]
        c = e["check"]
        s = e["storm"]
        lines.append(
            f"| {name}: api memory per idle stream ({n:,} streams) | ≤ {KIB_PER_STREAM} KiB | "
            f"{e['per_stream_kib']:.1f} KiB | {met(e['per_stream_kib'] <= KIB_PER_STREAM)} |"
        )
        timed = e["ends"]["followers_timed"]
        lines.append(
            f"| {name}: build's recorded end to every follower's read, p99 ({timed:,} followers) | ≤ {P99_MS} ms | "
            f"{e['ends']['p99_ms']:.1f} ms | {met(e['ends']['p99_ms'] <= P99_MS and timed == n)} |"
        )
        held = e["open"]["busy"]
        if e["engine"] == "postgres":
            ok = e["connections_most"] <= e["pool_cap"] and held == 0
            target = "never past its pool (16 + 1 LISTEN), none busy with idle streams"
            this = (f"{e['before']['connections']} → {e['open']['connections']}, most {e['connections_most']}, "
                    f"{held} busy")
        else:
            ok = e["connections_most"] <= e["before"]["connections"] + e["pool_cap"]
            target = "never past its pool (8 readers + 1 writer)"
            this = (f"{e['before']['connections']} → {e['open']['connections']} files open, "
                    f"most {e['connections_most']}")
        lines.append(f"| {name}: api's database connections, 0 → {n:,} streams | {target} | {this} | {met(ok)} |")
        # A browser's EventSource gives up on a refused reconnect (`503`,
        # `429`): one refusal is a follower lost.
        clean = c["read_twice"] == 0 and c["missed"] == 0 and c["out_of_order"] == 0 and s["refused"] == 0
        lines.append(
            f"| {name}: reconnect storm of all {n:,} with `Last-Event-ID` | nothing replayed twice, nothing missed, none refused | "
            f"{c['read_twice']} twice, {c['missed']} missed, {c['out_of_order']} out of order, "
            f"{s['refused']} refused | {met(clean)} |"
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
