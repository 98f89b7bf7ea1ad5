"""The fleet report: images x the packages that matter, failing images first.

``FLEET_FORMATS`` maps ``pinguard fleet --format`` to a renderer of a ``FleetSummary``: a
plain-text table (one row per image: status, exit code, the version of each package column,
then the reason a failing image failed), JSON (``pinguard/fleet/v1``, schema in
``schemas/fleet-v1.schema.json``) and a self-contained HTML page. Every format gives the same
bytes for the same summary.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Mapping
from typing import Any

from pinguard import __version__
from pinguard.fleet.records import ImageRecord
from pinguard.fleet.summary import FleetSummary

SCHEMA = "pinguard/fleet/v1"


def _image(record: ImageRecord) -> str:
    return f"{record.reference} ({record.platform})" if record.platform else record.reference


def _why(record: ImageRecord) -> str:
    if record.error:
        return record.error
    parts = []
    if record.errors:
        parts.append(f"{record.errors} error finding(s)")
    if record.warnings:
        parts.append(f"{record.warnings} warning(s)")
    if record.incomplete:
        parts.append(f"{record.incomplete} item(s) unread")
    if not record.distributions and record.verdict != "pending":
        parts.append("no Python environment")
    return "; ".join(parts)


def render_table(summary: FleetSummary) -> str:
    counts = summary.counts()
    head = ["image", "status", "exit", *summary.packages]
    rows = [
        [
            _image(r),
            r.verdict,
            str(r.exit_code),
            *(summary.cell(r, p) for p in summary.packages),
        ]
        for r in summary.rows
    ]
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    lines = [
        f"pinguard {__version__} fleet: {counts['images']} image(s), {counts['pass']} pass, "
        f"{counts['fail']} fail, {counts['error']} could not be audited, "
        f"{counts['pending']} pending",
        "",
        "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip(),
        "  ".join("-" * w for w in widths),
    ]
    for record, row in zip(summary.rows, rows, strict=True):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        why = _why(record) if record.failing else ""
        if why:
            lines.append(f"    {why}")
    return "\n".join(lines) + "\n"


def to_json(summary: FleetSummary) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "pinguard": __version__,
        "exit_code": summary.exit_code,
        "counts": summary.counts(),
        "packages": list(summary.packages),
        "images": [
            {
                "reference": r.reference,
                "platform": r.platform,
                "manifest_digest": r.manifest_digest,
                "verdict": r.verdict,
                "exit_code": r.exit_code,
                "error": r.error,
                "reason": _why(r) if r.failing else None,
                "attestation": r.attestation,
                "packages": {p: list(r.versions(p)) for p in summary.packages},
                "notes": list(r.notes),
            }
            for r in summary.rows
        ],
    }


def render_json(summary: FleetSummary) -> str:
    return json.dumps(to_json(summary), indent=2, sort_keys=True) + "\n"


_STYLE = (
    "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}"
    "tr.fail td.status{color:#b00;font-weight:bold}tr.error td.status{color:#fff;"
    "background:#b00;font-weight:bold}tr.pending td.status{color:#a60}td.why{color:#555}"
)


def render_html(summary: FleetSummary) -> str:
    e = html.escape
    counts = summary.counts()
    head = "".join(f"<th>{e(h)}</th>" for h in ["image", "status", "exit", *summary.packages])
    body = []
    for r in summary.rows:
        cells = "".join(f"<td>{e(summary.cell(r, p))}</td>" for p in summary.packages)
        why = e(_why(r)) if r.failing else ""
        body.append(
            f'<tr class="{e(r.verdict)}"><td>{e(_image(r))}</td>'
            f'<td class="status">{e(r.verdict)}</td><td>{r.exit_code}</td>{cells}'
            f'<td class="why">{why}</td></tr>'
        )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>pinguard fleet</title><style>{_STYLE}</style></head><body>\n"
        f"<h1>Fleet: {counts['images']} image(s)</h1>\n"
        f"<p>pinguard {e(__version__)}: {counts['pass']} pass, {counts['fail']} fail, "
        f"{counts['error']} could not be audited, {counts['pending']} pending</p>\n"
        f"<table><thead><tr>{head}<th>why</th></tr></thead><tbody>\n"
        + "\n".join(body)
        + "\n</tbody></table></body></html>\n"
    )


FLEET_FORMATS: Mapping[str, Callable[[FleetSummary], str]] = {
    "table": render_table,
    "json": render_json,
    "html": render_html,
}
