"""One self-contained HTML file for an audit or a comparison, rendered with Jinja2.

Owns the page people look at: the image header (reference, digest, platform, verdict and
why: ``report.summary.verdict_reasons``, pinguard's version, the policy), the summary the
table leads with (``report.summary``) and the findings first; then, per environment, a
timeline whose columns are the build steps and whose rows are the watched packages (policy
pins, anything any step changed, anything with a finding), each cell holding the version
after that step, marked when the step changed it (downgrades and unmet requirements stand
out) and carrying its reason in a ``<details>`` element (and a ``title``), so it reads with
scripts off; each column head names its step by what it installed (``why.headline``),
wrapped rather than cut; the inline script only adds a row filter. A comparison puts A and B
next to each other (differences table, then both timelines side by side); a platform
comparison has one column per platform. The templates ship as package data in
``pinguard/report/templates``; autoescaping is on, no external resource is referenced, and
the output is deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pinguard import __version__
from pinguard.audit.compare import Comparison, PlatformComparison
from pinguard.models import AuditResult, ChangeKind, Finding, Snapshot
from pinguard.report.compare import base_text, compare_reasons, difference_reasons, step_label
from pinguard.report.json import finding_sort_key
from pinguard.report.options import DEFAULT_OPTIONS, RenderOptions
from pinguard.report.summary import KINDS, audit_reasons, header, listed, summarize
from pinguard.report.why import command_text, headline, reasons

if TYPE_CHECKING:
    import jinja2

_MARK = {
    ChangeKind.ADDED: "+",
    ChangeKind.REMOVED: "\u2212",
    ChangeKind.UPGRADED: "\u25b2",
    ChangeKind.DOWNGRADED: "\u25bc",
    ChangeKind.REINSTALLED: "\u21bb",
    ChangeKind.CHANGED: "?",
}


@dataclass(frozen=True, slots=True)
class Cell:
    """One (package, step) cell of a timeline."""

    version: str
    kind: str = ""  # a ChangeKind value when the step changed it, else ""
    mark: str = ""
    why: tuple[str, ...] = ()
    unmet: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        return "; ".join((*self.why, *self.unmet))


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    cells: tuple[Cell, ...]
    flagged: bool = False  # a finding names it, or a cell is downgraded / unmet


@dataclass(frozen=True, slots=True)
class Column:
    index: int
    anchor: str
    label: str
    command: str
    layer: str
    empty: bool
    headline: str = ""  # what the step installed (why.headline), for the column head


@dataclass(frozen=True, slots=True)
class Timeline:
    environment: str
    anchor: str
    python: str
    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    total: int = 0  # distributions in the final state


@dataclass(frozen=True, slots=True)
class Side:
    """One audited image as the template sees it."""

    key: str  # anchor prefix: "a", "b", "p0", ...
    label: str
    reference: str
    digest: str
    platform: str
    verdict: str
    timelines: tuple[Timeline, ...]
    steps: tuple[Column, ...]
    notes: tuple[str, ...] = field(default=())
    no_python: str = ""  # the status line when the image has no Python environment


def _short(command: str, width: int = 80) -> str:
    text = command_text(command)
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def _versions(snapshot: Snapshot, path: str) -> dict[str, str]:
    env = snapshot.environment(path)
    return {} if env is None else {n: d.raw_version for n, d in env.by_name().items()}


def _timelines(
    result: AuditResult,
    key: str,
    watch: Iterable[str],
    only: set[tuple[str, str]] | None,
    base_step: int | None = None,
    show_all: bool = True,
) -> tuple[tuple[Timeline, ...], tuple[Column, ...]]:
    """Timelines per environment, and every step as a column (for the step list). With
    ``base_step``, the steps up to it are one "shared base" column (not re-reported); without
    ``show_all``, rows come only from the changes ``summary.listed`` keeps."""
    steps = result.steps
    snapshots = result.snapshots if len(result.snapshots) == len(steps) else ()
    all_columns = tuple(
        Column(
            s.index,
            f"{key}-step-{s.index}",
            f"{s.index}",
            _short(s.created_by),
            s.layer_digest or "",
            s.layer_digest is None,
            _short(headline(s.created_by), 120),
        )
        for s in steps
    )
    first = sum(1 for s in steps if base_step is not None and s.index <= base_step)
    columns = all_columns[first:]
    if first:
        columns = (
            Column(
                steps[first - 1].index,
                f"{key}-step-{steps[first - 1].index}",
                f"1\u2013{steps[first - 1].index} (shared base)",
                "the layers both images share",
                "",
                False,
            ),
            *columns,
        )
    flagged = {(f.environment, f.package) for f in result.findings if f.package}
    watched = set(watch)
    paths = sorted({e.path for snap in snapshots for e in snap.environments})
    timelines = []
    for n, path in enumerate(paths):
        per_step = [_versions(snap, path) for snap in snapshots] or [{} for _ in steps]
        changed: dict[tuple[str, int], Cell] = {}
        unmet: dict[tuple[str, int], list[str]] = {}
        names: set[str] = set()
        for step in steps:
            shown = {id(c) for c in listed(result, step, show_all)}
            for c in step.changes:
                if c.environment != path:
                    continue
                if id(c) in shown:
                    names.add(c.name)
                changed[(c.name, step.index)] = Cell(
                    c.after or "",
                    c.kind.value,
                    _MARK[c.kind],
                    tuple(reasons(c.kind, c.name, c.causes, step.created_by)),
                )
            for u in step.unmet:
                if u.environment == path:
                    names.add(u.package)
                    have = f"{u.installed} installed" if u.installed else "not installed"
                    unmet.setdefault((u.package, step.index), []).append(
                        f"unmet: requires {u.requirement}, {have}"
                    )
        final = per_step[-1] if per_step else {}
        names |= {w for w in watched if w in final}
        names |= {p for e, p in flagged if e == path and p is not None}
        if only is not None:
            names = {name for name in names if (path, name) in only}
        rows = []
        for name in sorted(names):
            cells = []
            if first:
                cells.append(Cell(per_step[first - 1].get(name, "")))
            for i, step in enumerate(steps):
                if i < first:
                    continue
                cell = changed.get((name, step.index)) or Cell(per_step[i].get(name, ""))
                notes = unmet.get((name, step.index))
                if notes:
                    cell = Cell(cell.version, cell.kind, cell.mark, cell.why, tuple(notes))
                cells.append(cell)
            bad = any(c.kind == "downgraded" or c.unmet for c in cells)
            rows.append(Row(name, tuple(cells), bad or (path, name) in flagged))
        env = result.final.environment(path)
        timelines.append(
            Timeline(
                path,
                f"{key}-env-{n}",
                (env.python or "?") if env else "?",
                columns,
                tuple(rows),
                len(env.distributions) if env else 0,
            )
        )
    return tuple(timelines), all_columns


def _side(
    result: AuditResult,
    key: str,
    label: str,
    verdict: str,
    watch: Iterable[str] = (),
    only: set[tuple[str, str]] | None = None,
    base_step: int | None = None,
    *,
    no_python: str | None = None,
    show_all: bool = True,
) -> Side:
    timelines, columns = _timelines(result, key, watch, only, base_step, show_all)
    image = result.image
    return Side(
        key,
        label,
        image.reference,
        image.manifest_digest or "",
        str(image.platform) if image.platform else "",
        verdict,
        timelines,
        columns,
        tuple(result.notes),
        no_python or "",
    )


def _finding(f: Finding, platform: str = "") -> dict[str, Any]:
    return {
        "severity": f.severity.value,
        "rule": f.rule,
        "package": f.package or "",
        "environment": f.environment or "",
        "step": "" if f.step is None else str(f.step),
        "message": (f"[{platform}] " if platform else "") + f.message,
        "waived": f.waived,
        "waiver": f.waiver_reason or "",
    }


_ENV: jinja2.Environment | None = None


def _environment() -> jinja2.Environment:
    """The template environment, made on first use: Jinja2 is imported only when an HTML
    report is rendered, so the guard's zipapp (which ships without it) never needs it."""
    global _ENV  # noqa: PLW0603 - one template environment per process
    if _ENV is None:
        import jinja2

        _ENV = jinja2.Environment(
            loader=jinja2.PackageLoader("pinguard.report", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
        )
    return _ENV


def _page(context: Mapping[str, Any]) -> str:
    return _environment().get_template("report.html.j2").render(version=__version__, **context)


def render(result: AuditResult, options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """The HTML report of one audit; ``options.watch`` adds rows (the policy's pins)."""
    fail_on = options.fail_on
    verdict = options.verdict(result)
    side = _side(
        result,
        "a",
        "",
        verdict,
        options.watch,
        no_python=options.no_python_text(result),
        show_all=options.show_all,
    )
    summary = summarize(result, options.show_all)
    kinds = [i for i in range(len(KINDS)) if any(e.counts[i] for e in summary.environments)]
    return _page(
        {
            "mode": "audit",
            "header": header(result),
            "summary": summary,
            "kinds": [(i, KINDS[i].value) for i in kinds],
            "title": f"pinguard audit: {result.image.reference}",
            "verdict": verdict,
            "reasons": audit_reasons(result, options),
            "sides": [side],
            "findings": [_finding(f) for f in sorted(result.findings, key=finding_sort_key)],
            "incomplete": [(i.what, i.why) for i in result.incomplete],
            "fail_on": fail_on.value if fail_on else "never",
            "packages": result.final.other_packages(),  # records no typed view lists
        }
    )


def render_comparison(
    cmp: Comparison | PlatformComparison, options: RenderOptions = DEFAULT_OPTIONS
) -> str:
    """The HTML report of a comparison (two images side by side, or one column per platform)."""
    fail_on, watch = options.fail_on, options.watch
    verdict = options.verdict(cmp)
    incomplete = [(i.what, i.why) for i in cmp.incomplete]
    if isinstance(cmp, PlatformComparison):
        names = [str(p) for p in cmp.platforms]
        only = {(r.environment, r.name) for r in cmp.rows} | {
            (f.environment, f.package) for _, f in cmp.findings if f.package and f.environment
        }
        sides = [
            _side(
                r,
                f"p{i}",
                names[i],
                options.verdict(r),
                watch,
                only,
                no_python=options.no_python_text(r),
            )
            for i, r in enumerate(cmp.results)
        ]
        rows = [
            {
                "environment": r.environment,
                "name": r.name,
                "cells": [
                    {"version": v or "", "step": "" if s is None else str(s)}
                    for v, s in zip(r.versions, r.steps, strict=True)
                ],
            }
            for r in cmp.rows
        ]
        pf = sorted(cmp.findings, key=lambda x: (str(x[0]), *finding_sort_key(x[1])))
        return _page(
            {
                "mode": "platforms",
                "title": f"pinguard compare: {cmp.reference} ({', '.join(names)})",
                "reference": cmp.reference,
                "verdict": verdict,
                "reasons": compare_reasons(cmp, options),
                "platforms": names,
                "rows": rows,
                "sides": sides,
                "findings": [_finding(f, str(p)) for p, f in pf],
                "incomplete": incomplete,
                "fail_on": fail_on.value if fail_on else "never",
            }
        )
    only = {(d.environment, d.name) for d in cmp.differences}
    differences = [
        {
            "environment": d.environment,
            "name": d.name,
            "kind": d.kind.value,
            "mark": _MARK[d.kind],
            "a": d.a or "",
            "b": d.b or "",
            "step": step_label(cmp, d.step),
            "step_anchor": "" if d.step is None else f"b-step-{d.step}",
            "why": difference_reasons(cmp, d),
        }
        for d in cmp.differences
    ]
    sides = [
        _side(
            cmp.a,
            "a",
            "A",
            options.verdict(cmp.a),
            watch,
            only,
            cmp.base.step_a,
            no_python=options.no_python_text(cmp.a),
        ),
        _side(  # B's own steps
            cmp.b,
            "b",
            "B",
            verdict,
            watch,
            only,
            cmp.base.step_b,
            no_python=options.no_python_text(cmp.b),
        ),
    ]
    return _page(
        {
            "mode": "images",
            "title": f"pinguard compare: {cmp.a.image.reference} -> {cmp.b.image.reference}",
            "verdict": verdict,
            "reasons": compare_reasons(cmp, options),
            "base": base_text(cmp.base),
            "environments": [(m.path, m.status) for m in cmp.environments],
            "differences": differences,
            "sides": sides,
            "findings": [_finding(f) for f in sorted(cmp.findings, key=finding_sort_key)],
            "incomplete": incomplete,
            "fail_on": fail_on.value if fail_on else "never",
        }
    )
