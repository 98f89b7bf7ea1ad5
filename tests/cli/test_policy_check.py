"""``pinguard policy check``: file:line errors on stderr, exit 0 for valid and 2 for invalid."""

from __future__ import annotations

from pathlib import Path

import pytest

from pinguard.cli import main
from tests.infra.paths import POLICIES


def test_shipped_policies_check_clean(capsys: pytest.CaptureFixture[str]) -> None:
    """Both shipped policies are valid."""
    files = [str(POLICIES / "default.toml"), str(POLICIES / "glm-serving-gb10.toml")]
    assert main(["policy", "check", *files]) == 0
    assert capsys.readouterr().out.count(": ok") == 2


def test_invalid_policy_exits_2_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each problem is printed as file:line: message quoting the value."""
    bad = tmp_path / "bad.toml"
    bad.write_text('[[pin]]\npackage = "a"\nversion = "=>1"\n', encoding="utf-8")
    assert main(["policy", "check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3: pin[0].version: invalid version or specifier '=>1'" in err


def test_check_without_files_uses_discovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With no FILE, the discovered pinguard.toml is checked."""
    (tmp_path / "pinguard.toml").write_text("[rules.downgrade]\nseverity = 'bad'\n")
    monkeypatch.chdir(tmp_path)
    assert main(["policy", "check"]) == 2
    assert "pinguard.toml:2:" in capsys.readouterr().err


def test_rules_lists_the_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    """pinguard policy rules prints every rule with its default severity."""
    assert main(["policy", "rules"]) == 0
    out = capsys.readouterr().out
    assert "downgrade" in out
    assert "unpinned-prerelease" in out
    assert "off by default" in out
