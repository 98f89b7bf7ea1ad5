"""`pinguard predict` on the real torch wheels, against the image buildah builds from them.

torch 2.11.0 and 2.14.1 for CPython 3.11 with their whole dependency closures (the nvidia-*
CUDA 13 wheels; NCCL 2.28.9 and 2.30.7), downloaded once from the package index into the test
cache (tests/infra/torchimage.py) and served on a loopback index: the first install, the torch
upgrade (NCCL 2.28.9 -> 2.30.7, caused by torch 2.14.1's exact pin) and a ``--no-deps``
re-pin of NCCL back to 2.28.9 (which leaves torch's pin unmet) are predicted and built, and
every step of the prediction must equal the built image's audit. About 6 GB of wheels and a
build of several minutes: only with ``--large-corpus``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.infra.build import build_image, cache_dir, ensure_base_image, remove_image
from tests.infra.cli import cli_streams
from tests.infra.index import serve_index
from tests.infra.torchimage import torch_wheelhouse

pytestmark = [pytest.mark.integration, pytest.mark.large_corpus]

TAG = "localhost/pinguard-test/predict-torch:latest"
SITE = "/usr/local/lib/python3.11/dist-packages"
DOCKERFILE = """\
FROM {base}
ARG INDEX_URL
RUN pip install --index-url $INDEX_URL torch==2.11.0
RUN pip install --index-url $INDEX_URL torch==2.14.1
RUN pip install --index-url $INDEX_URL --no-deps nvidia-nccl-cu13==2.28.9
"""


def _index_dir() -> Path:
    """One directory holding both torch releases' wheel closures (links into the cache)."""
    out = cache_dir() / "real-wheels" / "torch-predict-index"
    out.mkdir(parents=True, exist_ok=True)
    for version in ("2.11.0", "2.14.1"):
        for wheel in torch_wheelhouse(version).glob("*.whl"):
            link = out / wheel.name
            if not link.exists():
                link.symlink_to(wheel)
    return out


def _json(result: tuple[int, str, str]) -> tuple[int, dict[str, Any]]:
    code, out, err = result
    assert out.startswith("{"), err[-3000:]
    doc: dict[str, Any] = json.loads(out)
    return code, doc


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, ...]]:
    """(prediction, built audit, the history index of the base's last step)."""
    context = tmp_path_factory.mktemp("predict-torch")
    base = ensure_base_image()
    text = DOCKERFILE.format(base=base)
    (context / "Dockerfile").write_text(text)
    cache = ["--cache-dir", str(context / "cache")]
    with serve_index(_index_dir()) as index:
        args = ["--build-arg", f"INDEX_URL={index.url}"]
        predicted = _json(
            cli_streams("predict", str(context / "Dockerfile"), *args, "-f", "json", *cache)
        )
        result = build_image(context, text, TAG, {"INDEX_URL": index.url}, timeout=3600)
    try:
        result.check()
        built = _json(cli_streams("audit", f"containers-storage:{TAG}", "-f", "json", *cache))
        yield predicted, built
    finally:
        remove_image(TAG)


def _step(doc: dict[str, Any], line: int) -> dict[str, Any]:
    base = len(doc["steps"]) - 4  # the base's history, then ARG and three RUNs (lines 2-5)
    return next(s for s in doc["steps"] if s["index"] == base + line - 1)


def test_every_step_of_the_real_torch_build_is_predicted(runs: tuple[Any, ...]) -> None:
    (p_code, predicted), (b_code, built) = runs
    assert [s["index"] for s in predicted["steps"]] == [s["index"] for s in built["steps"]]
    for p, b in zip(predicted["steps"], built["steps"], strict=True):
        assert (p["changes"], p["unmet"]) == (b["changes"], b["unmet"]), p["created_by"]
        if "prediction" in p:
            assert p["prediction"]["status"] == "predicted", p["prediction"]
    assert predicted["findings"] == built["findings"]
    assert predicted["verdict"] == built["verdict"]
    assert p_code == b_code


def test_the_upgrade_moves_nccl_with_torch_as_its_cause(runs: tuple[Any, ...]) -> None:
    (_, predicted), _ = runs
    upgrade = _step(predicted, 4)
    nccl = next(c for c in upgrade["changes"] if c["name"] == "nvidia-nccl-cu13")
    assert (nccl["kind"], nccl["before"], nccl["after"]) == ("upgraded", "2.28.9", "2.30.7")
    assert nccl["causes"][0]["package"] == "torch"
    assert nccl["causes"][0]["version"] == "2.14.1"
    assert nccl["causes"][0]["requirement"].startswith("nvidia-nccl-cu13==2.30.7")


def test_the_repin_step_downgrades_nccl_and_leaves_torch_unmet(runs: tuple[Any, ...]) -> None:
    (_, predicted), _ = runs
    repin = _step(predicted, 5)
    assert [(c["name"], c["kind"], c["before"], c["after"]) for c in repin["changes"]] == [
        ("nvidia-nccl-cu13", "downgraded", "2.30.7", "2.28.9")
    ]
    unmet = [(u["package"], u["requirement"]) for u in repin["unmet"]]
    assert len(unmet) == 1
    assert unmet[0][0] == "torch"
    assert unmet[0][1].startswith("nvidia-nccl-cu13==2.30.7")
    rules = {(f["rule"], f["step"]) for f in predicted["findings"]}
    assert ("downgrade", repin["index"]) in rules
