"""`pinguard predict` on a multi-stage build, against the image buildah builds from it.

What the glm scenario does not exercise: a global ``ARG`` in ``FROM``, a builder stage whose
virtual environment the final stage copies whole (``COPY --from``), ``ENV PATH`` extended
from the base image's own ``PATH`` (so ``pip`` is the venv's), ``WORKDIR``, and requirements
and constraints files copied from the build context and read by ``pip install -r ... -c ...``
(a comment, a nested constraint, a pin the constraints hold back). The real build is the
oracle: every predicted step must equal the built image's audit step.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.infra.build import build_image, remove_image
from tests.infra.cli import cli_streams
from tests.infra.index import IndexServer

pytestmark = pytest.mark.integration

TAG = "localhost/pinguard-test/predict-multistage:latest"
DOCKERFILE = """\
ARG BASE
FROM ${BASE} AS builder
ARG INDEX_URL
RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install --index-url $INDEX_URL \\
    torch==2.11.0+cu130

FROM ${BASE}
ARG INDEX_URL
COPY --from=builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY requirements.txt constraints.txt ./
RUN pip install --index-url $INDEX_URL -r requirements.txt
"""
REQUIREMENTS = """\
# what the server needs
vllm==0.11.0   # pulls flashinfer-python and msgspec
ninja
-c constraints.txt
"""
CONSTRAINTS = """\
ninja==1.11.1.4
nvidia-nccl-cu13==2.30.3
"""
VENV = "/opt/venv/lib/python3.11/site-packages"


def _doc(result: tuple[int, str, str]) -> tuple[int, dict[str, Any]]:
    code, out, err = result
    assert out.startswith("{"), err
    doc: dict[str, Any] = json.loads(out)
    return code, doc


@pytest.fixture(scope="module")
def built(
    base_image: str, scenario_index: IndexServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, list[str]]]:
    """The context (Dockerfile, requirements, constraints) and the build args, built."""
    context = tmp_path_factory.mktemp("multistage")
    (context / "Dockerfile").write_text(DOCKERFILE)
    (context / "requirements.txt").write_text(REQUIREMENTS)
    (context / "constraints.txt").write_text(CONSTRAINTS)
    args = {"BASE": base_image, "INDEX_URL": scenario_index.url}
    result = build_image(context, DOCKERFILE, TAG, args)
    result.check()
    flags = [w for k, v in sorted(args.items()) for w in ("--build-arg", f"{k}={v}")]
    yield context, flags
    remove_image(TAG)


def test_the_multistage_prediction_equals_the_built_audit(
    built: tuple[Path, list[str]], tmp_path: Path
) -> None:
    context, flags = built
    cache = ["--cache-dir", str(tmp_path / "cache")]
    p_code, predicted = _doc(
        cli_streams("predict", str(context / "Dockerfile"), *flags, "-f", "json", *cache)
    )
    b_code, audited = _doc(cli_streams("audit", f"containers-storage:{TAG}", "-f", "json", *cache))
    assert [s["index"] for s in predicted["steps"]] == [s["index"] for s in audited["steps"]]
    for p, b in zip(predicted["steps"], audited["steps"], strict=True):
        if p["created_by"].startswith("COPY"):
            # a change no requirement explains is "made by this step (COMMAND)": the builder
            # names a copy by its content's digest (COPY dir:cf13...), the prediction by the
            # instruction; everything else is the same
            for change in (*p["changes"], *b["changes"]):
                assert change["reasons"][0].startswith(("made by this step (COPY", "torch "))
                del change["reasons"]
        assert (p["changes"], p["unmet"]) == (b["changes"], b["unmet"]), p["created_by"]
    assert predicted["findings"] == audited["findings"]
    assert p_code == b_code
    assert predicted["incomplete"] == []

    # not vacuous: the copy brought the builder's venv, the -r install landed in it
    copy = next(s for s in predicted["steps"] if s["created_by"].startswith("COPY --from"))
    assert {(c["environment"], c["name"]) for c in copy["changes"]} >= {
        (VENV, "torch"),
        (VENV, "nvidia-nccl-cu13"),
        (VENV, "pip"),
    }
    run = predicted["steps"][-1]
    assert run["prediction"]["status"] == "predicted"
    got = {(c["environment"], c["name"], c["kind"], c["after"]) for c in run["changes"]}
    assert got == {
        (VENV, "flashinfer-python", "added", "0.6.16"),
        (VENV, "msgspec", "added", "0.19.0"),
        (VENV, "ninja", "added", "1.11.1.4"),
        (VENV, "vllm", "added", "0.11.0"),
    }


def test_a_constraint_from_the_context_holds_the_install(
    built: tuple[Path, list[str]], tmp_path: Path
) -> None:
    """A constraints file pinning what the requirement cannot have is the build's failure,
    predicted: the step would stop the build, and the prediction says so (exit 3)."""
    context, flags = built
    (tmp_path / "requirements.txt").write_text("vllm==0.11.0\nninja\n-c constraints.txt\n")
    (tmp_path / "constraints.txt").write_text("msgspec==0.18.0\n")
    (tmp_path / "Dockerfile").write_text((context / "Dockerfile").read_text())
    code, doc = _doc(
        cli_streams(
            "predict",
            str(tmp_path / "Dockerfile"),
            *flags,
            "-f",
            "json",
            "--cache-dir",
            str(tmp_path / "cache"),
        )
    )
    assert code == 3
    reason = doc["steps"][-1]["prediction"]["reason"]
    assert reason.startswith("the resolver finds no solution, so pip would fail"), reason
    assert "msgspec" in reason
