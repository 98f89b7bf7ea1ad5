"""The native layer on a real GPU image: torch 2.14.1's CUDA 13 wheels, built by buildah.

Issue 17's proof on the real world's artifacts, with the image's own loader and its own
Python as oracles: every shared object of the real wheels reads without a problem, the
search-order prediction for torch's libraries equals what ``ld.so --list`` opens inside the
image (libtorch_cuda.so's ``libnccl.so.2`` through DT_RPATH ``$ORIGIN/../../nvidia/nccl/lib``),
torch's own preload is predicted as the basis, ``pinguard probe --import torch`` agrees with
``/proc/self/maps``, and one NCCL gives no ``native-duplicate``. The image is about 5.9 GB, so
these run only with ``--large-corpus`` (tests/infra/torchimage.py builds and caches it).
"""

from __future__ import annotations

import datetime as _dt
import json
import posixpath
from pathlib import Path

import pytest

from pinguard.audit.pipeline import audit_image
from pinguard.models import AuditResult
from pinguard.policy import evaluate, parse_policy
from pinguard.probe import probe
from tests.conftest import skopeo_copy
from tests.infra.cli import cli
from tests.infra.native import loader_list
from tests.infra.torchimage import SITE, ensure_torch_image

pytestmark = [pytest.mark.integration, pytest.mark.large_corpus]

TORCH_LIB = f"{SITE}/torch/lib"
TORCH_CUDA = f"{TORCH_LIB}/libtorch_cuda.so"
WHEEL_NCCL = f"{SITE}/nvidia/nccl/lib/libnccl.so.2"
WHEEL_CUDNN = f"{SITE}/nvidia/cudnn/lib/libcudnn.so.9"


@pytest.fixture(scope="module")
def image() -> str:
    return ensure_torch_image()


@pytest.fixture(scope="module")
def layout(image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An OCI layout of the image (skopeo, from containers-storage)."""
    out = tmp_path_factory.mktemp("torch-oci") / "oci"
    skopeo_copy(f"containers-storage:{image}", f"oci:{out}:torch")
    return out


@pytest.fixture(scope="module")
def audited(layout: Path) -> AuditResult:
    """The layer-by-layer audit of the image."""
    return audit_image(f"oci:{layout}:torch")


def test_every_shared_object_of_the_real_wheels_is_read(audited: AuditResult) -> None:
    """Nothing incomplete, no ELF problem, and torch's and NVIDIA's libraries all cataloged
    with the facts the loader needs (libtorch_cuda.so: .dynstr in the last PT_LOAD)."""
    assert audited.incomplete == ()
    libs = {lib.path: lib for lib in audited.final.native}
    assert [p for p, lib in libs.items() if lib.problem] == []
    wheel_libs = [p for p in libs if p.startswith((f"{SITE}/torch/", f"{SITE}/nvidia/"))]
    assert len(wheel_libs) >= 40, len(wheel_libs)
    cuda = libs[TORCH_CUDA]
    assert "libnccl.so.2" in cuda.needed
    assert "$ORIGIN/../../nvidia/nccl/lib" in cuda.rpath
    assert libs[WHEEL_NCCL].owner == "nvidia-nccl-cu13"
    # NCCL came in the step before torch: the libraries carry their own layers
    assert libs[WHEEL_NCCL].layer != cuda.layer


def test_search_order_prediction_equals_the_images_own_loader(
    image: str, audited: AuditResult
) -> None:
    """For every library in torch/lib with resolutions, what the search order alone gives
    (``search_real`` under a preload) is the file ``ld.so --list`` opens in the image."""
    by_consumer: dict[str, list[tuple[str, str | None, str]]] = {}
    for r in audited.final.resolutions:
        if r.consumer.startswith(f"{TORCH_LIB}/"):
            searched = r.search_real if r.basis == "preload" else r.real
            via = r.search_via if r.basis == "preload" else r.via
            by_consumer.setdefault(r.consumer, []).append((r.needed, searched, via))
    assert TORCH_CUDA in by_consumer
    compared = 0
    for consumer, rows in sorted(by_consumer.items()):
        real = loader_list(image, consumer, missing_ok=True)
        for needed, searched, _via in rows:
            assert searched is not None, (consumer, needed)
            assert posixpath.realpath(real[needed]) == searched or real[needed] == searched, (
                consumer,
                needed,
                real[needed],
                searched,
            )
            compared += 1
    assert compared >= 10, compared
    nccl = {n: (s, v) for n, s, v in by_consumer[TORCH_CUDA]}["libnccl.so.2"]
    assert nccl == (WHEEL_NCCL, "DT_RPATH")


def test_torch_preload_is_the_basis_and_the_probe_agrees(image: str) -> None:
    """``import torch`` in the image maps the wheel's NCCL and cuDNN (torch's
    ``_preload_cuda_deps``), exactly what the audit of the same root predicts."""
    result, audit = probe(image, [("import", "torch")])
    assert result.disagreements == ()
    observed = {row.soname: row for row in result.rows}
    assert observed["libnccl.so.2"].observed == WHEEL_NCCL
    assert observed["libnccl.so.2"].predicted == (WHEEL_NCCL,)
    assert observed["libnccl.so.2"].basis == "preload"
    assert observed["libcudnn.so.9"].observed == WHEEL_CUDNN
    nccl = [
        r for r in audit.final.resolutions if (r.consumer, r.needed) == (TORCH_CUDA, "libnccl.so.2")
    ]
    assert [(r.via, r.preloaded_by.split()[0]) for r in nccl] == [("preload", "torch")]


def test_one_nccl_is_no_duplicate_and_the_default_gate_passes(audited: AuditResult) -> None:
    """The real image has one copy of each CUDA library a Python consumer reaches: no
    native finding at all under the default rules."""
    findings = evaluate(audited, parse_policy(""), today=_dt.date(2026, 12, 2))
    assert [f for f in findings if f.rule.startswith("native")] == []


def test_cli_audit_passes(layout: Path, tmp_path: Path) -> None:
    """What a user runs: ``pinguard audit`` of the real image exits 0 with nothing
    incomplete, and the JSON says how torch's NCCL is found."""
    out = tmp_path / "audit.json"
    code, text = cli(
        "audit",
        f"oci:{layout}:torch",
        "--format",
        "json",
        "-o",
        str(out),
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    assert code == 0, text
    doc = json.loads(out.read_text())
    assert doc["verdict"] == "pass"
    assert doc["incomplete"] == []
    names = {d["name"] for env in doc["environments"] for d in env["packages"]}
    assert {"torch", "nvidia-nccl-cu13", "nvidia-cudnn-cu13", "triton"} <= names
    (nccl,) = [
        r
        for r in doc["resolutions"]
        if (r["consumer"], r["needed"]) == (TORCH_CUDA, "libnccl.so.2")
    ]
    assert (nccl["via"], nccl["search_via"], nccl["search_order"]) == (
        "preload",
        "DT_RPATH",
        WHEEL_NCCL,
    )
