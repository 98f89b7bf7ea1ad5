"""`pinguard plan REF -- pip install ARGS...`: predict an install step's changes and verdict."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import sys

from pinguard.cli.common import (
    FAIL_ON,
    add_image_options,
    add_index_options,
    add_policy_options,
    index_options,
    require_complete,
    run_audit,
)
from pinguard.errors import UsageError
from pinguard.models import Finding, Snapshot, Step


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "plan",
        help="predict what an install step would change in an image, and judge it",
        description="Predict what `pip install ARGS` or `uv pip install ARGS` would change in the "
        "image's environment (uv dry run against the image's installed metadata), show the "
        "changes like the audit does and the policy verdict. Exit 1 when the step would break "
        "the policy.",
    )
    p.add_argument("reference", metavar="REF")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- pip install ARGS...")
    add_options(p)
    p.set_defaults(func=run)


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--environment", metavar="PATH", help="site-packages to plan against")
    add_index_options(p)
    add_image_options(p)
    add_policy_options(p)


def split_command(args: argparse.Namespace) -> list[str]:
    """The install command after ``--``; options between REF and ``--`` are parsed into
    ``args`` (argparse's REMAINDER would otherwise swallow them)."""
    words = list(args.command)
    if "--" in words:
        cut = words.index("--")
        head, words = words[:cut], words[cut + 1 :]
        if head:
            extra = argparse.ArgumentParser(prog="pinguard plan", add_help=False)
            add_options(extra)
            extra.parse_args(head, namespace=args)
    return words


def _key(f: Finding) -> tuple[str, str | None, str | None, str]:
    return (f.rule, f.package, f.environment, f.message)


def run(args: argparse.Namespace) -> int:
    from pinguard.catalog.python import with_environments
    from pinguard.policy.engine import evaluate
    from pinguard.policy.load import load_run_policy
    from pinguard.repair.plan import choose_plan_environment, plan_install
    from pinguard.repair.resolve import parse_command_line

    words = split_command(args)
    command = parse_command_line(words)
    if command is None:
        raise UsageError("give the step after --: pinguard plan REF -- pip install ARGS...")
    result = run_audit(args, args.reference)
    require_complete(result, args, "a plan")
    env = choose_plan_environment(result.final.environments, args.environment)
    index = index_options(args)
    plan = plan_install(env, command, index=index, platform=result.image.platform)

    last = result.steps[-1].index if result.steps else 0
    step = Step(last + 1, "(planned) " + " ".join(words), None, plan.changes, plan.unmet)
    envs = tuple(plan.after if e.path == env.path else e for e in result.final.environments)
    final = with_environments(
        Snapshot(
            result.final.environments, result.final.incomplete, packages=result.final.packages
        ),
        envs,
    )
    planned = dataclasses.replace(
        result,
        steps=(*result.steps, step),
        final=final,
        snapshots=(*result.snapshots, final) if result.snapshots else (),
    )
    policy = load_run_policy(args.policy)
    today = _dt.date.today()
    before = {_key(f) for f in evaluate(result, policy, targets=tuple(args.target), today=today)}
    after = evaluate(planned, policy, targets=tuple(args.target), today=today)
    new = [f for f in after if f.step == step.index or _key(f) not in before]

    out = sys.stdout
    print(f"plan: {' '.join(words)}", file=out)
    print(f"environment: {env.path} (Python {env.python or '?'})", file=out)
    if not plan.changes:
        print("no installed distribution would change", file=out)
    for c in plan.changes:
        arrow = f"{c.before or '-'} -> {c.after or '-'}"
        print(f"  {c.kind.value:<11} {c.name} {arrow}", file=out)
        for cause in c.causes:
            print(
                f"      because {cause.package} {cause.version} requires {cause.requirement}",
                file=out,
            )
    for u in plan.unmet:
        print(
            f"  unmet: {u.package} {u.version} requires {u.requirement}"
            f" (installed: {u.installed or 'none'})",
            file=out,
        )
    for note in plan.notes:
        print(f"  note: {note}", file=out)
    fail_on = FAIL_ON[args.fail_on]
    failing = [
        f for f in new if not f.waived and fail_on is not None and f.severity.rank >= fail_on.rank
    ]
    for f in new:
        mark = "waived" if f.waived else f.severity.value
        print(f"  [{mark}] {f.rule}: {f.message}", file=out)
    verdict = "fail" if failing else "pass"
    print(f"verdict: {verdict}", file=out)
    return 1 if failing else 0
