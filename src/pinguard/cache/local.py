"""The per-user layer cache: one sealed file per layer analysis in the cache directory.

A layer's analysis never changes for a given digest and the code that produced it, so a
second audit of the same image reads no layer again. ``LayerCache`` keeps each analysis as
``<algo>-<hex>.<key>.json`` under the layer store's key (``pinguard.cache.key.layer_key``:
the code that makes an analysis, the analyzers, the limits) in the one entry format
(``pinguard.cache.entry``: sealed with the sha256 of its canonical JSON, checked on read,
written atomically), so two runs sharing a cache directory never see a half-written entry,
and an unreadable entry, or one altered after it was written (even into valid JSON), is
treated as missing.
"""

from __future__ import annotations

from pathlib import Path

from pinguard.cache.entry import seal, unseal
from pinguard.fileio import atomic_write
from pinguard.layers.analysis import LayerAnalysis


class LayerCache:
    """A directory of ``<algo>-<hex>.<key>.json`` files."""

    def __init__(self, directory: Path, key: str) -> None:
        self.directory = directory
        self.key = key

    def _path(self, digest: str) -> Path:
        algo, _, hexpart = digest.partition(":")
        if not hexpart or not hexpart.isalnum() or not algo.isalnum():
            raise ValueError(f"not a digest: {digest!r}")
        return self.directory / f"{algo}-{hexpart}.{self.key}.json"

    def get(self, digest: str) -> LayerAnalysis | None:
        try:
            data = unseal(self._path(digest).read_bytes())
            if data is None:
                return None
            analysis = LayerAnalysis.from_json(data)
        except (OSError, ValueError, KeyError, TypeError, AssertionError, AttributeError):
            return None
        return analysis if analysis.digest == digest else None

    def put(self, analysis: LayerAnalysis) -> None:
        target = self._path(analysis.digest)
        text = seal(analysis.to_json())
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, text)

    def report(self) -> tuple[str, ...]:
        """Nothing to report: an unreadable or altered entry here is quietly a miss."""
        return ()
