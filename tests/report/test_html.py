"""The HTML report without a browser: escaping, determinism, and Jinja2 staying optional."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

from pinguard.audit.pipeline import audit_image
from pinguard.models import Finding, Severity
from pinguard.report import html
from pinguard.testing.demo import build_demo


def test_guard_path_does_not_import_jinja2() -> None:
    """The CLI and the format registry load without Jinja2 (the guard's zipapp lacks it)."""
    code = (
        "import sys, pinguard.cli, pinguard.cli.audit, pinguard.cli.guard, "
        "pinguard.report.formats; assert 'jinja2' not in sys.modules, 'jinja2 imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_text_is_escaped_and_output_is_deterministic(tmp_path: Path) -> None:
    """A finding message with markup is shown as text, never as markup; two renders of one
    result are the same bytes."""
    archive = tmp_path / "demo.tar"
    build_demo(archive, tag="t")
    result = audit_image(f"oci-archive:{archive}:t")
    evil = Finding("downgrade", Severity.ERROR, '<script>alert("x")</script> & <b>', "torch")
    result = dataclasses.replace(result, findings=(evil,))
    page = html.render(result)
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; &lt;b&gt;" in page
    assert page == html.render(result)
    assert page.count("<script>") == 1  # only the report's own inline script
