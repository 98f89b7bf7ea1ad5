"""``containers-storage:[DRIVER@ROOT]NAME[:TAG]|ID``: podman's and buildah's local images.

Read in place from the storage's own files, read-only, without a daemon, without copying an
image and without extracting anything: ``overlay-images/images.json`` finds the image by
name (``localhost/x:tag``; a name with no tag is ``:latest``; a bare ``x`` is also tried as
``docker.io/library/x`` and ``localhost/x``) or by ID (all of it, or a unique prefix of at
least 12 hex digits); its config is the image's big-data item named by the image ID, and its
layers are the chain of ``overlay-layers/layers.json`` from the image's top layer down.
Each layer's blob is its uncompressed tar, reassembled byte for byte the way the storage
itself does (``storage.Diff``): the layer's tar-split file
(``overlay-layers/<id>.tar-split.gz``, JSON lines of raw header bytes and file entries)
interleaved with the files' contents read from ``overlay/<id>/diff``. The blob's digest is
the layer's diff digest, so the stream is verified against the config's diff_id as every
blob is. ``[DRIVER@ROOT]`` (skopeo's store specifier) names another storage root; the
default is ``/var/lib/containers/storage`` for root and
``$XDG_DATA_HOME/containers/storage`` otherwise. Only the ``overlay`` driver's layout is
read. A layer without a tar-split (pulled partially, zstd:chunked) is a ``SourceError``
saying so. docs/fleet.md says why this way and not ``skopeo copy`` or a mount (measured).
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import re
from pathlib import Path
from typing import Any, BinaryIO

from pinguard.errors import ImageNotFound, InvalidReference, SourceError
from pinguard.sources import manifest as mf
from pinguard.sources.interface import ImageSource, LayerRef, ResolvedImage, SourceOptions
from pinguard.sources.mediatypes import OCI_LAYER

_STORE = re.compile(r"\[(?P<driver>[a-z0-9]+)@(?P<root>/[^]+]*)(?:\+[^]]*)?\](?P<rest>.*)", re.S)
_ID = re.compile(r"(?:sha256:)?([0-9a-f]{12,64})")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9-]+")
_CHUNK = 1 << 20


def default_root() -> Path:
    if os.geteuid() == 0:
        return Path("/var/lib/containers/storage")
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "containers" / "storage"


def _big_data_file(key: str) -> str:
    """The file name containers/storage gives an image's big-data item ``key``."""
    if _PLAIN_KEY.fullmatch(key):
        return key
    return "=" + base64.b64encode(key.encode("utf-8")).decode("ascii")


def _load_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        raise SourceError(f"containers-storage: no {what} at {str(path)!r}") from None
    except (OSError, ValueError) as exc:
        raise SourceError(f"containers-storage: cannot read {what} {str(path)!r}: {exc}") from None


class TarSplitStream(io.RawIOBase):
    """A layer's uncompressed tar, reassembled from its tar-split file and its diff directory.

    Segments (type 2) are raw bytes of the original tar (headers, padding, the end blocks);
    file entries (type 1) stand for ``size`` bytes of the file ``name`` under ``diff``. A
    file shorter than its entry, or a name leaving the directory, is a ``SourceError``."""

    def __init__(self, tar_split: Path, diff: Path) -> None:
        super().__init__()
        self._diff = diff
        try:
            self._lines: Any = gzip.open(tar_split, "rb")  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise SourceError(f"containers-storage: cannot open {str(tar_split)!r}: {exc}") from exc
        self._where = str(tar_split)
        self._pending = memoryview(b"")
        self._file: io.BufferedReader | None = None
        self._left = 0
        self._name = ""

    def readable(self) -> bool:
        return True

    def _next(self) -> bool:
        """Load the next entry's bytes or file; False at the end."""
        try:
            line = self._lines.readline()
        except (OSError, EOFError) as exc:
            raise SourceError(f"containers-storage: {self._where}: {exc}") from None
        if not line:
            return False
        try:
            entry = json.loads(line)
            kind = entry["type"]
            if kind == 2:
                self._pending = memoryview(base64.b64decode(entry.get("payload") or ""))
                return True
            size = int(entry.get("size") or 0)
            raw = entry.get("name_raw")
            name = (
                base64.b64decode(raw).decode("utf-8", "surrogateescape") if raw else entry["name"]
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise SourceError(
                f"containers-storage: {self._where}: bad entry: {exc!r:.80}"
            ) from None
        if kind != 1:
            raise SourceError(f"containers-storage: {self._where}: unknown entry type {kind!r}")
        if size:
            parts = [p for p in name.split("/") if p not in ("", ".")]
            if ".." in parts:
                raise SourceError(
                    f"containers-storage: {self._where}: entry {name!r} leaves the layer"
                )
            try:
                self._file = open(self._diff.joinpath(*parts), "rb")  # noqa: SIM115 - closed at its end
            except OSError as exc:
                raise SourceError(
                    f"containers-storage: layer file {name!r} in {str(self._diff)!r}: {exc}"
                ) from None
            self._left, self._name = size, name
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while True:
            if self._pending:
                n = min(len(view), len(self._pending))
                view[:n] = self._pending[:n]
                self._pending = self._pending[n:]
                return n
            if self._file is not None:
                n = int(self._file.readinto(view[: min(len(view), self._left)]))
                if not n:
                    raise SourceError(
                        f"containers-storage: layer file {self._name!r} in {str(self._diff)!r} "
                        f"is {self._left} bytes shorter than the layer's tar says"
                    )
                self._left -= n
                if not self._left:
                    self._file.close()
                    self._file = None
                return n
            if not self._next():
                return 0

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._lines.close()
        super().close()


class ContainersStorageSource(ImageSource):
    """One image of a local containers-storage (podman, buildah, CRI-O)."""

    def __init__(self, ref: str, options: SourceOptions | None = None) -> None:
        self.options = options or SourceOptions()
        self.ref = ref
        match = _STORE.fullmatch(ref)
        if match is not None:
            if match.group("driver") != "overlay":
                raise InvalidReference(
                    f"containers-storage:{ref}: only the overlay driver's storage is read, "
                    f"not {match.group('driver')!r}"
                )
            self.root, self.name = Path(match.group("root")), match.group("rest")
        else:
            self.root, self.name = default_root(), ref
        if not self.name:
            raise InvalidReference(f"containers-storage:{ref}: names no image")

    def _candidates(self) -> list[str]:
        name = self.name
        last = name.rsplit("/", 1)[-1]
        if "@" not in name and ":" not in last:
            name += ":latest"
        out = [name]
        first = name.split("/", 1)[0]
        if "/" not in name or not ("." in first or ":" in first or first == "localhost"):
            out += [f"localhost/{name}", f"docker.io/{name}"]
            if "/" not in name:
                out.append(f"docker.io/library/{name}")
        return out

    def _image(self) -> dict[str, Any]:
        images = _load_json(self.root / "overlay-images" / "images.json", "image list")
        if not isinstance(images, list):
            raise SourceError(f"containers-storage: {self.root}: the image list is not a list")
        for candidate in self._candidates():
            for image in images:
                if candidate in (image.get("names") or ()):
                    return dict(image)
        match = _ID.fullmatch(self.name)
        if match is not None:
            found = [i for i in images if str(i.get("id", "")).startswith(match.group(1))]
            if len(found) == 1:
                return dict(found[0])
            if len(found) > 1:
                raise InvalidReference(f"containers-storage:{self.ref}: ID prefix is ambiguous")
        raise ImageNotFound(f"containers-storage: no image {self.name!r} in {str(self.root)!r}")

    def _layer_chain(self, top: str) -> list[dict[str, Any]]:
        layers = _load_json(self.root / "overlay-layers" / "layers.json", "layer list")
        by_id = {str(layer.get("id")): layer for layer in layers if isinstance(layer, dict)}
        chain: list[dict[str, Any]] = []
        current: str | None = top
        while current:
            layer = by_id.get(current)
            if layer is None or len(chain) > 1000:
                raise SourceError(f"containers-storage: layer {current!r} is not in the store")
            chain.append(layer)
            current = layer.get("parent")
        return chain[::-1]

    def resolve(self) -> ResolvedImage:
        image = self._image()
        image_id = str(image["id"])
        config_key = f"sha256:{image_id}"
        config_path = self.root / "overlay-images" / image_id / _big_data_file(config_key)
        try:
            data = config_path.read_bytes()
        except OSError as exc:
            raise SourceError(f"containers-storage: the config of {self.name!r}: {exc}") from exc
        mf.verify_bytes(data, config_key, f"containers-storage: {self.name} config")
        config = mf.parse_json_document(data, f"containers-storage: {self.name} config")
        chain = self._layer_chain(str(image.get("layer") or "")) if image.get("layer") else []
        diff_ids = mf.diff_ids(config, f"containers-storage: {self.name}")
        stored = [str(layer.get("diff-digest")) for layer in chain]
        if stored != diff_ids:
            raise SourceError(
                f"containers-storage: {self.name}: the layer chain's diff digests do not match "
                f"the config's diff_ids ({len(stored)} vs {len(diff_ids)} layers)"
            )
        refs = tuple(
            LayerRef(
                digest=str(layer["diff-digest"]),
                size=int(layer["diff-size"]) if layer.get("diff-size") is not None else None,
                media_type=OCI_LAYER,
                diff_id=str(layer["diff-digest"]),
            )
            for layer in chain
        )
        self._ids = {str(layer["diff-digest"]): str(layer["id"]) for layer in chain}
        return ResolvedImage(
            reference=f"containers-storage:{self.ref}",
            transport="containers-storage",
            manifest_digest=image.get("digest"),
            platform=mf.platform_from_config(config),
            config=config,
            layers=refs,
        )

    def open_blob(self, layer: LayerRef) -> BinaryIO:
        ids = getattr(self, "_ids", None) or {}
        layer_id = ids.get(layer.digest)
        if layer_id is None:
            raise SourceError(f"containers-storage: {layer.digest} is not a layer of {self.name}")
        tar_split = self.root / "overlay-layers" / f"{layer_id}.tar-split.gz"
        if not tar_split.exists():
            raise SourceError(
                f"containers-storage: layer {layer_id} has no tar-split (pulled partially?); "
                f"copy the image out with skopeo and audit the copy"
            )
        stream = TarSplitStream(tar_split, self.root / "overlay" / layer_id / "diff")
        return io.BufferedReader(stream, _CHUNK)
