"""The registry of output formats, every command's in one place: ``FORMATS`` maps an audit's
``--format`` name to its renderer, ``COMPARE_FORMATS`` does the same for ``pinguard compare``,
``LINT_FORMATS`` for ``pinguard lint``, and ``VERDICT_FORMATS`` names what ``pinguard gate``
and ``pinguard guard`` print on stdout (their table, or the audit JSON with their verdict).
The commands whose renderers sit above report/ are named here too, by name only:
``VERIFY_FORMATS`` (attest/render.py), ``PROBE_FORMATS`` (cli/probe.py) and
``FLEET_FORMAT_NAMES`` (fleet/render.py's ``FLEET_FORMATS``; a test holds them equal).

Adding a format is adding a module to ``pinguard.report`` whose ``render(result, options)``
follows the ``Renderer`` protocol, and one entry here; the CLI offers every key of
``FORMATS`` (in this order) and calls the renderer without knowing anything about it.
Importing this module loads no renderer and no value (``models``): building a parser reads
its tables.

The SBOM formats are written with libraries of the ``sbom`` extra (``SBOM_WRITERS``):
``require_writer(fmt, command)`` raises ``WriterMissing`` (exit 2, ``pip install
'pinguard[sbom]'``) when one is not installed, asking the import system without importing
anything, so a command checks it before any audit work; a renderer whose library fails to
import later raises the same error.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pinguard.errors import UsageError

if TYPE_CHECKING:
    from pinguard.buildfile.lint import LintFinding
    from pinguard.models import AuditResult
    from pinguard.report.lint import Errors, LintRenderer
    from pinguard.report.options import CompareRenderer, Renderer, RenderOptions

#: the formats written with a library of the ``sbom`` extra: format (and its module's name
#: in ``pinguard.report``) -> (the distribution, the module it installs)
SBOM_WRITERS: Mapping[str, tuple[str, str]] = {
    "cyclonedx": ("cyclonedx-python-lib", "cyclonedx"),
    "spdx": ("spdx-tools", "spdx_tools"),
}
SBOM_EXTRA = "pip install 'pinguard[sbom]'"


class WriterMissing(UsageError):
    """A format's writer library is not installed: pinguard was installed without
    ``[sbom]``."""


def _missing(what: str, fmt: str, module: str, state: str = "is not installed") -> WriterMissing:
    return WriterMissing(
        f"{what} needs {SBOM_WRITERS[fmt][0]}, which {state} (no module {module!r}): {SBOM_EXTRA}"
    )


def require_writer(fmt: str, command: str) -> None:
    """Raise ``WriterMissing`` unless the library that writes ``fmt`` is installed (for a
    format of ``SBOM_WRITERS``; any other needs nothing beyond pinguard's own dependencies).
    Asks where the module would load from, importing nothing."""
    writer = SBOM_WRITERS.get(fmt)
    if writer is not None and importlib.util.find_spec(writer[1]) is None:
        raise _missing(f"{command} -f {fmt}", fmt, writer[1])


def _on_use(module: str, name: str = "render") -> Callable[..., str]:
    """``pinguard.report.<module>.<name>``, imported when first called: a command imports
    the one renderer it prints with (rich for the table, cyclonedx-python-lib, spdx-tools and
    its license list, the SARIF and JUnit writers are not paid for by every CLI start)."""

    def render(*args: Any, **kwargs: Any) -> str:
        try:
            loaded = importlib.import_module(f"pinguard.report.{module}")
        except ImportError as exc:
            if module not in SBOM_WRITERS:
                raise
            missing = exc.name or SBOM_WRITERS[module][1]
            raise _missing(f"-f {module}", module, missing, "cannot be imported") from None
        renderer: Callable[..., str] = getattr(loaded, name)
        return renderer(*args, **kwargs)

    render.__name__ = f"{module}.{name}"
    return render


FORMATS: Mapping[str, Renderer] = {
    "table": _on_use("table"),
    "json": _on_use("json"),
    "sarif": _on_use("sarif"),
    "junit": _on_use("junit"),
    "markdown": _on_use("markdown"),
    "html": _on_use("html"),
    "cyclonedx": _on_use("cyclonedx"),
    "spdx": _on_use("spdx"),
}


COMPARE_FORMATS: Mapping[str, CompareRenderer] = {
    "table": _on_use("compare", "render_table"),
    "json": _on_use("compare", "render_json"),
    "markdown": _on_use("compare", "render_markdown"),
    "html": _on_use("html", "render_comparison"),
    "sarif": _on_use("compare", "render_sarif"),
    "junit": _on_use("compare", "render_junit"),
}


LINT_FORMATS: Mapping[str, LintRenderer] = {
    "table": _on_use("lint", "render_table"),
    "json": _on_use("lint", "render_json"),
    "sarif": _on_use("lint", "render_sarif"),
}

#: ``pinguard gate`` and ``pinguard guard``: their own table, or the audit JSON plus a verdict.
VERDICT_FORMATS: tuple[str, ...] = ("table", "json")

#: ``pinguard verify``: its table, or the ``verify/v1`` JSON (attest/render.py).
VERIFY_FORMATS: tuple[str, ...] = ("table", "json")

#: ``pinguard probe``: its table, or JSON (cli/probe.py).
PROBE_FORMATS: tuple[str, ...] = ("table", "json")

#: ``pinguard fleet run|report``: the keys of fleet/render.py's ``FLEET_FORMATS``.
FLEET_FORMAT_NAMES: tuple[str, ...] = ("table", "json", "html")


def render(fmt: str, result: AuditResult, options: RenderOptions | None = None) -> str:
    """The report of ``result`` in format ``fmt`` (a key of ``FORMATS``)."""
    try:
        renderer = FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}") from None
    if options is None:
        from pinguard.report.options import DEFAULT_OPTIONS

        options = DEFAULT_OPTIONS
    return renderer(result, options)


def render_lint(findings: Sequence[LintFinding], fmt: str = "table", *, errors: Errors = ()) -> str:
    """Render findings as ``table``, ``json`` or ``sarif``; ``errors`` are (path, message)."""
    try:
        renderer = LINT_FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}: use table, json or sarif") from None
    return renderer(findings, errors)
