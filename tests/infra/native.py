"""Real shared objects for the native-library tests: gcc builds them, readelf reads them.

:func:`build_so` compiles a C source with the system ``gcc`` into a shared object with a
soname, an optional banner string in read-only data, ``DT_NEEDED`` entries (libraries it
links against) and an RPATH or RUNPATH (``--disable-new-dtags`` / ``--enable-new-dtags``).
:func:`readelf_dynamic` is the independent expectation: binutils' ``readelf -d`` parsed
into the same four facts pinguard reports.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.infra.tools import require_tool


def build_so(
    out: Path,
    *,
    soname: str,
    banner: str = "",
    needed: Sequence[Path] = (),
    rpath: Sequence[str] = (),
    runpath: bool = False,
    rodata_bytes: int = 0,
    symbol: str = "",
) -> Path:
    """Compile a shared object at ``out`` (see the module docstring)."""
    gcc = require_tool("gcc")
    src = out.with_suffix(out.suffix + ".c")
    body = [f'const char pg_banner[] = "{banner}";' if banner else ""]
    if rodata_bytes:
        body.append(f"const char pg_padding[{rodata_bytes}] = {{1}};")
    body.append(
        f"int {symbol or 'pg_' + re.sub(r'[^A-Za-z0-9]', '_', soname)}(void) {{ return 1; }}"
    )
    src.write_text("\n".join(body) + "\n")
    argv = [gcc, "-shared", "-fPIC", "-o", str(out), str(src), f"-Wl,-soname,{soname}"]
    if rpath:
        argv.append("-Wl,--enable-new-dtags" if runpath else "-Wl,--disable-new-dtags")
        argv.append("-Wl,-rpath," + ":".join(rpath))
    # each library by path: its soname becomes the NEEDED entry (kept even though unused)
    argv += ["-Wl,--no-as-needed", *map(str, needed)]
    subprocess.run(argv, check=True, capture_output=True, text=True)
    return out


def build_exe(
    out: Path, needed: Sequence[Path], *, rpath: Sequence[str] = (), runpath: bool = False
) -> Path:
    """A tiny program that NEEDs ``needed`` (for running the real loader on it)."""
    gcc = require_tool("gcc")
    src = out.with_suffix(".c")
    src.write_text("int main(void) { return 0; }\n")
    argv = [gcc, "-o", str(out), str(src), "-Wl,--no-as-needed", *map(str, needed)]
    if rpath:
        argv.append("-Wl,--enable-new-dtags" if runpath else "-Wl,--disable-new-dtags")
        argv.append("-Wl,-rpath," + ":".join(rpath))
    subprocess.run(argv, check=True, capture_output=True, text=True)
    return out


@dataclass(frozen=True, slots=True)
class Dynamic:
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]


_LINE = re.compile(r"\((NEEDED|SONAME|RPATH|RUNPATH)\)\s+[^\[]*\[(.*)\]")


def readelf_dynamic(path: Path) -> Dynamic:
    """``readelf -d`` (binutils) parsed: the independent expectation for pinguard's reader."""
    readelf = require_tool("readelf")
    out = subprocess.run(
        [readelf, "-d", "-W", str(path)], check=True, capture_output=True, text=True
    ).stdout
    soname: str | None = None
    needed: list[str] = []
    rpath: list[str] = []
    runpath: list[str] = []
    for kind, value in _LINE.findall(out):
        if kind == "NEEDED":
            needed.append(value)
        elif kind == "SONAME":
            soname = value
        elif kind == "RPATH":
            rpath.extend(p for p in value.split(":") if p)
        else:
            runpath.extend(p for p in value.split(":") if p)
    return Dynamic(soname, tuple(needed), tuple(rpath), tuple(runpath))
