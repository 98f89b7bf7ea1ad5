"""Native libraries on real images: a .deb and wheels of gcc-built libraries, the real loader.

The images (tests/infra/native.py) carry NCCL twice: libnccl2 2.28.9 installed by ``dpkg -i``
and nvidia-nccl-cu13 2.30.3 installed by pip, with a torch-like wheel whose libtorch_cuda.so
has DT_RPATH ``$ORIGIN/../../nvidia/nccl/lib`` and whose libtorch_probe.so has the same entry
as DT_RUNPATH, ``ENV LD_LIBRARY_PATH`` pointing at the deb's directory, two ld.so.conf.d
files ordered against their directory names, a +cu130 -> +cpu swap, and (second image) a
``COPY`` of a 2.29.7 libnccl.so.2 over the wheel's file. Every prediction pinguard makes is
compared with what the image's own ``ld.so --list`` opens under ``buildah run``.
"""

from __future__ import annotations

import datetime as _dt
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from pinguard.audit.pipeline import audit_image
from pinguard.models import AuditResult, Finding
from pinguard.policy import evaluate, parse_policy
from pinguard.report.json import render
from tests.conftest import skopeo_copy
from tests.infra.index import serve_index
from tests.infra.native import (
    APP,
    DEB_NCCL,
    MULTIARCH,
    TORCH_CUDA,
    TORCH_PROBE,
    WHEEL_NCCL,
    NativeImages,
    build_native_images,
    loader_list,
    native_wheels,
)

pytestmark = pytest.mark.integration
SCHEMA = json.loads(
    (Path(__file__).parents[2] / "src/pinguard/schemas/audit-v1.schema.json").read_text()
)
TODAY = _dt.date(2026, 12, 1)


@pytest.fixture(scope="module")
def images(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NativeImages]:
    work = tmp_path_factory.mktemp("native-images")
    wheels = work / "wheels"
    native_wheels(work / "so", wheels)
    with serve_index(wheels) as index:
        yield build_native_images(work, base_image, index.url, "localhost/pinguard-test/native")


@pytest.fixture(scope="module")
def layout(images: NativeImages, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both images in one OCI layout (tags ``two-nccl`` and ``mismatched``)."""
    out = tmp_path_factory.mktemp("native-oci") / "oci"
    skopeo_copy(f"containers-storage:{images.two_nccl}", f"oci:{out}:two-nccl")
    skopeo_copy(f"containers-storage:{images.mismatched}", f"oci:{out}:mismatched")
    return out


@pytest.fixture(scope="module")
def two_nccl(layout: Path) -> AuditResult:
    return audit_image(f"oci:{layout}:two-nccl")


@pytest.fixture(scope="module")
def mismatched(layout: Path) -> AuditResult:
    return audit_image(f"oci:{layout}:mismatched")


def judged(result: AuditResult, rule: str, policy: str = "") -> list[Finding]:
    return [f for f in evaluate(result, parse_policy(policy), today=TODAY) if f.rule == rule]


def resolution(result: AuditResult, consumer: str, needed: str) -> tuple[str | None, str]:
    (res,) = [r for r in result.final.resolutions if (r.consumer, r.needed) == (consumer, needed)]
    return res.path, res.via


@pytest.mark.parametrize(
    ("consumer", "needed", "want_via"),
    [
        (TORCH_CUDA, "libnccl.so.2", "DT_RPATH"),  # RPATH beats LD_LIBRARY_PATH
        (TORCH_PROBE, "libnccl.so.2", "LD_LIBRARY_PATH"),  # RUNPATH does not
        (APP, "libfoo.so.1", "ld.so.conf"),  # 00-b.conf before 01-a.conf
    ],
)
def test_prediction_matches_the_real_loader(
    images: NativeImages, two_nccl: AuditResult, consumer: str, needed: str, want_via: str
) -> None:
    """pinguard names the file the image's own ld.so opens, and the rule that picked it."""
    real = loader_list(images.two_nccl, consumer)[needed]
    assert resolution(two_nccl, consumer, needed) == (real, want_via)


def test_real_loader_did_what_the_rules_say(images: NativeImages) -> None:
    """The expectations themselves, by hand: the loader really takes these paths."""
    assert loader_list(images.two_nccl, TORCH_CUDA)["libnccl.so.2"] == WHEEL_NCCL
    assert loader_list(images.two_nccl, TORCH_PROBE)["libnccl.so.2"] == f"{MULTIARCH}/libnccl.so.2"
    assert loader_list(images.two_nccl, APP)["libfoo.so.1"] == "/opt/b/libfoo.so.1"


def test_two_nccl_reports_duplicate_with_both_versions(two_nccl: AuditResult) -> None:
    """native-duplicate names both versions and the copy torch's library loads."""
    (finding,) = judged(two_nccl, "native-duplicate")
    assert finding.package == "libnccl.so.2"
    assert set(finding.versions) == {"2.28.9+cuda13.0", "2.30.3+cuda13.0"}
    assert f"{TORCH_CUDA} loads {WHEEL_NCCL} (2.30.3+cuda13.0, via DT_RPATH)" in finding.message
    assert (
        f"{TORCH_PROBE} loads {MULTIARCH}/libnccl.so.2 (2.28.9+cuda13.0, via LD_LIBRARY_PATH)"
        in (finding.message)
    )
    assert judged(two_nccl, "native-mismatch") == []


def test_owners_and_banners(two_nccl: AuditResult) -> None:
    """The wheel owns its file (RECORD), the deb its file (dpkg .list), /opt copies nobody."""
    libs = {lib.path: lib for lib in two_nccl.final.native}
    wheel, deb, foo = libs[WHEEL_NCCL], libs[DEB_NCCL], libs["/opt/b/libfoo.so.1"]
    assert (wheel.owner_kind, wheel.owner, wheel.owner_version) == (
        "wheel",
        "nvidia-nccl-cu13",
        "2.30.3",
    )
    assert wheel.version == "2.30.3+cuda13.0"
    assert wheel.record_digest == wheel.digest
    assert (deb.owner_kind, deb.owner, deb.owner_version) == (
        "deb",
        "libnccl2",
        "2.28.9-1+cuda13.0",
    )
    assert deb.version == "2.28.9+cuda13.0"
    assert (foo.owner_kind, foo.soname) == (None, "libfoo.so.1")
    assert libs[TORCH_CUDA].rpath == ("$ORIGIN/../../nvidia/nccl/lib",)
    assert libs[TORCH_PROBE].runpath == ("$ORIGIN/../../nvidia/nccl/lib",)
    # the layer that wrote each: the dpkg step's for the deb's file
    step = next(s for s in two_nccl.steps if "dpkg -i" in s.created_by)
    assert deb.layer == step.layer_digest
    assert two_nccl.incomplete == ()


def test_repin_leaving_a_mismatched_so(mismatched: AuditResult, images: NativeImages) -> None:
    """COPY of a 2.29.7 .so over the 2.30.3 wheel's file: native-mismatch, on that step."""
    (finding,) = judged(mismatched, "native-mismatch")
    assert finding.package == "nvidia-nccl-cu13"
    assert "the library says 2.29.7+cuda13.2, its owner is 2.30.3" in finding.message
    assert "differs from the hash in the wheel's RECORD" in finding.message
    assert finding.step == mismatched.steps[-1].index
    # and torch really loads that file
    assert loader_list(images.mismatched, TORCH_CUDA)["libnccl.so.2"] == WHEEL_NCCL


def test_native_pin_on_the_binary_torch_loads(
    mismatched: AuditResult, two_nccl: AuditResult
) -> None:
    """A pin on libnccl.so.2 as torch loads it: the wheel says 2.30.3, the binary 2.29.7."""
    policy = (
        '[[native-pin]]\nsoname = "libnccl.so.2"\nversion = "==2.30.*"\n'
        'consumer = "*/torch/lib/libtorch_cuda.so"\n'
    )
    (finding,) = judged(mismatched, "native-pin", policy)
    assert finding.versions == ("2.29.7+cuda13.2",)
    assert judged(two_nccl, "native-pin", policy) == []


def test_cuda_to_cpu_swap_is_a_variant_change(two_nccl: AuditResult) -> None:
    """torchvision +cu130 -> +cpu (same version) is reported at the step that did it."""
    (finding,) = judged(two_nccl, "variant-change")
    step = next(s for s in two_nccl.steps if "torchvision==0.27.0+cpu" in s.created_by)
    assert finding.step == step.index
    assert finding.versions == ("0.27.0+cu130", "0.27.0+cpu")


def test_json_carries_native_libraries_per_environment_and_step(
    mismatched: AuditResult, layout: Path
) -> None:
    """The document validates, lists libraries per environment, and per step what changed."""
    text = render(mismatched)
    doc = json.loads(text)
    jsonschema.validate(doc, SCHEMA)
    site = next(
        e
        for e in doc["environments"]
        if e["path"].endswith("dist-packages") and "local" in e["path"]
    )
    assert WHEEL_NCCL in {x["path"] for x in site["native_libraries"]}
    assert DEB_NCCL in {x["path"] for x in doc["native_libraries"]}
    dpkg_step = next(s for s in doc["steps"] if "dpkg -i" in s["created_by"])
    assert {"path": DEB_NCCL, "change": "added"}.items() <= dpkg_step["native"]["libraries"][
        0
    ].items()
    last = doc["steps"][-1]["native"]["libraries"]
    assert [(x["path"], x["change"], x["version"]) for x in last] == [
        (WHEEL_NCCL, "changed", "2.29.7+cuda13.2")
    ]
    # same image, same bytes
    assert render(audit_image(f"oci:{layout}:mismatched")) == text


def test_cli_audit_exit_code(layout: Path, tmp_path: Path) -> None:
    """`pinguard audit` fails (exit 1) on the mismatched image by default."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pinguard",
            "audit",
            f"oci:{layout}:mismatched",
            "--no-cache",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).parents[2],
    )
    assert proc.returncode == 1, proc.stderr
    rules = {f["rule"] for f in json.loads(proc.stdout)["findings"]}
    assert {"native-duplicate", "native-mismatch", "variant-change"} <= rules


def test_probe_observes_the_loader_and_a_soname_loaded_first_wins(images: NativeImages) -> None:
    """pinguard probe runs the image's Python: loading torch's library maps the wheel's NCCL
    through DT_RPATH, as predicted; loading the deb's NCCL by path first makes glibc reuse
    it for torch's NEEDED (elf/dl-load.c), which the search order cannot see: a finding."""
    from pinguard.probe import probe

    result, _audit = probe(images.two_nccl, [("load", TORCH_CUDA)])
    (row,) = [r for r in result.rows if r.soname == "libnccl.so.2"]
    assert (row.observed, row.predicted, row.basis) == (WHEEL_NCCL, (WHEEL_NCCL,), "search")
    assert row.agrees

    result, _audit = probe(images.two_nccl, [("load", DEB_NCCL), ("load", TORCH_CUDA)])
    (row,) = [r for r in result.rows if r.soname == "libnccl.so.2"]
    assert row.observed == DEB_NCCL
    assert WHEEL_NCCL in row.predicted
    assert not row.agrees
    assert result.disagreements == (row,)


def test_probe_command_exits_1_on_a_disagreement(images: NativeImages) -> None:
    """The CLI prints both files and exits 1 when the process mapped another copy."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pinguard",
            "probe",
            images.two_nccl,
            "--load",
            DEB_NCCL,
            "--load",
            TORCH_CUDA,
            "-f",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["agrees"] is False
    (lib,) = [x for x in doc["libraries"] if x["soname"] == "libnccl.so.2"]
    assert lib["observed"] == DEB_NCCL
