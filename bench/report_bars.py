#!/usr/bin/env python3
"""Gathers every bar of docs/BENCHMARKS.md into one section.

Usage: report_bars.py REPORT [--splice]

Each part of scripts/bench ends its section with a table headed
"| Bar | Target | This run | met / not met |". This script reads those
tables from REPORT, in the order the sections appear, and writes one
section "The bar of issue 11 (the bars of issue 14)" with a row per bar, its part and whether it is
met, and a count of what is not. Without --splice it prints the section;
with it, it rewrites only that section of REPORT (between its marker
comments), placing it before the first part's section the first time.
"""

import re
import sys

BEGIN = "<!-- scripts/bench: bars section; every run of scripts/bench rewrites it from the sections below -->"
END = "<!-- scripts/bench: end of the bars section -->"
SECTION = re.compile(r"<!-- scripts/bench: (\S+) section; .*?-->(.*?)<!-- scripts/bench: end of the \1 section -->", re.S)
HEADER = "| Bar | Target | This run |"


def bars(text):
    """(part, heading, [cells]) of every bar row, section by section."""
    found = []
    for part, body in SECTION.findall(text):
        if part == "bars":
            continue
        heading = part
        in_table = False
        for line in body.splitlines():
            if line.startswith("## ") and heading == part:
                heading = line.lstrip("#").strip()
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
                found.append((part, heading, cells))
    return found


def section(text):
    rows = bars(text)
    unmet = [r for r in rows if "not met" in r[2][-1]]
    lines = [
        BEGIN,
        "## The bar of issue 11 (the bars of issue 14)",
        "",
        "Every bar of the parts below, gathered from their own tables: issue 14's items 1 to 6 (which",
        "asked for this heading) and issue 12's SBOM store. Each figure comes from the section it",
        "names, which gives the command and the commit it was measured with (a full `scripts/bench`",
        "measures every part in one run; `--only PART` re-measures one part and leaves the others).",
        "",
        f"{len(rows) - len(unmet)} of {len(rows)} bars met.",
        "",
        "| Part | Bar | Target | This run | |",
        "| --- | --- | --- | --- | --- |",
    ]
    for part, heading, cells in rows:
        cells = (cells + [""] * 4)[:4]
        lines.append(f"| {heading} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} |")
    if not rows:
        lines.append("| — | no part of this report has a bar table | | | |")
    lines.append(END)
    return "\n".join(lines)


def main(argv):
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[2] != "--splice"):
        sys.exit(__doc__)
    text = open(argv[1]).read()
    new = section(text)
    if len(argv) == 2:
        print(new)
        return
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = head + new + tail
    else:
        # Before the first part's section (its marker comment comes before
        # its heading), else before the first heading but "This run".
        match = re.search(r"^<!-- scripts/bench: \S+ section;", text, re.M) or re.search(
            r"^## (?!This run).*$", text, re.M
        )
        at = match.start() if match else len(text)
        text = text[:at] + new + "\n\n" + text[at:]
    open(argv[1], "w").write(text)


if __name__ == "__main__":
    main(sys.argv)
