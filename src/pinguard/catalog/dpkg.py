"""Debian packages from the dpkg status database (CUDA images install libnccl2 by apt).

Owns the status file's format (RFC 822-style paragraphs; only packages whose Status ends in
"installed" count) and the analyzer that captures ``/var/lib/dpkg/status`` from each layer.
"""

from __future__ import annotations

from collections.abc import Sequence
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

VERSION = "1"
STATUS = "/var/lib/dpkg/status"


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
        return CAPTURE if path == STATUS else SKIP

    def session(self) -> DpkgSession:
        return DpkgSession()


class DpkgSession(AnalyzerSession):
    """The installed packages of the current state."""

    def __init__(self) -> None:
        self._debs: tuple[DebPackage, ...] = ()

    def update(self, state: StateView, touched: Sequence[str]) -> None:
        changed = any(
            path == STATUS or STATUS.startswith(path.rstrip("/") + "/") for path in touched
        )
        if changed:
            status = state.files.get(STATUS)
            self._debs = parse_status(status) if status is not None else ()

    def contribute(self, state: StateView, parts: SnapshotParts) -> None:
        parts.debs.extend(self._debs)
