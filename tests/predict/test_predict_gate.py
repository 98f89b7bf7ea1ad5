"""`pinguard gate --predict`: the gate refuses the glm Dockerfile before it is built, with the
verdict, SARIF and JUnit of the gate of the built image; exactly one of --image/--predict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.infra.build import BASE_IMAGE
from tests.infra.cli import cli_streams
from tests.infra.index import IndexServer
from tests.infra.paths import SARIF_SCHEMA
from tests.infra.scenario import Scenario, dockerfile

pytestmark = pytest.mark.integration

POLICY = """\
[[pin]]
package = "nvidia-nccl-cu13"
version = ">=2.30,<2.31"
reason = "NCCL below 2.30 hangs on the GB10 fabric"
"""


def _gate(tmp: Path, name: str, *argv: str) -> tuple[int, dict[str, Any], dict[str, Any], str]:
    sarif, junit = tmp / f"{name}.sarif", tmp / f"{name}.junit.xml"
    code, out, err = cli_streams(
        "gate",
        *argv,
        "--policy",
        str(tmp / "pinguard.toml"),
        "--sarif",
        str(sarif),
        "--junit",
        str(junit),
        "-f",
        "json",
        "--cache-dir",
        str(tmp / "cache"),
    )
    assert out.startswith("{"), err
    return code, json.loads(out), json.loads(sarif.read_text()), junit.read_text()


@pytest.fixture
def setup(
    tmp_path: Path, scenario: Scenario, scenario_index: IndexServer, nightly_index: IndexServer
) -> tuple[Path, list[str]]:
    (tmp_path / "pinguard.toml").write_text(POLICY)
    (tmp_path / "Dockerfile.bad").write_text(dockerfile(BASE_IMAGE, scenario.bad.steps))
    (tmp_path / "Dockerfile.good").write_text(dockerfile(BASE_IMAGE, scenario.good.steps))
    args = [
        "--build-arg",
        f"INDEX_URL={scenario_index.url}",
        "--build-arg",
        f"NIGHTLY_URL={nightly_index.url}",
    ]
    return tmp_path, args


def test_the_gate_refuses_the_bad_dockerfile_before_the_build(
    setup: tuple[Path, list[str]], scenario: Scenario
) -> None:
    tmp, args = setup
    bad = str(tmp / "Dockerfile.bad")
    p_code, predicted, p_sarif, p_junit = _gate(
        tmp, "predicted", "--dockerfile", bad, "--predict", *args
    )
    image = f"containers-storage:{scenario.bad.tag}"
    b_code, built, b_sarif, _ = _gate(tmp, "built", "--dockerfile", bad, "--image", image, *args)
    assert p_code == b_code == 1
    assert predicted["gate"]["verdict"] == built["gate"]["verdict"] == "fail"
    assert predicted["gate"]["predicted"] is True
    assert built["gate"]["predicted"] is False
    assert predicted["findings"] == built["findings"]
    assert any(f["rule"] == "pin-violation" for f in predicted["findings"])
    jsonschema.validate(p_sarif, json.loads(SARIF_SCHEMA.read_text()))

    def located(doc: dict[str, Any]) -> list[tuple[str, int]]:
        out = []
        for r in doc["runs"][0]["results"]:
            loc = r["locations"][0]["physicalLocation"]
            out.append((r["ruleId"], loc.get("region", {}).get("startLine", 0)))
        return sorted(out)

    # the same results at the same Dockerfile lines: the prediction knows its lines, the
    # built image's gate aligns its history with the Dockerfile
    assert located(p_sarif) == located(b_sarif)
    line_c = scenario.bad.history_index("C") - scenario.bad.history_base + 1
    assert ("pin-violation", line_c) in located(p_sarif)
    assert "pin-violation" in p_junit


def test_the_gate_passes_the_good_dockerfile(setup: tuple[Path, list[str]]) -> None:
    tmp, args = setup
    good = str(tmp / "Dockerfile.good")
    code, doc, _, _ = _gate(
        tmp, "good", "--dockerfile", good, "--predict", *args, "--fail-on", "error"
    )
    assert code == 0, doc["findings"]
    assert doc["gate"]["verdict"] == "pass"


@pytest.mark.parametrize("which", [(), ("--image", "x.tar", "--predict")])
def test_exactly_one_of_image_and_predict(tmp_path: Path, which: tuple[str, ...]) -> None:
    path = tmp_path / "Dockerfile"
    path.write_text("FROM scratch\n")
    code, out, err = cli_streams("gate", "--dockerfile", str(path), *which)
    assert code == 2
    assert out == ""
    assert err == (
        "pinguard: error: give --image REF (the image built from the Dockerfile) or --predict "
        "(predict the build from the Dockerfile), one of them\n"
    )
