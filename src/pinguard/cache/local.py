"""The per-layer analysis cache: its entry format and its full key.

A layer's analysis never changes for a given digest and the code that produced it, so a
second audit of the same image reads no layer again. The key (``cache_key``) covers all of
that code without anyone having to remember a version bump: the entry format version, a
digest of the source of every module in ``pinguard.layers`` (verifier, inflater, tar walk,
whiteout recording) and ``pinguard.cache`` (this format, the stores), and the parts the
analyzer registry adds (the source of its package: the analyzers, their protocol and
registry; each analyzer's name, explicit version, options, and the source of the module that
defines it, so an analyzer living elsewhere is covered too), hashed by the one key function
(``pinguard.cache.key.digest_of``). Entries are JSON files in the one entry format
(``pinguard.cache.entry``: sealed with the sha256 of their canonical JSON, checked on read,
written atomically), so two runs sharing a cache directory never see a half-written entry,
and an unreadable entry, or one altered after it was written (even into valid JSON), is
treated as missing.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import import_module
from pathlib import Path

from pinguard.cache.entry import default_cache_dir, seal, unseal
from pinguard.cache.key import digest_of, source_digest
from pinguard.fileio import atomic_write
from pinguard.layers.analysis import LayerAnalysis

__all__ = [
    "FORMAT",
    "PRODUCERS",
    "LayerCache",
    "cache_key",
    "default_cache_dir",
    "seal",
    "source_digest",
    "unseal",
]

FORMAT = "4"  # the JSON layout of an entry (2: "streamed"; 3: "content" digest; 4: "name_flags")

#: Packages whose every module's source is part of the key: the code that makes an analysis
#: and the entry format it is kept in.
#: (The catalog's comes in through the registry's parts: layers/ never imports upwards.)
PRODUCERS = ("pinguard.layers", "pinguard.cache")


def cache_key(parts: Iterable[str]) -> str:
    """The entry key: the format, the producers' source, then the registry's ``parts``
    (``pinguard.cache.key.digest_of``, the one key function, cut to 16 hex digits)."""
    producers = [f"{name}={source_digest(import_module(name))}" for name in PRODUCERS]
    return digest_of([f"format={FORMAT}", *producers, *parts])[:16]


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
