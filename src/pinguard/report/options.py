"""What every renderer takes: the one ``RenderOptions`` value and the ``Renderer`` protocol.

Every output format is a function ``render(result, options) -> str`` over an ``AuditResult``
that the policy has already judged. ``RenderOptions`` gathers everything any format may
need (the verdict's threshold, where SARIF results point, JUnit's extra rules, Markdown's row
cap, the table's width); a format ignores the fields it has no use for. There is one default
for each field, shared by all formats (``fail_on`` is ``error`` everywhere, like the CLI).
``RenderOptions.verdict`` is the one place a renderer gets a verdict from (threshold and
allowances together), ``no_python_text`` the one wording of the "no Python environment" status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from pinguard.models import AuditResult, Severity

if TYPE_CHECKING:
    from pinguard.audit.compare import Comparison, PlatformComparison


class Judged(Protocol):
    """What has a verdict: an ``AuditResult``, a ``Comparison``, a ``PlatformComparison``."""

    def verdict(
        self,
        fail_on: Severity | None,
        allow_incomplete: bool = ...,
        allow_no_python: bool = ...,
        allow_unproven: bool = ...,
    ) -> str: ...


@dataclass(frozen=True, slots=True)
class RenderOptions:
    """How to render one report; every format reads only the fields it needs."""

    # the lowest unwaived severity that fails the verdict (None: report only, never fail)
    fail_on: Severity | None = Severity.ERROR
    # a verdict may pass although something could not be read
    allow_incomplete: bool = False
    # a verdict may pass although the image has no Python environment (--allow-no-python)
    allow_no_python: bool = False
    # a pass on layers read lazily, their DiffIDs unproven, is "unproven" (--allow-unproven)
    # rather than "fail"
    allow_unproven: bool = False
    # the report's title: Markdown's heading, JUnit's suite name
    title: str = "pinguard"
    # SARIF: the Dockerfile results point at, its text (read from the path when None), and
    # the step-index -> Dockerfile-line mapping (computed from the text when None)
    dockerfile: str | None = None
    dockerfile_text: str | None = None
    step_lines: Mapping[int, int] | None = field(default=None, compare=False)
    # JUnit: rules that get a passing test case when they found nothing
    rules: tuple[str, ...] = ()
    # Markdown: at most this many rows per table
    max_rows: int = 50
    # table: the console width when rendering to text
    width: int = 160
    # html: packages the timeline always shows (the policy's pins), besides what changed
    watch: tuple[str, ...] = ()
    # table, markdown, html: list every change, not only what changed since an environment
    # existed or is flagged (``--all``; report.summary.listed)
    show_all: bool = False

    def no_python_text(self, result: AuditResult) -> str | None:
        """The status line of an image without a Python environment (None when it has one):
        the same words in every format, saying whether the gate fails on it."""
        if not result.no_python:
            return None
        if self.allow_no_python:
            tail = "allowed by --allow-no-python"
        else:
            tail = "the gate fails unless --allow-no-python"
        return f"{result.no_python_message()} ({tail})"

    def no_python_statuses(self, result: AuditResult) -> list[tuple[str, str]]:
        """``no_python_text`` as the (side, line) pairs the SARIF and JUnit builders take:
        one pair with no side name for an image without Python, else none (a comparison
        builds its own, one per side: ``report.compare.no_python_sides``)."""
        text = self.no_python_text(result)
        return [] if text is None else [("", text)]

    def verdict(self, judged: Judged) -> str:
        """``judged``'s verdict at these options' threshold and allowances."""
        return judged.verdict(
            self.fail_on, self.allow_incomplete, self.allow_no_python, self.allow_unproven
        )


DEFAULT_OPTIONS = RenderOptions()


class Renderer(Protocol):
    """One output format: the report text for a judged ``AuditResult``."""

    def __call__(self, result: AuditResult, options: RenderOptions = DEFAULT_OPTIONS) -> str: ...


class CompareRenderer(Protocol):
    """One output format of ``pinguard compare``: the report text for a judged comparison
    (``audit.compare.Comparison`` or ``PlatformComparison``)."""

    def __call__(
        self, cmp: Comparison | PlatformComparison, options: RenderOptions = DEFAULT_OPTIONS
    ) -> str: ...
