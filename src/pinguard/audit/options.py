"""How to audit, beyond where the image is: ``AuditOptions``, and the layer cache key they
make (the analyzers, the limits and a lazy read's suffix). Apart so that every room of the
audit (the pipeline, the layer loading, the replay store) reads the same options without
importing another."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pinguard.cache.key import layer_store_key
from pinguard.cache.store import CacheSpec
from pinguard.catalog import AnalyzerOptions, Analyzers
from pinguard.layers.limits import LayerLimits
from pinguard.sources.interface import SourceOptions


@dataclass(frozen=True, slots=True)
class AuditOptions:
    """How to audit, beyond where the image is."""

    source: SourceOptions = SourceOptions()  # noqa: RUF009 - frozen, so sharing it is safe
    cache_dir: Path | None = None  # None: no cache
    shared_cache: CacheSpec | None = None  # a shared, verified cache; replaces cache_dir
    verify_records: bool = False
    jobs: int = 0  # worker processes for layers; 0: one per core
    limits: LayerLimits = LayerLimits()  # noqa: RUF009 - frozen, so sharing it is safe
    # "full": stream every layer and prove its DiffID; "lazy": read a zstd:chunked layer
    # from its table of contents and only the chunks the analyzers need (the DiffID is then
    # not proven; docs/reliability.md), any other layer, or one that does not verify, full
    layer_read: str = "full"
    # write the replay entry in a forked child while the caller judges and renders (the
    # process waits for it before it exits: ``replay.wait_behind``); the CLI asks for it
    write_behind: bool = False

    def analyzers(self) -> Analyzers:
        """The analyzers these options configure."""
        return Analyzers.for_options(AnalyzerOptions(verify_records=self.verify_records))

    def layers_key(self) -> str:
        """The layer cache key: the analyzers, the limits, and a lazy read's own suffix, so
        an analysis read from a TOC never answers for a full read."""
        lazy = self.layer_read == "lazy"
        return layer_store_key(self.analyzers().key(), self.limits.key(), lazy=lazy)
