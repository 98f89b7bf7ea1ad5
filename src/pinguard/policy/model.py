"""The policy as values: rules, pins, forbidden versions, couplings, waivers and their scopes.

A ``Policy`` is what one or more policy files say once parsed, validated and merged: every
value is already a ``packaging`` object (names, specifier sets, markers) or a ``Severity``,
and each entry remembers the file and line it came from (``Origin``) so findings can point
back at it. Origins are excluded from equality, so two policies that say the same thing
compare equal wherever they were written (the test that ``policies/default.toml`` equals the
built-in default relies on this). The catalogue of rules (``RULES``) with their default
severities lives here too; ``default_policy()`` is the policy used when no file is given.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from packaging.markers import Marker
from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName
from packaging.version import Version

from pinguard.errors import InvalidPlatform
from pinguard.models import Environment, Platform, PolicySource, Severity
from pinguard.target import marker_environment, parse_platform, platform_matches


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a policy value was written: a file and a 1-based line (None: built in)."""

    file: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        if self.file is None:
            return "<built-in>"
        return f"{self.file}:{self.line}" if self.line else self.file


BUILTIN = Origin()


@dataclass(frozen=True, slots=True)
class RuleInfo:
    """What a rule checks and how it behaves when no policy says otherwise."""

    id: str
    title: str
    description: str
    severity: Severity
    enabled: bool = True
    configurable: bool = True


# The catalogue. The default policy is exactly these defaults: the four rules the design names
# (downgrade, unmet-requirement as errors; file-collision, duplicate-distribution as warnings)
# fire on any image; pin-violation, forbidden-version and coupling need entries to fire;
# unpinned-prerelease is opt-in; record-mismatch runs only when file digests are supplied.
RULES: Mapping[str, RuleInfo] = {
    r.id: r
    for r in (
        RuleInfo(
            "pin-violation",
            "Version outside a known-good pin",
            "An installed distribution is outside the range (or exact version) a [[pin]] allows.",
            Severity.ERROR,
        ),
        RuleInfo(
            "forbidden-version",
            "Forbidden version installed",
            "An installed distribution matches a [[forbidden]] entry (a known-bad version).",
            Severity.ERROR,
        ),
        RuleInfo(
            "downgrade",
            "Distribution moved backwards",
            "A build step replaced a distribution with an older version.",
            Severity.ERROR,
        ),
        RuleInfo(
            "unpinned-prerelease",
            "Pre-release or nightly not pinned exactly",
            "A pre-release or dev (nightly) version is installed without a [[pin]] naming that "
            "exact version.",
            Severity.ERROR,
            enabled=False,
        ),
        RuleInfo(
            "coupling",
            "Coupled distributions out of step",
            "A distribution is in a [[coupling]] range but its partner is not in the range "
            "required with it.",
            Severity.ERROR,
        ),
        RuleInfo(
            "unmet-requirement",
            "Unmet requirement",
            "An installed distribution requires something the environment does not satisfy.",
            Severity.ERROR,
        ),
        RuleInfo(
            "file-collision",
            "Two distributions write the same file",
            "The RECORDs of two distributions in one environment claim the same path with "
            "different hashes, so install order decides which file wins.",
            Severity.WARNING,
        ),
        RuleInfo(
            "record-mismatch",
            "Installed file differs from its RECORD",
            "A file's content no longer matches the hash in its distribution's RECORD "
            "(runs only with --verify-records).",
            Severity.ERROR,
        ),
        RuleInfo(
            "duplicate-distribution",
            "Two dist-info directories of one name",
            "One environment holds two metadata directories for the same normalized name.",
            Severity.WARNING,
        ),
        RuleInfo(
            "native-duplicate",
            "One native library provided by two owners",
            "One soname is provided by files of two owners (a wheel and a deb, two wheels, or "
            "an unowned copy); which one a consumer loads depends on its search path.",
            Severity.WARNING,
        ),
        RuleInfo(
            "native-mismatch",
            "Native library disagrees with its owner",
            "A library's own version (its banner) differs from its owner's version, or its "
            "content no longer matches the hash in its wheel's RECORD.",
            Severity.ERROR,
        ),
        RuleInfo(
            "variant-change",
            "Build variant changed or mixed",
            "A step changed a distribution's local label or CUDA variant (+cu130 -> +cpu), "
            "or one environment mixes CUDA major versions (-cu12 and -cu13 wheels, +cu130).",
            Severity.ERROR,
        ),
        RuleInfo(
            "native-pin",
            "Native library outside a known-good pin",
            "The library a consumer loads for a soname (or, without a consumer, any provider "
            "of it) states a version outside a [[native-pin]], or states none.",
            Severity.ERROR,
        ),
        RuleInfo(
            "no-active-rules",
            "Nothing could fire",
            "Every rule of the policy is off, scoped to platforms, targets, environments or "
            "Pythons the image does not have, or waiting for entries none of which applies: "
            "the image was not judged (--policy none is the inventory without a policy).",
            Severity.ERROR,
            configurable=False,
        ),
        RuleInfo(
            "expired-waiver",
            "Expired waiver",
            "A waiver's expiry date has passed; it no longer waives anything.",
            Severity.ERROR,
            configurable=False,
        ),
    )
}

CONFIGURABLE_RULES = tuple(sorted(r for r, info in RULES.items() if info.configurable))


def _platform_matches(pattern: str, platform: Platform) -> bool:
    """``linux/arm64`` matches linux/arm64 and linux/arm64/v8; ``linux/arm64/v8`` only that.

    Parsed and matched by `pinguard.target`, so aliases count (``linux/aarch64`` is
    linux/arm64, ``linux/x86_64`` is linux/amd64). A malformed pattern (refused when the
    policy is loaded) matches nothing."""
    try:
        wanted = parse_platform(pattern)
    except InvalidPlatform:
        return False
    return platform_matches(wanted, platform)


@dataclass(frozen=True, slots=True)
class Scope:
    """Where a rule or entry applies; every given condition must hold (empty: any).

    ``environments`` are glob patterns over environment paths (``fnmatch``: ``*`` also
    crosses ``/``); ``platforms`` are ``os/arch[/variant]`` prefixes of the image platform
    (an image of unknown platform is treated as matching, so a gate fails closed);
    ``targets`` apply only when one of them is given with ``--target``; ``marker`` is a PEP 508
    marker evaluated against the environment's Python and the image platform.
    """

    environments: tuple[str, ...] = ()
    platforms: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    marker: Marker | None = None

    @property
    def empty(self) -> bool:
        return not (self.environments or self.platforms or self.targets or self.marker)

    def matches_run(self, platform: Platform | None, targets: Iterable[str]) -> bool:
        """The conditions that hold or fail for the whole image: platforms and targets."""
        if (
            self.platforms
            and platform is not None
            and not any(_platform_matches(p, platform) for p in self.platforms)
        ):
            return False
        return not (self.targets and not set(self.targets) & set(targets))

    def matches_environment(
        self, env_path: str | None, env: Environment | None, platform: Platform | None
    ) -> bool:
        """The conditions that depend on one environment: path globs and the marker."""
        if self.environments:
            if env_path is None:
                return False
            if not any(fnmatch.fnmatchcase(env_path, g) for g in self.environments):
                return False
        if self.marker is not None:
            values = marker_environment(env.python if env is not None else None, platform)
            return bool(self.marker.evaluate(values))
        return True


@dataclass(frozen=True, slots=True)
class RuleConfig:
    """How one rule runs: severity, on/off, scope, and the downgrade rule's package lists."""

    rule: str
    severity: Severity
    enabled: bool = True
    scope: Scope = Scope()
    # downgrade only: packages allowed to move backwards, and (if non-empty) the only ones checked
    allow: frozenset[NormalizedName] = frozenset()
    packages: frozenset[NormalizedName] = frozenset()
    origin: Origin = field(default=BUILTIN, compare=False)


@dataclass(frozen=True, slots=True)
class Pin:
    """A known-good range (or exact version) a package must stay within."""

    package: NormalizedName
    specifier: SpecifierSet
    reason: str = ""
    link: str = ""
    severity: Severity | None = None
    scope: Scope = Scope()
    origin: Origin = field(default=BUILTIN, compare=False)

    def exact(self, version: Version) -> bool:
        """True when this pin names exactly ``version`` (``==X`` without a wildcard)."""
        specs = list(self.specifier)
        if len(specs) != 1:
            return False
        spec = specs[0]
        if spec.operator == "===":
            return spec.version == str(version)
        if spec.operator != "==" or spec.version.endswith(".*"):
            return False
        return spec.contains(version, prereleases=True)


@dataclass(frozen=True, slots=True)
class Forbidden:
    """A known-bad version or range, with the reason and a link to the evidence."""

    package: NormalizedName
    specifier: SpecifierSet
    reason: str
    link: str = ""
    severity: Severity | None = None
    scope: Scope = Scope()
    origin: Origin = field(default=BUILTIN, compare=False)


@dataclass(frozen=True, slots=True)
class Coupling:
    """When ``package`` is in ``specifier``, ``requires`` must be in ``requires_specifier``."""

    package: NormalizedName
    specifier: SpecifierSet
    requires: NormalizedName
    requires_specifier: SpecifierSet
    reason: str = ""
    link: str = ""
    severity: Severity | None = None
    scope: Scope = Scope()
    origin: Origin = field(default=BUILTIN, compare=False)


@dataclass(frozen=True, slots=True)
class NativePin:
    """The version a native library must state, by soname, optionally as one consumer loads it.

    ``consumer`` is a glob over consumer paths (``*/torch/lib/libtorch_cuda.so``) or a
    distribution name owning the consumer (``torch``); empty: every provider of the soname.
    """

    soname: str
    specifier: SpecifierSet
    consumer: str = ""
    reason: str = ""
    link: str = ""
    severity: Severity | None = None
    scope: Scope = Scope()
    origin: Origin = field(default=BUILTIN, compare=False)


@dataclass(frozen=True, slots=True)
class Waiver:
    """Accept findings of one rule for one package until (and including) ``expires``."""

    package: NormalizedName
    rule: str
    reason: str
    expires: _dt.date
    environments: tuple[str, ...] = ()
    origin: Origin = field(default=BUILTIN, compare=False)

    def expired(self, today: _dt.date) -> bool:
        return today > self.expires

    def covers(self, rule: str, packages: Iterable[str], environment: str | None) -> bool:
        if rule != self.rule or self.package not in packages:
            return False
        if not self.environments:
            return True
        return environment is not None and any(
            fnmatch.fnmatchcase(environment, g) for g in self.environments
        )


def default_rules() -> tuple[RuleConfig, ...]:
    """One ``RuleConfig`` per configurable rule, at its catalogue default."""
    return tuple(
        RuleConfig(rule=r, severity=RULES[r].severity, enabled=RULES[r].enabled)
        for r in CONFIGURABLE_RULES
    )


@dataclass(frozen=True, slots=True)
class Policy:
    """A merged policy: one config per rule, and the entries of every file, in file order."""

    rules: tuple[RuleConfig, ...] = field(default_factory=default_rules)
    pins: tuple[Pin, ...] = ()
    forbidden: tuple[Forbidden, ...] = ()
    couplings: tuple[Coupling, ...] = ()
    waivers: tuple[Waiver, ...] = ()
    # every pip/uv install step must be followed by `pinguard guard` (lint rule missing-guard)
    require_guard: bool = False
    files: tuple[str, ...] = field(default=(), compare=False)
    native_pins: tuple[NativePin, ...] = ()
    # ``--policy none``: an inventory, judged by nothing on purpose (no no-active-rules notice)
    inventory: bool = False
    # "sha256:<hex>" of each file's bytes, parallel to ``files``
    digests: tuple[str, ...] = field(default=(), compare=False)
    # how the policy was chosen: "default", "discovered", "given" or "none" (load_run_policy)
    chosen: str = field(default="default", compare=False)

    @property
    def source(self) -> PolicySource:
        """Which policy this is, for the reports' headers."""
        return PolicySource(self.chosen, tuple(zip(self.files, self.digests, strict=True)))

    @property
    def pinned_packages(self) -> tuple[str, ...]:
        """The packages any pin names, sorted (rows the HTML timeline always shows)."""
        return tuple(sorted({str(p.package) for p in self.pins}))

    def rule(self, rule_id: str) -> RuleConfig:
        for cfg in self.rules:
            if cfg.rule == rule_id:
                return cfg
        info = RULES[rule_id]
        return RuleConfig(rule=rule_id, severity=info.severity, enabled=info.enabled)


def default_policy() -> Policy:
    """The policy used when no file is given (equal to ``policies/default.toml``)."""
    return Policy()


def inventory_policy() -> Policy:
    """``--policy none``: every rule off, no entries, and no notice that nothing could fire."""
    rules = tuple(dataclasses.replace(cfg, enabled=False) for cfg in default_rules())
    return Policy(rules=rules, inventory=True)
