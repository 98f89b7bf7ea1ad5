"""`pinguard predict` on bad input and on what it cannot model: one error line naming the
Dockerfile line (never a traceback) and the documented exit code; unpredicted steps named,
with their reason, failing the run with exit 3 unless --allow-incomplete.

The base is the tests' real Debian + Python image in containers-storage; installs go to a
real index on 127.0.0.1 (tests/infra/index.py), or to a closed port for the unreachable one.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.build import BASE_IMAGE
from tests.infra.cli import cli_streams
from tests.infra.index import IndexServer, serve_index
from tests.infra.wheels import WheelSpec, build_wheels

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    wheels = tmp_path_factory.mktemp("wheels")
    build_wheels([WheelSpec("six", "1.16.0"), WheelSpec("idna", "3.7")], wheels)
    with serve_index(wheels) as served:
        yield served


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    return path


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_a_dockerfile_that_does_not_parse(tmp_path: Path) -> None:
    path = _write(tmp_path, f"FROM {BASE_IMAGE}\nFROBNICATE x\n")
    code, out, err = cli_streams("predict", str(path))
    assert code == 2
    assert out == ""
    assert err == f"pinguard: error: {path}:2: unknown instruction 'FROBNICATE'\n"


def test_an_unknown_stage(tmp_path: Path) -> None:
    path = _write(tmp_path, f"FROM {BASE_IMAGE} AS build\nRUN true\n")
    code, _, err = cli_streams("predict", str(path), "--stage", "nope")
    assert code == 2
    assert err == f"pinguard: error: {path}: no stage named 'nope' (stages: build)\n"


def test_copy_from_an_unknown_stage_index(tmp_path: Path) -> None:
    path = _write(tmp_path, f"FROM {BASE_IMAGE}\nCOPY --from=3 /x /x\n")
    code, _, err = cli_streams("predict", str(path))
    assert code == 2
    assert err.startswith(f"pinguard: error: {path}:2: --from=3: no stage 3 before this one")


def test_a_missing_context_file(base_image: str, tmp_path: Path) -> None:
    path = _write(tmp_path, f"FROM {base_image}\nCOPY requirements.txt /tmp/r.txt\n")
    code, out, err = cli_streams("predict", str(path), "--no-cache")
    assert code == 2
    assert out == ""
    assert err == (
        f"pinguard: error: {path}:2: COPY requirements.txt: no such file or directory in the "
        f"build context {tmp_path}\n"
    )


def test_an_index_that_cannot_be_reached(base_image: str, tmp_path: Path) -> None:
    port = _closed_port()
    path = _write(
        tmp_path,
        f"FROM {base_image}\nARG INDEX_URL\nRUN pip install --index-url $INDEX_URL six\n",
    )
    code, out, err = cli_streams(
        "predict", str(path), "--build-arg", f"INDEX_URL=http://127.0.0.1:{port}/simple"
    )
    assert code == 3, err
    assert out == ""
    assert err.startswith(
        f"pinguard: error: {path}:3: could not reach the package index 127.0.0.1:{port}"
    ), err
    assert err.count("\n") == 1


def test_a_base_that_cannot_be_read(tmp_path: Path) -> None:
    path = _write(tmp_path, "FROM localhost/pinguard-test/no-such-image:1\nENV A=1\n")
    code, out, err = cli_streams("predict", str(path), "--no-cache")
    assert code == 3
    assert out == ""
    assert err.startswith(
        f"pinguard: error: {path}:1: FROM localhost/pinguard-test/no-such-image:1: cannot read "
        "the base image containers-storage:localhost/pinguard-test/no-such-image:1: "
    ), err
    assert "--allow-empty-base" in err
    assert err.count("\n") == 1


def test_an_unreadable_base_taken_as_empty_on_request(tmp_path: Path) -> None:
    path = _write(tmp_path, "FROM localhost/pinguard-test/no-such-image:1\nENV A=1\n")
    code, out, err = cli_streams(
        "predict", str(path), "--no-cache", "--allow-empty-base", "-f", "json"
    )
    doc = json.loads(out)
    assert code == 1, err  # no Python at all: the audit's rule, unless --allow-no-python
    assert any("could not be read" in n and "empty state" in n for n in doc["notes"])
    assert doc["no_python_environment"]["allowed"] is False
    code, out, _ = cli_streams(
        "predict", str(path), "--no-cache", "--allow-empty-base", "--allow-no-python"
    )
    assert code == 0


def test_from_scratch_is_the_empty_state(tmp_path: Path) -> None:
    path = _write(tmp_path, "FROM scratch\nLABEL a=b\n")
    code, out, _ = cli_streams("predict", str(path), "--allow-no-python", "-f", "json")
    doc = json.loads(out)
    assert code == 0
    assert "FROM scratch: the build starts from an empty state" in doc["notes"]
    assert [s["index"] for s in doc["steps"]] == [1]
    assert doc["steps"][0]["prediction"]["status"] == "predicted"


def test_a_step_it_cannot_model_is_unpredicted_and_exit_3(
    base_image: str, tmp_path: Path, index: IndexServer
) -> None:
    path = _write(
        tmp_path,
        f"FROM {base_image}\n"
        f"RUN pip install --index-url {index.url} six==1.16.0\n"
        "RUN ./install-cuda-extras.sh\n"
        f"RUN pip install --index-url {index.url} idna==3.7\n",
    )
    code, out, err = cli_streams("predict", str(path), "-f", "json")
    assert code == 3, err
    doc = json.loads(out)
    by_line = {s["prediction"]["line"]: s for s in doc["steps"] if "prediction" in s}
    assert by_line[2]["prediction"]["status"] == "predicted"
    assert [c["name"] for c in by_line[2]["changes"]] == ["six"]
    bad = by_line[3]["prediction"]
    assert bad["status"] == "unpredicted"
    assert bad["reason"] == "runs './install-cuda-extras.sh', which pinguard does not model"
    # later steps are still predicted, on the state before the unknown one, and say so
    assert [c["name"] for c in by_line[4]["changes"]] == ["idna"]
    assert any("rests on the state before step" in n for n in by_line[4]["prediction"]["notes"])
    assert doc["verdict"] == "fail"
    assert [i["why"] for i in doc["incomplete"]] == [f"unpredicted: {bad['reason']}"]
    assert doc["incomplete"][0]["what"].startswith(f"step {by_line[3]['index']} ({path}:3) RUN")
    # the audit's allowance takes the prediction as it is
    code, out, _ = cli_streams("predict", str(path), "--allow-incomplete")
    assert code == 0
    assert "unpredicted:" in out
    assert "install-cuda-extras.sh" in out


def test_a_resolution_that_fails_stops_the_build(
    base_image: str, tmp_path: Path, index: IndexServer
) -> None:
    path = _write(
        tmp_path,
        f"FROM {base_image}\nRUN pip install --index-url {index.url} six==9.9\nENV AFTER=1\n",
    )
    code, out, _ = cli_streams("predict", str(path), "-f", "json")
    assert code == 3
    doc = json.loads(out)
    steps = [s for s in doc["steps"] if "prediction" in s]
    assert steps[0]["prediction"]["reason"].startswith(
        "the resolver finds no solution, so pip would fail and the build stop here"
    )
    assert steps[1]["prediction"]["reason"] == (
        f"step {steps[0]['index']} would fail, so the build stops there"
    )
