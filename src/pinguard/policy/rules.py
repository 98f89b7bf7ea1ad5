"""The rules: each a small function from audit facts (and policy entries) to hits.

A rule function reads an ``AuditResult`` through ``Facts`` (which adds a platform, the
``--target`` values and an index telling which step installed each version) and yields
``Hit``s: what was found, where, and which packages are involved. Rules know nothing of
severity defaults, rule-level scope or waivers; ``engine.evaluate`` applies those and turns
hits into ``Finding``s. Entry-level scope (a ``[[pin]]`` limited to ``linux/arm64``, say) is
checked here, because only the rule knows which entry produced a hit.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from pinguard.models import (
    AuditResult,
    ChangeKind,
    Distribution,
    Environment,
    Package,
    Platform,
    Severity,
)
from pinguard.policy.model import Coupling, Forbidden, Origin, Pin, RuleConfig, Scope

_SHOWN_PATHS = 3


@dataclass(frozen=True, slots=True)
class Hit:
    """One thing a rule found, before severity, scope and waivers are applied."""

    rule: str
    message: str
    package: str | None = None
    environment: str | None = None
    step: int | None = None
    versions: tuple[str, ...] = ()
    packages: frozenset[str] = frozenset()  # every package a waiver may name to cover this
    severity: Severity | None = None  # an entry's own severity, overriding the rule's
    origin: Origin | None = None  # the entry that produced it; None: the rule's table


def _dist_hit(
    rule: str,
    message: str,
    facts: Facts,
    env: Environment,
    dist: Distribution,
    severity: Severity | None = None,
    origin: Origin | None = None,
) -> Hit:
    """A hit about one installed distribution: its name, environment, step and version."""
    return Hit(
        rule,
        message,
        dist.name,
        env.path,
        facts.step_of(env.path, dist),
        (dist.raw_version,),
        frozenset({dist.name}),
        severity,
        origin,
    )


@dataclass(frozen=True, slots=True)
class Facts:
    """The audit result plus what rules need to judge it."""

    result: AuditResult
    targets: tuple[str, ...] = ()
    # (environment, name, raw version) -> index of the last step that installed it
    installed_by: Mapping[tuple[str, str, str], int] = field(default_factory=dict)

    @classmethod
    def of(cls, result: AuditResult, targets: Iterable[str] = ()) -> Facts:
        index: dict[tuple[str, str, str], int] = {}
        for step in result.steps:
            for change in step.changes:
                if change.after is not None and change.kind is not ChangeKind.REMOVED:
                    index[(change.environment, change.name, change.after)] = step.index
        return cls(result, tuple(targets), index)

    @property
    def platform(self) -> Platform | None:
        return self.result.image.platform

    @property
    def environments(self) -> tuple[Environment, ...]:
        return self.result.final.environments

    @property
    def packages(self) -> tuple[Package, ...]:
        """The final state's generic package records that no typed rule judges (conda, ...;
        ``Snapshot.other_packages``), whatever their kind."""
        return self.result.final.other_packages()

    def environment(self, path: str | None) -> Environment | None:
        return None if path is None else self.result.final.environment(path)

    def step_of(self, env: str, *dists: Distribution) -> int | None:
        """The step that installed the latest of ``dists`` (None when no step says)."""
        steps = [self.installed_by.get((env, d.name, d.raw_version)) for d in dists]
        known = [s for s in steps if s is not None]
        return max(known) if known else None

    def in_scope(self, scope: Scope, env: Environment) -> bool:
        return scope.matches_run(self.platform, self.targets) and scope.matches_environment(
            env.path, env, self.platform
        )


def _why(reason: str, link: str) -> str:
    parts = [p for p in (reason, link) if p]
    return f" ({'; '.join(parts)})" if parts else ""


def pin_violation(facts: Facts, pins: Iterable[Pin]) -> Iterator[Hit]:
    """Installed versions outside a pin; a version that is not PEP 440 cannot satisfy one.

    A pin (for this run's platform and targets) that covers at least one environment, or an
    image without environments, but names no distribution installed in those is a warning,
    "pin matches nothing": a misspelt or stale pin guards nothing, and silence would read
    as "within the pin"."""
    pins = tuple(pins)
    for pin in pins:
        if not pin.scope.matches_run(facts.platform, facts.targets):
            continue
        covered = [env for env in facts.environments if facts.in_scope(pin.scope, env)]
        if facts.environments and not covered:
            continue  # scoped to environments (or Pythons) this image does not have
        if any(d.name == pin.package for env in covered for d in env.distributions):
            continue
        where = "any environment" if facts.environments else "the image (no environments found)"
        yield Hit(
            "pin-violation",
            f"pin matches nothing: no distribution named {pin.package} is installed in "
            f"{where} the pin {pin.package}{pin.specifier} covers",
            pin.package,
            None,
            None,
            (),
            frozenset({pin.package}),
            Severity.WARNING,
            pin.origin,
        )
    for env in facts.environments:
        for dist in env.distributions:
            for pin in pins:
                if pin.package != dist.name or not facts.in_scope(pin.scope, env):
                    continue
                version = dist.version
                if version is not None and pin.specifier.contains(version, prereleases=True):
                    continue
                what = "is not a PEP 440 version, so it cannot" if version is None else "does not"
                yield _dist_hit(
                    "pin-violation",
                    f"{dist.name} {dist.raw_version} {what} satisfy the pin "
                    f"{dist.name}{pin.specifier}{_why(pin.reason, pin.link)}",
                    facts,
                    env,
                    dist,
                    pin.severity,
                    pin.origin,
                )


def forbidden_version(facts: Facts, forbidden: Iterable[Forbidden]) -> Iterator[Hit]:
    """Installed versions that a ``[[forbidden]]`` entry names."""
    forbidden = tuple(forbidden)
    for env in facts.environments:
        for dist in env.distributions:
            version = dist.version
            if version is None:
                continue
            for entry in forbidden:
                if entry.package != dist.name or not facts.in_scope(entry.scope, env):
                    continue
                if not entry.specifier.contains(version, prereleases=True):
                    continue
                yield _dist_hit(
                    "forbidden-version",
                    f"{dist.name} {dist.raw_version} is forbidden ({dist.name}{entry.specifier}): "
                    f"{entry.reason}" + (f" (see {entry.link})" if entry.link else ""),
                    facts,
                    env,
                    dist,
                    entry.severity,
                    entry.origin,
                )
    for package in facts.packages:  # generic records: the owner stands for the environment
        try:
            pv = Version(package.version)
        except InvalidVersion:
            continue
        for entry in forbidden:
            if entry.package != canonicalize_name(package.name):
                continue
            if not entry.scope.matches_run(facts.platform, facts.targets):
                continue
            if not entry.scope.matches_environment(package.owner, None, facts.platform):
                continue
            if not entry.specifier.contains(pv, prereleases=True):
                continue
            yield Hit(
                "forbidden-version",
                f"{package.kind} package {package.name} {package.version} is forbidden "
                f"({entry.package}{entry.specifier}): {entry.reason}"
                + (f" (see {entry.link})" if entry.link else ""),
                package.name,
                package.owner,
                None,
                (package.version,),
                frozenset({package.name}),
                entry.severity,
                entry.origin,
            )


def downgrade(facts: Facts, config: RuleConfig) -> Iterator[Hit]:
    """Every change a step made that moved a distribution to an older version."""
    for step in facts.result.steps:
        for change in step.changes:
            if change.kind not in {ChangeKind.DOWNGRADED, ChangeKind.CHANGED}:
                continue
            if change.name in config.allow:
                continue
            if config.packages and change.name not in config.packages:
                continue
            if change.kind is ChangeKind.CHANGED:
                # fail closed: a legacy version's order is unknown, so this may be a downgrade
                yield Hit(
                    "downgrade",
                    f"step {step.index} changed {change.name} from {change.before} to "
                    f"{change.after}; one of them is not a PEP 440 version, so whether this "
                    "is a downgrade is unknown",
                    change.name,
                    change.environment,
                    step.index,
                    tuple(v for v in (change.before, change.after) if v is not None),
                    frozenset({change.name}),
                )
                continue
            causes = " / ".join(
                f"{c.package} {c.version} requires {c.requirement}" for c in change.causes
            )
            yield Hit(
                "downgrade",
                f"step {step.index} moved {change.name} back from {change.before} to "
                f"{change.after}" + (f" ({causes})" if causes else ""),
                change.name,
                change.environment,
                step.index,
                tuple(v for v in (change.before, change.after) if v is not None),
                frozenset({change.name, *(c.package for c in change.causes)}),
            )


def unpinned_prerelease(facts: Facts, pins: Iterable[Pin]) -> Iterator[Hit]:
    """Pre-release and dev (nightly) versions that no in-scope pin names exactly."""
    pins = tuple(pins)
    for env in facts.environments:
        for dist in env.distributions:
            version = dist.version
            if version is None or not version.is_prerelease:
                continue
            if any(
                p.package == dist.name and facts.in_scope(p.scope, env) and p.exact(version)
                for p in pins
            ):
                continue
            kind = "nightly (dev release)" if version.is_devrelease else "pre-release"
            yield _dist_hit(
                "unpinned-prerelease",
                f"{dist.name} {dist.raw_version} is a {kind} and no pin names that exact version",
                facts,
                env,
                dist,
            )


def coupling(facts: Facts, couplings: Iterable[Coupling]) -> Iterator[Hit]:
    """Partners of a coupling that are missing or outside their range while A is in its."""
    couplings = tuple(couplings)
    for env in facts.environments:
        names = env.by_name()
        for entry in couplings:
            a = names.get(entry.package)
            if a is None or a.version is None or not facts.in_scope(entry.scope, env):
                continue
            if not entry.specifier.contains(a.version, prereleases=True):
                continue
            b = names.get(entry.requires)
            if (
                b is not None
                and b.version is not None
                and entry.requires_specifier.contains(b.version, prereleases=True)
            ):
                continue
            have = "is not installed" if b is None else f"is {b.raw_version}"
            yield Hit(
                "coupling",
                f"{a.name} {a.raw_version} (in {entry.specifier}) needs "
                f"{entry.requires}{entry.requires_specifier}, but {entry.requires} {have}"
                + _why(entry.reason, entry.link),
                entry.requires,
                env.path,
                facts.step_of(env.path, a, *((b,) if b is not None else ())),
                (a.raw_version, *((b.raw_version,) if b is not None else ())),
                frozenset({a.name, entry.requires}),
                entry.severity,
                entry.origin,
            )


def _still_unmet(
    names: Mapping[NormalizedName, Distribution] | None,
    package: str,
    version: str,
    requirement: str,
    installed: str | None,
) -> bool:
    """Whether an unmet requirement seen after some step still holds in the final state
    (``names``: the final environment by name, None when it is gone)."""
    if names is None:
        return False
    requirer = names.get(canonicalize_name(package))
    if requirer is None or requirer.raw_version != version:
        return False
    try:
        req = Requirement(requirement)
    except InvalidRequirement:
        return True  # cannot tell: keep it
    target = names.get(canonicalize_name(req.name))
    now = target.raw_version if target is not None else None
    if now == installed:
        return True  # nothing changed since the audit judged it unmet
    if target is None or target.version is None:
        return True
    return not req.specifier.contains(target.version, prereleases=True)


def unmet_requirement(facts: Facts) -> Iterator[Hit]:
    """Requirements that some step left unmet and that are still unmet at the end."""
    first: dict[tuple[str, str, str, str], int] = {}
    latest: dict[tuple[str, str, str, str], str | None] = {}
    for step in facts.result.steps:
        for u in step.unmet:
            seen: tuple[str, str, str, str] = (u.environment, u.package, u.version, u.requirement)
            first.setdefault(seen, step.index)
            latest[seen] = u.installed
    by_env: dict[str, dict[NormalizedName, Distribution] | None] = {}
    for key, step_index in first.items():
        env_path, package, version, requirement = key
        installed = latest[key]
        if env_path not in by_env:  # once per environment, not once per requirement
            env = facts.environment(env_path)
            by_env[env_path] = env.by_name() if env is not None else None
        found = by_env[env_path]
        if not _still_unmet(found, package, version, requirement, installed):
            continue
        try:
            required: str = canonicalize_name(Requirement(requirement).name)
        except InvalidRequirement:
            required = package
        names = found if found is not None else {}
        now = names.get(NormalizedName(required))
        have = "it is not installed" if now is None else f"{now.raw_version} is installed"
        yield Hit(
            "unmet-requirement",
            f"{package} {version} requires {requirement}, but {have}",
            required,
            env_path,
            step_index,
            tuple(v for v in (version, None if now is None else now.raw_version) if v),
            frozenset({package, required}),
        )


def _split(digest: str) -> tuple[str, str]:
    algo, _, value = digest.partition("=")
    return algo.lower(), value.rstrip("=")


def file_collision(facts: Facts) -> Iterator[Hit]:
    """Pairs of distributions in one environment whose RECORDs give one path two hashes."""
    for env in facts.environments:
        rows = sum(len(dist.record) for dist in env.distributions)
        if len(dict(chain.from_iterable(d.record for d in env.distributions))) == rows:
            continue  # no path named twice (the common case, read at C speed: 5x faster)
        # One dict entry per path; a list only for the rare paths claimed twice.
        owner: dict[str, tuple[Distribution, str]] = {}
        claims: dict[str, list[tuple[Distribution, str]]] = {}
        for dist in env.distributions:
            for path, digest in dist.record:
                if digest:
                    claim = (dist, digest)
                    prev = owner.setdefault(path, claim)
                    if prev is not claim:
                        claims.setdefault(path, [prev]).append(claim)
        pairs: dict[tuple[str, str], list[str]] = defaultdict(list)
        dists: dict[str, Distribution] = {}
        for path, owners in claims.items():
            for i, (a, ha) in enumerate(owners):
                for b, hb in owners[i + 1 :]:
                    if a.name == b.name or _split(ha) == _split(hb):
                        continue  # same name: duplicate-distribution's business
                    first, second = sorted((a, b), key=lambda d: (d.name, d.metadata_path))
                    dists[first.metadata_path], dists[second.metadata_path] = first, second
                    pairs[(first.metadata_path, second.metadata_path)].append(path)
        for (pa, pb), claimed in sorted(pairs.items()):
            a, b = dists[pa], dists[pb]
            paths = sorted(claimed)
            shown = ", ".join(paths[:_SHOWN_PATHS])
            more = f" and {len(paths) - _SHOWN_PATHS} more" if len(paths) > _SHOWN_PATHS else ""
            yield Hit(
                "file-collision",
                f"{a.name} {a.raw_version} and {b.name} {b.raw_version} both install "
                f"{len(paths)} file(s) with different content: {shown}{more}; install order "
                f"decides which one wins",
                a.name,
                env.path,
                facts.step_of(env.path, a, b),
                (a.raw_version, b.raw_version),
                frozenset({a.name, b.name}),
            )


def _in_metadata_dir(path: str) -> bool:
    """Files of a .dist-info/.egg-info directory are read by the catalog, never hashed."""
    return any(part.endswith((".dist-info", ".egg-info")) for part in path.split("/")[:-1])


def record_mismatch(facts: Facts, file_digests: Mapping[str, str]) -> Iterator[Hit]:
    """Files whose actual digest differs from their RECORD, or that are gone.

    ``file_digests`` maps absolute file paths (the final state of the image) to
    ``"sha256=<urlsafe base64, no padding>"``, as the audit computes them with
    ``--verify-records``. A RECORD path inside its environment that has no digest is
    reported missing, except the metadata directory's own files (the catalog reads those
    instead of hashing them); one outside it (a script in ``/usr/local/bin``, say) is checked
    only when a digest is given. RECORD hashes of another algorithm are skipped.
    """
    actual = file_digests
    for env in facts.environments:
        inside = env.path.rstrip("/") + "/"
        for dist in env.distributions:
            changed: list[str] = []
            missing: list[str] = []
            for path, digest in dist.record:
                if not digest:
                    continue
                have = actual.get(path)
                if have is None:
                    if path.startswith(inside) and not _in_metadata_dir(path):
                        missing.append(path)
                    continue
                want_algo, want = _split(digest)
                have_algo, got = _split(have)
                if want_algo == have_algo and want != got:
                    changed.append(path)
            if not changed and not missing:
                continue
            parts = [
                _some_paths(label, paths)
                for label, paths in (("changed", changed), ("missing", missing))
                if paths
            ]
            yield _dist_hit(
                "record-mismatch",
                f"{dist.name} {dist.raw_version}: files differ from RECORD: {'; '.join(parts)}",
                facts,
                env,
                dist,
            )


def _some_paths(label: str, paths: list[str]) -> str:
    """``3 changed (a, b, ...)``: how many paths, the first few of them sorted."""
    return (
        f"{len(paths)} {label} ({', '.join(sorted(paths)[:_SHOWN_PATHS])}"
        + (", ..." if len(paths) > _SHOWN_PATHS else "")
        + ")"
    )


def duplicate_distribution(facts: Facts) -> Iterator[Hit]:
    """Names with more than one metadata directory in one environment."""
    for env in facts.environments:
        groups: dict[str, list[Distribution]] = defaultdict(list)
        for dist in env.distributions:
            groups[dist.name].append(dist)
        for name, dists in sorted(groups.items()):
            if len(dists) < 2:
                continue
            dists.sort(key=lambda d: d.metadata_path)
            yield Hit(
                "duplicate-distribution",
                f"{name} is installed {len(dists)} times: "
                + ", ".join(f"{d.raw_version} ({d.metadata_path})" for d in dists),
                name,
                env.path,
                facts.step_of(env.path, *dists),
                tuple(d.raw_version for d in dists),
                frozenset({name}),
            )
