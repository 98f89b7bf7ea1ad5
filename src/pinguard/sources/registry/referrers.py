"""OCI 1.1 referrers: attaching an artifact to a manifest and listing what is attached.

An artifact is an OCI image manifest with ``artifactType``, the empty config
(``application/vnd.oci.empty.v1+json``, the two bytes ``{}``), its payload as layers and a
``subject`` descriptor naming the manifest it is about; it is pushed by digest. As the
distribution spec says, a registry with the referrers API answers that push with an
``OCI-Subject`` header and lists referrers at ``GET /v2/<name>/referrers/<digest>`` (an OCI
image index, filtered by ``artifactType`` if ``OCI-Filters-Applied`` says so, paged with
``Link: <...>; rel="next"``); one without it answers that GET with 404, and then the client
keeps the list itself in an image index tagged by the referrers tag schema
(``<alg>-<hex>``, e.g. ``sha256-<hex>``): read it (404: start empty), append the new
descriptor (with the artifact's ``artifactType`` and annotations) unless present, push it
back, and read it again to catch a concurrent writer's lost update. Everything goes through
``RegistrySource``, so auth, retries and the plain-HTTP host rules are the audit's own.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from pinguard.errors import ImageNotFound, SourceError
from pinguard.sources.mediatypes import OCI_EMPTY, OCI_INDEX, OCI_MANIFEST
from pinguard.sources.registry import push
from pinguard.sources.registry.pull import RegistrySource

EMPTY_BLOB = b"{}"
EMPTY_DIGEST = "sha256:" + hashlib.sha256(EMPTY_BLOB).hexdigest()
VIA_API = "referrers-api"
VIA_TAG = "tag-schema"
MAX_PAGES = 50
WRITE_ATTEMPTS = 3
_LINK_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')
_TAG_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]")


def canonical(doc: Mapping[str, Any]) -> bytes:
    """JSON with sorted keys and no spaces: what pinguard pushes."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def referrers_tag(digest: str) -> str:
    """The referrers tag schema: ``<alg>-<ref>``, alg cut to 32 and ref to 64 characters,
    characters a tag cannot hold replaced by ``-``."""
    alg, _, ref = digest.partition(":")
    return _TAG_UNSAFE.sub("-", alg[:32]) + "-" + _TAG_UNSAFE.sub("-", ref[:64])


@dataclass(frozen=True, slots=True)
class Descriptor:
    """An OCI content descriptor (the fields pinguard uses)."""

    media_type: str
    digest: str
    size: int
    artifact_type: str = ""
    annotations: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest}
        out["size"] = self.size
        if self.artifact_type:
            out["artifactType"] = self.artifact_type
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Descriptor | None:
        """A descriptor from JSON, or None when it lacks a string digest or an int size."""
        if not isinstance(data, dict):
            return None
        digest, size = data.get("digest"), data.get("size")
        if not isinstance(digest, str) or not isinstance(size, int) or isinstance(size, bool):
            return None
        annotations = data.get("annotations")
        pairs = (
            tuple(sorted((str(k), str(v)) for k, v in annotations.items()))
            if isinstance(annotations, dict)
            else ()
        )
        return cls(
            media_type=str(data.get("mediaType") or ""),
            digest=digest,
            size=size,
            artifact_type=str(data.get("artifactType") or ""),
            annotations=pairs,
        )


@dataclass(frozen=True, slots=True)
class Referrers:
    """The artifacts attached to ``subject`` and how they were found."""

    subject: str
    via: str  # VIA_API or VIA_TAG
    descriptors: tuple[Descriptor, ...] = ()


@dataclass(frozen=True, slots=True)
class Attached:
    """The result of attaching one artifact."""

    digest: str  # the artifact manifest's digest
    via: str  # VIA_API when the registry answered OCI-Subject, else VIA_TAG
    tag: str | None = None  # the referrers tag written, for VIA_TAG


def subject_descriptor(source: RegistrySource, digest: str) -> Descriptor:
    """The descriptor of the manifest ``digest`` (media type and size from the registry)."""
    body, content_type, _ = source.manifest_bytes(digest)
    media_type = content_type
    try:
        declared = json.loads(body).get("mediaType")
    except (ValueError, AttributeError):
        declared = None
    if isinstance(declared, str) and declared:
        media_type = declared
    return Descriptor(media_type=media_type or OCI_MANIFEST, digest=digest, size=len(body))


def artifact_manifest(
    subject: Descriptor,
    artifact_type: str,
    layers: Sequence[Descriptor],
    annotations: Mapping[str, str],
) -> dict[str, Any]:
    """An OCI 1.1 artifact: image manifest, empty config, ``subject`` and ``artifactType``."""
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": {"mediaType": OCI_EMPTY, "digest": EMPTY_DIGEST, "size": len(EMPTY_BLOB)},
        "layers": [layer.to_dict() for layer in layers],
        "subject": {
            "mediaType": subject.media_type,
            "digest": subject.digest,
            "size": subject.size,
        },
    }
    if annotations:
        manifest["annotations"] = dict(sorted(annotations.items()))
    return manifest


def attach(
    source: RegistrySource,
    subject: Descriptor,
    artifact_type: str,
    blobs: Sequence[tuple[str, bytes]],
    annotations: Mapping[str, str],
) -> Attached:
    """Push ``blobs`` ((media type, bytes)) as one artifact about ``subject``."""
    push.push_blob(source.client, EMPTY_BLOB)
    layers = [
        Descriptor(
            media_type=media_type, digest=push.push_blob(source.client, data), size=len(data)
        )
        for media_type, data in blobs
    ]
    manifest = artifact_manifest(subject, artifact_type, layers, annotations)
    body = canonical(manifest)
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    headers = push.push_manifest(source.client, digest, body, OCI_MANIFEST)
    if headers.get("OCI-Subject", "").strip() == subject.digest:
        return Attached(digest=digest, via=VIA_API)
    descriptor = Descriptor(
        media_type=OCI_MANIFEST,
        digest=digest,
        size=len(body),
        artifact_type=artifact_type,
        annotations=tuple(sorted(annotations.items())),
    )
    tag = referrers_tag(subject.digest)
    _add_to_tag_index(source, tag, descriptor)
    return Attached(digest=digest, via=VIA_TAG, tag=tag)


def _read_tag_index(source: RegistrySource, tag: str) -> dict[str, Any] | None:
    """The referrers index under ``tag``; None when the tag does not exist."""
    try:
        body, content_type, _ = source.manifest_bytes(tag, accept=OCI_INDEX)
    except ImageNotFound:
        return None
    what = f"referrers tag {tag!r} of {source.ref.api_host}/{source.ref.repository}"
    try:
        doc = json.loads(body)
    except ValueError:
        raise SourceError(f"{what} is not JSON") from None
    media_type = doc.get("mediaType") if isinstance(doc, dict) else None
    if (
        not isinstance(doc, dict)
        or (media_type or content_type) != OCI_INDEX
        or not isinstance(doc.get("manifests"), list)
    ):
        raise SourceError(
            f"{what} holds a {media_type or content_type!r}, not an OCI image index; "
            "not touching it"
        )
    return doc


def _add_to_tag_index(source: RegistrySource, tag: str, descriptor: Descriptor) -> None:
    for _attempt in range(WRITE_ATTEMPTS):
        index = _read_tag_index(source, tag) or {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [],
        }
        manifests: list[Any] = index["manifests"]
        if any(isinstance(m, dict) and m.get("digest") == descriptor.digest for m in manifests):
            return
        manifests.append(descriptor.to_dict())
        push.push_manifest(source.client, tag, canonical(index), OCI_INDEX)
        again = _read_tag_index(source, tag) or {"manifests": []}
        if any(
            isinstance(m, dict) and m.get("digest") == descriptor.digest for m in again["manifests"]
        ):
            return
    raise SourceError(
        f"referrers tag {tag!r} of {source.ref.api_host}/{source.ref.repository} kept being "
        f"rewritten by another client; {descriptor.digest} is not in it"
    )


def _descriptors(doc: Any, what: str) -> list[Descriptor]:
    if not isinstance(doc, dict) or not isinstance(doc.get("manifests"), list):
        raise SourceError(f"{what} is not an OCI image index")
    out = []
    for entry in doc["manifests"]:
        desc = Descriptor.from_dict(entry)
        if desc is not None:
            out.append(desc)
    return out


def list_referrers(
    source: RegistrySource, subject: str, artifact_type: str | None = None
) -> Referrers:
    """The artifacts attached to ``subject`` (of ``artifact_type`` when given): the
    referrers API when the registry has it, else the referrers tag schema index."""
    path = f"/v2/{source.ref.repository}/referrers/{subject}"
    if artifact_type:
        path += "?artifactType=" + quote(artifact_type, safe="")
    page = push.referrers_page(source.client, path, OCI_INDEX)
    if page is None:
        tag = referrers_tag(subject)
        index = _read_tag_index(source, tag)
        found = _descriptors(index, f"referrers tag {tag!r}") if index is not None else []
        via = VIA_TAG
    else:
        found, via = [], VIA_API
        for _page in range(MAX_PAGES):
            body, headers = page
            try:
                doc = json.loads(body)
            except ValueError:
                raise SourceError(f"referrers of {subject} is not JSON") from None
            found.extend(_descriptors(doc, f"referrers of {subject}"))
            match = _LINK_NEXT.search(headers.get("Link", ""))
            if match is None:
                break
            next_page = push.referrers_page(source.client, match.group(1), OCI_INDEX)
            if next_page is None:
                raise SourceError(f"the next page of the referrers of {subject} is gone (404)")
            page = next_page
        else:
            raise SourceError(f"the referrers of {subject} span more than {MAX_PAGES} pages")
    if artifact_type:
        found = [d for d in found if d.artifact_type == artifact_type]
    unique = {d.digest: d for d in found}
    return Referrers(
        subject=subject,
        via=via,
        descriptors=tuple(sorted(unique.values(), key=lambda d: d.digest)),
    )
