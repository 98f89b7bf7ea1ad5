"""Proving whether constraints can hold, and saying why not when they cannot.

:func:`verify_constraints` runs a real resolver (uv by default, pip-tools on request) with a
step's own requirements plus a constraints set, for the image's Python and platform, against
the indexes the user names. On success it returns the resolved pins. On failure it explains
the refusal as a chain (``explain.py``), looks up on the index (PEP 691/503 pages and PEP 658
metadata, ``index.py``) the newest versions of the culprit whose metadata agrees with the
pins and proves each with the resolver, and works out the override that would force the pins
through, naming the requirements left unmet. Nothing here prints; the CLI renders the
:class:`Verification`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name

from pinguard.errors import ResolveError
from pinguard.repair.resolve import pip_tools
from pinguard.repair.resolve import uv as uv_adapter
from pinguard.repair.resolve.explain import Explanation, Link, blocks, clean, explain_failure
from pinguard.repair.resolve.index import (
    IndexFetchError,
    SimpleIndex,
    TargetEnvironment,
)
from pinguard.repair.resolve.uv import CompileResult, IndexOptions

RESOLVERS = ("uv", "pip-tools")


@dataclass(frozen=True, slots=True)
class Alternative:
    """A version of the culprit whose metadata agrees with the pins."""

    package: NormalizedName
    version: str
    requires_dist: tuple[str, ...]
    verified: bool | None  # the resolver accepted it with the constraints (None: not tried)


@dataclass(frozen=True, slots=True)
class Blocker:
    """What still refuses a resolution after the overrides: a package, the version asked,
    and the versions the index has of it (newest first; empty when none or not looked up)."""

    package: NormalizedName
    asked: str  # the specifier, e.g. "==23.0.1"
    available: tuple[str, ...] = ()
    looked_up: bool = False

    def sentence(self, shown: int = 6) -> str:
        if not self.looked_up:
            have = "the index could not be asked what it has"
        elif not self.available:
            have = f"the index has no version of {self.package}"
        else:
            more = len(self.available) - shown
            listed = ", ".join(self.available[:shown]) + (f" (+{more} more)" if more > 0 else "")
            have = f"the index has {listed}"
        return f"no file of {self.package}{self.asked} fits the target; {have}"


@dataclass(frozen=True, slots=True)
class OverrideOption:
    """Forcing the pins with overrides: which lines, and which requirements stay unmet."""

    overrides: tuple[str, ...]
    unmet: tuple[Link, ...]
    satisfiable: bool
    blocker: Blocker | None = None  # when not satisfiable: what still refuses it
    blocked_by: str | None = None  # ... or the constraint that does, when no file is missing


@dataclass(frozen=True, slots=True)
class Verification:
    """The verdict of one resolver run over a step's requirements plus constraints."""

    satisfiable: bool
    resolver: str
    requirements: tuple[str, ...]
    pins: tuple[tuple[NormalizedName, str], ...] = ()
    explanation: Explanation | None = None
    alternatives: tuple[Alternative, ...] = ()
    override: OverrideOption | None = None
    output: str = ""
    notes: tuple[str, ...] = ()


def constraint_map(lines: Sequence[str]) -> dict[NormalizedName, SpecifierSet]:
    """``name -> specifier`` for constraint lines (comments, options and blanks ignored)."""
    out: dict[NormalizedName, SpecifierSet] = {}
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        name = canonicalize_name(req.name)
        out[name] = out[name] & req.specifier if name in out else req.specifier
    return out


def compile_requirements(
    requirements: Sequence[str],
    constraints: Sequence[str] = (),
    *,
    index: IndexOptions,
    target: TargetEnvironment,
    resolver: str = "uv",
    overrides: Sequence[str] = (),
) -> CompileResult:
    """Run the chosen resolver once."""
    if resolver == "uv":
        return uv_adapter.compile_requirements(
            requirements, constraints, index=index, target=target, overrides=overrides
        )
    if resolver == "pip-tools":
        if overrides:
            raise ResolveError("pip-tools has no overrides; use --resolver uv")
        return pip_tools.compile_requirements(requirements, constraints, index=index, target=target)
    raise ResolveError(f"unknown resolver {resolver!r}; choose one of {', '.join(RESOLVERS)}")


def _replace(requirements: Sequence[str], name: NormalizedName, line: str) -> list[str]:
    out: list[str] = []
    for raw in requirements:
        try:
            same = canonicalize_name(Requirement(raw).name) == name
        except InvalidRequirement:
            same = False
        out.append(line if same else raw)
    if line not in out:
        out.append(line)
    return out


def verify_constraints(
    requirements: Sequence[str],
    constraints: Sequence[str],
    *,
    index: IndexOptions,
    target: TargetEnvironment,
    resolver: str = "uv",
    index_client: SimpleIndex | None = None,
    alternatives: int = 3,
    max_overrides: int = 4,
) -> Verification:
    """Say whether ``requirements`` can be installed under ``constraints``, and if not why,
    what newer culprit versions would fit, and what an override would leave unmet."""
    notes: list[str] = []
    if resolver == "pip-tools":
        mismatch = pip_tools.host_mismatch(target)
        if mismatch:
            notes.append(mismatch)
    result = compile_requirements(
        requirements, constraints, index=index, target=target, resolver=resolver
    )
    if result.ok:
        return Verification(
            True,
            resolver,
            tuple(requirements),
            result.pins,
            output=result.output,
            notes=tuple(notes),
        )
    pins = constraint_map(constraints)
    # A pin on a package the step asks for by name refuses the step by itself (the known-good
    # set holds the version the step means to replace). Say so, then lift that pin to find the
    # chain the rest of the set blocks, which is what the options must get past.
    clash = _direct_clash(requirements, pins)
    if clash:
        notes.append(
            "the constraints pin "
            + ", ".join(f"{n}{pins[n]}" for n in clash)
            + " which the step itself replaces; the rest of the set is checked with "
            + ("that pin" if len(clash) == 1 else "those pins")
            + " lifted"
        )
        constraints = [c for c in constraints if canonicalize_name(_name(c)) not in clash]
        pins = constraint_map(constraints)
        lifted = compile_requirements(
            requirements, constraints, index=index, target=target, resolver=resolver
        )
        if lifted.ok:
            notes.append("with it lifted the step resolves: only that pin refuses it")
            return Verification(
                False, resolver, tuple(requirements), output=result.output, notes=tuple(notes)
            )
        result = lifted
    client = index_client
    if client is None and (index.index_urls or index.find_links):
        client = SimpleIndex(index.index_urls, index.find_links)
    explanation = explain_failure(
        result.output, requirements, pins, resolver=resolver, index=client, target=target
    )
    if explanation is None:
        notes.append("the resolver's explanation could not be turned into a chain")
        missing = missing_version(result.output, client)
        if missing is not None:
            notes.append(f"blocked: {missing.sentence()}")
        return Verification(
            False, resolver, tuple(requirements), output=result.output, notes=tuple(notes)
        )

    found: list[Alternative] = []
    if client is not None and alternatives > 0:
        culprit = explanation.culprit
        others = {k: v for k, v in pins.items() if k != culprit}
        try:
            candidates = client.candidates(
                culprit, others, target, prereleases=True, limit=alternatives
            )
        except IndexFetchError as exc:
            notes.append(f"could not look up alternatives for {culprit}: {exc}")
            candidates = ()
        for cand in candidates:
            line = f"{culprit}=={cand.version}"
            trial = compile_requirements(
                _replace(requirements, culprit, line),
                [c for c in constraints if canonicalize_name(_name(c)) != culprit],
                index=index,
                target=target,
                resolver=resolver,
            )
            found.append(Alternative(culprit, str(cand.version), cand.requires_dist, trial.ok))
        rejected = [a for a in found if a.verified is False]
        if rejected:
            notes.append(
                "the resolver rejected "
                + ", ".join(f"{a.package}=={a.version}" for a in rejected)
                + " deeper in the dependency tree"
            )
        found = [a for a in found if a.verified is not False]

    override = None
    if resolver == "uv":
        override = _override(
            requirements,
            constraints,
            pins,
            explanation,
            index=index,
            target=target,
            client=client,
            limit=max_overrides,
        )
    return Verification(
        satisfiable=False,
        resolver=resolver,
        requirements=tuple(requirements),
        explanation=explanation,
        alternatives=tuple(found),
        override=override,
        output=result.output,
        notes=tuple(notes),
    )


def _direct_clash(
    requirements: Sequence[str], pins: Mapping[NormalizedName, SpecifierSet]
) -> list[NormalizedName]:
    """Packages the step names whose exact pin its own requirement excludes."""
    out: list[NormalizedName] = []
    for raw in requirements:
        try:
            req = Requirement(raw)
        except InvalidRequirement:
            continue
        name = canonicalize_name(req.name)
        pin = pins.get(name)
        if pin is not None and blocks(req, pin) and name not in out:
            out.append(name)
    return out


def _key(line: str) -> NormalizedName:
    return canonicalize_name(_name(line))


def _name(line: str) -> str:
    try:
        return Requirement(line.split("#", 1)[0].strip()).name
    except InvalidRequirement:
        return line


def _override(
    requirements: Sequence[str],
    constraints: Sequence[str],
    pins: Mapping[NormalizedName, SpecifierSet],
    explanation: Explanation,
    *,
    index: IndexOptions,
    target: TargetEnvironment,
    client: SimpleIndex | None,
    limit: int,
) -> OverrideOption:
    overrides: list[str] = []
    unmet: list[Link] = []
    current: Explanation | None = explanation
    while current is not None and len(overrides) < limit:
        if current.blocked_by in overrides:
            break
        overrides.append(current.blocked_by)
        unmet.append(current.unmet_if_overridden)
        trial = uv_adapter.compile_requirements(
            requirements, constraints, index=index, target=target, overrides=overrides
        )
        if trial.ok:
            return OverrideOption(tuple(overrides), tuple(unmet), True)
        # An overridden pin no longer refuses anything: look for the next one that does.
        left = {k: v for k, v in pins.items() if k not in {_key(o) for o in overrides}}
        current = explain_failure(trial.output, requirements, left, index=client, target=target)
    return OverrideOption(
        tuple(overrides),
        tuple(unmet),
        False,
        blocker=missing_version(trial.output, client),
        blocked_by=current.blocked_by if current is not None else None,
    )


_NO_VERSION = re.compile(
    r"there (?:is|are) no (?:matching )?versions? of ([A-Za-z0-9][A-Za-z0-9._-]*)"
    r"((?:===|==|!=|<=|>=|~=|<|>)[^\s,]+)?"
)


def missing_version(output: str, client: SimpleIndex | None) -> Blocker | None:
    """The package version uv says does not exist (``there is no version of X==1``), with the
    versions the index does have, or None when the output names no missing version."""
    match = _NO_VERSION.search(clean(output))
    if match is None:
        return None
    name = canonicalize_name(match.group(1))
    asked = (match.group(2) or "").rstrip(".")
    if client is None:
        return Blocker(name, asked)
    try:
        versions = client.versions(name)
    except IndexFetchError:
        return Blocker(name, asked)
    return Blocker(name, asked, tuple(str(v) for v in versions), looked_up=True)
