"""The caps on the work one layer may cause (``LayerLimits``), in a module of their own.

The command line shows their defaults in its help and passes them on; keeping them apart from
the analysis that enforces them (``analysis.py``, which re-exports them) lets the parser be
built without loading the layer reader.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LayerLimits:
    """Caps on the work one layer may cause (docs/reliability.md); beyond them, fail closed.

    ``max_capture``: a selected metadata file (METADATA, RECORD, ...) larger than this is not
    read into memory and is reported as incomplete. ``max_size``: a layer whose tar inflates
    past this many bytes is an error. ``max_ratio``: once a layer has inflated past
    ``ratio_floor`` bytes, inflating more than ``max_ratio`` bytes per stored byte is an
    error (a decompression bomb)."""

    max_capture: int = 16 << 20
    max_size: int = 64 << 30
    max_ratio: int = 1000
    ratio_floor: int = 256 << 20

    def key(self) -> str:
        """A short name for these limits, part of the cache key (they change the analysis)."""
        return f"c{self.max_capture}"
