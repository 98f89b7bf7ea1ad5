"""The text forms of a comparison: rich table, Markdown, and JSON (``pinguard/compare/v1``).

Renders an ``audit.compare.Comparison`` (A -> B) or ``PlatformComparison`` (one column per
platform). The shared base is named once in the header and never listed row by row; an
environment only one side has is marked "only in A/B" and its distributions follow as
removed/added. Every difference shows the step of B that made it and its reason (cause
chain in B, else what that step asked for). The verdict says why it is what it is
(``compare_reasons``), and each side's line names what is known of it (its digest and
platform, or that a directory has neither). SARIF and JUnit reuse the audit renderers on
``Comparison.directional()``. Deterministic: the rows come sorted from the comparison.
"""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from pinguard.audit.compare import (
    COMPARE_SCHEMA_ID,
    Comparison,
    Difference,
    PlatformComparison,
    SharedBase,
)
from pinguard.models import AuditResult, ChangeKind, Finding, ImageInfo
from pinguard.report.json import finding_dict, finding_sort_key, no_python_field
from pinguard.report.markdown import _cell, _code
from pinguard.report.options import DEFAULT_OPTIONS, RenderOptions
from pinguard.report.summary import verdict_reasons, verdict_text
from pinguard.report.table import _KIND_STYLE, _SEV_STYLE, _short
from pinguard.report.why import command_text, reasons


def difference_reasons(cmp: Comparison, d: Difference) -> list[str]:
    """The reason lines of one difference (cause chain in B, else B's step's request)."""
    step = cmp.step_of(d.step)
    if step is None and d.kind is ChangeKind.REMOVED:
        return ["B never installed it"]
    return reasons(d.kind, d.name, d.causes, step.created_by if step else None)


def step_label(cmp: Comparison, step: int | None) -> str:
    """``6`` or ``3 (shared base)``; empty when no step of B made it."""
    if step is None:
        return ""
    return f"{step} (shared base)" if cmp.base.contains(step) else str(step)


def compare_reasons(
    cmp: Comparison | PlatformComparison, options: RenderOptions
) -> tuple[str, ...]:
    """Why the comparison's verdict is what it is (``report.summary.verdict_reasons``):
    what either side (any platform) could not read, a side without Python, the findings."""
    if isinstance(cmp, PlatformComparison):
        no_python = any(r.no_python for r in cmp.results)
        findings = [f for _, f in cmp.findings]
        unproven = sum(len(r.unproven) for r in cmp.results)
    else:
        no_python = cmp.a.no_python or cmp.b.no_python
        findings = list(cmp.findings)
        unproven = len(cmp.a.unproven) + len(cmp.b.unproven)
    return verdict_reasons(len(cmp.incomplete), no_python, findings, options, unproven)


def side_text(info: ImageInfo) -> str:
    """What is known of one side besides its reference: ``sha256:…  linux/amd64``; a
    directory has neither (``no manifest digest or platform: read from a directory``)."""
    parts = [info.manifest_digest or "", str(info.platform) if info.platform else ""]
    text = "  ".join(p for p in parts if p)
    if text:
        return text
    source = "read from a directory" if info.transport == "dir" else "none recorded"
    return f"no manifest digest or platform: {source}"


def base_text(base: SharedBase) -> str:
    """One sentence naming the shared base."""
    if not base.layers:
        return "no shared base: the images share no leading layer"
    last = command_text(base.created_by)
    last = last if len(last) <= 60 else last[:59] + "\u2026"
    return (
        f"shared base: {base.layers} layer(s), through step {base.step_a} of A and step "
        f"{base.step_b} of B ({last or 'no command'}; last layer {base.last_layer}); "
        "not re-reported"
    )


def _image(info: ImageInfo) -> dict[str, Any]:
    return {
        "reference": info.reference,
        "transport": info.transport,
        "manifest_digest": info.manifest_digest,
        "platform": str(info.platform) if info.platform else None,
    }


# --------------------------------------------------------------------------- JSON


def to_dict(
    cmp: Comparison | PlatformComparison, options: RenderOptions = DEFAULT_OPTIONS
) -> dict[str, Any]:
    """The ``pinguard/compare/v1`` document of a comparison."""
    incomplete = [{"what": i.what, "why": i.why} for i in cmp.incomplete]
    verdict = options.verdict(cmp)
    if isinstance(cmp, PlatformComparison):
        names = [str(p) for p in cmp.platforms]
        return {
            "schema": COMPARE_SCHEMA_ID,
            "mode": "platforms",
            "reference": cmp.reference,
            "platforms": names,
            "images": [{**_image(r.image), **no_python_field(r, options)} for r in cmp.results],
            "rows": [
                {
                    "environment": row.environment,
                    "name": row.name,
                    "versions": dict(zip(names, row.versions, strict=True)),
                    "steps": dict(zip(names, row.steps, strict=True)),
                }
                for row in cmp.rows
            ],
            "findings": [
                {"platform": str(p), **finding_dict(f)}
                for p, f in sorted(
                    cmp.findings, key=lambda pf: (str(pf[0]), *finding_sort_key(pf[1]))
                )
            ],
            "incomplete": incomplete,
            "verdict": verdict,
        }
    base = cmp.base
    return {
        "schema": COMPARE_SCHEMA_ID,
        "mode": "images",
        "a": {**_image(cmp.a.image), **no_python_field(cmp.a, options)},
        "b": {**_image(cmp.b.image), **no_python_field(cmp.b, options)},
        "shared_base": {
            "layers": base.layers,
            "step_a": base.step_a,
            "step_b": base.step_b,
            "last_layer": base.last_layer,
            "created_by": base.created_by,
        },
        "environments": [
            {"path": m.path, "in_a": m.in_a, "in_b": m.in_b} for m in cmp.environments
        ],
        "differences": [
            {
                "environment": d.environment,
                "name": d.name,
                "kind": d.kind.value,
                "a": d.a,
                "b": d.b,
                "step": d.step,
                "in_shared_base": cmp.base.contains(d.step),
                "created_by": (s.created_by if (s := cmp.step_of(d.step)) else None),
                "causes": [
                    {"package": c.package, "version": c.version, "requirement": c.requirement}
                    for c in d.causes
                ],
                "reason": difference_reasons(cmp, d),
            }
            for d in cmp.differences
        ],
        "findings": [finding_dict(f) for f in sorted(cmp.findings, key=finding_sort_key)],
        "incomplete": incomplete,
        "verdict": verdict,
    }


def render_json(
    cmp: Comparison | PlatformComparison, options: RenderOptions = DEFAULT_OPTIONS
) -> str:
    """The JSON document, indented; the same comparison always gives the same bytes."""
    return json.dumps(to_dict(cmp, options), indent=2) + "\n"


# --------------------------------------------------------------------------- table


def _verdict_line(console: Console, verdict: str, why: tuple[str, ...]) -> None:
    console.print(
        Text(
            f"verdict: {verdict_text(verdict, why)}",
            style="bold green" if verdict == "pass" else "bold red",
        ),
        soft_wrap=True,
    )


def _findings_table(console: Console, items: list[tuple[str, Finding]]) -> None:
    """Findings, worst first; each message prefixed with its platform when there is one."""
    if not items:
        return
    table = Table(title="findings", title_justify="left")
    for col in ("severity", "rule", "step", "package", "message"):
        table.add_column(col, overflow="fold")
    for platform, f in items:
        table.add_row(
            Text(
                f.severity.value + (" (waived)" if f.waived else ""),
                style=_SEV_STYLE[f.severity] if not f.waived else "dim",
            ),
            f.rule,
            str(f.step or ""),
            f.package or "",
            (f"[{platform}] " if platform else "") + f.message,
        )
    console.print(table)


def no_python_sides(
    cmp: Comparison | PlatformComparison, options: RenderOptions
) -> list[tuple[str, str]]:
    """(side, status line) for each side without a Python environment: ``A``/``B``, or the
    platform."""
    if isinstance(cmp, PlatformComparison):
        sides = [(str(p), r) for p, r in zip(cmp.platforms, cmp.results, strict=True)]
    else:
        sides = [("A", cmp.a), ("B", cmp.b)]
    return [(side, text) for side, r in sides if (text := options.no_python_text(r)) is not None]


def _no_python_lines(
    console: Console, cmp: Comparison | PlatformComparison, options: RenderOptions
) -> None:
    for side, text in no_python_sides(cmp, options):
        console.print(Text(f"{side}: {text}", style="bold yellow"))


def render_table(
    cmp: Comparison | PlatformComparison, options: RenderOptions = DEFAULT_OPTIONS
) -> str:
    """The tables as plain text, ``options.width`` columns wide."""
    buf = io.StringIO()
    console = Console(file=buf, width=options.width, force_terminal=False, soft_wrap=False)
    draw_table(cmp, console, options)
    return buf.getvalue()


def draw_table(
    cmp: Comparison | PlatformComparison,
    console: Console,
    options: RenderOptions = DEFAULT_OPTIONS,
) -> None:
    """Draw the comparison onto ``console``."""
    if isinstance(cmp, PlatformComparison):
        console.print(Text.assemble(("compare platforms of ", "bold"), cmp.reference))
        for p, r in zip(cmp.platforms, cmp.results, strict=True):
            console.print(Text(f"  {p}: {r.image.manifest_digest or ''}", style="dim"))
        _no_python_lines(console, cmp, options)
        if cmp.rows:
            table = Table(title="versions that differ between platforms", title_justify="left")
            table.add_column("environment", style="dim", overflow="fold")
            table.add_column("package", overflow="fold")
            for p in cmp.platforms:
                table.add_column(str(p), overflow="fold")
            for row in cmp.rows:
                table.add_row(row.environment, row.name, *(v or "-" for v in row.versions))
            console.print(table)
        else:
            console.print("every platform carries the same versions")
        pf = sorted(cmp.findings, key=lambda x: (str(x[0]), *finding_sort_key(x[1])))
        _findings_table(console, [(str(p), f) for p, f in pf])
    else:
        console.print(
            Text.assemble(
                ("compare ", "bold"), cmp.a.image.reference, " -> ", cmp.b.image.reference
            )
        )
        for side, info in (("A", cmp.a.image), ("B", cmp.b.image)):
            console.print(Text(f"  {side}: {side_text(info)}", style="dim"), soft_wrap=True)
        _no_python_lines(console, cmp, options)
        console.print(Text(base_text(cmp.base), style="dim"))
        for m in cmp.environments:
            if m.status != "both":
                side = "removed" if m.in_a else "added"
                console.print(
                    Text(f"environment {m.path}: {m.status} (its distributions show as {side})")
                )
        if cmp.differences:
            table = Table(title="differences from A to B", title_justify="left")
            table.add_column("environment", style="dim", overflow="fold")
            table.add_column("package", overflow="fold")
            table.add_column("change")
            table.add_column("A", overflow="fold")
            table.add_column("B", overflow="fold")
            table.add_column("step of B", overflow="fold")
            table.add_column("why (nearest cause first)", overflow="fold")
            for d in cmp.differences:
                step = cmp.step_of(d.step)
                table.add_row(
                    d.environment,
                    d.name,
                    Text(d.kind.value, style=_KIND_STYLE[d.kind]),
                    d.a or "-",
                    d.b or "-",
                    step_label(cmp, d.step)
                    + (f" {_short(step.created_by, 50)}" if step is not None else ""),
                    "\n".join(
                        f"{'  ' * i}{line}" for i, line in enumerate(difference_reasons(cmp, d))
                    ),
                )
            console.print(table)
        else:
            console.print("no Python distribution differs between A and B")
        _findings_table(console, [("", f) for f in sorted(cmp.findings, key=finding_sort_key)])
    for item in cmp.incomplete:
        console.print(Text(f"incomplete: {item.what}: {item.why}", style="bold yellow"))
    _verdict_line(console, options.verdict(cmp), compare_reasons(cmp, options))


# --------------------------------------------------------------------------- Markdown


def render_markdown(
    cmp: Comparison | PlatformComparison, options: RenderOptions = DEFAULT_OPTIONS
) -> str:
    """A pull-request comment: verdict first, then the differing rows, then findings."""
    verdict = options.verdict(cmp)
    mark = ":x:" if verdict == "fail" else ":white_check_mark:"
    why = compare_reasons(cmp, options)
    tail = f" ({_cell('; '.join(why))})" if why else ""
    lines: list[str]
    if isinstance(cmp, PlatformComparison):
        lines = [
            f"### {mark} pinguard compare: **{verdict}** for {_code(cmp.reference)}{tail}",
            "",
        ]
        names = [str(p) for p in cmp.platforms]
        if cmp.rows:
            lines += [
                "| Environment | Package | " + " | ".join(_cell(n) for n in names) + " |",
                "|---|---|" + "---|" * len(names),
            ]
            lines += [
                f"| {_code(r.environment)} | {_code(r.name)} | "
                + " | ".join(_cell(v or "-") for v in r.versions)
                + " |"
                for r in cmp.rows
            ]
        else:
            lines.append("Every platform carries the same versions.")
        found = [(str(p), f) for p, f in cmp.findings if not f.waived]
    else:
        lines = [
            f"### {mark} pinguard compare: **{verdict}** for {_code(cmp.a.image.reference)} "
            f"-> {_code(cmp.b.image.reference)}{tail}",
            "",
            _cell(base_text(cmp.base)) + ".",
        ]
        for m in cmp.environments:
            if m.status != "both":
                lines += ["", f"Environment {_code(m.path)}: {m.status}."]
        if cmp.differences:
            lines += [
                "",
                "| Environment | Package | Change | A | B | Step of B | Why |",
                "|---|---|---|---|---|---|---|",
            ]
            lines += [
                f"| {_code(d.environment)} | {_code(d.name)} | {d.kind.value} | "
                f"{_cell(d.a or '-')} | {_cell(d.b or '-')} | {_cell(step_label(cmp, d.step))} | "
                f"{_cell('; '.join(difference_reasons(cmp, d)))} |"
                for d in cmp.differences
            ]
        else:
            lines += ["", "No Python distribution differs between A and B."]
        found = [("", f) for f in cmp.findings if not f.waived]
    for side, text in no_python_sides(cmp, options):
        lines += ["", f"**{_cell(side)}: {_cell(text)}**"]
    if found:
        lines += ["", "| Severity | Rule | Package | Step | Message |", "|---|---|---|---|---|"]
        lines += [
            f"| **{f.severity.value}** | {_code(f.rule)} | {_code(f.package or '')} | "
            f"{'' if f.step is None else f.step} | {_cell((f'[{p}] ' if p else '') + f.message)} |"
            for p, f in found
        ]
    if cmp.incomplete:
        lines += ["", "**Could not be read** (the gate cannot pass while these remain):", ""]
        lines += [f"- {_cell(i.what)}: {_cell(i.why)}" for i in cmp.incomplete]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- SARIF, JUnit


def as_result(cmp: Comparison | PlatformComparison) -> AuditResult:
    """One judged ``AuditResult`` for the audit's SARIF and JUnit renderers: B with the
    A -> B differences, or, for platforms, the last platform's image carrying every
    platform's findings, each message prefixed with its platform."""
    if isinstance(cmp, Comparison):
        return cmp.directional()
    findings = tuple(dataclasses.replace(f, message=f"[{p}] {f.message}") for p, f in cmp.findings)
    return dataclasses.replace(cmp.results[-1], findings=findings, incomplete=cmp.incomplete)


def render_sarif(
    cmp: Comparison | PlatformComparison, options: RenderOptions = DEFAULT_OPTIONS
) -> str:
    from pinguard.report import sarif

    doc = sarif.to_dict(as_result(cmp), options, statuses=no_python_sides(cmp, options))
    return sarif.dumps(doc)


def render_junit(
    cmp: Comparison | PlatformComparison, options: RenderOptions = DEFAULT_OPTIONS
) -> str:
    from pinguard.report import junit

    return junit.render(as_result(cmp), options, statuses=no_python_sides(cmp, options))
