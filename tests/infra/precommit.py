"""Running pre-commit for real: git with a fixed identity, a clone of this checkout at HEAD
with the working tree's uncommitted changes to tracked files committed on top (so a test sees
what is being tested without touching the developer's checkout), and ``python -m pre_commit``
with a private PRE_COMMIT_HOME."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.infra.paths import REPO
from tests.infra.tools import in_ci, require_tool

GIT_ENV = {
    "GIT_AUTHOR_NAME": "pinguard tests",
    "GIT_AUTHOR_EMAIL": "tests@pinguard.invalid",
    "GIT_COMMITTER_NAME": "pinguard tests",
    "GIT_COMMITTER_EMAIL": "tests@pinguard.invalid",
}


def git(cwd: Path, *args: str, stdin: bytes | None = None) -> bytes:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, input=stdin, check=True, capture_output=True
    ).stdout


def clone_checkout(dest: Path) -> Path:
    """Clone this repository into ``dest`` at HEAD plus the uncommitted changes to tracked files."""
    require_tool("git")
    assert (REPO / ".git").exists(), "these tests run from a git checkout"
    git(REPO, "clone", "--quiet", "--no-hardlinks", str(REPO), str(dest))
    diff = git(REPO, "diff", "HEAD", "--binary")
    if diff.strip():
        git(dest, "apply", "--whitespace=nowarn", "-", stdin=diff)
        git(dest, "add", "-A")  # files added to the index but not committed are in the diff
        git(dest, "commit", "--quiet", "-m", "uncommitted changes under test")
    return dest


def require_pre_commit() -> None:
    """Fail under CI=true, skip elsewhere, when pre-commit is not installed."""
    if importlib.util.find_spec("pre_commit") is None:
        message = "pre-commit is not installed (pip install -e '.[test]')"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)


def run_pre_commit(
    cwd: Path, home: Path, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m pre_commit ARGS`` in ``cwd`` with PRE_COMMIT_HOME ``home``, after
    ``git add -A`` there (pre-commit only sees files git knows)."""
    git(cwd, "add", "-A")
    full_env = {
        **os.environ,
        **GIT_ENV,
        "PRE_COMMIT_HOME": str(home),
        "PRE_COMMIT_COLOR": "never",
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
