"""`pinguard guard`: inside a Dockerfile RUN step, judge what the install step just did.

Run after each install step (``RUN pip install ... && python3 /opt/pinguard.pyz guard``): the
guard compares the image's Python environments with the state the previous guard call
recorded (see `pinguard.guard`), applies the policy (``--policy`` files, else a discovered
``pinguard.toml``, else the built-in default) and prints plain lines made for build logs:
what this step changed and why, the requirements it left unmet, every finding and one
verdict line. Exit codes: 0 pass, 1 findings at or above ``--fail-on`` (the RUN step fails),
2 a usage, policy or state-file problem. ``--format json`` prints the audit JSON report of
the step instead.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from pinguard.errors import EXIT_FINDINGS, EXIT_PASS
from pinguard.models import AuditResult, ChangeKind, Finding

PREFIX = "pinguard guard:"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from pinguard.cli.common import add_policy_options
    from pinguard.guard import DEFAULT_STATE, UPDATE_MODES
    from pinguard.report.formats import VERDICT_FORMATS

    p = sub.add_parser(
        "guard",
        help="inside a build: judge what the last install step did (fails the RUN step)",
        description="Compare the Python environments of this filesystem with the state the "
        "previous guard call recorded, judge the changes with the policy, and exit non-zero "
        "to fail the Dockerfile RUN step. The first call records the baseline.",
    )
    p.add_argument(
        "--state",
        default=DEFAULT_STATE,
        metavar="PATH",
        help=f"the state file, an absolute path inside ROOT (default: {DEFAULT_STATE})",
    )
    p.add_argument("--root", default="/", help="the filesystem to audit (default: /)")
    p.add_argument(
        "--step-name",
        metavar="TEXT",
        help="name of this step in reports (default: the RUN command, else 'guard call N')",
    )
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="PATH",
        help="an in-image path not to audit (repeatable; pinguard's own files always are not)",
    )
    p.add_argument(
        "--update-state",
        choices=UPDATE_MODES,
        default="pass",
        help="when to record the state: pass (default), always (accept what is there), never",
    )
    p.add_argument("-f", "--format", choices=VERDICT_FORMATS, default="table")
    add_policy_options(p)
    p.set_defaults(func=run)


def _version(before: str | None, after: str | None) -> str:
    if before and after and before != after:
        return f"{before} -> {after}"
    return after or before or ""


def _finding_line(f: Finding) -> str:
    where = f" ({f.policy_file}:{f.policy_line})" if f.policy_file else ""
    waived = f" [waived: {f.waiver_reason}]" if f.waived else ""
    return f"{f.severity.value.upper():7} {f.rule}: {f.message}{where}{waived}"


def render_text(
    result: AuditResult,
    out: TextIO,
    *,
    verdict: str,
    tail: str,
    baseline: bool = False,
    allow_no_python: bool = False,
) -> None:
    """Plain lines, one fact per line, for build logs (no colours, no wrapping)."""
    step = result.steps[0]
    p = PREFIX
    print(f"{p} step {step.index}: {step.created_by}", file=out)
    envs = sorted({c.environment for c in step.changes} | {u.environment for u in step.unmet})
    for env in envs:
        print(f"{p}   {env}", file=out)
        for c in sorted((c for c in step.changes if c.environment == env), key=lambda c: c.name):
            mark = "!!" if c.kind is ChangeKind.DOWNGRADED else "  "
            line = f"{p} {mark}  {c.kind.value:11} {c.name} {_version(c.before, c.after)}"
            if c.causes:
                line += "  <- " + " <- ".join(
                    f"{x.package} {x.version} requires {x.requirement}" for x in c.causes
                )
            print(line, file=out)
        for u in (u for u in step.unmet if u.environment == env):
            have = f"{u.installed} is installed" if u.installed else "it is not installed"
            print(
                f"{p} !!  {'unmet':11} {u.package} {u.version} requires "
                f"{u.requirement}, but {have}",
                file=out,
            )
    if baseline:
        for e in result.final.environments:
            print(
                f"{p}   baseline: {e.path} (python {e.python or '?'}, "
                f"{len(e.distributions)} distributions)",
                file=out,
            )
        if not result.final.environments:
            print(f"{p}   baseline: no Python environment found", file=out)
    elif result.no_python:
        allowed = "allowed by --allow-no-python" if allow_no_python else "fails unless"
        if not allow_no_python:
            allowed += " --allow-no-python"
        print(f"{p}   {result.no_python_message()} ({allowed})", file=out)
    elif not envs:
        print(f"{p}   no Python distribution changed", file=out)
    for item in result.incomplete:
        print(f"{p} incomplete: {item.what}: {item.why}", file=out)
    if result.findings:
        print(f"{p} findings:", file=out)
        for f in result.findings:
            print(f"{p}   {_finding_line(f)}", file=out)
    print(f"{p} verdict: {verdict.upper()}{tail}", file=out)


def run(args: argparse.Namespace) -> int:
    from pinguard.cli.common import FAIL_ON
    from pinguard.guard import run_guard
    from pinguard.policy.load import load_run_policy

    policy = load_run_policy(args.policy)
    fail_on = FAIL_ON[args.fail_on]
    outcome = run_guard(
        args.root,
        policy=policy,
        state=args.state,
        step_name=args.step_name,
        targets=args.target,
        fail_on=fail_on,
        allow_incomplete=args.allow_incomplete,
        allow_no_python=args.allow_no_python,
        exclude=args.exclude,
        update=args.update_state,
    )
    verdict = outcome.step.verdict
    if args.format == "json":
        from pinguard.report import json as json_report
        from pinguard.report.options import RenderOptions

        options = RenderOptions(
            fail_on=fail_on,
            allow_incomplete=args.allow_incomplete,
            # as run_guard judged it: a baseline may have no Python environment yet
            allow_no_python=args.allow_no_python or outcome.baseline,
        )
        sys.stdout.write(json_report.render(outcome.result, options))
    else:
        state = args.state
        if outcome.baseline and outcome.recorded:
            tail = f"; baseline recorded in {state}"
        elif outcome.recorded:
            tail = f"; state recorded in {state}"
        elif outcome.previous is not None:
            tail = (
                f"; {state} still records step {outcome.previous.index} ({outcome.previous.name})"
            )
        else:
            tail = f"; no baseline recorded in {state}"
        if verdict != "pass":
            tail += f" (fails at --fail-on {args.fail_on})"
        render_text(
            outcome.result,
            sys.stdout,
            verdict=verdict,
            tail=tail,
            baseline=outcome.baseline,
            allow_no_python=args.allow_no_python,
        )
    sys.stdout.flush()
    return EXIT_PASS if verdict == "pass" else EXIT_FINDINGS
