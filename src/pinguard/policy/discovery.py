"""Which policy file a command finds when none is given: ``pinguard.toml``, or a
``pyproject.toml`` with a ``[tool.pinguard]`` table, from a directory upwards.

Owns discovery alone, without the policy loader: ``discover`` reads only the candidate
files, and a ``pyproject.toml`` that cannot hold the table (it never names ``pinguard``, even
through a TOML escape) is passed over without parsing it, so tomlkit is loaded only for one
that might; ``discovery_inputs`` names what discovery reads (which files exist, the bytes of
each ``pyproject.toml``), so that a warm audit (``cli/warm.py``) keys on them without parsing.
"""

from __future__ import annotations

import os
from pathlib import Path

POLICY_FILE = "pinguard.toml"
PYPROJECT = "pyproject.toml"


def _has_tool_table(path: Path) -> bool:
    try:
        data = path.read_bytes()
    except OSError:
        return False
    if b"pinguard" not in data and b"\\u" not in data and b"\\U" not in data:
        return False  # no key can spell it: tomlkit need not be loaded
    import tomlkit
    import tomlkit.exceptions

    try:
        doc = tomlkit.parse(data.decode("utf-8")).unwrap()
    except (UnicodeDecodeError, tomlkit.exceptions.TOMLKitError):
        return False
    tool = doc.get("tool")
    return isinstance(tool, dict) and "pinguard" in tool


def discover(start: str | os.PathLike[str] | None = None) -> Path | None:
    """The nearest ``pinguard.toml``, or ``pyproject.toml`` with ``[tool.pinguard]``.

    Looks in ``start`` (default: the current directory) and then each parent; in one
    directory ``pinguard.toml`` wins over ``pyproject.toml``. None when nothing is found.
    """
    here = Path(start if start is not None else Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / POLICY_FILE
        if candidate.is_file():
            return candidate
        candidate = directory / PYPROJECT
        if candidate.is_file() and _has_tool_table(candidate):
            return candidate
    return None


def discovery_inputs(start: str | os.PathLike[str] | None = None) -> tuple[str, ...]:
    """What ``discover`` reads, read without parsing anything: for each directory it would
    look in (up to the first holding a ``pinguard.toml``), whether that file is there and the
    sha256 of its ``pyproject.toml``. Equal inputs give ``discover`` the same answer, so a
    warm audit keys on these rather than paying for a TOML parser."""
    import hashlib

    here = Path(start if start is not None else Path.cwd()).resolve()
    out: list[str] = []
    for directory in (here, *here.parents):
        if (directory / POLICY_FILE).is_file():
            out.append(f"{directory / POLICY_FILE}")
            break
        try:
            data = (directory / PYPROJECT).read_bytes()
        except OSError:
            continue
        out.append(f"{directory / PYPROJECT}=sha256:{hashlib.sha256(data).hexdigest()}")
    return tuple(out)
