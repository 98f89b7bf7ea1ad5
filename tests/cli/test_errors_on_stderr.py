"""One error, on stderr, and nothing else (issue 28's conventions): lint, policy check, probe.

A file a command cannot read is a usage error: exit 2, one ``pinguard: error:`` line on
stderr naming it, nothing on stdout. A tool the probe runs that fails is one message, its
own ``Error:`` not run into pinguard's. The probe case runs the real buildah against local
storage (nothing is pulled): a missing buildah fails under CI=true (``require_tool``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pinguard.cli import main
from tests.infra.tools import require_tool

BAD = "FROM python:3.12\nRUN pip install torch\n"  # unconstrained-install


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("fmt", ["table", "json", "sarif"])
def test_lint_of_a_missing_file_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    """`lint /nonexistent` in any format: exit 2, one error on stderr, no report."""
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "nonexistent"
    code, out, err = _run(capsys, "lint", str(missing), "-f", fmt)
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"pinguard: error: cannot read {str(missing)!r}: No such file or directory"
    ]


def test_lint_reports_the_readable_files_and_errors_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With one readable Dockerfile and one missing: its findings on stdout, the missing one
    on stderr only, counted in the summary line; exit 2."""
    monkeypatch.chdir(tmp_path)
    Path("Dockerfile").write_text(BAD)
    code, out, err = _run(capsys, "lint", "Dockerfile", "missing")
    assert code == 2
    assert out.splitlines()[0].startswith("Dockerfile:2: warning [unconstrained-install] ")
    assert out.splitlines()[-1] == "1 finding(s): 1 warning; 1 Dockerfile(s) could not be linted"
    assert "error" not in out
    assert err.splitlines() == ["pinguard: error: cannot read 'missing': No such file or directory"]


def test_policy_check_of_a_missing_file_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No ``file:1:`` for a file that has no lines, and no problem count after it."""
    missing = tmp_path / "nonexistent.toml"
    code, out, err = _run(capsys, "policy", "check", str(missing))
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"pinguard: error: cannot read {str(missing)!r}: No such file or directory"
    ]
    code, out, err = _run(capsys, "policy", "check", "builtin:nope")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "pinguard: error: no built-in policy 'builtin:nope' (built-in: builtin:default)"
    ]


def test_probe_error_is_one_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """buildah's own 'Error:' is not run into pinguard's 'failed (exit 125):'."""
    require_tool("buildah")
    monkeypatch.chdir(tmp_path)
    name = "localhost/pinguard-test/no-such-image:never"
    code, out, err = _run(capsys, "probe", name, "--import", "json")
    assert (code, out) == (3, "")
    (line,) = err.splitlines()
    assert line.startswith(
        f"pinguard: error: buildah from {name} failed (exit 125): {name}: image not known"
    )
    assert "Error:" not in line
