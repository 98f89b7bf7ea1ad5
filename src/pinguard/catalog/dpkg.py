"""Debian packages from the dpkg status database (CUDA images install libnccl2 by apt), and the
os-release file that names the distribution they belong to (for ``pkg:deb`` purls).

Owns the status file's format (RFC 822-style paragraphs; only packages whose Status ends in
"installed" count), os-release(5) parsing, and the analyzer that captures both from each
layer.
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
from pinguard.layers.tar import CAPTURE, SKIP
from pinguard.models import DebPackage

VERSION = "2"
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


def parse_status(data: bytes) -> tuple[DebPackage, ...]:
    """Installed packages (Status: ... installed) as (name, version, architecture)."""
    out: list[DebPackage] = []
    for para in data.decode("utf-8", "replace").split("\n\n"):
        fields: dict[str, str] = {}
        for line in para.splitlines():
            if line[:1] in {" ", "\t"} or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "package" in fields and fields.get("status", "").endswith(" installed"):
            out.append(
                DebPackage(
                    fields["package"], fields.get("version", ""), fields.get("architecture", "")
                )
            )
    return tuple(sorted(out, key=lambda p: (p.name, p.architecture)))


@dataclass(frozen=True, slots=True)
class DpkgAnalyzer(Analyzer):
    """The dpkg status database of each layer (the last layer that writes it wins)."""

    name = "dpkg"
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
        self._debs: tuple[DebPackage, ...] = ()
        self._os_release: tuple[tuple[str, str], ...] = ()

    def update(self, state: StateView, touched: Sequence[str]) -> None:
        if _touches((STATUS,), touched):
            status = state.files.get(STATUS)
            self._debs = parse_status(status) if status is not None else ()
        if _touches(OS_RELEASE, touched):
            self._os_release = os_release(state.files)

    def contribute(self, state: StateView, parts: SnapshotParts) -> None:
        parts.debs.extend(self._debs)
        parts.os_release = self._os_release
