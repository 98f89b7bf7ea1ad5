"""`pinguard audit REF`: read an image, show what each build step changed and why, judge it."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from pinguard.cli.common import (
    FAIL_ON,
    add_image_options,
    add_policy_options,
    exit_code,
    judge,
    run_audit,
)
from pinguard.cli.output import emit, what_report
from pinguard.errors import PinguardError

if TYPE_CHECKING:
    import datetime as _dt

    from pinguard.cli import warm
    from pinguard.models import AuditResult
    from pinguard.policy.model import Policy
    from pinguard.report.options import RenderOptions

#: The ``--format`` choices: the keys of ``report.formats.FORMATS`` (a test holds them
#: equal), named here so that building the parser loads no report module.
FORMAT_NAMES = ("table", "json", "sarif", "junit", "markdown", "html", "cyclonedx", "spdx")
#: The formats whose writers are the ``sbom`` extra: the keys of
#: ``report.formats.SBOM_WRITERS`` (a test holds them equal), so that a warm audit of any
#: other format loads no report module.
SBOM_FORMAT_NAMES = ("cyclonedx", "spdx")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "audit",
        help="audit an image's Python distributions, step by step",
        description="Audit every Python distribution in every environment of an image, layer by "
        "layer. REF: docker://HOST/REPO:TAG, docker-daemon:REF, docker-archive:PATH, "
        "oci:DIR[:TAG], oci-archive:PATH[:TAG], dir:PATH, or a bare NAME:TAG.",
    )
    p.add_argument("reference", metavar="REF")
    p.add_argument(
        "-f",
        "--format",
        choices=list(FORMAT_NAMES),
        default="table",
        help="cyclonedx and spdx need the sbom extra: pip install 'pinguard[sbom]'",
    )
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
    from pinguard.report.options import RenderOptions

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
    """Audit, judge and report; a warm audit of an unchanged image, command line and policy
    writes the report its cold audit rendered (``cli/warm.py``) and does nothing else."""
    import datetime as _dt

    from pinguard.cli import warm

    if args.format in SBOM_FORMAT_NAMES:
        # first: without the sbom extra, -f cyclonedx fails the same with or without a warm
        # report
        from pinguard.report.formats import require_writer

        require_writer(args.format, "audit")
    try:
        found = warm.lookup(args)
    except PinguardError:
        from pinguard.policy.load import load_run_policy

        load_run_policy(args.policy)  # a bad policy is still the error named first
        raise
    if found.report is not None:
        _emit(args, found.report)
        return found.code
    from pinguard.policy.load import load_run_policy

    opened = (
        None if found.source is None or found.resolved is None else (found.source, found.resolved)
    )
    today = _dt.date.today()
    try:
        policy = load_run_policy(args.policy)
    except BaseException:
        if opened is not None:
            opened[0].close()
        raise
    audited = run_audit(args, args.reference, opened=opened, write_behind=True)
    try:
        return _report(args, judge(audited, args, policy, today=today), policy, found, today)
    finally:
        from pinguard.audit.replay import wait_behind

        wait_behind()  # the replay entry, written meanwhile by a child process


def _report(
    args: argparse.Namespace,
    result: AuditResult,
    policy: Policy,
    found: warm.Lookup,
    today: _dt.date,
) -> int:
    """Render and write the judged ``result``; keep it for the next warm audit."""
    options = render_options(args, policy.pinned_packages)
    if args.format == "table" and not args.output:
        from rich.console import Console

        from pinguard.report import table

        console = Console() if sys.stdout.isatty() else Console(width=140)
        table.draw(result, console, options)
        return exit_code(result, args)
    from pinguard.report.formats import FORMATS

    text = FORMATS[args.format](result, options)
    code = exit_code(result, args)
    _emit(args, text)
    found.keep(text, code, policy, today)
    return code


def _emit(args: argparse.Namespace, text: str) -> None:
    """The report on stdout, or written to ``-o``."""
    emit(text, args.output, what_report(args.format))
