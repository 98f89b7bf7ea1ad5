"""The registry of output formats, every command's in one place: ``FORMATS`` maps an audit's
``--format`` name to its renderer, ``COMPARE_FORMATS`` does the same for ``pinguard compare``,
``LINT_FORMATS`` for ``pinguard lint``, and ``VERDICT_FORMATS`` names what ``pinguard gate``
and ``pinguard guard`` print on stdout (their table, or the audit JSON with their verdict).

Adding a format is adding a module to ``pinguard.report`` whose ``render(result, options)``
follows the ``Renderer`` protocol, and one entry here; the CLI offers every key of
``FORMATS`` (in this order) and calls the renderer without knowing anything about it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pinguard.buildfile.lint import LintFinding
from pinguard.models import AuditResult
from pinguard.report import compare, html, json, junit, lint, markdown, sarif, table
from pinguard.report.lint import Errors, LintRenderer
from pinguard.report.options import DEFAULT_OPTIONS, CompareRenderer, Renderer, RenderOptions


def _cyclonedx(result: AuditResult, options: RenderOptions = DEFAULT_OPTIONS) -> str:
    # imported when used: cyclonedx-python-lib is slow to import for every CLI start
    from pinguard.report import cyclonedx

    return cyclonedx.render(result, options)


def _spdx(result: AuditResult, options: RenderOptions = DEFAULT_OPTIONS) -> str:
    from pinguard.report import spdx  # spdx-tools too (it loads the license list)

    return spdx.render(result, options)


FORMATS: Mapping[str, Renderer] = {
    "table": table.render,
    "json": json.render,
    "sarif": sarif.render,
    "junit": junit.render,
    "markdown": markdown.render,
    "html": html.render,
    "cyclonedx": _cyclonedx,
    "spdx": _spdx,
}


COMPARE_FORMATS: Mapping[str, CompareRenderer] = {
    "table": compare.render_table,
    "json": compare.render_json,
    "markdown": compare.render_markdown,
    "html": html.render_comparison,
    "sarif": compare.render_sarif,
    "junit": compare.render_junit,
}


LINT_FORMATS: Mapping[str, LintRenderer] = {
    "table": lint.render_table,
    "json": lint.render_json,
    "sarif": lint.render_sarif,
}

#: ``pinguard gate`` and ``pinguard guard``: their own table, or the audit JSON plus a verdict.
VERDICT_FORMATS: tuple[str, ...] = ("table", "json")


def render(fmt: str, result: AuditResult, options: RenderOptions = DEFAULT_OPTIONS) -> str:
    """The report of ``result`` in format ``fmt`` (a key of ``FORMATS``)."""
    try:
        renderer = FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}") from None
    return renderer(result, options)


def render_lint(findings: Sequence[LintFinding], fmt: str = "table", *, errors: Errors = ()) -> str:
    """Render findings as ``table``, ``json`` or ``sarif``; ``errors`` are (path, message)."""
    try:
        renderer = LINT_FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}: use table, json or sarif") from None
    return renderer(findings, errors)
