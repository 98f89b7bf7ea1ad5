"""Markdown for a pull-request comment: the verdict first, then what to fix, then the rest.

The comment opens with a one-line verdict (pass or fail at ``fail_on``, and why:
``report.summary.verdict_reasons``), then the counts, the
image, pinguard's version and the policy, the summary the table leads with (environments
and their change counts, the steps that changed something: ``report.summary``), lists
the unwaived findings in a table (worst first, capped at ``max_rows`` so a comment stays
under the forge's size limit), then what could not be read, and folds the waived findings
into a ``<details>`` block. Table cells are escaped (pipes, newlines, HTML) so a package or
message can never break the layout. Pure and deterministic.
"""

from __future__ import annotations

import html

from pinguard import __version__
from pinguard.models import AuditResult, Finding, Severity
from pinguard.report.options import DEFAULT_OPTIONS, RenderOptions
from pinguard.report.summary import (
    KINDS,
    audit_reasons,
    header,
    other_packages_text,
    summarize,
)

_ICON = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "info"}


def _cell(text: str) -> str:
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def _code(text: str) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text}{pad}{fence}" if text else ""


def _row(f: Finding) -> str:
    cells = [
        f"**{_ICON[f.severity]}**",
        _code(f.rule),
        _code(f.package or ""),
        _cell((" -> " if f.rule == "downgrade" else ", ").join(f.versions)),
        "" if f.step is None else str(f.step),
        _code(f.environment or ""),
        _cell(f.message),
    ]
    return "| " + " | ".join(cells) + " |"


_HEADER = (
    "| Severity | Rule | Package | Versions | Step | Environment | Message |\n"
    "|---|---|---|---|---|---|---|"
)


def _count(findings: list[Finding]) -> str:
    parts = []
    for sev, word in (
        (Severity.ERROR, "error"),
        (Severity.WARNING, "warning"),
        (Severity.INFO, "info"),
    ):
        n = sum(1 for f in findings if f.severity is sev)
        if n:
            parts.append(f"{n} {word}" + ("s" if n != 1 and word != "info" else ""))
    return ", ".join(parts) or "no findings"


def _summary(result: AuditResult, options: RenderOptions) -> list[str]:
    """The summary the table leads with: environments and their counts, then the steps that
    changed something (at most ``max_rows``)."""
    summary = summarize(result, options.show_all)
    lines: list[str] = []
    if summary.environments:
        kinds = [i for i in range(len(KINDS)) if any(e.counts[i] for e in summary.environments)]
        heads = ["Environment", "Python", "Distributions", *(KINDS[i].value for i in kinds)]
        heads.append("unmet")
        lines += ["", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
        for env in summary.environments:
            cells = [_code(env.path), _cell(env.python), str(env.distributions)]
            cells += [str(env.counts[i]) if env.counts[i] else "" for i in kinds]
            cells.append(f"**{env.unmet}**" if env.unmet else "")
            lines.append("| " + " | ".join(cells) + " |")
    others = other_packages_text(result)
    if others is not None:
        lines += ["", _cell(others[0].upper() + others[1:]) + "."]
    if summary.steps:
        lines += ["", "| Step | Changes | Command |", "|---|---|---|"]
        for step in summary.steps[: options.max_rows]:
            command = step.command if len(step.command) <= 100 else step.command[:99] + "\u2026"
            lines.append(f"| {step.index} | {_cell(step.text())} | {_code(command)} |")
        if len(summary.steps) > options.max_rows:
            lines += ["", f"... and {len(summary.steps) - options.max_rows} more steps."]
    return lines


def render(result: AuditResult, options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """The PR-comment Markdown for ``result`` (findings as already evaluated)."""
    fail_on = options.fail_on
    max_rows, title = options.max_rows, options.title
    verdict = options.verdict(result)
    open_ = [f for f in result.findings if not f.waived]
    waived = [f for f in result.findings if f.waived]
    mark = ":x:" if verdict == "fail" else ":white_check_mark:"
    why = audit_reasons(result, options)
    lines = [
        f"### {mark} {_cell(title)}: **{verdict}** for {_code(result.image.reference)}"
        + (f" ({_cell('; '.join(why))})" if why else ""),
        "",
        f"{_count(open_)}"
        + (f"; {len(waived)} waived" if waived else "")
        + (f"; {len(result.incomplete)} incomplete" if result.incomplete else "")
        + (f" (failing at {fail_on.value} or above)" if fail_on is not None else " (report only)"),
    ]
    image = result.image
    facts = [
        f"digest {_code(image.manifest_digest)}" if image.manifest_digest else "",
        f"platform {_code(str(image.platform))}" if image.platform else "",
    ]
    if any(facts):
        lines.append("")
        lines.append("Image " + ", ".join(f for f in facts if f) + ".")
    policy = dict(header(result))["policy"]
    lines += ["", f"pinguard {_code(__version__)}, policy: {_cell(policy)}."]
    lines += _summary(result, options)
    no_python = options.no_python_text(result)
    if no_python is not None:
        lines += ["", f"**{_cell(no_python)}**"]
    if open_:
        lines += ["", _HEADER]
        lines += [_row(f) for f in open_[:max_rows]]
        if len(open_) > max_rows:
            lines += ["", f"... and {len(open_) - max_rows} more (see the full report)."]
    if result.incomplete:
        lines += ["", "**Could not be read** (the gate cannot pass while these remain):", ""]
        lines += [
            f"- {_cell(i.what)}: {_cell(i.why)}"
            for i in sorted(result.incomplete, key=lambda i: (i.what, i.why))
        ]
    if waived:
        lines += [
            "",
            f"<details><summary>{len(waived)} waived finding(s)</summary>",
            "",
            _HEADER.replace("| Message |", "| Message | Waiver |").replace(
                "|---|---|---|---|---|---|---|", "|---|---|---|---|---|---|---|---|"
            ),
        ]
        lines += [_row(f) + f" {_cell(f.waiver_reason or '')} |" for f in waived[:max_rows]]
        if len(waived) > max_rows:
            lines += ["", f"... and {len(waived) - max_rows} more."]
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"
