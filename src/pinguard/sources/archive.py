"""``docker-archive:PATH[:REF]``: an image in ``docker save`` format, read in place.

The archive's ``manifest.json`` lists each image's config file, its repo tags and its layer
files, which are ``<id>/layer.tar`` (legacy docker), ``<diffid>.tar`` (skopeo, podman) or
``blobs/sha256/<hex>`` (docker 25+); any of them may be a symlink inside the archive. ``REF``
picks an image by tag (``name:tag``; ``docker.io/library/`` and ``localhost/`` prefixes are
ignored when comparing) or by position (``@N``); without it the archive must hold exactly one
image. Layers are normally stored uncompressed, so each blob's digest is its diff id; a blob
named ``blobs/<alg>/<hex>`` is named by its digest, which it must then hash to (as a layout's
blobs must); a layer stored gzip- or zstd-compressed under another name is hashed once at
resolve time to give its true digest. Blobs are opened as byte ranges of the tar file, never
extracted.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, BinaryIO, cast

from pinguard.digest import is_digest
from pinguard.errors import ImageNotFound, SourceError
from pinguard.sources import manifest as mf
from pinguard.sources import mediatypes as mt
from pinguard.sources.interface import ImageSource, LayerRef, ResolvedImage, SourceOptions
from pinguard.sources.oci import split_path_and_tag
from pinguard.sources.tarindex import TarIndex

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _content_address(name: str) -> str | None:
    """``blobs/sha256/<hex>`` -> ``sha256:<hex>`` (a valid digest only), else None."""
    parts = name.split("/")
    if len(parts) != 3 or parts[0] != "blobs":
        return None
    text = f"{parts[1]}:{parts[2]}"
    return text if is_digest(text) else None


def normalize_tag(tag: str) -> str:
    """``docker.io/library/python`` -> ``python:latest``; ``localhost/x:1`` -> ``x:1``."""
    name = tag
    for prefix in ("docker.io/", "index.docker.io/", "library/", "localhost/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    if "@" not in name and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name


class DockerArchiveSource(ImageSource):
    """One image of a ``docker save`` tar file."""

    transport = "docker-archive"

    def __init__(self, ref: str, options: SourceOptions | None = None) -> None:
        self.options = options or SourceOptions()
        self.reference = f"{self.transport}:{ref}"
        path, self.tag = split_path_and_tag(ref, self.transport)
        self.path = Path(path)
        self.index = TarIndex(self.path, self.reference)
        self._names: dict[str, str] = {}
        self._resolved = False
        if self.index.find("manifest.json") is None:
            raise ImageNotFound(
                f"{self.reference}: {path!r} is not a docker save archive (no manifest.json)"
            )

    def _entry(self) -> dict[str, Any]:
        what = f"{self.reference} manifest.json"
        data = self.index.read("manifest.json")
        try:
            entries = json.loads(data)
        except ValueError as exc:
            raise SourceError(f"{what} is not valid JSON: {exc}") from exc
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise SourceError(f"{what} is not a list of images")
        entries = cast("list[dict[str, Any]]", entries)
        if not entries:
            raise ImageNotFound(f"{self.reference}: the archive holds no images")

        def tags_of(entry: dict[str, Any]) -> list[str]:
            tags = entry.get("RepoTags")
            return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []

        if self.tag is None:
            if len(entries) == 1:
                return entries[0]
            tags = sorted(t for e in entries for t in tags_of(e))
            raise ImageNotFound(
                f"{self.reference}: the archive holds {len(entries)} images; name one with "
                f":REF or :@N (tags: {', '.join(tags) or 'none'})"
            )
        if re.fullmatch(r"@\d+", self.tag):
            pos = int(self.tag[1:])
            if pos >= len(entries):
                raise ImageNotFound(f"{self.reference}: the archive holds {len(entries)} images")
            return entries[pos]
        want = normalize_tag(self.tag)
        for entry in entries:
            if any(normalize_tag(t) == want for t in tags_of(entry)):
                return entry
        tags = sorted(t for e in entries for t in tags_of(e))
        raise ImageNotFound(
            f"{self.reference}: no image tagged {self.tag!r}; tags present: "
            f"{', '.join(tags) or 'none'}"
        )

    def _layer(self, name: str, diff_id: str) -> LayerRef:
        member = self.index.get(name)
        # docker 25+ stores blobs/<alg>/<hex>: that name is the blob's digest, verified as the
        # blob streams like any descriptor's (the diff_id proves the tar, not these bytes)
        named = _content_address(name)
        with self.index.open(name) as stream:
            head = stream.read(4)
            if not (head.startswith(_GZIP_MAGIC) or head.startswith(_ZSTD_MAGIC)):
                media = mt.OCI_LAYER if name.startswith("blobs/") else mt.DOCKER_LAYER
                return LayerRef(
                    digest=named or diff_id, size=member.size, media_type=media, diff_id=diff_id
                )
            media = (
                mt.DOCKER_LAYER + ".gzip"
                if head.startswith(_GZIP_MAGIC)
                else mt.OCI_LAYER + "+zstd"
            )
            if named is not None:
                return LayerRef(digest=named, size=member.size, media_type=media, diff_id=diff_id)
            # A compressed layer under another name: nothing declares its stored digest (it
            # is not the diff id), so hash it once; the diff_id is its proof.
            hasher = hashlib.sha256(head)
            while chunk := stream.read(1 << 20):
                hasher.update(chunk)
        return LayerRef(
            digest="sha256:" + hasher.hexdigest(),
            size=member.size,
            media_type=media,
            diff_id=diff_id,
        )

    def resolve(self) -> ResolvedImage:
        entry = self._entry()
        what = f"{self.reference} manifest.json"
        config_name, layer_names = entry.get("Config"), entry.get("Layers")
        if not isinstance(config_name, str):
            raise SourceError(f"{what}: image entry has no Config")
        if not isinstance(layer_names, list) or not all(isinstance(n, str) for n in layer_names):
            raise SourceError(f"{what}: image entry has no Layers list")
        config_bytes = self.index.read(config_name)
        config = mf.parse_json_document(config_bytes, f"{self.reference} config")
        ids = mf.diff_ids(config, f"{self.reference} config")
        if len(ids) != len(layer_names):
            raise SourceError(
                f"{what} lists {len(layer_names)} layers but the config has {len(ids)} diff ids"
            )
        self._names = {}
        layers: list[LayerRef] = []
        for name, diff_id in zip(layer_names, ids, strict=True):
            layer = self._layer(name, diff_id)
            self._names[layer.digest] = name
            layers.append(layer)
        self._resolved = True
        platform = mf.check_single_platform(config, self.options.platform, self.reference)
        return ResolvedImage(
            reference=self.reference,
            transport=self.transport,
            manifest_digest=None,
            platform=platform,
            config=config,
            layers=tuple(layers),
            notes=(f"image id {mf.sha256_digest(config_bytes)}",),
        )

    def open_blob(self, layer: LayerRef) -> BinaryIO:
        if not self._resolved:
            self.resolve()
        name = self._names.get(layer.digest)
        if name is None:
            raise ImageNotFound(f"{self.reference}: no layer {layer.digest}")
        return self.index.open(name)
