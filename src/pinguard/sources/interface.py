"""The contract every image transport implements, and the values it hands on.

A source resolves a reference to one image (manifest digest, platform, parsed config and
the ordered list of layer blobs) and opens each blob as a raw byte stream, exactly as it is
stored (compressed or not). Verification of digests and sizes happens in ``pinguard.layers.blob``
while the bytes stream by, so a source never needs to buffer or spool a blob. A source whose
files are already on disk (``dir:``) hands out one layer with an ``UnpackedTree`` instead of
a blob; the layer analysis walks that tree in place.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from pinguard.target import Platform


@dataclass(frozen=True, slots=True)
class UnpackedTree:
    """A layer whose files are on disk already: read in place, never through a blob."""

    root: str  # the directory that stands for the image's "/"
    exclude: tuple[str, ...] = ()  # absolute in-image paths whose trees are not read


@dataclass(frozen=True, slots=True)
class LayerRef:
    """One layer blob of an image, in the order the image applies them."""

    digest: str  # "sha256:<hex>" of the blob as stored (compressed bytes for registries)
    size: int | None  # stored size in bytes; None when the transport does not say
    media_type: str = ""
    diff_id: str | None = None  # "sha256:<hex>" of the uncompressed tar, from rootfs.diff_ids
    # set for a layer that is a directory on disk: its digest then names it but does not
    # address its content, so its analysis is never cached
    tree: UnpackedTree | None = None
    # the descriptor's annotations, sorted (the zstd:chunked TOC position and checksum)
    annotations: tuple[tuple[str, str], ...] = ()

    def annotation(self, key: str) -> str | None:
        """The value of one descriptor annotation, if the manifest gave it."""
        return next((v for k, v in self.annotations if k == key), None)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Settings that apply to every transport; built once by the CLI."""

    platform: Platform | None = None  # None: linux and this machine's architecture
    insecure_registries: tuple[str, ...] = ()
    # directory holding config.json; None: $DOCKER_CONFIG or ~/.docker
    docker_config: str | None = None
    docker_host: str | None = None  # None: $DOCKER_HOST or unix:///var/run/docker.sock
    timeout: float = 60.0
    max_retries: int = 4


@dataclass(frozen=True, slots=True)
class ResolvedImage:
    """One image, resolved to a single platform."""

    reference: str  # as the user wrote it
    transport: str  # "docker", "docker-daemon", "docker-archive", "oci", "oci-archive", "dir"
    manifest_digest: str | None
    platform: Platform | None
    config: dict[str, Any] = field(default_factory=dict)  # parsed image config JSON
    layers: tuple[LayerRef, ...] = ()
    notes: tuple[str, ...] = ()  # e.g. "bare reference: used the daemon"


class ImageSource(abc.ABC):
    """One transport's view of one image reference."""

    #: True when ``open_blob`` may be called from worker processes (after fork) in any order.
    parallel_safe: bool = True

    @abc.abstractmethod
    def resolve(self) -> ResolvedImage:
        """Fetch the manifest and config; raise ``SourceError`` subclasses on failure."""

    @abc.abstractmethod
    def open_blob(self, layer: LayerRef) -> BinaryIO:
        """Open one layer blob for streaming, as stored. The caller closes it."""

    def read_ranges(self, layer: LayerRef, ranges: Sequence[tuple[int, int]]) -> list[bytes] | None:
        """The stored bytes of each half-open range ``[start, end)`` of one blob, in order,
        unverified (the caller checks them against what vouches for them); None when this
        transport cannot read parts of a blob (the layer is then streamed whole)."""
        return None

    def resolution_inputs(self) -> tuple[tuple[str, str], ...] | None:
        """What ``resolve`` read, when that was only local files: each file's absolute path
        and the sha256 of the bytes read, so that the same bytes there again resolve the same
        image (``cli/warm.py``'s quick answer checks them instead of resolving). None (the
        default): it read something that cannot be checked so (a registry, a daemon, an
        archive read through its tar index)."""
        return None

    def platforms(self) -> tuple[Platform, ...]:
        """Every platform the reference offers (an index lists several); the default
        resolves the one image and returns its platform, if known."""
        platform = self.resolve().platform
        return (platform,) if platform is not None else ()

    def iter_blobs(self, layers: Sequence[LayerRef]) -> Iterator[tuple[LayerRef, BinaryIO]]:
        """Yield each wanted blob with its stream; transports that can only stream the
        whole image once (a daemon export) override this and may yield in any order."""
        for layer in layers:
            stream = self.open_blob(layer)
            try:
                yield layer, stream
            finally:
                stream.close()

    def close(self) -> None:  # noqa: B027 - optional hook, not abstract
        """Release connections; the default has nothing to release."""

    def __enter__(self) -> ImageSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class WrappedSource(ImageSource):
    """Another source, every call handed to it; a subclass changes what it must (``resolve``,
    most often) and inherits the rest, so a wrapper never falls behind the interface."""

    def __init__(self, inner: ImageSource) -> None:
        self.inner = inner
        self.parallel_safe = inner.parallel_safe

    def resolve(self) -> ResolvedImage:
        return self.inner.resolve()

    def platforms(self) -> tuple[Platform, ...]:
        return self.inner.platforms()

    def open_blob(self, layer: LayerRef) -> BinaryIO:
        return self.inner.open_blob(layer)

    def iter_blobs(self, layers: Sequence[LayerRef]) -> Iterator[tuple[LayerRef, BinaryIO]]:
        return self.inner.iter_blobs(layers)

    def read_ranges(self, layer: LayerRef, ranges: Sequence[tuple[int, int]]) -> list[bytes] | None:
        return self.inner.read_ranges(layer, ranges)

    def resolution_inputs(self) -> tuple[tuple[str, str], ...] | None:
        """None, whatever the inner source read: a wrapper may resolve otherwise than the
        source it wraps (a bare reference's note, a predicted image), so the files it read
        do not stand for this resolve."""
        return None

    def close(self) -> None:
        self.inner.close()
