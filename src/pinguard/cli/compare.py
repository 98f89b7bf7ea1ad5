"""`pinguard compare A B` and `pinguard compare REF --platforms ...`: what differs, and why.

Audits both sides with the audit's options, compares them (``audit.compare``), judges the
A -> B direction with the policy (or each platform's image on its own), renders the chosen
format and exits as ``audit`` does: 0 pass, 1 findings at or above ``--fail-on``, 2 usage,
3 an image could not be read.
"""

from __future__ import annotations

import argparse
import io
import sys

from rich.console import Console

from pinguard.audit.compare import (
    Comparison,
    PlatformComparison,
    compare_images,
    compare_platforms,
)
from pinguard.cli.common import (
    FAIL_ON,
    add_image_options,
    add_policy_options,
    judge,
    load_policies,
    parse_platform,
    run_audit,
)
from pinguard.errors import UsageError
from pinguard.fileio import atomic_write
from pinguard.models import Platform

FORMATS = ("table", "json", "markdown", "html", "sarif", "junit")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "compare",
        help="compare two images (A -> B), or the platforms of one image",
        description="Compare the Python distributions of image A and image B per environment "
        "(added, removed, upgraded, downgraded, reinstalled, with the step of B that made each "
        "difference and its cause), judging the A -> B direction with the policy; or, with "
        "--platforms, the platforms of one multi-platform image side by side.",
    )
    p.add_argument("references", metavar="REF", nargs="+", help="REF_A REF_B, or one REF")
    p.add_argument(
        "--platforms",
        metavar="P,P|all",
        help="compare these platforms of one REF (comma-separated), or every platform",
    )
    p.add_argument("--format", choices=FORMATS, default="table")
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


def build(args: argparse.Namespace) -> Comparison | PlatformComparison:
    """Audit, compare and judge what the command line asks for."""
    refs = list(args.references)
    policy = load_policies(args.policy)
    args.watch = tuple(sorted({p.package for p in policy.pins}))
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
        return compare_platforms(refs[0], platforms, results)
    if len(refs) != 2:
        raise UsageError(
            f"compare needs two references (REF_A REF_B) or one with --platforms; got {len(refs)}"
        )
    a = run_audit(args, refs[0])
    b = run_audit(args, refs[1])
    cmp = compare_images(a, b)
    findings = judge(cmp.directional(), args, policy).findings
    return Comparison(cmp.a, cmp.b, cmp.base, cmp.environments, cmp.differences, findings)


def render(cmp: Comparison | PlatformComparison, args: argparse.Namespace, fmt: str) -> str:
    fail_on = FAIL_ON[args.fail_on]
    allow = args.allow_incomplete
    if fmt == "json":
        from pinguard.report.compare import render_json

        return render_json(cmp, fail_on=fail_on, allow_incomplete=allow)
    if fmt == "markdown":
        from pinguard.report.compare import render_markdown

        return render_markdown(cmp, fail_on=fail_on, allow_incomplete=allow)
    if fmt == "html":
        from pinguard.report.html import render_comparison

        return render_comparison(
            cmp, fail_on=fail_on, allow_incomplete=allow, watch=getattr(args, "watch", ())
        )
    if fmt in {"sarif", "junit"}:
        if isinstance(cmp, PlatformComparison):
            import dataclasses

            # one document over every platform: the last platform's image, each finding
            # labelled with the platform it was found on
            merged = dataclasses.replace(
                cmp.results[-1],
                findings=tuple(
                    dataclasses.replace(f, message=f"[{p}] {f.message}") for p, f in cmp.findings
                ),
                incomplete=cmp.incomplete,
            )
        else:
            merged = cmp.directional()
        if fmt == "sarif":
            from pinguard.report import sarif

            return sarif.render(merged)
        from pinguard.report import junit

        return junit.render(merged, fail_on=fail_on)
    from pinguard.report.compare import render_table

    buf = io.StringIO()
    console = Console(file=buf, width=160, force_terminal=False, soft_wrap=False)
    render_table(cmp, console, fail_on=fail_on, allow_incomplete=allow)
    return buf.getvalue()


def run(args: argparse.Namespace) -> int:
    cmp = build(args)
    if args.format == "table" and not args.output:
        from pinguard.report.compare import render_table

        console = Console() if sys.stdout.isatty() else Console(width=160)
        render_table(
            cmp, console, fail_on=FAIL_ON[args.fail_on], allow_incomplete=args.allow_incomplete
        )
    else:
        text = render(cmp, args, args.format)
        if args.output:
            atomic_write(args.output, text)
        else:
            sys.stdout.write(text)
    verdict = cmp.verdict(FAIL_ON[args.fail_on], args.allow_incomplete)
    return 0 if verdict == "pass" else 1
