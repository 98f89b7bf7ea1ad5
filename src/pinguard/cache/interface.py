"""What a shared cache backend is: bytes by name, and the two ways it can fail.

``CacheBackend`` is the contract the Redis and registry backends implement
(``pinguard.cache.backends.redis``, ``pinguard.cache.backends.registry``); ``CacheUnavailable``
says a backend could not be reached, ``EntryRejected`` why an entry read is not used, and
``MAX_ENTRY_BYTES`` bounds what one entry may hold; ``LockingBackend`` is a backend that can
also hold short-lived in-flight claims (Redis), for ``LOCK_TTL`` and waited on for at most
``LOCK_WAIT`` by default. ``pinguard.cache.store`` builds the verified cache on top;
keeping these here lets the backends sit below it without importing it (and the command line
show the defaults without loading it).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

#: The most bytes one shared entry may hold.
MAX_ENTRY_BYTES = 64 << 20
#: An in-flight claim lives this long unless its holder extends it (every third of it).
LOCK_TTL = 30.0
#: The longest an audit waits for another audit's analysis of a layer before doing it too.
LOCK_WAIT = 900.0


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
