"""Parsing docker references (``[HOST[:PORT]/]REPO[:TAG][@DIGEST]``) into typed values.

The rules follow distribution/reference as docker, skopeo and containers-image apply them:
the first path component is a registry host only when it contains a ``.`` or a ``:`` or is
``localhost``; otherwise the registry is Docker Hub (``docker.io``, served by
``registry-1.docker.io``), and a single-component Hub repository gets the ``library/``
prefix. The tag defaults to ``latest`` unless a digest is given; when both are given the
digest wins. A bad reference raises ``InvalidReference`` as one line quoting the value and
saying what is wrong, worded as docker and skopeo word it (``invalid image reference
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
