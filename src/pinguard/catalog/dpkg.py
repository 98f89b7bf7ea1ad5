"""Debian packages from the dpkg status database (CUDA images install libnccl2 by apt), and the
os-release file that names the distribution they belong to.

Owns the status file's format (RFC 822-style paragraphs; only packages whose Status ends in
"installed" count), os-release(5) parsing, and the analyzer that captures both from each
layer and contributes each installed package as a generic ``Package`` (kind ``deb``, location
the status file, key ``name:architecture``, its architecture as the ``arch`` property and a
``pkg:deb`` purl whose vendor and distro come from the state's os-release), so the reports
and the policy read them without knowing dpkg. The state's os-release goes to the snapshot
too (the SBOMs name the image's distribution).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pinguard.catalog.interface import (
    Analyzer,
    AnalyzerOptions,
    AnalyzerSession,
    SnapshotParts,
    StateView,
)
from pinguard.catalog.purl import package_url
from pinguard.layers.tar import CAPTURE, SKIP
from pinguard.models import DEB, Package

# 3: the packages are generic records (kind "deb", built here with their purls), no longer
# ``SnapshotParts.debs``
VERSION = "3"
STATUS = "/var/lib/dpkg/status"
# os-release(5): /etc/os-release wins; on Debian it is a symlink to the /usr/lib file.
OS_RELEASE = ("/etc/os-release", "/usr/lib/os-release")


def parse_os_release(data: bytes) -> tuple[tuple[str, str], ...]:
    """``KEY=value`` lines of os-release(5), unquoted, sorted by key."""
    out: dict[str, str] = {}
    for raw in data.decode("utf-8", "replace").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        out[key.strip()] = value
    return tuple(sorted(out.items()))


def os_release(files: Mapping[str, bytes]) -> tuple[tuple[str, str], ...]:
    """The os-release of a state (the first file of :data:`OS_RELEASE` present), or ()."""
    for path in OS_RELEASE:
        data = files.get(path)
        if data is not None:
            return parse_os_release(data)
    return ()


def parse_status(data: bytes) -> tuple[tuple[str, str, str], ...]:
    """Installed packages (Status: ... installed) as (name, version, architecture)."""
    out: list[tuple[str, str, str]] = []
    for para in data.decode("utf-8", "replace").split("\n\n"):
        fields: dict[str, str] = {}
        for line in para.splitlines():
            if line[:1] in {" ", "\t"} or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "package" in fields and fields.get("status", "").endswith(" installed"):
            out.append(
                (fields["package"], fields.get("version", ""), fields.get("architecture", ""))
            )
    return tuple(sorted(out, key=lambda p: (p[0], p[2])))


def purl(name: str, version: str, architecture: str, release: Mapping[str, str]) -> str:
    """``pkg:deb/<ID>/<name>@<version>?arch=..&distro=<ID>-<VERSION_ID>`` from os-release."""
    vendor = release.get("ID") or None
    qualifiers: dict[str, str] = {}
    if architecture:
        qualifiers["arch"] = architecture
    if vendor and release.get("VERSION_ID"):
        qualifiers["distro"] = f"{vendor}-{release['VERSION_ID']}"
    return package_url(DEB, name, version, namespace=vendor, qualifiers=qualifiers)


def packages(
    installed: Sequence[tuple[str, str, str]], release: tuple[tuple[str, str], ...]
) -> tuple[Package, ...]:
    """The installed packages as generic records, their purls from the state's os-release."""
    fields = dict(release)
    return tuple(
        Package(
            kind=DEB,
            name=name,
            version=version,
            location=STATUS,
            properties=(("arch", arch),) if arch else (),
            purl=purl(name, version, arch, fields),
            key=f"{name}:{arch}",
        )
        for name, version, arch in installed
    )


@dataclass(frozen=True, slots=True)
class DpkgAnalyzer(Analyzer):
    """The dpkg status database of each layer (the last layer that writes it wins)."""

    name = "dpkg"  # its records' kind is ``deb``, the purl type
    version = VERSION

    @classmethod
    def create(cls, options: AnalyzerOptions) -> DpkgAnalyzer:
        return cls()

    def wants(self, path: str) -> int:
        return CAPTURE if path == STATUS or path in OS_RELEASE else SKIP

    def session(self) -> DpkgSession:
        return DpkgSession()


def _touches(files: Sequence[str], touched: Sequence[str]) -> bool:
    """Whether a layer that added or removed ``touched`` changed one of ``files`` (itself, or a
    directory above it)."""
    return any(
        path in files or any(f.startswith(path.rstrip("/") + "/") for f in files)
        for path in touched
    )


class DpkgSession(AnalyzerSession):
    """The installed packages and the os-release of the current state."""

    def __init__(self) -> None:
        self._installed: tuple[tuple[str, str, str], ...] = ()
        self._os_release: tuple[tuple[str, str], ...] = ()
        self._packages: tuple[Package, ...] = ()

    def update(self, state: StateView, touched: Sequence[str]) -> None:
        changed = False
        if _touches((STATUS,), touched):
            status = state.files.get(STATUS)
            self._installed = parse_status(status) if status is not None else ()
            changed = True
        if _touches(OS_RELEASE, touched):
            self._os_release = os_release(state.files)
            changed = True
        if changed:  # the records of one state, built once and shared by the states after it
            self._packages = packages(self._installed, self._os_release)

    def contribute(self, state: StateView, parts: SnapshotParts) -> None:
        parts.packages.extend(self._packages)
        parts.os_release = self._os_release
