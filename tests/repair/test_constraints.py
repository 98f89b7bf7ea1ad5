"""Constraints from the known-good state: pip text, uv pyproject, pre-commit check."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import tomlkit
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from pinguard.errors import UsageError
from pinguard.models import AuditResult, Finding, Severity, Snapshot
from pinguard.policy.effective import ForbiddenRange
from pinguard.repair import check
from pinguard.repair import constraints as emit
from tests.repair.conftest import ENV, bad_result, dist


def test_constraints_pin_the_pre_downgrade_versions() -> None:
    """The state just before the downgrading step is pinned whole, local labels kept."""
    cs = emit.build_constraints(bad_result())
    assert cs.lines() == [
        "nvidia-cutlass-dsl==4.3.0",
        "nvidia-nccl-cu13==2.30.3",
        "torch==2.11.0+cu130",
    ]
    assert cs.bad_step is not None
    assert cs.bad_step.index == 3
    assert cs.known_good_after == 2
    text = emit.render_pip(cs)
    assert "# digest: sha256:abab" in text
    assert "step 3: /bin/sh -c pip install --pre flashinfer-python" in text
    assert text.endswith("torch==2.11.0+cu130\n")
    assert emit.render_pip(emit.build_constraints(bad_result())) == text  # deterministic


def test_policy_findings_choose_the_step_and_pins_merge() -> None:
    """A policy finding on step 2 moves the state back; a policy pin is merged in."""
    result = dataclasses.replace(
        bad_result(), findings=(Finding("pin", Severity.ERROR, "x", step=2),)
    )
    pins = {canonicalize_name("nvidia-nccl-cu13"): SpecifierSet(">=2.30,<2.31")}
    cs = emit.build_constraints(result, pins=pins, policy_files=("p.toml",))
    assert cs.known_good_after == 1
    assert cs.lines() == ["nvidia-nccl-cu13<2.31,>=2.30"]
    assert "policy: p.toml" in emit.render_pip(cs)


@pytest.mark.parametrize(
    ("pin", "expected"),
    [
        ("==2.30.3", "nvidia-nccl-cu13==2.30.3"),  # agrees: exact version kept
        (">=2.30", "nvidia-nccl-cu13==2.30.3"),  # range containing it: exact kept
        ("==2.30.5", "nvidia-nccl-cu13==2.30.5"),  # disagrees: the policy wins
    ],
)
def test_merge_with_pins(pin: str, expected: str) -> None:
    """Policy pins agree with, or override, the image's version."""
    cs = emit.build_constraints(
        bad_result(), pins={canonicalize_name("nvidia-nccl-cu13"): SpecifierSet(pin)}
    )
    assert expected in cs.lines()


def test_unknown_step_is_a_usage_error() -> None:
    """--step names a history index that must exist."""
    with pytest.raises(UsageError, match="no step 9"):
        emit.build_constraints(bad_result(), step=9)


PYPROJECT = """\
# top comment
[project]
name = "serving"  # the name
dependencies = ["vllm"]

[tool.uv]
# keep this comment
index-strategy = "unsafe-best-match"

[tool.other]
x = 1
"""


@pytest.mark.parametrize("override", [False, True])
def test_pyproject_round_trip_keeps_comments(tmp_path: Path, override: bool) -> None:
    """tool.uv constraint/override dependencies are written; comments and layout survive."""
    path = tmp_path / "pyproject.toml"
    path.write_text(PYPROJECT)
    cs = emit.build_constraints(bad_result())
    new = emit.write_pyproject(path, cs, override=override)
    assert path.read_text() == new
    for kept in ("# top comment", '"serving"  # the name', "# keep this comment", "[tool.other]"):
        assert kept in new
    doc = tomlkit.parse(new)
    key = "override-dependencies" if override else "constraint-dependencies"
    assert doc["tool"]["uv"][key] == cs.lines()
    assert tomlkit.dumps(tomlkit.parse(new)) == new
    again = emit.update_pyproject(new, cs, override=override)
    assert again == new  # idempotent


def test_pyproject_without_tool_table(tmp_path: Path) -> None:
    """A pyproject without [tool] gets a [tool.uv] table."""
    new = emit.update_pyproject('[project]\nname = "x"\n', emit.build_constraints(bad_result()))
    assert (
        tomlkit.parse(new)["tool"]["uv"]["constraint-dependencies"][0]
        == "nvidia-cutlass-dsl==4.3.0"
    )


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("nvidia-nccl-cu13==2.30.3", None),
        ("nvidia-nccl-cu13==2.29.7", "forbidden"),
        ("nvidia-nccl-cu13==2.31.0", "outside the policy's known-good range"),
        ("nvidia-nccl-cu13>=2.30", "one exact version"),
        ("not a requirement ==", "not a requirement"),
        ("unrelated==1.0", None),
    ],
)
def test_check(tmp_path: Path, line: str, problem: str | None) -> None:
    """The pre-commit check: forbidden versions and pins outside the policy ranges."""
    path = tmp_path / "constraints.txt"
    path.write_text(f"# header\n{line}\n")
    pins = {canonicalize_name("nvidia-nccl-cu13"): SpecifierSet(">=2.30,<2.31")}
    forbidden = [
        ForbiddenRange(canonicalize_name("nvidia-nccl-cu13"), SpecifierSet("==2.29.7"), "hangs")
    ]
    found = check.check_constraints(path, pins=pins, forbidden=forbidden)
    if problem is None:
        assert found == ()
    else:
        assert len(found) >= 1
        assert problem in found[0].message
        assert found[0].line == 2


def test_check_reads_pyproject(tmp_path: Path) -> None:
    """A pyproject's tool.uv constraint-dependencies are checked too."""
    path = tmp_path / "pyproject.toml"
    path.write_text('[tool.uv]\nconstraint-dependencies = [\n  "nvidia-nccl-cu13==2.29.7",\n]\n')
    found = check.check_constraints(
        path,
        pins={},
        forbidden=[
            ForbiddenRange(canonicalize_name("nvidia-nccl-cu13"), SpecifierSet("<2.30"), "r")
        ],
    )
    assert [(p.line, p.constraint) for p in found] == [(3, "nvidia-nccl-cu13==2.29.7")]
    assert ENV


def _with_seeded_installer() -> AuditResult:
    """bad_result() whose known-good state also holds the pip and setuptools Debian seeds."""
    result = bad_result()
    good = result.snapshots[1].environments[0]
    seeded = dataclasses.replace(
        good,
        distributions=(*good.distributions, dist("pip", "23.0.1"), dist("setuptools", "66.1.1")),
    )
    snaps = (result.snapshots[0], Snapshot((seeded,)), result.snapshots[2])
    return dataclasses.replace(result, snapshots=snaps)


def test_installer_packages_left_out_unless_allow_unsafe() -> None:
    """pip and setuptools of the image are not pinned by default (the header says so);
    --allow-unsafe pins them; a policy pin on pip keeps pip's exact version."""
    cs = emit.build_constraints(_with_seeded_installer())
    assert cs.lines() == [
        "nvidia-cutlass-dsl==4.3.0",
        "nvidia-nccl-cu13==2.30.3",
        "torch==2.11.0+cu130",
    ]
    assert cs.left_out == ("pip==23.0.1", "setuptools==66.1.1")
    assert (
        "# left out (installer packages; --allow-unsafe pins them): pip==23.0.1, setuptools==66.1.1"
        in emit.render_pip(cs)
    )
    unsafe = emit.build_constraints(_with_seeded_installer(), allow_unsafe=True)
    assert "pip==23.0.1" in unsafe.lines()
    assert "setuptools==66.1.1" in unsafe.lines()
    assert unsafe.left_out == ()
    asked = emit.build_constraints(
        _with_seeded_installer(), pins={canonicalize_name("pip"): SpecifierSet(">=23")}
    )
    assert "pip==23.0.1" in asked.lines()
    assert asked.left_out == ("setuptools==66.1.1",)


def test_breaking_step_without_findings_takes_a_change_that_cannot_be_ordered() -> None:
    """With no findings, a step that changed a non-PEP 440 version (maybe a downgrade) is
    the breaking step, not a later one; a plain upgrade is never picked."""
    from pinguard.models import ChangeKind
    from tests.factories import change, result, step

    audited = result(
        steps=[
            step(1, "", change("tool", ChangeKind.UPGRADED, "1.0", "1.1")),
            step(2, "", change("legacy", ChangeKind.CHANGED, "6.7.8.9-10.el7", "6.7.8.9-9.el7")),
            step(3, "", change("nccl", ChangeKind.DOWNGRADED, "2.30.3", "2.29.7")),
        ]
    )
    chosen, why = emit.breaking_step(audited)
    assert chosen is not None
    assert chosen.index == 2
    assert "downgraded, removed" in why
    only_upgrade = result(steps=[step(1, "", change("tool", ChangeKind.UPGRADED, "1.0", "1.1"))])
    assert emit.breaking_step(only_upgrade)[0] is None
