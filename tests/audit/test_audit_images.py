"""End-to-end audits of images built by buildah with real `RUN pip install` steps.

The scenario (tests/infra/scenario.py) carries, for every step, the changes it is expected
to make; these tests read the same bad image through every reference kind pinguard supports
and check that each transport yields the same steps, changes, causes and unmet requirements.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pinguard.audit.options import AuditOptions
from pinguard.audit.pipeline import audit_image
from pinguard.cli import main
from pinguard.models import AuditResult, ChangeKind
from pinguard.sources.interface import SourceOptions
from tests.infra.paths import AUDIT_SCHEMA
from tests.infra.podman import PodmanService
from tests.infra.scenario import BAD_IMAGE_EXPORTS, Scenario

pytestmark = pytest.mark.integration

SCHEMA = AUDIT_SCHEMA


def _observed(
    result: AuditResult, index: int
) -> set[tuple[str, str, str, str | None, str | None, str | None]]:
    step = next(s for s in result.steps if s.index == index)
    out: set[tuple[str, str, str, str | None, str | None, str | None]] = set()
    for c in step.changes:
        cause = (
            f"{c.causes[0].package} {c.causes[0].version}: {c.causes[0].requirement}"
            if c.causes
            else None
        )
        out.add((c.environment, c.name, c.kind.value, c.before, c.after, cause))
    return out


def _expected(
    scenario: Scenario, key: str
) -> set[tuple[str, str, str, str | None, str | None, str | None]]:
    return {
        (c.environment, c.name, c.kind, c.before, c.after, c.cause)
        for c in scenario.bad.step(key).changes
    }


def check_scenario(result: AuditResult, scenario: Scenario) -> None:
    for step in scenario.bad.steps:
        index = scenario.bad.history_index(step.key)
        observed = _observed(result, index)
        if step.changes:
            # every expected change is there, with its nearest cause where one is expected
            for exp in _expected(scenario, step.key):
                match = [o for o in observed if o[:5] == exp[:5]]
                assert match, (
                    f"step {step.key} ({index}): missing {exp}; got {sorted(observed, key=str)}"
                )
                if exp[5] is not None:
                    assert match[0][5] == exp[5], (
                        f"step {step.key}: cause {match[0][5]!r} != {exp[5]!r}"
                    )
        elif step.empty_layer:
            assert observed == set()
        unmet = next(s for s in result.steps if s.index == index).unmet
        assert {f"{u.package} {u.version}: {u.requirement}" for u in unmet} == set(step.unmet_after)


@pytest.mark.parametrize("fixture", BAD_IMAGE_EXPORTS)
def test_every_transport_sees_the_silent_downgrade(
    fixture: str, request: pytest.FixtureRequest, scenario: Scenario
) -> None:
    """Each reference kind reads the bad image to the same per-step changes and causes."""
    reference = request.getfixturevalue(fixture)
    result = audit_image(reference)
    check_scenario(result, scenario)
    index = scenario.bad.history_index("C")
    nccl = next(c for c in result.steps[index - 1].changes if c.name == "nvidia-nccl-cu13")
    assert nccl.kind is ChangeKind.DOWNGRADED
    assert [c.package for c in nccl.causes] == ["torch", "flashinfer-python"]


def test_daemon_and_bare_reference(
    scenario: Scenario, podman_api: PodmanService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docker-daemon: over podman's Docker API, and a bare NAME:TAG that says it used the daemon."""
    options = AuditOptions(source=SourceOptions(docker_host=podman_api.docker_host))
    result = audit_image(f"docker-daemon:{scenario.bad.tag}", options=options)
    check_scenario(result, scenario)
    monkeypatch.setenv("DOCKER_HOST", podman_api.docker_host)
    bare = audit_image(scenario.bad.tag)
    assert any("daemon" in n for n in bare.notes)
    check_scenario(bare, scenario)


def test_good_image_passes_and_bad_fails(
    bad_image_registry: str, good_image_registry: str, tmp_path: Path
) -> None:
    """The default policy fails the bad image (exit 1) and passes the good one (exit 0)."""
    cache = str(tmp_path / "cache")
    assert (
        main(
            [
                "audit",
                good_image_registry,
                "--cache-dir",
                cache,
                "--format",
                "json",
                "-o",
                str(tmp_path / "g.json"),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "audit",
                bad_image_registry,
                "--cache-dir",
                cache,
                "--format",
                "json",
                "-o",
                str(tmp_path / "b.json"),
            ]
        )
        == 1
    )
    doc = json.loads((tmp_path / "b.json").read_text())
    rules = {(f["rule"], f["package"]) for f in doc["findings"]}
    assert ("downgrade", "nvidia-nccl-cu13") in rules
    unmet = [f for f in doc["findings"] if f["rule"] == "unmet-requirement"]
    assert unmet
    assert all("vllm" in f["message"] for f in unmet)
    assert all("torch==2.11.0" in f["message"] for f in unmet)
    import jsonschema

    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))


def test_transports_agree_byte_for_byte(
    bad_image_oci: str, bad_image_oci_archive: str, tmp_path: Path
) -> None:
    """Apart from the reference itself, two transports of one image give identical JSON."""
    docs = []
    for ref in (bad_image_oci, bad_image_oci_archive):
        out = tmp_path / "out.json"
        main(["audit", ref, "--no-cache", "--format", "json", "-o", str(out)])
        doc = json.loads(out.read_text())
        doc["image"].pop("reference")
        doc["image"].pop("transport")
        docs.append(doc)
    assert docs[0] == docs[1]


def test_venv_environment_has_its_python(bad_image_oci: str) -> None:
    """A virtual environment made in a RUN step is its own environment, with pyvenv.cfg's Python."""
    result = audit_image(bad_image_oci)
    envs = {e.path: e for e in result.final.environments}
    venv = envs["/opt/venv/lib/python3.11/site-packages"]
    assert venv.python is not None
    assert venv.python.startswith("3.11.")
    assert {d.name for d in venv.distributions} >= {"filelock"}
    system = [e for p, e in envs.items() if p.endswith("dist-packages")]
    assert system
    assert system[0].python == "3.11"


def test_platform_missing_is_exit_3(
    bad_image_registry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Asking for a platform the image does not have fails with exit 3 and names what is there."""
    code = main(["audit", bad_image_registry, "--platform", "linux/s390x", "--no-cache"])
    err = capsys.readouterr().err
    if code == 3:
        assert "s390x" in err
    else:  # a single-platform manifest: the platform is checked against its config
        assert code in (1, 3)


def test_warm_cache_reads_no_layer(
    bad_image_registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second audit of a registry image with a warm cache streams no blob."""
    options = AuditOptions(cache_dir=tmp_path / "c")
    first = audit_image(bad_image_registry, options=options)
    from pinguard.sources import registry

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("blob fetched again")

    monkeypatch.setattr(registry.RegistrySource, "open_blob", boom)
    assert audit_image(bad_image_registry, options=options) == first
