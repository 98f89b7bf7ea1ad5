"""Cache keys: one digest over a key's parts, and digests of the code and files a key covers.

Every cache entry pinguard keeps is named by ``digest_of(parts)``: the sha256 over each part
followed by a NUL (so two parts never run together into a third). What goes into a key is
the caller's business (``cache/local.cache_key``: the entry format, the code that makes a
layer analysis, the analyzers; ``audit/replay.replay_key``: the image chain and the code that
replays it; ``cli/warm.result_key``: everything an audit's report depends on); how it becomes
a name is this module's. ``source_digest`` hashes a module's source (every module of a
package), so a change to the code invalidates its entries without anyone remembering a
version bump; ``package_digest`` hashes every file of a package, data included (built-in
policies, schemas, templates). Both read through ``importlib.resources``, so they work on a
package on disk and inside a zipapp alike (the in-build guard runs from ``pinguard.pyz``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from functools import cache
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.abc import Traversable  # importlib.resources.abc from 3.11 on


def digest_of(parts: Iterable[str]) -> str:
    """The sha256 (hex) over ``parts``, each followed by a NUL."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogateescape") + b"\0")
    return h.hexdigest()


def _walk(package: str, keep: tuple[str, ...] | None) -> list[tuple[str, bytes]]:
    """(name, bytes) of every file below ``package`` whose name ends in one of ``keep``
    (None: every file), sorted by path; ``__pycache__`` is never entered."""
    out: list[tuple[str, bytes]] = []
    root = resources.files(package)
    if isinstance(root, Path):  # on disk (most installs): os.scandir, 4x less time than below
        _scan(str(root), f"{package}/", keep, out)
        return out

    def walk(node: Traversable, prefix: str) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            if child.is_dir():
                if child.name != "__pycache__":
                    walk(child, f"{prefix}{child.name}/")
            elif keep is None or child.name.endswith(keep):
                out.append((f"{package}/{prefix}{child.name}", child.read_bytes()))

    walk(root, "")
    return out


def _scan(
    directory: str, prefix: str, keep: tuple[str, ...] | None, out: list[tuple[str, bytes]]
) -> None:
    """``_walk`` of a directory on disk (the same names, order and bytes)."""
    with os.scandir(directory) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if entry.is_dir():
            if entry.name != "__pycache__":
                _scan(entry.path, f"{prefix}{entry.name}/", keep, out)
        elif keep is None or entry.name.endswith(keep):
            with open(entry.path, "rb") as fh:
                out.append((prefix + entry.name, fh.read()))


def _sources(module: ModuleType) -> list[tuple[str, bytes]]:
    """(name, bytes) of a module's source; for a package, of every module file below it."""
    file = getattr(module, "__file__", None)
    if file is None:
        raise RuntimeError(f"module {module.__name__!r} has no file: cannot key the cache")
    if not hasattr(module, "__path__"):
        loader = getattr(module.__spec__, "loader", None)
        get_data = getattr(loader, "get_data", None)  # a file on disk or inside a zipapp
        return [(module.__name__, get_data(file) if get_data else Path(file).read_bytes())]
    out = _walk(module.__name__, (".py", ".pyc"))
    if not out:
        raise RuntimeError(f"package {module.__name__!r} has no module files to key the cache")
    return out


def _digest(files: Iterable[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for name, data in files:
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


@cache
def source_digest(module: ModuleType) -> str:
    """sha256 over the source of ``module`` (all of it, for a package)."""
    return _digest(_sources(module))


@cache
def package_digest(package: str) -> str:
    """sha256 over every file of the package named ``package`` (modules and data alike),
    read without importing any module below it."""
    return _digest(_walk(package, None))
