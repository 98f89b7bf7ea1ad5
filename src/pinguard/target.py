"""What pinguard judges for: platforms, the PEP 508 marker environment, requirement parsing.

Owns the architecture vocabulary in both directions (``uname -m`` and GOARCH spellings such
as ``x86_64``/``amd64`` and ``aarch64``/``arm64`` -> the OCI architecture; an OCI
architecture -> the ``platform_machine`` a Python there reports), parsing ``os/arch[/variant]``,
matching a wanted platform with an image's (``arm64`` implies variant ``v8``), this machine's
platform as docker and skopeo choose it, and the marker values of a CPython of a given version
on a given platform (what ``python_version == "3.11"`` or ``platform_machine == "aarch64"``
means for an image). Requirement strings are parsed here too, so every stage reads
``Requires-Dist`` the same way. The ``Platform`` value is defined here, beside what is known
about it, and re-exported by ``pinguard.models`` with the values it travels with
(``ImageInfo``, ``ResolvedImage``): a source that resolves an image then imports neither the
other values nor ``packaging``, which is loaded when markers or requirements are first read
(a warm audit reads none). Nothing here does I/O.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pinguard.errors import InvalidPlatform

if TYPE_CHECKING:
    from collections.abc import Mapping

    from packaging.markers import Marker
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet


@dataclass(frozen=True, slots=True)
class Platform:
    """An image platform such as linux/arm64/v8 (what is known about it: below)."""

    os: str
    architecture: str
    variant: str = ""

    def __str__(self) -> str:
        base = f"{self.os}/{self.architecture}"
        return f"{base}/{self.variant}" if self.variant else base


#: ``uname -m`` and GOARCH spellings -> the OCI (GOARCH) architecture.
ARCH_ALIASES: dict[str, str] = {
    "x86_64": "amd64",
    "x86-64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv8": "arm64",
    "armv7l": "arm",
    "armv6l": "arm",
    "arm": "arm",
    "i386": "386",
    "i686": "386",
    "386": "386",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}
#: OCI architecture -> the ``platform_machine`` (``uname -m``) a Python on it reports.
MACHINES: dict[str, str] = {
    "amd64": "x86_64",
    "arm64": "aarch64",
    "386": "i686",
    "arm": "armv7l",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}
#: The variant an image without one is taken to have (containerd's normalisation).
DEFAULT_VARIANTS: dict[str, str] = {"arm64": "v8"}
#: ``uname -m`` values that name a variant of ``arm`` too.
_MACHINE_VARIANTS = {"armv7l": "v7", "armv6l": "v6"}


# --------------------------------------------------------------------------- platforms


def normalize_arch(arch: str) -> str:
    """The OCI (GOARCH) name of ``arch`` (``x86_64`` -> ``amd64``); unknown names lowercased."""
    return ARCH_ALIASES.get(arch.lower(), arch.lower())


def platform_machine(platform: Platform) -> str:
    """The ``platform_machine`` marker value of a Python on ``platform`` (amd64 -> x86_64)."""
    arch = normalize_arch(platform.architecture)
    return MACHINES.get(arch, arch)


def host_platform() -> Platform:
    """linux and this machine's architecture, in OCI terms, as docker and skopeo choose it."""
    if hasattr(os, "uname"):  # what platform.machine() reads on POSIX, without importing it
        machine = os.uname().machine.lower()
    else:  # pragma: no cover - Windows
        import platform as _platform

        machine = _platform.machine().lower()
    return Platform(
        os="linux",
        architecture=normalize_arch(machine),
        variant=_MACHINE_VARIANTS.get(machine, ""),
    )


def parse_platform(text: str) -> Platform:
    """Parse ``os/arch[/variant]`` (``linux/aarch64`` -> linux/arm64).

    Raises `InvalidPlatform` (a ``ValueError``) quoting ``text`` when it is malformed.
    """
    parts = text.strip().split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise InvalidPlatform(f"invalid platform {text!r} (expected os/arch[/variant])")
    return Platform(
        os=parts[0].lower(),
        architecture=normalize_arch(parts[1]),
        variant=parts[2].lower() if len(parts) == 3 else "",
    )


def default_variant(architecture: str) -> str:
    """The variant an image of ``architecture`` without one has (arm64 -> v8, else "")."""
    return DEFAULT_VARIANTS.get(normalize_arch(architecture), "")


def platform_matches(wanted: Platform, have: Platform) -> bool:
    """Same os and architecture; a wanted variant must match (``arm64`` implies ``v8``)."""
    if wanted.os != have.os:
        return False
    if normalize_arch(wanted.architecture) != normalize_arch(have.architecture):
        return False
    return not wanted.variant or wanted.variant == (
        have.variant or default_variant(have.architecture)
    )


# --------------------------------------------------------------------------- markers


def major_minor(python: str) -> str:
    """``python_version`` for a Python version: ``3.11.2`` -> ``3.11``."""
    return ".".join(python.split(".")[:2])


def marker_environment(python: str | None, platform: Platform | None) -> dict[str, str]:
    """The PEP 508 marker values of an installed CPython ``python`` on ``platform``.

    ``python`` is ``3.11`` or ``3.11.2``: ``python_version`` is always major.minor and
    ``python_full_version`` the full version (``3.11.0`` when only major.minor is known).
    ``extra`` is empty, so ``extra == "x"`` markers are inactive, as they are for what is
    installed. What is not known (no Python version, no platform, as for a directory on disk)
    takes this machine's value, which is right for ``dir:`` and the in-build guard.
    """
    from packaging.markers import default_environment

    values: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    values.update(implementation_name="cpython", platform_python_implementation="CPython", extra="")
    if python:
        short = major_minor(python)
        full = python if python.count(".") >= 2 else f"{short}.0"
        values.update(python_version=short, python_full_version=full, implementation_version=full)
    if platform is not None:
        system = platform.os.lower()
        values.update(
            platform_machine=platform_machine(platform),
            os_name="nt" if system == "windows" else "posix",
            sys_platform={"windows": "win32"}.get(system, system),
            platform_system={"linux": "Linux", "windows": "Windows", "darwin": "Darwin"}.get(
                system, system.capitalize()
            ),
            platform_release="",
            platform_version="",
        )
    return values


# --------------------------------------------------------------------------- requirements


def parse_requirement(text: str) -> Requirement | None:
    """The PEP 508 requirement ``text``, or None when it is not one."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return Requirement(text)
    except InvalidRequirement:
        return None


# Distinct requirement strings kept parsed; each is under 4096 characters (the catalog's cap
# on Requires-Dist), so the cache holds at most about 128 MiB of text, far less in practice
# (a large ML image has a few thousand distinct strings).
REQUIREMENT_CACHE = 32768
_PARSED: dict[str, Requirement | None] = {}  # text -> parsed; oldest first, bounded


def cached_requirement(text: str) -> Requirement | None:
    """``parse_requirement`` once per distinct ``text`` (bounded, the oldest dropped first),
    or the parse a layer's worker process made of it (``remember_requirements``): callers
    must not change the returned object, which other callers share."""
    try:
        return _PARSED[text]
    except KeyError:
        pass
    req = parse_requirement(text)
    _remember(text, req)
    return req


#: A parsed requirement as its parts (name, url, extras, specifier, marker): how a worker
#: process sends it. ``Requirement`` pickles as its text and parses it again when loaded; its
#: parts load without the parser (767 distinct lines: 0.031 s against 0.093 s, measured).
RequirementParts = tuple[str, "str | None", "set[str]", "SpecifierSet", "Marker | None"]


def requirement_parts(req: Requirement | None) -> RequirementParts | None:
    """``req`` as the parts ``remember_requirements`` rebuilds it from."""
    if req is None:
        return None
    return (req.name, req.url, req.extras, req.specifier, req.marker)


def remember_requirements(parsed: Mapping[str, RequirementParts | None]) -> None:
    """Requirement strings parsed by another process (the worker that read a layer parses
    its Requires-Dist lines, ``catalog.python.prepare_distributions``), kept as if parsed
    here: the parent then parses none of them again."""
    from packaging.requirements import Requirement

    for text, parts in parsed.items():
        if text in _PARSED:
            continue
        req = None
        if parts is not None:
            req = Requirement.__new__(Requirement)  # its parts, as ``__init__`` sets them
            req.name, req.url, req.extras, req.specifier, req.marker = parts
        _remember(text, req)


def _remember(text: str, req: Requirement | None) -> None:
    if len(_PARSED) >= REQUIREMENT_CACHE:
        del _PARSED[next(iter(_PARSED))]
    _PARSED[text] = req
