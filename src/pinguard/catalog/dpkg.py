"""Debian packages from the dpkg status database (CUDA images install libnccl2 by apt), and the
os-release file that names the distribution they belong to (for ``pkg:deb`` purls)."""

from __future__ import annotations

from collections.abc import Mapping

from pinguard.models import DebPackage

VERSION = "2"
STATUS = "/var/lib/dpkg/status"
# os-release(5): /etc/os-release wins; on Debian it is a symlink to the /usr/lib file.
OS_RELEASE = ("/etc/os-release", "/usr/lib/os-release")


def wants(path: str) -> bool:
    return path == STATUS or path in OS_RELEASE


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
