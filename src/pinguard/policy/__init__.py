"""Policies: what may ship. Load and validate policy files, then judge an audit result.

The CLI needs four calls: ``discover()`` finds a ``pinguard.toml`` or ``[tool.pinguard]``
table; ``load_policy(*files)`` reads, validates and merges files (raising ``PolicyError``, a
``ConfigError`` listing every problem with file and line) and returns the built-in default
when given none; ``check_policy_files(files)`` returns the problems without raising; and
``evaluate(result, policy, targets=..., today=..., file_digests=...)`` returns the sorted
findings, waived ones included and marked.
"""

from __future__ import annotations

from pinguard.policy.engine import evaluate, sort_key, worst
from pinguard.policy.load import (
    PolicyError,
    PolicyProblem,
    check_policy_files,
    discover,
    load_policy,
    parse_policy,
)
from pinguard.policy.model import (
    RULES,
    Coupling,
    Forbidden,
    Origin,
    Pin,
    Policy,
    RuleConfig,
    RuleInfo,
    Scope,
    Waiver,
    default_policy,
)

__all__ = [
    "RULES",
    "Coupling",
    "Forbidden",
    "Origin",
    "Pin",
    "Policy",
    "PolicyError",
    "PolicyProblem",
    "RuleConfig",
    "RuleInfo",
    "Scope",
    "Waiver",
    "check_policy_files",
    "default_policy",
    "discover",
    "evaluate",
    "load_policy",
    "parse_policy",
    "sort_key",
    "worst",
]
