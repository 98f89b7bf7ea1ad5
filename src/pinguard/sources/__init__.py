"""Image sources: one class per transport behind ``ImageSource``, chosen by ``open_source``.

References follow skopeo/containers-image: ``docker://HOST/REPO[:TAG][@DIGEST]`` (a registry),
``docker-daemon:REF``, ``docker-archive:PATH[:REF]``, ``oci:DIR[:TAG]``,
``oci-archive:PATH[:TAG]``, ``dir:PATH`` and ``containers-storage:[DRIVER@ROOT]NAME[:TAG]``
(podman's and buildah's local images, read in place). A reference with no transport that is a valid
docker reference (``python:3.11``, ``localhost:5000/team/app:1``) is "bare": the daemon is
tried first, when its socket exists and it has the image, then the registry, and the
``ResolvedImage.notes`` say which one answered. A ``word:`` prefix that is neither a known
transport nor the host part of a docker reference is an unknown transport and raises
``InvalidReference``.

A reference without a transport that names an existing local path is read from that path,
recognised by its content (``sources.detect``: an OCI or docker-archive tar, an OCI layout
directory, a root filesystem), as syft reads its input; a note says which transport was used.
An existing path that is not an image is tried as a docker reference, and if that fails too
the error says what the local path is. ``image_name`` strips a reference back to the image's
name (for SBOM subjects): parsing transport prefixes is done here, nowhere else.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator, Sequence
from typing import BinaryIO

from pinguard.errors import ImageNotFound, InvalidReference, SourceError
from pinguard.models import Platform
from pinguard.sources.detect import detect
from pinguard.sources.interface import (
    ImageSource,
    LayerRef,
    ResolvedImage,
    SourceOptions,
    UnpackedTree,
)

__all__ = [
    "TRANSPORTS",
    "ImageSource",
    "LayerRef",
    "ResolvedImage",
    "SourceOptions",
    "UnpackedTree",
    "image_name",
    "is_docker_reference",
    "open_source",
    "split_transport",
]

TRANSPORTS = (
    "docker",
    "docker-daemon",
    "docker-archive",
    "oci",
    "oci-archive",
    "dir",
    "containers-storage",
)
DAEMON_NOTE = "bare reference resolved through the daemon"
REGISTRY_NOTE = "bare reference resolved through the registry"

_PREFIX = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(.*)", re.DOTALL)
_DOMAIN_COMPONENT = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOCKER_REF = re.compile(
    rf"(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?"
    r"(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?"
)


def is_docker_reference(text: str) -> bool:
    """True when ``text`` is a docker reference (``[HOST[:PORT]/]REPO[:TAG][@DIGEST]``)."""
    match = _DOCKER_REF.fullmatch(text)
    if match is None:
        return False
    domain = match.group("domain")
    is_host = domain and (
        "." in domain or ":" in domain or domain == "localhost" or domain[0] == "["
    )
    if domain and not is_host and re.fullmatch(_PATH_COMPONENT, domain) is None:
        return False  # not a host after all (distribution/reference): a lowercase path component
    return len(match.group("path")) + len(domain or "") < 256


def split_transport(reference: str) -> tuple[str | None, str]:
    """``(transport, rest)`` for a transport-prefixed reference, ``(None, reference)`` for a
    bare docker reference; anything else raises ``InvalidReference`` quoting the value."""
    if not reference or reference != reference.strip() or "\n" in reference:
        raise InvalidReference(f"invalid image reference {reference!r}")
    if reference.startswith("docker://"):
        return "docker", reference[len("docker://") :]
    match = _PREFIX.fullmatch(reference)
    if match is not None and match.group(1) in TRANSPORTS and match.group(1) != "docker":
        return match.group(1), match.group(2)
    if is_docker_reference(reference):
        return None, reference
    if match is not None:
        prefix = match.group(1)
        if prefix == "docker":
            raise InvalidReference(
                f"invalid image reference {reference!r}: the registry transport is written docker://"
            )
        raise InvalidReference(
            f"unknown transport {prefix!r} in image reference {reference!r} "
            f"(known: {', '.join(t + ':' for t in TRANSPORTS)})"
        )
    raise InvalidReference(f"invalid image reference {reference!r}")


def image_name(reference: str) -> str:
    """The image's name without transport, tag or digest, for an SBOM's subject (never raises):
    ``docker://reg/repo:tag`` -> ``reg/repo``; ``oci-archive:x.tar:tag`` -> ``x.tar``;
    ``dir:PATH`` -> ``PATH``."""
    text = reference
    for transport in TRANSPORTS:
        prefix = "docker://" if transport == "docker" else f"{transport}:"
        if transport != "dir" and text.startswith(prefix):
            text = text[len(prefix) :]
            break
    else:
        if text.startswith("dir:"):
            return text[4:] or "."
    text = text.split("@", 1)[0]
    last = text.rsplit("/", 1)[-1]
    if ":" in last:
        text = text[: len(text) - len(last)] + last.split(":", 1)[0]
    return text or reference


def _has_transport(reference: str) -> bool:
    match = _PREFIX.fullmatch(reference)
    return reference.startswith("docker://") or (match is not None and match.group(1) in TRANSPORTS)


def open_source(reference: str, options: SourceOptions | None = None) -> ImageSource:
    """The ``ImageSource`` for ``reference``; nothing is fetched except, for a bare reference,
    one daemon inspect that decides between the daemon and the registry."""
    options = options or SourceOptions()
    local = None if _has_transport(reference) else detect(reference)
    if local is not None and local.reference is not None:
        note = f"{reference} is a local {local.kind}: read as {local.reference}"
        return _NotedSource(open_source(local.reference, options), note)
    try:
        transport, rest = split_transport(reference)
    except InvalidReference as exc:
        if local is not None:
            raise InvalidReference(f"{exc}: {local.path!r} exists but {local.problem}") from None
        raise
    source = _open(transport, rest, reference, options)
    if local is not None:
        hint = f"a local path {local.path!r} exists, but {local.problem}"
        return _NotedSource(source, "", failure_hint=hint)
    return source


def _open(transport: str | None, rest: str, reference: str, options: SourceOptions) -> ImageSource:
    if transport is not None and not rest:
        raise InvalidReference(f"image reference {reference!r} names nothing after {transport}:")
    if transport == "docker":
        from pinguard.sources.registry import RegistrySource

        return RegistrySource(rest, options)
    if transport == "docker-daemon":
        from pinguard.sources.daemon import DaemonSource

        return DaemonSource(rest, options)
    if transport == "docker-archive":
        from pinguard.sources.archive import DockerArchiveSource

        return DockerArchiveSource(rest, options)
    if transport == "oci":
        from pinguard.sources.oci import OCILayoutSource

        return OCILayoutSource(rest, options)
    if transport == "oci-archive":
        from pinguard.sources.oci import OCIArchiveSource

        return OCIArchiveSource(rest, options)
    if transport == "dir":
        from pinguard.sources.rootfs import DirSource

        return DirSource(rest, options)
    if transport == "containers-storage":
        from pinguard.sources.storage import ContainersStorageSource

        return ContainersStorageSource(rest, options)
    return _open_bare(rest, options)


def _open_bare(reference: str, options: SourceOptions) -> ImageSource:
    from pinguard.sources.daemon import (
        DaemonSource,
        DaemonUnavailable,
        docker_host,
        unix_socket_path,
    )

    host = docker_host(options)
    socket_path = unix_socket_path(host)
    if socket_path is not None and not os.path.exists(socket_path):
        why = f"no daemon socket at {socket_path!r}"
    else:
        try:
            daemon = DaemonSource(reference, options, notes=(DAEMON_NOTE,), display=reference)
            daemon.inspect()
            return daemon
        except ImageNotFound:
            why = "the daemon does not have it"
        except DaemonUnavailable:
            why = f"no daemon answers at {host!r}"
        except SourceError as exc:
            why = f"the daemon failed: {exc}"
    from pinguard.sources.registry import RegistrySource

    return _NotedSource(RegistrySource(reference, options), f"{REGISTRY_NOTE} ({why})")


class _NotedSource(ImageSource):
    """Another source, with one note added to what ``resolve()`` returns, and a hint added
    to the error when it fails to resolve."""

    def __init__(self, inner: ImageSource, note: str, *, failure_hint: str = "") -> None:
        self.inner = inner
        self.note = note
        self.failure_hint = failure_hint
        self.parallel_safe = inner.parallel_safe

    def resolve(self) -> ResolvedImage:
        try:
            resolved = self.inner.resolve()
        except SourceError as exc:
            if not self.failure_hint:
                raise
            raise SourceError(f"{exc} ({self.failure_hint})") from exc
        if not self.note:
            return resolved
        return dataclasses.replace(resolved, notes=(*resolved.notes, self.note))

    def platforms(self) -> tuple[Platform, ...]:
        return self.inner.platforms()

    def open_blob(self, layer: LayerRef) -> BinaryIO:
        return self.inner.open_blob(layer)

    def iter_blobs(self, layers: Sequence[LayerRef]) -> Iterator[tuple[LayerRef, BinaryIO]]:
        return self.inner.iter_blobs(layers)

    def read_ranges(self, layer: LayerRef, ranges: Sequence[tuple[int, int]]) -> list[bytes] | None:
        return self.inner.read_ranges(layer, ranges)

    def close(self) -> None:
        self.inner.close()
