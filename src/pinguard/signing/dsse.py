"""DSSE envelopes (Dead Simple Signing Envelope, protocol v1) signed with ECDSA P-256.

The signature covers the pre-authentication encoding
``PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`` (lengths as ASCII
decimal byte counts), never the JSON around it. An envelope is
``{"payload": b64(body), "payloadType": type, "signatures": [{"keyid": ..., "sig": b64(sig)}]}``
with standard base64 (URL-safe base64 is accepted when reading, as the spec asks); each
``sig`` is the DER-encoded ECDSA signature over SHA-256, as cosign writes it. The envelope's
JSON has sorted keys and no spaces, so it changes only with the payload and the signature.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from pinguard.errors import EnvelopeError
from pinguard.signing.keys import key_id

IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
ENVELOPE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
MAX_ENVELOPE_BYTES = 32 * 1024 * 1024


def pae(payload_type: str, payload: bytes) -> bytes:
    """The DSSE v1 pre-authentication encoding of ``payload`` with ``payload_type``."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


@dataclass(frozen=True, slots=True)
class Signature:
    """One signature of an envelope: the signer's key id (a hint only) and DER bytes."""

    keyid: str
    sig: bytes


@dataclass(frozen=True, slots=True)
class Envelope:
    """A parsed DSSE envelope."""

    payload_type: str
    payload: bytes
    signatures: tuple[Signature, ...]

    def to_json(self) -> str:
        """The envelope as canonical JSON (sorted keys, no spaces) and a final newline."""
        data = {
            "payload": base64.b64encode(self.payload).decode("ascii"),
            "payloadType": self.payload_type,
            "signatures": [
                {"keyid": s.keyid, "sig": base64.b64encode(s.sig).decode("ascii")}
                for s in self.signatures
            ],
        }
        return json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n"


def sign(
    payload: bytes, key: ec.EllipticCurvePrivateKey, payload_type: str = IN_TOTO_PAYLOAD_TYPE
) -> Envelope:
    """An envelope over ``payload`` with one ECDSA P-256 / SHA-256 signature by ``key``."""
    signature = key.sign(pae(payload_type, payload), ec.ECDSA(hashes.SHA256()))
    return Envelope(
        payload_type=payload_type,
        payload=payload,
        signatures=(Signature(keyid=key_id(key.public_key()), sig=signature),),
    )


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise EnvelopeError(f"{what} is not a base64 string: {value!r:.60}")
    text = value.strip()
    padded = text + "=" * (-len(text) % 4)
    try:
        if "-" in text or "_" in text:
            return base64.urlsafe_b64decode(padded)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise EnvelopeError(f"{what} is not valid base64: {value!r:.60}") from exc


def parse(data: bytes) -> Envelope:
    """Parse envelope JSON; ``EnvelopeError`` says what is wrong with it."""
    if len(data) > MAX_ENVELOPE_BYTES:
        raise EnvelopeError(f"envelope is larger than {MAX_ENVELOPE_BYTES} bytes")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EnvelopeError(f"envelope is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise EnvelopeError(f"envelope is not a JSON object: {doc!r:.60}")
    payload_type = doc.get("payloadType")
    if not isinstance(payload_type, str):
        raise EnvelopeError(f"envelope has no string payloadType: {payload_type!r:.60}")
    payload = _b64(doc.get("payload"), "envelope payload")
    raw_sigs = doc.get("signatures")
    if not isinstance(raw_sigs, list):
        raise EnvelopeError(f"envelope signatures is not a list: {raw_sigs!r:.60}")
    signatures = []
    for i, entry in enumerate(raw_sigs):
        if not isinstance(entry, dict):
            raise EnvelopeError(f"envelope signature {i} is not an object: {entry!r:.60}")
        keyid = entry.get("keyid", "")
        if not isinstance(keyid, str):
            raise EnvelopeError(f"envelope signature {i} has a non-string keyid: {keyid!r:.60}")
        signatures.append(Signature(keyid=keyid, sig=_b64(entry.get("sig"), f"signature {i}")))
    return Envelope(payload_type=payload_type, payload=payload, signatures=tuple(signatures))


def verify(envelope: Envelope, key: ec.EllipticCurvePublicKey) -> bytes:
    """The payload when one signature verifies with ``key`` over the PAE; else
    ``EnvelopeError`` saying why (unsigned, or no signature made by this key)."""
    if not envelope.signatures:
        raise EnvelopeError("envelope is unsigned")
    message = pae(envelope.payload_type, envelope.payload)
    for signature in envelope.signatures:
        try:
            key.verify(signature.sig, message, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            continue
        return envelope.payload
    ids = ", ".join(repr(s.keyid[:16]) for s in envelope.signatures)
    raise EnvelopeError(
        f"no signature verifies with the key {key_id(key)[:16]!r} "
        f"({len(envelope.signatures)} signature(s), key ids {ids}): "
        "signed by another key, or the payload was changed"
    )
