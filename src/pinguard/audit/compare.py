"""Comparing audited states: two images (A -> B), or one image's platforms side by side.

Owns what a comparison means. For two images, environments are matched by path (one that
only one side has is compared against nothing, so all its distributions show as added or
removed and the match says which side lacks it); each difference gets the kind the audit
would give it (``diff.diff_environments``: same PEP 440 order, same cause chains, computed
in B's installed set), the step of B that made B's state (the last step that installed B's
version, or that removed A's), and the shared base: the longest common prefix of the two
layer stacks (by uncompressed digest where known), named once and not re-reported.
``Comparison.directional`` turns the comparison into an ``AuditResult`` of B whose steps
carry only the A -> B differences, so the policy judges the direction (a downgrade from A
to B is a ``downgrade`` finding; pins and forbidden versions apply to B). For platforms,
one row per package whose version differs between platforms. Pure: no I/O, sorted output.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.utils import NormalizedName

from pinguard.audit.diff import diff_environments, unmet_requirements
from pinguard.models import (
    AuditResult,
    Cause,
    Change,
    ChangeKind,
    Finding,
    Incomplete,
    Platform,
    Severity,
    Step,
)

COMPARE_SCHEMA_ID = "pinguard/compare/v1"


@dataclass(frozen=True, slots=True)
class SharedBase:
    """The leading layers both images have, byte for byte (0 layers: nothing shared)."""

    layers: int
    step_a: int | None  # history index of A's last step inside the shared base
    step_b: int | None  # the same for B
    last_layer: str | None  # digest of the last shared layer
    created_by: str = ""  # what B's last step inside the base ran

    def contains(self, step: int | None) -> bool:
        """Whether B's step ``step`` lies inside the shared base."""
        return step is not None and self.step_b is not None and step <= self.step_b


@dataclass(frozen=True, slots=True)
class EnvironmentMatch:
    """One environment path and which sides have it."""

    path: str
    in_a: bool
    in_b: bool

    @property
    def status(self) -> str:
        """``both``, ``only in A`` or ``only in B``."""
        if self.in_a and self.in_b:
            return "both"
        return "only in A" if self.in_a else "only in B"


@dataclass(frozen=True, slots=True)
class Difference:
    """One distribution that differs from A to B in one environment."""

    environment: str
    name: NormalizedName
    kind: ChangeKind
    a: str | None  # A's version (None: A does not have it)
    b: str | None  # B's version (None: B does not have it)
    step: int | None  # the step of B that made B's state (None: no step of B says)
    causes: tuple[Cause, ...] = ()  # the chain in B, nearest first


@dataclass(frozen=True, slots=True)
class Comparison:
    """Image A against image B; ``findings`` are the policy's, judged for A -> B."""

    a: AuditResult
    b: AuditResult
    base: SharedBase
    environments: tuple[EnvironmentMatch, ...]
    differences: tuple[Difference, ...]
    findings: tuple[Finding, ...] = ()

    @property
    def incomplete(self) -> tuple[Incomplete, ...]:
        """What could not be read on either side (A's first), without repeats."""
        out = dict.fromkeys((*self.a.incomplete, *self.b.incomplete))
        return tuple(out)

    def step_of(self, index: int | None) -> Step | None:
        """B's step with history index ``index``."""
        return next((s for s in self.b.steps if s.index == index), None)

    def directional(self) -> AuditResult:
        """B, with each step's changes replaced by the A -> B differences it made and its
        unmet requirements narrowed to those A does not have too: what the policy judges."""
        by_step: dict[int, list[Difference]] = {}
        for d in self.differences:
            if d.step is not None:
                by_step.setdefault(d.step, []).append(d)
        unmet_in_a = {
            (u.environment, u.package, u.requirement)
            for env in self.a.final.environments
            for u in unmet_requirements(env, self.a.image.platform, self.a.final.environments)
        }
        steps = []
        for step in self.b.steps:
            changes = tuple(
                Change(d.environment, d.name, d.kind, d.a, d.b, d.causes)
                for d in by_step.get(step.index, [])
            )
            unmet = tuple(
                u for u in step.unmet if (u.environment, u.package, u.requirement) not in unmet_in_a
            )
            steps.append(dataclasses.replace(step, changes=changes, unmet=unmet))
        return dataclasses.replace(
            self.b, steps=tuple(steps), findings=self.findings, incomplete=self.incomplete
        )

    def verdict(
        self,
        fail_on: Severity | None,
        allow_incomplete: bool = False,
        allow_no_python: bool = False,
        allow_unproven: bool = False,
    ) -> str:
        """``pass`` or ``fail``, as for an audit (what either side could not read fails, and
        so does a side without any Python environment unless ``allow_no_python``; a side
        read lazily makes a pass ``unproven``, or ``fail`` unless ``allow_unproven``)."""
        if self.a.no_python and not allow_no_python:
            return "fail"
        verdict = self.directional().verdict(
            fail_on, allow_incomplete, allow_no_python, allow_unproven
        )
        if verdict == "pass" and self.a.unproven:
            return "unproven" if allow_unproven else "fail"
        return verdict


def _layer_ids(result: AuditResult) -> list[tuple[str, Step]]:
    return [(s.diff_id or s.layer_digest or "", s) for s in result.steps if s.layer_digest]


def shared_base(a: AuditResult, b: AuditResult) -> SharedBase:
    """The longest common prefix of the layer stacks of ``a`` and ``b`` (a directory on
    disk has no layers to share: its one pseudo-layer is named after the transport)."""
    if "dir" in {a.image.transport, b.image.transport}:
        return SharedBase(0, None, None, None)
    la, lb = _layer_ids(a), _layer_ids(b)
    n = 0
    while n < len(la) and n < len(lb) and la[n][0] == lb[n][0]:
        n += 1
    if n == 0:
        return SharedBase(0, None, None, None)
    step_a, step_b = la[n - 1][1], lb[n - 1][1]
    return SharedBase(n, step_a.index, step_b.index, la[n - 1][0], step_b.created_by)


def _installed_by(result: AuditResult) -> dict[tuple[str, str, str | None], int]:
    """(environment, name, version or None for a removal) -> last step that did it."""
    index: dict[tuple[str, str, str | None], int] = {}
    for step in result.steps:
        for change in step.changes:
            if change.kind is ChangeKind.REMOVED:
                index[(change.environment, change.name, None)] = step.index
            elif change.after is not None:
                index[(change.environment, change.name, change.after)] = step.index
    return index


def _step_causes(result: AuditResult, step: int | None, env: str, name: str) -> tuple[Cause, ...]:
    for s in result.steps:
        if s.index == step:
            for change in s.changes:
                if change.environment == env and change.name == name:
                    return change.causes
    return ()


def compare_images(a: AuditResult, b: AuditResult) -> Comparison:
    """What B changes against A, per environment, with B's steps and causes."""
    paths_a = {e.path for e in a.final.environments}
    paths_b = {e.path for e in b.final.environments}
    matches = tuple(
        EnvironmentMatch(p, p in paths_a, p in paths_b) for p in sorted(paths_a | paths_b)
    )
    installed_by = _installed_by(b)
    differences: list[Difference] = []
    for match in matches:
        env_a = a.final.environment(match.path)
        env_b = b.final.environment(match.path)
        changes, _unmet = diff_environments(env_a, env_b, platform=b.image.platform)
        for c in changes:
            step = installed_by.get((match.path, c.name, c.after))
            causes = c.causes or _step_causes(b, step, match.path, c.name)
            differences.append(
                Difference(match.path, c.name, c.kind, c.before, c.after, step, causes)
            )
    differences.sort(key=lambda d: (d.environment, d.name))
    return Comparison(a, b, shared_base(a, b), matches, tuple(differences))


@dataclass(frozen=True, slots=True)
class PlatformRow:
    """One package whose version differs between platforms; columns follow ``platforms``."""

    environment: str
    name: NormalizedName
    versions: tuple[str | None, ...]
    steps: tuple[int | None, ...]  # the step of each platform's image that installed it


@dataclass(frozen=True, slots=True)
class PlatformComparison:
    """One reference, one audited (and judged) result per platform."""

    reference: str
    platforms: tuple[Platform, ...]
    results: tuple[AuditResult, ...]
    rows: tuple[PlatformRow, ...]

    @property
    def findings(self) -> tuple[tuple[Platform, Finding], ...]:
        return tuple(
            (p, f) for p, r in zip(self.platforms, self.results, strict=True) for f in r.findings
        )

    @property
    def incomplete(self) -> tuple[Incomplete, ...]:
        return tuple(dict.fromkeys(i for r in self.results for i in r.incomplete))

    def verdict(
        self,
        fail_on: Severity | None,
        allow_incomplete: bool = False,
        allow_no_python: bool = False,
        allow_unproven: bool = False,
    ) -> str:
        """``fail`` when any platform fails, else ``unproven`` when any is."""
        verdicts = {
            r.verdict(fail_on, allow_incomplete, allow_no_python, allow_unproven)
            for r in self.results
        }
        return next((v for v in ("fail", "unproven") if v in verdicts), "pass")


def compare_platforms(
    reference: str, platforms: Sequence[Platform], results: Sequence[AuditResult]
) -> PlatformComparison:
    """Rows for every (environment, package) whose version is not the same everywhere."""
    if len(platforms) != len(results):
        raise ValueError(f"{len(platforms)} platforms but {len(results)} results")
    keys: set[tuple[str, NormalizedName]] = set()
    tables = []
    for result in results:
        table = {
            (env.path, name): dist.raw_version
            for env in result.final.environments
            for name, dist in env.by_name().items()
        }
        keys.update(table)
        tables.append((table, _installed_by(result)))
    rows = []
    for env, name in sorted(keys):
        versions = tuple(t.get((env, name)) for t, _ in tables)
        if len(set(versions)) == 1:
            continue
        steps = tuple(
            by.get((env, name, v)) if v else None
            for (_, by), v in zip(tables, versions, strict=True)
        )
        rows.append(PlatformRow(env, name, versions, steps))
    return PlatformComparison(reference, tuple(platforms), tuple(results), tuple(rows))
