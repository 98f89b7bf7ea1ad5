"""The pre-commit check of constraints files against the policy.

`read_constraint_lines` reads the requirement lines of a pip constraints file, a pyproject's
``[tool.uv]`` tables or a PEP 751 pylock.toml (`pinguard.repair.pylock`); `check_constraints`
reports each line the policy does not accept (a forbidden version, a pinned package outside
the policy's known-good range, a line that is not a requirement), sorted by file and line.
Writing constraints is `pinguard.repair.constraints`'s; this module sits above it and above
`pylock`, so neither imports the other back.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True, slots=True)
class CheckProblem:
    """One constraint line the policy does not accept."""

    file: str
    line: int
    constraint: str
    message: str


def read_constraint_lines(path: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """(line number, requirement text) of a pip constraints file, a pyproject's ``[tool.uv]``
    constraint/override dependencies, or a PEP 751 pylock.toml (line 0: position unknown)."""
    p = Path(path)
    if pylock.is_pylock(p):
        return pylock.read_pylock(p)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {str(p)!r}: {exc.strerror or exc}") from exc
    if p.name == "pyproject.toml" or p.suffix == ".toml":
        try:
            doc = tomlkit.parse(text).unwrap()
        except tomlkit.exceptions.ParseError as exc:
            raise ConfigError(f"{str(p)!r} is not valid TOML: {exc}") from exc
        uv = doc.get("tool", {}).get("uv", {})
        found: list[tuple[int, str]] = []
        for key in UV_KEYS.values():
            for item in uv.get(key, []) or []:
                number = next(
                    (i for i, ln in enumerate(text.splitlines(), 1) if f'"{item}"' in ln), 0
                )
                found.append((number, str(item)))
        return found
    out: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].split("\t#", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        out.append((number, line))
    return out


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
