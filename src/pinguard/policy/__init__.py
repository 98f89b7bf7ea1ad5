"""Policies: what may ship. Load and validate policy files, then judge an audit result.

The CLI needs four calls: ``discover()`` finds a ``pinguard.toml`` or ``[tool.pinguard]``
table; ``load_policy(*files)`` reads, validates and merges files (raising ``PolicyError``, a
``ConfigError`` listing every problem with file and line) and returns the built-in default
when given none; ``check_policy_files(files)`` returns the problems without raising; and
``evaluate(result, policy, targets=..., today=..., file_digests=...)`` returns the sorted
findings, waived ones included and marked. The names are re-exported on first use (PEP 562),
so importing one module of this package (``discover`` for a warm audit) loads no other.
"""

from __future__ import annotations

from importlib import import_module

# ``typing.TYPE_CHECKING`` without importing typing (2 ms of a warm audit): mypy reads the name
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pinguard.policy.discovery import discover
    from pinguard.policy.engine import evaluate, sort_key, worst
    from pinguard.policy.load import (
        PolicyError,
        PolicyProblem,
        check_policy_files,
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

#: Where each re-exported name lives (the module below ``pinguard.policy``).
_HOMES = {
    "discover": "discovery",
    **dict.fromkeys(("evaluate", "sort_key", "worst"), "engine"),
    **dict.fromkeys(
        ("PolicyError", "PolicyProblem", "check_policy_files", "load_policy", "parse_policy"),
        "load",
    ),
    **dict.fromkeys(
        (
            "RULES",
            "Coupling",
            "Forbidden",
            "Origin",
            "Pin",
            "Policy",
            "RuleConfig",
            "RuleInfo",
            "Scope",
            "Waiver",
            "default_policy",
        ),
        "model",
    ),
}

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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{home}"), name)
