"""Build ``dist/pinguard.pyz``: pinguard and its pure-Python runtime needs as one zipapp.

The zipapp is what a Dockerfile copies into an image to run ``pinguard guard`` after each
install step, so it must start on a stock ``python3`` (Debian/Ubuntu, 3.10+) with no network
and no compiled extension. It holds the ``pinguard`` package and the pure-Python
distributions the guard path imports: packaging, tomlkit, rich, pygments, markdown-it-py,
mdurl and pyelftools (the native-library analyzer; typing-extensions too where the
interpreter running this script still needs it).
By default they are copied, file by file from their RECORDs, out of the environment running
this script (offline, the versions the tests ran with); ``--pip`` instead runs
``pip install --target`` (from PyPI or ``--find-links``). The optional accelerators (isal,
zstandard) and the registry client's needs (requests, platformdirs) are left out: the guard
path does not import them. Bytecode is never included, entries are sorted and stamped with a
fixed time, so two builds from the same inputs give the same bytes; the archive starts with
``#!/usr/bin/env python3`` and runs ``pinguard.cli:main``.

Usage: ``python scripts/build_zipapp.py [-o dist/pinguard.pyz] [--pip [--find-links DIR]]``.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "pinguard"
RUNTIME = ("packaging", "tomlkit", "rich", "pygments", "markdown-it-py", "mdurl", "pyelftools")
INTERPRETER = "/usr/bin/env python3"
MAIN = "pinguard.cli:main"
EPOCH = (1980, 1, 1, 0, 0, 0)
_SKIP_PARTS = {"__pycache__"}
_SKIP_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd")


def _wanted(rel: Path) -> bool:
    return not (
        _SKIP_PARTS.intersection(rel.parts)
        or rel.suffix in _SKIP_SUFFIXES
        or rel.parts[0] in {"..", "bin"}
        or rel.is_absolute()
    )


def copy_installed(names: Iterable[str], target: Path) -> list[str]:
    """Copy each installed distribution's files (per RECORD) into ``target``."""
    copied = []
    for name in names:
        dist = md.distribution(name)
        files = dist.files or []
        if not files:
            raise SystemExit(f"build_zipapp: {name} has no RECORD; use --pip")
        for entry in files:
            rel = Path(str(entry))
            if not _wanted(rel):
                continue
            src = Path(str(entry.locate()))
            if not src.is_file():
                continue
            dest = target / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
        copied.append(f"{dist.metadata['Name']}=={dist.version}")
    return copied


def pip_install(names: Sequence[str], target: Path, find_links: str | None) -> list[str]:
    """``pip install --target`` the runtime needs (pure-Python wheels only)."""
    argv = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-compile",
        "--disable-pip-version-check",
        "--only-binary",
        ":all:",
        "--target",
        str(target),
    ]
    if find_links:
        argv += ["--no-index", "--find-links", find_links]
    subprocess.run([*argv, *names], check=True)
    return list(names)


def needs_typing_extensions() -> bool:
    """rich and markdown-it-py need typing-extensions only on old interpreters."""
    for name in ("rich", "markdown-it-py", "tomlkit"):
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        if any(r.lower().replace("_", "-").startswith("typing-extensions") for r in requires):
            return True
    return False


def copy_pinguard(target: Path) -> None:
    for src in sorted(SOURCE.rglob("*")):
        rel = src.relative_to(SOURCE.parent)
        if src.is_file() and _wanted(rel):
            dest = target / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)


def write_archive(staging: Path, output: Path) -> None:
    """A deterministic zipapp of ``staging``: sorted entries, fixed times, a __main__."""
    main_module, _, func = MAIN.partition(":")
    (staging / "__main__.py").write_text(
        f"import sys\nfrom {main_module} import {func}\n\nsys.exit({func}())\n"
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(f"#!{INTERPRETER}\n".encode())
            with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED) as zf:
                for path in sorted(p for p in staging.rglob("*") if p.is_file()):
                    info = zipfile.ZipInfo(path.relative_to(staging).as_posix(), EPOCH)
                    info.compress_type = zipfile.ZIP_DEFLATED
                    info.external_attr = 0o644 << 16
                    zf.writestr(info, path.read_bytes())
        os.chmod(tmp, 0o755)
        os.replace(tmp, output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build(output: Path, *, use_pip: bool = False, find_links: str | None = None) -> list[str]:
    """Build the zipapp at ``output``; returns the bundled ``name==version`` list."""
    names = list(RUNTIME)
    if needs_typing_extensions():
        names.append("typing-extensions")
    with tempfile.TemporaryDirectory(prefix="pinguard-zipapp-") as tmp:
        staging = Path(tmp)
        if use_pip:
            bundled = pip_install(names, staging, find_links)
        else:
            bundled = copy_installed(names, staging)
        for extra in staging.glob("bin"):
            shutil.rmtree(extra)
        copy_pinguard(staging)
        write_archive(staging, output)
    return bundled


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "dist" / "pinguard.pyz")
    parser.add_argument(
        "--pip", action="store_true", help="pip install --target instead of copying"
    )
    parser.add_argument("--find-links", help="with --pip: a directory of wheels (no index)")
    args = parser.parse_args(argv)
    bundled = build(args.output, use_pip=args.pip, find_links=args.find_links)
    size = args.output.stat().st_size
    print(f"{args.output}: {size // 1024} KiB, pinguard + {', '.join(bundled)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
