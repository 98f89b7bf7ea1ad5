"""`pinguard constraints REF --format pylock` on the real scenario image, installed with uv.

The lock is written from the buildah-built bad image against the scenario's main index on
127.0.0.1; the expected versions are the scenario's own data (steps A and B), the expected
hashes are computed here from the wheel files the index serves; uv installs the lock into a
throwaway target and the versions found there are read from the directory, not from pinguard.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
import tomlkit

from pinguard.repair.resolve.uv import uv_bin
from tests.infra.cli import cli
from tests.infra.index import IndexServer
from tests.infra.scenario import Scenario

pytestmark = pytest.mark.integration

GB10 = Path(__file__).parents[2] / "policies" / "glm-serving-gb10.toml"


@pytest.fixture(scope="module")
def lock(
    bad_image_oci: str,
    scenario_index: IndexServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, int, str]:
    path = tmp_path_factory.mktemp("pylock") / "pylock.toml"
    code, report = cli(
        "constraints",
        bad_image_oci,
        "--policy",
        str(GB10),
        "--format",
        "pylock",
        "--index-url",
        scenario_index.url,
        "-o",
        str(path),
        "--verify",
    )
    return path, code, report


def test_pylock_locks_the_known_good_set_with_index_hashes(
    lock: tuple[Path, int, str],
    scenario: Scenario,
    scenario_wheels: tuple[Path, Path],
    scenario_index: IndexServer,
) -> None:
    """Every package of the known-good set, at its version, with the wheel's URL on the index
    and its sha256, for the image's CPython 3.11 on linux/amd64; --verify says uv installed it."""
    path, code, report = lock
    assert code == 0, report
    assert "verify: uv installed all" in report
    doc = tomlkit.parse(path.read_text()).unwrap()
    assert doc["lock-version"] == "1.0"
    assert doc["created-by"] == "pinguard"
    assert doc["requires-python"] == "==3.11.*"
    assert doc["environments"] == [
        'python_version == "3.11" and sys_platform == "linux" and '
        'platform_machine == "x86_64" and implementation_name == "cpython"'
    ]
    locked = {p["name"]: p["version"] for p in doc["packages"]}
    assert locked == scenario.known_good()
    assert [p["name"] for p in doc["packages"]] == sorted(locked)
    main_dir = scenario_wheels[0]
    for package in doc["packages"]:
        assert package["wheels"], package["name"]
        for wheel in package["wheels"]:
            data = (main_dir / wheel["name"]).read_bytes()
            assert wheel["hashes"] == {"sha256": hashlib.sha256(data).hexdigest()}
            assert wheel["url"].startswith(scenario_index.root)


def test_pylock_installs_with_uv_and_reproduces_the_known_good_versions(
    lock: tuple[Path, int, str], scenario: Scenario, tmp_path: Path
) -> None:
    """uv installs the lock (no resolution, no index given) into a fresh target; the dist-info
    directories found there are exactly the known-good set."""
    path, code, report = lock
    assert code == 0, report
    target = tmp_path / "site"
    proc = subprocess.run(
        [
            uv_bin(),
            "pip",
            "install",
            "--no-config",
            "--python-version",
            "3.11",
            "--python-platform",
            "x86_64-unknown-linux-gnu",
            "--target",
            str(target),
            "-r",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    found = {}
    for meta in target.glob("*.dist-info"):
        fields = dict(
            line.split(": ", 1)
            for line in (meta / "METADATA").read_text().splitlines()
            if line.startswith(("Name: ", "Version: "))
        )
        found[fields["Name"].lower().replace("_", "-")] = fields["Version"]
    assert found == scenario.known_good()


def test_pylock_names_what_the_index_lacks(
    bad_image_oci: str, nightly_index: IndexServer, tmp_path: Path
) -> None:
    """Against the nightly index alone, the lock is refused, naming each missing package
    (never a silently shorter lock), and no file is written."""
    path = tmp_path / "pylock.toml"
    code, report = cli(
        "constraints",
        bad_image_oci,
        "--policy",
        str(GB10),
        "--format",
        "pylock",
        "--index-url",
        nightly_index.url,
        "-o",
        str(path),
    )
    assert code == 2, report
    assert "nvidia-nccl-cu13==2.30.3: no wheel for this target on the index" in report
    assert "torch==2.11.0+cu130: no wheel for this target on the index" in report
    assert not path.exists()


def test_constraints_check_reads_pylock(lock: tuple[Path, int, str], tmp_path: Path) -> None:
    """`constraints check` accepts the lock (clean against the policy), and flags a lock whose
    NCCL was changed to the forbidden 2.29.7, on that package's line."""
    path, code, report = lock
    assert code == 0, report
    clean_code, clean_out = cli("constraints", "check", str(path), "--policy", str(GB10))
    assert (clean_code, clean_out) == (0, "")
    text = path.read_text()
    bad = tmp_path / "pylock.toml"
    bad.write_text(text.replace('version = "2.30.3"', 'version = "2.29.7"'))
    line = next(
        i
        for i, ln in enumerate(bad.read_text().splitlines(), 1)
        if ln == 'name = "nvidia-nccl-cu13"'
    )
    bad_code, bad_out = cli("constraints", "check", str(bad), "--policy", str(GB10))
    assert bad_code == 1
    assert (
        f"{bad}:{line}: nvidia-nccl-cu13==2.29.7: nvidia-nccl-cu13 2.29.7 is forbidden" in bad_out
    )


def test_a_lock_named_outside_pep_751_is_noted_and_still_verified(
    bad_image_oci: str, scenario_index: IndexServer, tmp_path: Path
) -> None:
    """`-o locks/glm.toml`: uv refuses lock files not named pylock.toml or pylock.<name>.toml,
    so pinguard says so before anything else and verifies through a correctly named copy
    (it used to report every package as "installed nothing")."""
    path = tmp_path / "locks" / "glm.toml"
    path.parent.mkdir()
    code, report = cli(
        "constraints",
        bad_image_oci,
        "--policy",
        str(GB10),
        "-f",
        "pylock",
        "--index-url",
        scenario_index.url,
        "-o",
        str(path),
        "--verify",
    )
    assert code == 0, report
    lines = report.splitlines()
    assert lines[0] == (
        f"note: {path}: PEP 751 names lock files pylock.toml or pylock.<name>.toml; installers "
        "(uv, pip) refuse other names, so rename it before installing; --verify installs it "
        "through a copy named pylock.toml"
    )
    assert any(ln.startswith("verify: uv installed all ") for ln in lines)
    assert "installed nothing" not in report
    assert tomlkit.parse(path.read_text()).unwrap()["created-by"] == "pinguard"
