"""Unit tests of `pinguard guard` on a root directory of dist-info trees (no image builds)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pinguard.cli import main
from pinguard.guard import (
    DEFAULT_STATE,
    STATE_SCHEMA,
    GuardState,
    GuardStep,
    load_state,
    own_paths,
    run_guard,
    state_from_json,
    state_to_json,
    step_name_from_script,
)
from pinguard.policy.model import default_policy

SITE = "usr/local/lib/python3.11/dist-packages"
POLICY = """\
[[pin]]
package = "nvidia-nccl-cu13"
version = ">=2.30"
reason = "NCCL below 2.30 hangs on the GB10 fabric"
"""


def install(root: Path, name: str, version: str, *requires: str, site: str = SITE) -> Path:
    """Write a minimal ``name-version.dist-info`` into ``root/site``, replacing other versions."""
    stem = name.replace("-", "_")
    base = root / site
    for old in base.glob(f"{stem}-*.dist-info"):
        shutil.rmtree(old)
    info = base / f"{stem}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    (info / "INSTALLER").write_text("pip\n")
    return info


def remove(root: Path, name: str, site: str = SITE) -> None:
    for old in (root / site).glob(f"{name.replace('-', '_')}-*.dist-info"):
        shutil.rmtree(old)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "rootfs"
    install(r, "nvidia-nccl-cu13", "2.30.3")
    install(r, "torch", "2.11.0", "nvidia-nccl-cu13==2.30.3")
    install(r, "vllm", "0.11.0", "torch==2.11.0")
    return r


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    p = tmp_path / "policy.toml"
    p.write_text(POLICY)
    return p


def guard(root: Path, policy: Path, *extra: str) -> int:
    return main(["guard", "--root", str(root), "--policy", str(policy), *extra])


def state_of(root: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((root / DEFAULT_STATE.lstrip("/")).read_text())
    return data


def test_first_call_records_baseline(
    root: Path, policy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first call passes on a consistent tree and writes the baseline state file."""
    assert guard(root, policy_file, "--step-name", "base") == 0
    out = capsys.readouterr().out
    assert "pinguard guard: step 1: base" in out
    assert "verdict: PASS; baseline recorded in /var/lib/pinguard/state.json" in out
    state = state_of(root)
    assert state["schema"] == STATE_SCHEMA
    assert state["steps"] == [{"index": 1, "name": "base", "verdict": "pass"}]
    envs = state["environments"]
    assert isinstance(envs, list)
    assert [d["name"] for d in envs[0]["distributions"]] == ["nvidia-nccl-cu13", "torch", "vllm"]


def test_downgrade_fails_with_the_finding(
    root: Path, policy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A step that downgrades NCCL through a new torch exits 1 and names change and cause."""
    assert guard(root, policy_file) == 0
    install(root, "torch", "2.12.1", "nvidia-nccl-cu13==2.29.7")
    install(root, "nvidia-nccl-cu13", "2.29.7")
    capsys.readouterr()
    assert guard(root, policy_file, "--step-name", "pip install flashinfer nightly") == 1
    out = capsys.readouterr().out
    assert "step 2: pip install flashinfer nightly" in out
    assert (
        "downgraded  nvidia-nccl-cu13 2.30.3 -> 2.29.7  <- torch 2.12.1 requires "
        "nvidia-nccl-cu13==2.29.7" in out
    )
    assert "vllm 0.11.0 requires torch==2.11.0, but 2.12.1 is installed" in out
    assert "ERROR   downgrade: step 2 moved nvidia-nccl-cu13 back from 2.30.3 to 2.29.7" in out
    assert "pin-violation: nvidia-nccl-cu13 2.29.7 does not satisfy the pin" in out
    assert "verdict: FAIL" in out


def test_state_only_advances_when_passing(root: Path, policy_file: Path) -> None:
    """A failing call leaves the state alone, so the next call reports the same drift again."""
    assert guard(root, policy_file, "--step-name", "base") == 0
    before = state_of(root)
    install(root, "nvidia-nccl-cu13", "2.29.7")
    assert guard(root, policy_file, "--step-name", "bad") == 1
    assert state_of(root) == before
    install(root, "filelock", "3.16.1")
    assert guard(root, policy_file, "--step-name", "later") == 1  # still reported
    assert state_of(root) == before
    install(root, "nvidia-nccl-cu13", "2.30.3")  # fixed
    assert guard(root, policy_file, "--step-name", "fixed") == 0
    steps = state_of(root)["steps"]
    assert steps == [
        {"index": 1, "name": "base", "verdict": "pass"},
        {"index": 2, "name": "fixed", "verdict": "pass"},
    ]


def test_update_state_always_accepts(root: Path, policy_file: Path) -> None:
    """``--update-state always`` records a failing state; the next call judges from there."""
    assert guard(root, policy_file) == 0
    install(root, "torch", "2.11.0")  # same version, new metadata: a reinstall, fine
    remove(root, "vllm")
    assert guard(root, policy_file, "--update-state", "always") == 0
    install(root, "nvidia-nccl-cu13", "2.29.7")
    assert guard(root, policy_file, "--update-state", "always") == 1
    assert state_of(root)["steps"][-1]["verdict"] == "fail"  # type: ignore[index]
    # the downgrade was accepted; only the pin (a state rule) still fails
    outcome = run_guard(str(root), policy=default_policy(), step_name="next")
    assert outcome.step.index == 4
    assert outcome.result.steps[0].changes == ()
    assert outcome.step.verdict == "pass"


def test_update_state_never_writes_nothing(root: Path, policy_file: Path) -> None:
    """``--update-state never`` judges without creating or changing the state file."""
    assert guard(root, policy_file, "--update-state", "never") == 0
    assert not (root / DEFAULT_STATE.lstrip("/")).exists()


def test_baseline_judges_consistency(root: Path, policy_file: Path) -> None:
    """The first call reports requirements already unmet (and pins), with no changes."""
    install(root, "torch", "2.12.1", "nvidia-nccl-cu13==2.29.7")
    outcome = run_guard(str(root), policy=default_policy(), step_name="base")
    assert outcome.baseline
    assert outcome.result.steps[0].changes == ()
    assert {f.rule for f in outcome.result.findings} == {"unmet-requirement"}
    assert outcome.step.verdict == "fail"
    assert not outcome.recorded


def test_new_environment_and_removal(root: Path, policy_file: Path) -> None:
    """A venv created by a step shows as added distributions; removals are reported."""
    assert guard(root, policy_file) == 0
    venv = "opt/venv/lib/python3.11/site-packages"
    install(root, "filelock", "3.16.1", site=venv)
    remove(root, "vllm")
    outcome = run_guard(str(root), policy=default_policy(), step_name="s")
    changes = {(c.environment, c.name, c.kind.value) for c in outcome.result.steps[0].changes}
    assert changes == {
        ("/opt/venv/lib/python3.11/site-packages", "filelock", "added"),
        (f"/{SITE}", "vllm", "removed"),
    }


def test_own_files_are_excluded(root: Path, tmp_path: Path) -> None:
    """pinguard's package and dist-info, and a venv holding only pinguard and its
    requirements, are left out; a venv shared with an application is still audited."""
    own_site = root / "opt/pinguard/lib/python3.11/site-packages"
    install(root, "pinguard", "0.1.0", "packaging>=24", site=str(own_site.relative_to(root)))
    install(root, "packaging", "24.2", site=str(own_site.relative_to(root)))
    install(root, "pip", "24.0", site=str(own_site.relative_to(root)))
    (own_site / "pinguard").mkdir()
    module = own_site / "pinguard" / "__init__.py"
    module.write_text("")
    prefix = str(root / "opt/pinguard")
    paths = own_paths(root, module_file=str(module), prefix=prefix, base_prefix="/usr")
    assert paths == (
        "/opt/pinguard",
        "/opt/pinguard/lib/python3.11/site-packages/pinguard",
        "/opt/pinguard/lib/python3.11/site-packages/pinguard-0.1.0.dist-info",
    )
    # the same venv with an application in it: only pinguard itself is excluded
    install(root, "vllm", "0.11.0", site=str(own_site.relative_to(root)))
    shared = own_paths(root, module_file=str(module), prefix=prefix, base_prefix="/usr")
    assert "/opt/pinguard" not in shared
    assert "/opt/pinguard/lib/python3.11/site-packages/pinguard-0.1.0.dist-info" in shared
    # a zipapp: the archive itself
    pyz = root / "opt" / "pinguard.pyz"
    pyz.write_bytes(b"PK")
    inside = own_paths(root, module_file=f"{pyz}/pinguard/__init__.py")
    assert inside == ("/opt/pinguard.pyz",)
    # outside the audited root nothing is excluded
    assert own_paths(root, module_file=str(tmp_path / "elsewhere/pinguard/__init__.py")) == ()


def test_guard_does_not_count_itself(
    root: Path, policy_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Running from a package installed in the audited environment leaves it out."""
    info = install(root, "pinguard", "0.1.0", "packaging>=24")
    (root / SITE / "pinguard").mkdir()
    module = root / SITE / "pinguard" / "__init__.py"
    module.write_text("")
    import pinguard

    monkeypatch.setattr(pinguard, "__file__", str(module))
    outcome = run_guard(str(root), policy=default_policy(), step_name="base")
    names = {d.name for e in outcome.result.final.environments for d in e.distributions}
    assert "pinguard" not in names
    assert info.exists()
    # --exclude adds paths of one's own
    outcome = run_guard(
        str(root),
        policy=default_policy(),
        step_name="x",
        exclude=[f"/{SITE}/vllm-0.11.0.dist-info"],
    )
    changes = {(c.name, c.kind.value) for c in outcome.result.steps[0].changes}
    assert changes == {("vllm", "removed")}


def test_json_format(root: Path, policy_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--format json`` prints the audit JSON report of the one guarded step."""
    assert guard(root, policy_file, "--format", "json", "--step-name", "base") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["steps"][0]["created_by"] == "base"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "unreadable guard state"),
        ('{"schema": "other"}', "not a pinguard guard state"),
        (json.dumps({"schema": STATE_SCHEMA}), "unreadable guard state"),
        ("[]", "not a pinguard guard state"),
    ],
)
def test_invalid_state_is_a_usage_error(
    root: Path, policy_file: Path, text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A corrupt state file fails with exit 2 and says how to recover."""
    path = root / DEFAULT_STATE.lstrip("/")
    path.parent.mkdir(parents=True)
    path.write_text(text)
    assert guard(root, policy_file) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "remove it to record a new baseline" in err


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["--state", "relative/state.json"], 2),
        (["--exclude", "relative"], 2),
        (["--fail-on", "never"], 0),
        (["--state", "/custom/guard.json"], 0),
    ],
)
def test_options(root: Path, policy_file: Path, argv: list[str], code: int) -> None:
    """State and exclude paths must be absolute in-image paths; --state moves the file."""
    assert guard(root, policy_file, *argv) == code
    if argv == ["--state", "/custom/guard.json"]:
        assert load_state(root / "custom/guard.json") is not None


def test_state_round_trip() -> None:
    """The state file text parses back to the same state and is stable."""
    from packaging.utils import NormalizedName

    from pinguard.models import Distribution, Environment

    state = GuardState(
        steps=(GuardStep(1, "base", "pass"),),
        environments=(
            Environment(
                "/x/site-packages",
                "3.11",
                (Distribution(NormalizedName("a"), "1.0", "/x/site-packages/a-1.0.dist-info"),),
            ),
        ),
        unmet=frozenset({("/x/site-packages", "a", "b>=1")}),
    )
    text = state_to_json(state)
    assert state_from_json(text) == state
    assert state_to_json(state_from_json(text)) == text


@pytest.mark.parametrize(
    ("script", "name"),
    [
        (
            "pip install -c /c.txt torch==2.11.0 && python3 /opt/pinguard.pyz guard --policy p",
            "pip install -c /c.txt torch==2.11.0",
        ),
        ("pinguard guard", "pinguard guard"),
        (
            "apt-get update;  pip   install x\n/opt/pg/bin/pinguard guard",
            "apt-get update && pip install x",
        ),
        (
            "pip install x 2>&1 | tee /log && python3 -m pinguard guard || true",
            "pip install x 2>&1 | tee /log",
        ),
        ("echo 'a && b; c' && pinguard guard", "echo 'a && b; c'"),
        (
            "echo 'run pinguard guard' && pip install \\\n  x",
            "echo 'run pinguard guard' && pip install x",
        ),
    ],
)
def test_step_name_from_script(script: str, name: str) -> None:
    """The default step name is the RUN script without the guard call."""
    assert step_name_from_script(script) == name


def test_baseline_without_python_passes_a_later_call_without_it_fails(
    tmp_path: Path, policy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The baseline may come before any Python distribution (exit 0, said in the log); a
    later call that still finds no environment fails unless --allow-no-python."""
    root = tmp_path / "bare"
    (root / "etc").mkdir(parents=True)
    assert guard(root, policy_file, "--step-name", "base") == 0
    out = capsys.readouterr().out
    assert "pinguard guard:   baseline: no Python environment found" in out
    assert "verdict: PASS; baseline recorded in /var/lib/pinguard/state.json" in out
    assert guard(root, policy_file, "--step-name", "apt", "--update-state", "never") == 1
    out = capsys.readouterr().out
    assert f"pinguard guard:   no Python environment found in dir:{root} (fails unless " in out
    assert "verdict: FAIL" in out
    assert guard(root, policy_file, "--step-name", "apt", "--allow-no-python") == 0
    out = capsys.readouterr().out
    assert f"no Python environment found in dir:{root} (allowed by --allow-no-python)" in out
