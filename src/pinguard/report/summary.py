"""The summary every human-facing report leads with, and which changes the details list.

``header`` is what the first lines of every format state besides the image: pinguard's
version, the policy that judged the image (its source and each file's digest) and the
platform. ``summarize`` counts, per environment, the changes of each kind and the unmet
requirements; the unwaived findings per severity; and, per step that changed something, its
counts, as trivy leads with its summary table. ``listed`` decides what the details show by
default: every change except the distributions a step added to an environment that did not
exist before it (a base image's or a root filesystem's whole inventory, which the summary
counts), unless a finding names the package or a requirement on it is unmet in that step;
``RenderOptions.all`` (``--all``) lists everything. ``verdict_reasons`` says why a verdict
is what it is (entries that could not be read, no Python environment, findings at or above
``--fail-on``, and what an ``--allow-*`` let pass), so every format can put the reason beside
the verdict rather than leave it at the bottom. Pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pinguard import __version__
from pinguard.models import AuditResult, Change, ChangeKind, Finding, Severity, Step
from pinguard.report.options import RenderOptions
from pinguard.report.why import command_text

# the order the summary's columns and counts use
KINDS = (
    ChangeKind.ADDED,
    ChangeKind.UPGRADED,
    ChangeKind.DOWNGRADED,
    ChangeKind.REMOVED,
    ChangeKind.REINSTALLED,
    ChangeKind.CHANGED,
)
MARK = {
    ChangeKind.ADDED: "+",
    ChangeKind.REMOVED: "\u2212",
    ChangeKind.UPGRADED: "\u25b2",
    ChangeKind.DOWNGRADED: "\u25bc",
    ChangeKind.REINSTALLED: "\u21bb",
    ChangeKind.CHANGED: "?",
}


def header(result: AuditResult) -> list[tuple[str, str]]:
    """``[("pinguard", version), ("policy", ...), ("platform", ...)]`` for a report's head."""
    policy = result.policy.describe() if result.policy is not None else "not judged"
    platform = str(result.image.platform) if result.image.platform else "unknown"
    return [("pinguard", __version__), ("policy", policy), ("platform", platform)]


def policy_pairs(result: AuditResult) -> list[tuple[str, str]]:
    """The policy as name/value pairs for formats with free properties (SBOMs, JUnit):
    ``("policy:source", "discovered")`` and one ``("policy:file", "PATH sha256:HEX")`` per
    file; none when no policy judged ``result``."""
    if result.policy is None:
        return []
    return [("policy:source", result.policy.kind)] + [
        ("policy:file", f"{path} {digest}") for path, digest in result.policy.files
    ]


@dataclass(frozen=True, slots=True)
class EnvironmentSummary:
    path: str
    python: str
    distributions: int
    counts: tuple[int, ...]  # per KINDS
    unmet: int


@dataclass(frozen=True, slots=True)
class StepSummary:
    index: int
    command: str  # on one line
    counts: tuple[int, ...]  # per KINDS
    unmet: int
    hidden: int  # changes the details leave out by default

    def text(self) -> str:
        """``+3 ▲1 ▼1 unmet 1``."""
        parts = [f"{MARK[k]}{n}" for k, n in zip(KINDS, self.counts, strict=True) if n]
        if self.unmet:
            parts.append(f"unmet {self.unmet}")
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Summary:
    environments: tuple[EnvironmentSummary, ...]
    findings: tuple[int, int, int]  # unwaived errors, warnings, infos
    waived: int
    steps: tuple[StepSummary, ...]  # the steps that changed something

    def findings_text(self) -> str:
        """``1 error, 2 warnings, 0 info; 1 waived`` (``no findings`` when none at all)."""
        errors, warnings, infos = self.findings
        if not (errors or warnings or infos or self.waived):
            return "no findings"
        text = (
            f"{errors} error{'s' if errors != 1 else ''}, "
            f"{warnings} warning{'s' if warnings != 1 else ''}, {infos} info"
        )
        return text + (f"; {self.waived} waived" if self.waived else "")


def plural(n: int, word: str) -> str:
    """``1 error``, ``2 errors``, ``3 info`` (info has no plural), ``2 entries``."""
    if n == 1 or word == "info":
        return f"{n} {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"


def unreadable_text(count: int) -> str:
    """``11 entries could not be read: incomplete`` (the ``incomplete`` list names them)."""
    return f"{plural(count, 'entry')} could not be read: incomplete"


def verdict_reasons(
    incomplete: int,
    no_python: bool,
    findings: Iterable[Finding],
    options: RenderOptions,
    unproven: int = 0,
) -> tuple[str, ...]:
    """Why a verdict is what it is, most fundamental first: ``incomplete`` entries that could
    not be read, an image (or side) without any Python environment, the unwaived findings
    at or above ``options.fail_on`` (``findings at error or above: 2 errors``); then what an
    allowance let pass (``..., allowed by --allow-incomplete``); ``unproven`` layers read
    lazily when nothing else fails (they make a pass ``unproven``, or fail it). Empty for a
    plain pass."""
    failing: list[str] = []
    allowed: list[str] = []
    if incomplete:
        (allowed if options.allow_incomplete else failing).append(
            unreadable_text(incomplete)
            + (", allowed by --allow-incomplete" if options.allow_incomplete else "")
        )
    if no_python:
        (allowed if options.allow_no_python else failing).append(
            "no Python environment found"
            + (", allowed by --allow-no-python" if options.allow_no_python else "")
        )
    fail_on = options.fail_on
    if fail_on is not None:
        counts = dict.fromkeys(Severity, 0)
        for f in findings:
            if not f.waived and f.severity.rank >= fail_on.rank:
                counts[f.severity] += 1
        found = [
            plural(counts[s], s.value)
            for s in (Severity.ERROR, Severity.WARNING, Severity.INFO)
            if counts[s]
        ]
        if found:
            failing.append(f"findings at {fail_on.value} or above: {', '.join(found)}")
    if unproven and not failing:
        lazily = f"{plural(unproven, 'layer')} read lazily, DiffIDs not proven"
        if options.allow_unproven:
            allowed.append(f"{lazily}, taken by --allow-unproven")
        else:
            failing.append(f"{lazily}: a pass needs them read in full")
    return (*failing, *allowed)


def audit_reasons(result: AuditResult, options: RenderOptions) -> tuple[str, ...]:
    """``verdict_reasons`` of one audit."""
    return verdict_reasons(
        len(result.incomplete), result.no_python, result.findings, options, len(result.unproven)
    )


def verdict_text(verdict: str, why: Sequence[str]) -> str:
    """``fail (11 entries could not be read: incomplete)``; the bare verdict without reasons."""
    return f"{verdict} ({'; '.join(why)})" if why else verdict


def other_packages_text(result: AuditResult) -> str | None:
    """The generic package records of the final state counted per kind and owner, for the
    formats that do not list them (``other packages: 10 python in /usr/local/cuda-13.0``);
    None when there are none."""
    counts: dict[tuple[str, str], int] = {}
    for p in result.final.other_packages():
        key = (p.kind, p.owner or "the image")
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        return None
    parts = [f"{n} {kind} in {owner}" for (kind, owner), n in sorted(counts.items())]
    return "other packages: " + ", ".join(parts) + " (json, html and the SBOMs list them)"


def _flagged(result: AuditResult) -> set[tuple[str | None, str]]:
    return {(f.environment, f.package) for f in result.findings if f.package}


def listed(result: AuditResult, step: Step, show_all: bool = False) -> list[Change]:
    """The changes of ``step`` the details show (see the module docstring), sorted."""
    changes = sorted(step.changes, key=lambda c: (c.environment, c.name))
    if show_all:
        return changes
    new_envs = _new_environments(result)[step.index]
    flagged = _flagged(result)
    unmet = {(u.environment, u.package) for u in step.unmet}
    return [
        c
        for c in changes
        if not (c.kind is ChangeKind.ADDED and c.environment in new_envs)
        or (c.environment, c.name) in flagged
        or (None, c.name) in flagged
        or (c.environment, c.name) in unmet
    ]


def _new_environments(result: AuditResult) -> dict[int, set[str]]:
    """step index -> the environments that had no distribution before that step."""
    seen: set[str] = set()
    out: dict[int, set[str]] = {}
    for step in result.steps:
        envs = {c.environment for c in step.changes}
        out[step.index] = envs - seen
        seen |= envs
    return out


def summarize(result: AuditResult, show_all: bool = False) -> Summary:
    """The summary of ``result`` (see the module docstring)."""
    per_env: dict[str, list[int]] = {}
    unmet_env: dict[str, set[tuple[str, str]]] = {}
    steps: list[StepSummary] = []
    for step in result.steps:
        if not step.changes and not step.unmet:
            continue
        counts = [sum(1 for c in step.changes if c.kind is k) for k in KINDS]
        for c in step.changes:
            per_env.setdefault(c.environment, [0] * len(KINDS))[KINDS.index(c.kind)] += 1
        for u in step.unmet:
            unmet_env.setdefault(u.environment, set()).add((u.package, u.requirement))
        hidden = len(step.changes) - len(listed(result, step, show_all))
        steps.append(
            StepSummary(
                step.index, command_text(step.created_by), tuple(counts), len(step.unmet), hidden
            )
        )
    envs = []
    for env in result.final.environments:
        counts = per_env.get(env.path, [0] * len(KINDS))
        envs.append(
            EnvironmentSummary(
                env.path,
                env.python or "?",
                len(env.distributions),
                tuple(counts),
                len(unmet_env.get(env.path, ())),
            )
        )
    open_ = [f for f in result.findings if not f.waived]
    findings = (
        sum(1 for f in open_ if f.severity is Severity.ERROR),
        sum(1 for f in open_ if f.severity is Severity.WARNING),
        sum(1 for f in open_ if f.severity is Severity.INFO),
    )
    waived = sum(1 for f in result.findings if f.waived)
    return Summary(tuple(envs), findings, waived, tuple(steps))


def layer_read_lines(result: AuditResult) -> list[str]:
    """Under ``--layer-read lazy``: one line saying how many layers were read lazily, what
    that verified and how many bytes it read, and one per layer read in full, with why."""
    if not result.layer_reads:
        return []
    lazy = [r for r in result.layer_reads if r.mode == "lazy"]
    out: list[str] = []
    if lazy:
        fetched = sum(r.fetched for r in lazy)
        stored = sum(r.blob_size or 0 for r in lazy)
        out.append(
            f"layers read lazily: {len(lazy)} of {len(result.layer_reads)} from their "
            f"zstd:chunked TOC (checked against the manifest); {fetched} of {stored} "
            f"compressed bytes read, {sum(r.chunks_verified for r in lazy)} chunks verified "
            "against the TOC; their DiffIDs are not proven"
        )
    out.extend(
        f"layer {r.layer} read in full: {r.reason}" for r in result.layer_reads if r.mode == "full"
    )
    return out
