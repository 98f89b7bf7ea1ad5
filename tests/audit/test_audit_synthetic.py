"""Audit behaviour on synthetic OCI archives built in tmp_path (beside the real-image tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from packaging.utils import canonicalize_name
from packaging.version import Version

from pinguard.audit.diff import diff_environments, unmet_requirements
from pinguard.audit.options import AuditOptions
from pinguard.audit.pipeline import audit_directory, audit_image
from pinguard.cli import main
from pinguard.models import AuditResult, Change, ChangeKind, Distribution, Environment, Platform
from pinguard.testing.demo import Dist, Layer, build_demo, demo_layers, write_oci_archive
from tests.infra.paths import AUDIT_SCHEMA

SCHEMA = AUDIT_SCHEMA


@pytest.fixture
def demo(tmp_path: Path) -> str:
    path = tmp_path / "demo.tar"
    build_demo(path, tag="t")
    return f"oci-archive:{path}:t"


def _changes(result: AuditResult, index: int) -> dict[str, Change]:
    step = next(s for s in result.steps if s.index == index)
    return {c.name: c for c in step.changes}


def test_demo_downgrade_has_cause_chain(demo: str) -> None:
    """The nightly step's NCCL downgrade names torch's exact pin, then flashinfer's torch>=2.12."""
    result = audit_image(demo)
    nccl = _changes(result, 6)["nvidia-nccl-cu13"]
    assert nccl.kind is ChangeKind.DOWNGRADED
    assert (nccl.before, nccl.after) == ("2.30.3", "2.29.7")
    assert [(c.package, c.version) for c in nccl.causes] == [
        ("torch", "2.12.1+cu130"),
        ("flashinfer-python", "0.6.18.dev20261120"),
    ]
    assert nccl.causes[0].requirement.startswith("nvidia-nccl-cu13==2.29.7")
    assert nccl.causes[1].requirement == "torch>=2.12"
    assert _changes(result, 6)["torch"].kind is ChangeKind.UPGRADED


def test_empty_layers_are_steps_without_layers(demo: str) -> None:
    """ENV/LABEL history entries keep their position but have no layer and no changes."""
    result = audit_image(demo)
    assert [s.index for s in result.steps] == [1, 2, 3, 4, 5, 6]
    assert [s.layer_digest is None for s in result.steps] == [
        False,
        True,
        False,
        False,
        True,
        False,
    ]


def test_json_is_valid_and_deterministic(
    demo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two runs give identical bytes, valid against the shipped schema, verdict fail (exit 1)."""
    out1, out2 = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["audit", demo, "--format", "json", "-o", str(out1), "--no-cache"]) == 1
    assert main(["audit", demo, "--format", "json", "-o", str(out2), "--no-cache"]) == 1
    assert out1.read_bytes() == out2.read_bytes()
    doc = json.loads(out1.read_text())
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    assert doc["verdict"] == "fail"
    assert {f["rule"] for f in doc["findings"]} == {"downgrade"}


def test_fail_on_never_passes(demo: str) -> None:
    """--fail-on never turns the same findings into exit 0."""
    assert (
        main(
            [
                "audit",
                demo,
                "--no-cache",
                "--fail-on",
                "never",
                "--format",
                "json",
                "-o",
                "/dev/null",
            ]
        )
        == 0
    )


def test_cache_second_run_reads_no_layer(
    demo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a warm cache no blob is opened, and the result is the same."""
    cache = tmp_path / "cache"
    first = audit_image(demo, options=AuditOptions(cache_dir=cache))
    assert len(list(cache.glob("sha256-*.entry"))) == 4  # one analysis per layer
    assert len(list(cache.glob("replay-*.json"))) == 1  # and the image's replay
    from pinguard.sources import oci

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("a layer was read again")

    for cls in vars(oci).values():
        if isinstance(cls, type) and hasattr(cls, "open_blob"):
            monkeypatch.setattr(cls, "open_blob", boom)
    second = audit_image(demo, options=AuditOptions(cache_dir=cache))
    assert second == first


def test_corrupt_blob_is_exit_3(tmp_path: Path) -> None:
    """A flipped byte inside a layer blob fails the digest check: exit 3, not a partial pass."""
    path = tmp_path / "demo.tar"
    write_oci_archive(demo_layers(), path, tag="t")
    data = bytearray(path.read_bytes())
    # flip a byte in the middle of the largest gzip member (a layer)
    idx = data.find(b"\x1f\x8b\x08", 4096)
    data[idx + 200] ^= 0xFF
    path.write_bytes(bytes(data))
    assert main(["audit", f"oci-archive:{path}:t", "--no-cache"]) == 3


def test_missing_image_and_bad_reference_exit_codes(tmp_path: Path) -> None:
    """Not found is 3; a reference no transport understands is 2."""
    assert main(["audit", f"oci-archive:{tmp_path}/nope.tar", "--no-cache"]) == 3
    assert main(["audit", "docker://", "--no-cache"]) == 2
    assert main(["audit", "oci:", "--no-cache"]) == 2


def test_malformed_metadata_is_incomplete_and_fails(tmp_path: Path) -> None:
    """A dist-info whose METADATA lacks a Version is reported with its path and fails the gate."""
    site = "usr/lib/python3/dist-packages"
    layers = [
        Layer(
            "RUN base",
            files={
                f"{site}/broken-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: broken\n",
                "usr/lib/python3.11/os.py": b"",
            },
        ),
    ]
    path = tmp_path / "x.tar"
    write_oci_archive(layers, path, tag="t")
    result = audit_image(f"oci-archive:{path}:t")
    assert [i.what for i in result.incomplete] == [f"/{site}/broken-1.0.dist-info"]
    assert result.final.environments == ()
    assert main(["audit", f"oci-archive:{path}:t", "--no-cache"]) == 1
    # the one distribution could not be read, so no Python environment was found either
    assert main(["audit", f"oci-archive:{path}:t", "--no-cache", "--allow-incomplete"]) == 1
    allowed = ["--allow-incomplete", "--allow-no-python"]
    assert main(["audit", f"oci-archive:{path}:t", "--no-cache", *allowed]) == 0


def test_dist_packages_python_version_and_dpkg(tmp_path: Path) -> None:
    """Debian's dist-packages gets the system Python's version; dpkg status is read too."""
    site = "usr/lib/python3/dist-packages"
    status = (
        b"Package: libnccl2\nStatus: install ok installed\nArchitecture: arm64\n"
        b"Version: 2.30.3-1+cuda13.0\n\n"
        b"Package: gone\nStatus: deinstall ok config-files\nVersion: 1\n"
    )
    layers = [
        Layer(
            "RUN apt-get install",
            add=[Dist("six", "1.16.0", site=site)],
            files={
                "usr/lib/python3.11/os.py": b"",
                "var/lib/dpkg/status": status,
            },
        ),
    ]
    path = tmp_path / "x.tar"
    write_oci_archive(layers, path, tag="t", architecture="arm64")
    result = audit_image(
        f"oci-archive:{path}:t",
        options=AuditOptions(
            source=__import__(
                "pinguard.sources.interface", fromlist=["SourceOptions"]
            ).SourceOptions(platform=Platform("linux", "arm64"))
        ),
    )
    env = result.final.environments[0]
    assert (env.path, env.python) == (f"/{site}", "3.11")
    assert [(d.name, d.version) for d in result.final.debs] == [("libnccl2", "2.30.3-1+cuda13.0")]


def test_opaque_whiteout_hides_lower_layers(tmp_path: Path) -> None:
    """An opaque dir removes what lower layers had below it, then adds the layer's own files."""
    site = "usr/local/lib/python3.12/site-packages"
    layers = [
        Layer("RUN one", add=[Dist("a", "1.0"), Dist("b", "1.0")]),
        Layer("RUN two", files={f"{site}/.wh..wh..opq": b"", **Dist("c", "2.0").files()}),
    ]
    path = tmp_path / "x.tar"
    write_oci_archive(layers, path, tag="t")
    result = audit_image(f"oci-archive:{path}:t")
    kinds = {c.name: c.kind for c in result.steps[1].changes}
    assert kinds == {"a": ChangeKind.REMOVED, "b": ChangeKind.REMOVED, "c": ChangeKind.ADDED}


def _dist(name: str, version: str, *requires: str, fp: str = "x") -> Distribution:
    return Distribution(
        name=canonicalize_name(name),
        raw_version=version,
        metadata_path=f"/e/{name}-{version}.dist-info",
        requires_dist=requires,
        fingerprint=fp,
    )


@pytest.mark.parametrize(
    ("before", "after", "kind"),
    [
        ("2.11.0+cu130", "2.11.0+cu128", ChangeKind.DOWNGRADED),  # local labels order too
        ("2.11.0", "2.11.0+cu130", ChangeKind.UPGRADED),
        ("0.6.18.dev20261120", "0.6.18", ChangeKind.UPGRADED),
        ("0.6.18rc1", "0.6.18.dev2", ChangeKind.DOWNGRADED),
        ("1.0", "1.0.0", ChangeKind.REINSTALLED),  # equal versions, different strings
        ("weird-version", "other-weird", ChangeKind.CHANGED),  # not PEP 440: order unknown
        ("6.7.8.9-10.el7", "6.7.8.9-9.el7", ChangeKind.CHANGED),  # an RPM-style legacy version
        ("1.0", "1.0-legacy", ChangeKind.CHANGED),  # one side PEP 440 is not enough
    ],
)
def test_change_kinds_follow_pep440(before: str, after: str, kind: ChangeKind) -> None:
    """Change kinds use PEP 440 ordering, including local labels and dev/pre releases."""
    changes, _ = diff_environments(
        Environment("/e", "3.12", (_dist("p", before),)),
        Environment("/e", "3.12", (_dist("p", after),)),
        platform=None,
    )
    assert [c.kind for c in changes] == [kind]


def test_reinstall_same_version_different_files() -> None:
    """Same version, different RECORD fingerprint: reinstalled; identical: no change."""
    b = Environment("/e", "3.12", (_dist("p", "1.0", fp="a"),))
    assert [
        c.kind
        for c in diff_environments(
            b, Environment("/e", "3.12", (_dist("p", "1.0", fp="b"),)), platform=None
        )[0]
    ] == [ChangeKind.REINSTALLED]
    assert diff_environments(b, b, platform=None)[0] == ()


def test_unmet_respects_markers_and_prereleases() -> None:
    """Markers are evaluated for the environment's Python and platform; pre-releases can satisfy."""
    env = Environment(
        "/e",
        "3.11",
        (
            _dist(
                "app",
                "1",
                "win-only>=1; sys_platform == 'win32'",
                "old-py; python_version < '3.8'",
                "nightly>=1.0.dev0",
                "missing",
                "arm-only; platform_machine == 'aarch64'",
            ),
            _dist("nightly", "1.1.dev3"),
        ),
    )
    names = [u.requirement for u in unmet_requirements(env, Platform("linux", "amd64"))]
    assert names == ["missing"]
    names_arm = [u.requirement for u in unmet_requirements(env, Platform("linux", "arm64"))]
    assert sorted(names_arm) == ['arm-only; platform_machine == "aarch64"', "missing"]


def test_dir_source_audits_a_venv(tmp_path: Path) -> None:
    """dir:PATH audits a virtual environment on disk as one state, with pyvenv.cfg's version."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    for rel, data in Dist("demo-pkg", "1.2.3", site="").files().items():
        target = site / rel.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    result = audit_directory(str(venv))
    env = result.final.environments[0]
    assert env.python == ".".join(map(str, sys.version_info[:3]))
    assert [(d.name, d.version) for d in env.distributions] == [("demo-pkg", Version("1.2.3"))]
