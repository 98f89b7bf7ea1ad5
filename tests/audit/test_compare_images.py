"""`pinguard compare` and the HTML report on real images built by the tests.

- The GLM story's two images, one Dockerfile before (``good``) and after (``bad``) the
  nightly step, pushed to a real registry: the differences, the step of B and its causes,
  the shared base, and the policy gating A -> B;
- an amd64 + arm64 index built with buildah (NCCL 2.30.3 on amd64, 2.29.7 on arm64), read
  with ``--platforms all`` from the registry and from an OCI layout;
- both reports opened in headless Chromium.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pinguard.cli import main
from tests.conftest import require_build_tools
from tests.infra.browser import open_browser
from tests.infra.build import image_config
from tests.infra.paths import COMPARE_SCHEMA
from tests.infra.registry import RegistryServer
from tests.infra.scenario import SITE, Scenario
from tests.infra.wheels import WheelSpec, build_wheel
from tests.report.test_html_browser import keep_screenshot

pytestmark = pytest.mark.integration

SCHEMA = json.loads(COMPARE_SCHEMA.read_text())
LINUX = '; platform_system == "Linux"'


def _compare(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["compare", *argv, "--no-cache", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, SCHEMA)
    return code, doc


def test_good_to_bad_names_the_nightly_step_and_its_causes(
    scenario: Scenario,
    base_image: str,
    good_image_registry: str,
    bad_image_registry: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """good -> bad: exactly the four changes of step C, each at bad's step C; NCCL's cause is
    torch 2.12.1's exact pin; the shared base ends at step B (label included), and the
    downgrades and the unmet vllm requirement fail the gate."""
    code, doc = _compare(capsys, good_image_registry, bad_image_registry)
    step_c = scenario.bad.history_index("C")
    got = {
        d["name"]: (d["kind"], d["a"], d["b"], d["step"])
        for d in doc["differences"]
        if d["environment"] == SITE
    }
    assert got == {
        "flashinfer-python": ("upgraded", "0.6.16", "0.6.18.dev20261120", step_c),
        "nvidia-cutlass-dsl": ("downgraded", "4.3.0", "4.2.1", step_c),
        "nvidia-nccl-cu13": ("downgraded", "2.30.3", "2.29.7", step_c),
        "torch": ("upgraded", "2.11.0+cu130", "2.12.1", step_c),
    }
    assert all(d["environment"] == SITE for d in doc["differences"])
    nccl = next(d for d in doc["differences"] if d["name"] == "nvidia-nccl-cu13")
    assert nccl["causes"][0] == {
        "package": "torch",
        "version": "2.12.1",
        "requirement": f"nvidia-nccl-cu13==2.29.7{LINUX}",
    }
    assert "flashinfer-python==0.6.18.dev20261120" in nccl["created_by"]
    assert not nccl["in_shared_base"]
    # the base: the Debian image's layer plus steps A and B (by uncompressed digest, though
    # one side is an OCI manifest and the other Docker v2s2)
    base = doc["shared_base"]
    base_layers = len(image_config(base_image)["rootfs"]["diff_ids"])
    assert base["layers"] == base_layers + 2
    assert base["step_b"] == scenario.bad.history_index("B")
    assert base["step_a"] == scenario.good.history_index("B")
    rules = {(f["rule"], f["package"]) for f in doc["findings"] if not f["waived"]}
    assert ("downgrade", "nvidia-nccl-cu13") in rules
    assert ("downgrade", "nvidia-cutlass-dsl") in rules
    assert ("unmet-requirement", "torch") in rules
    assert (code, doc["verdict"]) == (1, "fail")


def test_bad_to_good_has_no_downgrade_of_nccl(
    good_image_registry: str, bad_image_registry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """bad -> good: NCCL goes up (from the shared base's step A) and nothing is left unmet;
    torch does go back, so the default policy still fails on that one downgrade."""
    code, doc = _compare(capsys, bad_image_registry, good_image_registry)
    nccl = next(d for d in doc["differences"] if d["name"] == "nvidia-nccl-cu13")
    assert (nccl["kind"], nccl["a"], nccl["b"], nccl["in_shared_base"]) == (
        "upgraded",
        "2.29.7",
        "2.30.3",
        True,
    )
    findings = {(f["rule"], f["package"]) for f in doc["findings"]}
    assert ("unmet-requirement", "torch") not in findings
    assert ("downgrade", "nvidia-nccl-cu13") not in findings
    assert ("downgrade", "torch") in findings
    assert code == 1


def test_compare_and_audit_html_of_the_story_in_a_browser(
    scenario: Scenario, good_image_registry: str, bad_image_registry: str, tmp_path: Path
) -> None:
    """The compare report of good -> bad marks NCCL's cell at step C downgraded with its
    cause; the audit report of bad does too, and marks vllm's unmet torch pin; both FAIL."""
    from selenium.webdriver.common.by import By

    compare = tmp_path / "compare.html"
    audit = tmp_path / "audit.html"
    assert (
        main(
            [
                "compare",
                good_image_registry,
                bad_image_registry,
                "--no-cache",
                "--format",
                "html",
                "-o",
                str(compare),
            ]
        )
        == 1
    )
    assert (
        main(["audit", bad_image_registry, "--no-cache", "--format", "html", "-o", str(audit)]) == 1
    )
    with open_browser() as driver:
        for page, name in ((compare, "story-compare"), (audit, "story-audit")):
            driver.get(page.as_uri())
            assert driver.find_element(By.ID, "verdict").text == "FAIL"
            cell = driver.find_element(
                By.CSS_SELECTOR, 'td.k-downgraded[title*="nvidia-nccl-cu13==2.29.7"]'
            )
            assert cell.text.startswith("▼ 2.29.7")
            cell.find_element(By.TAG_NAME, "summary").click()
            assert "torch 2.12.1 requires nvidia-nccl-cu13==2.29.7" in cell.text
            if page == audit:
                # vllm's torch==2.11.0 is left unmet by step C: that cell carries the badge
                unmet = driver.find_element(
                    By.CSS_SELECTOR,
                    f'tr[data-package="vllm"] td[data-step="{scenario.bad.history_index("C")}"]',
                )
                assert "unmet" in unmet.get_attribute("class")
                assert "unmet" in unmet.text
                assert "requires torch==2.11.0, 2.12.1 installed" in unmet.get_attribute("title")
            keep_screenshot(driver, tmp_path, name)


# --------------------------------------------------------------------------- platforms


@pytest.fixture(scope="module")
def platform_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A manifest list in containers-storage: amd64 with NCCL 2.30.3, arm64 with 2.29.7,
    both with filelock 3.16.1 (so exactly one row differs). Named per test process, so two
    test runs sharing containers-storage never rebuild each other's list mid-push."""
    require_build_tools()
    from tests.infra.multiarch import build_index, remove_index

    root = tmp_path_factory.mktemp("multiarch")
    wheels = root / "wheels"
    nccl = {v: build_wheel(WheelSpec("nvidia-nccl-cu13", v), wheels) for v in ("2.30.3", "2.29.7")}
    filelock = build_wheel(WheelSpec("filelock", "3.16.1"), wheels)
    name = build_index(
        root,
        f"localhost/pinguard-test/glm-multiarch:{os.getpid()}",
        {
            "linux/amd64": [[filelock], [nccl["2.30.3"]]],
            "linux/arm64": [[filelock], [nccl["2.29.7"]]],
        },
    )
    yield name
    remove_index(name, ("linux/amd64", "linux/arm64"))


def _platform_rows(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(r["name"], r["versions"]) for r in doc["rows"]]


EXPECTED_ROWS = [("nvidia-nccl-cu13", {"linux/amd64": "2.30.3", "linux/arm64": "2.29.7"})]


def test_platforms_all_from_an_oci_layout(
    platform_index: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The index written as an OCI layout: --platforms all finds both platforms, one row."""
    from tests.infra.multiarch import push_index

    push_index(platform_index, f"oci:{tmp_path / 'layout'}:glm")
    code, doc = _compare(capsys, f"oci:{tmp_path / 'layout'}:glm", "--platforms", "all")
    assert doc["platforms"] == ["linux/amd64", "linux/arm64"]
    assert _platform_rows(doc) == EXPECTED_ROWS
    assert doc["rows"][0]["steps"] == {"linux/amd64": 2, "linux/arm64": 2}
    assert code == 0


def test_platforms_all_from_the_registry_and_a_pin_per_platform(
    platform_index: str,
    scenario_registry: RegistryServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The index pushed to docker-registry: the same row; a pin on NCCL 2.30.3 fails only
    arm64, so the comparison fails."""
    from tests.infra.multiarch import push_index

    push_index(platform_index, f"docker://{scenario_registry.ref('pinguard/multiarch:glm')}")
    ref = f"docker://{scenario_registry.ref('pinguard/multiarch:glm')}"
    code, doc = _compare(capsys, ref, "--platforms", "all")
    assert _platform_rows(doc) == EXPECTED_ROWS
    assert code == 0
    policy = tmp_path / "policy.toml"
    policy.write_text('[[pin]]\npackage = "nvidia-nccl-cu13"\nversion = "==2.30.3"\n')
    code, doc = _compare(
        capsys, ref, "--platforms", "linux/amd64,linux/arm64", "--policy", str(policy)
    )
    pins = [(f["platform"], f["rule"]) for f in doc["findings"] if f["rule"] == "pin-violation"]
    assert pins == [("linux/arm64", "pin-violation")]
    assert (code, doc["verdict"]) == (1, "fail")
