"""pylock.toml building: wheel tag selection for the image's Python/platform/glibc, errors."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import tomlkit
from packaging.utils import canonicalize_name

from pinguard.models import DebPackage, Platform
from pinguard.repair.constraints import Constraint, ConstraintSet
from pinguard.repair.pylock import (
    LockError,
    build_lock,
    glibc_of,
    is_pylock,
    read_pylock,
    render_pylock,
)
from pinguard.repair.resolve.index import SimpleIndex, TargetEnvironment

X86 = TargetEnvironment("3.11", Platform("linux", "amd64"))
TORCH = "torch-2.11.0+cu130"
FILES = (
    f"{TORCH}-cp311-cp311-manylinux_2_28_x86_64.whl",  # fits
    f"{TORCH}-cp311-cp311-linux_x86_64.whl",  # fits too (plain linux tag)
    f"{TORCH}-cp311-cp311-manylinux_2_28_aarch64.whl",  # wrong machine
    f"{TORCH}-cp312-cp312-manylinux_2_28_x86_64.whl",  # wrong Python
    f"{TORCH}-cp311-cp311-manylinux_2_39_x86_64.whl",  # needs a newer glibc than 2.36
    "nvidia_nccl_cu13-2.30.3-py3-none-manylinux2014_x86_64.whl",  # legacy alias of 2_17
    "nvidia_nccl_cu13-2.30.4-py3-none-manylinux2014_x86_64.whl",  # newer, not pinned
    "nvidia_cutlass_dsl-4.3.0-cp312-cp312-manylinux_2_28_x86_64.whl",  # no 3.11 wheel
)


def cset(*lines: str) -> ConstraintSet:
    entries = []
    for line in lines:
        name, _, version = line.partition("==")
        entries.append(Constraint(canonicalize_name(name), f"=={version}", "image"))
    return ConstraintSet(entries=tuple(entries), environment="/usr/lib/python3/dist-packages")


@pytest.fixture
def links(tmp_path: Path) -> Path:
    for i, name in enumerate(FILES):
        (tmp_path / name).write_bytes(f"not really a wheel {i}\n".encode())
    return tmp_path


def test_wheels_chosen_by_tags_for_the_target(links: Path) -> None:
    """Only wheels for CPython 3.11, x86_64 and glibc <= 2.36 are locked, with their sha256."""
    lock = build_lock(
        cset("torch==2.11.0+cu130", "nvidia-nccl-cu13==2.30.3"),
        client=SimpleIndex((), (str(links),)),
        target=X86,
        glibc=(2, 36),
    )
    got = {p.name: [w.filename for w in p.wheels] for p in lock.packages}
    assert got == {
        "nvidia-nccl-cu13": ["nvidia_nccl_cu13-2.30.3-py3-none-manylinux2014_x86_64.whl"],
        "torch": [
            f"{TORCH}-cp311-cp311-linux_x86_64.whl",
            f"{TORCH}-cp311-cp311-manylinux_2_28_x86_64.whl",
        ],
    }
    first = lock.packages[0].wheels[0]
    assert first.sha256 == hashlib.sha256((links / first.filename).read_bytes()).hexdigest()
    text = render_pylock(lock)
    assert render_pylock(lock) == text  # deterministic
    doc = tomlkit.parse(text).unwrap()
    assert [p["version"] for p in doc["packages"]] == ["2.30.3", "2.11.0+cu130"]


def test_a_package_without_a_wheel_for_the_target_is_an_error(links: Path) -> None:
    """cutlass-dsl has only a CPython 3.12 wheel: the lock is refused, naming it and what the
    index has; the packages that do fit do not hide it."""
    with pytest.raises(LockError) as info:
        build_lock(
            cset("nvidia-nccl-cu13==2.30.3", "nvidia-cutlass-dsl==4.3.0", "vllm==0.11.0"),
            client=SimpleIndex((), (str(links),)),
            target=X86,
            glibc=(2, 36),
        )
    message = str(info.value)
    assert "cannot lock 2 of 3 packages for CPython 3.11 on linux/amd64" in message
    assert "nvidia-cutlass-dsl==4.3.0: no wheel for this target on the index (it has 4.3.0)" in (
        message
    )
    assert "vllm==0.11.0: no wheel for this target on the index (it has no wheels of it)" in (
        message
    )


def test_old_glibc_refuses_newer_manylinux(links: Path) -> None:
    """With glibc 2.17 (manylinux2014) only the plain linux_x86_64 torch wheel is left."""
    lock = build_lock(
        cset("torch==2.11.0+cu130"),
        client=SimpleIndex((), (str(links),)),
        target=X86,
        glibc=(2, 17),
    )
    assert [w.filename for w in lock.packages[0].wheels] == [
        f"{TORCH}-cp311-cp311-linux_x86_64.whl"
    ]


@pytest.mark.parametrize(
    ("debs", "expected"),
    [
        ((DebPackage("libc6", "2.36-9+deb12u4", "amd64"),), (2, 36)),
        ((DebPackage("libc6", "2.39-0ubuntu8.3", "arm64"),), (2, 39)),
        ((DebPackage("python3", "3.11.2-1", "amd64"),), None),
        ((), None),
    ],
)
def test_glibc_from_libc6(debs: tuple[DebPackage, ...], expected: tuple[int, int] | None) -> None:
    """The image's glibc comes from its libc6 package version."""
    assert glibc_of(debs) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [("pylock.toml", True), ("pylock.gpu.toml", True), ("pyproject.toml", False), ("x.txt", False)],
)
def test_pylock_names(name: str, expected: bool) -> None:
    """PEP 751 file names: pylock.toml and pylock.<name>.toml."""
    assert is_pylock(name) is expected


def test_read_pylock_rejects_a_file_without_packages(tmp_path: Path) -> None:
    """A TOML file that is not a lock is a configuration error naming it."""
    path = tmp_path / "pylock.toml"
    path.write_text('lock-version = "1.0"\n')
    from pinguard.errors import ConfigError

    with pytest.raises(ConfigError, match="has no \\[\\[packages\\]\\] array"):
        read_pylock(path)


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("nvidia_nccl_cu13-2.30.3-py3-none-manylinux_2_18_x86_64.whl", 2),  # py3, platform
        ("torch-2.12.1-cp311-cp311-manylinux_2_28_x86_64.whl", 2),
        ("torch-2.12.1-cp312-cp312-manylinux_2_28_x86_64.whl", 0),  # another Python
        ("nvidia_cublas-13.1.1.3-py3-none-win_amd64.whl", 0),
        ("markupsafe-3.0.4-cp311-cp311-musllinux_1_2_x86_64.whl", 0),  # musl, not glibc
        ("numpy-2.4.6-pp311-pypy311_pp73-manylinux_2_28_x86_64.whl", 0),  # PyPy
        ("filelock-3.16.1-py3-none-any.whl", 1),
    ],
)
def test_index_prefers_wheels_that_fit_the_target(filename: str, expected: int) -> None:
    """The index client's metadata choice scores platform wheels for the target above others
    (pure-Python-interpreter platform wheels such as NVIDIA's included, musl and PyPy not)."""
    from pinguard.repair.resolve.index import _wheel_fits

    assert _wheel_fits(filename, X86) == expected


def test_a_version_that_is_not_pep440_is_refused(links: Path) -> None:
    """A `===` pin (a version that is not PEP 440) is named, not crashed on."""
    cs = ConstraintSet(
        entries=(Constraint(canonicalize_name("oddball"), "===1.0-custom", "image"),),
        environment="/x",
    )
    with pytest.raises(LockError, match=r"oddball===1\.0-custom: a version that is not PEP 440"):
        build_lock(cs, client=SimpleIndex((), (str(links),)), target=X86, glibc=(2, 36))
