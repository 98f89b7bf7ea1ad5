"""A ``FROM`` name that is not ``localhost/...`` is read from its registry, as the builder
pulls it: the glm good image pushed to a real ``docker-registry`` on 127.0.0.1 is the base,
and the nightly step on top of it is predicted to downgrade NCCL, as on the built image."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.infra.cli import cli_streams
from tests.infra.index import IndexServer

pytestmark = pytest.mark.integration

NIGHTLY = (
    "RUN pip install --pre --index-url $NIGHTLY_URL --extra-index-url $INDEX_URL "
    "flashinfer-python==0.6.18.dev20261120\n"
)


def test_a_base_from_a_registry(
    good_image_registry: str,
    scenario_index: IndexServer,
    nightly_index: IndexServer,
    tmp_path: Path,
) -> None:
    name = good_image_registry.removeprefix("docker://")
    path = tmp_path / "Dockerfile"
    path.write_text(f"FROM {name}\nARG INDEX_URL\nARG NIGHTLY_URL\n{NIGHTLY}")
    code, out, err = cli_streams(
        "predict",
        str(path),
        "--build-arg",
        f"INDEX_URL={scenario_index.url}",
        "--build-arg",
        f"NIGHTLY_URL={nightly_index.url}",
        "-f",
        "json",
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    assert out.startswith("{"), err
    doc = json.loads(out)
    assert code == 1
    assert any(f"audited docker://{name}" in n for n in doc["notes"]), doc["notes"]
    last = doc["steps"][-1]
    assert last["prediction"]["status"] == "predicted"
    moves = {c["name"]: (c["kind"], c["before"], c["after"]) for c in last["changes"]}
    assert moves["nvidia-nccl-cu13"] == ("downgraded", "2.30.3", "2.29.7")
    assert moves["torch"] == ("upgraded", "2.11.0+cu130", "2.12.1")
