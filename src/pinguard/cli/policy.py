"""``pinguard policy``: check policy files, and show the built-in default.

``pinguard policy check FILE...`` loads each file (with everything it extends) and prints
every problem as ``file:line: message``, then how many; a file that cannot be read at all
(missing, unreadable, an unknown ``builtin:NAME``) is one ``pinguard: error:`` line and
nothing else. With no FILE it checks the discovered ``pinguard.toml`` or
``[tool.pinguard]`` table. Exit 0 when all are valid, 2 otherwise.
``pinguard policy rules`` lists the rules with their default severities.
"""

from __future__ import annotations

import argparse
import sys

from pinguard.errors import EXIT_PASS, EXIT_USAGE


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("policy", help="check policy files and list rules")
    sub = parser.add_subparsers(dest="policy_command", metavar="ACTION")
    check = sub.add_parser("check", help="validate policy files (exit 0 valid, 2 invalid)")
    check.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="policy files (default: the discovered pinguard.toml / pyproject.toml)",
    )
    check.set_defaults(func=_check)
    rules = sub.add_parser("rules", help="list the rules and their default severities")
    rules.set_defaults(func=_rules)

    def usage(args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return EXIT_USAGE

    parser.set_defaults(func=usage)


def _check(args: argparse.Namespace) -> int:
    from pinguard.policy.discovery import discover
    from pinguard.policy.load import check_policy_files

    files = list(args.files)
    if not files:
        found = discover()
        if found is None:
            print(
                "no policy file found (pinguard.toml or [tool.pinguard] in pyproject.toml); "
                "the built-in default applies",
                file=sys.stderr,
            )
            return EXIT_PASS
        files = [str(found)]
    problems = check_policy_files(files)
    inside = [p for p in problems if not p.unreadable]
    for problem in problems:
        prefix = "pinguard: error: " if problem.unreadable else ""
        print(f"{prefix}{problem}", file=sys.stderr)
    if inside:
        print(f"{len(inside)} problem(s) in policy files", file=sys.stderr)
    if problems:
        return EXIT_USAGE
    for f in files:
        print(f"{f}: ok")
    return EXIT_PASS


def _rules(args: argparse.Namespace) -> int:
    from pinguard.policy.model import RULES

    for rule_id in sorted(RULES):
        info = RULES[rule_id]
        state = info.severity.value if info.enabled else f"{info.severity.value}, off by default"
        print(f"{rule_id:24} {state:24} {info.title}")
    return EXIT_PASS
