"""Writing images: deterministic layer tars, OCI image layouts and OCI archives.

The one image writer that the tests, the benchmarks and the demo generator share (pinguard's
audit reads images and never imports this). ``layer_tar`` writes a layer from {path: bytes}
plus whiteouts; ``ImageWriter`` collects blobs in memory or straight into a layout's
``blobs/`` directory (a benchmark streams gigabytes of layers there itself and ``adopt``s
them), builds config and manifest for each image, and writes the layout or an archive of it.
Everything is written with fixed mtimes and sorted JSON, so the same input gives the same
digests every time.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pinguard.fileio import atomic_write
from pinguard.sources.manifest import REF_NAME_ANNOTATION
from pinguard.sources.mediatypes import OCI_CONFIG, OCI_INDEX, OCI_LAYER, OCI_MANIFEST

MTIME = 1764374400  # 2025-11-29: fixed, so archives are byte-for-byte reproducible
CREATED = "2025-11-29T00:00:00Z"
DEFAULT_ENV = ("PATH=/usr/local/bin:/usr/bin:/bin",)


def parent_entries(path: str, seen: set[str], mtime: int = MTIME) -> Iterator[tarfile.TarInfo]:
    """Directory entries for the parents of ``path`` not in ``seen`` yet (``seen`` grows)."""
    parts = path.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        directory = "/".join(parts[:i])
        if directory not in seen:
            seen.add(directory)
            info = tarfile.TarInfo(directory)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            info.mtime = mtime
            yield info


def layer_tar(
    files: Mapping[str, bytes],
    *,
    whiteouts: Iterable[str] = (),
    parents: bool = False,
    mtime: int = MTIME,
    symlinks: Mapping[str, str] | None = None,
    hardlinks: Mapping[str, str] | None = None,
) -> bytes:
    """A PAX layer tar of ``files`` (relative paths), empty ``whiteouts`` entries,
    ``symlinks`` (path -> target as stored) and ``hardlinks`` (path -> an earlier member),
    sorted; with ``parents`` each file's directories get their own entries first, as real
    layers do."""
    entries: dict[str, bytes] = dict.fromkeys(whiteouts, b"")
    entries.update(files)
    links = dict(symlinks or {})
    hard = dict(hardlinks or {})
    entries.update(dict.fromkeys([*links, *hard], b""))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        seen: set[str] = set()
        for path in sorted(entries):
            if parents:
                for info in parent_entries(path, seen, mtime):
                    tar.addfile(info)
            data = entries[path]
            info = tarfile.TarInfo(path)
            if path in links or path in hard:
                info.type = tarfile.SYMTYPE if path in links else tarfile.LNKTYPE
                info.linkname = links[path] if path in links else hard[path]
                info.mode, info.mtime = (0o777 if path in links else 0o644), mtime
                tar.addfile(info)
                continue
            info.size = len(data)
            info.mode = 0o644
            info.mtime = mtime
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def compress(tar: bytes, compression: str = "gzip") -> tuple[bytes, str]:
    """(blob bytes, layer media type) for ``gzip``, ``zstd`` or ``none``."""
    if compression == "gzip":
        return gzip.compress(tar, mtime=0), OCI_LAYER + "+gzip"
    if compression == "zstd":
        import zstandard

        return zstandard.ZstdCompressor().compress(tar), OCI_LAYER + "+zstd"
    if compression == "none":
        return tar, OCI_LAYER
    raise ValueError(f"unknown compression {compression!r}: use gzip, zstd or none")


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class Descriptor:
    """An OCI content descriptor."""

    media_type: str
    digest: str
    size: int

    def to_json(self, **extra: Any) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size, **extra}


@dataclass(frozen=True, slots=True)
class Image:
    """One image an ``ImageWriter`` wrote: its manifest, config and layers."""

    manifest: Descriptor
    config: Descriptor
    layers: tuple[Descriptor, ...]
    diff_ids: tuple[str, ...]
    platform: dict[str, str] = field(default_factory=dict)


def _platform(text: str) -> dict[str, str]:
    parts = text.split("/")
    if len(parts) not in (2, 3):
        raise ValueError(f"platform {text!r} is not os/arch[/variant]")
    out = {"os": parts[0], "architecture": parts[1]}
    if len(parts) == 3:
        out["variant"] = parts[2]
    return out


def _json(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True).encode()


class ImageWriter:
    """The blobs of one or more images, in memory or in the ``blobs/`` of ``layout``."""

    def __init__(self, layout: Path | None = None) -> None:
        self.layout = layout
        self._blobs: dict[str, bytes] = {}
        if layout is not None:
            (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)

    def _blob_path(self, digest: str) -> Path:
        assert self.layout is not None
        algo, _, hexpart = digest.partition(":")
        return self.layout / "blobs" / algo / hexpart

    def blob(self, data: bytes, media_type: str) -> Descriptor:
        digest = sha256_digest(data)
        if self.layout is None:
            self._blobs[digest] = data
        else:
            self._blob_path(digest).write_bytes(data)
        return Descriptor(media_type, digest, len(data))

    def adopt(self, media_type: str, digest: str, size: int) -> Descriptor:
        """A blob the caller already wrote to ``blobs/<algo>/<hex>`` of the layout."""
        path = self._blob_path(digest)
        if path.stat().st_size != size:
            raise ValueError(f"blob {digest!r} at {str(path)!r} is not {size} bytes")
        return Descriptor(media_type, digest, size)

    def read(self, digest: str) -> bytes:
        if self.layout is None:
            return self._blobs[digest]
        return self._blob_path(digest).read_bytes()

    def layer(self, tar: bytes, compression: str = "gzip") -> tuple[Descriptor, str]:
        """Store one layer; return its descriptor and diff_id."""
        data, media_type = compress(tar, compression)
        return self.blob(data, media_type), sha256_digest(tar)

    def image(
        self,
        layers: Sequence[tuple[Descriptor, str]],
        history: Sequence[Mapping[str, Any]],
        *,
        platform: str = "linux/amd64",
        env: Sequence[str] = DEFAULT_ENV,
    ) -> Image:
        """Config and manifest for ``layers`` ((descriptor, diff_id) in order)."""
        plat = _platform(platform)
        config = {
            **plat,
            "config": {"Env": list(env)},
            "rootfs": {"type": "layers", "diff_ids": [diff_id for _, diff_id in layers]},
            "history": [dict(h) for h in history],
        }
        config_desc = self.blob(_json(config), OCI_CONFIG)
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": config_desc.to_json(),
            "layers": [desc.to_json() for desc, _ in layers],
        }
        return Image(
            manifest=self.blob(_json(manifest), OCI_MANIFEST),
            config=config_desc,
            layers=tuple(desc for desc, _ in layers),
            diff_ids=tuple(diff_id for _, diff_id in layers),
            platform=plat,
        )

    def index(
        self, images: Sequence[Image], *, tag: str | None = None, nested: bool = False
    ) -> tuple[dict[str, Any], Descriptor | None]:
        """The layout's ``index.json``: the images listed directly (each tagged ``tag``), or
        with ``nested`` one image index blob tagged ``tag``; also that blob's descriptor."""
        annotations = {REF_NAME_ANNOTATION: tag} if tag is not None else {}
        entries = [
            img.manifest.to_json(
                platform=img.platform,
                **({"annotations": annotations} if annotations and not nested else {}),
            )
            for img in images
        ]
        if not nested:
            return {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}, None
        inner = self.blob(
            _json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}), OCI_INDEX
        )
        top = inner.to_json(**({"annotations": annotations} if annotations else {}))
        return {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [top]}, inner

    def _layout_files(self, index: Mapping[str, Any]) -> dict[str, bytes]:
        return {
            "oci-layout": _json({"imageLayoutVersion": "1.0.0"}),
            "index.json": _json(index),
        }

    def write_layout(self, index: Mapping[str, Any]) -> Path:
        """Finish the layout directory this writer was made for."""
        if self.layout is None:
            raise ValueError("write_layout needs a writer made with a layout directory")
        for name, data in self._layout_files(index).items():
            atomic_write(self.layout / name, data.decode())
        return self.layout

    def write_oci_archive(self, index: Mapping[str, Any], path: Path) -> None:
        """A tar of the whole layout (``oci-archive:``), written atomically."""
        files = self._layout_files(index)
        digests = (
            self._blobs
            if self.layout is None
            else {f"sha256:{p.name}": b"" for p in (self.layout / "blobs" / "sha256").iterdir()}
        )
        for digest in digests:
            files["blobs/sha256/" + digest.split(":", 1)[1]] = self.read(digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for name in sorted(files):
                info = tarfile.TarInfo(name)
                info.size = len(files[name])
                info.mtime = MTIME
                tar.addfile(info, io.BytesIO(files[name]))
        tmp.replace(path)
