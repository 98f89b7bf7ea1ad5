"""Writing output files atomically, so a reader never sees half a report or constraints file.

Missing parent directories are created first, as trivy's ``-o`` does (``-o
constraints/glm.txt`` in a fresh checkout). A file that cannot be written (a "directory" that
is a regular file, an unwritable directory, a full disk, a file size limit) raises
``OutputError`` (exit 2) naming the path and the reason; the temporary file and any directory
this write created are removed, and an existing file at the path is left as it was."""

from __future__ import annotations

import os
from pathlib import Path

from pinguard.errors import OutputError


def _make_parents(directory: Path) -> list[Path]:
    """Create ``directory`` and its missing parents; return the ones created, deepest last."""
    missing: list[Path] = []
    for parent in (directory, *directory.parents):
        if parent.exists() or parent.is_symlink():
            break
        missing.append(parent)
    created: list[Path] = []
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            continue  # made meanwhile by someone else: theirs, not ours to remove
        created.append(folder)
    return created


def _remove(created: list[Path]) -> None:
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:
            return  # not empty (someone else wrote there) or gone: leave the rest


def atomic_write(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory, creating
    the directory (and its parents) when missing."""
    import tempfile  # here: a report written to stdout needs none

    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    created: list[Path] = []
    try:
        created = _make_parents(directory)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        _remove(created)
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
        _remove(created)
        raise OutputError(f"cannot write {str(target)!r}: {exc.strerror or exc}") from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        _remove(created)
        raise
