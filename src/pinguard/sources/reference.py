"""Reading a reference's text, nothing fetched: which transport it names and, for the
registry's, the docker reference (``[HOST[:PORT]/]REPO[:TAG][@DIGEST]``) as typed values.

References follow skopeo/containers-image: ``docker://HOST/REPO[:TAG][@DIGEST]`` (a registry),
``docker-daemon:REF``, ``docker-archive:PATH[:REF]``, ``oci:DIR[:TAG]``,
``oci-archive:PATH[:TAG]``, ``dir:PATH`` and ``containers-storage:[DRIVER@ROOT]NAME[:TAG]``.
``split_transport`` reads the prefix; a reference with no transport that is a valid docker
reference (``python:3.11``, ``localhost:5000/team/app:1``) is "bare". A ``word:`` prefix that
is neither a known transport nor the name of a ``NAME:TAG`` is an unknown transport; a
``NAME:TAG`` that breaks docker's rules says which (``repository name must be lowercase``);
both raise ``InvalidReference`` (exit 2). ``ImageReference`` is what a reference names, as
``resolve.resolve_reference`` decides it. The registry transport's prefix ``docker://`` is
written and read here only (``registry_reference``, ``is_registry_reference``,
``strip_registry_prefix``, ``transport_prefix``), and ``image_name`` strips a reference back to
the image's name (for SBOM subjects): parsing transport prefixes is done here, nowhere else.

The docker reference rules follow distribution/reference as docker, skopeo and
containers-image apply them: the first path component is a registry host only when it
contains a ``.`` or a ``:`` or is ``localhost``; otherwise the registry is Docker Hub
(``docker.io``, served by ``registry-1.docker.io``), and a single-component Hub repository gets
the ``library/`` prefix. The tag defaults to ``latest`` unless a digest is given; when both are
given the digest wins. A bad reference raises ``InvalidReference`` as one line quoting the
value and saying what is wrong, worded as docker and skopeo word it (``invalid image reference
'Python:3.12': repository name must be lowercase``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pinguard.digest import Digest
from pinguard.errors import InvalidDigest, InvalidReference

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
DOCKER_HUB_AUTH_KEY = "https://index.docker.io/v1/"  # the key docker login writes for the Hub
_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})

_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_HOST = re.compile(
    r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*)(?::[0-9]+)?"
)


@dataclass(frozen=True, slots=True)
class DockerReference:
    """A parsed docker reference: registry, repository and a tag or a digest."""

    registry: str  # "docker.io", "127.0.0.1:5000", "[::1]:5000"
    repository: str  # "library/python", "team/app"
    tag: str | None = None
    digest: str | None = None  # "sha256:<hex>"; when set it is what gets fetched

    @property
    def api_host(self) -> str:
        """The host (and port) that serves the registry API for this reference."""
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def hostname(self) -> str:
        """The API host without port or IPv6 brackets."""
        host = self.api_host
        if host.startswith("["):
            return host[1 : host.index("]")]
        return host.rsplit(":", 1)[0] if ":" in host else host

    @property
    def manifest_reference(self) -> str:
        """What goes after ``/manifests/``: the digest when given, else the tag."""
        return self.digest or self.tag or "latest"

    def __str__(self) -> str:
        text = f"{self.registry}/{self.repository}"
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def parse_digest(value: str) -> str:
    """Validate a content digest (``Digest.parse``); raise ``InvalidReference`` when malformed."""
    try:
        return str(Digest.parse(value))
    except InvalidDigest as exc:
        raise InvalidReference(f"invalid digest {value!r}: {exc}") from None


def parse_reference(ref: str) -> DockerReference:
    """Parse ``ref`` (without the ``docker://`` transport prefix) into a DockerReference."""
    original = ref

    def invalid(reason: str) -> InvalidReference:
        return InvalidReference(f"invalid image reference {original!r}: {reason}")

    if not ref or ref != ref.strip():
        raise InvalidReference(f"invalid image reference {original!r}")
    if ref.startswith("//"):
        ref = ref[2:]  # "docker:" + "//host/repo" written with the prefix half-stripped
    digest: str | None = None
    if "@" in ref:
        ref, _, digest_text = ref.partition("@")
        try:
            digest = parse_digest(digest_text)
        except InvalidReference:
            raise invalid(f"invalid digest {digest_text!r}") from None
    tag: str | None = None
    last_slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > last_slash:
        ref, tag = ref[:colon], ref[colon + 1 :]
        if not _TAG.fullmatch(tag):
            raise invalid(f"invalid tag {tag!r}")
    first, sep, rest = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        if not _HOST.fullmatch(first):
            raise invalid(f"invalid registry host {first!r}")
        registry, path = first, rest
    else:
        registry, path = DOCKER_HUB, ref
    if registry.lower() in _HUB_ALIASES:
        registry = DOCKER_HUB
    if not path:
        raise invalid("missing repository name")
    components = path.split("/")
    for component in components:
        if not _COMPONENT.fullmatch(component):
            if _COMPONENT.fullmatch(component.lower()):
                raise invalid("repository name must be lowercase")
            raise invalid(f"invalid repository name {path!r}")
    if registry == DOCKER_HUB and len(components) == 1:
        path = f"library/{path}"
    if len(path) > 255:
        raise invalid("repository name too long (more than 255 characters)")
    if tag is None and digest is None:
        tag = "latest"
    return DockerReference(registry=registry, repository=path, tag=tag, digest=digest)


# --- transports ---------------------------------------------------------------------------

#: The registry's transport, and the prefix its references are written with.
REGISTRY_TRANSPORT = "docker"
REGISTRY_PREFIX = "docker://"
TRANSPORTS = (
    REGISTRY_TRANSPORT,
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
PATH_TRANSPORTS = {
    "docker-archive": ("file", True),
    "oci-archive": ("file", True),
    "oci": ("directory", True),
    "dir": ("directory", False),
}

_PREFIX = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(.*)", re.DOTALL)
_DOMAIN_COMPONENT = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]+)?"
_PATH_COMPONENT = _COMPONENT.pattern
_HOST_PORT = re.compile(rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*:[0-9]+/")
_DOCKER_REF = re.compile(
    rf"(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?"
    r"(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?"
)


def transport_prefix(transport: str) -> str:
    """How a reference names ``transport``: ``docker://`` for the registry, else ``NAME:``."""
    return REGISTRY_PREFIX if transport == REGISTRY_TRANSPORT else f"{transport}:"


def registry_reference(name: str) -> str:
    """``docker://NAME``: the registry reference of ``[HOST/]REPO[:TAG][@DIGEST]``."""
    return REGISTRY_PREFIX + name


def is_registry_reference(reference: str) -> bool:
    """True when ``reference`` is written with the registry transport (``docker://``)."""
    return reference.startswith(REGISTRY_PREFIX)


def strip_registry_prefix(reference: str) -> str:
    """``reference`` without a leading ``docker://`` (as given when it has none)."""
    return reference.removeprefix(REGISTRY_PREFIX)


def split_path(transport: str, rest: str) -> tuple[str, str, str]:
    """``(path, ":", tag)`` of a path transport's ``rest`` (``(path, "", "")`` untagged)."""
    tagged = PATH_TRANSPORTS[transport][1]
    return rest.partition(":") if tagged else (rest, "", "")


def is_tag(text: str) -> bool:
    """True when ``text`` is a valid tag (``[\\w][\\w.-]{0,127}``)."""
    return _TAG.fullmatch(text) is not None


def has_transport(reference: str) -> bool:
    """True when ``reference`` starts with a known transport's prefix."""
    match = _PREFIX.fullmatch(reference)
    return is_registry_reference(reference) or (match is not None and match.group(1) in TRANSPORTS)


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
    if is_registry_reference(reference):
        return REGISTRY_TRANSPORT, strip_registry_prefix(reference)
    match = _PREFIX.fullmatch(reference)
    if match is not None and match.group(1) in TRANSPORTS and match.group(1) != REGISTRY_TRANSPORT:
        return match.group(1), match.group(2)
    if is_docker_reference(reference):
        return None, reference
    if match is not None:
        prefix, rest = match.groups()
        if prefix == REGISTRY_TRANSPORT:
            raise InvalidReference(
                f"invalid image reference {reference!r}: the registry transport is written docker://"
            )
        if not _TAG.fullmatch(rest) and not _HOST_PORT.match(reference):
            known = ", ".join(transport_prefix(t) for t in TRANSPORTS)
            raise InvalidReference(
                f"unknown transport {prefix!r} in image reference {reference!r} (known: {known})"
            )
        # NAME:TAG (``Python:3.12``), HOST:PORT/NAME: a docker reference that breaks a rule
    raise _docker_syntax_error(reference)


def _docker_syntax_error(reference: str) -> InvalidReference:
    """What is wrong with ``reference`` read as a docker reference, as one line."""
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
        prefix = transport_prefix(transport)
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
        prefix = transport_prefix(self.transport)
        return prefix + self.rest

    @property
    def kind(self) -> str:
        """What it names, for messages: ``local OCI archive``, ``registry image`` ..."""
        return KINDS[self.transport]

    @property
    def registry_name(self) -> str | None:
        """``[HOST/]REPO[:TAG][@DIGEST]`` when the image may live in a registry (a
        ``docker://`` or a bare reference), else None (a local file, the daemon, storage)."""
        return self.rest if self.transport in (REGISTRY_TRANSPORT, None) else None
