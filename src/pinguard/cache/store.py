"""Where per-layer analyses are kept: the cache interface, shared backends and their entries.

``LayerStore`` is what the pipeline reads and writes (``get(digest)``, ``put(analysis)``,
``report()``); ``pinguard.cache.local.LayerCache`` (a directory) is one, and
``VerifiedCache`` is the other: a store over any ``CacheBackend`` (bytes by name: Redis in
``pinguard.cache.backends.redis``, a registry repository in ``pinguard.cache.backends.registry``,
a shared directory in ``pinguard.cache.backends.directory``)
shared by many hosts. A shared store cannot trust what it reads, so every entry carries the
layer digest, the full cache key (which covers the analyzers' names, versions, options and
code) and the analyzers' ``name=version`` list, plus the sha256 of its own canonical JSON;
with a fleet key it is also a DSSE envelope signed with ECDSA P-256 (``pinguard.attest``).
On read each of these is checked against what the reader expects, and with trusted keys an
entry that is unsigned or signed by another key is refused, so a writer without the key
cannot poison what others trust. A refused entry (truncated, altered, foreign, for another
layer or key) is a miss, reported in ``report()``, never used; a backend that cannot be
reached is reported once and the audit goes on without it. Over a ``LockingBackend``
(Redis) it also keeps in-flight claims: ``claim`` before analysing an uncached layer,
``holding`` extends the claims while the audit works and drops them after, and ``wait``
reads another audit's entry when it lands, or takes over a claim that lapsed (its holder
died). Stores are pickled into the pipeline's worker processes, so they hold settings and
open connections lazily.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

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
from pinguard.layers.analysis import LayerAnalysis
from pinguard.sources.mediatypes import LAYER_CACHE_ENTRY

#: The layer entry's layout (2: sealed as every entry is, its ``content`` digest first).
ENTRY_FORMAT = "pinguard/layer-cache-entry/2"
_SEALED = b'{"content":'  # how a sealed entry (``seal``) starts; an envelope does not


class LayerStore(Protocol):
    """A per-layer analysis cache as the pipeline uses it."""

    def get(self, digest: str) -> LayerAnalysis | None: ...
    def put(self, analysis: LayerAnalysis) -> None: ...
    def report(self) -> tuple[str, ...]: ...


@dataclass(frozen=True, slots=True)
class FleetKeys:
    """The fleet key material: a signing key (PEM file) for writers, trusted public keys
    (PEM files) for readers. With no trusted keys, unsigned entries are accepted (their
    digests are still checked); with any, only entries one of them signed are."""

    signing_key: Path | None = None
    trusted: tuple[Path, ...] = ()


def entry_name(digest: str, key: str) -> str:
    """``<algo>-<hex>.<key>``: a name valid as a Redis key part and as an OCI tag."""
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


def decode_entry(
    data: bytes, digest: str, key: str, analyzers: Sequence[str], trusted: Sequence[Any] = ()
) -> LayerAnalysis:
    """The analysis in ``data`` when every check passes; else ``EntryRejected``."""
    if len(data) > MAX_ENTRY_BYTES:
        raise EntryRejected(f"larger than {MAX_ENTRY_BYTES} bytes")
    if data.startswith(_SEALED):
        if trusted:
            raise EntryRejected("unsigned, and this reader trusts only fleet-signed entries")
        body = data
    else:
        body = _payload(data, trusted)
    doc = unseal(body)
    if doc is None:
        try:
            json.loads(body)
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


def _payload(data: bytes, trusted: Sequence[Any]) -> bytes:
    """The sealed entry inside a DSSE envelope, signed by one of ``trusted`` when any are
    given; else ``EntryRejected``."""
    from pinguard.errors import EnvelopeError
    from pinguard.signing import dsse

    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EntryRejected(f"not JSON (truncated?): {exc}") from None
    if not isinstance(doc, dict) or "payloadType" not in doc:
        if trusted:
            raise EntryRejected("unsigned, and this reader trusts only fleet-signed entries")
        raise EntryRejected("neither a sealed entry nor a DSSE envelope (another format?)")
    try:
        envelope = dsse.parse(data)
    except EnvelopeError as exc:
        raise EntryRejected(f"bad envelope: {exc}") from None
    if envelope.payload_type != LAYER_CACHE_ENTRY:
        raise EntryRejected(f"envelope payload type is {envelope.payload_type!r}")
    if trusted:
        errors = []
        for public in trusted:
            try:
                dsse.verify(envelope, public)
                break
            except EnvelopeError as exc:
                errors.append(str(exc))
        else:
            raise EntryRejected(f"not signed by a trusted fleet key ({errors[0]})")
    return envelope.payload


class VerifiedCache:
    """A ``LayerStore`` over a shared ``CacheBackend``: entries signed (with a fleet signing
    key) on write and verified on read. Picklable: keys and connections load lazily."""

    def __init__(
        self,
        backend: CacheBackend,
        key: str,
        analyzers: tuple[str, ...],
        keys: FleetKeys = FleetKeys(),
        *,
        lock_ttl: float = LOCK_TTL,
        lock_wait: float = LOCK_WAIT,
    ) -> None:
        self.backend = backend
        self.key = key
        self.analyzers = analyzers
        self.keys = keys
        self.lock_ttl = lock_ttl
        self.lock_wait = lock_wait
        self._token = uuid.uuid4().hex
        self._claims: set[str] = set()
        self._notes: list[str] = []
        self._down = False
        self._signer: Any = None
        self._trusted: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_signer"] = None
        state["_trusted"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _trusted_keys(self) -> list[Any]:
        if self._trusted is None:
            from pinguard.signing.keys import load_public_key

            self._trusted = [load_public_key(p) for p in self.keys.trusted]
        return list(self._trusted)

    def _signing_key(self) -> Any:
        if self._signer is None and self.keys.signing_key is not None:
            from pinguard.signing.keys import load_private_key

            self._signer = load_private_key(self.keys.signing_key)
        return self._signer

    def check_keys(self) -> None:
        """Load the key files now, so a bad one is a ``KeyFileError`` before any audit."""
        self._trusted_keys()
        self._signing_key()

    def _unavailable(self, exc: CacheUnavailable) -> None:
        if not self._down:
            self._notes.append(
                f"layer cache {self.backend.describe()} unavailable ({exc}): audited without "
                "the shared cache"
            )
        self._down = True

    def get(self, digest: str) -> LayerAnalysis | None:
        if self._down:
            return None
        name = entry_name(digest, self.key)
        try:
            data = self.backend.load(name)
            if data is None:
                return None
            return decode_entry(data, digest, self.key, self.analyzers, self._trusted_keys())
        except CacheUnavailable as exc:
            self._unavailable(exc)
            return None
        except EntryRejected as exc:
            self._notes.append(
                f"layer cache {self.backend.describe()}: rejected the entry for {digest} "
                f"({exc}); the layer was analysed instead"
            )
            return None

    def put(self, analysis: LayerAnalysis) -> None:
        if self._down:
            return
        data = encode_entry(analysis, self.key, self.analyzers)
        signer = self._signing_key()
        if signer is not None:
            from pinguard.signing import dsse

            data = dsse.sign(data, signer, LAYER_CACHE_ENTRY).to_json().encode("utf-8")
        try:
            self.backend.save(entry_name(analysis.digest, self.key), data)
        except CacheUnavailable as exc:
            self._unavailable(exc)

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
            self._unavailable(exc)
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
                self._unavailable(exc)
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
        holder that dies stops extending, so its claims lapse within ``lock_ttl``."""
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
    keys: FleetKeys = FleetKeys()
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
            from pinguard.cache.backends.directory import DirectoryBackend

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
            self.keys,
            lock_ttl=self.lock_ttl,
            lock_wait=self.lock_wait,
        )
