"""Real, tiny wheels built from inline specs, byte-for-byte deterministic.

A :class:`WheelSpec` names a distribution (any PEP 440 version, including local labels such as
``2.12.1+cu130`` and dev releases such as ``0.6.18.dev20261120``), its ``Requires-Dist`` lines
and optionally the files it installs. :func:`build_wheel` writes a proper ``py3-none-any``
wheel: the payload files, then ``<name>-<version>.dist-info/`` with ``METADATA``, ``WHEEL`` and
a ``RECORD`` carrying urlsafe-base64 sha256 hashes and sizes, every zip entry stamped with a
fixed timestamp so the same spec always gives the same bytes. pip and uv install these wheels
like any other; two specs may write the same path with different bytes (file collisions).
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class WheelSpec:
    """What one wheel contains; ``files`` maps a relative install path to its bytes.

    When ``files`` is None the wheel installs one module, ``<import_name>/__init__.py``,
    holding ``__version__``; give ``files`` to control the payload exactly (an empty mapping
    makes a metadata-only wheel).
    """

    name: str
    version: str
    requires_dist: tuple[str, ...] = ()
    files: Mapping[str, bytes] | None = None
    requires_python: str | None = None
    provides_extra: tuple[str, ...] = ()
    summary: str = ""
    extra_metadata: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        Version(self.version)  # raises InvalidVersion with the bad value quoted
        object.__setattr__(self, "requires_dist", tuple(self.requires_dist))
        object.__setattr__(self, "provides_extra", tuple(self.provides_extra))

    @property
    def normalized_name(self) -> str:
        """The PEP 503 name (``nvidia-nccl-cu13``)."""
        return canonicalize_name(self.name)

    @property
    def file_stem(self) -> str:
        """The name as wheel and dist-info file names spell it (``nvidia_nccl_cu13``)."""
        return self.normalized_name.replace("-", "_")

    @property
    def normalized_version(self) -> str:
        return str(Version(self.version))

    @property
    def filename(self) -> str:
        return f"{self.file_stem}-{self.normalized_version}-py3-none-any.whl"

    @property
    def dist_info(self) -> str:
        return f"{self.file_stem}-{self.normalized_version}.dist-info"

    def metadata_text(self) -> str:
        """The ``METADATA`` file (core metadata 2.1)."""
        lines = [
            "Metadata-Version: 2.1",
            f"Name: {self.name}",
            f"Version: {self.version}",
            f"Summary: {self.summary or f'pinguard test fixture {self.name}'}",
        ]
        if self.requires_python:
            lines.append(f"Requires-Python: {self.requires_python}")
        lines.extend(f"Provides-Extra: {extra}" for extra in self.provides_extra)
        lines.extend(f"Requires-Dist: {req}" for req in self.requires_dist)
        lines.extend(f"{key}: {value}" for key, value in self.extra_metadata)
        return "\n".join(lines) + "\n\n"

    def payload(self) -> dict[str, bytes]:
        if self.files is not None:
            return dict(self.files)
        module = self.file_stem
        return {f"{module}/__init__.py": f'__version__ = "{self.version}"\n'.encode()}


def record_hash(data: bytes) -> str:
    """``sha256=<urlsafe b64, no padding>`` as RECORD files write it."""
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def wheel_bytes(spec: WheelSpec) -> bytes:
    """The complete wheel file for ``spec``; the same spec always gives the same bytes."""
    entries: list[tuple[str, bytes]] = sorted(spec.payload().items())
    for path, _ in entries:
        if path.startswith("/") or ".." in Path(path).parts:
            raise ValueError(f"wheel file path must be relative: {path!r}")
    info = spec.dist_info
    entries.append((f"{info}/METADATA", spec.metadata_text().encode()))
    entries.append(
        (
            f"{info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: pinguard-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n",
        )
    )
    entries.append((f"{info}/top_level.txt", _top_level(spec.payload()).encode()))
    record_lines = [f"{path},{record_hash(data)},{len(data)}" for path, data in entries]
    record_lines.append(f"{info}/RECORD,,")
    entries.append((f"{info}/RECORD", ("\n".join(record_lines) + "\n").encode()))

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path, data in entries:
            zinfo = zipfile.ZipInfo(path, date_time=ZIP_EPOCH)
            zinfo.compress_type = zipfile.ZIP_DEFLATED
            zinfo.external_attr = (0o100644 & 0xFFFF) << 16
            zinfo.create_system = 3
            zf.writestr(zinfo, data)
    return buf.getvalue()


def _top_level(payload: Mapping[str, bytes]) -> str:
    tops = sorted(
        {p.split("/", 1)[0].removesuffix(".py") for p in payload if "/" in p or p.endswith(".py")}
    )
    return "".join(f"{t}\n" for t in tops)


def build_wheel(spec: WheelSpec, out_dir: Path) -> Path:
    """Write ``spec`` as a wheel into ``out_dir`` (created if needed); return its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / spec.filename
    data = wheel_bytes(spec)
    if not path.exists() or path.read_bytes() != data:
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path


def build_wheels(specs: Iterable[WheelSpec], out_dir: Path) -> list[Path]:
    """Build every spec into ``out_dir``; return the wheel paths in spec order."""
    return [build_wheel(spec, out_dir) for spec in specs]


def core_metadata(wheel: Path) -> bytes:
    """The ``METADATA`` bytes inside a wheel (what PEP 658 serves as ``<wheel>.metadata``)."""
    with zipfile.ZipFile(wheel) as zf:
        names = [
            n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
        ]
        if len(names) != 1:
            raise ValueError(f"{wheel.name!r} has {len(names)} top-level dist-info METADATA files")
        return zf.read(names[0])
