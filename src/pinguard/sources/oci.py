"""``oci:DIR[:TAG]`` and ``oci-archive:PATH[:TAG]``: images in an OCI image layout.

An OCI image layout is a directory with ``oci-layout``, ``index.json`` and content-addressed
``blobs/<alg>/<hex>``; an OCI archive is the same tree inside a tar file, which is read in
place through member offsets (never extracted). ``TAG`` selects the ``index.json`` entry whose
``org.opencontainers.image.ref.name`` annotation equals it (``@N`` selects entry N, as skopeo
does); without a tag the layout must hold exactly one image. Indexes, at the top or nested,
are narrowed to one platform like a registry does. As with containers-image, the path ends at
the first ``:``. Manifests and configs are verified against their digests as they are read;
layer blobs are returned raw, for the caller to verify while they stream.
"""

from __future__ import annotations

import abc
import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from pinguard.digest import Digest
from pinguard.errors import ImageNotFound, InvalidReference, SourceError
from pinguard.sources import manifest as mf
from pinguard.sources.interface import ImageSource, LayerRef, ResolvedImage, SourceOptions
from pinguard.target import Platform, host_platform, platform_matches

_MAX_DEPTH = 4
_SMALL_BLOB = 16 << 20  # manifests, indexes and configs are read whole up to this size


def split_path_and_tag(body: str, transport: str) -> tuple[str, str | None]:
    """``PATH[:TAG]`` split at the first ``:``; an empty path raises ``InvalidReference``."""
    path, sep, tag = body.partition(":")
    if not path:
        raise InvalidReference(f"{transport}: reference {transport + ':' + body!r} names no path")
    if sep and not tag:
        raise InvalidReference(
            f"{transport}: reference {transport + ':' + body!r} has an empty tag"
        )
    return path, (tag if sep else None)


def blob_relpath(digest: str, what: str) -> str:
    """``sha256:abc`` -> ``blobs/sha256/abc``, refusing anything that is not a valid digest."""
    return Digest.parse(digest, what).relpath


_LAYOUT_VERSION = re.compile(r"1\.\d+\.\d+")


def check_layout_marker(data: bytes, what: str) -> None:
    """The ``oci-layout`` file must be JSON with an ``imageLayoutVersion`` of 1.x.y."""
    doc = mf.parse_json_document(data, f"{what} oci-layout")
    version = doc.get("imageLayoutVersion")
    if not isinstance(version, str) or not _LAYOUT_VERSION.fullmatch(version):
        raise SourceError(
            f"{what}: oci-layout has imageLayoutVersion {version!r}; only 1.x is supported"
        )


class _LayoutSource(ImageSource):
    """The resolution logic shared by the directory and tar forms of a layout."""

    transport = ""

    def __init__(self, ref: str, options: SourceOptions | None = None) -> None:
        self.options = options or SourceOptions()
        self.reference = f"{self.transport}:{ref}"
        path, self.tag = split_path_and_tag(ref, self.transport)
        self.path = Path(path)

    # -- storage, per form -------------------------------------------------------------
    @abc.abstractmethod
    def _read_file(self, relpath: str, limit: int) -> bytes:
        """A file of the layout, read whole; missing raises ``ImageNotFound``."""

    @abc.abstractmethod
    def _open_file(self, relpath: str) -> BinaryIO:
        """A file of the layout, opened for streaming; missing raises ``ImageNotFound``."""

    # -- shared ---------------------------------------------------------------------------
    def _read_blob(self, desc: dict[str, Any], what: str) -> bytes:
        digest = desc["digest"]
        data = self._read_file(blob_relpath(digest, what), _SMALL_BLOB)
        size = desc.get("size")
        mf.verify_bytes(data, digest, what, size if isinstance(size, int) else None)
        return data

    def _top_candidates(self, index: dict[str, Any]) -> list[dict[str, Any]]:
        entries = mf.descriptors(index, "manifests", f"{self.reference} index.json")
        if self.tag is None:
            if not entries:
                raise ImageNotFound(f"{self.reference}: the layout holds no images")
            return entries
        if re.fullmatch(r"@\d+", self.tag):
            pos = int(self.tag[1:])
            if pos >= len(entries):
                raise ImageNotFound(
                    f"{self.reference}: index.json has {len(entries)} entries, no {self.tag!r}"
                )
            return [entries[pos]]
        chosen = [e for e in entries if _ref_name(e) == self.tag]
        if not chosen:
            tags = sorted({t for t in (_ref_name(e) for e in entries) if t})
            raise ImageNotFound(
                f"{self.reference}: no image tagged {self.tag!r}; tags present: "
                f"{', '.join(tags) or 'none'}"
            )
        return chosen

    def resolve(self) -> ResolvedImage:
        try:
            marker = self._read_file("oci-layout", 4096)
        except ImageNotFound:
            raise SourceError(
                f"{self.reference}: not a valid OCI layout (no oci-layout file)"
            ) from None
        check_layout_marker(marker, self.reference)
        index = mf.parse_json_document(
            self._read_file("index.json", _SMALL_BLOB), f"{self.reference} index.json"
        )
        candidates = self._top_candidates(index)
        wanted = self.options.platform
        target = wanted or host_platform()
        notes: list[str] = []
        platform: Platform | None = None
        if len(candidates) > 1:
            if not all(mf.descriptor_platform(c) for c in candidates):
                tags = sorted({t for t in (_ref_name(e) for e in candidates) if t})
                raise ImageNotFound(
                    f"{self.reference}: the layout holds {len(candidates)} images; name one "
                    f"with :TAG or :@N (tags: {', '.join(tags) or 'none'})"
                )
            desc, platform = mf.select_platform(
                {"manifests": candidates}, target, f"{self.reference} index.json"
            )
        else:
            desc = candidates[0]
        for depth in range(_MAX_DEPTH + 1):
            what = f"{self.reference} blob {desc['digest']}"
            data = self._read_blob(desc, what)
            doc = mf.parse_json_document(data, what)
            descriptor_type = desc.get("mediaType")
            kind = mf.document_kind(
                doc,
                what,
                descriptor_type=descriptor_type if isinstance(descriptor_type, str) else "",
            )
            if kind == "manifest":
                config_desc = mf.config_descriptor(doc, what)
                config_bytes = self._read_file(
                    blob_relpath(config_desc["digest"], what), _SMALL_BLOB
                )
                resolved = mf.resolved_from_manifest(
                    reference=self.reference,
                    transport=self.transport,
                    manifest_bytes=data,
                    config_bytes=config_bytes,
                    manifest_digest=desc["digest"],
                    what=self.reference,
                )
                if platform is None:
                    platform = mf.check_single_platform(resolved.config, wanted, self.reference)
                    if wanted is None and platform and not platform_matches(target, platform):
                        notes.append(f"single-platform image is {platform}, not {target}")
                return ResolvedImage(
                    reference=resolved.reference,
                    transport=resolved.transport,
                    manifest_digest=resolved.manifest_digest,
                    platform=platform or resolved.platform,
                    config=resolved.config,
                    layers=resolved.layers,
                    notes=tuple(notes),
                )
            if depth == _MAX_DEPTH:
                break
            desc, platform = mf.select_platform(
                doc, target, f"{self.reference} index {desc['digest']}"
            )
        raise SourceError(f"{self.reference}: indexes nested deeper than {_MAX_DEPTH}")

    def platforms(self) -> tuple[Platform, ...]:
        """The platforms the tag (or the whole layout) offers, following one nested index."""
        index = mf.parse_json_document(
            self._read_file("index.json", _SMALL_BLOB), f"{self.reference} index.json"
        )
        entries = self._top_candidates(index)
        for _depth in range(_MAX_DEPTH + 1):
            if len(entries) == 1 and mf.is_index({}, entries[0].get("mediaType", "")):
                what = f"{self.reference} blob {entries[0]['digest']}"
                doc = mf.parse_json_document(self._read_blob(entries[0], what), what)
                entries = mf.descriptors(doc, "manifests", what)
                continue
            break
        found: list[Platform] = []
        for desc in entries:
            plat = mf.descriptor_platform(desc)
            if plat is not None and plat.os != "unknown" and plat not in found:
                found.append(plat)
        return tuple(found) if found else super().platforms()

    def open_blob(self, layer: LayerRef) -> BinaryIO:
        return self._open_file(blob_relpath(layer.digest, self.reference))


def _ref_name(desc: dict[str, Any]) -> str | None:
    annotations = desc.get("annotations")
    if isinstance(annotations, dict):
        value = annotations.get(mf.REF_NAME_ANNOTATION)
        if isinstance(value, str):
            return value
    return None


class OCILayoutSource(_LayoutSource):
    """``oci:DIR[:TAG]``: an OCI image layout directory."""

    transport = "oci"

    def __init__(self, ref: str, options: SourceOptions | None = None) -> None:
        super().__init__(ref, options)
        self._read: dict[str, str] = {}  # absolute path -> sha256 of the bytes read whole
        if not self.path.is_dir():
            raise ImageNotFound(f"{self.reference}: {str(self.path)!r} is not a directory")
        if not (self.path / "index.json").is_file():
            raise ImageNotFound(
                f"{self.reference}: {str(self.path)!r} is not an OCI layout (no index.json)"
            )

    def _file(self, relpath: str) -> Path:
        path = self.path / relpath
        if not path.is_file():
            raise ImageNotFound(f"{self.reference}: missing {relpath!r}")
        return path

    def _read_file(self, relpath: str, limit: int) -> bytes:
        path = self._file(relpath)
        if path.stat().st_size > limit:
            raise SourceError(f"{self.reference}: {relpath!r} is too large to be metadata")
        data = path.read_bytes()
        self._read[os.path.abspath(path)] = "sha256:" + hashlib.sha256(data).hexdigest()
        return data

    def resolution_inputs(self) -> tuple[tuple[str, str], ...]:
        """The layout's files ``resolve`` read (``oci-layout``, ``index.json``, the index,
        manifest and config blobs), with the sha256 of what was read."""
        return tuple(sorted(self._read.items()))

    def _open_file(self, relpath: str) -> BinaryIO:
        return open(self._file(relpath), "rb")

    def read_ranges(self, layer: LayerRef, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Parts of a blob file, read in place (the caller verifies them)."""
        out: list[bytes] = []
        with self._open_file(blob_relpath(layer.digest, self.reference)) as fh:
            for start, end in ranges:
                fh.seek(start)
                out.append(fh.read(end - start))
        return out


class OCIArchiveSource(_LayoutSource):
    """``oci-archive:PATH[:TAG]``: an OCI image layout inside a tar file, read in place."""

    transport = "oci-archive"

    def __init__(self, ref: str, options: SourceOptions | None = None) -> None:
        from pinguard.sources.tarindex import TarIndex  # here: a layout needs no tarfile

        super().__init__(ref, options)
        self.index = TarIndex(self.path, self.reference)
        if self.index.find("index.json") is None:
            raise ImageNotFound(
                f"{self.reference}: {str(self.path)!r} holds no OCI layout (no index.json)"
            )

    def _read_file(self, relpath: str, limit: int) -> bytes:
        return self.index.read(relpath, limit)

    def _open_file(self, relpath: str) -> BinaryIO:
        return self.index.open(relpath)
