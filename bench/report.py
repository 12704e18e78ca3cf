#!/usr/bin/env python3
"""Renders the results of one `scripts/bench` run as Markdown (docs/BENCHMARKS.md).

Usage: report.py META_JSON RESULTS_TSV [--splice DOC]
RESULTS_TSV lines: label <TAB> quiet(yes|no|n/a) <TAB> JSON (or a plain text such as "not measured").

Prints the report's head, the queue section and, when measured in the same
run, the migrate section, each section between its marker comments. With
--splice it rewrites only those sections of DOC and keeps every other one
(and DOC's head); a DOC whose queue part predates the queue section's
markers (its unmarked text) gets the head, the bars section, the new queue
section, then every other marked section of DOC in its order.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_migrate  # noqa: E402

BEGIN = "<!-- scripts/bench: queue section; `scripts/bench --only queue` rewrites it -->"
END = "<!-- scripts/bench: end of the queue section -->"
SECTION = re.compile(r"<!-- scripts/bench: (\S+) section; .*?-->.*?<!-- scripts/bench: end of the \1 section -->", re.S)

meta = json.load(open(sys.argv[1]))
results = {}
raw = []
for line in open(sys.argv[2]):
    line = line.rstrip("\n")
    if not line:
        continue
    label, quiet, payload = line.split("\t", 2)
    try:
        value = json.loads(payload)
    except ValueError:
        value = payload
    results[label] = (quiet, value)
    raw.append((label, quiet, payload))

S = meta["sizes"]
N, NL, LAT, PN, C = S["n"], S["n_large"], S["latency_jobs"], S["procrastinate_n"], S["peer_concurrency"]


def get(label):
    return results.get(label, (None, None))[1]


def num(x, digits=0):
    if x is None:
        return "—"
    if isinstance(x, str):
        return x
    return f"{x:,.{digits}f}"


def rate(label):
    r = get(label)
    if not isinstance(r, dict):
        return None
    if not r.get("ok", False):
        return None
    return r.get("jobs_per_s")


def rate_cell(label):
    r = get(label)
    if r is None:
        return "—"
    if not isinstance(r, dict) or not r.get("ok", False):
        return "failed (see raw results)"
    return num(r["jobs_per_s"])


def best(*labels):
    vals = [(rate(l), l) for l in labels if rate(l) is not None]
    return max(vals) if vals else (None, None)


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def ratio_cell(x):
    return "—" if x is None else f"{x:.1f}×"


def lat(label):
    r = get(label)
    if not isinstance(r, dict):
        return None
    return r.get("enqueue_to_start_ms")


HEAD = [
    report_migrate.TITLE,
    "",
    "Written by `scripts/bench` (issue 3, item 9): do not edit by hand, re-run it. Each part's "
    "figures come from ONE run on ONE PostgreSQL server (its section names the run); absolute "
    "figures drift from run to run and machine to machine, the ratios less so.",
]

out = [BEGIN, "## The job queue: Slipway beside graphile-worker and procrastinate", ""]
w = out.append

if meta["quick"]:
    w("> **Smoke run (`--quick`)**: small N; these figures are not the benchmark.")
    w("")
w("### This run")
w("")
w(f"- Date: {meta['started']}; the whole run took {meta['elapsed_s'] // 60} min {meta['elapsed_s'] % 60} s.")
w(f"- Command: `{meta['command']}` (from the repository root; code at {meta['git']}).")
w(f"- Machine: {meta['cpu']}, {meta['cores']} cores, {meta['memory_gib']} GiB, {meta['kernel']}.")
if meta["not_quiet"] == 0:
    w(f"- Measured on a quiet machine: {meta['quiet_rule']}; every measurement met it.")
else:
    w(f"- **Not fully quiet**: {meta['not_quiet']} measurement(s) started while other work ran "
      f"(rule: {meta['quiet_rule']}); see the `quiet` column of the raw results.")
w(f"- PostgreSQL {meta['postgres']} at {meta['server']}; {meta['pg_settings']}. Server defaults, "
  "durable commits; each queue gets its own scratch database, created fresh for each measurement.")
w(f"- Slipway: {meta['apalis']}; {meta['rustc']}; release build of `slipway-queue-bench`.")
w(f"- Peers, installed from their registries into a scratch folder for this run: "
  f"graphile-worker {meta['graphile_worker']} on Node {meta['node']}; "
  f"procrastinate {meta['procrastinate']} on {meta['python']}.")
w("")

w("### Throughput: no-op jobs drained")
w("")
w(f"Jobs per second from the first job started to the last one recorded done. "
  f"Peers run {C} concurrent jobs per process.")
w("")
w(f"| Queue | Setting | {N:,} jobs | {NL:,} jobs | bulk insert before the drain |")
w("|---|---|---:|---:|---:|")


def insert_cell(label):
    r = get(label)
    if not isinstance(r, dict) or r.get("insert_jobs_per_s") is None:
        return "—"
    return f"{num(r['insert_jobs_per_s'])}/s"


w(f"| **Slipway** | **{meta['slipway_tuned']}** (headline: 4 slipway-workers with `BUILD_PREFETCH=150`) | **{rate_cell(f'slipway drain {N} (headline)')}** | **{rate_cell(f'slipway drain {NL} (headline)')}** | {insert_cell(f'slipway drain {N} (headline)')} |")
w(f"| Slipway | {meta['slipway_one_worker']} | {rate_cell(f'slipway drain {N} (1 worker)')} | {rate_cell(f'slipway drain {NL} (1 worker)')} | {insert_cell(f'slipway drain {N} (1 worker)')} |")
w(f"| Slipway | {meta['slipway_builds_default']} (one slipway-worker with its defaults: `BUILD_SLOTS=4`, prefetch = slots) | {rate_cell(f'slipway drain {N} (builds default)')} | — | {insert_cell(f'slipway drain {N} (builds default)')} |")
w(f"| Slipway | {meta['slipway_fleet_default']} (4 slipway-workers with their defaults) | {rate_cell(f'slipway drain {N} (fleet default)')} | — | {insert_cell(f'slipway drain {N} (fleet default)')} |")
for config in ("default", "batched"):
    for procs in (1, 2):
        label = f"graphile-worker drain {N} ({config}, {procs}x{C})"
        if get(label) is not None:
            ins = insert_cell(f"graphile-worker insert {N} ({config}, {procs}x{C})")
            w(f"| graphile-worker | {config}, {procs} process{'es' if procs > 1 else ''} × {C} | {rate_cell(label)} | — | {ins} |")
for procs in (1, 2):
    label = f"procrastinate drain {PN} ({procs}x{C})"
    if get(label) is not None:
        cell = rate_cell(label) + (f" ({PN:,} jobs)" if PN != N else "")
        ins = insert_cell(f"procrastinate insert {PN} ({procs}x{C})")
        w(f"| procrastinate | defaults, {procs} process{'es' if procs > 1 else ''} × {C} | {cell} | — | {ins} |")
w("")
w("The bulk insert column: the same jobs enqueued with the queue's bulk API, 5,000 per transaction.")
w("")

w(f"### Latency: enqueue → start, {LAT} jobs {S['spacing_ms']} ms apart, idle worker woken by LISTEN/NOTIFY")
w("")
w("Milliseconds from just before the insert is sent to the start of the job's handler, same process "
  "and clock; so the insert's own commit (last column) is included.")
w("")
w("| Queue | Setting | p50 | p95 | p99 | max | insert commit p50 |")
w("|---|---|---:|---:|---:|---:|---:|")


def lat_row(name, setting, label):
    r = get(label)
    if not isinstance(r, dict):
        return
    l, c = r.get("enqueue_to_start_ms", {}), r.get("enqueue_commit_ms", {})
    flag = "" if r.get("ok") else f" ({r.get('missing', '?')} missing)"
    w(f"| {name} | {setting}{flag} | {num(l.get('p50'), 2)} | {num(l.get('p95'), 2)} | {num(l.get('p99'), 2)} | {num(l.get('max'), 2)} | {num(c.get('p50'), 2)} |")


lat_row("**Slipway**", f"**{meta['slipway_tuned']}** (headline)", "slipway latency (headline)")
lat_row("Slipway", f"{meta['slipway_builds_default']} (builds default)", "slipway latency (builds default)")
lat_row("graphile-worker", f"default, 1 × {C}", "graphile-worker latency (default)")
lat_row("graphile-worker", f"batched, 1 × {C}", "graphile-worker latency (batched)")
lat_row("procrastinate", f"defaults, 1 × {C}", "procrastinate latency")
w("")

w("### Submit throughput and its ceiling")
w("")
pg = get("pgbench simple-update")
api = get("api submit")
w("| Measurement | Figure |")
w("|---|---:|")
if isinstance(pg, dict):
    w(f"| pgbench simple-update (`-i -s 10`; `-c4 -j2 -T{pg['duration_s']} -N`): one durable commit per transaction, the ceiling of one-commit-per-submit | {num(pg.get('tps'))} TPS (latency {num(pg.get('latency_avg_ms'), 2)} ms) |")
if isinstance(api, dict):
    extra = ", ".join(f"{k.replace('_', ' ')} {api[k]}" for k in ("latency_p50", "latency_p99", "connections", "errors") if k in api)
    share = ""
    if isinstance(pg, dict) and pg.get("tps") and api.get("submits_per_s"):
        share = f"; {api['submits_per_s'] / pg['tps']:.0%} of pgbench's TPS"
    w(f"| slipway-api submit throughput | {num(api.get('submits_per_s'))} submits/s{' (' + extra + ')' if extra else ''}{share} |")
else:
    w(f"| slipway-api submit throughput | {api or 'not measured'} |")
w("")

head20 = rate(f"slipway drain {N} (headline)")
one20 = rate(f"slipway drain {N} (1 worker)")
gd, gd_label = best(f"graphile-worker drain {N} (default, 1x{C})", f"graphile-worker drain {N} (default, 2x{C})")
gb, gb_label = best(f"graphile-worker drain {N} (batched, 1x{C})", f"graphile-worker drain {N} (batched, 2x{C})")
pr, pr_label = best(f"procrastinate drain {PN} (1x{C})", f"procrastinate drain {PN} (2x{C})")

w(f"### Ratios ({N:,}-job drains; each peer at its best of 1 and 2 processes)")
w("")
w("| Ratio | Slipway headline | Slipway, 1 worker |")
w("|---|---:|---:|")
w(f"| Slipway ÷ graphile-worker default | {ratio_cell(ratio(head20, gd))} | {ratio_cell(ratio(one20, gd))} |")
w(f"| Slipway ÷ graphile-worker batched | {ratio_cell(ratio(head20, gb))} | {ratio_cell(ratio(one20, gb))} |")
w(f"| Slipway ÷ procrastinate | {ratio_cell(ratio(head20, pr))} | {ratio_cell(ratio(one20, pr))} |")
w("")

w("### The bar of issue 3")
w("")
hl = lat("slipway latency (headline)") or {}
r_gd = ratio(head20, gd)


def met(cond):
    return "—" if cond is None else ("**met**" if cond else "**not met**")


w("| Criterion | Target | This run | |")
w("|---|---|---:|---|")
w(f"| Throughput vs graphile-worker's defaults (headline, `BUILD_PREFETCH=150`) | ≥ 1.5× | {ratio_cell(r_gd)} | {met(None if r_gd is None else r_gd >= 1.5)} |")
r_fd = ratio(rate(f"slipway drain {N} (fleet default)"), gd)
w(f"| The same with slipway-worker's defaults (4 workers, prefetch = `BUILD_SLOTS` = 4) | ≥ 1.5× | {ratio_cell(r_fd)} | {met(None if r_fd is None else r_fd >= 1.5)} |")
p50, p99 = hl.get("p50"), hl.get("p99")
w(f"| Enqueue → start p50 (LISTEN/NOTIFY) | ≤ 5 ms | {num(p50, 2)} ms | {met(None if p50 is None else p50 <= 5)} |")
w(f"| Enqueue → start p99 | ≤ 15 ms | {num(p99, 2)} ms | {met(None if p99 is None else p99 <= 15)} |")
r_gb = ratio(head20, gb)
w(f"| Heading for: graphile-worker's batched throughput | ≥ 1.0× | {ratio_cell(r_gb)} | {met(None if r_gb is None else r_gb >= 1.0)} |")
w(f"| Heading for: p99 under 10 ms | < 10 ms | {num(p99, 2)} ms | {met(None if p99 is None else p99 < 10)} |")
w("")

# Issue 32's bars: the tuned setting's best against graphile-worker's batched
# best, slipway-worker's defaults against graphile-worker's defaults, and
# enqueue → start no worse than the figures committed before issue 32.
BEFORE_32 = {"headline": (3.03, 6.51), "builds default": (3.10, 6.96)}
w("### Bars of issue 32")
w("")
w("Each figure from this run. *Tuned*: the better of Slipway's two tuned settings above "
  f"({meta['slipway_tuned']}; {meta['slipway_one_worker']}); *defaults*: {meta['slipway_fleet_default']}, "
  "four slipway-workers with `BUILD_SLOTS` and `BUILD_PREFETCH` at their defaults. Each peer at its best "
  "of 1 and 2 processes. The latency bars hold the figures committed before issue 32 "
  "(docs/BENCHMARKS.md of 2026-12-03).")
w("")
w("| Bar | Target | This run | met / not met |")
w("| --- | --- | --- | --- |")
tuned, tuned_label = best(f"slipway drain {N} (headline)", f"slipway drain {N} (1 worker)")
r_tb = ratio(tuned, gb)
tuned_cell = "—" if r_tb is None else f"{r_tb:.2f}× ({num(tuned)} vs {num(gb)} jobs/s)"
w(f"| Queue drain, tuned ÷ graphile-worker batched | ≥ 1.0× | {tuned_cell} | {met(None if r_tb is None else r_tb >= 1.0)} |")
fleet = rate(f"slipway drain {N} (fleet default)")
r_def = ratio(fleet, gd)
def_cell = "—" if r_def is None else f"{r_def:.2f}× ({num(fleet)} vs {num(gd)} jobs/s)"
w(f"| Queue drain, slipway-worker's defaults ÷ graphile-worker's defaults | ≥ 1.5× | {def_cell} | {met(None if r_def is None else r_def >= 1.5)} |")
for setting, label in (("headline", "slipway latency (headline)"), ("builds default", "slipway latency (builds default)")):
    l = lat(label) or {}
    for i, pct in enumerate(("p50", "p99")):
        target = BEFORE_32[setting][i]
        v = l.get(pct)
        w(f"| Enqueue → start {pct}, {setting} | ≤ {target:.2f} ms | {num(v, 2)} ms | {met(None if v is None else v <= target)} |")
w("")

w("### How it is measured")
w("")
w(f"""- **Same PostgreSQL, same steps for every queue.** Each drain gets a new database: the queue's own
  schema (apalis-postgres's migrations, graphile-worker's `runMigrations`, procrastinate's schema),
  `VACUUM ANALYZE` of the empty job tables (the statistics a fresh schema has), the jobs inserted
  with the queue's bulk API in batches of 5,000 per transaction (`apalis_postgres::queries::push_tasks`,
  `addJobs`, `batch_defer_async`), a `CHECKPOINT`, then the workers start.
- **Drain throughput** = jobs ÷ (last job recorded done − first job started). Slipway: the handler
  counts starts, then the bench polls `apalis.jobs` until every row is `Done`. Peers: each worker
  process runs until the queue is empty (`runOnce`, `wait=False`) and reports when it finished;
  the driver checks that no job is left.
- **Latency**: the worker runs idle; one job is inserted every {S['spacing_ms']} ms from a separate
  connection, after 20 warm-up jobs and a 1 s pause; the figure is handler start − the instant just
  before the insert was sent.
- **Slipway's queue** is built by the same constructor slipway-worker builds its `builds` queue
  with (`QueueSettings::postgres` in `worker/src/storage.rs`, called by `slipway_queue_worker`
  in `bench/queue/src/main.rs`): explicit queue name, batch size, apalis's heartbeat at half of
  Slipway's 5 s with the same missed-beat window, LISTEN/NOTIFY plus a 1 s poll; a unique name per
  worker and a `WorkerBuilder` with `.concurrency(n)`. `--batch-size` is slipway-worker's `BUILD_PREFETCH` (apalis `batch_size`;
  its default is `BUILD_SLOTS`), `--concurrency` is what the worker gives apalis (the larger of
  the two); the worker's own slot semaphore, which keeps builds at `BUILD_SLOTS`, and the build
  bodies (claim, effect, finish) are not part of a no-op job. Each worker's jobs' starts and ends
  are written by its own completer (`worker/src/completer.rs`), many per statement, while it
  fetches, as in slipway-worker. Several workers of one setting run in one process, each with its
  own name, storage, LISTEN connection, completer and heartbeat, as separate worker processes
  would; the pool has 3 connections per worker + 1. The job table's indexes are those Slipway's
  migrations leave (0025 drops two of apalis's duplicates).
- **Peers**: graphile-worker *default* = the library's defaults except `concurrency: {C}` (the
  library's default is 1) and `maxPoolSize: {C + 1}`; *batched* adds the settings graphile-worker
  documents for its own performance test (`localQueue: {{ size: 500 }}`, `completeJobBatchDelay: 0`,
  `failJobBatchDelay: 0`). procrastinate: defaults (LISTEN/NOTIFY on, jobs kept), concurrency {C}.
  The drivers are Slipway's own, in `bench/peers/`.""")
w("")

w("### What the tuning changed (found while building this bench)")
w("")
w("""Figures in this section come from exploratory runs of `slipway-queue-bench` on this machine,
often with other work running, not from the run above: compare ratios, not absolute values.

- **`batch_size` is the lever.** An apalis worker claims `batch_size` jobs in one transaction, runs
  them, and (before issue 32's completer) acknowledged the whole batch in one more transaction before
  its next fetch: two commits per batch, whatever the batch size. One worker drained 20,000 jobs at about 800/s with
  batch 4, 2,100/s with batch 10, 4,000–6,000/s with batch 40–60 and 7,000–10,000/s with
  batch 100–150.
- **More workers** (each with its own unique name, LISTEN connection and pool share): at batch 150,
  1 → 2 → 3 → 4 workers gave about 8,000 → 15,500 → 20,000 → 22,000 jobs/s on 20,000 jobs, 6
  workers hardly more. Pool size beyond 2 connections per worker and `concurrency` (for no-op jobs)
  changed nothing.
- **Batches above ~150 hit a 40–50 ms TCP stall per ack.** sqlx 0.9 does not set `TCP_NODELAY`.
  The ack of 200 jobs is one statement of about 84 kB, written in several pieces; the last piece
  then waits for the server's delayed ACK (seen with strace: ~50 ms between the ack's last write
  and the next statement). Batch 200 fell from ~8,700 jobs/s over a Unix socket to ~3,200 over
  TCP; at batch 150 (about 63 kB) TCP and the Unix socket were alike. Every figure above is over
  TCP, like the peers'. The same stall would hit any large statement Slipway sends over TCP.
- **An ack can read the worker's whole history.** apalis's ack query joins the acked ids with
  `lock_by = <worker>`. When the planner expects few rows for that worker (always true of a new,
  uniquely named worker until the next `ANALYZE`), it reads them through `idx_apalis_jobs_lock_by`:
  every row that worker ever finished and that is still in the table. Acks then slow down as the
  worker's history grows; small batches suffer most, and several workers, each with a shorter
  history, help. With auto_explain on a 100,000-job drain (one worker, batch 150): the first 304
  acks read the worker's whole history, up to 45,600 rows and 22 ms per ack; then the plan switched
  to the primary key and acks became cheap, which is why the 100,000-job drains are not much slower
  than the 20,000-job ones. A retention sweep that deletes finished rows (Q-6) bounds the cost; at
  Slipway's build rates it does not matter.
- **Statistics matter.** With `ANALYZE` run right after the insert (the whole backlog `Pending`,
  no `lock_by` anywhere), one worker at batch 10 drained 500–1,000 jobs/s instead of ~2,100. The
  bench gives every queue the statistics of its empty tables, and leaves autovacuum on.
- **Latency** is the NOTIFY round trip plus one fetch transaction: 2–3 ms at p50, of which the
  insert's own commit is about 1.2–1.5 ms. The tail follows the insert's commit: p99 spikes seen
  while tuning were fsync stalls of the insert, shared by every queue, when other work used the disk.""")
w("")

fair_runs = [(label, get(label)) for label in ("slipway fair 500+5 (unfair)", "slipway fair 500+5 (fair)")]
if any(isinstance(r, dict) for _, r in fair_runs):
    w("### Fair shares: tenant A queues 500 builds, then tenant B 5 (FS-1)")
    w("")
    w("One worker with one build slot; each job takes 20 ms (a build, scaled down). B queues once A's first "
      "job runs. Unfair: every job at priority 0 (the queue before fair shares). Fair: the priorities "
      "of `jobs/src/store/fair.rs`.")
    w("")
    w("| Queue | B's first start after B queued, ms | in build times | A's jobs started before it | jobs/s |")
    w("|---|---:|---:|---:|---:|")
    for label, r in fair_runs:
        if isinstance(r, dict):
            w(f"| {label} | {num(r.get('b_first_start_ms'), 1)} | {num(r.get('b_first_start_builds'), 2)} | "
              f"{num(r.get('a_started_before_b'))} | {num(r.get('jobs_per_s'), 1)} |")
    w("")

w("### Raw results")
w("")
w("One line per measurement: label, whether the machine was quiet, the driver's JSON output "
  "(migrate + validate: in its own section).")
w("")
w("```text")
for label, quiet, payload in raw:
    if label != report_migrate.LABEL:
        w(f"{label}\t{quiet}\t{payload}")
w("```")
w("")
w(END)

sections = ["\n".join(out)]
if report_migrate.LABEL in results:
    m_quiet, m_result = results[report_migrate.LABEL]
    sections.append("\n".join(report_migrate.section(meta, m_quiet, m_result, own_run=False)))


def marked(text):
    """(part, text) of every marked section of `text`, in order."""
    return [(m.group(1), m.group(0)) for m in SECTION.finditer(text)]


def splice(doc):
    """Rewrites this run's sections of `doc` in place, keeping the rest."""
    try:
        text = open(doc).read()
    except FileNotFoundError:
        text = ""
    if not text.strip():
        text = "\n".join(HEAD) + "\n\n" + "\n\n".join(sections) + "\n"
    elif BEGIN in text and END in text:
        ours = dict(marked("\n\n".join(sections)))
        for part, new in ours.items():
            begin = next((m for p, m in marked(text) if p == part), None)
            if begin is not None:
                text = text.replace(begin, new, 1)
            else:
                text = text.rstrip("\n") + "\n\n" + new + "\n"
    else:
        # The layout before the queue section had markers: its unmarked
        # text was the queue's. Head, bars, queue, then the other sections.
        ours = dict(marked("\n\n".join(sections)))
        old = marked(text)
        bars = [m for p, m in old if p == "bars"]
        rest = [ours.pop(p, m) for p, m in old if p != "bars"]
        text = "\n\n".join(["\n".join(HEAD), *bars, ours.pop("queue"), *rest, *ours.values()]) + "\n"
    open(doc, "w").write(text)


if len(sys.argv) == 5 and sys.argv[3] == "--splice":
    splice(sys.argv[4])
elif len(sys.argv) == 3:
    print("\n".join(HEAD) + "\n\n" + "\n\n".join(sections))
else:
    sys.exit(__doc__)
