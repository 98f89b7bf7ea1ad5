"""Real wheels from the package index, cached, as the native reader's corpus.

The tests compiled with gcc never have the layouts real wheels have: auditwheel repairs
nearly every binary wheel on PyPI with patchelf, which appends a new ``.dynstr`` (and often
``.dynamic``) in a new ``PT_LOAD`` at the end of the file, and torch's CI does the same to
``torch/lib``. ``real_wheels`` downloads pinned manylinux wheels once (``pip download``, into
the test cache) so the reader is checked against ``readelf`` on what users really install.
``SMALL`` (about 30 MB: several build systems, vendored ``<name>.libs/``) runs by default;
``LARGE`` (torch's CUDA 13 wheel and its NCCL, about 800 MB) only with ``--large-corpus``.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.infra.build import cache_dir, file_lock

#: Small real wheels: numpy (OpenBLAS and gfortran vendored in numpy.libs, patchelf'd),
#: Pillow (a dozen vendored image libraries), pyzmq (libsodium), lxml, psutil (abi3).
SMALL = (
    "numpy==2.4.6",
    "pillow==13.0.0",
    "pyzmq==27.3.0",
    "lxml==6.1.3",
    "psutil==7.2.2",
)
#: torch's CUDA 13 wheel (libtorch_cuda.so: PT_DYNAMIC at ~400 MB, .dynstr at the end) and
#: the NCCL wheel it loads through DT_RPATH.
LARGE = ("torch==2.14.1", "nvidia-nccl-cu13==2.30.7")

#: pip matches platform tags exactly: every glibc manylinux tag up to Debian 12's 2.36.
PLATFORMS = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1)),
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)


def real_wheels(specs: Sequence[str]) -> list[Path]:
    """The wheels for ``specs`` (``name==version``), downloaded once into the test cache."""
    target = cache_dir() / "real-wheels"
    with file_lock(target / ".lock"):
        out: list[Path] = []
        for spec in specs:
            name, version = spec.split("==")
            stem = name.replace("-", "_").lower()
            found = [
                p for p in target.glob("*.whl") if p.name.lower().startswith(f"{stem}-{version}-")
            ]
            if not found:
                pip_download([spec], target, deps=False)
                found = [
                    p
                    for p in target.glob("*.whl")
                    if p.name.lower().startswith(f"{stem}-{version}-")
                ]
            assert len(found) == 1, (spec, found)
            out.append(found[0])
        return out


def pip_download(specs: Sequence[str], target: Path, *, deps: bool) -> None:
    """``pip download`` of ``specs`` for CPython 3.11 on every manylinux tag (and pure
    wheels), binary only, into ``target``; with ``deps``, their whole closure too."""
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:"]
    cmd += ["--python-version", "3.11", "-d", str(target)]
    cmd += [] if deps else ["--no-deps"]
    for platform in (*PLATFORMS, "any"):
        cmd += ["--platform", platform]
    subprocess.run([*cmd, *specs], check=True, capture_output=True, timeout=3600)


def is_elf(data: bytes) -> bool:
    return data[:4] == b"\x7fELF"


def shared_objects(wheel: Path) -> Iterator[tuple[str, zipfile.ZipFile]]:
    """The member names of ``wheel`` that are ELF files named like shared objects."""
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            base = info.filename.rsplit("/", 1)[-1]
            if ".so" in base and not info.is_dir():
                with zf.open(info) as fh:
                    if is_elf(fh.read(4)):
                        yield info.filename, zf
