"""The shipped constraints/ files pass `pinguard constraints check` against the GB10 policy."""

from __future__ import annotations

from pathlib import Path

import tomlkit

from tests.infra.cli import cli_streams as cli

ROOT = Path(__file__).parents[2]
GB10 = ROOT / "policies" / "glm-serving-gb10.toml"
CU13 = ROOT / "constraints" / "glm-serving-cu13.txt"
CU13_LOCK = ROOT / "constraints" / "pylock.glm-serving-cu13.toml"


def test_constraints_folder_checks_clean() -> None:
    """`pinguard constraints check constraints/*` (README included) passes the GB10 policy."""
    files = sorted(str(p) for p in (ROOT / "constraints").iterdir())
    assert str(CU13) in files
    assert str(CU13_LOCK) in files
    code, out, err = cli("constraints", "check", *files, "--policy", str(GB10))
    assert (code, out) == (0, "")
    assert "skipped" in err
    assert "README.md" in err


def test_cu13_set_is_the_story() -> None:
    """The CUDA 13 set pins torch 2.12.1 with NCCL 2.30.3 (the override), cutlass-dsl and its
    CUDA 13 libs, and leaves the installer's setuptools out."""
    pins = dict(
        line.split("==", 1)
        for line in CU13.read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert pins["torch"] == "2.12.1"
    assert pins["nvidia-nccl-cu13"] == "2.30.3"
    assert pins["nvidia-cutlass-dsl"] == "4.8.1"
    assert pins["nvidia-cutlass-dsl-libs-cu13"] == "4.8.1"
    assert pins["flashinfer-python"] == "0.7.4"
    assert "setuptools" not in pins
    assert "pip" not in pins


def test_a_forbidden_nccl_in_the_folder_fails(tmp_path: Path) -> None:
    """The same file with the forbidden NCCL 2.29.7 is reported on its line, exit 1."""
    text = CU13.read_text().replace("nvidia-nccl-cu13==2.30.3", "nvidia-nccl-cu13==2.29.7")
    bad = tmp_path / "bad.txt"
    bad.write_text(text)
    line = text.splitlines().index("nvidia-nccl-cu13==2.29.7") + 1
    code, out, _ = cli("constraints", "check", str(bad), "--policy", str(GB10))
    assert code == 1
    assert out.startswith(
        f"{bad}:{line}: nvidia-nccl-cu13==2.29.7: nvidia-nccl-cu13 2.29.7 is forbidden"
    )


def test_cu13_lock_holds_the_same_set_with_real_wheels() -> None:
    """The shipped pylock.toml locks the constraints file's versions, each with at least one
    wheel on files.pythonhosted.org for CPython 3.11 x86_64 and a sha256."""
    pins = dict(
        line.split("==", 1)
        for line in CU13.read_text().splitlines()
        if line and not line.startswith("#")
    )
    doc = tomlkit.parse(CU13_LOCK.read_text()).unwrap()
    assert doc["lock-version"] == "1.0"
    assert {p["name"]: p["version"] for p in doc["packages"]} == pins
    torch = next(p for p in doc["packages"] if p["name"] == "torch")
    names = [w["name"] for w in torch["wheels"]]
    assert names
    assert all(n.startswith("torch-2.12.1-cp311-cp311-") and "x86_64" in n for n in names)
    for package in doc["packages"]:
        for wheel in package["wheels"]:
            assert wheel["url"].startswith("https://files.pythonhosted.org/")
            assert len(wheel["hashes"]["sha256"]) == 64
