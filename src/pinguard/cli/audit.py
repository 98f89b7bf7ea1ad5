"""`pinguard audit REF`: read an image, show what each build step changed and why, judge it."""

from __future__ import annotations

import argparse
import sys

from pinguard.cli.common import (
    FAIL_ON,
    add_image_options,
    add_policy_options,
    exit_code,
    judge,
    run_audit,
    write_output,
)
from pinguard.policy.load import load_run_policy
from pinguard.report.formats import FORMATS
from pinguard.report.options import RenderOptions


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "audit",
        help="audit an image's Python distributions, step by step",
        description="Audit every Python distribution in every environment of an image, layer by "
        "layer. REF: docker://HOST/REPO:TAG, docker-daemon:REF, docker-archive:PATH, "
        "oci:DIR[:TAG], oci-archive:PATH[:TAG], dir:PATH, or a bare NAME:TAG.",
    )
    p.add_argument("reference", metavar="REF")
    p.add_argument("-f", "--format", choices=list(FORMATS), default="table")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report here (atomically)")
    p.add_argument(
        "--all",
        action="store_true",
        dest="show_all",
        help="list every change in the table, Markdown and HTML, also the distributions a "
        "step added to an environment new in that step (a base image's inventory; the summary "
        "counts them)",
    )
    p.add_argument(
        "--dockerfile", metavar="PATH", help="point SARIF results at this Dockerfile's lines"
    )
    add_image_options(p)
    add_policy_options(p)
    p.set_defaults(func=run)


def render_options(args: argparse.Namespace, watch: tuple[str, ...] = ()) -> RenderOptions:
    """The ``RenderOptions`` the command line asks for."""
    return RenderOptions(
        fail_on=FAIL_ON[args.fail_on],
        allow_incomplete=args.allow_incomplete,
        allow_no_python=args.allow_no_python,
        allow_unproven=getattr(args, "allow_unproven", False),
        dockerfile=getattr(args, "dockerfile", None),
        watch=watch,
        show_all=getattr(args, "show_all", False),
    )


def run(args: argparse.Namespace) -> int:
    policy = load_run_policy(args.policy)
    result = judge(run_audit(args, args.reference), args, policy)
    options = render_options(args, policy.pinned_packages)
    if args.format == "table" and not args.output:
        from rich.console import Console

        from pinguard.report import table

        console = Console() if sys.stdout.isatty() else Console(width=140)
        table.draw(result, console, options)
    else:
        text = FORMATS[args.format](result, options)
        if args.output:
            write_output(args.output, text, f"the {args.format} report")
        else:
            sys.stdout.write(text)
    return exit_code(result, args)
