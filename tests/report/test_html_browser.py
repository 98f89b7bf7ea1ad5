"""The HTML report, opened in headless Chromium: what a person sees, with scripts on and off.

Images are synthetic OCI archives and layouts written in tmp_path (the real-image versions
are in tests/audit/test_compare_images.py). Each test keeps a screenshot: under the pytest tmp dir
and copied to ``$PINGUARD_TEST_ARTIFACTS`` (default ``build/test-artifacts/``).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

import pinguard
from pinguard.cli import main
from pinguard.testing.demo import build_demo, demo_layers, write_oci_archive
from tests.audit.test_compare import EMPTY, _platform_layers
from tests.infra.browser import open_browser
from tests.infra.paths import ARTIFACTS as DEFAULT_ARTIFACTS
from tests.infra.registry import build_oci_layout

NCCL = "nvidia-nccl-cu13"
ARTIFACTS = Path(os.environ.get("PINGUARD_TEST_ARTIFACTS", DEFAULT_ARTIFACTS))


def keep_screenshot(driver: Any, tmp_path: Path, name: str) -> Path:
    """Save a full-page screenshot in tmp_path and copy it to the artifacts directory."""
    shot = tmp_path / f"{name}.png"
    driver.set_window_size(
        1400, max(900, driver.execute_script("return document.body.scrollHeight"))
    )
    assert driver.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000  # a real picture, not an empty page
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy2(shot, ARTIFACTS / shot.name)
    return shot


def _report(tmp_path: Path, name: str, *argv: str) -> Path:
    out = tmp_path / f"{name}.html"
    main([*argv, "--no-cache", "--format", "html", "-o", str(out)])
    assert out.exists()
    return out


def _self_contained(html: str) -> None:
    """No resource is fetched from anywhere: no src/href to a URL, no @import, no link tags."""
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<link" not in html
    assert "@import" not in html


@pytest.fixture
def demo_report(tmp_path: Path) -> Path:
    archive = tmp_path / "demo.tar"
    build_demo(archive, tag="t")
    return _report(tmp_path, "audit", "audit", f"oci-archive:{archive}:t")


def _cell(driver: Any, package: str, step: int, scope: str = "") -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(
        By.CSS_SELECTOR, f'{scope} tr[data-package="{package}"] td[data-step="{step}"]'
    )


def test_audit_report_marks_the_downgrade_and_its_cause(demo_report: Path, tmp_path: Path) -> None:
    """The verdict reads FAIL; NCCL's step-6 cell is marked downgraded; opening its "why"
    shows torch's exact pin, then flashinfer's torch>=2.12."""
    from selenium.webdriver.common.by import By

    html = demo_report.read_text()
    _self_contained(html)
    with open_browser() as driver:
        driver.get(demo_report.as_uri())
        verdict = driver.find_element(By.ID, "verdict")
        assert verdict.text == "FAIL"  # CSS upper-cases it: what a person reads
        assert verdict.is_displayed()
        cell = _cell(driver, NCCL, 6)
        assert "k-downgraded" in cell.get_attribute("class")
        assert "2.29.7" in cell.text
        assert "downgraded" in cell.text
        # the cell's background is the alarm colour, not the page's
        assert cell.value_of_css_property("background-color") != "rgba(0, 0, 0, 0)"
        # cause hidden until asked for, then visible
        cause = cell.find_element(By.CSS_SELECTOR, "details.why div")
        assert not cause.is_displayed()
        cell.find_element(By.TAG_NAME, "summary").click()
        assert cause.is_displayed()
        assert "torch 2.12.1+cu130 requires nvidia-nccl-cu13==2.29.7" in cause.text
        assert "flashinfer-python 0.6.18.dev20261120 requires torch>=2.12" in cause.text
        # the unchanged cell before it is plain
        assert "k-" not in _cell(driver, NCCL, 4).get_attribute("class")
        assert _cell(driver, NCCL, 4).text.strip() == "2.30.3"
        # findings come before the timeline
        findings = driver.find_element(By.ID, "findings")
        timeline = driver.find_element(By.ID, "timeline")
        assert findings.location["y"] < timeline.location["y"]
        assert "step 6 moved nvidia-nccl-cu13 back from 2.30.3 to 2.29.7" in findings.text
        keep_screenshot(driver, tmp_path, "audit-report")


def test_report_reads_with_scripts_off(demo_report: Path) -> None:
    """With JavaScript disabled the timeline, the marks and the causes are all still there
    (details/summary need no script); the script-only filter box stays hidden."""
    from selenium.webdriver.common.by import By

    with open_browser(javascript=False) as driver:
        driver.get(demo_report.as_uri())
        cell = _cell(driver, NCCL, 6)
        assert "k-downgraded" in cell.get_attribute("class")
        cell.find_element(By.TAG_NAME, "summary").click()
        assert (
            "torch 2.12.1+cu130 requires"
            in cell.find_element(By.CSS_SELECTOR, "details.why div").text
        )
        assert not driver.find_element(By.ID, "filter-box").is_displayed()
    with open_browser() as driver:
        driver.get(demo_report.as_uri())
        assert driver.find_element(By.ID, "filter-box").is_displayed()


def test_every_step_and_environment_is_reachable(demo_report: Path) -> None:
    """Each step header links to its row in the step list (which opens); each environment
    is linked from the navigation."""
    from selenium.webdriver.common.by import By

    with open_browser() as driver:
        driver.get(demo_report.as_uri())
        links = driver.find_elements(By.CSS_SELECTOR, "table.timeline thead a")
        assert [a.text for a in links] == [f"step {i}" for i in range(1, 7)]
        links[5].click()
        row = driver.find_element(By.ID, "a-step-6")
        assert row.is_displayed()
        assert "flashinfer-python==0.6.18.dev20261120" in row.text
        nav = driver.find_elements(By.CSS_SELECTOR, "nav a")
        assert [a.text for a in nav] == ["/usr/local/lib/python3.12/site-packages"]


def test_filter_hides_other_rows(demo_report: Path) -> None:
    """Typing in the filter leaves only matching package rows visible."""
    from selenium.webdriver.common.by import By

    with open_browser() as driver:
        driver.get(demo_report.as_uri())
        driver.find_element(By.ID, "filter").send_keys("nccl")
        shown = [
            r.get_attribute("data-package")
            for r in driver.find_elements(By.CSS_SELECTOR, "table.timeline tr[data-package]")
            if r.is_displayed()
        ]
        assert shown == [NCCL]


def test_compare_report_puts_a_and_b_side_by_side(tmp_path: Path) -> None:
    """A -> B: the differences table marks NCCL downgraded at B's step 5 with its cause; the
    A and B timelines sit next to each other; the verdict is shown."""
    from selenium.webdriver.common.by import By

    a, b = tmp_path / "a.tar", tmp_path / "b.tar"
    write_oci_archive(demo_layers()[:3], a, tag="t", empty_steps=EMPTY)
    write_oci_archive(demo_layers(), b, tag="t", empty_steps=EMPTY)
    out = _report(tmp_path, "compare", "compare", f"oci-archive:{a}:t", f"oci-archive:{b}:t")
    _self_contained(out.read_text())
    with open_browser() as driver:
        driver.get(out.as_uri())
        assert driver.find_element(By.ID, "verdict").text == "FAIL"
        row = driver.find_element(By.CSS_SELECTOR, f'table.differences tr[data-package="{NCCL}"]')
        cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
        assert cells[2:6] == ["▼ downgraded", "2.30.3", "2.29.7", "5"]
        assert "k-downgraded" in row.get_attribute("class")
        row.find_element(By.TAG_NAME, "summary").click()
        assert "torch 2.12.1+cu130 requires nvidia-nccl-cu13==2.29.7" in row.text
        side_a = driver.find_element(By.ID, "side-a")
        side_b = driver.find_element(By.ID, "side-b")
        assert side_a.location["y"] == side_b.location["y"]  # next to each other
        assert side_a.location["x"] < side_b.location["x"]
        b_cell = _cell(driver, NCCL, 5, "#side-b")
        assert "k-downgraded" in b_cell.get_attribute("class")
        keep_screenshot(driver, tmp_path, "compare-report")


def test_platform_report_has_one_column_per_platform(tmp_path: Path) -> None:
    """--platforms all on an OCI index: NCCL's row shows 2.30.3 under amd64, 2.29.7 under arm64."""
    from selenium.webdriver.common.by import By

    layout = build_oci_layout(
        tmp_path / "layout",
        tag="glm",
        platforms=("linux/amd64", "linux/arm64"),
        layers=_platform_layers,
    )
    out = _report(tmp_path, "platforms", "compare", layout.source, "--platforms", "all")
    with open_browser() as driver:
        driver.get(out.as_uri())
        heads = driver.find_elements(By.CSS_SELECTOR, "table.platforms thead th")
        assert [h.text for h in heads] == ["environment", "package", "linux/amd64", "linux/arm64"]
        row = driver.find_element(By.CSS_SELECTOR, f'table.platforms tr[data-package="{NCCL}"]')
        cells = {
            td.get_attribute("data-platform"): td.text
            for td in row.find_elements(By.CSS_SELECTOR, "td[data-platform]")
        }
        assert cells == {"linux/amd64": "2.30.3 (step 1)", "linux/arm64": "2.29.7 (step 1)"}
        assert driver.find_element(By.ID, "verdict").text == "PASS"
        keep_screenshot(driver, tmp_path, "platforms-report")


def test_summary_leads_and_step_heads_say_which_command(demo_report: Path, tmp_path: Path) -> None:
    """The summary (environments, counts, the steps that changed) comes before the findings;
    the header names pinguard's version and the policy; each step's column head names what it
    installed, whole and unclipped (it used to be cut at "pip install --p...")."""
    from selenium.webdriver.common.by import By

    with open_browser() as driver:
        driver.get(demo_report.as_uri())
        summary = driver.find_element(By.ID, "summary")
        findings = driver.find_element(By.ID, "findings")
        assert summary.location["y"] < findings.location["y"]
        assert "findings: 2 errors, 0 warnings, 0 info" in summary.text
        steps = summary.find_elements(By.CSS_SELECTOR, "table.summary-steps tbody tr")
        assert [r.text.split()[:2] for r in steps] == [
            ["1", "+1"],
            ["3", "+3"],
            ["4", "+1"],
            ["6", "+1"],
        ]
        assert "▼2" in steps[3].text
        assert driver.find_element(By.CSS_SELECTOR, "dd.policy").text == "built-in default"
        assert driver.find_element(By.CSS_SELECTOR, "dd.pinguard").text == pinguard.__version__
        heads = driver.find_elements(By.CSS_SELECTOR, "table.timeline thead th.step .cmdhead")
        assert heads[2].text.replace("\n", " ") == (
            "pip install nvidia-nccl-cu13==2.30.3 nvidia-cutlass-dsl==4.3.0 torch==2.11.0+cu130"
        )
        assert heads[5].text.replace("\n", " ") == (
            "pip install flashinfer-python==0.6.18.dev20261120"
        )
        for head in heads:
            assert head.is_displayed()
            clipped = driver.execute_script(
                "const e = arguments[0];"
                "return e.scrollWidth > e.clientWidth || e.scrollHeight > e.clientHeight;",
                head,
            )
            assert not clipped, head.text
        keep_screenshot(driver, tmp_path, "audit-summary")
