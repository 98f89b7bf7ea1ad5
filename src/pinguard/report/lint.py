"""The reports of ``pinguard lint``: a table, the ``pinguard/lint/v1`` JSON document, SARIF.

``pinguard.buildfile.lint`` only produces ``LintFinding`` values; this module turns them (and the
files that could not be read, as ``(path, message)`` pairs) into text; every renderer sorts,
so two runs give the same bytes. Which ``--format`` name picks which renderer is
``pinguard.report.formats.LINT_FORMATS``'s, beside the other format tables.
The SARIF log is built by ``pinguard.report.sarif``, the one SARIF builder.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

from pinguard.buildfile.lint import LintFinding
from pinguard.models import Severity
from pinguard.report import sarif

LINT_SCHEMA_ID = "pinguard/lint/v1"

Errors = Sequence[tuple[str, str]]


class LintRenderer(Protocol):
    """One lint output format: the report text for findings and unreadable files."""

    def __call__(self, findings: Sequence[LintFinding], errors: Errors = ()) -> str: ...


def finding_dict(item: LintFinding) -> dict[str, object]:
    """One finding of the ``pinguard/lint/v1`` document."""
    f = item.finding
    return {
        "rule": f.rule,
        "severity": f.severity.value,
        "message": f.message,
        "package": f.package,
        "path": item.path,
        "line": item.line,
        "end_line": item.end_line,
        "instruction_line": item.instruction_line,
        "instruction_end_line": item.instruction_end_line,
        "stage": item.stage,
        "command": item.command,
        "policy_file": f.policy_file,
    }


def render_json(findings: Sequence[LintFinding], errors: Errors = ()) -> str:
    """The ``pinguard/lint/v1`` JSON document."""
    doc = {
        "schema": LINT_SCHEMA_ID,
        "findings": [finding_dict(f) for f in sorted(findings, key=LintFinding.sort_key)],
        "errors": [{"path": p, "message": m} for p, m in sorted(errors)],
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def render_sarif(findings: Sequence[LintFinding], errors: Errors = ()) -> str:
    """The SARIF 2.1.0 log (one ``pinguard-lint`` run)."""
    return sarif.dumps(sarif.lint_to_dict(findings, errors))


def render_table(findings: Sequence[LintFinding], errors: Errors = ()) -> str:
    """One ``path:line: severity [rule] message`` line per finding, then a summary line that
    counts the files that could not be linted (the CLI prints why on stderr)."""
    ordered = sorted(findings, key=LintFinding.sort_key)
    lines = [
        f"{f.path}:{f.line}: {f.severity.value} [{f.rule}] {f.finding.message}" for f in ordered
    ]
    counts = {s: sum(1 for f in ordered if f.severity is s) for s in Severity}
    summary = ", ".join(f"{counts[s]} {s.value}" for s in reversed(Severity) if counts[s])
    unread = len({path for path, _ in errors})
    lines.append(
        f"{len(ordered)} finding(s)"
        + (f": {summary}" if summary else "")
        + (f"; {unread} Dockerfile(s) could not be linted" if unread else "")
    )
    return "\n".join(lines) + "\n"
