"""Where a command's document goes: stdout, or a file written atomically and named on stderr.

Apart from ``common.py`` so that a warm audit answered before parsing (``warm.answer``)
writes its report exactly as every command writes its own, without loading the parser's
modules. A stdout that cannot take the document (closed, on a full disk, its reader gone) is
an ``OutputError`` naming the document, as an unwritable ``-o`` is: one line and exit 2, never
a traceback, and never taken for the command's verdict."""

from __future__ import annotations

import os
import sys

from pinguard.errors import OutputError
from pinguard.fileio import atomic_write

# ``typing.TYPE_CHECKING`` without importing typing (a warm audit passes through here)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO


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
    """``text`` on stdout (``write_stdout``), or written to ``output`` (``-o``) by
    ``write_output``."""
    if output:
        write_output(output, text, what)
    else:
        write_stdout(text, what)


def write_stdout(text: str, what: str) -> None:
    """``text`` on stdout, flushed; ``OutputError`` naming ``what`` when stdout is closed or
    the write fails (through the command's ``GuardedStdout``, or one made for this write)."""
    out = sys.stdout if isinstance(sys.stdout, GuardedStdout) else GuardedStdout(sys.stdout)
    try:
        out.write(text)
        out.flush()
    except StdoutFailure as exc:
        raise OutputError(f"cannot write {what} to stdout: {exc.why}") from None


class StdoutFailure(OutputError):
    """stdout could not take a write: ``why`` says why."""

    def __init__(self, why: str) -> None:
        super().__init__(f"cannot write to stdout: {why}")
        self.why = why


class GuardedStdout:
    """``sys.stdout`` for the length of a command (``guard_stdout``): every write and
    flush that fails, however the command prints (a report, rich's table, a line), raises
    ``StdoutFailure``; a process started with its stdout closed fails at its first write,
    not before, so a command that prints nothing there (``-o``) is not an error. A failed
    stream is pointed at the null device, so what is left in its buffer goes nowhere and the
    interpreter's last flush has nothing to fail on. Anything else is the real stream's."""

    def __init__(self, inner: TextIO | None) -> None:
        self.inner = inner
        self.failed = False

    def write(self, text: str) -> int:
        if self.inner is None:
            if not text:
                return 0
            raise self._fail("stdout is closed")
        try:
            return self.inner.write(text)
        except (OSError, ValueError) as exc:  # ValueError: the file object itself was closed
            raise self._fail(_why(exc)) from None

    def flush(self) -> None:
        if self.inner is None or self.failed:
            return
        try:
            self.inner.flush()
        except (OSError, ValueError) as exc:
            raise self._fail(_why(exc)) from None

    def isatty(self) -> bool:
        return self.inner is not None and self.inner.isatty()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _fail(self, why: str) -> StdoutFailure:
        self.failed = True
        try:  # the stream's own descriptor: a stream with none (a test's StringIO) is left
            fd = self.inner.fileno() if self.inner is not None else -1
            if fd >= 0:
                null = os.open(os.devnull, os.O_WRONLY)
                try:
                    os.dup2(null, fd)
                finally:
                    os.close(null)
        except (OSError, ValueError, AttributeError):
            pass
        return StdoutFailure(why)


def guard_stdout() -> GuardedStdout:
    """Put a ``GuardedStdout`` in ``sys.stdout`` for a command; ``release_stdout`` ends it."""
    guard = GuardedStdout(sys.stdout)
    sys.stdout = guard  # a TextIO in all a command uses of it
    return guard


def release_stdout(guard: GuardedStdout) -> None:
    """The real stream back in ``sys.stdout``."""
    if sys.stdout is guard:
        sys.stdout = guard.inner


def _why(exc: Exception) -> str:
    if isinstance(exc, BrokenPipeError):
        return "its reader closed the pipe"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return "stdout is closed"
