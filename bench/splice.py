"""One marked section of a Markdown report rewritten in place.

Every part of scripts/bench renders a section that starts with its own
BEGIN marker comment and ends with its END marker, and with --splice
rewrites only that section of docs/BENCHMARKS.md. The report scripts call
splice() below for it.
"""


def splice(doc, begin, end, section, before=None):
    """Replaces the text from `begin` to `end` in the file `doc` with
    `section` (which holds both markers). A section not there yet goes
    before the line `before` when given and present, otherwise at the end;
    a missing file is created."""
    try:
        text = open(doc).read()
    except FileNotFoundError:
        text = ""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + section + tail
    elif before and before in text:
        head, tail = text.split(before, 1)
        text = head + section + "\n\n" + before + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    open(doc, "w").write(text)
