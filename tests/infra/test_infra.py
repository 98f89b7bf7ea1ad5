"""Tests of the test infrastructure itself: wheels, the loopback index, builds, the scenario.

They prove, cheaply, that the pieces other tests stand on are real: a built wheel has a valid
RECORD and installs with pip and resolves with uv from the served index; a buildah build's
``RUN pip install`` reaches the host's loopback index and a failing step is reported as such;
the scenario's step C really downgraded NCCL and cutlass-dsl in the bad image and not in the
good one; every export of the bad image is readable by skopeo with the same layers; and the
podman API socket serves the images buildah built.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import require_build_tools
from tests.infra.build import (
    BASE_IMAGE,
    SETUP_RACE,
    build_image,
    build_scratch_image,
    image_config,
    mounted_image,
    remove_image,
)
from tests.infra.index import JSON_TYPE, IndexServer
from tests.infra.podman import PodmanService
from tests.infra.scenario import BAD_IMAGE_EXPORTS, GOOD_STEPS, SITE, STEPS, VENV_SITE, Scenario
from tests.infra.wheels import WheelSpec, build_wheel, core_metadata, wheel_bytes

UV = Path(sys.executable).parent / "uv"


def _dist_infos(root: Path, site: str) -> set[str]:
    return {p.name for p in (root / site.lstrip("/")).glob("*.dist-info")}


# --------------------------------------------------------------------------- wheels, index


@pytest.mark.parametrize(
    ("name", "version", "filename"),
    [
        ("torch", "2.12.1+cu130", "torch-2.12.1+cu130-py3-none-any.whl"),
        (
            "flashinfer_python",
            "0.6.18.dev20261120",
            "flashinfer_python-0.6.18.dev20261120-py3-none-any.whl",
        ),
        ("Nvidia.NCCL-cu13", "2.30.03", "nvidia_nccl_cu13-2.30.3-py3-none-any.whl"),
    ],
)
def test_wheel_names_are_normalized(name: str, version: str, filename: str) -> None:
    """Wheel file names use the escaped PEP 503 name and the normalized version."""
    assert WheelSpec(name, version).filename == filename


def test_invalid_version_is_rejected() -> None:
    """A non-PEP 440 version cannot make a wheel."""
    with pytest.raises(ValueError, match="not-a-version"):
        WheelSpec("x", "not-a-version")


def test_wheel_is_deterministic_with_a_valid_record(tmp_path: Path) -> None:
    """The same spec gives the same bytes, and RECORD hashes every file it lists."""
    spec = WheelSpec(
        "demo", "1.0", ("dep>=1",), files={"demo/__init__.py": b"x = 1\n", "demo/d.bin": b"\0" * 10}
    )
    assert wheel_bytes(spec) == wheel_bytes(spec)
    path = build_wheel(spec, tmp_path)
    with zipfile.ZipFile(path) as zf:
        record = zf.read("demo-1.0.dist-info/RECORD").decode()
        rows = list(csv.reader(io.StringIO(record)))
        assert {r[0] for r in rows} == set(zf.namelist())
        for file, digest, size in rows:
            if file.endswith("RECORD"):
                assert (digest, size) == ("", "")
                continue
            data = zf.read(file)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert digest == "sha256=" + expected.decode()
            assert int(size) == len(data)
    assert b"Requires-Dist: dep>=1" in core_metadata(path)


def test_index_serves_pep503_pep658_and_pep691(
    tmp_path: Path, serve_wheels: Callable[[Path], IndexServer]
) -> None:
    """Project pages link each wheel with its hash and core-metadata hash, in HTML and JSON."""
    wheel = build_wheel(WheelSpec("torch", "2.11.0+cu130", ("filelock",)), tmp_path / "w")
    index = serve_wheels(tmp_path / "w")
    page = urllib.request.urlopen(f"{index.url}/torch/").read().decode()
    meta_sha = hashlib.sha256(core_metadata(wheel)).hexdigest()
    assert f'data-core-metadata="sha256={meta_sha}"' in page
    assert f'data-dist-info-metadata="sha256={meta_sha}"' in page
    assert "torch-2.11.0%2Bcu130-py3-none-any.whl#sha256=" in page
    meta = urllib.request.urlopen(f"{index.root}/files/{wheel.name}.metadata").read()
    assert hashlib.sha256(meta).hexdigest() == meta_sha
    req = urllib.request.Request(f"{index.url}/Torch/", headers={"Accept": JSON_TYPE})
    doc = json.loads(urllib.request.urlopen(req).read())
    assert doc["name"] == "torch"
    assert doc["files"][0]["core-metadata"] == {"sha256": meta_sha}


def test_pip_installs_from_served_index_into_a_venv(
    tmp_path: Path, serve_wheels: Callable[[Path], IndexServer]
) -> None:
    """pip resolves a marker-guarded pin through the loopback index into a fresh venv."""
    wheels = tmp_path / "w"
    build_wheel(
        WheelSpec("torch", "2.12.1", ('nvidia-nccl-cu13==2.29.7; platform_system == "Linux"',)),
        wheels,
    )
    build_wheel(WheelSpec("nvidia-nccl-cu13", "2.29.7"), wheels)
    build_wheel(WheelSpec("nvidia-nccl-cu13", "2.30.3"), wheels)
    index = serve_wheels(wheels)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--isolated",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--no-cache-dir",
            "--index-url",
            index.url,
            "torch",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    site = next(venv.glob("lib/python*/site-packages"))
    assert {p.name for p in site.glob("*.dist-info")} >= {
        "torch-2.12.1.dist-info",
        "nvidia_nccl_cu13-2.29.7.dist-info",
    }
    assert index.requested("/files/nvidia_nccl_cu13-2.29.7-py3-none-any.whl")


def test_uv_compiles_against_served_index(
    tmp_path: Path, serve_wheels: Callable[[Path], IndexServer]
) -> None:
    """uv (which speaks PEP 691 JSON) resolves a dev release and its pins from the index."""
    assert UV.exists(), "uv is not installed in the test venv (pip install -e '.[test]')"
    wheels = tmp_path / "w"
    build_wheel(WheelSpec("flashinfer-python", "0.6.18.dev20261120", ("torch>=2.12",)), wheels)
    build_wheel(WheelSpec("torch", "2.12.1", ("nvidia-nccl-cu13==2.29.7",)), wheels)
    build_wheel(WheelSpec("nvidia-nccl-cu13", "2.29.7"), wheels)
    index = serve_wheels(wheels)
    proc = subprocess.run(
        [
            str(UV),
            "pip",
            "compile",
            "--no-cache",
            "--no-header",
            "--index-url",
            index.url,
            "--prerelease=allow",
            "-",
        ],
        input="flashinfer-python\n",
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "nvidia-nccl-cu13==2.29.7" in proc.stdout
    assert "flashinfer-python==0.6.18.dev20261120" in proc.stdout


# --------------------------------------------------------------------------- builds


@pytest.mark.integration
def test_build_reaches_loopback_index_and_reports_failing_step(
    base_image: str, tmp_path: Path, serve_wheels: Callable[[Path], IndexServer]
) -> None:
    """RUN pip install inside a chroot build uses the host's 127.0.0.1 index; an
    unsatisfiable install fails the build at that step without raising."""
    build_wheel(WheelSpec("filelock", "3.16.1"), tmp_path / "w")
    index = serve_wheels(tmp_path / "w")
    tag = f"localhost/pinguard-test/infra-probe:fail-{os.getpid()}"
    text = (
        f"FROM {base_image}\nARG INDEX_URL\nRUN pip install --index-url $INDEX_URL filelock\n"
        "RUN pip install --index-url $INDEX_URL filelock==9.9.9\n"
    )
    result = build_image(tmp_path / "ctx", text, tag, {"INDEX_URL": index.url}, layers=False)
    try:
        assert not result.ok
        assert result.failed_step == 4
        assert "Successfully installed filelock-3.16.1" in result.log
        assert index.requested("/files/filelock-3.16.1-py3-none-any.whl")
    finally:
        remove_image(tag)


@pytest.mark.integration
def test_scratch_image_copies_site_packages_per_step(tmp_path: Path) -> None:
    """The Python-less fast path gives one layer per step holding real dist-info dirs."""
    require_build_tools()
    a = build_wheel(WheelSpec("alpha", "1.0"), tmp_path / "w")
    b = build_wheel(WheelSpec("beta", "2.0", ("alpha>=1",)), tmp_path / "w")
    tag = f"localhost/pinguard-test/infra-probe:scratch-{os.getpid()}"
    result = build_scratch_image(tmp_path / "build", tag, [[a], [b]])
    try:
        assert result.ok, result.log
        config = image_config(tag)
        assert len(config["rootfs"]["diff_ids"]) == 2
        with mounted_image(tag) as root:
            assert _dist_infos(root, "/usr/local/lib/python3.11/site-packages") == {
                "alpha-1.0.dist-info",
                "beta-2.0.dist-info",
            }
    finally:
        remove_image(tag)


# --------------------------------------------------------------------------- scenario


@pytest.mark.integration
def test_scenario_history_matches_steps(scenario: Scenario) -> None:
    """Each Dockerfile instruction is one history entry; only RUN steps carry a layer."""
    for image in (scenario.bad, scenario.good):
        config = image_config(image.tag)
        history = config["history"]
        assert len(history) == image.history_base + len(image.steps)
        layers = [h for h in history if not h.get("empty_layer")]
        assert len(layers) == len(config["rootfs"]["diff_ids"])
        for i, step in enumerate(image.steps, start=1):
            entry = history[image.history_base + i - 1]
            assert bool(entry.get("empty_layer")) == step.empty_layer, step.key
        c = history[scenario.bad.history_index("C") - 1]["created_by"]
        if image is scenario.bad:
            assert "flashinfer-python==0.6.18.dev20261120" in c
    # Every image ends with the fingerprint LABEL that lets later runs reuse it.
    assert scenario.bad.steps[:-1] == STEPS
    assert scenario.good.steps[:-1] == GOOD_STEPS
    assert scenario.bad.steps[-1].key == "fingerprint"


@pytest.mark.integration
def test_scenario_step_c_downgraded_nccl_in_bad_image_only(scenario: Scenario) -> None:
    """After step C the bad image holds NCCL 2.29.7, cutlass-dsl 4.2.1 and torch 2.12.1;
    the good image keeps the known-good set; ninja is gone and the venv exists in both."""
    with mounted_image(scenario.bad.tag) as root:
        bad = _dist_infos(root, SITE)
        venv = _dist_infos(root, VENV_SITE)
        libnccl = (root / SITE.lstrip("/") / "nvidia/nccl/lib/libnccl.so.2").read_text()
        rebuilt_msgspec = (root / SITE.lstrip("/") / "msgspec/_x.py").exists()
    with mounted_image(scenario.good.tag) as root:
        good = _dist_infos(root, SITE)
    assert {
        "nvidia_nccl_cu13-2.29.7.dist-info",
        "nvidia_cutlass_dsl-4.2.1.dist-info",
        "torch-2.12.1.dist-info",
        "flashinfer_python-0.6.18.dev20261120.dist-info",
        "vllm-0.11.0.dist-info",
    } <= bad
    assert "nvidia_nccl_cu13-2.30.3.dist-info" not in bad
    assert libnccl == "NCCL 2.29.7\n"
    assert rebuilt_msgspec  # step E reinstalled msgspec 0.19.0 from the nightly rebuild
    assert {
        "nvidia_nccl_cu13-2.30.3.dist-info",
        "nvidia_cutlass_dsl-4.3.0.dist-info",
        "torch-2.11.0+cu130.dist-info",
        "flashinfer_python-0.6.16.dist-info",
    } <= good
    assert not any(n.startswith("ninja-") for n in bad | good)
    assert "filelock-3.16.1.dist-info" in venv


@pytest.mark.integration
def test_scenario_step_c_log_shows_the_silent_break(scenario: Scenario) -> None:
    """pip's own output for step C names the broken vllm requirement, and exits 0."""
    assert "vllm 0.11.0 requires torch==2.11.0" in scenario.log
    assert "Successfully installed" in scenario.log


# --------------------------------------------------------------------------- exports, API


@pytest.mark.integration
@pytest.mark.parametrize("fixture", BAD_IMAGE_EXPORTS)
def test_exports_of_bad_image_are_readable(
    fixture: str, scenario: Scenario, request: pytest.FixtureRequest
) -> None:
    """Every export of the bad image has the same diff_ids and history as the stored image."""
    ref: str = request.getfixturevalue(fixture)
    args = ["--tls-verify=false"] if ref.startswith("docker://") else []
    out = subprocess.run(
        ["skopeo", "inspect", "--config", *args, ref],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    config = json.loads(out)
    stored = image_config(scenario.bad.tag)
    assert config["rootfs"]["diff_ids"] == stored["rootfs"]["diff_ids"]
    assert [h.get("created_by") for h in config["history"]] == [
        h.get("created_by") for h in stored["history"]
    ]


@pytest.mark.integration
def test_podman_api_serves_built_images(podman_api: PodmanService, scenario: Scenario) -> None:
    """The Docker API socket answers /_ping and knows the scenario images by tag."""
    assert podman_api.docker_host.startswith("unix://")
    assert podman_api.get("/_ping") == (200, b"OK")
    status, body = podman_api.get(f"/v1.41/images/{scenario.bad.tag}/json")
    assert status == 200
    assert json.loads(body)["Id"].removeprefix("sha256:") == scenario.bad.image_id


def test_base_image_tag_is_local() -> None:
    """The base image never resolves against a remote registry."""
    assert BASE_IMAGE.startswith("localhost/")


_FAKE_BUILDAH = """#!/bin/sh
# a stand-in for buildah: fails its first FAILS calls with MESSAGE, then writes the image id
n=$(($(cat "$COUNT" 2>/dev/null || echo 0) + 1)); echo "$n" > "$COUNT"
if [ "$n" -le "$FAILS" ]; then echo "STEP 1/2: FROM base"; echo "$MESSAGE"; exit 1; fi
while [ "$#" -gt 0 ]; do [ "$1" = --iidfile ] && echo sha256:abc > "$2"; shift; done
exit 0
"""


@pytest.mark.parametrize(
    ("message", "fails", "calls", "ok"),
    [
        (f"Close_Fd {SETUP_RACE}", 1, 2, True),  # the setup race: built again
        (f"Close_Fd {SETUP_RACE}", 5, 3, False),  # at most SETUP_RACE_TRIES times
        ("Error: building at STEP: exit status 1", 1, 1, False),  # a real failure: never again
    ],
)
def test_build_image_runs_again_only_after_buildahs_setup_race(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, message: str, fails: int, calls: int, ok: bool
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "buildah"
    fake.write_text(_FAKE_BUILDAH)
    fake.chmod(0o755)
    count = tmp_path / "count"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("COUNT", str(count))
    monkeypatch.setenv("FAILS", str(fails))
    monkeypatch.setenv("MESSAGE", message)
    result = build_image(tmp_path / "context", "FROM base\nRUN true\n", "t")
    assert int(count.read_text()) == calls
    assert result.ok is ok
    assert (result.image_id == "sha256:abc") is ok
