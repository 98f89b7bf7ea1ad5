"""`pinguard constraints`: write the known-good set as constraints, prove it with a resolver;
`pinguard constraints check FILE...`: the pre-commit check of constraints files.

Without ``-o`` the constraints go to stdout; everything else (what was written where, the
known-good state, notes, the verification) goes to stderr, with or without ``-o``, as every
command's messages do. The target a lock or a verification is for is said when it was not
read from the image: a ``dir:`` source's platform (this host's unless ``--platform``) and a
glibc the image does not show (no ``libc6`` package; ``--glibc`` gives it).
"""

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
from pinguard.cli.output import write_stdout
from pinguard.errors import EXIT_USAGE, UsageError
from pinguard.fileio import atomic_write
from pinguard.models import AuditResult, Severity
from pinguard.policy.effective import effective_policy

if TYPE_CHECKING:
    from pinguard.repair.constraints import ConstraintSet
    from pinguard.repair.resolve import TargetEnvironment, Verification


def _glibc_arg(text: str) -> tuple[int, int]:
    major, dot, minor = text.strip().partition(".")
    if not (dot and major.isdigit() and minor.isdigit()):
        raise argparse.ArgumentTypeError(f"expected MAJOR.MINOR, e.g. 2.36: {text!r}")
    return int(major), int(minor)


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
        "-o",
        "--output",
        metavar="FILE",
        help="constraints file to write, missing folders created (default: stdout)",
    )
    p.add_argument(
        "--glibc",
        type=_glibc_arg,
        metavar="X.Y",
        help="the image's glibc, for the wheels a pylock.toml may hold and the platform "
        "--verify resolves for (default: the image's libc6 package; without one a lock "
        "assumes 2.17, the oldest manylinux)",
    )
    g = p.add_argument_group("verification")
    g.add_argument(
        "--verify", action="store_true", help="prove the constraints with a real resolver"
    )
    g.add_argument("--resolver", choices=("uv", "pip-tools"), default="uv")
    add_index_options(g)
    add_image_options(p)
    add_policy_options(p)
    # `constraints check --policy P FILE...`: the files after the options are operands too
    p.set_defaults(func=run, trailing_operands="operands")


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
    report: TextIO = sys.stderr  # stdout carries the constraints alone (without -o)
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
        write_stdout(text, what)


def _say_known_good(cs: ConstraintSet, report: TextIO) -> None:
    """The step the known-good state comes from, when the set was taken before one."""
    if cs.bad_step is not None:
        print(f"known-good state: just before step {cs.bad_step.index} ({cs.reason})", file=report)


def run_pylock(
    args: argparse.Namespace, result: AuditResult, cs: ConstraintSet, out: TextIO
) -> int:
    """Write the known-good set as a PEP 751 pylock.toml; with --verify, install it with uv."""
    import dataclasses
    import tempfile

    from pinguard.repair import pylock
    from pinguard.repair.resolve import SimpleIndex
    from pinguard.repair.resolve.uv import install_lock

    target, source = _target(args, result, cs, out)
    if target.glibc is None:
        print(
            f"note: {result.image.reference} has no libc6 package, so its glibc is unknown: "
            f"wheels are chosen for glibc {'.'.join(map(str, pylock.DEFAULT_GLIBC))} "
            "(manylinux2014, the oldest manylinux, which any glibc image runs); "
            "--glibc X.Y locks for the image's own",
            file=out,
        )
    index = index_options(args)
    client = SimpleIndex(index.index_urls, index.find_links)
    lock = pylock.build_lock(cs, client=client, target=target, glibc_source=source)
    # uv installs it for the glibc its wheels were chosen for (the assumed one included)
    target = dataclasses.replace(target, glibc=target.glibc or pylock.DEFAULT_GLIBC)
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
            f" (CPython {target.major_minor}, {target.python_platform})",
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


def _target(
    args: argparse.Namespace, result: AuditResult, cs: ConstraintSet, out: TextIO
) -> tuple[TargetEnvironment, str]:
    """What a lock or a verification is for: the pinned environment's Python, the image's
    platform (a ``dir:`` source has none: this host's, said in a note, unless --platform),
    and its glibc (--glibc, else its libc6 package, else None) with where that came from."""
    from pinguard.repair import pylock
    from pinguard.repair.resolve import TargetEnvironment
    from pinguard.target import host_platform

    env = next((e for e in result.final.environments if e.path == cs.environment), None)
    platform = result.image.platform
    if platform is None:
        platform = host_platform()
        print(
            f"note: {result.image.reference} names no platform (a directory has none): "
            f"taking this host's, {platform} (--platform os/arch to choose)",
            file=out,
        )
    glibc: tuple[int, int] | None = args.glibc
    source = "given with --glibc" if glibc else ""
    if glibc is None:
        glibc = pylock.glibc_of(result.final.debs)
        libc6 = next((d.version for d in result.final.debs if d.name == "libc6"), "")
        source = f"the image's libc6 {libc6}" if glibc else ""
    return TargetEnvironment(env.python if env else None, platform, glibc), source


def verify(args: argparse.Namespace, result: AuditResult, cs: ConstraintSet, out: TextIO) -> int:
    """Resolve every install step up to the bad one under the constraints; when no step can
    be replayed (a ``dir:`` source has no history), resolve the known-good set itself, so a
    verification never passes having resolved nothing."""
    from pinguard.repair.resolve import parse_install_commands, verify_constraints

    target, _source = _target(args, result, cs, out)
    if target.glibc is None and target.python_platform:
        print(
            f"note: {result.image.reference} has no libc6 package, so its glibc is unknown: "
            f"uv resolves for {target.python_platform}, at uv's own default glibc "
            "(--glibc X.Y to resolve for the image's)",
            file=out,
        )
    given = index_options(args)
    lines = cs.lines()
    code = 0
    replayed = 0
    last = cs.bad_step.index if cs.bad_step is not None else None
    for step in result.steps:
        if last is not None and step.index > last:
            break
        for command in parse_install_commands(step.created_by):
            if command.skipped:
                print(
                    f"step {step.index}: not replayed: {' '.join(command.skipped)}"
                    " (cannot be read outside the image)",
                    file=out,
                )
            if not command.requirements:
                continue
            replayed += 1
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
            _explain(v, out)
    if replayed:
        return code
    return _verify_whole_set(args, result, cs, target, out)


def _verify_whole_set(
    args: argparse.Namespace,
    result: AuditResult,
    cs: ConstraintSet,
    target: TargetEnvironment,
    out: TextIO,
) -> int:
    """No step to replay: resolve the known-good set itself (each pin asked for, under the
    whole set), which proves every pinned version is on the index for the target and that
    their requirements agree. Exit 1 when it does not resolve, or when there is nothing."""
    from pinguard.repair.resolve import verify_constraints

    why = (
        "a directory has no build history"
        if result.image.transport == "dir"
        else "no pip or uv install step in its history names a requirement"
    )
    asked = [
        c.line
        for c in cs.entries
        if not (c.source == "policy" and c.note.startswith("not installed"))
    ]
    print(
        f"verify: no install step of {result.image.reference} to replay ({why}); "
        "resolving the known-good set itself instead",
        file=out,
    )
    if not asked:
        print("verify: FAILED: the known-good set is empty: nothing was verified", file=out)
        return 1
    v = verify_constraints(
        asked, cs.lines(), index=index_options(args), target=target, resolver=args.resolver
    )
    verdict = "satisfiable" if v.satisfiable else "UNSATISFIABLE"
    print(
        f"known-good set ({len(asked)} pins) for CPython {target.major_minor}"
        f" on {target.python_platform or target.platform}: {verdict} ({args.resolver})",
        file=out,
    )
    for note in v.notes:
        print(f"  note: {note}", file=out)
    _explain(v, out)
    return 0 if v.satisfiable else 1


def _explain(v: Verification, out: TextIO) -> None:
    """A refused resolution: the chain, the options and what blocks them."""
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


def run_check(args: argparse.Namespace, files: list[str]) -> int:
    """Check each file against the policy: its problems on stdout (exit 1); a file that is
    no constraints file, pyproject or lock, or holds nothing to check, is an error line
    naming it (exit 2), after the other files are checked, so one run reports them all."""
    from pinguard.cli import err
    from pinguard.errors import ConfigError
    from pinguard.policy.load import load_run_policy
    from pinguard.repair import check
    from pinguard.repair import constraints as emit

    if not files:
        raise UsageError("constraints check needs at least one FILE")
    policy = effective_policy(load_run_policy(args.policy), targets=args.target)
    problems: list[check.CheckProblem] = []
    errors: list[str] = []
    skipped = 0
    for path in files:
        if path.lower().endswith(emit.NOT_CONSTRAINTS):
            # `constraints check constraints/*` passes the folder's README too
            print(
                f"pinguard: skipped {path}: documentation, not a constraints file", file=sys.stderr
            )
            skipped += 1
            continue
        try:
            problems.extend(
                check.check_constraints(path, pins=policy.pins, forbidden=policy.forbidden)
            )
        except (UsageError, ConfigError) as exc:
            errors.append(str(exc))
    if skipped == len(files):
        raise UsageError(
            f"constraints check: nothing to check: every file given is documentation "
            f"({', '.join(files[:3])})"
        )
    for p in problems:
        print(f"{p.file}:{p.line}: {p.constraint}: {p.message}")
    for message in errors:
        err(message)
    if errors:
        return EXIT_USAGE
    return 1 if problems else 0
