"""Image sources: one class per transport behind ``ImageSource``, chosen by ``open_source``.

References follow skopeo/containers-image: ``docker://HOST/REPO[:TAG][@DIGEST]`` (a registry),
``docker-daemon:REF``, ``docker-archive:PATH[:REF]``, ``oci:DIR[:TAG]``,
``oci-archive:PATH[:TAG]``, ``dir:PATH`` and ``containers-storage:[DRIVER@ROOT]NAME[:TAG]``
(podman's and buildah's local images, read in place). ``resolve_reference`` is the one reading
of a reference's text, before anything is fetched, that every command taking an image uses
(``open_source`` for reading it; verify, attest and probe to learn where it lives): it returns
an ``ImageReference`` (transport, the rest, the local-path note) or raises. A reference with no
transport that is a valid docker reference (``python:3.11``, ``localhost:5000/team/app:1``) is
"bare": the daemon is tried first, when its socket exists and it has the image, then the
registry, and the ``ResolvedImage.notes`` say which one answered. A ``word:`` prefix that is
neither a known transport nor the name of a ``NAME:TAG`` is an unknown transport; a
``NAME:TAG`` that breaks docker's rules says which (``repository name must be lowercase``);
both raise ``InvalidReference`` (exit 2).

A reference without a transport that names an existing local path is read from that path,
recognised by its content (``sources.detect``: an OCI or docker-archive tar, an OCI layout
directory, a root filesystem), as syft reads its input; a note says which transport was used.
An existing path that is not an image is tried as a docker reference, and if that fails too
the error says what the local path is. Text that can only be a path (it starts with ``/``,
``./``, ``../`` or ``~``, or its name ends in ``.tar``, ``.tar.gz``, ``.tgz``, ``.tar.zst`` or
``.tar.xz`` with no registry host before it) and names nothing is ``no such file: PATH`` at
once (``ImageNotFound``, exit 3, as for ``oci-archive:PATH``), never a registry request.
``image_name`` strips a reference back to the image's name (for SBOM subjects): parsing
transport prefixes is done here, nowhere else.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass

from pinguard.errors import ImageNotFound, InvalidReference, SourceError
from pinguard.sources.interface import (
    ImageSource,
    LayerRef,
    ResolvedImage,
    SourceOptions,
    UnpackedTree,
    WrappedSource,
)

__all__ = [
    "TRANSPORTS",
    "ImageReference",
    "ImageSource",
    "LayerRef",
    "ResolvedImage",
    "SourceOptions",
    "UnpackedTree",
    "image_name",
    "is_docker_reference",
    "open_source",
    "resolve_reference",
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
#: What each transport reads, as messages name it ("pg.tar is a local OCI archive").
KINDS = {
    None: "image name (the daemon's, else the registry's)",
    "docker": "registry image",
    "docker-daemon": "Docker daemon image",
    "docker-archive": "local docker-archive (docker save tar)",
    "oci": "local OCI layout",
    "oci-archive": "local OCI archive",
    "dir": "local root filesystem",
    "containers-storage": "containers-storage image",
}
#: Transports whose reference names a path on this machine: (its kind of path, tagged?).
_PATH_TRANSPORTS = {
    "docker-archive": ("file", True),
    "oci-archive": ("file", True),
    "oci": ("directory", True),
    "dir": ("directory", False),
}
#: Names only an archive file has (a docker repository with a registry host aside).
_ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.zstd", ".tar.xz")
DAEMON_NOTE = "bare reference resolved through the daemon"
REGISTRY_NOTE = "bare reference resolved through the registry"

_PREFIX = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(.*)", re.DOTALL)
_DOMAIN_COMPONENT = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_HOST_PORT = re.compile(rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*:[0-9]+/")
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
    bare docker reference; anything else raises ``InvalidReference`` quoting the value and
    saying what is wrong with it."""
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
        prefix, rest = match.groups()
        if prefix == "docker":
            raise InvalidReference(
                f"invalid image reference {reference!r}: the registry transport is written docker://"
            )
        if not _TAG.fullmatch(rest) and not _HOST_PORT.match(reference):
            known = ", ".join("docker://" if t == "docker" else t + ":" for t in TRANSPORTS)
            raise InvalidReference(
                f"unknown transport {prefix!r} in image reference {reference!r} (known: {known})"
            )
        # NAME:TAG (``Python:3.12``), HOST:PORT/NAME: a docker reference that breaks a rule
    raise _docker_syntax_error(reference)


def _docker_syntax_error(reference: str) -> InvalidReference:
    """What is wrong with ``reference`` read as a docker reference, as one line."""
    from pinguard.sources.reference import parse_reference

    try:
        parse_reference(reference)
    except InvalidReference as exc:
        return exc
    return InvalidReference(f"invalid image reference {reference!r}")


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


@dataclass(frozen=True, slots=True)
class ImageReference:
    """What a reference's text names, decided before anything is fetched.

    ``transport`` is one of ``TRANSPORTS``, or None for a bare docker reference (the daemon,
    then the registry); ``rest`` is what follows the transport prefix. A local path given
    without a transport has its transport here already (``pg.tar`` -> ``oci-archive``), with
    ``note`` saying so; ``failure_hint`` says what a same-named local path is when it is no
    image, for the error should the docker reference fail too."""

    text: str  # as given
    transport: str | None
    rest: str
    note: str = ""
    failure_hint: str = ""

    @property
    def canonical(self) -> str:
        """The reference with its transport written out (``oci-archive:pg.tar``)."""
        if self.transport is None:
            return self.rest
        prefix = "docker://" if self.transport == "docker" else f"{self.transport}:"
        return prefix + self.rest

    @property
    def kind(self) -> str:
        """What it names, for messages: ``local OCI archive``, ``registry image`` ..."""
        return KINDS[self.transport]

    @property
    def registry_name(self) -> str | None:
        """``[HOST/]REPO[:TAG][@DIGEST]`` when the image may live in a registry (a
        ``docker://`` or a bare reference), else None (a local file, the daemon, storage)."""
        return self.rest if self.transport in ("docker", None) else None


def resolve_reference(text: str) -> ImageReference:
    """Read ``text`` as every command taking an image does (nothing is fetched): the local
    path it names, recognised by content, else its transport and rest. Raises
    ``InvalidReference`` (exit 2) for text no transport understands, saying why, and
    ``ImageNotFound`` (exit 3) ``no such file: PATH`` for a path that is not there."""
    if not text or text != text.strip() or "\n" in text:
        raise InvalidReference(f"invalid image reference {text!r}")
    if _has_transport(text):
        transport, rest = split_transport(text)
        if not rest:
            raise InvalidReference(f"image reference {text!r} names nothing after {transport}:")
        if transport in _PATH_TRANSPORTS:
            _require_path(transport, rest)
        elif transport == "docker":
            from pinguard.sources.reference import parse_reference

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
    what, tagged = _PATH_TRANSPORTS[transport]
    path, sep, tag = rest.partition(":") if tagged else (rest, "", "")
    if path and not (sep and not tag) and not os.path.lexists(path):  # syntax first: the source's
        raise ImageNotFound(f"no such {what}: {path}")


def _only_a_path(text: str) -> str | None:
    """The path ``text`` names when it can be nothing but a path (``./x``, ``/x``, ``~/x``,
    ``x.tar``, ``out/x.tar:TAG``), else None: it may be a docker reference. ``PATH:TAG``
    names ``PATH``."""
    head, sep, tail = text.rpartition(":")
    tagged = bool(sep and head and _TAG.fullmatch(tail))
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


def _has_transport(reference: str) -> bool:
    match = _PREFIX.fullmatch(reference)
    return reference.startswith("docker://") or (match is not None and match.group(1) in TRANSPORTS)


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
