"""`pinguard predict` against the truth: the glm scenario's Dockerfiles, predicted without a
build, equal the audits of the images buildah built from them, step by step.

The oracle is the real build (tests/infra/scenario.py: ``buildah bud --layers`` over the cached
Debian base, pip 23.0.1 in the image installing from the stand-in indexes on 127.0.0.1); the
prediction reads the same Dockerfile, the same base image from containers-storage and the same
indexes. Every step is compared (changes, causes and their reasons, unmet requirements), then
the findings, the verdict, the exit code and the final environments, for the bad image (the
nightly step that downgrades NCCL) and the good one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.infra.build import BASE_IMAGE
from tests.infra.cli import cli_streams
from tests.infra.index import IndexServer
from tests.infra.paths import AUDIT_SCHEMA, SARIF_SCHEMA
from tests.infra.scenario import Scenario, ScenarioImage, dockerfile

pytestmark = pytest.mark.integration

Doc = dict[str, Any]


def _json(code_out_err: tuple[int, str, str]) -> tuple[int, Doc]:
    code, out, err = code_out_err
    assert out.startswith("{"), err
    doc: Doc = json.loads(out)
    return code, doc


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("predict-glm")


def _build_args(scenario_index: IndexServer, nightly_index: IndexServer) -> list[str]:
    return [
        "--build-arg",
        f"INDEX_URL={scenario_index.url}",
        "--build-arg",
        f"NIGHTLY_URL={nightly_index.url}",
    ]


def _predict(
    image: ScenarioImage, workdir: Path, build_args: list[str], *extra: str
) -> tuple[int, Doc]:
    path = workdir / f"Dockerfile.{image.tag.rsplit(':', 1)[1]}"
    path.write_text(dockerfile(BASE_IMAGE, image.steps))
    cache = str(workdir / "cache")
    return _json(
        cli_streams("predict", str(path), *build_args, "-f", "json", "--cache-dir", cache, *extra)
    )


def _audit(image: ScenarioImage, workdir: Path) -> tuple[int, Doc]:
    cache = str(workdir / "cache")
    ref = f"containers-storage:{image.tag}"
    return _json(cli_streams("audit", ref, "-f", "json", "--cache-dir", cache))


@pytest.fixture(scope="module")
def bad(
    scenario: Scenario, scenario_index: IndexServer, nightly_index: IndexServer, workdir: Path
) -> tuple[tuple[int, Doc], tuple[int, Doc]]:
    """(prediction, built audit) of the bad image: (exit code, JSON document) each."""
    args = _build_args(scenario_index, nightly_index)
    return _predict(scenario.bad, workdir, args), _audit(scenario.bad, workdir)


@pytest.fixture(scope="module")
def good(
    scenario: Scenario, scenario_index: IndexServer, nightly_index: IndexServer, workdir: Path
) -> tuple[tuple[int, Doc], tuple[int, Doc]]:
    args = _build_args(scenario_index, nightly_index)
    return _predict(scenario.good, workdir, args), _audit(scenario.good, workdir)


def _step_facts(step: Doc) -> tuple[object, ...]:
    return (step["changes"], step["unmet"])


def _assert_steps_equal(predicted: Doc, built: Doc, image: ScenarioImage) -> None:
    assert [s["index"] for s in predicted["steps"]] == [s["index"] for s in built["steps"]]
    for p, b in zip(predicted["steps"], built["steps"], strict=True):
        assert _step_facts(p) == _step_facts(b), f"step {p['index']}: {p['created_by']}"
        if p["index"] <= image.history_base:
            assert "prediction" not in p  # the base image's own, audited steps
        else:
            assert p["prediction"]["status"] == "predicted", p
            # the Dockerfile line of the instruction: line 1 is FROM
            assert p["prediction"]["line"] == p["index"] - image.history_base + 1


def test_every_predicted_step_of_the_bad_build_equals_its_audit(
    bad: tuple[tuple[int, Doc], tuple[int, Doc]], scenario: Scenario
) -> None:
    (_, predicted), (_, built) = bad
    _assert_steps_equal(predicted, built, scenario.bad)
    # not vacuous: the nightly step's downgrade, with torch's pin as the cause, is there
    step = next(s for s in predicted["steps"] if s["index"] == scenario.bad.history_index("C"))
    nccl = next(c for c in step["changes"] if c["name"] == "nvidia-nccl-cu13")
    assert (nccl["kind"], nccl["before"], nccl["after"]) == ("downgraded", "2.30.3", "2.29.7")
    assert nccl["causes"][0]["package"] == "torch"
    assert nccl["causes"][0]["requirement"].startswith("nvidia-nccl-cu13==2.29.7")
    assert [u["requirement"] for u in step["unmet"]] == ["torch==2.11.0"]
    for key in ("A", "B", "C", "D", "E", "F"):  # every install step changed what it should
        step = next(s for s in predicted["steps"] if s["index"] == scenario.bad.history_index(key))
        want = {(c.environment, c.name, c.kind) for c in scenario.bad.step(key).changes}
        got = {(c["environment"], c["name"], c["kind"]) for c in step["changes"]}
        assert want <= got, key


def test_the_bad_prediction_judges_as_the_audit_does(
    bad: tuple[tuple[int, Doc], tuple[int, Doc]],
) -> None:
    (p_code, predicted), (b_code, built) = bad
    assert predicted["findings"] == built["findings"]
    assert {f["rule"] for f in predicted["findings"]} >= {"downgrade", "unmet-requirement"}
    assert predicted["verdict"] == built["verdict"] == "fail"
    assert p_code == b_code == 1
    assert predicted["incomplete"] == built["incomplete"] == []

    def inventory(doc: Doc) -> dict[str, set[tuple[str, str]]]:
        return {
            e["path"]: {(d["name"], d["version"]) for d in e["packages"]}
            for e in doc["environments"]
        }

    assert inventory(predicted) == inventory(built)
    assert [e["python"] for e in predicted["environments"]] == [
        e["python"] for e in built["environments"]
    ]


def test_the_good_build_is_predicted_to_pass_like_its_audit(
    good: tuple[tuple[int, Doc], tuple[int, Doc]], scenario: Scenario
) -> None:
    (p_code, predicted), (b_code, built) = good
    _assert_steps_equal(predicted, built, scenario.good)
    assert predicted["findings"] == built["findings"]
    assert p_code == b_code == 0
    assert predicted["verdict"] == "pass"


def test_the_json_names_the_resolver_and_validates(
    bad: tuple[tuple[int, Doc], tuple[int, Doc]], scenario: Scenario
) -> None:
    (_, predicted), _ = bad
    jsonschema.validate(predicted, json.loads(AUDIT_SCHEMA.read_text()))
    assert predicted["image"]["transport"] == "dockerfile"
    step = next(s for s in predicted["steps"] if s["index"] == scenario.bad.history_index("C"))
    resolver = step["prediction"]["resolver"]
    assert resolver.startswith("uv "), resolver
    assert "modelling pip" in resolver, resolver
    label = next(s for s in predicted["steps"] if s["index"] == scenario.bad.history_index("label"))
    assert label["prediction"] == {
        "status": "predicted",
        "resolver": None,
        "reason": None,
        "dockerfile": label["prediction"]["dockerfile"],
        "line": label["prediction"]["line"],
        "notes": [],
    }
    assert any("predicted from" in n and "nothing built" in n for n in predicted["notes"])


FORMATS = ("table", "sarif", "junit", "markdown", "html", "cyclonedx", "spdx")


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_audit_format_renders_the_prediction(
    fmt: str,
    scenario: Scenario,
    scenario_index: IndexServer,
    nightly_index: IndexServer,
    workdir: Path,
) -> None:
    path = workdir / "Dockerfile.formats"
    path.write_text(dockerfile(BASE_IMAGE, scenario.bad.steps))
    out = workdir / f"report.{fmt}"
    code, _, err = cli_streams(
        "predict",
        str(path),
        *_build_args(scenario_index, nightly_index),
        "-f",
        fmt,
        "-o",
        str(out),
        "--cache-dir",
        str(workdir / "cache"),
    )
    assert code == 1, err
    text = out.read_text()
    assert "nvidia-nccl-cu13" in text
    if fmt == "sarif":
        doc = json.loads(text)
        jsonschema.validate(doc, json.loads(SARIF_SCHEMA.read_text()))
        results = doc["runs"][0]["results"]
        downgrade = next(
            r
            for r in results
            if r["ruleId"] == "downgrade" and "nvidia-nccl-cu13" in r["message"]["text"]
        )
        location = downgrade["locations"][0]["physicalLocation"]
        line_c = scenario.bad.history_index("C") - scenario.bad.history_base + 1
        assert location["region"]["startLine"] == line_c
        assert location["artifactLocation"]["uri"].endswith("Dockerfile.formats")
    if fmt in ("table", "markdown", "html"):
        assert "2.30.3" in text
        assert "2.29.7" in text
