"""Turning a resolver's refusal into a chain a person can act on.

uv (and pip, for ``--resolver pip-tools``) explain an unsatisfiable resolution in prose that
changes between releases. This module pulls the durable facts out of that prose (``A depends
on B``, ``you require X``) and joins them into one chain from a requirement of the step to the
constraint that blocks it: *flashinfer-python 0.6.18.dev20261120 requires torch>=2.12; torch
2.12.1 requires nvidia-nccl-cu13==2.29.7; the constraints pin nvidia-nccl-cu13==2.30.3*. When an
index is at hand, version ranges are made concrete from the index (and, when the prose yields
no chain at all, the chain is rebuilt from PEP 658 metadata alone).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from pinguard.repair.resolve.index import (
    IndexFetchError,
    SimpleIndex,
    TargetEnvironment,
    pinned_version,
)

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_SPEC = r"(?:(?:===|==|!=|<=|>=|~=|<|>)[^\s,]+(?:,\s?(?:===|==|!=|<=|>=|~=|<|>)[^\s,]+)*)"
_REQ = rf"{_NAME}(?:\[[^\]]*\])?{_SPEC}?"
_DEPENDS = re.compile(
    rf"(?:all versions of (?P<all>{_NAME})|(?P<pkg>{_NAME})(?P<range>{_SPEC})?)"
    rf" depends? on (?P<req>{_REQ})"
)
_REQUIRE = re.compile(rf"you require (?P<req>{_REQ})")
_PIP_DEPENDS = re.compile(rf"(?P<pkg>{_NAME}) (?P<ver>\S+) depends on (?P<req>{_REQ})")
_PIP_USER = re.compile(rf"The user requested (?:\(constraint\) )?(?P<req>{_REQ})")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True, slots=True)
class Fact:
    """``package`` (at ``versions``, a specifier or exact version) requires ``requirement``."""

    package: NormalizedName
    versions: str
    requirement: str


@dataclass(frozen=True, slots=True)
class Link:
    """One step of a chain: ``package`` at ``version`` requires ``requirement``."""

    package: NormalizedName
    version: str  # an exact version when known, else the range the resolver named
    requirement: str

    def sentence(self) -> str:
        return f"{self.package} {self.version} requires {self.requirement}"


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why the step's requirements and the constraints cannot both hold."""

    requested: str  # the requirement of the step at the root of the chain
    chain: tuple[Link, ...]
    blocked_by: str  # the constraint that refuses the last link, e.g. "nvidia-nccl-cu13==2.30.3"
    resolver_text: str = ""

    @property
    def culprit(self) -> NormalizedName:
        """The package the step asked for whose dependencies collide with the constraints."""
        return self.chain[0].package

    @property
    def unmet_if_overridden(self) -> Link:
        """The requirement that stays unmet when the blocking pin is forced by an override."""
        return self.chain[-1]

    def plain(self) -> str:
        """The chain in plain words, one clause per link."""
        links = "; ".join(link.sentence() for link in self.chain)
        return (
            f"the step asks for {self.requested}: {links}; "
            f"but the constraints pin {self.blocked_by}"
        )


def clean(text: str) -> str:
    """Resolver output without colours, box drawing and line wrapping."""
    text = _ANSI.sub("", text)
    text = re.sub("[\u00d7\u2570\u2500\u25b6\u2502]", " ", text)
    text = re.sub(r"^\s*(?:error|cause|hint):", " ", text, flags=re.MULTILINE)
    # uv names a conditional dependency "name{sys_platform == 'linux'}==1.0": drop the marker.
    text = re.sub(r"(?<=[A-Za-z0-9\]])\{[^{}]*\}", "", text)
    return re.sub(r"\s+", " ", text).strip()


def facts_from_uv(text: str) -> tuple[tuple[Fact, ...], tuple[str, ...]]:
    """``depends on`` facts and ``you require`` requirements from uv's failure text."""
    flat = clean(text)
    facts: list[Fact] = []
    for m in _DEPENDS.finditer(flat):
        pkg = m.group("all") or m.group("pkg")
        facts.append(
            Fact(canonicalize_name(pkg), m.group("range") or "", m.group("req").rstrip(",."))
        )
    required = tuple(m.group("req").rstrip(",.") for m in _REQUIRE.finditer(flat))
    return tuple(facts), required


def facts_from_pip(text: str) -> tuple[tuple[Fact, ...], tuple[str, ...]]:
    """The same facts from pip's ``ResolutionImpossible`` report (used by pip-compile)."""
    flat = _ANSI.sub("", text)
    facts = [
        Fact(canonicalize_name(m.group("pkg")), f"=={m.group('ver')}", m.group("req"))
        for m in _PIP_DEPENDS.finditer(flat)
    ]
    required = tuple(
        m.group("req") for m in _PIP_USER.finditer(flat) if "(constraint)" not in m.group(0)
    )
    return tuple(facts), required


def _req(raw: str) -> Requirement | None:
    try:
        return Requirement(raw)
    except InvalidRequirement:
        return None


def _spec(raw: str) -> SpecifierSet:
    try:
        return SpecifierSet(raw.replace(" ", ""))
    except InvalidSpecifier:
        return SpecifierSet()


def blocks(req: Requirement, pin: SpecifierSet) -> bool:
    """True when a pin leaves no room for ``req`` (exact pins; ranges are never judged)."""
    exact = pinned_version(pin)
    return exact is not None and not req.specifier.contains(exact, prereleases=True)


def _concrete(
    package: NormalizedName,
    versions: str,
    incoming: SpecifierSet,
    index: SimpleIndex | None,
) -> str:
    rng = _spec(versions)
    if index is not None:
        try:
            for v in index.versions(package):
                if rng.contains(v, prereleases=True) and incoming.contains(v, prereleases=True):
                    return str(v)
        except IndexFetchError:
            pass
    for s in rng:
        if s.operator in {"==", "===", "<=", ">="}:
            try:
                v = Version(s.version)
            except ValueError:
                continue
            if incoming.contains(v, prereleases=True):
                return str(v)
    return versions or "(any version)"


def chain_from_facts(
    facts: Sequence[Fact],
    requested: Sequence[str],
    constraints: Mapping[NormalizedName, SpecifierSet],
    *,
    index: SimpleIndex | None = None,
    resolver_text: str = "",
) -> Explanation | None:
    """Join facts into the shortest chain from a requested package to a blocking pin."""
    roots: dict[NormalizedName, Requirement] = {}
    for raw in requested:
        r = _req(raw)
        if r is not None:
            roots[canonicalize_name(r.name)] = r
    by_pkg: dict[NormalizedName, list[tuple[Fact, Requirement]]] = {}
    for fact in facts:
        r = _req(fact.requirement)
        if r is not None:
            by_pkg.setdefault(fact.package, []).append((fact, r))

    # Breadth-first from every root; a path ends at a fact whose requirement a pin blocks.
    queue: list[tuple[NormalizedName, tuple[tuple[Fact, Requirement], ...]]] = [
        (name, ()) for name in roots
    ]
    seen: set[NormalizedName] = set()
    while queue:
        name, path = queue.pop(0)
        if name in seen:
            continue
        seen.add(name)
        for fact, r in by_pkg.get(name, []):
            dep = canonicalize_name(r.name)
            pin = constraints.get(dep)
            step = (*path, (fact, r))
            if pin is not None and blocks(r, pin):
                root = roots[step[0][0].package]
                links: list[Link] = []
                incoming = root.specifier
                for f, fr in step:
                    version = _concrete(f.package, f.versions, incoming, index)
                    links.append(Link(f.package, version, f.requirement))
                    incoming = fr.specifier
                return Explanation(
                    requested=str(root),
                    chain=tuple(links),
                    blocked_by=f"{dep}{pin}",
                    resolver_text=resolver_text,
                )
            if dep not in seen:
                queue.append((dep, step))
    return None


def chain_from_index(
    index: SimpleIndex,
    requested: Sequence[str],
    constraints: Mapping[NormalizedName, SpecifierSet],
    target: TargetEnvironment,
    *,
    depth: int = 4,
    resolver_text: str = "",
) -> Explanation | None:
    """Rebuild a chain from PEP 658 metadata: follow the newest allowed version of each
    requested package down its requirements until one is refused by a pin."""

    def walk(
        name: NormalizedName, spec: SpecifierSet, path: tuple[Link, ...], left: int
    ) -> tuple[tuple[Link, ...], str] | None:
        if left == 0:
            return None
        pin = constraints.get(name)
        try:
            versions = index.versions(name)
        except IndexFetchError:
            return None
        for v in versions:
            if not spec.contains(v, prereleases=True):
                continue
            if pin is not None and not pin.contains(v, prereleases=True):
                continue
            file = index.best_file(name, v, target)
            if file is None:
                continue
            try:
                meta = index.metadata(file)
            except IndexFetchError:
                continue
            for req in meta.requirements(target):
                dep = canonicalize_name(req.name)
                link = Link(name, str(v), str(req))
                dep_pin = constraints.get(dep)
                if dep_pin is not None and blocks(req, dep_pin):
                    return (*path, link), f"{dep}{dep_pin}"
                found = walk(dep, req.specifier, (*path, link), left - 1)
                if found is not None:
                    return found
            return None  # only the newest allowed version is followed
        return None

    for raw in requested:
        r = _req(raw)
        if r is None:
            continue
        found = walk(canonicalize_name(r.name), r.specifier, (), depth)
        if found is not None:
            return Explanation(str(r), found[0], found[1], resolver_text)
    return None


def explain_failure(
    text: str,
    requested: Sequence[str],
    constraints: Mapping[NormalizedName, SpecifierSet],
    *,
    resolver: str = "uv",
    index: SimpleIndex | None = None,
    target: TargetEnvironment | None = None,
) -> Explanation | None:
    """The chain behind a resolver failure, or None when it cannot be worked out."""
    facts, required = facts_from_pip(text) if resolver == "pip-tools" else facts_from_uv(text)
    roots = list(requested) or list(required)
    found = chain_from_facts(facts, roots, constraints, index=index, resolver_text=text)
    if found is None and index is not None:
        found = chain_from_index(
            index, roots, constraints, target or TargetEnvironment(), resolver_text=text
        )
    return found
