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
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from collections.abc import Sequence
from typing import Any

from pinguard.errors import EXIT_FINDINGS, EXIT_IMAGE, EXIT_PASS, SourceError, UsageError
from pinguard.models import AuditResult, Finding, ImageInfo, Incomplete, Severity, Snapshot
from pinguard.report.options import RenderOptions

FORMATS = ("table", "json")
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from pinguard.cli.common import add_image_options, add_policy_options

    p = sub.add_parser(
        "gate",
        help="CI: lint the Dockerfile, audit the image, apply the policy, one verdict",
        description="Lint DOCKERFILE, audit the image REF step by step, apply the policy and "
        "give one verdict; write SARIF and JUnit reports for CI. Exit codes: 0 pass, "
        "1 findings, 2 usage or configuration error, 3 image unreadable.",
    )
    p.add_argument("--dockerfile", required=True, metavar="PATH", help="the Dockerfile to lint")
    p.add_argument("--image", required=True, metavar="REF", help="the image built from it")
    p.add_argument("--sarif", metavar="FILE", help="write a SARIF 2.1.0 log here (atomically)")
    p.add_argument("--junit", metavar="FILE", help="write a JUnit XML report here (atomically)")
    p.add_argument("--format", choices=FORMATS, default="table", help="what to print on stdout")
    p.add_argument(
        "--build-arg",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a build argument, as the build was given it (for the lint)",
    )
    p.add_argument(
        "--require-guard",
        action="store_true",
        help="report install steps not followed by `pinguard guard` (lint rule missing-guard)",
    )
    add_image_options(p)
    add_policy_options(p)
    p.set_defaults(func=run)


def _lint_finding(item: Any) -> Finding:
    """A lint finding as a policy-style finding whose message says where it is."""
    f: Finding = item.finding
    return dataclasses.replace(f, message=f"{item.path}:{item.line}: {f.message}")


def merged_sarif(result: AuditResult, lint_items: Sequence[Any], dockerfile: str) -> dict[str, Any]:
    """The audit's SARIF log with the lint rules and results added to its one run."""
    from pinguard.build.lint import RULES as LINT_RULES
    from pinguard.report import sarif

    doc = sarif.to_dict(result, RenderOptions(dockerfile=dockerfile))
    run = doc["runs"][0]
    rules: list[dict[str, Any]] = run["tool"]["driver"]["rules"]
    known = {r["id"]: i for i, r in enumerate(rules)}
    for rule_id in sorted(LINT_RULES):
        if rule_id in known:
            continue
        severity, text = LINT_RULES[rule_id]
        known[rule_id] = len(rules)
        rules.append(
            {
                "id": rule_id,
                "name": "".join(w.capitalize() for w in rule_id.split("-")),
                "shortDescription": {"text": text},
                "defaultConfiguration": {"level": _LEVEL[severity]},
                "properties": {"kind": "dockerfile-lint"},
            }
        )
    uri = sarif._uri(dockerfile)
    for item in lint_items:
        f: Finding = item.finding
        fingerprint = f"{f.rule}\x1f{item.path}\x1f{item.command}\x1f{f.package or ''}"
        run["results"].append(
            {
                "ruleId": f.rule,
                "ruleIndex": known[f.rule],
                "level": _LEVEL[f.severity],
                "message": {"text": f.message},
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": {"uri": uri},
                            "region": {
                                "startLine": item.line,
                                "endLine": max(item.line, item.end_line),
                            },
                        },
                    }
                ],
                "partialFingerprints": {
                    "pinguardLint/v1": hashlib.sha256(fingerprint.encode()).hexdigest()[:32],
                },
                "properties": {"package": f.package, "stage": item.stage, "command": item.command},
            }
        )
    return doc


def _pins(policy: Any) -> list[str]:
    return [f"{pin.package}{pin.specifier}" for pin in policy.pins]


def run(args: argparse.Namespace) -> int:
    from pinguard.build.dockerfile import parse_file
    from pinguard.build.lint import lint
    from pinguard.cli.common import FAIL_ON, judge, load_policies, run_audit
    from pinguard.fileio import atomic_write

    fail_on = FAIL_ON[args.fail_on]
    options = RenderOptions(
        fail_on=fail_on, allow_incomplete=args.allow_incomplete, title="pinguard gate"
    )
    build_args: dict[str, str] = {}
    for item in args.build_arg:
        name, eq, value = item.partition("=")
        if not name or not eq:
            raise UsageError(f"invalid --build-arg {item!r}: expected NAME=VALUE")
        build_args[name] = value

    # 1. policy (configuration errors exit 2 before anything else is read)
    policy = load_policies(args.policy)
    # 2. lint (an unreadable Dockerfile is a usage error: exit 2)
    dockerfile = parse_file(args.dockerfile, build_args=build_args)
    policy_file = policy.files[0] if getattr(policy, "files", ()) else None
    lint_items = lint(
        dockerfile,
        pinned=_pins(policy),
        require_guard=args.require_guard or bool(getattr(policy, "require_guard", False)),
        policy_file=policy_file,
    )
    # 3. audit and judge (an unreadable image: exit 3, reports still written)
    image_error: SourceError | None = None
    try:
        audited = run_audit(args, args.image)
    except SourceError as exc:
        image_error = exc
        audited = AuditResult(
            image=ImageInfo(reference=args.image, manifest_digest=None, platform=None),
            steps=(),
            final=Snapshot(),
            incomplete=(Incomplete(what=f"image {args.image}", why=str(exc)),),
        )
    audit_result = audited if image_error is not None else judge(audited, args, policy)
    from pinguard.policy.engine import sort_key

    combined = dataclasses.replace(
        audit_result,
        findings=tuple(
            sorted((*audit_result.findings, *map(_lint_finding, lint_items)), key=sort_key)
        ),
    )
    verdict = combined.verdict(fail_on, args.allow_incomplete)

    if args.sarif:
        doc = merged_sarif(audit_result, lint_items, args.dockerfile)
        atomic_write(args.sarif, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
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
        }
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    else:
        _print_table(args, combined, lint_items, verdict, image_error)
    if image_error is not None:
        return EXIT_IMAGE
    return EXIT_PASS if verdict == "pass" else EXIT_FINDINGS


def _print_table(
    args: argparse.Namespace,
    combined: AuditResult,
    lint_items: Sequence[Any],
    verdict: str,
    image_error: SourceError | None,
) -> None:
    from rich.console import Console

    from pinguard.build.lint import render as render_lint
    from pinguard.cli.common import FAIL_ON

    out = sys.stdout
    print(f"lint {args.dockerfile}:", file=out)
    out.write("".join("  " + line + "\n" for line in render_lint(lint_items).splitlines()))
    if image_error is not None:
        print(f"image {args.image}: cannot be read: {image_error}", file=out)
        print(f"verdict: {verdict}", file=out)
        return
    from pinguard.report import table

    console = Console() if out.isatty() else Console(file=out, width=140)
    table.draw(
        combined,
        console,
        RenderOptions(fail_on=FAIL_ON[args.fail_on], allow_incomplete=args.allow_incomplete),
    )
