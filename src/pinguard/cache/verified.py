"""The verified layer store: the one layer entry, checked on every read, over any backend.

``VerifiedCache`` is the ``LayerStore`` (``pinguard.cache.interface``) the pipeline reads and
writes, over any ``CacheBackend`` (bytes by name: a directory, Redis, a registry
repository; ``pinguard.cache.backends``). Its entries are the one layer entry: the layer
digest, the full cache key (which covers the analyzers' names, versions, options and code),
the analyzers' ``name=version`` list and the analysis, sealed (``pinguard.cache.entry``: the
sha256 of its canonical JSON, first) and, through the signed wrapper
(``pinguard.cache.signed``), in a DSSE envelope signed with a fleet key. On read each of
these is checked against what the reader expects, so a truncated, altered or foreign entry,
one for another layer or key, or (with trusted keys) one no fleet key signed is a miss,
noted in ``report()``, never used; a backend that cannot be reached is noted once and the
audit goes on without it. Over a ``LockingBackend`` (Redis) it also keeps in-flight claims:
``claim`` before analysing an uncached layer, ``holding`` extends the claims while the audit
works and drops them after, and ``wait`` reads another audit's entry when it lands, or takes
over a claim that lapsed (its holder died). Stores are pickled into the pipeline's worker
processes, so they hold settings and open connections lazily.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from pinguard.cache.entry import seal, unseal
from pinguard.cache.interface import (
    LOCK_TTL,
    LOCK_WAIT,
    MAX_ENTRY_BYTES,
    CacheBackend,
    CacheUnavailable,
    EntryRejected,
    LockingBackend,
)
from pinguard.cache.signed import Signing
from pinguard.layers.analysis import LayerAnalysis

#: The layer entry's layout (2: sealed as every entry is, its ``content`` digest first).
ENTRY_FORMAT = "pinguard/layer-cache-entry/2"


def entry_name(digest: str, key: str) -> str:
    """``<algo>-<hex>.<key>``: a name valid as a file name, a Redis key part and an OCI tag."""
    algo, _, hexpart = digest.partition(":")
    if not hexpart or not hexpart.isalnum() or not algo.isalnum():
        raise ValueError(f"not a digest: {digest!r}")
    return f"{algo}-{hexpart}.{key}"


def encode_entry(analysis: LayerAnalysis, key: str, analyzers: Sequence[str]) -> bytes:
    """An entry's unsigned bytes: the layer, key, analyzers and analysis, sealed in the one
    entry format (``pinguard.cache.entry.seal``: canonical JSON, its sha256 first)."""
    body: dict[str, Any] = {
        "format": ENTRY_FORMAT,
        "layer": analysis.digest,
        "key": key,
        "analyzers": sorted(analyzers),
        "analysis": analysis.to_json(),
    }
    return seal(body).encode("utf-8")


def decode_entry(data: bytes, digest: str, key: str, analyzers: Sequence[str]) -> LayerAnalysis:
    """The analysis in the unsigned entry ``data`` when every check passes; else
    ``EntryRejected``."""
    doc = unseal(data)
    if doc is None:
        try:
            json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise EntryRejected(f"not JSON (truncated?): {exc}") from None
        raise EntryRejected("its content digest does not match its bytes (altered)")
    if doc.get("format") != ENTRY_FORMAT:
        raise EntryRejected(f"format {doc.get('format')!r}, expected {ENTRY_FORMAT!r}")
    if doc.get("layer") != digest:
        raise EntryRejected(f"it is for layer {doc.get('layer')!r}")
    if doc.get("key") != key:
        raise EntryRejected(f"it is for cache key {doc.get('key')!r}, expected {key!r}")
    if doc.get("analyzers") != sorted(analyzers):
        raise EntryRejected(f"its analyzers are {doc.get('analyzers')!r}")
    try:
        analysis = LayerAnalysis.from_json(doc["analysis"])
    except (ValueError, KeyError, TypeError, AssertionError, AttributeError) as exc:
        raise EntryRejected(f"its analysis does not parse: {exc!r:.80}") from None
    if analysis.digest != digest:
        raise EntryRejected(f"its analysis is of layer {analysis.digest!r}")
    return analysis


class VerifiedCache:
    """A ``LayerStore`` over a ``CacheBackend``: every entry verified on read, and signed and
    opened by ``signing`` when given (unsigned without). ``limit``: the most bytes an entry
    read may hold (None: no bound). Picklable: keys and connections load lazily."""

    def __init__(
        self,
        backend: CacheBackend,
        key: str,
        analyzers: tuple[str, ...],
        signing: Signing | None = None,
        *,
        limit: int | None = MAX_ENTRY_BYTES,
        lock_ttl: float = LOCK_TTL,
        lock_wait: float = LOCK_WAIT,
    ) -> None:
        self.backend = backend
        self.key = key
        self.analyzers = analyzers
        self.signing = signing
        self.limit = limit
        self.lock_ttl = lock_ttl
        self.lock_wait = lock_wait
        self._token = uuid.uuid4().hex
        self._claims: set[str] = set()
        self._notes: list[str] = []
        self._down = False

    def check_keys(self) -> None:
        """Load the key files now, so a bad one is a ``KeyFileError`` before any audit."""
        if self.signing is not None:
            self.signing.check_keys()

    def _unavailable(self, exc: CacheUnavailable, *, writing: bool) -> None:
        """The backend failed (reading or ``writing``): noted once, then left alone."""
        if not self._down:
            self._notes.append(
                f"layer cache {self.backend.describe()} unavailable ({exc}): audited without "
                "the shared cache"
            )
        self._down = True

    def _rejected(self, digest: str, exc: EntryRejected) -> None:
        """The entry read for ``digest`` is not used: noted."""
        self._notes.append(
            f"layer cache {self.backend.describe()}: rejected the entry for {digest} "
            f"({exc}); the layer was analysed instead"
        )

    def get(self, digest: str) -> LayerAnalysis | None:
        try:
            name = entry_name(digest, self.key)
        except ValueError:
            return None  # no digest: nothing is stored under it
        if self._down:
            return None
        try:
            data = self.backend.load(name)
            if data is None:
                return None
            if self.limit is not None and len(data) > self.limit:
                raise EntryRejected(f"larger than {self.limit} bytes")
            if self.signing is not None:
                data = self.signing.unwrap(data)
            return decode_entry(data, digest, self.key, self.analyzers)
        except CacheUnavailable as exc:
            self._unavailable(exc, writing=False)
        except EntryRejected as exc:
            self._rejected(digest, exc)
        return None

    def put(self, analysis: LayerAnalysis) -> None:
        if self._down:
            return
        data = encode_entry(analysis, self.key, self.analyzers)
        if self.signing is not None:
            data = self.signing.wrap(data)
        try:
            self.backend.save(entry_name(analysis.digest, self.key), data)
        except CacheUnavailable as exc:
            self._unavailable(exc, writing=True)

    def report(self) -> tuple[str, ...]:
        return tuple(self._notes)

    # --- in-flight claims: one audit analyses an uncached layer, the others wait for it

    def claim(self, digest: str) -> bool:
        """True when this audit should analyse ``digest``: it now holds the layer's claim,
        or the backend cannot lock (or is down). False: another audit holds it."""
        if self._down or not isinstance(self.backend, LockingBackend):
            return True
        name = entry_name(digest, self.key)
        try:
            if not self.backend.lock(name, self._token, int(self.lock_ttl * 1000)):
                return False
        except CacheUnavailable as exc:
            self._unavailable(exc, writing=False)
            return True
        self._claims.add(digest)
        return True

    def _drop(self, digests: Sequence[str]) -> None:
        if not isinstance(self.backend, LockingBackend):
            return
        for digest in digests:
            self._claims.discard(digest)
            try:
                self.backend.unlock(entry_name(digest, self.key), self._token)
            except CacheUnavailable as exc:
                self._unavailable(exc, writing=False)
                return

    def _extend(self) -> None:
        if not isinstance(self.backend, LockingBackend):
            return
        for digest in sorted(self._claims):
            try:
                self.backend.refresh(
                    entry_name(digest, self.key), self._token, int(self.lock_ttl * 1000)
                )
            except CacheUnavailable:
                return  # the next get or put reports it

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Keep this audit's claims alive while the block analyses their layers (a thread
        extends them every third of their lifetime), and drop them all when it ends: a
        holder that dies stops extending, so its claims lapse within ``lock_ttl``. Over a
        backend that cannot lock there are no claims to keep."""
        if not isinstance(self.backend, LockingBackend):
            yield
            return
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.lock_ttl / 3):
                self._extend()

        thread = threading.Thread(target=beat, name="pinguard-cache-claims", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            self._drop(sorted(self._claims))

    def wait(self, digest: str) -> LayerAnalysis | None:
        """The analysis another audit is making of ``digest``, once it is cached; None when
        this audit should analyse the layer itself: the other's claim lapsed or was dropped
        without an entry (it died or failed; the claim is now this audit's), the cache went
        down, or ``lock_wait`` passed (said in the notes)."""
        start = time.monotonic()
        delay = 0.05
        while True:
            hit = self.get(digest)
            if hit is not None or self._down:
                return hit
            if self.claim(digest):
                hit = self.get(digest)  # written and released between the two reads
                if hit is not None:
                    self._drop([digest])
                return hit
            waited = time.monotonic() - start
            if waited >= self.lock_wait:
                self._notes.append(
                    f"layer cache {self.backend.describe()}: waited {waited:.0f} s for another "
                    f"audit's analysis of {digest}; analysed it here too"
                )
                return None
            time.sleep(min(delay, max(0.0, self.lock_wait - waited)))
            delay = min(delay * 2, 0.5)
