"""Judge an audit result against a policy: run the rules, apply scope, severity and waivers.

``evaluate`` is the one entry point. It runs every enabled rule whose scope fits the image
platform and the ``--target`` values, drops hits outside the rule's environment scope, gives
each hit the entry's severity or else the rule's, and marks it waived when an unexpired
waiver names its rule and one of its packages. Waived findings stay in the output; an
expired waiver waives nothing and becomes an ``expired-waiver`` error itself; a policy under
which no rule could fire adds a ``no-active-rules`` error (`pinguard.policy.active`). The output is
sorted (errors first, then rule, package, environment, step), so equal inputs give equal
bytes in every report.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterable, Iterator, Mapping

from pinguard.models import AuditResult, Finding, Severity
from pinguard.policy import native_rules as n
from pinguard.policy import rules as r
from pinguard.policy.active import no_active_rules
from pinguard.policy.model import RULES, Policy, RuleConfig

_Runner = Callable[[r.Facts, Policy, RuleConfig, Mapping[str, str] | None], Iterable[r.Hit]]

_RUNNERS: tuple[tuple[str, _Runner], ...] = (
    ("pin-violation", lambda f, p, c, d: r.pin_violation(f, p.pins)),
    ("forbidden-version", lambda f, p, c, d: r.forbidden_version(f, p.forbidden)),
    ("downgrade", lambda f, p, c, d: r.downgrade(f, c)),
    ("unpinned-prerelease", lambda f, p, c, d: r.unpinned_prerelease(f, p.pins)),
    ("coupling", lambda f, p, c, d: r.coupling(f, p.couplings)),
    ("unmet-requirement", lambda f, p, c, d: r.unmet_requirement(f)),
    ("file-collision", lambda f, p, c, d: r.file_collision(f)),
    ("record-mismatch", lambda f, p, c, d: r.record_mismatch(f, d) if d is not None else ()),
    ("duplicate-distribution", lambda f, p, c, d: r.duplicate_distribution(f)),
    ("native-duplicate", lambda f, p, c, d: n.native_duplicate(f)),
    ("native-mismatch", lambda f, p, c, d: n.native_mismatch(f)),
    ("variant-change", lambda f, p, c, d: n.variant_change(f)),
    ("native-pin", lambda f, p, c, d: n.native_pin(f, p.native_pins)),
)


def sort_key(f: Finding) -> tuple[int, str, str, str, int, tuple[str, ...], str, bool]:
    """The order findings are reported in: severity (highest first), then identity."""
    return (
        -f.severity.rank,
        f.rule,
        f.package or "",
        f.environment or "",
        -1 if f.step is None else f.step,
        f.versions,
        f.message,
        f.waived,
    )


def _hits(
    facts: r.Facts, policy: Policy, file_digests: Mapping[str, str] | None
) -> Iterator[tuple[RuleConfig, r.Hit]]:
    for rule_id, run in _RUNNERS:
        cfg = policy.rule(rule_id)
        if not cfg.enabled or not cfg.scope.matches_run(facts.platform, facts.targets):
            continue
        for hit in run(facts, policy, cfg, file_digests):
            env = facts.environment(hit.environment)
            if cfg.scope.matches_environment(hit.environment, env, facts.platform):
                yield cfg, hit


def evaluate(
    result: AuditResult,
    policy: Policy,
    *,
    targets: Iterable[str] = (),
    today: _dt.date | None = None,
    file_digests: Mapping[str, str] | None = None,
) -> tuple[Finding, ...]:
    """The findings of ``policy`` on ``result``, sorted; waived ones included and marked.

    ``targets`` are the ``--target`` values; ``today`` decides which waivers have expired
    (default: the local date); ``file_digests`` ({absolute file path:
    "sha256=<urlsafe b64>"}, from ``--verify-records``) turns on ``record-mismatch``.
    """
    today = today if today is not None else _dt.date.today()
    facts = r.Facts.of(result, targets)
    active = [w for w in policy.waivers if not w.expired(today)]
    findings: list[Finding] = []
    for w in policy.waivers:
        if w.expired(today):
            findings.append(
                Finding(
                    rule="expired-waiver",
                    severity=RULES["expired-waiver"].severity,
                    message=f"the waiver of {w.rule} for {w.package} expired on "
                    f"{w.expires.isoformat()} ({w.reason}); renew it or fix the cause",
                    package=w.package,
                    policy_file=w.origin.file,
                    policy_line=w.origin.line,
                )
            )
    idle = no_active_rules(
        facts, policy, (rule for rule, _ in _RUNNERS), digests=file_digests is not None
    )
    if idle is not None:
        findings.append(idle)
    for cfg, hit in _hits(facts, policy, file_digests):
        origin = hit.origin or cfg.origin
        packages = hit.packages or frozenset({hit.package} if hit.package else ())
        waiver = next((w for w in active if w.covers(hit.rule, packages, hit.environment)), None)
        findings.append(
            Finding(
                rule=hit.rule,
                severity=hit.severity or cfg.severity,
                message=hit.message,
                package=hit.package,
                environment=hit.environment,
                step=hit.step,
                versions=hit.versions,
                policy_file=origin.file,
                policy_line=origin.line,
                waived=waiver is not None,
                waiver_reason=None
                if waiver is None
                else f"{waiver.reason} (until {waiver.expires.isoformat()})",
            )
        )
    return tuple(sorted(findings, key=sort_key))


def worst(findings: Iterable[Finding]) -> Severity | None:
    """The highest severity among unwaived findings (None when there is none)."""
    ranks = [f.severity for f in findings if not f.waived]
    return max(ranks, key=lambda s: s.rank) if ranks else None
