"""Transport-neutral helpers for image manifests, indexes, configs and platforms.

Every transport that stores OCI or Docker v2 manifests (registries, OCI layouts, OCI
archives) ends up doing the same things: parse a JSON document that may be a manifest or an
index (a Docker "manifest list"), pick one platform from an index, verify the bytes of a
small blob it read whole, and turn one (manifest, config) pair into a ``ResolvedImage``.
Those steps live here, free of any I/O, so each transport only has to fetch bytes. What a
platform string means and which platforms match is `pinguard.target`'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pinguard.digest import Digest
from pinguard.errors import BlobVerificationError, ImageNotFound, SourceError, UnsupportedArtifact
from pinguard.sources.interface import LayerRef, ResolvedImage
from pinguard.sources.mediatypes import (
    DOCKER_LAYER,
    DOCKER_SCHEMA1,
    IMAGE_CONFIG_TYPES,
    INDEX_TYPES,
    LAYER_TYPE_PREFIXES,
    MANIFEST_OR_INDEX_TYPES,
    OCI_INDEX,
    OCI_MANIFEST,
)
from pinguard.target import Platform, default_variant, platform_matches

REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"


def sha256_digest(data: bytes) -> str:
    return str(Digest.of(data))


def verify_bytes(data: bytes, digest: str, what: str, size: int | None = None) -> None:
    """Check a blob read whole against its descriptor; raise ``BlobVerificationError``."""
    expected = Digest.parse(digest, what)
    actual = Digest.of(data, expected.algorithm)
    if actual != expected:
        raise BlobVerificationError(f"{what}: content is {actual}, expected {expected}")
    if size is not None and size != len(data):
        raise BlobVerificationError(f"{what}: size is {len(data)}, expected {size}")


def parse_json_document(data: bytes, what: str) -> dict[str, Any]:
    """Parse a JSON object; a corrupt one raises ``SourceError`` naming ``what``."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SourceError(f"{what} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise SourceError(f"{what} is not a JSON object")
    return doc


def media_type_of(doc: Mapping[str, Any], fallback: str = "") -> str:
    """The document's mediaType, or a guess from its shape when it has none."""
    value = doc.get("mediaType")
    if isinstance(value, str) and value:
        return value
    if fallback:
        return fallback
    if isinstance(doc.get("manifests"), list):
        return OCI_INDEX
    return OCI_MANIFEST


def is_index(doc: Mapping[str, Any], media_type: str = "") -> bool:
    """True for an OCI image index or a Docker manifest list."""
    return media_type_of(doc, media_type) in INDEX_TYPES or (
        "manifests" in doc and "layers" not in doc
    )


def document_kind(
    doc: Mapping[str, Any], what: str, *, content_type: str = "", descriptor_type: str = ""
) -> str:
    """Classify a fetched document as ``"index"`` or ``"manifest"``, refusing ambiguity.

    Refused (``SourceError``): a document with both ``manifests`` and ``layers``; a
    ``mediaType`` that disagrees with the HTTP Content-Type or with the descriptor that
    pointed at it (the manifest/index confusion of CVE-2021-41190); Docker schema 1.
    A manifest or index type that is not an image's (an artifact manifest) raises
    ``UnsupportedArtifact``. ``content_type`` and ``descriptor_type`` count only when they
    name a manifest or index type (registries may answer ``application/json``).
    """
    if "manifests" in doc and "layers" in doc:
        raise SourceError(f"{what} is ambiguous: it has both 'manifests' and 'layers'")
    if doc.get("schemaVersion") == 1 or content_type in DOCKER_SCHEMA1:
        raise SourceError(f"{what} is a Docker schema 1 manifest, which is not supported")
    declared = doc.get("mediaType")
    if declared is not None and not isinstance(declared, str):
        raise SourceError(f"{what} has a mediaType that is not a string: {declared!r}")
    claims = [
        (label, value)
        for label, value in (
            ("its mediaType", declared or ""),
            ("the Content-Type", content_type),
            ("the descriptor that pointed at it", descriptor_type),
        )
        if value in MANIFEST_OR_INDEX_TYPES
    ]
    if len({value for _, value in claims}) > 1:
        listing = ", ".join(f"{label} says {value!r}" for label, value in claims)
        raise SourceError(f"{what} is ambiguous: {listing}")
    media_type = claims[0][1] if claims else (declared or "")
    if media_type and media_type not in MANIFEST_OR_INDEX_TYPES:
        raise UnsupportedArtifact(
            f"unsupported: not an image: {what} has media type {media_type!r}"
        )
    if media_type in INDEX_TYPES or (not media_type and isinstance(doc.get("manifests"), list)):
        if "config" in doc:
            raise SourceError(f"{what} is ambiguous: an index with a 'config'")
        return "index"
    if not isinstance(doc.get("config"), dict) or not isinstance(doc.get("layers"), list):
        raise SourceError(f"{what} is neither an image manifest nor an index")
    return "manifest"


def check_image_manifest(manifest: Mapping[str, Any], what: str) -> None:
    """Refuse a manifest that is not a container image with ``UnsupportedArtifact``.

    An image has a config of an image-config media type and at least one layer; an SBOM,
    a signature or any other OCI artifact (``artifactType``, an empty or custom config,
    no layers) is "unsupported: not an image", never an image with zero packages.
    """
    descriptors(manifest, "layers", what)  # every digest validated before any is fetched
    config_descriptor(manifest, what)
    artifact = manifest.get("artifactType")
    if isinstance(artifact, str) and artifact:
        raise UnsupportedArtifact(
            f"unsupported: not an image: {what} is an artifact of type {artifact!r}"
        )
    cdesc = manifest.get("config")
    ctype = cdesc.get("mediaType") if isinstance(cdesc, dict) else None
    if ctype is not None and ctype not in IMAGE_CONFIG_TYPES:
        raise UnsupportedArtifact(
            f"unsupported: not an image: {what} has a config of media type {ctype!r}"
        )
    layers = manifest.get("layers")
    if isinstance(layers, list) and not layers:
        raise UnsupportedArtifact(f"unsupported: not an image: {what} has no layers")
    for desc in layers if isinstance(layers, list) else ():
        ltype = desc.get("mediaType") if isinstance(desc, dict) else None
        if isinstance(ltype, str) and ltype and not ltype.startswith(LAYER_TYPE_PREFIXES):
            raise UnsupportedArtifact(
                f"unsupported: not an image: {what} has a layer of media type {ltype!r}"
            )


def descriptors(doc: Mapping[str, Any], key: str, what: str) -> list[dict[str, Any]]:
    """The descriptor list ``doc[key]``, each checked to have a digest."""
    items = doc.get(key)
    if not isinstance(items, list):
        raise SourceError(f"{what} has no {key!r} list")
    out: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("digest"), str):
            raise SourceError(f"{what} has a descriptor without a digest in {key!r}")
        Digest.parse(item["digest"], f"{what} {key!r} entry")
        out.append(item)
    return out


def descriptor_platform(desc: Mapping[str, Any]) -> Platform | None:
    """The platform an index entry declares, if any."""
    plat = desc.get("platform")
    return platform_from_config(plat) if isinstance(plat, dict) else None


def platform_from_config(config: Mapping[str, Any]) -> Platform | None:
    """The platform an image config declares (``os``, ``architecture``, ``variant``)."""
    os_name, arch = config.get("os"), config.get("architecture")
    if not isinstance(os_name, str) or not isinstance(arch, str) or not os_name or not arch:
        return None
    variant = config.get("variant")
    return Platform(
        os=os_name, architecture=arch, variant=variant if isinstance(variant, str) else ""
    )


def select_platform(
    index: Mapping[str, Any], wanted: Platform, what: str
) -> tuple[dict[str, Any], Platform]:
    """Pick the entry of ``index`` for ``wanted``; raise ``ImageNotFound`` listing the others.

    Entries with os ``unknown`` (build attestations) are never chosen or listed. When several
    entries match (e.g. arm/v6 and arm/v7 for a bare ``arm``), the first one listed wins,
    preferring one whose variant is empty or the architecture's default.
    """
    present: list[Platform] = []
    matches: list[tuple[dict[str, Any], Platform]] = []
    for desc in descriptors(index, "manifests", what):
        plat = descriptor_platform(desc)
        if plat is None or plat.os == "unknown":
            continue
        present.append(plat)
        if platform_matches(wanted, plat):
            matches.append((desc, plat))
    if not matches:
        listing = ", ".join(sorted({str(p) for p in present})) or "none"
        raise ImageNotFound(f"{what} has no image for platform {wanted}; present: {listing}")
    for desc, plat in matches:
        if plat.variant in ("", default_variant(plat.architecture)):
            return desc, plat
    return matches[0]


def check_single_platform(
    config: Mapping[str, Any], wanted: Platform | None, what: str
) -> Platform | None:
    """For an image that is not an index: the platform it has, checked against an explicit
    request (``wanted`` None means "whatever the image is")."""
    have = platform_from_config(config)
    if wanted is not None and have is not None and not platform_matches(wanted, have):
        raise ImageNotFound(f"{what} has no image for platform {wanted}; present: {have}")
    return have


def diff_ids(config: Mapping[str, Any], what: str) -> list[str]:
    """``rootfs.diff_ids`` of an image config."""
    rootfs = config.get("rootfs")
    ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise SourceError(f"{what} has no rootfs.diff_ids list")
    return [str(Digest.parse(i, f"{what} rootfs.diff_ids")) for i in ids]


def layers_from_manifest(
    manifest: Mapping[str, Any], config: Mapping[str, Any], what: str
) -> tuple[LayerRef, ...]:
    """Pair the manifest's layer descriptors with the config's diff ids, in order."""
    descs = descriptors(manifest, "layers", what)
    ids = diff_ids(config, what)
    if len(ids) != len(descs):
        raise SourceError(
            f"{what} lists {len(descs)} layers but its config has {len(ids)} diff ids"
        )
    layers: list[LayerRef] = []
    for desc, diff_id in zip(descs, ids, strict=True):
        size = desc.get("size")
        media = desc.get("mediaType")
        notes = desc.get("annotations")
        layers.append(
            LayerRef(
                digest=desc["digest"],
                size=size if isinstance(size, int) and size >= 0 else None,
                media_type=media if isinstance(media, str) else "",
                diff_id=diff_id,
                annotations=tuple(
                    sorted(
                        (k, v)
                        for k, v in (notes.items() if isinstance(notes, dict) else ())
                        if isinstance(k, str) and isinstance(v, str)
                    )
                ),
            )
        )
    return tuple(layers)


def config_descriptor(manifest: Mapping[str, Any], what: str) -> dict[str, Any]:
    """The manifest's ``config`` descriptor."""
    desc = manifest.get("config")
    if not isinstance(desc, dict) or not isinstance(desc.get("digest"), str):
        raise SourceError(f"{what} has no config descriptor")
    Digest.parse(desc["digest"], f"{what} config descriptor")
    return desc


def resolved_from_manifest(
    *,
    reference: str,
    transport: str,
    manifest_bytes: bytes,
    config_bytes: bytes,
    manifest_digest: str | None = None,
    platform: Platform | None = None,
    notes: Iterable[str] = (),
    what: str = "",
) -> ResolvedImage:
    """Build a ``ResolvedImage`` from one image manifest and its config, both as bytes.

    ``manifest_digest`` defaults to the sha256 of ``manifest_bytes``; ``platform`` defaults to
    the one the config declares. The config bytes are verified against the manifest's config
    descriptor.
    """
    label = what or reference
    manifest = parse_json_document(manifest_bytes, f"manifest of {label}")
    if document_kind(manifest, f"manifest of {label}") != "manifest":
        raise SourceError(f"{label}: expected an image manifest, got an index")
    check_image_manifest(manifest, f"manifest of {label}")
    cdesc = config_descriptor(manifest, f"manifest of {label}")
    size = cdesc.get("size")
    verify_bytes(
        config_bytes, cdesc["digest"], f"config of {label}", size if isinstance(size, int) else None
    )
    config = parse_json_document(config_bytes, f"config of {label}")
    return ResolvedImage(
        reference=reference,
        transport=transport,
        manifest_digest=manifest_digest or sha256_digest(manifest_bytes),
        platform=platform or platform_from_config(config),
        config=config,
        layers=layers_from_manifest(manifest, config, f"manifest of {label}"),
        notes=tuple(notes),
    )


def layers_from_diff_ids(
    ids: Sequence[str], sizes: Sequence[int | None] | None = None, media_type: str = DOCKER_LAYER
) -> tuple[LayerRef, ...]:
    """Layers stored uncompressed (docker save, a daemon): the blob digest is the diff id."""
    out: list[LayerRef] = []
    for i, diff_id in enumerate(ids):
        size = sizes[i] if sizes is not None and i < len(sizes) else None
        out.append(LayerRef(digest=diff_id, size=size, media_type=media_type, diff_id=diff_id))
    return tuple(out)
