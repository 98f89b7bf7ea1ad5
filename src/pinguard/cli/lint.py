"""`pinguard lint DOCKERFILE...`: report pip/uv install steps that let dependencies drift.

Each Dockerfile is parsed (`pinguard.build.dockerfile`) and linted (`pinguard.build.lint`); the
policy, when one is given with ``--policy`` or found (``pinguard.toml`` / ``[tool.pinguard]``),
supplies the pinned packages for `upgrade-pinned` and `no-deps-repin`; ``--require-guard``
turns on `missing-guard`. Exit codes: 0 when no finding is at or above ``--fail-on`` (default
``warning``: every lint rule describes a way to ship drift), 1 when one is, 2 when a Dockerfile
cannot be read or parsed or the command line or policy is wrong (the other files are still
linted and reported).
"""

from __future__ import annotations

import argparse
import sys

from pinguard.cli.common import FAIL_ON
from pinguard.errors import EXIT_FINDINGS, EXIT_PASS, EXIT_USAGE, UsageError

FORMATS = ("table", "json", "sarif")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "lint",
        help="lint Dockerfiles for pip/uv install steps that let dependencies drift",
        description="Lint Dockerfiles: pip/uv install steps without constraints, --pre or "
        "nightly indexes without exact pins, shadowing extra indexes, --no-deps re-pins, "
        "upgrades of pinned packages and install steps without `pinguard guard`.",
    )
    p.add_argument("dockerfiles", nargs="+", metavar="DOCKERFILE")
    p.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="FILE",
        help="policy file (repeatable; default: pinguard.toml or [tool.pinguard] if found)",
    )
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report here (atomically)")
    p.add_argument(
        "--fail-on",
        choices=sorted(FAIL_ON),
        default="warning",
        help="lowest severity that fails (default: warning)",
    )
    p.add_argument(
        "--require-guard",
        action="store_true",
        help="report install steps not followed by `pinguard guard` (rule missing-guard)",
    )
    p.add_argument(
        "--build-arg",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a build argument, as `docker build --build-arg` would pass it",
    )
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
    p.set_defaults(func=run)


def _policy_facts(files: list[str]) -> tuple[list[str], bool, str | None]:
    """(pins as requirement strings, whether the policy requires the guard, policy file)."""
    from pinguard.policy import discover, load_policy

    if not files:
        found = discover()
        if found is None:
            return [], False, None
        files = [str(found)]
    policy = load_policy(*files)
    pins = [f"{pin.package}{pin.specifier}" for pin in policy.pins]
    return pins, bool(getattr(policy, "require_guard", False)), files[0]


def run(args: argparse.Namespace) -> int:
    from pinguard.build.dockerfile import InvalidDockerfile, parse_file
    from pinguard.build.lint import RULES, LintFinding, lint, render
    from pinguard.fileio import atomic_write

    build_args: dict[str, str] = {}
    for item in args.build_arg:
        name, eq, value = item.partition("=")
        if not name or not eq:
            raise UsageError(f"invalid --build-arg {item!r}: expected NAME=VALUE")
        build_args[name] = value
    unknown = sorted(set(args.ignore) - set(RULES))
    if unknown:
        raise UsageError(f"unknown rule for --ignore: {', '.join(unknown)}")
    pins, policy_guard, policy_file = _policy_facts(args.policy)

    findings: list[LintFinding] = []
    errors: list[tuple[str, str]] = []
    for path in args.dockerfiles:
        try:
            dockerfile = parse_file(path, build_args=build_args)
        except InvalidDockerfile as exc:
            errors.append((path, str(exc)))
            continue
        findings += lint(
            dockerfile,
            pinned=pins,
            require_guard=args.require_guard or policy_guard,
            nightly_patterns=args.nightly_pattern or None,
            ignore=args.ignore,
            policy_file=policy_file,
        )

    text = render(findings, args.format, errors=errors)
    if args.output:
        atomic_write(args.output, text)
    else:
        sys.stdout.write(text)
    if errors:
        if args.output:
            for path, message in errors:
                print(f"pinguard: error: {path}: {message}", file=sys.stderr)
        return EXIT_USAGE
    fail_on = FAIL_ON[args.fail_on]
    if fail_on is not None and any(f.severity.rank >= fail_on.rank for f in findings):
        return EXIT_FINDINGS
    return EXIT_PASS
