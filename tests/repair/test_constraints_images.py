"""End-to-end `pinguard constraints` and `pinguard plan` on the real scenario images.

No stubs: the bad and good images are the buildah-built GLM story (tests/infra/scenario.py),
read through the real CLI; resolutions run real uv against the scenario's main and nightly
indexes on 127.0.0.1; the proof that the constraints work is a real buildah build of the
scenario's own Dockerfile with ``PIP_CONSTRAINT`` set, which must fail at the nightly step and
nowhere else.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomlkit

from pinguard.audit.options import AuditOptions
from pinguard.audit.pipeline import audit_image
from pinguard.models import AuditResult
from pinguard.repair.resolve import (
    IndexOptions,
    TargetEnvironment,
    Verification,
    verify_constraints,
)
from tests.infra.build import build_image, mounted_image, remove_image
from tests.infra.cli import cli
from tests.infra.index import IndexServer
from tests.infra.paths import POLICIES
from tests.infra.scenario import (
    GOOD_STEPS,
    MAIN_WHEELS,
    NIGHTLY_WHEELS,
    SITE,
    STEPS,
    Scenario,
    ScenarioStep,
    dockerfile,
)
from tests.infra.tools import require_tool

pytestmark = pytest.mark.integration

GB10 = POLICIES / "glm-serving-gb10.toml"
NIGHTLY = "flashinfer-python==0.6.18.dev20261120"
CONSTRAINED_TAG = "localhost/pinguard-test/glm-serving"


@dataclass(frozen=True)
class Emitted:
    """The constraints file written from the bad image, and the CLI's report."""

    path: Path
    text: str
    report: str
    code: int

    def pins(self) -> dict[str, str]:
        out = {}
        for line in self.text.splitlines():
            if line and not line.startswith("#"):
                name, _, version = line.partition("==")
                out[name] = version
        return out


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One layer cache for every audit in this module (so each layer is read once)."""
    return str(tmp_path_factory.mktemp("pinguard-cache"))


@pytest.fixture(scope="module")
def emitted(bad_image_oci: str, cache: str, tmp_path_factory: pytest.TempPathFactory) -> Emitted:
    """`pinguard constraints BAD --policy glm-serving-gb10.toml -o constraints.txt`."""
    path = tmp_path_factory.mktemp("constraints") / "constraints.txt"
    code, report = cli(
        "constraints", bad_image_oci, "--policy", str(GB10), "--cache-dir", cache, "-o", str(path)
    )
    return Emitted(path, path.read_text(), report, code)


@pytest.fixture(scope="module")
def bad_audit(bad_image_oci: str, cache: str) -> AuditResult:
    """The audit of the bad image: what the real build did, step by step."""
    return audit_image(bad_image_oci, options=AuditOptions(cache_dir=Path(cache)))


def manifest_digest(ref: str) -> str:
    skopeo = require_tool("skopeo")
    proc = subprocess.run(
        [skopeo, "inspect", "--format", "{{.Digest}}", ref],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return proc.stdout.strip()


# --------------------------------------------------------------------------- (1) the file


def test_constraints_pin_the_whole_pre_downgrade_set(
    emitted: Emitted, scenario: Scenario, bad_image_oci: str
) -> None:
    """The file pins exactly the known-good set before step C (NCCL 2.30.3, cutlass-dsl 4.3.0,
    torch 2.11.0+cu130 and the rest), with a header naming the digest, the step and the policy."""
    assert emitted.code == 0, emitted.report
    pins = emitted.pins()
    assert pins["nvidia-nccl-cu13"] == "2.30.3"
    assert pins["nvidia-cutlass-dsl"] == "4.3.0"
    assert pins["torch"] == "2.11.0+cu130"
    assert pins == scenario.known_good()
    body = [ln for ln in emitted.text.splitlines() if ln and not ln.startswith("#")]
    assert body == sorted(body)

    bad = scenario.bad.history_index("C")
    header = [ln for ln in emitted.text.splitlines() if ln.startswith("#")]
    assert f"# digest: {manifest_digest(bad_image_oci)}" in header
    assert f"# environment: {SITE}" in header
    assert f"# state: after step {bad - 1}, just before step {bad} (the first step with" in (
        "\n".join(header)
    )
    assert any(
        ln.startswith(f"# step {bad}: /bin/sh -c pip install --pre --index-url $NIGHTLY_URL")
        for ln in header
    ), header
    assert f"# policy: {GB10}" in header
    assert f"known-good state: just before step {bad}" in emitted.report


# --------------------------------------------------------------------------- (2) the build


def _constrained(steps: tuple[ScenarioStep, ...]) -> tuple[ScenarioStep, ...]:
    return (
        ScenarioStep("constraints-copy", "COPY constraints.txt /constraints.txt"),
        ScenarioStep("constraints-env", "ENV PIP_CONSTRAINT=/constraints.txt"),
        *steps,
    )


def test_constrained_build_fails_exactly_at_the_nightly_step(
    emitted: Emitted,
    base_image: str,
    scenario_index: IndexServer,
    nightly_index: IndexServer,
    tmp_path: Path,
) -> None:
    """The scenario's Dockerfile with PIP_CONSTRAINT set to the file fails at the flashinfer
    nightly RUN with pip's resolution error; without that step it builds, to the pinned set."""
    context = tmp_path / "context"
    context.mkdir()
    (context / "constraints.txt").write_text(emitted.text)
    args = {"INDEX_URL": scenario_index.url, "NIGHTLY_URL": nightly_index.url}
    bad_tag, good_tag = f"{CONSTRAINED_TAG}:constrained-bad", f"{CONSTRAINED_TAG}:constrained-good"
    steps = _constrained(STEPS)
    c_number = 2 + next(i for i, s in enumerate(steps) if s.key == "C")  # FROM is step 1
    try:
        bad = build_image(context, dockerfile(base_image, steps), bad_tag, args)
        assert not bad.ok, bad.log[-3000:]
        assert bad.failed_step == c_number, bad.log[-3000:]
        assert dict(bad.steps)[c_number] == next(s for s in STEPS if s.key == "C").instruction
        failure = bad.log.split(f"STEP {c_number}/", 1)[1]
        assert "ResolutionImpossible" in failure
        assert f"Cannot install {NIGHTLY}" in failure
        assert "flashinfer-python==0.6.16" in failure  # the pin that refuses it

        good = build_image(
            context, dockerfile(base_image, _constrained(GOOD_STEPS)), good_tag, args
        )
        assert good.ok, good.log[-3000:]
        with mounted_image(good_tag) as root:
            installed = {
                m.group(1).replace("_", "-").lower(): m.group(2)
                for p in (root / SITE.lstrip("/")).glob("*.dist-info")
                if (m := re.fullmatch(r"(.+)-([^-]+)\.dist-info", p.name))
            }
        pins = emitted.pins()
        pins.pop("ninja")  # step D uninstalls it
        assert installed == pins
    finally:
        remove_image(bad_tag)
        remove_image(good_tag)


# --------------------------------------------------------------------------- (3) --verify


def test_verify_explains_the_bad_step_and_finds_the_nightly_that_fits(
    emitted: Emitted,
    bad_image_oci: str,
    scenario: Scenario,
    scenario_index: IndexServer,
    nightly_index: IndexServer,
    cache: str,
    tmp_path: Path,
) -> None:
    """--verify: the good steps resolve, the nightly step is unsatisfiable with the chain to the
    torch pin, a nightly on the nightly index that agrees is offered, and so is the override."""
    out = tmp_path / "c.txt"
    code, text = cli(
        "constraints",
        bad_image_oci,
        "--policy",
        str(GB10),
        "--cache-dir",
        cache,
        "-o",
        str(out),
        "--verify",
        "--index-url",
        scenario_index.url,
        "--extra-index-url",
        nightly_index.url,
    )
    assert code == 0, text
    assert out.read_text() == emitted.text  # same bytes as without --verify
    for key in ("A", "B"):
        assert re.search(
            rf"^step {scenario.bad.history_index(key)}: .*: satisfiable \(uv\)$", text, re.MULTILINE
        ), text
    c = scenario.bad.history_index("C")
    assert f"step {c}: {NIGHTLY}: UNSATISFIABLE (uv)" in text
    assert "note: the constraints pin flashinfer-python==0.6.16 which the step itself" in text
    assert (
        f"why: the step asks for {NIGHTLY}: flashinfer-python 0.6.18.dev20261120 requires"
        " torch>=2.12; but the constraints pin torch==2.11.0+cu130"
    ) in text
    # The newest nightly that agrees with the pins lives on the nightly index only.
    fits = "0.6.17.dev20261101"
    assert any(w.name == "flashinfer-python" and w.version == fits for w in NIGHTLY_WHEELS)
    assert not any(w.name == "flashinfer-python" and w.version == fits for w in MAIN_WHEELS)
    options = re.findall(r"option: use (\S+) \(.*resolver: (\w+)\)", text)
    assert options[0] == (f"flashinfer-python=={fits}", "ok"), text
    assert (
        "option: override torch==2.11.0+cu130 (resolves); then unmet: flashinfer-python"
        " 0.6.18.dev20261120 requires torch>=2.12 - waive it in the policy"
    ) in text


def _verify_nightly(
    pins: tuple[str, ...], audit: AuditResult, main_index: IndexServer, nightly: IndexServer
) -> Verification:
    """Step C's requirement under ``pins``, with step C's indexes, for the image's Python."""
    env = next(e for e in audit.final.environments if e.path == SITE)
    return verify_constraints(
        [NIGHTLY],
        list(pins),
        index=IndexOptions(
            index_url=nightly.url,
            extra_index_urls=(main_index.url,),
            index_strategy="unsafe-best-match",
            prerelease=True,
        ),
        target=TargetEnvironment(env.python, audit.image.platform),
    )


def test_nccl_alone_pinned_the_chain_runs_through_torch_to_nccl(
    bad_audit: AuditResult, scenario_index: IndexServer, nightly_index: IndexServer
) -> None:
    """With only NCCL pinned (flashinfer#3821), uv refuses the nightly step and the chain is
    flashinfer nightly -> torch>=2.12 -> torch 2.12.1 pins nccl 2.29.7 vs the pin 2.30.3."""
    v = _verify_nightly(("nvidia-nccl-cu13==2.30.3",), bad_audit, scenario_index, nightly_index)
    assert not v.satisfiable
    assert v.explanation is not None, v.output
    chain = [(link.package, link.version, _bare(link.requirement)) for link in v.explanation.chain]
    assert chain == [
        ("flashinfer-python", "0.6.18.dev20261120", "torch>=2.12"),
        ("torch", "2.12.1", "nvidia-nccl-cu13==2.29.7"),
    ]
    assert v.explanation.blocked_by == "nvidia-nccl-cu13==2.30.3"
    assert [(a.version, a.verified) for a in v.alternatives][:1] == [("0.6.17.dev20261101", True)]
    assert v.override is not None
    assert v.override.overrides == ("nvidia-nccl-cu13==2.30.3",)
    assert v.override.satisfiable
    assert [(u.package, u.version, _bare(u.requirement)) for u in v.override.unmet] == [
        ("torch", "2.12.1", "nvidia-nccl-cu13==2.29.7")
    ]


def test_two_blocking_pins_need_two_overrides(
    bad_audit: AuditResult, scenario_index: IndexServer, nightly_index: IndexServer
) -> None:
    """With NCCL and cutlass-dsl pinned, torch 2.12.1 collides with both: the override option
    forces both pins and names both requirements of torch 2.12.1 that will be unmet."""
    pins = ("nvidia-cutlass-dsl==4.3.0", "nvidia-nccl-cu13==2.30.3")
    v = _verify_nightly(pins, bad_audit, scenario_index, nightly_index)
    assert not v.satisfiable
    assert v.explanation is not None, v.output
    assert v.explanation.chain[-1].package == "torch"
    assert v.explanation.blocked_by in pins
    assert v.override is not None
    assert sorted(v.override.overrides) == list(pins)
    assert v.override.satisfiable
    assert {(u.package, u.version, _bare(u.requirement)) for u in v.override.unmet} == {
        ("torch", "2.12.1", "nvidia-nccl-cu13==2.29.7"),
        ("torch", "2.12.1", "nvidia-cutlass-dsl==4.2.1"),
    }


def _bare(requirement: str) -> str:
    """A requirement without its environment marker (uv's prose drops markers)."""
    return requirement.split(";", 1)[0].strip()


# --------------------------------------------------------------------------- (4) uv pyproject

PYPROJECT = """\
# serving image: what uv resolves for it
[project]
name = "glm-serving"  # the service
version = "1.0"
dependencies = [
    "vllm",  # the engine
]

[tool.uv]
# the nightly index is only for flashinfer
index-strategy = "unsafe-best-match"

# formatting stays as it is
[tool.other]
key = 'single quoted'   # aligned comment
"""


def test_uv_pyproject_keeps_comments_and_round_trips(
    emitted: Emitted, bad_image_oci: str, cache: str, tmp_path: Path
) -> None:
    """--format uv writes [tool.uv] constraint-dependencies (override-dependencies with
    --override) keeping every original line and comment; a second run changes nothing."""
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(PYPROJECT)
    argv = (
        "constraints",
        bad_image_oci,
        "--policy",
        str(GB10),
        "--cache-dir",
        cache,
        "--format",
        "uv",
        "--pyproject",
        str(pyproject),
    )
    code, report = cli(*argv)
    assert code == 0, report
    new = pyproject.read_text()
    lines = iter(new.splitlines())
    assert all(any(old == ln for ln in lines) for old in PYPROJECT.splitlines())  # in order
    doc = tomlkit.parse(new)
    assert tomlkit.dumps(doc) == new
    pins = [f"{n}=={v}" for n, v in emitted.pins().items()]
    assert doc["tool"]["uv"]["constraint-dependencies"] == pins
    assert doc["tool"]["uv"]["index-strategy"] == "unsafe-best-match"
    assert "# pinguard: known-good set of" in new

    assert cli(*argv)[0] == 0
    assert pyproject.read_text() == new

    assert cli(*argv, "--override")[0] == 0
    over = tomlkit.parse(pyproject.read_text())
    assert over["tool"]["uv"]["override-dependencies"] == pins
    assert cli("constraints", "check", str(pyproject), "--policy", str(GB10)) == (0, "")


# --------------------------------------------------------------------------- (5) plan


def _plan_changes(text: str) -> dict[tuple[str, str, str, str], list[str]]:
    """(kind, name, before, after) -> causes, from `pinguard plan` output."""
    out: dict[tuple[str, str, str, str], list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        m = re.fullmatch(r"  (\w+)\s+(\S+) (\S+) -> (\S+)", line)
        if m:
            current = out.setdefault((m.group(1), m.group(2), m.group(3), m.group(4)), [])
        elif line.startswith("      because "):
            current.append(line.removeprefix("      because "))
    return out


def test_plan_predicts_what_the_real_build_did(
    good_image_registry: str,
    bad_audit: AuditResult,
    scenario: Scenario,
    scenario_index: IndexServer,
    nightly_index: IndexServer,
    cache: str,
) -> None:
    """plan of the nightly step on the good image predicts NCCL and cutlass-dsl downgrades
    caused by torch 2.12.1, fails the policy (exit 1), and equals step C of the real build."""
    code, text = cli(
        "plan",
        good_image_registry,
        "--index-url",
        scenario_index.url,
        "--cache-dir",
        cache,
        "--",
        "pip",
        "install",
        "--pre",
        "--index-url",
        nightly_index.url,
        "--extra-index-url",
        scenario_index.url,
        NIGHTLY,
    )
    assert code == 1, text
    assert f"environment: {SITE}" in text
    assert "verdict: fail" in text
    predicted = _plan_changes(text)
    for name, before, after in (
        ("nvidia-nccl-cu13", "2.30.3", "2.29.7"),
        ("nvidia-cutlass-dsl", "4.3.0", "4.2.1"),
    ):
        causes = predicted[("downgraded", name, before, after)]
        assert causes[0].startswith(f"torch 2.12.1 requires {name}=="), causes
        assert re.search(rf"\[error\] downgrade: step \d+ moved {name} back", text), text

    step = bad_audit.steps[scenario.bad.history_index("C") - 1]
    assert step.index == scenario.bad.history_index("C")
    built = {
        (c.kind.value, c.name, c.before or "-", c.after or "-"): [
            f"{k.package} {k.version} requires {k.requirement}" for k in c.causes
        ]
        for c in step.changes
        if c.environment == SITE
    }
    assert predicted == built
    # ... and equals what the scenario says step C does, written by hand in tests/infra/scenario.py
    expected = next(s for s in STEPS if s.key == "C")
    assert set(predicted) == {
        (c.kind, c.name, c.before or "-", c.after or "-") for c in expected.changes
    }
    for c in expected.changes:
        nearest = predicted[(c.kind, c.name, c.before or "-", c.after or "-")][:1]
        assert [n.replace(" requires ", ": ", 1) for n in nearest] == ([c.cause] if c.cause else [])
    unmet = sorted(re.findall(r"^  unmet: (.*) \(installed: .*\)$", text, re.MULTILINE))
    assert unmet == sorted(f"{u.package} {u.version} requires {u.requirement}" for u in step.unmet)


# --------------------------------------------------------------------------- (6) check


def test_constraints_check_against_the_gb10_policy(emitted: Emitted, tmp_path: Path) -> None:
    """constraints check passes the emitted file and fails (exit 1) one pinning the forbidden
    NCCL 2.29.7, naming the file, the line and the forbidden version."""
    assert cli("constraints", "check", str(emitted.path), "--policy", str(GB10)) == (0, "")
    bad = tmp_path / "bad.txt"
    bad.write_text(emitted.text.replace("nvidia-nccl-cu13==2.30.3", "nvidia-nccl-cu13==2.29.7"))
    number = bad.read_text().splitlines().index("nvidia-nccl-cu13==2.29.7") + 1
    code, text = cli("constraints", "check", str(emitted.path), str(bad), "--policy", str(GB10))
    assert code == 1
    assert (
        f"{bad}:{number}: nvidia-nccl-cu13==2.29.7: nvidia-nccl-cu13 2.29.7 is forbidden:"
        " NCCL internal error on the GB10 fabric"
    ) in text
    assert str(emitted.path) not in text
