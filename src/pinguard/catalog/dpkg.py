"""Debian packages from the dpkg status database (CUDA images install libnccl2 by apt)."""

from __future__ import annotations

from pinguard.models import DebPackage

VERSION = "1"
STATUS = "/var/lib/dpkg/status"


def wants(path: str) -> bool:
    return path == STATUS


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
