"""The pre-commit hooks of .pre-commit-hooks.yaml, run for real through `pre-commit try-repo`.

`try-repo` installs the hook's Python environment from a repository (pip install of the repo,
dependencies from the configured index). The tests clone this repository at HEAD, apply the
working tree's uncommitted changes to tracked files as one commit, and point every run at that
clone. `try-repo` builds a fresh hook environment on every run, so a module fixture first
collects the wheels the hook needs (pinguard, its dependencies, its build backend) with
`pip wheel`, once, and each run installs from that directory with ``PIP_NO_INDEX=1``: only
the first step needs an index, and the runs are offline and quick.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.index import IndexServer
from tests.infra.precommit import clone_checkout, git, require_pre_commit, run_pre_commit

BAD = (
    "FROM python:3.11-slim\n"
    "RUN pip install --upgrade pip\n"
    "RUN pip install \\\n"
    "    --pre --extra-index-url https://flashinfer.ai/whl/nightly/ flashinfer-python\n"
)
GOOD = (
    "FROM python:3.11-slim\n"
    "COPY constraints.txt /etc/pinguard/constraints.txt\n"
    "ENV PIP_CONSTRAINT=/etc/pinguard/constraints.txt\n"
    "RUN pip install --upgrade pip && pip install vllm==0.11.0\n"
)


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone of this repository at HEAD plus the uncommitted changes to tracked files."""
    return clone_checkout(tmp_path_factory.mktemp("hooks") / "pinguard")


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_pre_commit()
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory, hook_repo: Path) -> Path:
    """Every wheel the hook environment needs, so `try-repo` installs with no index."""
    wheels = tmp_path_factory.mktemp("wheelhouse")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--wheel-dir",
            str(wheels),
            "setuptools>=68",
            "wheel",
            str(hook_repo),
        ],
        check=True,
        capture_output=True,
        timeout=900,
    )
    return wheels


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """An empty git repository to run the hooks in."""
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "--quiet")
    yield repo
    shutil.rmtree(repo, ignore_errors=True)


def try_repo(
    project: Path, hook_repo: Path, home: Path, wheels: Path, hook: str
) -> subprocess.CompletedProcess[str]:
    offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}
    return run_pre_commit(
        project, home, "try-repo", str(hook_repo), hook, "--all-files", env=offline
    )


def test_lint_hook_passes_a_constrained_dockerfile(
    project: Path, hook_repo: Path, pre_commit_home: Path, wheelhouse: Path
) -> None:
    """A Dockerfile whose installs are constrained passes; other files are not linted."""
    (project / "Dockerfile").write_text(GOOD)
    (project / "notes.txt").write_text(BAD)
    result = try_repo(project, hook_repo, pre_commit_home, wheelhouse, "pinguard-lint")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Passed" in result.stdout


def test_lint_hook_fails_a_drifting_dockerfile(
    project: Path, hook_repo: Path, pre_commit_home: Path, wheelhouse: Path
) -> None:
    """A Dockerfile with an unpinned nightly install fails, naming the file and the line."""
    (project / "Dockerfile").write_text(GOOD)
    (project / "services" / "gpu").mkdir(parents=True)
    (project / "services" / "gpu" / "Dockerfile.cuda").write_text(BAD)
    result = try_repo(project, hook_repo, pre_commit_home, wheelhouse, "pinguard-lint")
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "services/gpu/Dockerfile.cuda:3: error [prerelease-unpinned]" in out
    assert "services/gpu/Dockerfile.cuda:3: error [index-shadowing]" in out
    assert "Dockerfile:4" not in out.replace("Dockerfile.cuda", "")


def test_policy_check_hook(
    project: Path, hook_repo: Path, pre_commit_home: Path, wheelhouse: Path
) -> None:
    """The policy hook runs `pinguard policy check` on policies/*.toml."""
    (project / "policies").mkdir()
    shutil.copy(hook_repo / "policies" / "default.toml", project / "policies" / "default.toml")
    result = try_repo(project, hook_repo, pre_commit_home, wheelhouse, "pinguard-policy-check")
    assert result.returncode == 0, result.stdout + result.stderr
    (project / "policies" / "broken.toml").write_text("no_such_key = 1\n")
    result = try_repo(project, hook_repo, pre_commit_home, wheelhouse, "pinguard-policy-check")
    assert result.returncode != 0, result.stdout + result.stderr


def test_predict_hook_refuses_a_dockerfile_before_it_is_built(
    project: Path,
    hook_repo: Path,
    pre_commit_home: Path,
    wheelhouse: Path,
    base_image: str,
    scenario_index: IndexServer,
    nightly_index: IndexServer,
) -> None:
    """The predict hook predicts every Dockerfile (the base from containers-storage, the
    stand-in indexes as ARG defaults) and fails on the nightly step's predicted downgrade."""
    head = (
        f"FROM {base_image}\n"
        f"ARG INDEX_URL={scenario_index.url}\n"
        f"ARG NIGHTLY_URL={nightly_index.url}\n"
        "RUN pip install --index-url $INDEX_URL nvidia-nccl-cu13==2.30.3 "
        "nvidia-cutlass-dsl==4.3.0 torch==2.11.0+cu130\n"
    )
    nightly = (
        "RUN pip install --pre --index-url $NIGHTLY_URL --extra-index-url $INDEX_URL "
        "flashinfer-python==0.6.18.dev20261120\n"
    )
    (project / "Dockerfile").write_text(head)
    result = try_repo(project, hook_repo, pre_commit_home, wheelhouse, "pinguard-predict")
    assert result.returncode == 0, result.stdout + result.stderr
    (project / "services").mkdir()
    (project / "services" / "Dockerfile.nightly").write_text(head + nightly)
    result = try_repo(project, hook_repo, pre_commit_home, wheelhouse, "pinguard-predict")
    assert result.returncode == 1, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert "== services/Dockerfile.nightly" in out
    assert "moved nvidia-nccl-cu13 back from 2.30.3 to 2.29.7" in out
    assert "verdict: fail" in out
