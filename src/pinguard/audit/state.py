"""Replaying layer analyses into the state after each build step.

Owns the OCI layer-application rules for the files pinguard keeps: an opaque whiteout
hides everything the lower layers had below its directory, a whiteout removes a path and
everything below it, and then the layer's own files are added. ``State`` keeps the merged
files (and, when RECORDs are verified, file digests) and hands the paths each layer touched
to the catalog, so only changed metadata is parsed again.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from typing import Generic, TypeVar

from pinguard.catalog import Catalog
from pinguard.layers.analysis import LayerAnalysis
from pinguard.models import Snapshot

V = TypeVar("V")


def _ancestors(path: str) -> Iterable[str]:
    parent = posixpath.dirname(path)
    while parent not in {"/", ""}:
        yield parent
        parent = posixpath.dirname(parent)


class _Tree(Generic[V]):
    """Values keyed by absolute path, with a count of entries below each directory so a
    whiteout of a directory holding nothing we keep costs one lookup, not a scan."""

    def __init__(self) -> None:
        self.items: dict[str, V] = {}
        self._dirs: dict[str, int] = {}

    def add(self, path: str, value: V) -> None:
        if path not in self.items:
            for d in _ancestors(path):
                self._dirs[d] = self._dirs.get(d, 0) + 1
        self.items[path] = value

    def _drop(self, path: str) -> None:
        del self.items[path]
        for d in _ancestors(path):
            left = self._dirs[d] - 1
            if left:
                self._dirs[d] = left
            else:
                del self._dirs[d]

    def remove_tree(self, path: str, keep_root: bool) -> list[str]:
        """Remove ``path`` (unless ``keep_root``) and everything below it; return what went."""
        gone: list[str] = []
        if not keep_root and path in self.items:
            self._drop(path)
            gone.append(path)
        if path in self._dirs or path == "/":
            prefix = "/" if path == "/" else path + "/"
            for p in [p for p in self.items if p.startswith(prefix)]:
                self._drop(p)
                gone.append(p)
        return gone


class State:
    """The merged view of the layers applied so far."""

    def __init__(self) -> None:
        self._files: _Tree[bytes] = _Tree()
        self._hashes: _Tree[str] = _Tree()
        self.catalog = Catalog()

    @property
    def files(self) -> dict[str, bytes]:
        return self._files.items

    @property
    def hashes(self) -> dict[str, str]:
        return self._hashes.items

    def _remove_tree(self, path: str, keep_root: bool) -> list[str]:
        self._hashes.remove_tree(path, keep_root)
        return self._files.remove_tree(path, keep_root)

    def apply(self, layer: LayerAnalysis) -> Snapshot:
        """Apply one layer and return the snapshot after it."""
        touched: list[str] = []
        for directory in layer.opaque:
            touched.extend(self._remove_tree(directory, keep_root=True))
        for path in layer.whiteouts:
            touched.extend(self._remove_tree(path, keep_root=False))
            touched.append(path)
        for path, data in layer.files.items():
            self._files.add(path, data)
            touched.append(path)
        for path, digest in layer.hashes.items():
            self._hashes.add(path, digest)
        self.catalog.update(self.files, touched)
        return self.catalog.snapshot(self.files)
