"""Which layer store an audit opens: the local directory, or a shared cache by its URL.

``LocalCache`` is the per-user cache (``--cache-dir``): the directory backend
(``pinguard.cache.backends.directory``) under ``VerifiedCache``, unsigned, holding the same
layer entries as a shared cache. A refused entry there is quietly a miss and an entry may be
of any size (the directory is the user's own, trusted like their files:
docs/reliability.md), and a directory that cannot be written is the user's error
(``OutputError``, exit 2), as for every file pinguard writes. ``CacheSpec`` is a shared cache
as configured (``--cache URL``): the backend the URL names (loaded when opened, so the
command line shows the defaults without it), opened as a ``VerifiedCache`` through the
signed wrapper with the fleet's keys (``pinguard.cache.signed``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pinguard.cache.backends.directory import DirectoryBackend
from pinguard.cache.interface import (
    LOCK_TTL,
    LOCK_WAIT,
    CacheBackend,
    CacheUnavailable,
    EntryRejected,
)
from pinguard.cache.signed import FleetKeys, Signing
from pinguard.cache.verified import VerifiedCache
from pinguard.errors import OutputError


class LocalCache(VerifiedCache):
    """The layer entries in ``directory``, unsigned, of any size."""

    def __init__(self, directory: Path, key: str, analyzers: Sequence[str]) -> None:
        backend = DirectoryBackend(directory, limit=None)
        super().__init__(backend, key, tuple(sorted(analyzers)), limit=None)

    def _unavailable(self, exc: CacheUnavailable, *, writing: bool) -> None:
        if writing:
            raise OutputError(str(exc)) from None
        # an entry that cannot be read is a miss; the layer is read and its entry written

    def _rejected(self, digest: str, exc: EntryRejected) -> None:
        pass  # quietly a miss: the layer is read again and its entry rewritten


@dataclass(frozen=True, slots=True)
class CacheSpec:
    """A shared cache as configured (``--cache URL``): picklable, opened per audit.

    ``url``: ``redis://[:PASSWORD@]HOST:PORT/DB`` or ``rediss://`` (TLS),
    ``registry://HOST/REPO`` (a cache repository) or ``file:///DIR`` (a shared directory).
    ``ttl``: seconds an entry lives (Redis; 0: forever). TLS files and the password (else
    ``$PINGUARD_CACHE_PASSWORD``) for Redis; ``insecure`` allows plain HTTP to a registry
    cache. ``lock_ttl`` and ``lock_wait``: an in-flight claim's lifetime (extended while its
    holder works) and the longest an audit waits for another's analysis (Redis)."""

    url: str
    keys: FleetKeys = FleetKeys()  # noqa: RUF009 - frozen, so sharing it is safe
    ttl: int = 0
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    insecure: tuple[str, ...] = ()
    lock_ttl: float = LOCK_TTL
    lock_wait: float = LOCK_WAIT

    def backend(self) -> CacheBackend:
        from pinguard.errors import UsageError

        if self.url.startswith("file://"):
            path = self.url[len("file://") :]
            if not path.startswith("/"):
                raise UsageError(f"--cache {self.url!r}: expected file:///ABSOLUTE/PATH")
            return DirectoryBackend(Path(path))
        if self.url.startswith("registry://"):
            from pinguard.cache.backends.registry import RegistryBackend

            return RegistryBackend(self.url[len("registry://") :], insecure=self.insecure)
        if self.url.startswith(("redis://", "rediss://", "unix://")):
            from pinguard.cache.backends.redis import RedisBackend

            return RedisBackend(
                self.url,
                ttl=self.ttl,
                tls_ca=self.tls_ca,
                tls_cert=self.tls_cert,
                tls_key=self.tls_key,
            )
        raise UsageError(
            f"--cache {self.url!r}: expected redis://HOST:PORT/DB, rediss://... (TLS), "
            "registry://HOST/REPO or file:///DIR"
        )

    def open(self, key: str, analyzers: Sequence[str]) -> VerifiedCache:
        return VerifiedCache(
            self.backend(),
            key,
            tuple(sorted(analyzers)),
            Signing(self.keys),
            lock_ttl=self.lock_ttl,
            lock_wait=self.lock_wait,
        )
