"""Where a command's document goes: stdout, or a file written atomically and named on stderr.

Apart from ``common.py`` so that a warm audit answered before parsing (``warm.answer``)
writes its report exactly as every command writes its own, without loading the parser's
modules."""

from __future__ import annotations

import sys

from pinguard.fileio import atomic_write


def write_output(path: str, text: str, what: str) -> None:
    """Write ``text`` atomically to ``-o PATH`` and say so on stderr (stdout stays free for
    a pipe): ``wrote the json report (12345 bytes) to PATH``."""
    atomic_write(path, text)
    size = len(text.encode("utf-8"))
    print(f"wrote {what} ({size} bytes) to {path}", file=sys.stderr)


def what_report(fmt: str) -> str:
    """How an audit's report of format ``fmt`` is named on stderr: ``the json report``."""
    return f"the {fmt} report"


def emit(text: str, output: str | None, what: str) -> None:
    """``text`` on stdout, or written to ``output`` (``-o``) by ``write_output``."""
    if output:
        write_output(output, text, what)
    else:
        sys.stdout.write(text)
