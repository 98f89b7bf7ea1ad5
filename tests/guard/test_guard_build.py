"""End to end with buildah: the zipapp guard after each install step fails the bad step only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.infra.build import (
    BuildResult,
    build_image,
    build_zipapp,
    mounted_image,
    remove_image,
)
from tests.infra.index import IndexServer
from tests.infra.paths import REPO
from tests.infra.scenario import GOOD_STEPS, STEPS, ScenarioStep

pytestmark = pytest.mark.integration

ROOT = REPO
GUARD = "python3 /opt/pinguard.pyz guard --policy /etc/pinguard/policy.toml"
POLICY = """\
[[pin]]
package = "nvidia-nccl-cu13"
version = ">=2.30,<2.31"
reason = "NCCL below 2.30 hangs on the GB10 fabric"
"""
BAD_TAG = "localhost/pinguard-test/guarded:bad"
GOOD_TAG = "localhost/pinguard-test/guarded:good"


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A build context holding a freshly built ``pinguard.pyz`` and the policy."""
    ctx = tmp_path_factory.mktemp("guard-context")
    build_zipapp(ctx)
    (ctx / "policy.toml").write_text(POLICY)
    return ctx


def guarded_dockerfile(base: str, steps: tuple[ScenarioStep, ...]) -> tuple[str, dict[str, int]]:
    """The scenario's Dockerfile with the guard after every RUN; {step key: STEP number}."""
    lines = [
        f"FROM {base}",
        "COPY pinguard.pyz /opt/pinguard.pyz",
        "COPY policy.toml /etc/pinguard/policy.toml",
        f"RUN {GUARD} --step-name baseline",
    ]
    numbers: dict[str, int] = {}
    for step in steps:
        text = step.instruction
        if text.startswith("RUN "):
            text = f"{text} && {GUARD}"
        lines.append(text)
        numbers[step.key] = len(lines)  # buildah counts FROM as STEP 1
    return "\n".join(lines) + "\n", numbers


def build(
    context: Path,
    base: str,
    steps: tuple[ScenarioStep, ...],
    tag: str,
    index: IndexServer,
    nightly: IndexServer,
) -> tuple[BuildResult, dict[str, int]]:
    text, numbers = guarded_dockerfile(base, steps)
    result = build_image(
        context, text, tag, {"INDEX_URL": index.url, "NIGHTLY_URL": nightly.url}, timeout=1200
    )
    return result, numbers


def test_nightly_downgrade_fails_the_build_at_that_step(
    context: Path, base_image: str, scenario_index: IndexServer, nightly_index: IndexServer
) -> None:
    """The nightly flashinfer step that silently downgrades NCCL fails the build at exactly
    that step, with the downgrade, its cause and the verdict in the build log."""
    result, numbers = build(context, base_image, STEPS, BAD_TAG, scenario_index, nightly_index)
    try:
        assert not result.ok, result.log[-3000:]
        assert result.failed_step == numbers["C"], result.log[-3000:]
        log = result.log
        assert "pinguard guard: step 4: pip install --pre --index-url $NIGHTLY_URL" in log
        assert (
            "downgraded  nvidia-nccl-cu13 2.30.3 -> 2.29.7  <- torch 2.12.1 requires "
            'nvidia-nccl-cu13==2.29.7; platform_system == "Linux"' in log
        )
        assert "ERROR   downgrade: step 4 moved nvidia-nccl-cu13 back from 2.30.3 to 2.29.7" in log
        assert "pin-violation: nvidia-nccl-cu13 2.29.7 does not satisfy the pin" in log
        assert "verdict: FAIL" in log
        # every earlier guard passed and recorded its step
        for n in (1, 2, 3):
            assert f"pinguard guard: step {n}: " in log
        assert log.count("verdict: PASS") == 3
    finally:
        remove_image(BAD_TAG)


def test_without_the_bad_step_the_build_passes(
    context: Path, base_image: str, scenario_index: IndexServer, nightly_index: IndexServer
) -> None:
    """The same Dockerfile without the nightly step builds; the state file in the image
    records every guarded step and nothing of pinguard's own."""
    result, _ = build(context, base_image, GOOD_STEPS, GOOD_TAG, scenario_index, nightly_index)
    try:
        assert result.ok, result.log[-4000:]
        runs = sum(1 for s in GOOD_STEPS if s.instruction.startswith("RUN "))
        # steps shared with the bad build may come from the layer cache: count in the state
        assert "verdict: FAIL" not in result.log
        assert "removed     ninja 1.11.1.4" in result.log
        assert "reinstalled msgspec 0.19.0" in result.log
        with mounted_image(GOOD_TAG) as root:
            state = json.loads((root / "var/lib/pinguard/state.json").read_text())
        assert [s["index"] for s in state["steps"]] == list(range(1, runs + 2))
        assert state["steps"][0]["name"] == "baseline"
        assert state["steps"][1]["name"].startswith("pip install --index-url $INDEX_URL nvidia")
        assert all(s["verdict"] == "pass" for s in state["steps"])
        paths = {e["path"] for e in state["environments"]}
        assert "/opt/venv/lib/python3.11/site-packages" in paths
        names = {d["name"] for e in state["environments"] for d in e["distributions"]}
        assert {"torch", "nvidia-nccl-cu13", "vllm"} <= names
        assert "pinguard" not in names
        assert "rich" not in names  # bundled inside the zipapp, not installed
    finally:
        remove_image(GOOD_TAG)
