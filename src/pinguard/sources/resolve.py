"""Where a reference's image is read from: ``resolve_reference`` and ``open_source``.

``resolve_reference`` is the one reading of a reference's text, before anything is fetched,
that every command taking an image uses (``open_source`` for reading it; verify, attest and
probe to learn where it lives): it returns an ``ImageReference`` (transport, the rest, the
local-path note) or raises. A bare reference (``reference.split_transport``) goes to the
daemon first, when its socket exists and it has the image, then the registry, and the
``ResolvedImage.notes`` say which one answered.

A reference without a transport that names an existing local path is read from that path,
recognised by its content (``sources.detect``: an OCI or docker-archive tar, an OCI layout
directory, a root filesystem), as syft reads its input; a note says which transport was used.
An existing path that is not an image is tried as a docker reference, and if that fails too
the error says what the local path is. Text that can only be a path (it starts with ``/``,
``./``, ``../`` or ``~``, or its name ends in ``.tar``, ``.tar.gz``, ``.tgz``, ``.tar.zst`` or
``.tar.xz`` with no registry host before it) and names nothing is ``no such file: PATH`` at
once (``ImageNotFound``, exit 3, as for ``oci-archive:PATH``), never a registry request.
``open_source`` builds the transport's ``ImageSource``.
"""

from __future__ import annotations

import dataclasses
import os

from pinguard.errors import ImageNotFound, InvalidReference, SourceError
from pinguard.sources.interface import ImageSource, ResolvedImage, SourceOptions, WrappedSource
from pinguard.sources.reference import (
    PATH_TRANSPORTS,
    REGISTRY_TRANSPORT,
    ImageReference,
    has_transport,
    is_tag,
    parse_reference,
    split_path,
    split_transport,
)

#: Names only an archive file has (a docker repository with a registry host aside).
_ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.zstd", ".tar.xz")
DAEMON_NOTE = "bare reference resolved through the daemon"
REGISTRY_NOTE = "bare reference resolved through the registry"


def resolve_reference(text: str) -> ImageReference:
    """Read ``text`` as every command taking an image does (nothing is fetched): the local
    path it names, recognised by content, else its transport and rest. Raises
    ``InvalidReference`` (exit 2) for text no transport understands, saying why, and
    ``ImageNotFound`` (exit 3) ``no such file: PATH`` for a path that is not there."""
    if not text or text != text.strip() or "\n" in text:
        raise InvalidReference(f"invalid image reference {text!r}")
    if has_transport(text):
        transport, rest = split_transport(text)
        if not rest:
            raise InvalidReference(f"image reference {text!r} names nothing after {transport}:")
        if transport in PATH_TRANSPORTS:
            _require_path(transport, rest)
        elif transport == REGISTRY_TRANSPORT:
            try:
                parse_reference(rest)
            except InvalidReference as exc:  # quote the reference as given
                raise InvalidReference(str(exc).replace(repr(rest), repr(text), 1)) from None
        return ImageReference(text, transport, rest)
    from pinguard.sources.detect import detect  # here: a transport-prefixed reference needs none

    path_text = os.path.expanduser(text) if text.startswith("~") else text
    local = detect(path_text)
    if local is not None and local.reference is not None:
        transport, rest = split_transport(local.reference)
        note = f"{text} is a local {local.kind}: read as {local.reference}"
        return ImageReference(text, transport, rest, note=note)
    if local is None:
        missing = _only_a_path(path_text)
        if missing is not None:
            raise ImageNotFound(f"no such file: {missing}")
    try:
        transport, rest = split_transport(text)
    except InvalidReference as exc:
        if local is not None:
            raise InvalidReference(f"{exc}: {local.path!r} exists but {local.problem}") from None
        raise
    hint = "" if local is None else f"a local path {local.path!r} exists, but {local.problem}"
    return ImageReference(text, transport, rest, failure_hint=hint)


def _require_path(transport: str, rest: str) -> None:
    """``no such file: PATH`` for a path transport's path that is not there."""
    what = PATH_TRANSPORTS[transport][0]
    path, sep, tag = split_path(transport, rest)
    if path and not (sep and not tag) and not os.path.lexists(path):  # syntax first: the source's
        raise ImageNotFound(f"no such {what}: {path}")


def _only_a_path(text: str) -> str | None:
    """The path ``text`` names when it can be nothing but a path (``./x``, ``/x``, ``~/x``,
    ``x.tar``, ``out/x.tar:TAG``), else None: it may be a docker reference. ``PATH:TAG``
    names ``PATH``."""
    head, sep, tail = text.rpartition(":")
    tagged = bool(sep and head and is_tag(tail))
    name = head if tagged else text
    if text.startswith(("/", "./", "../", "~")) or text in (".", ".."):
        return name
    first, slash, _ = name.partition("/")
    registry_host = slash and (
        "." in first or ":" in first or first == "localhost" or first.startswith("[")
    )
    if not registry_host and name.lower().endswith(_ARCHIVE_SUFFIXES):
        return name
    return None


def open_source(reference: str, options: SourceOptions | None = None) -> ImageSource:
    """The ``ImageSource`` for ``reference`` (read by ``resolve_reference``); nothing is
    fetched except, for a bare reference, one daemon inspect that decides between the daemon
    and the registry."""
    options = options or SourceOptions()
    ref = resolve_reference(reference)
    source = _open(ref.transport, ref.rest, ref.canonical, options)
    if ref.note or ref.failure_hint:
        return _NotedSource(source, ref.note, failure_hint=ref.failure_hint)
    return source


def _open(transport: str | None, rest: str, reference: str, options: SourceOptions) -> ImageSource:
    if transport is not None and not rest:
        raise InvalidReference(f"image reference {reference!r} names nothing after {transport}:")
    if transport == REGISTRY_TRANSPORT:
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


class _NotedSource(WrappedSource):
    """Another source, with one note added to what ``resolve()`` returns, and a hint added
    to the error when it fails to resolve."""

    def __init__(self, inner: ImageSource, note: str, *, failure_hint: str = "") -> None:
        super().__init__(inner)
        self.note = note
        self.failure_hint = failure_hint

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
