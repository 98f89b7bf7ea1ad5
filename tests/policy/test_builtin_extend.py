"""Built-in policies by name (issue 28): ``extend = ["builtin:default"]`` works anywhere.

The built-in default ships as package data (``pinguard/policy/builtin/default.toml``, a
byte-for-byte copy of ``policies/default.toml``), so a policy outside the repository, and
pinguard installed from a wheel, find it. The installed copy is made the way setuptools
selects a wheel's files: every module of the package plus the ``package-data`` globs that
``pyproject.toml`` lists, nothing else of the checkout.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomlkit

from pinguard.models import Severity
from pinguard.policy.load import PolicyError, load_policy
from pinguard.policy.model import default_policy
from tests.infra.paths import POLICIES, REPO

PACKAGED = REPO / "src" / "pinguard" / "policy" / "builtin"


def test_the_packaged_default_is_the_shipped_file() -> None:
    """One policy, two places: the package's copy has policies/default.toml's bytes."""
    from pinguard.policy.load import builtin_policies  # new with the built-in names

    assert builtin_policies() == ("default",)
    assert (PACKAGED / "default.toml").read_bytes() == (POLICIES / "default.toml").read_bytes()


def test_extend_builtin_from_outside_the_repository(tmp_path: Path) -> None:
    """A policy in a directory of its own extends the built-in default by name; its own
    table overrides, the digest is the shipped file's, and --policy builtin:default alone is
    the built-in default."""
    policy = tmp_path / "team.toml"
    policy.write_text('extend = ["builtin:default"]\n[rules.downgrade]\nseverity = "warning"\n')
    loaded = load_policy(policy)
    assert loaded.rule("downgrade").severity is Severity.WARNING
    assert loaded.rule("unmet-requirement") == default_policy().rule("unmet-requirement")
    shipped = hashlib.sha256((POLICIES / "default.toml").read_bytes()).hexdigest()
    assert loaded.files == (str(PACKAGED / "default.toml"), str(policy))
    assert loaded.digests[0] == f"sha256:{shipped}"
    assert load_policy("builtin:default") == default_policy()


def test_relative_default_outside_the_repository_names_the_builtin(tmp_path: Path) -> None:
    """``extend = ["default.toml"]`` keeps working beside policies/default.toml; elsewhere
    the error says how to name the built-in, and an unknown built-in lists the known ones."""
    assert str(POLICIES / "default.toml") in load_policy(POLICIES / "glm-serving-gb10.toml").files
    policy = tmp_path / "team.toml"
    policy.write_text('extend = ["default.toml"]\n')
    with pytest.raises(PolicyError) as caught:
        load_policy(policy)
    assert str(caught.value) == (
        f"{policy}:1: extend: cannot read {str(tmp_path / 'default.toml')!r}: No such file or "
        'directory (the built-in policy is extend = ["builtin:default"])'
    )
    policy.write_text('extend = ["builtin:nope"]\n')
    with pytest.raises(PolicyError) as caught:
        load_policy(policy)
    assert str(caught.value) == (
        f"{policy}:1: extend: no built-in policy 'builtin:nope' (built-in: builtin:default)"
    )


def _wheel_copy(site: Path) -> None:
    """src/pinguard as a wheel carries it: modules, and the package-data globs."""
    pyproject = tomlkit.parse((REPO / "pyproject.toml").read_text()).unwrap()
    globs = pyproject["tool"]["setuptools"]["package-data"]["pinguard"]
    src = REPO / "src" / "pinguard"
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src).as_posix()
        if "__pycache__" in rel or not path.is_file():
            continue
        if path.suffix == ".py" or any(fnmatch.fnmatch(rel, g) for g in globs):
            target = site / "pinguard" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())


def test_an_installed_copy_finds_the_builtin(tmp_path: Path) -> None:
    """pinguard run from a wheel's files (not the checkout), in a directory of its own,
    checks and applies a policy that extends builtin:default."""
    site = tmp_path / "site"
    _wheel_copy(site)
    work = tmp_path / "work"
    work.mkdir()
    (work / "team.toml").write_text('extend = ["builtin:default"]\n')
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run(
        [sys.executable, "-c", "import pinguard; print(pinguard.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.strip() == str(site / "pinguard" / "__init__.py")
    done = subprocess.run(
        [sys.executable, "-m", "pinguard", "policy", "check", "team.toml"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "team.toml: ok\n", "")
