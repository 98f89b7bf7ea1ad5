"""Recognising a local path by its content, as syft's source detection does.

A reference written without a transport (``examples/out/demo.tar``, ``./rootfs``, ``/``,
``build/oci:latest``) that names an existing path is read from that path: a tar file holding
``oci-layout`` is an OCI archive (``oci-archive:``), one holding ``manifest.json`` a
``docker save`` archive (``docker-archive:``), a directory holding ``oci-layout`` an OCI layout
(``oci:``), any other directory a root filesystem (``dir:``). ``PATH:TAG`` is tried when the
whole text is not a path. ``detect`` returns what it found, or why an existing path is not an
image (a compressed tarball, a file that is not a tar), so the caller can say so when the
registry fails too. Nothing here opens more than the tar headers.
"""

from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass

from pinguard.sources.tarindex import normalize_member_name

_GZIP = b"\x1f\x8b"
_ZSTD = b"\x28\xb5\x2f\xfd"
_MAX_HEADERS = 100_000  # an image archive names its markers long before this


@dataclass(frozen=True, slots=True)
class LocalPath:
    """What an existing local path is: ``reference`` the transport-prefixed reference to read
    it with, or None with ``problem`` saying why it is not an image."""

    path: str
    kind: str  # "OCI archive", "docker-archive", "OCI layout", "root filesystem", "file"
    reference: str | None
    problem: str = ""


def detect(text: str) -> LocalPath | None:
    """The local path ``text`` names (``PATH`` or ``PATH:TAG``) and what it holds; None when
    no such path exists."""
    candidates: list[tuple[str, str | None]] = [(text, None)]
    head, sep, tail = text.rpartition(":")
    if sep and head and tail and "/" not in tail:
        candidates.append((head, tail))
    for path, tag in candidates:
        if not os.path.lexists(path):
            continue
        if ":" in path:  # a transport reference ends the path at its first ':'
            return LocalPath(path, "file", None, "its name holds ':', which a reference cannot")
        return _what(path, tag)
    return None


def _with_tag(transport: str, path: str, tag: str | None) -> str:
    return f"{transport}:{path}" + (f":{tag}" if tag else "")


def _what(path: str, tag: str | None) -> LocalPath:
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "oci-layout")):
            return LocalPath(path, "OCI layout", _with_tag("oci", path, tag))
        if tag is not None:
            return LocalPath(path, "directory", None, "a root filesystem takes no :TAG")
        return LocalPath(path, "root filesystem", f"dir:{path}")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        return LocalPath(path, "file", None, f"cannot be read: {exc.strerror or exc}")
    if magic.startswith(_GZIP) or magic == _ZSTD:
        how = "gzip" if magic.startswith(_GZIP) else "zstd"
        return LocalPath(
            path,
            "file",
            None,
            f"it is {how}-compressed; pinguard reads image archives as plain tar",
        )
    markers = _tar_markers(path)
    if markers is None:
        return LocalPath(path, "file", None, "it is not a tar archive")
    if "oci-layout" in markers:
        return LocalPath(path, "OCI archive", _with_tag("oci-archive", path, tag))
    if "manifest.json" in markers:
        return LocalPath(path, "docker-archive", _with_tag("docker-archive", path, tag))
    return LocalPath(path, "file", None, "it is a tar archive without oci-layout or manifest.json")


def _tar_markers(path: str) -> set[str] | None:
    """The image markers among a tar file's top-level members; None when not a tar."""
    found: set[str] = set()
    try:
        with tarfile.open(path, mode="r:") as tar:
            for n, info in enumerate(tar):
                name = normalize_member_name(info.name)
                if name in ("oci-layout", "manifest.json", "index.json"):
                    found.add(name)
                if {"oci-layout", "manifest.json"} <= found or n >= _MAX_HEADERS:
                    break
    except (tarfile.TarError, EOFError, OSError):
        return None
    return found
