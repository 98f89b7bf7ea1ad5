"""The per-layer analysis cache, keyed by layer digest and analyzer versions.

A layer's analysis never changes for a given digest and analyzer set, so a second audit of
the same image reads no layer again. Entries are JSON files written atomically (a temporary
file in the same directory, then ``os.replace``), so two runs sharing a cache directory can
never see a half-written entry; an unreadable entry is treated as missing.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from pinguard.layers.analysis import LayerAnalysis


def default_cache_dir() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("pinguard")) / "layers"


class LayerCache:
    """A directory of ``<algo>-<hex>.<analyzer key>.json`` files."""

    def __init__(self, directory: Path, analyzer_key: str) -> None:
        self.directory = directory
        self.key = analyzer_key

    def _path(self, digest: str) -> Path:
        algo, _, hexpart = digest.partition(":")
        if not hexpart or not hexpart.isalnum() or not algo.isalnum():
            raise ValueError(f"not a digest: {digest!r}")
        return self.directory / f"{algo}-{hexpart}.{self.key}.json"

    def get(self, digest: str) -> LayerAnalysis | None:
        try:
            with self._path(digest).open("rb") as fh:
                data = json.load(fh)
            analysis = LayerAnalysis.from_json(data)
        except (OSError, ValueError, KeyError, TypeError, AssertionError):
            return None
        return analysis if analysis.digest == digest else None

    def put(self, analysis: LayerAnalysis) -> None:
        target = self._path(analysis.digest)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(analysis.to_json(), fh, separators=(",", ":"))
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
