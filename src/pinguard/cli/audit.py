"""`pinguard audit REF`: read an image, show what each build step changed and why, judge it."""

from __future__ import annotations

import argparse
import io
import sys

from rich.console import Console

from pinguard.cli.common import (
    FAIL_ON,
    add_image_options,
    add_policy_options,
    exit_code,
    judge,
    run_audit,
)
from pinguard.fileio import atomic_write
from pinguard.models import AuditResult

FORMATS = ("table", "json", "sarif", "junit", "markdown", "cyclonedx", "spdx")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "audit",
        help="audit an image's Python distributions, step by step",
        description="Audit every Python distribution in every environment of an image, layer by "
        "layer. REF: docker://HOST/REPO:TAG, docker-daemon:REF, docker-archive:PATH, "
        "oci:DIR[:TAG], oci-archive:PATH[:TAG], dir:PATH, or a bare NAME:TAG.",
    )
    p.add_argument("reference", metavar="REF")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report here (atomically)")
    p.add_argument(
        "--dockerfile", metavar="PATH", help="point SARIF results at this Dockerfile's lines"
    )
    add_image_options(p)
    add_policy_options(p)
    p.set_defaults(func=run)


def render(result: AuditResult, args: argparse.Namespace, fmt: str) -> str:
    fail_on = FAIL_ON[args.fail_on]
    if fmt == "json":
        from pinguard.report import json as json_report

        return json_report.render(result, fail_on=fail_on, allow_incomplete=args.allow_incomplete)
    if fmt == "sarif":
        from pinguard.report import sarif

        return sarif.render(result, dockerfile=getattr(args, "dockerfile", None))
    if fmt == "junit":
        from pinguard.report import junit

        return junit.render(result, fail_on=fail_on)
    if fmt == "cyclonedx":
        from pinguard.report import cyclonedx

        return cyclonedx.render(result)
    if fmt == "spdx":
        from pinguard.report import spdx

        return spdx.render(result)
    if fmt == "markdown":
        from pinguard.report import markdown

        return markdown.render(result, fail_on=fail_on, allow_incomplete=args.allow_incomplete)
    from pinguard.report import table

    buf = io.StringIO()
    console = Console(file=buf, width=160, force_terminal=False, soft_wrap=False)
    table.render(result, console, fail_on=fail_on, allow_incomplete=args.allow_incomplete)
    return buf.getvalue()


def run(args: argparse.Namespace) -> int:
    result = judge(run_audit(args, args.reference), args)
    if args.format == "table" and not args.output:
        from pinguard.report import table

        console = Console() if sys.stdout.isatty() else Console(width=140)
        table.render(
            result, console, fail_on=FAIL_ON[args.fail_on], allow_incomplete=args.allow_incomplete
        )
    else:
        text = render(result, args, args.format)
        if args.output:
            atomic_write(args.output, text)
        else:
            sys.stdout.write(text)
    return exit_code(result, args)
