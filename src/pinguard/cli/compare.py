"""`pinguard compare A B` and `pinguard compare REF --platforms ...`: what differs, and why.

Audits both sides with the audit's options, compares them (``audit.compare``), judges the
A -> B direction with the policy (or each platform's image on its own), renders the chosen
format and exits as ``audit`` does: 0 pass, 1 findings at or above ``--fail-on``, 2 usage,
3 an image could not be read.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from rich.console import Console

from pinguard.audit.compare import (
    Comparison,
    PlatformComparison,
    compare_images,
    compare_platforms,
)
from pinguard.cli.audit import render_options
from pinguard.cli.common import (
    add_image_options,
    add_policy_options,
    judge,
    parse_platform,
    run_audit,
)
from pinguard.cli.output import emit
from pinguard.errors import UsageError
from pinguard.models import Platform
from pinguard.policy.load import load_run_policy
from pinguard.report.formats import COMPARE_FORMATS


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "compare",
        help="compare two images (A -> B), or the platforms of one image",
        description="Compare the Python distributions of image A and image B per environment "
        "(added, removed, upgraded, downgraded, reinstalled, changed: a version that is not "
        "PEP 440, with the step of B that made each difference and its cause), judging the "
        "A -> B direction with the policy; or, with "
        "--platforms, the platforms of one multi-platform image side by side.",
    )
    p.add_argument("references", metavar="REF", nargs="+", help="REF_A REF_B, or one REF")
    p.add_argument(
        "--platforms",
        metavar="P,P|all",
        help="compare these platforms of one REF (comma-separated), or every platform",
    )
    p.add_argument("-f", "--format", choices=tuple(COMPARE_FORMATS), default="table")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report here (atomically)")
    add_image_options(p)
    add_policy_options(p)
    p.set_defaults(func=run)


def _platforms(args: argparse.Namespace, reference: str) -> list[Platform]:
    text = args.platforms.strip()
    if text == "all":
        from pinguard.sources import open_source
        from pinguard.sources.interface import SourceOptions

        options = SourceOptions(insecure_registries=tuple(args.insecure_registry))
        with open_source(reference, options) as source:
            found = list(source.platforms())
        if not found:
            raise UsageError(f"--platforms all: {reference!r} names no platform")
        return sorted(found, key=str)
    names = [t.strip() for t in text.split(",") if t.strip()]
    if len(names) < 2:
        raise UsageError(f"--platforms: {args.platforms!r} names fewer than two platforms")
    platforms = [parse_platform(n) for n in names]
    if len(set(platforms)) != len(platforms):
        raise UsageError(f"--platforms: {args.platforms!r} names a platform twice")
    return platforms


def build(args: argparse.Namespace) -> tuple[Comparison | PlatformComparison, Any]:
    """Audit, compare and judge what the command line asks for; also the policy used."""
    refs = list(args.references)
    policy = load_run_policy(args.policy)
    if args.platforms is not None:
        if len(refs) != 1:
            raise UsageError("--platforms compares the platforms of one REF; give exactly one")
        if args.platform:
            raise UsageError("--platform and --platforms cannot be combined")
        platforms = _platforms(args, refs[0])
        results = []
        for platform in platforms:
            one = argparse.Namespace(**{**vars(args), "platform": str(platform)})
            results.append(judge(run_audit(one, refs[0]), one, policy))
        return compare_platforms(refs[0], platforms, results), policy
    if len(refs) != 2:
        raise UsageError(
            f"compare needs two references (REF_A REF_B) or one with --platforms; got {len(refs)}"
        )
    a = run_audit(args, refs[0])
    b = run_audit(args, refs[1])
    cmp = compare_images(a, b)
    findings = judge(cmp.directional(), args, policy, confirm=False).findings
    cmp = dataclasses.replace(cmp, findings=findings)
    if not args.allow_unproven and render_options(args).verdict(cmp) == "fail":
        lenient = dataclasses.replace(render_options(args), allow_unproven=True)
        if lenient.verdict(cmp) == "unproven":  # a lazy read would pass: confirm it in full
            return build(argparse.Namespace(**{**vars(args), "layer_read": "full"}))
    return cmp, policy


def run(args: argparse.Namespace) -> int:
    cmp, policy = build(args)
    options = render_options(args, policy.pinned_packages)
    if args.format == "table" and not args.output:
        from pinguard.report.compare import draw_table

        console = Console() if sys.stdout.isatty() else Console(width=options.width)
        draw_table(cmp, console, options)
    else:
        text = COMPARE_FORMATS[args.format](cmp, options)
        emit(text, args.output, f"the {args.format} comparison")
    return 0 if options.verdict(cmp) == "pass" else 1
