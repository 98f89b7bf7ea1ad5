"""SARIF 2.1.0: findings as results of the ``pinguard`` tool, for code-scanning dashboards.

One run, whose driver lists every rule of the catalogue (sorted, so ``ruleIndex`` is
stable). Each finding becomes a result with its level (info maps to ``note``), a stable
partial fingerprint, its package, environment, step and versions as properties, and, when
waived, an accepted external suppression carrying the waiver's reason. A result points at
the Dockerfile line of the step that caused it when a Dockerfile and a step-to-line mapping
are known (`pinguard.build.history.dockerfile_step_lines` builds that mapping by aligning the
image history with the Dockerfile's last stage), and otherwise at the policy file line that
produced it. Things that could not be read become error notifications on the invocation,
which is then marked unsuccessful. Apart from reading the Dockerfile when only its path is
given, ``render`` is a pure function with sorted, deterministic output.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from pinguard import __version__
from pinguard.build.history import dockerfile_step_lines
from pinguard.models import AuditResult, Finding, Severity
from pinguard.policy.model import RULES

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"

_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _uri(path: str) -> str:
    """An RFC 3986 URI reference for a file path (absolute paths become file: URIs)."""
    p = Path(path)
    if p.is_absolute():
        return p.as_uri()
    return quote(str(PurePosixPath(*p.parts)), safe="/")


def _fingerprint(f: Finding) -> str:
    key = "\x1f".join((f.rule, f.package or "", f.environment or "", *f.versions))
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _location(f: Finding, dockerfile: str | None, step_lines: Mapping[int, int]) -> list[Any]:
    if dockerfile is not None and f.step is not None and f.step in step_lines:
        uri, line = _uri(dockerfile), step_lines[f.step]
        what = f"step {f.step}"
    elif f.policy_file is not None:
        uri, line = _uri(f.policy_file), max(1, f.policy_line or 1)
        what = "policy entry"
    else:
        return []
    return [
        {
            "physicalLocation": {"artifactLocation": {"uri": uri}, "region": {"startLine": line}},
            "message": {"text": what},
        }
    ]


def to_dict(
    result: AuditResult,
    *,
    dockerfile: str | None = None,
    step_lines: Mapping[int, int] | None = None,
    dockerfile_text: str | None = None,
) -> dict[str, Any]:
    """The SARIF log as plain data (see ``render``)."""
    if dockerfile is not None and step_lines is None:
        text = dockerfile_text
        if text is None:
            try:
                text = Path(dockerfile).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                text = ""
        step_lines = dockerfile_step_lines(text, result.steps, dockerfile) if text else {}
    step_lines = step_lines or {}

    rule_ids = sorted(RULES)
    index = {r: i for i, r in enumerate(rule_ids)}
    rules = [
        {
            "id": r,
            "name": "".join(w.capitalize() for w in r.split("-")),
            "shortDescription": {"text": RULES[r].title},
            "fullDescription": {"text": RULES[r].description},
            "defaultConfiguration": {"level": _LEVEL[RULES[r].severity]},
        }
        for r in rule_ids
    ]
    results = []
    for f in result.findings:
        item: dict[str, Any] = {
            "ruleId": f.rule,
            "level": _LEVEL[f.severity],
            "message": {"text": f.message},
        }
        if f.rule in index:
            item["ruleIndex"] = index[f.rule]
        locations = _location(f, dockerfile, step_lines)
        if locations:
            item["locations"] = locations
        item["partialFingerprints"] = {"pinguardFinding/v1": _fingerprint(f)}
        props: dict[str, Any] = {"versions": list(f.versions)}
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
        results.append(item)

    notifications = [
        {"level": "error", "message": {"text": f"incomplete: {i.what}: {i.why}"}}
        for i in result.incomplete
    ]
    invocation: dict[str, Any] = {"executionSuccessful": not result.incomplete}
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    image = result.image
    run_props: dict[str, Any] = {"image": image.reference}
    if image.manifest_digest:
        run_props["manifestDigest"] = image.manifest_digest
    if image.platform is not None:
        run_props["platform"] = str(image.platform)
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "pinguard",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "rules": rules,
                    }
                },
                "invocations": [invocation],
                "columnKind": "unicodeCodePoints",
                "results": results,
                "properties": run_props,
            }
        ],
    }


def render(
    result: AuditResult,
    *,
    dockerfile: str | None = None,
    step_lines: Mapping[int, int] | None = None,
    dockerfile_text: str | None = None,
) -> str:
    """The SARIF 2.1.0 log for ``result.findings`` as JSON text.

    ``dockerfile`` is the path results should point at; ``step_lines`` maps step indexes to
    its lines (computed from ``dockerfile_text``, or from the file itself, when omitted).
    Findings whose step has no line point at their policy file line instead.
    """
    data = to_dict(
        result, dockerfile=dockerfile, step_lines=step_lines, dockerfile_text=dockerfile_text
    )
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
