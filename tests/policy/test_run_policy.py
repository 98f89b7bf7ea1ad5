"""`load_run_policy`: the given files, else the discovered one, else the built-in default."""

from __future__ import annotations

from pathlib import Path

from pinguard.policy import default_policy
from pinguard.policy.load import load_run_policy

PIN = '[[pin]]\npackage = "torch"\nversion = "==2.9.1"\n'


def test_given_files_win_over_a_discoverable_one(tmp_path: Path) -> None:
    (tmp_path / "pinguard.toml").write_text("require_guard = true\n")
    given = tmp_path / "given.toml"
    given.write_text(PIN)
    policy = load_run_policy([given], start=tmp_path)
    assert [p.package for p in policy.pins] == ["torch"]
    assert policy.require_guard is False
    assert policy.files == (str(given),)


def test_discovered_from_a_subdirectory(tmp_path: Path) -> None:
    """pinguard.toml in a parent directory is found; [tool.pinguard] counts too."""
    (tmp_path / "pinguard.toml").write_text(PIN)
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    policy = load_run_policy([], start=sub)
    assert policy.files == (str(tmp_path / "pinguard.toml"),)
    (sub / "pyproject.toml").write_text("[tool.pinguard]\nrequire_guard = true\n")
    assert load_run_policy([], start=sub).require_guard is True


def test_nothing_found_is_the_default(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')  # no [tool.pinguard]
    policy = load_run_policy([], start=tmp_path)
    assert policy == default_policy()
    assert policy.files == ()
