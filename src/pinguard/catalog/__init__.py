"""Analyzers keyed by path pattern, and turning selected files into a catalog.

The layer walk asks ``selector(verify_records)`` which members to keep; the cache key
``analyzer_key`` changes whenever an analyzer's version or that choice changes. ``Catalog``
turns the merged files of a state into typed environments (Python) and Debian packages,
re-parsing only the metadata directories a layer touched.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Iterable, Mapping

from pinguard.catalog import dpkg, python
from pinguard.layers.tar import CAPTURE, HASH, SKIP, Selector
from pinguard.models import DebPackage, Distribution, Environment, Incomplete, Snapshot


def analyzer_key(verify_records: bool) -> str:
    text = f"python={python.VERSION};dpkg={dpkg.VERSION};records={int(verify_records)}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# Every base name an analyzer may keep: a set lookup rejects almost every member of a layer
# before the analyzers' own path rules run (this is called once per tar member).
_BASENAMES = frozenset(
    {*python.DIST_INFO_FILES, *python.EGG_INFO_FILES, "pyvenv.cfg", "os.py", "status", "os-release"}
)


def selector(verify_records: bool) -> Selector:
    def select(path: str) -> int:
        base = path[path.rfind("/") + 1 :]
        if (base in _BASENAMES or base.endswith(".egg-info")) and (
            python.wants(path) or dpkg.wants(path)
        ):
            return CAPTURE
        if verify_records and python.in_environment(path):
            return HASH
        return SKIP

    return select


class Catalog:
    """Parsed distributions of a state, kept up to date as layers are applied."""

    def __init__(self) -> None:
        self._dists: dict[str, tuple[Distribution | None, tuple[Incomplete, ...]]] = {}
        self._debs: tuple[DebPackage, ...] = ()

    def update(self, files: Mapping[str, bytes], touched: Iterable[str]) -> None:
        """Re-read what changed: ``touched`` are the paths a layer added or removed."""
        dirs: set[str] = set()
        debs = False
        for path in touched:
            meta = python.metadata_dir(path)
            if meta is not None:
                dirs.add(meta)
            elif path == dpkg.STATUS:
                debs = True
            else:
                # a removed directory: every metadata dir below it
                prefix = path.rstrip("/") + "/"
                dirs.update(d for d in self._dists if d.startswith(prefix) or d == path)
                debs = debs or dpkg.STATUS.startswith(prefix)
        for meta in dirs:
            present = meta in files or any(
                f"{meta}/{name}" in files
                for name in (*python.DIST_INFO_FILES, *python.EGG_INFO_FILES)
            )
            if not present:
                self._dists.pop(meta, None)
                continue
            dist, problems = python.parse_distribution(meta, files)
            self._dists[meta] = (dist, tuple(problems))
        if debs:
            status = files.get(dpkg.STATUS)
            self._debs = dpkg.parse_status(status) if status is not None else ()

    def snapshot(
        self, files: Mapping[str, bytes], file_hashes: Mapping[str, str] | None = None
    ) -> Snapshot:
        markers = python.python_markers(files)
        by_env: dict[str, list[Distribution]] = {}
        incomplete: list[Incomplete] = []
        for meta in sorted(self._dists):
            dist, problems = self._dists[meta]
            incomplete.extend(problems)
            if dist is not None:
                by_env.setdefault(posixpath.dirname(meta), []).append(dist)
        envs = tuple(
            Environment(
                path=env,
                python=python.python_of(env, files, markers),
                distributions=tuple(sorted(dists, key=lambda d: (d.name, d.metadata_path))),
            )
            for env, dists in sorted(by_env.items())
        )
        return Snapshot(
            environments=envs,
            debs=self._debs,
            incomplete=tuple(incomplete),
            os_release=dpkg.os_release(files),
        )
