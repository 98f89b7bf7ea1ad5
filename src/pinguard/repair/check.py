"""The pre-commit check of constraints files against the policy.

`read_constraint_lines` reads the requirement lines of a pip constraints file, a pyproject's
``[tool.uv]`` tables or a PEP 751 pylock.toml (`pinguard.repair.pylock`), recognised by their
content, not their names; a file that is none of them, or holds nothing to check, is an error
(a gate that read nothing must not pass). `check_constraints` reports each line the policy
does not accept (a forbidden version, a pinned package outside the policy's known-good range,
a line that is not a requirement), sorted by file and line.
Writing constraints is `pinguard.repair.constraints`'s; this module sits above it and above
`pylock`, so neither imports the other back.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from pinguard.errors import ConfigError, UsageError
from pinguard.policy.effective import ForbiddenRange
from pinguard.repair import pylock
from pinguard.repair.constraints import UV_KEYS

_OPERATOR = re.compile(r"[=<>~!]=|[<>]")  # a line meant as a requirement, even a broken one


@dataclass(frozen=True, slots=True)
class CheckProblem:
    """One constraint line the policy does not accept."""

    file: str
    line: int
    constraint: str
    message: str


def read_constraint_lines(path: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """(line number, requirement text) of a pip constraints file, a pyproject's ``[tool.uv]``
    constraint/override dependencies, or a PEP 751 pylock.toml (line 0: position unknown).

    The kind is read from the content, not the name (a lock written as ``locks.toml`` is still
    a lock): a TOML document with ``lock-version`` or a ``[[packages]]`` array is a lock, one
    with ``[tool.uv]`` constraint or override dependencies a pyproject, anything that is not
    TOML a requirements text. A file that is none of these, is missing or unreadable, or holds
    nothing to check is a ``UsageError`` (exit 2) naming it: a gate that read nothing must
    not pass.
    """
    p = Path(path)
    label = str(p)
    try:
        text = p.read_bytes().decode("utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {label!r}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{label!r} is not a constraints file, pyproject.toml or pylock.toml: not UTF-8 "
            f"text ({exc.reason} at byte {exc.start})"
        ) from exc
    if not any(ln.strip() and not ln.lstrip().startswith("#") for ln in text.splitlines()):
        raise UsageError(f"{label!r} is empty (only blank lines and comments): nothing to check")
    try:
        doc: dict[str, Any] | None = tomlkit.parse(text).unwrap()
    except tomlkit.exceptions.TOMLKitError as exc:
        if p.suffix == ".toml":  # meant as TOML (a lock or a pyproject) but broken
            raise ConfigError(f"{label!r} is not valid TOML: {exc}") from exc
        doc = None
    found = _toml_lines(doc, text, label) if doc is not None else _requirement_lines(text, label)
    if not found:
        raise UsageError(f"{label!r} holds no constraints: nothing to check")
    return found


def _toml_lines(doc: dict[str, Any], text: str, label: str) -> list[tuple[int, str]]:
    """The constraints of a TOML document: a lock's packages or a pyproject's uv tables."""
    if pylock.looks_like_pylock(doc):
        return pylock.pylock_entries(doc, text, label)
    tool = doc.get("tool")
    uv = tool.get("uv") if isinstance(tool, dict) else None
    if not isinstance(uv, dict):
        uv = {}
    keys = [k for k in UV_KEYS.values() if k in uv]
    if not keys:
        raise UsageError(
            f"{label!r} is TOML but neither a PEP 751 lock (lock-version, [[packages]]) nor a "
            "pyproject with [tool.uv] constraint-dependencies or override-dependencies: "
            "nothing to check"
        )
    found: list[tuple[int, str]] = []
    lines = text.splitlines()
    for key in keys:
        items = uv[key]
        if not isinstance(items, list):
            raise ConfigError(f"{label!r}: [tool.uv] {key} is not a list of requirements")
        for item in items:
            number = next((i for i, ln in enumerate(lines, 1) if f'"{item}"' in ln), 0)
            found.append((number, str(item)))
    return found


def _requirement_lines(text: str, label: str) -> list[tuple[int, str]]:
    """The requirement lines of a pip constraints or requirements text. A text none of whose
    lines is a requirement or even has a version operator is not one (a README, a log: an
    error); a broken line among them (``torch ==``) is the check's problem to report on its
    line. Only pip options (``-r``, ``-c``: pinguard does not follow them) leave nothing to
    check."""
    out: list[tuple[int, str]] = []
    options: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].split("\t#", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            options.append(line)
            continue
        out.append((number, line))
    if not out and options:
        raise UsageError(
            f"{label!r} holds only pip options ({', '.join(options[:3])}), no constraints: "
            "nothing to check (check the files it names)"
        )
    if out and not any(_is_requirement(line) or _OPERATOR.search(line) for _, line in out):
        raise UsageError(
            f"{label!r} is not a constraints file, pyproject.toml or pylock.toml: none of its "
            f"lines is a requirement (line {out[0][0]}: {out[0][1][:60]!r})"
        )
    return out


def _is_requirement(line: str) -> bool:
    try:
        Requirement(line)
    except InvalidRequirement:
        return False
    return True


def check_constraints(
    path: str | os.PathLike[str],
    *,
    pins: Mapping[NormalizedName, SpecifierSet],
    forbidden: Sequence[ForbiddenRange] = (),
) -> tuple[CheckProblem, ...]:
    """Problems of one constraints file against the policy: a forbidden version, a pinned
    package outside the policy's known-good range, or a line that is not a requirement."""
    problems: list[CheckProblem] = []
    name = str(path)
    for number, line in read_constraint_lines(path):
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            problems.append(CheckProblem(name, number, line, f"not a requirement: {exc}"))
            continue
        pkg = canonicalize_name(req.name)
        exact: Version | None = None
        for s in req.specifier:
            if s.operator in {"==", "==="} and "*" not in s.version:
                try:
                    exact = Version(s.version)
                except InvalidVersion:
                    exact = None
        for bad in forbidden:
            if exact is not None and bad.forbids(pkg, exact):
                problems.append(
                    CheckProblem(name, number, line, f"{pkg} {exact} is forbidden: {bad.reason}")
                )
        pin = pins.get(pkg)
        if pin is None:
            continue
        if exact is None:
            problems.append(
                CheckProblem(
                    name,
                    number,
                    line,
                    f"{pkg} is pinned by the policy ({pin}); constrain it to one exact version",
                )
            )
        elif not pin.contains(exact, prereleases=True):
            problems.append(
                CheckProblem(
                    name,
                    number,
                    line,
                    f"{pkg} {exact} is outside the policy's known-good range {pin}",
                )
            )
    return tuple(sorted(problems, key=lambda p: (p.file, p.line, p.constraint)))
