#!/usr/bin/env python3
"""Renders the submit section of docs/BENCHMARKS.md (issue 14 item 1) from
the JSON lines `scripts/bench --only submit` collects: pgbench simple-update
with 8 clients, then scripts/lib/bench-submit at 8 connections for each
engine and names-eval setting.

Usage: report_submit.py RESULTS_JSONL COMMAND GIT_STATE [--splice DOC]
  Prints the section (between its marker comments). With --splice, replaces
  the section in DOC (or appends it when DOC has none).
"""
import json
import subprocess
import sys
import time

from splice import splice as splice_section

BEGIN = "<!-- scripts/bench: submit section; `scripts/bench --only submit` rewrites it -->"
END = "<!-- scripts/bench: end of the submit section -->"
RATIO_BAR = 0.5
RATIO_HEADING = 0.8
P99_BAR_MS = 20.0

ENGINES = {"postgres": "PostgreSQL", "sqlite": "SQLite"}
MODES = {
    "busy": "every nix slot busy (the database-bound path)",
    "eval": "with the names eval (slots free; the configuration's eval kept)",
    "none": "no worker of the nix queue",
}


def ms(text):
    """wrk's latency text (`850.00us`, `15.15ms`, `1.02s`) in milliseconds."""
    if text in (None, ""):
        return None
    for unit, factor in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * factor
    return float(text)


TLS = {"disable": "plain (sslmode=disable)", "prefer": "TLS (sslmode=prefer)", "require": "TLS (sslmode=require)"}


def connection(r):
    """How a run reached its database: the sslmode on PostgreSQL, a file on SQLite."""
    return TLS.get(r.get("sslmode"), r.get("sslmode") or "—") if r["engine"] == "postgres" else "a file"


def pgbench_for(pgbench, r):
    """The pgbench run a submit run is compared with: the same sslmode on
    PostgreSQL; the plain one for SQLite (no connection to encrypt)."""
    mode = r.get("sslmode") if r["engine"] == "postgres" else "disable"
    # A result file from before the sslmode was recorded has one pgbench run.
    return pgbench.get(mode) or pgbench.get(None) or {}


def setting(r):
    """A run's names-eval setting, as the bars name it."""
    return {"busy": "every slot busy", "eval": "names eval kept"}.get(r["nix"], r["nix"])


def cpu_ms(run, count):
    """CPU ms per unit of work by group, and the machine's busy share."""
    cpu = run.get("cpu") or {}
    secs = cpu.get("seconds") or {}
    if not count:
        return None
    per = {k: 1000 * v / count for k, v in secs.items()}
    per["total"] = sum(per.values())
    return per, cpu.get("busy_pct")


def render(lines, command, git):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    pgbench = {l.get("sslmode"): l for l in lines if l.get("name") == "pgbench"}
    runs = [l for l in lines if l.get("name") == "api_submit"]
    not_quiet = sum(1 for l in lines if l.get("quiet") == "no")
    out = [
        BEGIN,
        "",
        "## Submit: the database's pace (issue 14)",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `{command}` (code at {git}); "
        f"{cpu}, 2 cores; {rustc}."
        + (f" **{not_quiet} of {len(lines)} measurements ran on a machine that was not quiet**: a smoke figure."
           if not_quiet else ""),
        "",
        "A release `slipway-api`, driven by `wrk` over loopback at 8 connections; every request is a full submit of "
        "`examples/demo.json` to a new deployment (token, admission, migrate, validate, names eval, store, "
        "enqueue: one commit). No worker serves the builds queue, so builds only queue. Beside it, in the same run "
        "and on the same PostgreSQL server, `pgbench` simple-update with 8 clients (`-i -s 10`; `-c8 -j2 -N`): one "
        "durable commit per transaction, the ceiling of one commit per submit. *With the names eval*: a "
        "`slipway-worker --queues nix` serves the `nix` queue with its slots free and the built-in source is pinned "
        "to a git revision (`SLIPWAY_SELF_SOURCE`), so the first submit builds the schema and evaluates the names "
        "and every later submit of the same configuration at that revision takes the kept result. *Every slot "
        "busy*: the worker serves the queue and every nix slot is held, so each submit stores without the eval "
        "(EV-1) after two reads.",
        "",
        "*Connection*: on PostgreSQL each case runs twice, its `DATABASE_URL` (and pgbench's `PGSSLMODE`) "
        "with `sslmode=disable`, as docs/CONFIGURATION.md advises for a database on the same host, and with "
        "`sslmode=prefer`, libpq's and sqlx's default, which encrypts every statement whenever the server "
        "offers TLS (Debian's PostgreSQL does). Each submit run is compared with the pgbench run over the same "
        "kind of connection; SQLite's with the plain one. The bars are the plain runs'; the TLS runs are "
        "reported beside them.",
        "",
    ]
    for mode in ("disable", "prefer", None):
        pg = pgbench.get(mode)
        if pg and pg.get("tps"):
            label = TLS.get(mode, "") if mode else ""
            out.append(f"pgbench simple-update, 8 clients{', ' + label if label else ''}: **{pg['tps']:,.0f} TPS** "
                       f"(latency {pg.get('latency_avg_ms')} ms).")
            out.append("")
    if not pgbench:
        out += ["pgbench did not run.", ""]
    out += [
        "| engine | connection | names eval | submits/s | ÷ pgbench TPS | p50 | p99 | errors | builds stored | evals run | first submit |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in runs:
        tps = pgbench_for(pgbench, r).get("tps")
        ratio = f"{r['submits_per_s'] / tps:.2f}×" if tps else "—"
        first = f"{r['first_submit_s']} s" if r.get("first_submit_s") is not None else "—"
        out.append(
            f"| {ENGINES.get(r['engine'], r['engine'])} | {connection(r)} | {MODES.get(r['nix'], r['nix'])} | "
            f"{r['submits_per_s']:,.0f} | {ratio} | {r['latency_p50']} | {r['latency_p99']} | {r['errors']} | "
            f"{r['builds_stored']:,} | {r['names_evals']} | {first} |"
        )
    out += [
        "",
        "*evals run*: `names_eval` rows at the end (the kept eval is one row for the whole run); *first submit*: "
        "the warm-up submit that built the pinned source's schema and evaluated its names.",
        "",
        "Where the CPU goes (`bench/cpu.py`: each process's own and reaped children's CPU time from `/proc`, "
        "over the load's run), in ms of CPU per submit or per pgbench transaction; *busy* is the share of both "
        "cores in use; *PostgreSQL ÷ pgbench* is the server's CPU per submit over its CPU per pgbench "
        "transaction on the same kind of connection:",
        "",
        "| load | connection | busy | api | PostgreSQL | nix worker | load client | other | total | PostgreSQL ÷ pgbench |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    pg_per_txn = {}
    for mode, pg in pgbench.items():
        txns = pg.get("transactions") or (pg.get("tps") or 0) * (pg.get("duration_s") or 0)
        got = cpu_ms(pg, txns)
        if not got:
            continue
        per, busy = got
        pg_per_txn[mode] = per["postgres"]
        out.append(
            f"| pgbench, per transaction | {TLS.get(mode, '—')} | {busy} % | — | {per['postgres']:.2f} | — | "
            f"{per['client']:.2f} | {per['other']:.2f} | {per['total']:.2f} | 1.00× |"
        )
    for r in runs:
        got = cpu_ms(r, r["submits_per_s"] * (r.get("seconds") or 0))
        if not got:
            continue
        per, busy = got
        mode = r.get("sslmode") if r["engine"] == "postgres" else None
        base = pg_per_txn.get(mode)
        vs = f"{per['postgres'] / base:.2f}×" if base and r["engine"] == "postgres" else "—"
        out.append(
            f"| {ENGINES.get(r['engine'], r['engine'])} submit, {('every slot busy' if r['nix'] == 'busy' else 'names eval kept')} "
            f"| {connection(r)} | {busy} % | {per['api']:.2f} | "
            f"{per['postgres']:.2f} | {per['workers']:.2f} | {per['client']:.2f} | {per['other']:.2f} | "
            f"{per['total']:.2f} | {vs} |"
        )
    out += [
        "",
        "What one submit writes, from the rows at the end of each run (the warm-up submit's among them) and, on "
        "PostgreSQL, the WAL the server wrote while the load ran (`pg_current_wal_lsn()`, server-wide), per "
        "submit or per pgbench transaction; the index entries those rows take are counted in docs/DECISIONS.md "
        "(\"What one submit writes\"):",
        "",
        "| load | connection | rows per submit (deployments + builds + jobs + events) | WAL bytes per submit or transaction |",
        "| --- | --- | ---: | ---: |",
    ]
    for mode, pg in pgbench.items():
        txns = pg.get("transactions") or 0
        wal = f"{pg['wal_bytes'] / txns:,.0f}" if pg.get("wal_bytes") and txns else "—"
        out.append(f"| pgbench, per transaction | {TLS.get(mode, '—')} | 1 updated, 1 inserted | {wal} |")
    for r in runs:
        rows = r.get("rows")
        built = r.get("builds_stored") or 0
        per = "—"
        if rows and built:
            total = sum(v for v in rows.values() if isinstance(v, (int, float)))
            per = f"{total / built:.2f}"
        done = r["submits_per_s"] * (r.get("seconds") or 0)
        wal = f"{r['wal_bytes'] / done:,.0f}" if r.get("wal_bytes") and done else "—"
        out.append(f"| {ENGINES.get(r['engine'], r['engine'])} submit, {setting(r)} | {connection(r)} | {per} | {wal} |")
    out += [
        "",
        "What a submit costs the database (`jobs/tests/it/submit_path.rs` counts it): on PostgreSQL, the admission "
        "check before the body is read (one statement), the names eval's lookup (the kept result: one; every slot "
        "busy: one, the live nix workers and the held slots together), and the transaction: `BEGIN`, the "
        "deployment's upsert that takes its row lock and the admission lock, one statement that supersedes, "
        "inserts the build, pushes its job, records the event, counts the queue and, when OpenBao is not "
        "configured, reads whether an earlier build pins secrets OpenBao keeps, `COMMIT`, then the wake-ups on "
        "a connection of their own. Each of the four connections it takes from the pool (admission, names, "
        "transaction, wake-ups) is pinged by sqlx when it is given back; none is pinged before use unless it sat "
        "idle for a second (`store::PING_AFTER_IDLE`). On SQLite the same reads, then the write turn: a `SAVEPOINT` "
        "in the group's transaction (`BEGIN IMMEDIATE` when it opens one), the upsert, one round trip that runs "
        "the other steps and the savepoint's `RELEASE`, on the process's one writer connection, whose page cache "
        "survives from one submit to the next; the last submit of the group commits it (docs/DECISIONS.md).",
        "",
        "What limits it, on this 2-core machine: the cores, shared by the api, PostgreSQL and `wrk`, where "
        "pgbench's figure has PostgreSQL and pgbench alone. The CPU table says by whom: a submit costs "
        "PostgreSQL several times the CPU of a pgbench transaction (it writes four rows, a deployment, a build, "
        "a job and an event, with 13 index entries once migrations 0025 and 0026 have run (17 before them), "
        "where pgbench updates one row and appends one without an index, and it takes eleven round trips, four "
        "of them sqlx's pings of connections given back, to pgbench's five), and the api adds its own "
        "on the same cores (HTTP, the token, migrate and validate, the store's statements), so the total per "
        "submit sets the pace. pgbench's TPS is then not a ceiling a submit can come within 0.5× of here: that "
        "needs a submit to cost the machine no more than twice a pgbench transaction. What would close the "
        "rest: the api and PostgreSQL on cores of their own, as a fleet runs them, where the submit's pace is "
        "set by PostgreSQL's CPU per submit (the *PostgreSQL ÷ pgbench* column gives that ratio), then fewer "
        "round trips and index entries per submit. The commits do not wait for one another: a submit's "
        "wake-ups are sent after its commit in a statement of their own (docs/DECISIONS.md). Nor does a "
        "submit's cost grow with the queue: the fair tag of its build is read in index probes (migration "
        "0026), where it read every outstanding build of its tenant before.",
        "",
        "TLS: sqlx is built with rustls (apalis's runtime feature brings it), so a `DATABASE_URL` without "
        "`sslmode` encrypts every statement whenever the server offers TLS. Over loopback that buys nothing "
        "and costs CPU on both sides; and with it `wrk` sees a p99 several times the plain one's, while the "
        "api's own handling stays fast: the wait is in sqlx 0.9's TLS stream (the p99 this report could not "
        "explain before it measured both). On SQLite the writes take turns by design (one write lock), and "
        "the submits that wait for the turn commit together (group commit, `jobs/src/store/db.rs`): each runs "
        "in a savepoint of one transaction and is answered once that transaction's `COMMIT`, one `fsync` of "
        "the WAL for all of them, returned (`synchronous = FULL`, so an accepted submit survives a power cut); "
        "each round trip to a connection's thread is a hand-over between threads (about three context "
        "switches).",
        "",
        "### Bars of issue 32",
        "",
        "Issue 32's bars for the submit: at 8 connections, submits/s at least half of pgbench's TPS (heading for "
        "0.8×) and a p99 within 20 ms, on PostgreSQL and on SQLite, with the names eval kept and with every slot "
        "busy; the CPU per submit by process beside pgbench's per transaction, reported. The TLS runs are "
        "reported beside the plain ones.",
        "",
        "| Bar | Target | This run | met / not met |",
        "| --- | --- | --- | --- |",
    ]
    for r in runs:
        where = f"{ENGINES.get(r['engine'], r['engine'])}, {setting(r)}"
        tls = r["engine"] == "postgres" and r.get("sslmode") not in (None, "disable")
        if tls:
            where += f", {TLS.get(r.get('sslmode'), r.get('sslmode'))}"
        base = pgbench_for(pgbench, r)
        tps = base.get("tps")
        if tps:
            ratio = r["submits_per_s"] / tps
            verdict = "—" if tls else ("met" if ratio >= RATIO_BAR else "**not met**")
            target = "reported beside the plain run" if tls else f"≥ {RATIO_BAR}× (heading for {RATIO_HEADING}×)"
            out.append(f"| submit ÷ pgbench TPS at 8 connections, {where} | {target} | {ratio:.2f}× "
                       f"({r['submits_per_s']:,.0f} ÷ {tps:,.0f}) | {verdict} |")
        p99 = ms(r.get("latency_p99"))
        verdict = "—" if tls else ("met" if p99 is not None and p99 <= P99_BAR_MS else "**not met**")
        target = "reported beside the plain run" if tls else f"≤ {P99_BAR_MS:.0f} ms"
        out.append(f"| submit p99 at 8 connections, {where} | {target} | {p99:.1f} ms | {verdict} |")
        got = cpu_ms(r, r["submits_per_s"] * (r.get("seconds") or 0))
        txns = base.get("transactions") or (base.get("tps") or 0) * (base.get("duration_s") or 0)
        ref = cpu_ms(base, txns) if base else None
        if got:
            per, _ = got
            beside = (f"pgbench per transaction: PostgreSQL {ref[0]['postgres']:.2f}, pgbench {ref[0]['client']:.2f}, "
                      f"total {ref[0]['total']:.2f} ms") if ref else "pgbench did not run"
            out.append(
                f"| CPU per submit by process, {where} | reported beside pgbench's ({beside}) | api {per['api']:.2f}, "
                f"PostgreSQL {per['postgres']:.2f}, nix worker {per['workers']:.2f}, wrk {per['client']:.2f}, "
                f"other {per['other']:.2f}, total {per['total']:.2f} ms | — |"
            )
    out += ["", END]
    return out


def splice(doc, lines):
    splice_section(doc, BEGIN, END, "\n".join(lines))



def main(argv):
    if len(argv) not in (4, 6) or (len(argv) == 6 and argv[4] != "--splice"):
        sys.exit(__doc__)
    lines = [json.loads(l) for l in open(argv[1]).read().splitlines() if l.strip()]
    section = render(lines, argv[2], argv[3])
    print("\n".join(section))
    if len(argv) == 6:
        splice(argv[5], section)


if __name__ == "__main__":
    main(sys.argv)
