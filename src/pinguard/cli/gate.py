"""`pinguard gate`: lint the Dockerfile, audit the image, apply the policy, give one verdict.

The one command CI runs. The policy is loaded first (its pins feed the lint), the Dockerfile
is parsed and linted, the image is audited step by step and judged; lint findings and policy
findings then share one verdict at ``--fail-on`` (default ``error``; lint warnings such as
an unconstrained install fail only with ``--fail-on warning``). ``--sarif`` and ``--junit``
write one SARIF 2.1.0 log (a single ``pinguard`` run: policy rules and lint rules, image
findings pointing at the Dockerfile line of their step, lint findings at their command's
line) and one JUnit XML file, each atomically. Exit codes: 0 pass, 1 findings (or anything
that could not be read, unless ``--allow-incomplete``), 2 usage or configuration error (bad
policy, unreadable Dockerfile), 3 the image could not be read; with 3 the reports are still
written, holding the lint findings and the unreadable image as an error.

``--predict`` gates the Dockerfile before anything is built: instead of auditing ``--image``,
the build is predicted from the Dockerfile (`pinguard.predict`, the options ``pinguard
predict`` takes) and judged the same way; a step that cannot be predicted is exit 3, as an
unreadable image is, unless ``--allow-incomplete``. Exactly one of ``--image`` and
``--predict`` is given: a gate never predicts because an image was forgotten.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pinguard.errors import EXIT_FINDINGS, EXIT_IMAGE, EXIT_PASS, IndexUnreachable, SourceError
from pinguard.models import AuditResult, Finding, ImageInfo, Incomplete, Snapshot
from pinguard.report.options import RenderOptions

if TYPE_CHECKING:
    from pinguard.buildfile.lint import LintFinding


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from pinguard.cli.common import add_build_arg_option, add_image_options, add_policy_options
    from pinguard.report.formats import VERDICT_FORMATS

    p = sub.add_parser(
        "gate",
        help="CI: lint the Dockerfile, audit the image, apply the policy, one verdict",
        description="Lint DOCKERFILE, audit the image REF step by step, apply the policy and "
        "give one verdict; write SARIF and JUnit reports for CI. Exit codes: 0 pass, "
        "1 findings, 2 usage or configuration error, 3 image unreadable.",
    )
    from pinguard.cli.predict import add_options as add_predict_options

    p.add_argument("--dockerfile", required=True, metavar="PATH", help="the Dockerfile to lint")
    p.add_argument("--image", metavar="REF", help="the image built from it")
    p.add_argument(
        "--predict",
        action="store_true",
        help="no image yet: predict the build from the Dockerfile and gate that "
        "(pinguard predict; instead of --image)",
    )
    p.add_argument("--sarif", metavar="FILE", help="write a SARIF 2.1.0 log here (atomically)")
    p.add_argument("--junit", metavar="FILE", help="write a JUnit XML report here (atomically)")
    p.add_argument(
        "-f", "--format", choices=VERDICT_FORMATS, default="table", help="what to print on stdout"
    )
    add_build_arg_option(p)
    add_image_options(p)
    add_policy_options(p, guard=True)
    add_predict_options(p, gate=True)
    p.set_defaults(func=run)


def _lint_finding(item: LintFinding) -> Finding:
    """A lint finding as a policy-style finding whose message says where it is."""
    f = item.finding
    return dataclasses.replace(f, message=f"{item.path}:{item.line}: {f.message}")


def run(args: argparse.Namespace) -> int:
    from pinguard.buildfile.dockerfile import parse_file
    from pinguard.buildfile.lint import lint
    from pinguard.cli.common import FAIL_ON, build_args, judge, run_audit
    from pinguard.fileio import atomic_write
    from pinguard.policy.effective import effective_policy
    from pinguard.policy.load import load_run_policy
    from pinguard.report import sarif

    if bool(args.image) == bool(args.predict):
        from pinguard.errors import UsageError

        raise UsageError(
            "give --image REF (the image built from the Dockerfile) or --predict (predict the "
            "build from the Dockerfile), one of them"
        )
    fail_on = FAIL_ON[args.fail_on]
    options = RenderOptions(
        fail_on=fail_on,
        allow_incomplete=args.allow_incomplete,
        allow_no_python=args.allow_no_python,
        title="pinguard gate",
    )
    values = build_args(args)

    # 1. policy (configuration errors exit 2 before anything else is read)
    policy = load_run_policy(args.policy)
    effective = effective_policy(policy, targets=args.target)
    # 2. lint (an unreadable Dockerfile is a usage error: exit 2)
    dockerfile = parse_file(args.dockerfile, build_args=values)
    lint_items = lint(
        dockerfile,
        pinned=effective.pin_requirements,
        require_guard=args.require_guard or effective.require_guard,
        policy_file=effective.policy_file,
    )
    # 3. audit (or predict) and judge (an unreadable image: exit 3, reports still written)
    image_error: SourceError | IndexUnreachable | None = None
    subject = args.image or args.dockerfile
    try:
        if args.predict:
            from pinguard.cli.predict import predict

            audited = predict(args, args.dockerfile)
        else:
            audited = run_audit(args, args.image)
    except (SourceError, IndexUnreachable) as exc:
        image_error = exc
        audited = AuditResult(
            image=ImageInfo(reference=subject, manifest_digest=None, platform=None),
            steps=(),
            final=Snapshot(),
            incomplete=(Incomplete(what=f"image {subject}", why=str(exc)),),
        )
    audit_result = (
        audited
        if image_error is not None
        else judge(audited, args, policy, confirm=not args.predict)
    )
    if args.predict:
        from pinguard.cli.predict import step_lines

        options = dataclasses.replace(options, step_lines=step_lines(audit_result))
    from pinguard.policy.engine import sort_key

    combined = dataclasses.replace(
        audit_result,
        findings=tuple(
            sorted((*audit_result.findings, *map(_lint_finding, lint_items)), key=sort_key)
        ),
    )
    verdict = options.verdict(combined)

    if args.sarif:
        doc = sarif.to_dict(
            audit_result, dataclasses.replace(options, dockerfile=args.dockerfile), lint_items
        )
        atomic_write(args.sarif, sarif.dumps(doc))
    if args.junit:
        from pinguard.report import junit

        atomic_write(args.junit, junit.render(combined, options))

    if args.format == "json":
        from pinguard.report import json as json_report

        data = json_report.to_dict(combined, options)
        data["gate"] = {
            "dockerfile": args.dockerfile,
            "verdict": verdict,
            "lint_findings": len(lint_items),
            "image_error": None if image_error is None else str(image_error),
            "predicted": bool(args.predict),
        }
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    else:
        _print_table(args, combined, lint_items, verdict, image_error, options)
    if image_error is not None:
        return EXIT_IMAGE
    if args.predict and not args.allow_incomplete:
        from pinguard.cli.predict import unpredicted

        if unpredicted(audit_result):
            return EXIT_IMAGE  # a step that could not be predicted, as an unreadable image
    return EXIT_PASS if verdict == "pass" else EXIT_FINDINGS


def _print_table(
    args: argparse.Namespace,
    combined: AuditResult,
    lint_items: Sequence[LintFinding],
    verdict: str,
    image_error: SourceError | IndexUnreachable | None,
    options: RenderOptions,
) -> None:
    from rich.console import Console

    from pinguard.report.lint import render_table

    out = sys.stdout
    print(f"lint {args.dockerfile}:", file=out)
    out.write("".join("  " + line + "\n" for line in render_table(lint_items).splitlines()))
    if image_error is not None:
        what = f"image {args.image}" if args.image else f"prediction of {args.dockerfile}"
        print(f"{what}: cannot be read: {image_error}", file=out)
        print(f"verdict: {verdict}", file=out)
        return
    from pinguard.report import table

    console = Console() if out.isatty() else Console(file=out, width=140)
    table.draw(combined, console, options)
