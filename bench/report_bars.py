#!/usr/bin/env python3
"""Gathers every bar of docs/BENCHMARKS.md into one section.

Usage: report_bars.py REPORT [--splice]

Each part of scripts/bench ends its section with a table headed
"| Bar | Target | This run | met / not met |". This script reads those
tables from REPORT, in the order the sections appear, and writes two
sections: "The bars of issue 32", the rows of the tables a part places
under a "### Bars of issue 32" heading, and "The bar of issue 11 (the bars
of issue 14)", every row. Each gives a row per bar, its part and whether
it is met, and a count of what is not. Without --splice it prints the
sections; with it, it rewrites only those sections of REPORT (between
their marker comments), placing them before the first part's section the first time.
"""

import re
import sys

BEGIN = "<!-- scripts/bench: bars section; every run of scripts/bench rewrites it from the sections below -->"
END = "<!-- scripts/bench: end of the bars section -->"
SECTION = re.compile(r"<!-- scripts/bench: (\S+) section; .*?-->(.*?)<!-- scripts/bench: end of the \1 section -->", re.S)
BEGIN_32 = "<!-- scripts/bench: issue 32 bars section; every run of scripts/bench rewrites it from the sections below -->"
END_32 = "<!-- scripts/bench: end of the issue 32 bars section -->"
HEADER = "| Bar | Target | This run |"
ISSUE_32 = "### Bars of issue 32"


def bars(text):
    """(part, heading, [cells], of issue 32) of every bar row, section by section."""
    found = []
    for part, body in SECTION.findall(text):
        if part == "bars":
            continue
        heading = part
        in_table = False
        sub = ""
        for line in body.splitlines():
            if line.startswith("## ") and heading == part:
                heading = line.lstrip("#").strip()
            if line.startswith("## ") or line.startswith("### "):
                sub = line.strip()
            if line.startswith(HEADER):
                in_table = True
                continue
            if in_table:
                if not line.startswith("|"):
                    in_table = False
                    continue
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if set("".join(cells)) <= set("-: "):
                    continue
                found.append((part, heading, cells, sub.startswith(ISSUE_32)))
    return found


def table(rows):
    """The gathered rows as Markdown table lines."""
    lines = ["| Part | Bar | Target | This run | |", "| --- | --- | --- | --- | --- |"]
    for _part, heading, cells, _ in rows:
        cells = (cells + [""] * 4)[:4]
        lines.append(f"| {heading} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} |")
    return lines


def unmet(rows):
    return [r for r in rows if "not met" in r[2][-1]]


def section_32(text):
    rows = [r for r in bars(text) if r[3]]
    lines = [
        BEGIN_32,
        "## The bars of issue 32",
        "",
        "The queue against graphile-worker, the submit against pgbench, 10,000 streams on one api, and",
        "the fleet one PostgreSQL coordinates: each bar gathered from its part's own section below,",
        "which gives the command, the commit and how it is measured.",
        "",
        f"{len(rows) - len(unmet(rows))} of {len(rows)} bars met.",
        "",
    ]
    lines += table(rows) if rows else ["| — | no part of this report has a bar of issue 32 | | | |"]
    lines.append(END_32)
    return "\n".join(lines)


def section(text):
    rows = bars(text)
    lines = [
        BEGIN,
        "## The bar of issue 11 (the bars of issue 14)",
        "",
        "Every bar of the parts below, gathered from their own tables: issue 14's items 1 to 6 (which",
        "asked for this heading) and issue 12's SBOM store. Each figure comes from the section it",
        "names, which gives the command and the commit it was measured with (a full `scripts/bench`",
        "measures every part in one run; `--only PART` re-measures one part and leaves the others).",
        "",
        f"{len(rows) - len(unmet(rows))} of {len(rows)} bars met.",
        "",
    ]
    lines += table(rows) if rows else ["| — | no part of this report has a bar table | | | |"]
    lines.append(END)
    return "\n".join(lines)


def splice(text, begin, end, new):
    """TEXT with the section between BEGIN and END replaced by NEW, or NEW
    placed before the first part's section (its marker comment comes before
    its heading), else before the first heading but "This run"."""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        return head + new + tail
    match = re.search(r"^<!-- scripts/bench: \S+ section;", text, re.M) or re.search(r"^## (?!This run).*$", text, re.M)
    at = match.start() if match else len(text)
    return text[:at] + new + "\n\n" + text[at:]


def main(argv):
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[2] != "--splice"):
        sys.exit(__doc__)
    text = open(argv[1]).read()
    if len(argv) == 2:
        print(section_32(text))
        print()
        print(section(text))
        return
    text = splice(text, BEGIN, END, section(text))
    text = splice(text, BEGIN_32, END_32, section_32(text))
    open(argv[1], "w").write(text)


if __name__ == "__main__":
    main(sys.argv)
