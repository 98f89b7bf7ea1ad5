"""The signed wrapper of shared layer entries: DSSE envelopes made and checked with fleet keys.

A writer holding the fleet's signing key (``FleetKeys.signing_key``, an ECDSA P-256 PEM file)
wraps every entry it writes in a DSSE envelope of payload type ``LAYER_CACHE_ENTRY``
(``pinguard.signing.dsse``); a reader opens an envelope and, given trusted public keys
(``FleetKeys.trusted``), refuses every entry none of them signed, unsigned ones included, so
a host that can write to the cache but holds no fleet key cannot have the fleet use what it
wrote. Without trusted keys an envelope is opened unchecked and an unsigned entry (sealed,
``pinguard.cache.entry``) is passed on as it is; either way ``pinguard.cache.verified``
checks the entry inside. ``Signing`` is pickled into the pipeline's worker processes, so the
key files are read when first used (or at once by ``check_keys``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinguard.cache.interface import EntryRejected
from pinguard.sources.mediatypes import LAYER_CACHE_ENTRY

_SEALED = b'{"content":'  # how a sealed entry (``seal``) starts; an envelope does not


@dataclass(frozen=True, slots=True)
class FleetKeys:
    """The fleet key material: a signing key (PEM file) for writers, trusted public keys
    (PEM files) for readers. With no trusted keys, unsigned entries are accepted (their
    digests are still checked); with any, only entries one of them signed are."""

    signing_key: Path | None = None
    trusted: tuple[Path, ...] = ()


class Signing:
    """Entry bytes signed on the way out and opened, checked, on the way in."""

    def __init__(self, keys: FleetKeys = FleetKeys()) -> None:
        self.keys = keys
        self._signer: Any = None
        self._trusted: list[Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"keys": self.keys, "_signer": None, "_trusted": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _trusted_keys(self) -> list[Any]:
        if self._trusted is None:
            from pinguard.signing.keys import load_public_key

            self._trusted = [load_public_key(p) for p in self.keys.trusted]
        return self._trusted

    def _signing_key(self) -> Any:
        if self._signer is None and self.keys.signing_key is not None:
            from pinguard.signing.keys import load_private_key

            self._signer = load_private_key(self.keys.signing_key)
        return self._signer

    def check_keys(self) -> None:
        """Load the key files now, so a bad one is a ``KeyFileError`` before any audit."""
        self._trusted_keys()
        self._signing_key()

    def wrap(self, entry: bytes) -> bytes:
        """``entry`` as it is stored: in an envelope signed with the signing key, if any."""
        signer = self._signing_key()
        if signer is None:
            return entry
        from pinguard.signing import dsse

        return dsse.sign(entry, signer, LAYER_CACHE_ENTRY).to_json().encode("utf-8")

    def unwrap(self, data: bytes) -> bytes:
        """The entry in ``data`` (what ``wrap`` stored), signed by a trusted key when any are
        given; else ``EntryRejected``."""
        trusted = self._trusted_keys()
        if data.startswith(_SEALED):
            if trusted:
                raise EntryRejected("unsigned, and this reader trusts only fleet-signed entries")
            return data
        return _opened(data, trusted)


def _opened(data: bytes, trusted: Sequence[Any]) -> bytes:
    """The payload of the envelope ``data``, signed by one of ``trusted`` when any are
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
