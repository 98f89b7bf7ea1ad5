"""`pinguard lint DOCKERFILE...`: report pip/uv install steps that let dependencies drift.

Each Dockerfile is parsed (`pinguard.buildfile.dockerfile`) and linted (`pinguard.buildfile.lint`);
the policy, when one is given with ``--policy`` or found (``pinguard.toml`` /
``[tool.pinguard]``), supplies the pins for `upgrade-pinned` and `no-deps-repin` (those that
apply to the ``--target`` values, see `pinguard.policy.effective`); ``--require-guard``, or
``require_guard = true`` in the policy, turns on `missing-guard`. Reports are rendered by
`pinguard.report.lint`. Exit codes: 0 when no finding is at or above ``--fail-on`` (default
``warning``: every lint rule describes a way to ship drift), 1 when one is, 2 when a
Dockerfile cannot be read or parsed or the command line or policy is wrong. Each file that
cannot be read or parsed is one ``pinguard: error:`` line on stderr; the other files are
still linted and reported, and when none could be, no report is written at all (a missing
Dockerfile is one error line and exit 2, nothing on stdout).
"""

from __future__ import annotations

import argparse
import sys

from pinguard.cli.common import (
    FAIL_ON,
    add_build_arg_option,
    add_policy_options,
    build_args,
)
from pinguard.cli.output import write_output
from pinguard.errors import EXIT_FINDINGS, EXIT_PASS, EXIT_USAGE, UsageError
from pinguard.report.formats import LINT_FORMATS


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "lint",
        help="lint Dockerfiles for pip/uv install steps that let dependencies drift",
        description="Lint Dockerfiles: pip/uv install steps without constraints, --pre or "
        "nightly indexes without exact pins, shadowing extra indexes, --no-deps re-pins, "
        "upgrades of pinned packages and install steps without `pinguard guard`.",
    )
    p.add_argument("dockerfiles", nargs="+", metavar="DOCKERFILE")
    p.add_argument("-f", "--format", choices=list(LINT_FORMATS), default="table")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report here (atomically)")
    add_build_arg_option(p)
    p.add_argument(
        "--ignore", action="append", default=[], metavar="RULE", help="skip this rule (repeatable)"
    )
    p.add_argument(
        "--nightly-pattern",
        action="append",
        default=[],
        metavar="REGEX",
        help="an index URL matching this counts as nightly (replaces the built-in patterns)",
    )
    add_policy_options(p, fail_on="warning", incomplete=False, guard=True)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pinguard.buildfile.dockerfile import InvalidDockerfile, parse_file
    from pinguard.buildfile.lint import RULES, LintFinding, lint
    from pinguard.policy.effective import effective_policy
    from pinguard.policy.load import load_run_policy

    values = build_args(args)
    unknown = sorted(set(args.ignore) - set(RULES))
    if unknown:
        raise UsageError(f"unknown rule for --ignore: {', '.join(unknown)}")
    policy = effective_policy(load_run_policy(args.policy), targets=args.target)

    findings: list[LintFinding] = []
    errors: list[tuple[str, str]] = []
    linted = 0
    for path in args.dockerfiles:
        try:
            dockerfile = parse_file(path, build_args=values)
        except InvalidDockerfile as exc:
            errors.append((path, str(exc)))
            continue
        linted += 1
        findings += lint(
            dockerfile,
            pinned=policy.pin_requirements,
            require_guard=args.require_guard or policy.require_guard,
            nightly_patterns=args.nightly_pattern or None,
            ignore=args.ignore,
            policy_file=policy.policy_file,
        )

    for _path, message in errors:  # InvalidDockerfile's message names the file
        print(f"pinguard: error: {message}", file=sys.stderr)
    if not linted:
        return EXIT_USAGE  # nothing was linted: no report to write
    text = LINT_FORMATS[args.format](findings, errors)
    if args.output:
        write_output(args.output, text, f"the {args.format} lint report")
    else:
        sys.stdout.write(text)
    if errors:
        return EXIT_USAGE
    fail_on = FAIL_ON[args.fail_on]
    if fail_on is not None and any(f.severity.rank >= fail_on.rank for f in findings):
        return EXIT_FINDINGS
    return EXIT_PASS
