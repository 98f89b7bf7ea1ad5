"""The format registry: one signature, one ``fail_on`` default, every format reachable by name."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest

from pinguard.cli import build_parser
from pinguard.models import AuditResult, Finding, Severity
from pinguard.report.formats import FORMATS, render
from pinguard.report.options import RenderOptions
from tests.factories import dist, environment, result

WARNING = Finding(
    rule="file-collision", severity=Severity.WARNING, message="two owners", package="a"
)


def warned() -> AuditResult:
    return replace(result(environment(dist("a", "1.0"))), findings=(WARNING,))


def verdict_of(fmt: str, text: str) -> str:
    """The verdict a report states, read back the way its consumer would read it."""
    if fmt == "json":
        verdict: str = json.loads(text)["verdict"]
        return verdict
    if fmt == "junit":
        return "fail" if ET.fromstring(text).get("failures") != "0" else "pass"
    if fmt == "markdown":
        return "fail" if text.startswith("### :x:") else "pass"
    if fmt == "table":
        # "verdict: fail (findings at error or above: 1 error)": the word before the reasons
        return text.rstrip().splitlines()[-1].removeprefix("verdict: ").split(" (", 1)[0]
    if fmt == "html":
        found = re.search(r'<span id="verdict" class="verdict verdict-(\w+)">', text)
        assert found is not None
        return found.group(1)
    raise AssertionError(fmt)


VERDICT_FORMATS = ["json", "junit", "markdown", "table", "html"]


def test_the_registry_lists_the_formats_the_cli_offers() -> None:
    """`pinguard audit --format` offers exactly the registry's names, table first."""
    assert list(FORMATS) == [
        "table",
        "json",
        "sarif",
        "junit",
        "markdown",
        "html",
        "cyclonedx",
        "spdx",
    ]
    parser = build_parser()
    audit = parser.parse_args(["audit", "x:1"])
    assert audit.format == "table"
    for name in FORMATS:
        assert parser.parse_args(["audit", "x:1", "--format", name]).format == name
    with pytest.raises(SystemExit):
        parser.parse_args(["audit", "x:1", "--format", "xml"])


@pytest.mark.parametrize("fmt", VERDICT_FORMATS)
def test_one_fail_on_default_across_formats(fmt: str) -> None:
    """A lone warning passes by default in every format (JUnit used to fail it) ..."""
    assert verdict_of(fmt, FORMATS[fmt](warned())) == "pass"
    assert verdict_of(fmt, FORMATS[fmt](warned(), RenderOptions())) == "pass"


@pytest.mark.parametrize("fmt", VERDICT_FORMATS)
def test_fail_on_is_honoured_by_every_format(fmt: str) -> None:
    """... fails at fail_on=warning, and never fails with fail_on=None."""
    assert verdict_of(fmt, render(fmt, warned(), RenderOptions(fail_on=Severity.WARNING))) == "fail"
    assert verdict_of(fmt, render(fmt, warned(), RenderOptions(fail_on=None))) == "pass"


def test_sarif_through_the_registry_and_unknown_formats() -> None:
    """SARIF comes back as one run with the finding; an unknown name is a ValueError."""
    log = json.loads(render("sarif", warned()))
    assert [r["ruleId"] for r in log["runs"][0]["results"]] == ["file-collision"]
    assert log["runs"][0]["results"][0]["level"] == "warning"
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        render("xml", warned())


def test_titles_and_width_reach_their_formats() -> None:
    """``title`` names the JUnit suite and the Markdown heading; ``width`` bounds the table."""
    options = RenderOptions(title="gate check", width=60)
    root = ET.fromstring(render("junit", warned(), options))
    assert root.get("name") == "gate check"
    assert render("markdown", warned(), options).startswith("### :white_check_mark: gate check:")
    assert max(len(line) for line in render("table", warned(), options).splitlines()) <= 60
