"""SARIF 2.1.0: findings as results of the ``pinguard`` tool, for code-scanning dashboards.

One run, whose driver lists every rule of the catalogue (sorted, so ``ruleIndex`` is
stable). Each finding becomes a result with its level (info maps to ``note``), a stable
partial fingerprint, its package, environment, step and versions as properties, and, when
waived, an accepted external suppression carrying the waiver's reason. A result points at
the Dockerfile line of the step that caused it when a Dockerfile and a step-to-line mapping
are known (``dockerfile_step_lines`` builds that mapping by aligning the image history with
the Dockerfile's last stage), and otherwise at the policy file line that produced it. Things
that could not be read become error notifications on the invocation, which is then marked
unsuccessful. Apart from reading the Dockerfile when only its path is given, ``render`` is a
pure function with sorted, deterministic output.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from pinguard import __version__
from pinguard.models import AuditResult, Finding, Severity, Step
from pinguard.policy.model import RULES
from pinguard.report.options import DEFAULT_OPTIONS, RenderOptions

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"

_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_PREFIX = re.compile(r"^(?:RUN\s+)?(?:\|\d+\s+(?:\S+=\S*\s+)*)?(?:/bin/(?:ba)?sh\s+-c\s+)?")


def _uri(path: str) -> str:
    """An RFC 3986 URI reference for a file path (absolute paths become file: URIs)."""
    p = Path(path)
    if p.is_absolute():
        return p.as_uri()
    return quote(str(PurePosixPath(*p.parts)), safe="/")


def _norm(text: str) -> str:
    return " ".join(text.replace("\\\n", " ").split())


def _history_text(created_by: str) -> str:
    text = created_by.strip().removesuffix("# buildkit").strip()
    text = text.replace("#(nop)", "").strip()
    text = _PREFIX.sub("", text, count=1)
    # buildah and docker write "/bin/sh -c #(nop) COPY ..." for non-RUN steps
    return _norm(_PREFIX.sub("", text, count=1))


def dockerfile_step_lines(
    text: str, steps: Sequence[Step], path: str = "Dockerfile"
) -> dict[int, int]:
    """Map step indexes to the first line of the Dockerfile instruction that made them.

    Steps are aligned from the end with the instructions of the last stage: a RUN step
    matches a RUN instruction with the same command (whitespace-insensitive, or one
    containing the other), any other step an instruction with the keyword its history entry
    names. Steps that match nothing (base-image steps, mostly) are left out. A Dockerfile
    that cannot be parsed gives an empty mapping.
    """
    from pinguard.build.dockerfile import parse

    try:
        parsed = parse(text, path=path)
    except ValueError:
        return {}
    if not parsed.stages:
        return {}
    instructions = [i for i in parsed.stages[-1].instructions if i.keyword != "FROM"]
    mapping: dict[int, int] = {}
    j = len(instructions) - 1
    for step in reversed(steps):
        history = _history_text(step.created_by)
        if not history:
            continue
        first_word = history.split()[0].upper()
        for k in range(j, -1, -1):
            ins = instructions[k]
            if ins.keyword == "RUN":
                command = _norm(" ".join(ins.exec_form) if ins.exec_form else ins.args)
                ok = bool(command) and (
                    command == history or command in history or history in command
                )
            else:
                ok = first_word == ins.keyword
            if ok:
                mapping[step.index] = ins.start_line
                j = k - 1
                break
    return mapping


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


def to_dict(result: AuditResult, options: RenderOptions = DEFAULT_OPTIONS) -> dict[str, Any]:
    """The SARIF log as plain data (see ``render``)."""
    dockerfile, step_lines = options.dockerfile, options.step_lines
    dockerfile_text = options.dockerfile_text
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


def render(result: AuditResult, options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """The SARIF 2.1.0 log for ``result.findings`` as JSON text.

    ``options.dockerfile`` is the path results should point at; ``options.step_lines`` maps
    step indexes to its lines (computed from ``options.dockerfile_text``, or from the file
    itself, when omitted). Findings whose step has no line point at their policy file line.
    """
    return json.dumps(to_dict(result, options), indent=2, ensure_ascii=False) + "\n"
