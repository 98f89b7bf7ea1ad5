"""Analyzers behind one protocol, their registry, and turning a state into a catalog.

``interface`` holds the ``Analyzer`` protocol (name, version, the paths it wants: capture,
hash or stream, and its per-state session); ``registry`` lists the analyzers pinguard runs
and joins them for the layer walk, the cache key and the per-state ``Catalog``; ``python``
(dist-info, egg-info), ``dpkg`` (the status database), ``conda`` (conda-meta records) and
``native`` (a package: ELF shared objects, and what ld.so would load for each) are the
analyzers.

Adding an analyzer (docs/analyzers.md): a module here with a frozen dataclass subclassing
``Analyzer`` (its fields are its options) and an ``AnalyzerSession`` that appends generic
``models.Package`` records to ``SnapshotParts.packages``; list the class in
``registry.ANALYZERS`` (``dpkg`` is the worked example). Its per-layer results are cached
with the layer, under a key that already covers its source and version; the reports and the
policy read its records as they are.
"""

from __future__ import annotations

from pinguard.catalog.interface import (
    Analyzer,
    AnalyzerOptions,
    AnalyzerSession,
    ImageFacts,
    StateView,
    StepFacts,
)
from pinguard.catalog.registry import ANALYZERS, Analyzers, Catalog

__all__ = [
    "ANALYZERS",
    "Analyzer",
    "AnalyzerOptions",
    "AnalyzerSession",
    "Analyzers",
    "Catalog",
    "ImageFacts",
    "StateView",
    "StepFacts",
]
