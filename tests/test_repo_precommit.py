"""The repository's own .pre-commit-config.yaml, run for real with ``pre-commit run``.

Each run works on a fresh clone of this checkout (HEAD plus uncommitted changes to tracked
files), with the test environment's tools first on PATH, which is how the config says to run
it (its hooks are ``repo: local``, ``language: system``: offline, the versions test.sh uses).
The clean tree must pass every hook, none skipped for want of files; planted bad files must
make each hook fail and name the file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.precommit import clone_checkout, require_pre_commit, run_pre_commit

HOOK_NAMES = {
    "ruff": "ruff check",
    "ruff-format": "ruff format",
    "mypy": "mypy (strict, [tool.mypy] files)",
    "pinguard-lint": "pinguard lint (example Dockerfiles)",
    "pinguard-policy-check": "pinguard policy check (shipped policies)",
}


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    require_pre_commit()
    return clone_checkout(tmp_path / "pinguard")


def pre_commit(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    tools = {
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
        "MYPY_CACHE_DIR": str(checkout.parent / "mypy-cache"),
        "RUFF_CACHE_DIR": str(checkout.parent / "ruff-cache"),
    }
    return run_pre_commit(checkout, checkout.parent / "pre-commit-home", "run", *args, env=tools)


def status(output: str, name: str) -> str:
    """The word pre-commit printed at the end of hook ``name``'s status line."""
    lines = [ln for ln in output.splitlines() if ln.startswith(name + ".")]
    assert len(lines) == 1, output
    return lines[0].rstrip(".").rsplit(".", 1)[-1]


@pytest.mark.integration
def test_every_hook_passes_on_the_checkout(checkout: Path) -> None:
    """The tree as committed passes ruff, ruff format, mypy, the lint and the policy check."""
    result = pre_commit(checkout, "--all-files")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    for name in HOOK_NAMES.values():
        assert status(result.stdout, name) == "Passed", out


@pytest.mark.integration
def test_mypy_hook_fails_on_a_type_error_in_tests(checkout: Path) -> None:
    """A type error in a test module fails the mypy hook (tests are in [tool.mypy] files)."""
    (checkout / "tests" / "test_planted.py").write_text('COUNT: int = "three"\n')
    result = pre_commit(checkout, "mypy", "--all-files")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "tests/test_planted.py:1: error: Incompatible types in assignment" in result.stdout


def test_ruff_hooks_fail_and_format_rewrites(checkout: Path) -> None:
    """An unused import fails ruff check; an unformatted file fails ruff format, rewritten."""
    planted = checkout / "examples" / "planted.py"
    planted.write_text("import os\nx = {  'a':1 }\n")
    result = pre_commit(checkout, "ruff", "--files", "examples/planted.py")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "examples/planted.py:1:8: F401" in result.stdout
    result = pre_commit(checkout, "ruff-format", "--files", "examples/planted.py")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "files were modified by this hook" in result.stdout
    assert planted.read_text() == 'import os\n\nx = {"a": 1}\n'


def test_lint_hook_fails_an_unguarded_example(checkout: Path) -> None:
    """An example Dockerfile without the guard fails under the config's --require-guard."""
    (checkout / "examples" / "Dockerfile.unguarded").write_text(
        "FROM python:3.11-slim\n"
        "ENV PIP_CONSTRAINT=/etc/pinguard/constraints.txt\n"
        "RUN pip install vllm==0.11.0\n"
    )
    (checkout / "notes").mkdir()
    (checkout / "notes" / "Dockerfile").write_text("FROM a\nRUN pip install x\n")
    result = pre_commit(checkout, "pinguard-lint", "--all-files")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "examples/Dockerfile.unguarded:3: error [missing-guard]" in result.stdout
    assert "notes/Dockerfile" not in result.stdout  # only examples/ is linted


def test_policy_check_hook_fails_an_invalid_policy(checkout: Path) -> None:
    """A policy with an unknown key fails the policy hook, naming the file."""
    (checkout / "policies" / "planted.toml").write_text("no_such_key = 1\n")
    result = pre_commit(checkout, "pinguard-policy-check", "--all-files")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "policies/planted.toml" in result.stdout + result.stderr
