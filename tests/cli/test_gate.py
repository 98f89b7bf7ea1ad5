"""`pinguard gate` on the scenario's real images: exit codes 0/1/2/3, SARIF and JUnit files."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from pinguard.cli import main
from tests.infra.build import BASE_IMAGE
from tests.infra.paths import SARIF_SCHEMA
from tests.infra.scenario import STEPS, Scenario, dockerfile

pytestmark = pytest.mark.integration

SCHEMA = json.loads(SARIF_SCHEMA.read_text())
POLICY = """\
[[pin]]
package = "nvidia-nccl-cu13"
version = ">=2.30,<2.31"
reason = "NCCL below 2.30 hangs on the GB10 fabric"
"""


@pytest.fixture
def files(tmp_path: Path, scenario: Scenario) -> dict[str, Path]:
    """The scenario's bad and good Dockerfiles and a policy, as the CI checkout has them."""
    bad = tmp_path / "Dockerfile.bad"
    bad.write_text(dockerfile(BASE_IMAGE, scenario.bad.steps))
    good = tmp_path / "Dockerfile.good"
    good.write_text(dockerfile(BASE_IMAGE, scenario.good.steps))
    policy = tmp_path / "pinguard.toml"
    policy.write_text(POLICY)
    return {"bad": bad, "good": good, "policy": policy}


def gate(
    dockerfile_path: Path, image: str, policy: Path, out: Path, *extra: str
) -> tuple[int, Path, Path]:
    sarif, junit = out / "gate.sarif", out / "gate.junit.xml"
    argv = [
        "gate",
        "--dockerfile",
        str(dockerfile_path),
        "--image",
        image,
        "--policy",
        str(policy),
        "--sarif",
        str(sarif),
        "--junit",
        str(junit),
        "--no-cache",
        *extra,
    ]
    return main(argv), sarif, junit


def results(sarif: Path) -> list[dict[str, object]]:
    log = json.loads(sarif.read_text())
    jsonschema.Draft7Validator(SCHEMA).validate(log)
    assert log["version"] == "2.1.0"
    assert len(log["runs"]) == 1
    out: list[dict[str, object]] = log["runs"][0]["results"]
    return out


def junit_cases(path: Path) -> tuple[ET.Element, list[ET.Element]]:
    root = ET.parse(path).getroot()
    return root, root.findall("./testsuite/testcase")


def test_bad_image_fails_with_findings(
    files: dict[str, Path], bad_image_oci: str, tmp_path: Path, scenario: Scenario
) -> None:
    """The bad image fails (1): the NCCL downgrade points at step C's Dockerfile line, the
    lint flags the nightly install, and JUnit carries the failures."""
    code, sarif, junit = gate(files["bad"], bad_image_oci, files["policy"], tmp_path)
    assert code == 1
    found = results(sarif)
    rules = {r["ruleId"] for r in found}
    assert {"downgrade", "pin-violation", "unmet-requirement", "unconstrained-install"} <= rules
    line_c = 1 + [s.key for s in STEPS].index("C") + 1  # FROM is line 1
    downgrade = next(
        r
        for r in found
        if r["ruleId"] == "downgrade" and r["properties"]["package"] == "nvidia-nccl-cu13"  # type: ignore[index]
    )
    region = downgrade["locations"][0]["physicalLocation"]["region"]  # type: ignore[index]
    assert region["startLine"] == line_c
    lint_lines = {
        r["locations"][0]["physicalLocation"]["region"]["startLine"]  # type: ignore[index]
        for r in found
        if r["ruleId"] in {"prerelease-unpinned", "index-shadowing", "unconstrained-install"}
    }
    assert line_c in lint_lines
    root, cases = junit_cases(junit)
    assert int(root.get("failures", "0")) >= 1
    failing = {(c.get("classname"), c.get("name")) for c in cases if c.find("failure") is not None}
    assert ("pinguard.downgrade", "nvidia-nccl-cu13") in failing


def test_good_image_passes(
    files: dict[str, Path], good_image_registry: str, tmp_path: Path
) -> None:
    """The good image and its Dockerfile pass (0); lint warnings stay below --fail-on error,
    and both report files are still written and parse."""
    code, sarif, junit = gate(files["good"], good_image_registry, files["policy"], tmp_path)
    assert code == 0
    found = results(sarif)
    assert {r["level"] for r in found} <= {"warning", "note"}
    assert any(r["ruleId"] == "unconstrained-install" for r in found)
    root, _ = junit_cases(junit)
    assert root.get("failures") == "0"


def test_policy_require_guard_fails_the_good_image(
    files: dict[str, Path], good_image_registry: str, tmp_path: Path, scenario: Scenario
) -> None:
    """``require_guard = true`` in the policy: every install step of the good Dockerfile (none
    runs `pinguard guard`) is a missing-guard error at its RUN line, so the gate fails."""
    files["policy"].write_text("require_guard = true\n" + POLICY)
    code, sarif, _ = gate(files["good"], good_image_registry, files["policy"], tmp_path)
    assert code == 1
    lines = {
        r["locations"][0]["physicalLocation"]["region"]["startLine"]  # type: ignore[index]
        for r in results(sarif)
        if r["ruleId"] == "missing-guard"
    }
    text = files["good"].read_text().splitlines()
    runs = {n for n, line in enumerate(text, 1) if "pip install" in line or "uv pip" in line}
    assert lines
    assert lines == runs


def test_fail_on_warning_fails_the_good_image(
    files: dict[str, Path], good_image_registry: str, tmp_path: Path
) -> None:
    """With --fail-on warning the lint warnings (no constraints file) fail the gate."""
    code, _, _ = gate(
        files["good"], good_image_registry, files["policy"], tmp_path, "--fail-on", "warning"
    )
    assert code == 1


def test_unreadable_image_exits_3_with_reports(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An image that cannot be read exits 3; the reports say so and keep the lint findings."""
    missing = f"oci:{tmp_path / 'no-such-layout'}:bad"
    code, sarif, junit = gate(files["good"], missing, files["policy"], tmp_path)
    assert code == 3
    log = json.loads(sarif.read_text())
    jsonschema.Draft7Validator(SCHEMA).validate(log)
    invocation = log["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert any(r["ruleId"] == "unconstrained-install" for r in log["runs"][0]["results"])
    _, cases = junit_cases(junit)
    assert any(c.get("classname") == "pinguard.incomplete" for c in cases)
    assert "cannot be read" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("bad-policy", "pinguard.toml"),
        ("missing-dockerfile", "cannot read"),
        ("bad-build-arg", "--build-arg"),
    ],
)
def test_configuration_errors_exit_2(
    files: dict[str, Path],
    tmp_path: Path,
    case: str,
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A broken policy, a missing Dockerfile or a bad option exits 2 before any image is read
    (the image reference here does not exist, which would otherwise be 3)."""
    missing_image = f"oci:{tmp_path / 'nothing'}:x"
    extra: list[str] = []
    dockerfile_path = files["good"]
    if case == "bad-policy":
        files["policy"].write_text('[[pin]]\npackage = "torch"\nversion = "not a specifier"\n')
    elif case == "missing-dockerfile":
        dockerfile_path = tmp_path / "Dockerfile.missing"
    else:
        extra = ["--build-arg", "NOEQUALS"]
    code, sarif, junit = gate(dockerfile_path, missing_image, files["policy"], tmp_path, *extra)
    assert code == 2
    assert message in capsys.readouterr().err
    assert not sarif.exists()
    assert not junit.exists()


def test_usage_error_exits_2(tmp_path: Path) -> None:
    """Missing required options are argparse usage errors (exit 2)."""
    with pytest.raises(SystemExit) as exc:
        main(["gate", "--image", "oci:/x:y"])
    assert exc.value.code == 2
