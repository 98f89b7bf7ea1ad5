"""SARIF 2.1.0: the one builder of the SARIF logs of ``audit``, ``lint`` and ``gate``.

Every log has one run of one tool whose driver lists its rules (sorted, so ``ruleIndex`` is
stable): the policy catalogue for ``audit``, the lint rules for ``lint`` (driver ``pinguard-
lint``), both for ``gate``. Severities map to SARIF levels once, in ``LEVEL`` (info is
``note``). An image finding becomes a result with a stable partial fingerprint, its package,
environment, step and versions as properties and, when waived, an accepted external suppression
carrying the waiver's reason; it points at the Dockerfile line of the step that caused it when
a Dockerfile and a step-to-line mapping are known
(`pinguard.buildfile.history.dockerfile_step_lines` builds that mapping by aligning the image
history with the Dockerfile's last stage), and otherwise at the policy file line that produced
it. A lint finding points at its command's lines. Things that could not be read become error
notifications on the invocation, which is then marked unsuccessful; an image without any
Python environment is a notification ``no-python-environment`` (an error, a note when
allowed) on an invocation that still succeeded. Apart from reading the
Dockerfile when only its path is given, the builders are pure functions with sorted,
deterministic output.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import quote

from pinguard import __version__
from pinguard.buildfile.history import dockerfile_step_lines
from pinguard.models import AuditResult, Finding, Severity
from pinguard.policy.model import RULES
from pinguard.report.options import DEFAULT_OPTIONS, RenderOptions

if TYPE_CHECKING:
    from pinguard.buildfile.lint import LintFinding

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"

# A SARIF object as plain JSON data.
Sarif = dict[str, object]

LEVEL: Mapping[Severity, str] = {
    Severity.ERROR: "error",
    Severity.WARNING: "warning",
    Severity.INFO: "note",
}


def artifact_uri(path: str) -> str:
    """An RFC 3986 URI reference for a file path (absolute paths become file: URIs)."""
    p = Path(path)
    if p.is_absolute():
        return p.as_uri()
    return quote(str(PurePosixPath(*p.parts)), safe="/")


def _rule(
    rule_id: str,
    title: str,
    severity: Severity,
    description: str | None = None,
    kind: str | None = None,
) -> Sarif:
    descriptor: Sarif = {
        "id": rule_id,
        "name": "".join(w.capitalize() for w in rule_id.split("-")),
        "shortDescription": {"text": title},
    }
    if description is not None:
        descriptor["fullDescription"] = {"text": description}
    descriptor["defaultConfiguration"] = {"level": LEVEL[severity]}
    if kind is not None:
        descriptor["properties"] = {"kind": kind}
    return descriptor


def policy_rules() -> list[Sarif]:
    """The descriptors of the policy rules, sorted by id."""
    return [
        _rule(r, RULES[r].title, RULES[r].severity, description=RULES[r].description)
        for r in sorted(RULES)
    ]


def lint_rules(skip: Iterable[str] = ()) -> list[Sarif]:
    """The descriptors of the Dockerfile lint rules (except ``skip``), sorted by id."""
    from pinguard.buildfile.lint import RULES as LINT_RULES

    skipped = set(skip)
    return [
        _rule(r, LINT_RULES[r][1], LINT_RULES[r][0], kind="dockerfile-lint")
        for r in sorted(LINT_RULES)
        if r not in skipped
    ]


def _fingerprint(f: Finding) -> str:
    key = "\x1f".join((f.rule, f.package or "", f.environment or "", *f.versions))
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _location(f: Finding, dockerfile: str | None, step_lines: Mapping[int, int]) -> list[Sarif]:
    if dockerfile is not None and f.step is not None and f.step in step_lines:
        uri, line = artifact_uri(dockerfile), step_lines[f.step]
        what = f"step {f.step}"
    elif f.policy_file is not None:
        uri, line = artifact_uri(f.policy_file), max(1, f.policy_line or 1)
        what = "policy entry"
    else:
        return []
    return [
        {
            "physicalLocation": {"artifactLocation": {"uri": uri}, "region": {"startLine": line}},
            "message": {"text": what},
        }
    ]


def _step_lines(result: AuditResult, options: RenderOptions) -> Mapping[int, int]:
    if options.dockerfile is None or options.step_lines is not None:
        return options.step_lines or {}
    text = options.dockerfile_text
    if text is None:
        try:
            text = Path(options.dockerfile).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            text = ""
    return dockerfile_step_lines(text, result.steps, options.dockerfile) if text else {}


def finding_result(
    f: Finding, index: Mapping[str, int], dockerfile: str | None, step_lines: Mapping[int, int]
) -> Sarif:
    """The SARIF result of one image finding (``index``: rule id -> ``ruleIndex``)."""
    item: Sarif = {"ruleId": f.rule, "level": LEVEL[f.severity], "message": {"text": f.message}}
    if f.rule in index:
        item["ruleIndex"] = index[f.rule]
    locations = _location(f, dockerfile, step_lines)
    if locations:
        item["locations"] = locations
    item["partialFingerprints"] = {"pinguardFinding/v1": _fingerprint(f)}
    props: Sarif = {"versions": list(f.versions)}
    for key, value in (
        ("package", f.package),
        ("environment", f.environment),
        ("step", f.step),
        ("policyFile", f.policy_file),
        ("policyLine", f.policy_line),
    ):
        if value is not None:
            props[key] = value
    item["properties"] = props
    if f.waived:
        item["suppressions"] = [
            {
                "kind": "external",
                "status": "accepted",
                "justification": f.waiver_reason or "waived by policy",
            }
        ]
    return item


def lint_result(item: LintFinding, index: Mapping[str, int]) -> Sarif:
    """The SARIF result of one lint finding, located at its command's lines."""
    f = item.finding
    fingerprint = f"{f.rule}\x1f{item.path}\x1f{item.command}\x1f{f.package or ''}"
    return {
        "ruleId": f.rule,
        "ruleIndex": index[f.rule],
        "level": LEVEL[f.severity],
        "message": {"text": f.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": artifact_uri(item.path)},
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


def _log(
    tool: str,
    rules: list[Sarif],
    results: list[Sarif],
    notifications: list[Sarif],
    properties: Sarif | None = None,
    successful: bool | None = None,
) -> Sarif:
    """One run; ``successful`` defaults to "no notifications"."""
    ok = not notifications if successful is None else successful
    invocation: Sarif = {"executionSuccessful": ok}
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    run: Sarif = {
        "tool": {
            "driver": {
                "name": tool,
                "version": __version__,
                "semanticVersion": __version__,
                "rules": rules,
            }
        },
        "invocations": [invocation],
        "columnKind": "unicodeCodePoints",
        "results": results,
    }
    if properties is not None:
        run["properties"] = properties
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def to_dict(
    result: AuditResult,
    options: RenderOptions = DEFAULT_OPTIONS,
    lint: Sequence[LintFinding] | None = None,
    *,
    statuses: Sequence[tuple[str, str]] | None = None,
) -> Sarif:
    """The SARIF log of ``result`` as plain data (see ``render``).

    ``lint`` (even empty) adds the lint rules, and those lint findings, to the same run:
    the one log of ``pinguard gate``. ``statuses`` are the (side, line) pairs of images
    without a Python environment (default: ``result``'s own; a comparison passes both sides').
    """
    step_lines = _step_lines(result, options)
    rules = policy_rules()
    if lint is not None:
        rules += lint_rules(skip=RULES)
    index = {str(r["id"]): i for i, r in enumerate(rules)}
    results = [finding_result(f, index, options.dockerfile, step_lines) for f in result.findings]
    results += [lint_result(item, index) for item in lint or ()]
    notifications: list[Sarif] = [
        {"level": "error", "message": {"text": f"incomplete: {i.what}: {i.why}"}}
        for i in result.incomplete
    ]
    successful = not notifications
    if statuses is None:
        statuses = options.no_python_statuses(result)
    # the run itself succeeded: what it found is that there is nothing to judge
    notifications += [
        {
            "level": "note" if options.allow_no_python else "error",
            "message": {"text": f"{side}: {text}" if side else text},
            "descriptor": {"id": "no-python-environment"},
        }
        for side, text in statuses
    ]
    image = result.image
    run_props: Sarif = {"image": image.reference}
    if image.manifest_digest:
        run_props["manifestDigest"] = image.manifest_digest
    if image.platform is not None:
        run_props["platform"] = str(image.platform)
    if result.policy is not None:
        run_props["policy"] = {
            "source": result.policy.kind,
            "files": [{"path": p, "digest": d} for p, d in result.policy.files],
        }
    return _log("pinguard", rules, results, notifications, run_props, successful)


def lint_to_dict(findings: Sequence[LintFinding], errors: Sequence[tuple[str, str]] = ()) -> Sarif:
    """The SARIF log of ``pinguard lint``: lint findings, unreadable files as notifications."""
    from pinguard.buildfile.lint import LintFinding

    rules = lint_rules()
    index = {str(r["id"]): i for i, r in enumerate(rules)}
    results = [lint_result(item, index) for item in sorted(findings, key=LintFinding.sort_key)]
    notifications: list[Sarif] = [
        {
            "level": "error",
            "message": {"text": message},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": artifact_uri(path)}}}],
        }
        for path, message in sorted(errors)
    ]
    return _log("pinguard-lint", rules, results, notifications)


def dumps(log: Sarif) -> str:
    """A SARIF log as JSON text (the one serialisation every command uses)."""
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"


def render(result: AuditResult, options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """The SARIF 2.1.0 log for ``result.findings`` as JSON text.

    ``options.dockerfile`` is the path results should point at; ``options.step_lines`` maps
    step indexes to its lines (computed from ``options.dockerfile_text``, or from the file
    itself, when omitted). Findings whose step has no line point at their policy file line.
    """
    return dumps(to_dict(result, options))
