"""Writing output files atomically, so a reader never sees half a report or constraints file.

A file that cannot be written (a missing or unwritable directory, a full disk, a file size
limit) raises ``OutputError`` (exit 2) naming the path and the reason; the temporary file is
removed and an existing file at the path is left as it was."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pinguard.errors import OutputError


def atomic_write(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise OutputError(f"cannot write {str(target)!r}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o777)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"cannot write {str(target)!r}: {exc.strerror or exc}") from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
