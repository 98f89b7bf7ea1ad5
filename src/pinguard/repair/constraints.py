"""Constraints files from a known-good state: pip text, uv pyproject tables, and their check.

:func:`build_constraints` takes an audit result and picks the known-good state (by default the
state just before the first step that broke the policy, or just before a step the caller
names), chooses the environment that step changed, and pins the *whole* known-good set there
(``name==version``, no extras, local labels such as ``+cu130`` kept, ``===`` for versions that
are not PEP 440), merged with the policy's pins. :func:`render_pip` writes the pip constraints
file (usable as ``pip install -c``, ``PIP_CONSTRAINT`` and ``--build-constraint``) with a header
naming the image digest, the step and the policy; :func:`update_pyproject` writes
``[tool.uv] constraint-dependencies`` (or ``override-dependencies``) into an existing
pyproject.toml with tomlkit, keeping its comments and layout; checking a constraints file
against the policy is `pinguard.repair.check`'s.
Outputs are sorted and carry no timestamps, so two runs give identical bytes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions
from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from pinguard.buildfile.history import strip_build_args
from pinguard.errors import ConfigError, UsageError
from pinguard.fileio import atomic_write
from pinguard.models import (
    AuditResult,
    ChangeKind,
    Environment,
    Severity,
    Snapshot,
    Step,
)

# Files `constraints check` passes over (a constraints/ folder's README, say).
NOT_CONSTRAINTS = (".md", ".rst")
UV_KEYS = {False: "constraint-dependencies", True: "override-dependencies"}
# The installer's own packages, left out unless asked (pip-compile's --allow-unsafe): an image's
# seeded pip or setuptools is rarely on the index the steps use, and pinning it there makes
# every step unsatisfiable.
UNSAFE = frozenset({canonicalize_name(n) for n in ("pip", "setuptools", "wheel")})


@dataclass(frozen=True, slots=True)
class Constraint:
    """One constraint line: ``name`` and its specifier, and where it came from."""

    name: NormalizedName
    specifier: str  # "==2.30.3", "===weird-1", or a policy range such as ">=2.30,<2.31"
    source: str  # "image", "policy" or "image+policy"
    note: str = ""

    @property
    def line(self) -> str:
        return f"{self.name}{self.specifier}"


@dataclass(frozen=True, slots=True)
class ConstraintSet:
    """A complete constraints file's content and its provenance."""

    entries: tuple[Constraint, ...]
    environment: str
    image_reference: str = ""
    image_digest: str | None = None
    known_good_after: int | None = None  # step index whose state is pinned (None: base, empty)
    bad_step: Step | None = None  # the step these constraints are meant to stop
    reason: str = ""  # why that step was chosen
    policy: tuple[str, ...] = ()  # policy files ("built-in default" when none)
    left_out: tuple[str, ...] = ()  # "pip==23.0.1", ...: installer packages not pinned

    def lines(self) -> list[str]:
        return [c.line for c in self.entries]

    def mapping(self) -> dict[NormalizedName, SpecifierSet]:
        return {c.name: SpecifierSet(c.specifier) for c in self.entries}


# --------------------------------------------------------------------------- choosing the state


def breaking_step(
    result: AuditResult, *, fail_on: Severity = Severity.ERROR
) -> tuple[Step | None, str]:
    """The first step that broke the policy, and why it was chosen.

    Unwaived findings at or above ``fail_on`` decide; without any, the first step that
    downgraded or removed a distribution, changed one whose versions cannot be ordered (not
    PEP 440: it may be a downgrade), or left a requirement unmet, is taken instead.
    """
    by_index = {s.index: s for s in result.steps}
    bad = sorted(
        f.step
        for f in result.findings
        if f.step is not None and not f.waived and f.severity.rank >= fail_on.rank
    )
    for index in bad:
        if index in by_index:
            return by_index[index], f"the first step with {fail_on.value} findings"
    for step in result.steps:
        if step.unmet or any(
            c.kind in {ChangeKind.DOWNGRADED, ChangeKind.REMOVED, ChangeKind.CHANGED}
            for c in step.changes
        ):
            return step, "the first step that downgraded, removed or left a requirement unmet"
    return None, "no step broke the policy: the final state is pinned"


def state_before(result: AuditResult, step: Step | None) -> tuple[int | None, Snapshot]:
    """The snapshot just before ``step`` (the final one when ``step`` is None)."""
    if step is None:
        last = result.steps[-1].index if result.steps else None
        return last, result.final
    positions = [i for i, s in enumerate(result.steps) if s.index == step.index]
    if not positions:
        raise UsageError(f"the image has no step {step.index}")
    pos = positions[0]
    if pos == 0:
        return None, Snapshot()
    if len(result.snapshots) != len(result.steps):
        raise UsageError("the audit result holds no per-step states; cannot go back a step")
    return result.steps[pos - 1].index, result.snapshots[pos - 1]


def choose_environment(
    snapshot: Snapshot, bad_step: Step | None, wanted: str | None = None
) -> Environment:
    """``wanted`` when given; else the one the bad step changed; else the largest."""
    if wanted is not None:
        env = snapshot.environment(wanted)
        if env is None:
            known = ", ".join(sorted(e.path for e in snapshot.environments)) or "none"
            raise UsageError(f"no environment {wanted!r} in that state (known: {known})")
        return env
    if bad_step is not None:
        for path in [c.environment for c in bad_step.changes] + [
            u.environment for u in bad_step.unmet
        ]:
            env = snapshot.environment(path)
            if env is not None:
                return env
    if not snapshot.environments:
        first = bad_step.changes[0].environment if bad_step is not None and bad_step.changes else ""
        return Environment(path=first, python=None)
    return max(snapshot.environments, key=lambda e: (len(e.distributions), e.path))


# --------------------------------------------------------------------------- building


def _exact(raw_version: str) -> str:
    try:
        Version(raw_version)
    except InvalidVersion:
        return f"==={raw_version}"
    return f"=={raw_version}"


def _contains(spec: SpecifierSet, raw_version: str) -> bool:
    try:
        return spec.contains(Version(raw_version), prereleases=True)
    except InvalidVersion:
        return False


def merge_pins(
    env: Environment,
    pins: Mapping[NormalizedName, SpecifierSet],
    *,
    allow_unsafe: bool = False,
) -> tuple[Constraint, ...]:
    """The environment's whole set as exact pins, merged with the policy's pins, sorted.

    pip, setuptools and wheel of the image are left out unless ``allow_unsafe``; a policy pin
    on one of them is kept (the policy asked for it)."""
    out: dict[NormalizedName, Constraint] = {}
    for dist in env.distributions:
        if dist.name in UNSAFE and not allow_unsafe:
            continue
        if not dist.raw_version:  # an egg-info without Version (incomplete): nothing to pin
            continue
        out[dist.name] = Constraint(dist.name, _exact(dist.raw_version), "image")
    for raw_name, spec in pins.items():
        name = canonicalize_name(raw_name)
        if name in UNSAFE and name not in out:
            installed = next((d for d in env.distributions if d.name == name), None)
            if installed is not None:
                out[name] = Constraint(name, _exact(installed.raw_version), "image")
        have = out.get(name)
        if have is None:
            out[name] = Constraint(
                name, str(spec), "policy", "not installed in the known-good state"
            )
        elif _contains(spec, have.specifier.lstrip("=")):
            out[name] = Constraint(name, have.specifier, "image+policy")
        else:
            out[name] = Constraint(
                name,
                str(spec),
                "policy",
                f"the known-good state had {have.specifier.lstrip('=')}, outside the policy pin",
            )
    return tuple(out[n] for n in sorted(out))


def build_constraints(
    result: AuditResult,
    *,
    pins: Mapping[NormalizedName, SpecifierSet] | None = None,
    step: int | None = None,
    environment: str | None = None,
    policy_files: Sequence[str] = (),
    fail_on: Severity = Severity.ERROR,
    allow_unsafe: bool = False,
) -> ConstraintSet:
    """Constraints pinning the known-good state of ``result`` (see the module docstring).

    ``step`` names the bad step explicitly (its 1-based history index); the state just
    before it is pinned.
    """
    if step is not None:
        chosen = next((s for s in result.steps if s.index == step), None)
        if chosen is None:
            raise UsageError(f"the image has no step {step} (it has 1..{len(result.steps)})")
        bad: Step | None = chosen
        reason = "the step given with --step"
    else:
        bad, reason = breaking_step(result, fail_on=fail_on)
    after, snapshot = state_before(result, bad)
    env = choose_environment(snapshot, bad, environment)
    entries = merge_pins(env, pins or {}, allow_unsafe=allow_unsafe)
    kept = {c.name for c in entries}
    left_out = tuple(
        sorted(
            f"{d.name}{_exact(d.raw_version)}"
            for d in env.distributions
            if d.name in UNSAFE and d.name not in kept
        )
    )
    return ConstraintSet(
        entries=entries,
        left_out=left_out,
        environment=env.path,
        image_reference=result.image.reference,
        image_digest=result.image.manifest_digest,
        known_good_after=after,
        bad_step=bad,
        reason=reason,
        policy=tuple(policy_files) or ("built-in default",),
    )


# --------------------------------------------------------------------------- rendering


def _short(command: str, width: int = 90) -> str:
    # Without buildah/docker's "|N ARG=value ..." prefix: the build args would fill the line.
    text = strip_build_args(command)
    return text if len(text) <= width else text[: width - 3] + "..."


def header(cs: ConstraintSet) -> list[str]:
    """The comment lines that say where a constraints file came from."""
    lines = ["pinguard constraints: the whole known-good set, so a bad step fails loudly"]
    lines.append(f"image: {cs.image_reference or '?'}")
    lines.append(f"digest: {cs.image_digest or 'unknown'}")
    lines.append(f"environment: {cs.environment or '?'}")
    if cs.bad_step is not None:
        state = (
            f"after step {cs.known_good_after}"
            if cs.known_good_after is not None
            else "base (empty)"
        )
        lines.append(f"state: {state}, just before step {cs.bad_step.index} ({cs.reason})")
        lines.append(f"step {cs.bad_step.index}: {_short(cs.bad_step.created_by)}")
    else:
        lines.append(f"state: final ({cs.reason})")
    lines.append(f"policy: {', '.join(cs.policy)}")
    if cs.left_out:
        lines.append(
            f"left out (installer packages; --allow-unsafe pins them): {', '.join(cs.left_out)}"
        )
    lines.append(
        "use: pip install -c FILE | PIP_CONSTRAINT=FILE | pip install --build-constraint FILE"
    )
    return lines


def render_pip(cs: ConstraintSet) -> str:
    """A pip constraints file: header comments, then one sorted ``name==version`` a line."""
    out = [f"# {h}" for h in header(cs)]
    out.append("")
    for c in cs.entries:
        out.append(f"{c.line}  # {c.source}: {c.note}" if c.note else c.line)
    return "\n".join(out) + "\n"


def _is_table(value: Any) -> bool:
    return isinstance(value, dict)


def update_pyproject(text: str, cs: ConstraintSet, *, override: bool = False) -> str:
    """``text`` (a pyproject.toml) with ``[tool.uv]`` constraint (or override) dependencies
    set to the set's lines; everything else, comments included, is kept as it was."""
    try:
        doc = tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        raise ConfigError(f"pyproject.toml is not valid TOML: {exc}") from exc
    tool: Any = doc.get("tool")
    if tool is None:
        tool = tomlkit.table(is_super_table=True)
        doc.add("tool", tool)
    if not _is_table(tool):
        raise ConfigError("pyproject.toml: 'tool' is not a table")
    uv: Any = tool.get("uv")
    if uv is None:
        uv = tomlkit.table()
        tool.add("uv", uv)
    if not _is_table(uv):
        raise ConfigError("pyproject.toml: 'tool.uv' is not a table")
    array = tomlkit.array()
    array.multiline(True)
    for line in cs.lines():
        array.append(line)
    key = UV_KEYS[override]
    digest = cs.image_digest or "unknown digest"
    comment = f"pinguard: known-good set of {cs.image_reference or 'the image'} ({digest})"
    if key in uv:
        uv[key] = array
    else:
        uv.add(tomlkit.comment(comment))
        uv.add(key, array)
    return tomlkit.dumps(doc)


def write_pyproject(
    path: str | os.PathLike[str], cs: ConstraintSet, *, override: bool = False
) -> str:
    """Update an existing pyproject.toml in place (atomically); return the new text."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise UsageError(f"no pyproject.toml at {str(p)!r}") from exc
    new = update_pyproject(text, cs, override=override)
    atomic_write(p, new)
    return new
