"""`pinguard predict Dockerfile`: each install step's drift, from the Dockerfile alone, judged.

Wires `pinguard.predict`: the ``FROM`` images are audited with the audit's options and caches
(progress on a terminal), the walk predicts every step, the policy judges the result as it
judges a built image's audit, and any audit format renders it. Exit codes: 0 pass, 1
findings at or above ``--fail-on`` (or the base's own audit incomplete), 2 usage (a
Dockerfile that does not parse, an unknown stage, a missing context file), 3 a base image
that cannot be read, an index that cannot be reached, or a step that could not be predicted
(the report is still written; ``--allow-incomplete`` takes the prediction as it is).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pinguard.cli.common import (
    FAIL_ON,
    add_build_arg_option,
    add_image_options,
    add_policy_options,
    audit_options,
    build_args,
    exit_code,
    judge,
    parse_platform,
)
from pinguard.cli.output import write_output
from pinguard.errors import EXIT_IMAGE
from pinguard.models import AuditResult, Platform
from pinguard.report.formats import FORMATS, require_writer
from pinguard.report.options import RenderOptions

if TYPE_CHECKING:
    from pinguard.policy.model import Policy


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "predict",
        help="predict what each step of a Dockerfile would change, before building it",
        description="Predict the Python changes of every step of DOCKERFILE without building "
        "it: the FROM image is audited, each pip/uv install is answered by a resolver (a uv "
        "dry run against the state the earlier steps leave), and the result is judged and "
        "reported as `pinguard audit` reports a built image. Exit codes: 0 pass, 1 findings, "
        "2 usage error, 3 a base image or index that cannot be reached, or a step that could "
        "not be predicted (--allow-incomplete to accept that).",
    )
    p.add_argument(
        "dockerfile",
        metavar="DOCKERFILE",
        nargs="+",
        help="the Dockerfile(s) to predict (several: each reported as a table, in turn)",
    )
    add_options(p)
    p.set_defaults(func=run)


def add_options(p: argparse.ArgumentParser, *, gate: bool = False) -> None:
    """The options of a prediction (``gate --predict`` takes them too)."""
    g = p.add_argument_group("prediction")
    g.add_argument(
        "--context",
        metavar="DIR",
        help="the build context COPY reads from (default: the Dockerfile's directory)",
    )
    g.add_argument(
        "--stage",
        metavar="NAME",
        help="the stage to predict (default: the last; docker build's --target)",
    )
    g.add_argument(
        "--base",
        action="append",
        default=[],
        metavar="[NAME=]REF",
        help="read the FROM image NAME from REF (any reference pinguard audits); a lone REF "
        "replaces the one FROM image (default: localhost/... from containers-storage, other "
        "names from their registry)",
    )
    g.add_argument(
        "--no-pip-check",
        action="store_true",
        help="do not ask pip's own resolver to confirm uv's answer for pip steps (faster; "
        "blind to where the two resolvers choose differently)",
    )
    g.add_argument(
        "--allow-empty-base",
        action="store_true",
        help="start from an empty state when a FROM image cannot be read (said in the report)",
    )
    if gate:
        return
    p.add_argument(
        "-f",
        "--format",
        choices=list(FORMATS),
        default="table",
        help="cyclonedx and spdx need the sbom extra: pip install 'pinguard[sbom]'",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write the report here (atomically)")
    p.add_argument(
        "--all",
        action="store_true",
        dest="show_all",
        help="list every change, also what a step added to an environment new in that step",
    )
    add_build_arg_option(p)
    add_image_options(p)
    add_policy_options(p)


def predict(args: argparse.Namespace, dockerfile: str) -> AuditResult:
    """The prediction of ``dockerfile`` the options describe (not yet judged)."""
    from pinguard.predict import PredictOptions, predict_dockerfile
    from pinguard.predict.base import BaseImage, read_base
    from pinguard.predict.run import Resolver

    options = audit_options(args)
    uv_cache = None if options.cache_dir is None else options.cache_dir / "uv"

    def reader(name: str, reference: str, platform: Platform | None) -> BaseImage:
        source = dataclasses.replace(options.source, platform=platform or options.source.platform)
        opts = dataclasses.replace(options, source=source)
        if not sys.stderr.isatty():
            return read_base(name, reference, opts)
        from rich.console import Console

        from pinguard.cli.common import _RichProgress

        progress = _RichProgress(Console(stderr=True))
        try:
            return read_base(name, reference, opts, progress)
        finally:
            progress.stop()

    context = Path(args.context) if args.context else Path(dockerfile).resolve().parent
    if not context.is_dir():
        from pinguard.errors import UsageError

        raise UsageError(f"--context {context}: not a directory")
    return predict_dockerfile(
        dockerfile,
        PredictOptions(
            context=context,
            build_args=build_args(args),
            stage=args.stage,
            bases=tuple(args.base),
            allow_empty_base=args.allow_empty_base,
            platform=parse_platform(args.platform) if args.platform else None,
            resolver=Resolver(cache_dir=uv_cache, pip_check=not args.no_pip_check),
        ),
        reader,
    )


def step_lines(result: AuditResult) -> dict[int, int]:
    """Each predicted step's Dockerfile line (SARIF points results there)."""
    return {s.index: s.prediction.line for s in result.steps if s.prediction is not None}


def unpredicted(result: AuditResult) -> list[int]:
    return [
        s.index
        for s in result.steps
        if s.prediction is not None and s.prediction.status == "unpredicted"
    ]


def run(args: argparse.Namespace) -> int:
    """Predict each Dockerfile given; several (as a pre-commit hook passes them) are each
    reported as a table, the exit code the worst of theirs (3, then 1, then 0)."""
    from pinguard.errors import UsageError
    from pinguard.policy.load import load_run_policy

    require_writer(args.format, "predict")
    files: list[str] = list(args.dockerfile)
    if len(files) > 1 and (args.format != "table" or args.output):
        raise UsageError(
            f"-f {args.format}{' -o' if args.output else ''} reports one Dockerfile; "
            f"{len(files)} were given"
        )
    policy = load_run_policy(args.policy)
    codes = []
    for path in files:
        if len(files) > 1:
            print(f"== {path}", file=sys.stdout, flush=True)
        codes.append(_run_one(args, path, policy))
    return max(codes, key=lambda c: {EXIT_IMAGE: 3, 1: 2, 0: 0}.get(c, 1))


def _run_one(args: argparse.Namespace, dockerfile: str, policy: Policy) -> int:
    result = judge(predict(args, dockerfile), args, policy, confirm=False)
    options = RenderOptions(
        fail_on=FAIL_ON[args.fail_on],
        allow_incomplete=args.allow_incomplete,
        allow_no_python=args.allow_no_python,
        dockerfile=dockerfile,
        step_lines=step_lines(result),
        watch=policy.pinned_packages,
        show_all=args.show_all,
        title="pinguard predict",
    )
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
    if unpredicted(result) and not args.allow_incomplete:
        return EXIT_IMAGE
    return exit_code(result, args)
