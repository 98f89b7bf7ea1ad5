"""`pinguard constraints`: write the known-good set as constraints, prove it with a resolver;
`pinguard constraints check FILE...`: the pre-commit check of constraints files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from pinguard.cli.common import (
    FAIL_ON,
    add_image_options,
    add_index_options,
    add_policy_options,
    index_options,
    judge,
    require_complete,
    run_audit,
)
from pinguard.errors import UsageError
from pinguard.fileio import atomic_write
from pinguard.models import AuditResult, Severity
from pinguard.policy.effective import effective_policy

if TYPE_CHECKING:
    from pinguard.repair.constraints import ConstraintSet


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "constraints",
        help="emit constraints pinning the known-good set (or: constraints check FILE...)",
        description="Write a constraints file pinning the whole known-good set of an image: by "
        "default the state just before the first step that broke the policy (or just before "
        "--step N), merged with the policy's pins. `pinguard constraints check FILE...` checks "
        "constraints files against the policy instead (exit 0 clean, 1 problems, 2 usage).",
    )
    p.add_argument("operands", nargs="+", metavar="REF | check FILE...")
    p.add_argument("--step", type=int, metavar="N", help="pin the state just before step N")
    p.add_argument(
        "--environment",
        metavar="PATH",
        help="site-packages to pin (default: the one the bad step changed)",
    )
    p.add_argument(
        "-f",
        "--format",
        choices=("pip", "uv", "pylock"),
        default="pip",
        help="pip constraints text, [tool.uv] in a pyproject, or a PEP 751 pylock.toml",
    )
    p.add_argument("--pyproject", metavar="PATH", help="pyproject.toml to update with --format uv")
    p.add_argument("--override", action="store_true", help="write tool.uv override-dependencies")
    p.add_argument(
        "--allow-unsafe",
        action="store_true",
        help="also pin pip, setuptools and wheel (left out by default, as pip-compile does)",
    )
    p.add_argument(
        "-o", "--output", metavar="FILE", help="constraints file to write (default: stdout)"
    )
    g = p.add_argument_group("verification")
    g.add_argument(
        "--verify", action="store_true", help="prove the constraints with a real resolver"
    )
    g.add_argument("--resolver", choices=("uv", "pip-tools"), default="uv")
    add_index_options(g)
    add_image_options(p)
    add_policy_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.operands[0] == "check":
        return run_check(args, args.operands[1:])
    if len(args.operands) != 1:
        raise UsageError("give one image reference (or: pinguard constraints check FILE...)")
    from pinguard.policy.load import load_run_policy
    from pinguard.repair import constraints as emit

    audited = run_audit(args, args.operands[0])
    require_complete(audited, args, "constraints")
    loaded = load_run_policy(args.policy)
    result = judge(audited, args, loaded)
    policy = effective_policy(loaded, platform=result.image.platform, targets=args.target)
    cs = emit.build_constraints(
        result,
        pins=policy.pins,
        step=args.step,
        environment=args.environment,
        policy_files=tuple(args.policy),
        fail_on=FAIL_ON[args.fail_on] or Severity.ERROR,
        allow_unsafe=args.allow_unsafe,
    )
    report: TextIO = sys.stdout if (args.output or args.format == "uv") else sys.stderr
    if args.format == "pylock":
        return run_pylock(args, result, cs, report)
    if args.format == "uv":
        if not args.pyproject:
            raise UsageError("--format uv needs --pyproject PATH (an existing pyproject.toml)")
        emit.write_pyproject(args.pyproject, cs, override=args.override)
        key = emit.UV_KEYS[args.override]
        print(f"wrote [tool.uv] {key} ({len(cs.entries)} pins) to {args.pyproject}", file=report)
    else:
        _write_or_print(args, emit.render_pip(cs), f"{len(cs.entries)} constraints", report)
    _say_known_good(cs, report)
    if not args.verify:
        return 0
    return verify(args, result, cs, report)


def _write_or_print(args: argparse.Namespace, text: str, what: str, report: TextIO) -> None:
    """Write ``text`` atomically to ``-o`` and say so on ``report``, or print it to stdout."""
    if args.output:
        atomic_write(args.output, text)
        print(f"wrote {what} to {args.output}", file=report)
    else:
        sys.stdout.write(text)


def _say_known_good(cs: ConstraintSet, report: TextIO) -> None:
    """The step the known-good state comes from, when the set was taken before one."""
    if cs.bad_step is not None:
        print(f"known-good state: just before step {cs.bad_step.index} ({cs.reason})", file=report)


def run_pylock(
    args: argparse.Namespace, result: AuditResult, cs: ConstraintSet, out: TextIO
) -> int:
    """Write the known-good set as a PEP 751 pylock.toml; with --verify, install it with uv."""
    import tempfile

    from pinguard.repair import pylock
    from pinguard.repair.resolve import SimpleIndex, TargetEnvironment
    from pinguard.repair.resolve.uv import install_lock

    env = next((e for e in result.final.environments if e.path == cs.environment), None)
    target = TargetEnvironment(env.python if env else None, result.image.platform)
    index = index_options(args)
    client = SimpleIndex(index.index_urls, index.find_links)
    lock = pylock.build_lock(
        cs, client=client, target=target, glibc=pylock.glibc_of(result.final.debs)
    )
    text = pylock.render_pylock(lock)
    if args.output and not pylock.is_pylock(args.output):
        print(
            f"note: {args.output}: PEP 751 names lock files pylock.toml or pylock.<name>.toml; "
            "installers (uv, pip) refuse other names, so rename it before installing"
            + ("; --verify installs it through a copy named pylock.toml" if args.verify else ""),
            file=out,
        )
    _write_or_print(args, text, f"{len(lock.packages)} locked packages", out)
    _say_known_good(cs, out)
    if not args.verify:
        return 0
    with tempfile.TemporaryDirectory(prefix="pinguard-pylock-") as tmp:
        # a copy under the name PEP 751 requires: uv refuses any other (locks/glm.toml)
        path = Path(tmp, "pylock.toml")
        path.write_text(text, encoding="utf-8")
        outcome = install_lock(path, target=target)
    want = {p.name: p.version for p in lock.packages}
    got = dict(outcome.installed)
    wrong = sorted(
        f"{n}: locked {v}, installed {got.get(n, 'nothing')}"
        for n, v in want.items()
        if got.get(n) != v
    )
    extra = sorted(f"{n}=={v}" for n, v in got.items() if n not in want)
    if outcome.ok and not wrong and not extra:
        print(
            f"verify: uv installed all {len(want)} locked packages at their locked versions"
            f" (CPython {target.major_minor}, {result.image.platform})",
            file=out,
        )
        return 0
    print("verify: FAILED installing the lock with uv", file=out)
    for line in wrong:
        print(f"  {line}", file=out)
    if extra:
        print(f"  installed but not locked: {', '.join(extra)}", file=out)
    if not outcome.ok:
        print("  uv said:", file=out)
        for line in outcome.output.splitlines()[-12:]:
            print(f"    {line}", file=out)
    return 1


def verify(args: argparse.Namespace, result: AuditResult, cs: ConstraintSet, out: TextIO) -> int:
    """Resolve every install step up to the bad one under the constraints."""
    from pinguard.repair.resolve import (
        TargetEnvironment,
        parse_install_commands,
        verify_constraints,
    )

    env = next((e for e in result.final.environments if e.path == cs.environment), None)
    target = TargetEnvironment(env.python if env else None, result.image.platform)
    given = index_options(args)
    lines = cs.lines()
    code = 0
    last = cs.bad_step.index if cs.bad_step is not None else None
    for step in result.steps:
        if last is not None and step.index > last:
            break
        for command in parse_install_commands(step.created_by):
            if not command.requirements:
                continue
            index = given.merged(command.index).for_tool(command.command.tool)
            v = verify_constraints(
                list(command.requirements),
                lines,
                index=index,
                target=target,
                resolver=args.resolver,
            )
            is_bad = step.index == last
            verdict = "satisfiable" if v.satisfiable else "UNSATISFIABLE"
            print(
                f"step {step.index}: {' '.join(command.requirements)}: {verdict} ({args.resolver})",
                file=out,
            )
            for note in v.notes:
                print(f"  note: {note}", file=out)
            if v.satisfiable and is_bad:
                print(
                    "  the constraints do not stop this step: it stays within the known-good set",
                    file=out,
                )
            if not v.satisfiable and not is_bad:
                print(
                    "  a step that built the known-good state no longer resolves: check indexes",
                    file=out,
                )
                code = 1
            if v.explanation is not None:
                print(f"  why: {v.explanation.plain()}", file=out)
                if v.alternatives:
                    for alt in v.alternatives:
                        print(
                            f"  option: use {alt.package}=={alt.version}"
                            " (its metadata agrees with the pins;"
                            f" resolver: {'ok' if alt.verified else 'not tried'})",
                            file=out,
                        )
                else:
                    print(
                        f"  option: no version of {v.explanation.culprit} on the index"
                        " agrees with the pins",
                        file=out,
                    )
                if v.override is not None:
                    unmet = "; ".join(link.sentence() for link in v.override.unmet)
                    state = "resolves" if v.override.satisfiable else "still does not resolve"
                    print(
                        f"  option: override {', '.join(v.override.overrides)} ({state});"
                        f" then unmet: {unmet} - waive it in the policy",
                        file=out,
                    )
                    if v.override.blocker is not None:
                        print(f"    blocked: {v.override.blocker.sentence()}", file=out)
                    elif v.override.blocked_by is not None:
                        print(
                            f"    blocked: the constraints still pin {v.override.blocked_by}",
                            file=out,
                        )
                    elif not v.override.satisfiable:
                        print("    blocked: the resolver said:", file=out)
                        for line in v.output.strip().splitlines()[-6:]:
                            print(f"      {line}", file=out)
            elif not v.satisfiable:
                print("  resolver said:", file=out)
                for line in v.output.strip().splitlines():
                    print(f"    {line}", file=out)
    return code


def run_check(args: argparse.Namespace, files: list[str]) -> int:
    from pinguard.policy.load import load_run_policy
    from pinguard.repair import check
    from pinguard.repair import constraints as emit

    if not files:
        raise UsageError("constraints check needs at least one FILE")
    policy = effective_policy(load_run_policy(args.policy), targets=args.target)
    problems: list[check.CheckProblem] = []
    for path in files:
        if path.lower().endswith(emit.NOT_CONSTRAINTS):
            # `constraints check constraints/*` passes the folder's README too
            print(
                f"pinguard: skipped {path}: documentation, not a constraints file", file=sys.stderr
            )
            continue
        problems.extend(check.check_constraints(path, pins=policy.pins, forbidden=policy.forbidden))
    for p in problems:
        print(f"{p.file}:{p.line}: {p.constraint}: {p.message}")
    return 1 if problems else 0
