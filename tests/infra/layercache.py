"""Helpers for the shared layer cache tests: audit the demo image with a cache and count hits.

``audit(ref, spec, jobs)`` audits through ``audit_image`` with a ``CacheSpec`` (or none) and
returns the result and how many layers the cache answered (from the progress callback);
``inventory`` lists the final state's (name, version) pairs to compare audits by.
"""

from __future__ import annotations

from collections.abc import Sequence

from pinguard.audit.options import AuditOptions
from pinguard.audit.pipeline import audit_image
from pinguard.cache.store import CacheSpec
from pinguard.models import AuditResult
from pinguard.sources.interface import LayerRef

LAYERS = 4  # the demo image's layers


class Counting:
    """A Progress that records how many layers the cache answered."""

    def __init__(self) -> None:
        self.cached: list[int] = []

    def layers(self, todo: Sequence[LayerRef], cached: int) -> None:
        self.cached.append(cached)

    def advance(self, layer: LayerRef, nbytes: int) -> None:
        pass

    def done(self, layer: LayerRef) -> None:
        pass


def audit(ref: str, spec: CacheSpec | None, jobs: int = 1) -> tuple[AuditResult, int]:
    progress = Counting()
    options = AuditOptions(shared_cache=spec, jobs=jobs)
    result = audit_image(ref, options=options, progress=progress)
    return result, progress.cached[0]


def inventory(result: AuditResult) -> list[tuple[str, str]]:
    return sorted(
        (d.name, str(d.version)) for env in result.final.environments for d in env.distributions
    )
