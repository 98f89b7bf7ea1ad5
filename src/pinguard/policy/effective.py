"""The effective policy of one run: the pins, forbidden set and guard rule that apply to it.

A merged ``Policy`` holds every entry of every file, each with its scope. What a command acts
on is narrower: only the entries whose run-wide scope (``platforms``, ``targets``) holds for
this image and these ``--target`` values, with the pins of one package intersected into one
range. ``effective_policy`` computes that once, for ``constraints`` (pins merged into the
known-good set; forbidden versions checked in constraints files), ``lint`` and ``gate`` (the
pins behind ``upgrade-pinned`` and ``no-deps-repin``, and ``require_guard`` behind
``missing-guard``). An image of unknown platform matches every platform scope, so a check
fails closed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from pinguard.models import Platform
from pinguard.policy.model import Policy


@dataclass(frozen=True, slots=True)
class ForbiddenRange:
    """A version range that must not be installed, and why."""

    package: NormalizedName
    specifier: SpecifierSet
    reason: str

    def forbids(self, package: str, version: Version) -> bool:
        """Whether ``package`` at ``version`` falls in this range (pre-releases included)."""
        if canonicalize_name(package) != self.package:
            return False
        return self.specifier.contains(version, prereleases=True)


@dataclass(frozen=True, slots=True)
class EffectivePolicy:
    """What the policy asks of one run (see the module docstring)."""

    # package -> the intersection of the ranges of every pin that applies
    pins: Mapping[NormalizedName, SpecifierSet] = field(default_factory=dict)
    forbidden: tuple[ForbiddenRange, ...] = ()
    require_guard: bool = False
    # the first policy file read (findings of the policy-driven lint rules name it)
    policy_file: str | None = None

    @property
    def pin_requirements(self) -> tuple[str, ...]:
        """The pins as requirement strings (``"torch==2.9.1"``), sorted by package."""
        return tuple(f"{name}{spec}" for name, spec in sorted(self.pins.items()))


def effective_policy(
    policy: Policy, *, platform: Platform | None = None, targets: Iterable[str] = ()
) -> EffectivePolicy:
    """The pins, forbidden ranges and guard rule of ``policy`` that apply to this run."""
    wanted = tuple(targets)
    pins: dict[NormalizedName, SpecifierSet] = {}
    for pin in policy.pins:
        if not pin.scope.matches_run(platform, wanted):
            continue
        pins[pin.package] = (
            pins[pin.package] & pin.specifier if pin.package in pins else pin.specifier
        )
    forbidden = tuple(
        ForbiddenRange(f.package, f.specifier, f.reason)
        for f in policy.forbidden
        if f.scope.matches_run(platform, wanted)
    )
    return EffectivePolicy(
        pins=pins,
        forbidden=forbidden,
        require_guard=policy.require_guard,
        policy_file=policy.files[0] if policy.files else None,
    )
