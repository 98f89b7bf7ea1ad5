"""The constraints and plan commands, wired to a stubbed audit and real served indexes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from pinguard.cli import main
from pinguard.models import AuditResult
from tests.repair.conftest import Indexes, bad_result


@pytest.fixture
def stub_audit(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake(args: Any, reference: str) -> AuditResult:
        return bad_result()

    monkeypatch.setattr("pinguard.cli.constraints.run_audit", fake)

    def good(args: Any, reference: str) -> AuditResult:
        result = bad_result()
        return dataclasses.replace(
            result,
            steps=result.steps[:2],
            snapshots=result.snapshots[:2],
            final=result.snapshots[1],
        )

    monkeypatch.setattr("pinguard.cli.plan.run_audit", good)


@pytest.mark.usefixtures("stub_audit")
def test_constraints_verify(
    indexes: Indexes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-o writes the pins; --verify proves the good step and explains the bad one, on stderr
    (stdout stays free, as with every command's -o)."""
    out = tmp_path / "c.txt"
    code = main(
        [
            "constraints",
            "img",
            "-o",
            str(out),
            "--verify",
            "--index-url",
            indexes.main.url,
            "--extra-index-url",
            indexes.nightly.url,
            "--policy",
            str(_empty_policy(tmp_path)),
        ]
    )
    captured = capsys.readouterr()
    text = captured.err
    assert code == 0, text
    assert captured.out == ""
    assert "torch==2.11.0+cu130" in out.read_text()
    assert "step 2: torch==2.11.0+cu130: satisfiable" in text
    assert "step 3: flashinfer-python==0.6.18.dev20261120: UNSATISFIABLE" in text
    assert "option: use flashinfer-python==0.6.18.dev20261125" in text
    assert "option: override torch==2.11.0+cu130" in text


@pytest.mark.usefixtures("stub_audit")
def test_constraints_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """constraints check exits 0 on a clean file, 1 with a forbidden version."""
    policy = tmp_path / "pinguard.toml"
    policy.write_text(
        '[[forbidden]]\npackage = "nvidia-nccl-cu13"\nversion = "==2.29.7"\nreason = "hangs"\n'
    )
    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    good.write_text("nvidia-nccl-cu13==2.30.3\n")
    bad.write_text("nvidia-nccl-cu13==2.29.7\n")
    assert main(["constraints", "check", str(good), "--policy", str(policy)]) == 0
    assert main(["constraints", "check", str(good), str(bad), "--policy", str(policy)]) == 1
    assert "bad.txt:1: nvidia-nccl-cu13==2.29.7" in capsys.readouterr().out
    # as pre-commit runs the hook: its args (--policy P), then the files
    assert main(["constraints", "check", "--policy", str(policy), str(good), str(bad)]) == 1
    assert "bad.txt:1: nvidia-nccl-cu13==2.29.7" in capsys.readouterr().out
    with pytest.raises(SystemExit) as usage:
        main(["constraints", "check", "--policy", str(policy), str(good), "--bogus"])
    assert usage.value.code == 2
    assert "unrecognized arguments: " in capsys.readouterr().err


@pytest.mark.usefixtures("stub_audit")
def test_plan_cli(indexes: Indexes, capsys: pytest.CaptureFixture[str]) -> None:
    """plan of the nightly step on the good image predicts the downgrades; the default policy
    fails it (exit 1)."""
    code = main(
        [
            "plan",
            "img",
            "--index-url",
            indexes.main.url,
            "--",
            "pip",
            "install",
            "--pre",
            "--extra-index-url",
            indexes.nightly.url,
            "flashinfer-python==0.6.18.dev20261120",
        ]
    )
    text = capsys.readouterr().out
    assert "environment: /usr/local/lib/python3.12/dist-packages" in text
    assert "downgraded  nvidia-nccl-cu13 2.30.3 -> 2.29.7" in text
    assert "because torch 2.12.1 requires nvidia-nccl-cu13==2.29.7" in text
    assert "verdict: fail" in text
    assert code == 1


def _empty_policy(tmp_path: Path) -> Path:
    path = tmp_path / "empty.toml"
    path.write_text("")
    return path
