"""Replaying layer analyses into the state after each build step.

Owns the OCI layer-application rules for the files pinguard keeps: an opaque whiteout
hides everything the lower layers had below its directory, resolved through links as
containerd resolves it (a marker below ``opt/link -> /opt/venv/...`` empties the link's
target; when the layer also made a directory at a link's path, ``rm L && mkdir L``, the
directory replaces the link instead), a whiteout removes a path and
everything below it (a whiteout at the root, ``/.wh.opt``, removes ``/opt``), then the
layer's links replace whatever was at their paths, and then its files are added. Every
member lands where its directory resolves through the links kept so far, inside the root
(``pinguard.layers.links``), as containerd applies a layer, so a state's paths are real
paths. ``State`` keeps the merged files, file digests (when RECORDs are
verified), analyzers' streamed results and what their ``prepare`` parsed in the worker that
read a layer (kept for files that landed where the layer stored them), and hands the paths
each layer touched to the catalog, so only changed metadata is parsed again, and mostly not
here.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar

from pinguard.catalog import AnalyzerOptions, Analyzers, StateView, StepFacts
from pinguard.layers.analysis import LayerAnalysis
from pinguard.layers.links import resolve, resolve_parent
from pinguard.models import Snapshot

V = TypeVar("V")


def _parent(path: str) -> str | None:
    """The directory above ``path``, None above the top (``/`` left out): cut at its last
    slash; a path with ``//`` or a trailing ``/`` through ``posixpath.dirname``."""
    if "//" in path or path.endswith("/"):
        parent = posixpath.dirname(path)
        return parent if parent.strip("/") else None  # "//" (POSIX keeps it) is the top too
    cut = path.rfind("/")
    return path[:cut] if cut > 0 else None


class _Tree(Generic[V]):
    """Values keyed by absolute path, with the directories that hold any of them, so a
    whiteout of a directory holding nothing we keep costs one lookup, not a scan. Each such
    directory counts what is directly in it (kept paths and such directories), so adding or
    dropping a path touches its parent, and only the levels above that it creates or empties
    (one lookup for most paths, not one per level)."""

    def __init__(self) -> None:
        self.items: dict[str, V] = {}
        self._dirs: dict[str, int] = {}

    def add(self, path: str, value: V) -> None:
        if path not in self.items:
            dirs = self._dirs
            d = _parent(path)
            while d is not None:
                n = dirs.get(d)
                if n is not None:
                    dirs[d] = n + 1
                    break
                dirs[d] = 1  # a new directory: it is in its own parent
                d = _parent(d)
        self.items[path] = value

    def _drop(self, path: str) -> None:
        del self.items[path]
        dirs = self._dirs
        d = _parent(path)
        while d is not None:
            n = dirs[d] - 1
            if n:
                dirs[d] = n
                break
            del dirs[d]  # emptied: it leaves its own parent
            d = _parent(d)

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


class State(StateView):
    """The merged view of the layers applied so far."""

    def __init__(self, analyzers: Analyzers | None = None) -> None:
        self._files: _Tree[bytes] = _Tree()
        self._hashes: _Tree[str] = _Tree()
        self._streamed: _Tree[Mapping[str, object]] = _Tree()
        self._links: _Tree[str] = _Tree()
        # (opaque directory as stored, the real directory it was applied to) for each
        # opaque marker of the last layer applied whose directory is a lower layer's link
        # (runtimes disagree there: docs/reliability.md)
        self.opaque_through_links: list[tuple[str, str]] = []
        # {analyzer: {landed path: what the worker's ``prepare`` made of that file}}
        self._prepared: dict[str, dict[str, object]] = {}
        self.catalog = (analyzers or Analyzers.for_options(AnalyzerOptions())).catalog()

    @property
    def files(self) -> dict[str, bytes]:
        return self._files.items

    @property
    def hashes(self) -> dict[str, str]:
        return self._hashes.items

    @property
    def streamed(self) -> dict[str, Mapping[str, object]]:
        return self._streamed.items

    @property
    def links(self) -> dict[str, str]:
        return self._links.items

    def prepared(self, analyzer: str) -> dict[str, object]:
        return self._prepared.get(analyzer, {})

    def file_digests(self, snapshot: Snapshot) -> dict[str, str]:
        """The file digests, each also under every RECORD path of ``snapshot`` that reaches
        the file through links (a RECORD names files as its environment's path sees them)."""
        hashes = self._hashes.items
        out = dict(hashes)
        links = self._links.items
        if not hashes or not links:
            return out
        for env in snapshot.environments:
            for dist in env.distributions:
                for path, _ in dist.record:
                    if path not in out:
                        real = resolve(path, links)
                        if real is not None and real in hashes:
                            out[path] = hashes[real]
        return out

    def _remove_tree(self, path: str, keep_root: bool) -> list[str]:
        self._hashes.remove_tree(path, keep_root)
        self._links.remove_tree(path, keep_root)
        gone = self._streamed.remove_tree(path, keep_root)
        return self._files.remove_tree(path, keep_root) + gone

    def _landing(self, path: str, memo: dict[str, str | None]) -> str:
        """Where a member at ``path`` lands: its directory resolved through the links kept so
        far, inside the root (``pinguard.layers.links``), as containerd applies a layer. On
        a link loop the path is kept as stored."""
        return resolve_parent(path, self._links.items, memo) or path

    def _read_through(self, added: Iterable[str], touched: list[str]) -> None:
        """A new link to a kept file reads as that file at the link's path too: a hard link
        is the same file, and a program opening a symlink reads its target (uv links the
        files of its cache, METADATA included, into site-packages)."""
        files, links = self._files.items, self._links.items
        for path in added:
            real = resolve(path, links)
            if real is not None and real != path and real in files:
                self._files.add(path, files[real])
                touched.append(path)

    def apply(self, layer: LayerAnalysis, step: StepFacts | None = None) -> Snapshot:
        """Apply one layer and return the snapshot after it (``step``: the layer's digest,
        what it streamed and the image's facts, for the analyzers' post-state hooks).

        Every member lands where its directory resolves through the links already applied
        (a layer written through ``site-packages -> /opt/pkgs`` lands in ``/opt/pkgs``), and
        a link replaces whatever the lower layers had at its path, a directory tree
        included. A layer's links are applied before its files (in path order, so a link
        inside a linked directory of the same layer lands through it)."""
        touched: list[str] = []
        memo: dict[str, str | None] = {}
        self.opaque_through_links = []
        made = set(layer.opaque_made)
        for stored in layer.opaque:
            path = self._landing(stored, memo)
            if path in self._links.items and stored in made:
                # The layer made a directory where a lower layer had a link (``rm L &&
                # mkdir L``: buildah writes ``L/`` and ``L/.wh..wh..opq``): as containerd
                # applies a directory entry over a link, the link goes and its target is
                # left alone.
                touched.extend(self._remove_tree(path, keep_root=False))
                touched.append(path)
                memo.clear()
                continue
            # As containerd applies the marker: its directory resolved inside the root,
            # through a link at the path itself too (``fs.RootPath``), loses what the lower
            # layers had there.
            real = resolve(stored, self._links.items) or path
            if real != path:
                self.opaque_through_links.append((stored, real))
            touched.extend(self._remove_tree(real, keep_root=True))
        for stored in layer.whiteouts:
            path = self._landing(stored, memo)
            touched.extend(self._remove_tree(path, keep_root=False))
            touched.append(path)
        memo.clear()
        added: list[str] = []
        for stored, target in sorted(layer.links.items()):
            path = self._landing(stored, memo)
            touched.extend(self._remove_tree(path, keep_root=False))
            self._links.add(path, target)
            memo.clear()  # a directory link changes where later paths land
            touched.append(path)
            added.append(path)
        for stored, data in layer.files.items():
            path = self._landing(stored, memo)
            self._files.add(path, data)
            if path in self._links.items:
                self._links.remove_tree(path, keep_root=False)  # a file replaced a link
            touched.append(path)
        for stored, digest in layer.hashes.items():
            self._hashes.add(self._landing(stored, memo), digest)
        for name, values in layer.prepared.items():
            kept = self._prepared.setdefault(name, {})
            for stored, value in values.items():
                if self._landing(stored, memo) == stored:  # landed through no link: the
                    kept[stored] = value  # value was made for this path (else parsed here)
        for stored, results in layer.streamed.items():
            if not isinstance(results, Mapping):
                raise TypeError(f"streamed result for {stored!r} is not keyed by analyzer")
            path = self._landing(stored, memo)
            self._streamed.add(path, results)
            self._links.remove_tree(path, keep_root=False)  # a file replaced a link
            touched.append(path)
        self._read_through(added, touched)
        self.catalog.update(self, touched)
        return self.catalog.snapshot(self, step)
