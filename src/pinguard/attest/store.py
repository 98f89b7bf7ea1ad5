"""Attestations in a registry: one DSSE envelope per OCI artifact, attached to the image.

``push_attestation`` attaches an envelope to an image manifest as an artifact of type
``application/vnd.in-toto+json`` whose one layer is the envelope
(``application/vnd.dsse.envelope.v1+json``, as cosign stores attestation layers), annotated
with the predicate type and creation time. ``find_attestations`` lists the artifacts of that
type attached to a digest and reads each one's manifest and envelope (verified by digest);
an artifact that cannot be read becomes a ``Candidate`` with ``error`` set rather than an
exception, so a verifier can say which one failed and why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pinguard.errors import SourceError
from pinguard.signing.dsse import ENVELOPE_MEDIA_TYPE, IN_TOTO_PAYLOAD_TYPE, MAX_ENVELOPE_BYTES
from pinguard.sources.registry import (
    Attached,
    Descriptor,
    RegistrySource,
    attach,
    list_referrers,
    subject_descriptor,
)

ARTIFACT_TYPE = IN_TOTO_PAYLOAD_TYPE
PREDICATE_ANNOTATION = "in-toto.io/predicate-type"
CREATED_ANNOTATION = "org.opencontainers.image.created"
MAX_CANDIDATES = 100


def push_attestation(
    source: RegistrySource,
    image_digest: str,
    envelope: bytes,
    *,
    predicate_type: str,
    created: str,
) -> Attached:
    """Attach ``envelope`` to the manifest ``image_digest`` in ``source``'s repository."""
    subject = subject_descriptor(source, image_digest)
    annotations = {PREDICATE_ANNOTATION: predicate_type, CREATED_ANNOTATION: created}
    return attach(source, subject, ARTIFACT_TYPE, [(ENVELOPE_MEDIA_TYPE, envelope)], annotations)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One attached artifact: its manifest digest, where it was found, and either the
    envelope bytes or why they could not be read."""

    digest: str
    via: str
    envelope: bytes | None = None
    subject: str | None = None  # the artifact manifest's subject digest
    error: str | None = None


def _read_candidate(source: RegistrySource, desc: Descriptor, via: str) -> Candidate:
    try:
        body, _, _ = source.manifest_bytes(desc.digest)
        manifest: Any = json.loads(body)
    except (SourceError, ValueError) as exc:
        return Candidate(desc.digest, via, error=f"its manifest could not be read: {exc}")
    if not isinstance(manifest, dict):
        return Candidate(desc.digest, via, error="its manifest is not a JSON object")
    subject = manifest.get("subject")
    subject_digest = subject.get("digest") if isinstance(subject, dict) else None
    raw_layers = manifest.get("layers")
    layers: list[Any] = raw_layers if isinstance(raw_layers, list) else []
    envelopes = [
        d
        for d in (Descriptor.from_dict(x) for x in layers)
        if d is not None and d.media_type == ENVELOPE_MEDIA_TYPE
    ]
    subject_text = subject_digest if isinstance(subject_digest, str) else None
    if len(envelopes) != 1:
        return Candidate(
            desc.digest,
            via,
            subject=subject_text,
            error=f"it has {len(envelopes)} {ENVELOPE_MEDIA_TYPE} layers, not one",
        )
    layer = envelopes[0]
    if layer.size > MAX_ENVELOPE_BYTES:
        return Candidate(
            desc.digest, via, subject=subject_text, error=f"its envelope is {layer.size} bytes"
        )
    try:
        envelope = source.blob_bytes(layer.digest, MAX_ENVELOPE_BYTES)
    except SourceError as exc:
        return Candidate(
            desc.digest, via, subject=subject_text, error=f"its envelope could not be read: {exc}"
        )
    return Candidate(desc.digest, via, envelope=envelope, subject=subject_text)


def find_attestations(source: RegistrySource, image_digest: str) -> tuple[Candidate, ...]:
    """Every in-toto artifact attached to ``image_digest``, read (at most MAX_CANDIDATES);
    raises ``SourceError`` when the referrers themselves cannot be listed."""
    referrers = list_referrers(source, image_digest, ARTIFACT_TYPE)
    descriptors = referrers.descriptors
    if len(descriptors) > MAX_CANDIDATES:
        raise SourceError(
            f"{len(descriptors)} attestations are attached to {image_digest}; "
            f"pinguard reads at most {MAX_CANDIDATES}"
        )
    return tuple(_read_candidate(source, d, referrers.via) for d in descriptors)
