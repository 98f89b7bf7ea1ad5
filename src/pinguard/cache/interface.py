"""The cache's interface: what a layer store and a backend are, and how they fail.

``LayerStore`` is what the pipeline reads and writes (``pinguard.cache.verified.VerifiedCache``
over a backend is the one there is); ``CacheBackend`` is bytes by name in some place, which
the directory, Redis and registry backends implement (``pinguard.cache.backends``), and
``LockingBackend`` one that can also hold short-lived in-flight claims (Redis), for
``LOCK_TTL`` and waited on for at most ``LOCK_WAIT`` by default. ``CacheUnavailable`` says a
backend could not be reached, ``EntryRejected`` why an entry read is not used, and
``MAX_ENTRY_BYTES`` bounds what one shared entry may hold. Keeping these here lets the
backends sit below the store without importing it, and the command line show the defaults
without loading it (nothing here imports another pinguard module at run time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pinguard.layers.analysis import LayerAnalysis

#: The most bytes one shared entry may hold.
MAX_ENTRY_BYTES = 64 << 20
#: An in-flight claim lives this long unless its holder extends it (every third of it).
LOCK_TTL = 30.0
#: The longest an audit waits for another audit's analysis of a layer before doing it too.
LOCK_WAIT = 900.0


class LayerStore(Protocol):
    """A per-layer analysis cache as the pipeline uses it: ``get`` an analysis by layer
    digest (None: a miss), ``put`` one, and ``report`` what the audit should note (a shared
    cache unreachable, an entry refused)."""

    def get(self, digest: str) -> LayerAnalysis | None: ...
    def put(self, analysis: LayerAnalysis) -> None: ...
    def report(self) -> tuple[str, ...]: ...


class CacheUnavailable(Exception):
    """A backend could not be reached or answered an error (caught by the verified cache)."""


class EntryRejected(Exception):
    """Why an entry read from a shared backend is not used (the message says)."""


class CacheBackend(Protocol):
    """Bytes by name in some shared place; raises ``CacheUnavailable`` when unreachable and
    may raise ``EntryRejected`` when what it holds under a name is no entry at all."""

    def describe(self) -> str: ...
    def load(self, name: str) -> bytes | None: ...
    def save(self, name: str, data: bytes) -> None: ...


@runtime_checkable
class LockingBackend(Protocol):
    """A backend that can also hold a short-lived claim per name (``SET NX PX`` in Redis):
    ``lock`` takes it when free, ``refresh`` extends it and ``unlock`` drops it, both only
    while ``token`` still holds it; ``locked`` says whether anyone holds it."""

    def lock(self, name: str, token: str, ttl_ms: int) -> bool: ...
    def refresh(self, name: str, token: str, ttl_ms: int) -> bool: ...
    def unlock(self, name: str, token: str) -> None: ...
    def locked(self, name: str) -> bool: ...
