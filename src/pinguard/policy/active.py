"""Which rules of a policy could fire on one image, and the notice when none could.

A gate that judged nothing must not read as a pass. ``idle_reasons`` tells, for each rule
the engine runs, why it cannot produce a finding on this image: it is turned off, its scope
names platforms, targets, environments or Pythons the image does not have, it needs entries
(``[[pin]]``, ``[[forbidden]]``, ``[[coupling]]``, ``[[native-pin]]``) and none applies here,
or it needs ``--verify-records``. ``no_active_rules`` turns "every rule is idle" into the one
``no-active-rules`` finding (an error, so a policy that disabled everything by mistake fails
the gate). The inventory policy (``--policy none``) judges nothing on purpose and never gets
the notice. Whether a rule that *could* fire found anything is the engine's business, not
this module's.
"""

from __future__ import annotations

from collections.abc import Iterable

from pinguard.models import Environment, Finding
from pinguard.policy import rules as r
from pinguard.policy.model import RULES, Policy, Scope

# the rules that only fire for their entries, and the table that holds them
_ENTRY_TABLES = {
    "pin-violation": "[[pin]]",
    "forbidden-version": "[[forbidden]]",
    "coupling": "[[coupling]]",
    "native-pin": "[[native-pin]]",
}


def _all_environments(facts: r.Facts) -> tuple[Environment, ...]:
    """Every environment any step's state had (the last state of each path wins)."""
    seen: dict[str, Environment] = {}
    for snap in (*facts.result.snapshots, facts.result.final):
        for env in snap.environments:
            seen[env.path] = env
    return tuple(seen[p] for p in sorted(seen))


def _scope_words(scope: Scope) -> str:
    parts = []
    if scope.platforms:
        parts.append("platforms " + ", ".join(scope.platforms))
    if scope.targets:
        parts.append("targets " + ", ".join(scope.targets))
    if scope.environments:
        parts.append("environments " + ", ".join(scope.environments))
    if scope.marker is not None:
        parts.append(f"marker {str(scope.marker)!r}")
    return "; ".join(parts)


def _scope_misses(scope: Scope, facts: r.Facts, envs: Iterable[Environment]) -> bool:
    """True when ``scope`` excludes this run or every environment of the image."""
    if not scope.matches_run(facts.platform, facts.targets):
        return True
    if not (scope.environments or scope.marker is not None):
        return False
    return not any(scope.matches_environment(e.path, e, facts.platform) for e in envs)


def _entries_apply(
    rule: str, policy: Policy, facts: r.Facts, envs: tuple[Environment, ...]
) -> bool:
    if rule == "pin-violation":
        # a pin also fires on an image without environments ("pin matches nothing")
        return any(
            p.scope.matches_run(facts.platform, facts.targets)
            and (not envs or not _scope_misses(p.scope, facts, envs))
            for p in policy.pins
        )
    if rule == "native-pin":
        return any(p.scope.matches_run(facts.platform, facts.targets) for p in policy.native_pins)
    entries = policy.forbidden if rule == "forbidden-version" else policy.couplings
    return any(not _scope_misses(e.scope, facts, envs) for e in entries)


def idle_reasons(
    facts: r.Facts, policy: Policy, rule_ids: Iterable[str], *, digests: bool
) -> dict[str, str]:
    """{rule: why it cannot fire on this image} for each of ``rule_ids`` that cannot.

    ``digests`` says whether file digests were supplied (``--verify-records``)."""
    envs = _all_environments(facts)
    out: dict[str, str] = {}
    for rule in rule_ids:
        cfg = policy.rule(rule)
        if not cfg.enabled:
            out[rule] = "off"
        elif _scope_misses(cfg.scope, facts, envs):
            out[rule] = f"scoped to {_scope_words(cfg.scope)}"
        elif rule in _ENTRY_TABLES and not _entries_apply(rule, policy, facts, envs):
            out[rule] = f"no {_ENTRY_TABLES[rule]} entry applies"
        elif rule == "record-mismatch" and not digests:
            out[rule] = "runs only with --verify-records"
    return out


def no_active_rules(
    facts: r.Facts, policy: Policy, rule_ids: Iterable[str], *, digests: bool
) -> Finding | None:
    """The ``no-active-rules`` finding when no rule of ``policy`` could fire, else None."""
    if policy.inventory:
        return None
    rule_ids = tuple(rule_ids)
    idle = idle_reasons(facts, policy, rule_ids, digests=digests)
    if len(idle) < len(rule_ids):
        return None
    where = ", ".join(policy.files) if policy.files else "the built-in policy"
    by_reason: dict[str, list[str]] = {}  # groups in the order of their first rule
    for rule in sorted(idle):
        by_reason.setdefault(idle[rule], []).append(rule)
    if set(by_reason) == {"off"}:
        detail = f"every rule is off in {where}"
    else:
        detail = f"no rule of {where} applies to this image: " + "; ".join(
            f"{', '.join(rules)}: {reason}" for reason, rules in by_reason.items()
        )
    return Finding(
        rule="no-active-rules",
        severity=RULES["no-active-rules"].severity,
        message=f"nothing could fire: {detail}; the image was not judged "
        "(use --policy none for an inventory without a policy)",
        policy_file=policy.files[-1] if policy.files else None,
    )
