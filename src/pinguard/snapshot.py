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

from pinguard.catalog import Catalog
from pinguard.layers import LayerAnalysis
from pinguard.models import Snapshot


def _ancestors(path: str) -> Iterable[str]:
    parent = posixpath.dirname(path)
    while parent not in {"/", ""}:
        yield parent
        parent = posixpath.dirname(parent)


class State:
    """The merged view of the layers applied so far."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.hashes: dict[str, str] = {}
        self._dirs: dict[str, int] = {}  # directory -> number of kept files below it
        self.catalog = Catalog()

    def _add(self, path: str, data: bytes) -> None:
        if path not in self.files:
            for d in _ancestors(path):
                self._dirs[d] = self._dirs.get(d, 0) + 1
        self.files[path] = data

    def _drop(self, path: str) -> None:
        if self.files.pop(path, None) is not None:
            for d in _ancestors(path):
                left = self._dirs[d] - 1
                if left:
                    self._dirs[d] = left
                else:
                    del self._dirs[d]

    def _remove_tree(self, path: str, keep_root: bool) -> list[str]:
        gone: list[str] = []
        if not keep_root and path in self.files:
            self._drop(path)
            gone.append(path)
        if path in self._dirs or path == "/":
            prefix = "/" if path == "/" else path + "/"
            for p in [p for p in self.files if p.startswith(prefix)]:
                self._drop(p)
                gone.append(p)
        if self.hashes:
            prefix = "/" if path == "/" else path + "/"
            for p in [
                p for p in self.hashes if p.startswith(prefix) or (p == path and not keep_root)
            ]:
                del self.hashes[p]
        return gone

    def apply(self, layer: LayerAnalysis) -> Snapshot:
        """Apply one layer and return the snapshot after it."""
        touched: list[str] = []
        for directory in layer.opaque:
            touched.extend(self._remove_tree(directory, keep_root=True))
        for path in layer.whiteouts:
            touched.extend(self._remove_tree(path, keep_root=False))
            touched.append(path)
        for path, data in layer.files.items():
            self._add(path, data)
            touched.append(path)
        self.hashes.update(layer.hashes)
        self.catalog.update(self.files, touched)
        return self.catalog.snapshot(self.files)
