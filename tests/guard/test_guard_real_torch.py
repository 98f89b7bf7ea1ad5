"""The in-build guard on the real torch wheels: the good torch 2.11.0 step passes, the step
that upgrades to 2.14.1 (and so moves NCCL 2.28.9 -> 2.30.7 under a pin) fails.

The last round's reader failed the *good* step (libc10.so, libtorch_cpu.so,
libcusparseLt.so.0 ... "incomplete": patchelf's late .dynstr). Here the real CUDA 13 wheels
of torch 2.11.0 and 2.14.1 (and their exact nvidia-* pins, from the package index, cached
by tests/infra/torchimage.py) are installed by pip in a buildah build, with the zipapp guard
after each step. About 6 GB of wheels: only with ``--large-corpus``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.infra.build import (
    build_image,
    build_zipapp,
    cache_dir,
    ensure_base_image,
    remove_image,
)
from tests.infra.index import serve_index
from tests.infra.torchimage import torch_wheelhouse

pytestmark = [pytest.mark.integration, pytest.mark.large_corpus]

GUARD = "python3 /opt/pinguard.pyz guard --policy /etc/pinguard/policy.toml"
POLICY = """\
[[pin]]
package = "nvidia-nccl-cu13"
version = ">=2.28,<2.29"
reason = "torch 2.11's NCCL; 2.30 is not qualified on our fabric yet"
"""
TAG = "localhost/pinguard-test/guarded-real-torch:latest"


def _index_dir() -> Path:
    """One directory holding both torch releases' wheel closures (links to the caches)."""
    out = cache_dir() / "real-wheels" / "torch-guard-index"
    out.mkdir(parents=True, exist_ok=True)
    for version in ("2.11.0", "2.14.1"):
        for wheel in torch_wheelhouse(version).glob("*.whl"):
            link = out / wheel.name
            if not link.exists():
                link.symlink_to(wheel)
    return out


def test_real_torch_steps_guarded(tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    build_zipapp(ctx)
    (ctx / "policy.toml").write_text(POLICY)
    dockerfile = "\n".join(
        [
            f"FROM {ensure_base_image()}",
            "ARG INDEX_URL",
            "COPY pinguard.pyz /opt/pinguard.pyz",
            "COPY policy.toml /etc/pinguard/policy.toml",
            f"RUN {GUARD} --step-name baseline",
            f"RUN pip install --index-url $INDEX_URL torch==2.11.0 && {GUARD}",
            f"RUN pip install --index-url $INDEX_URL torch==2.14.1 && {GUARD}",
        ]
    )
    with serve_index(_index_dir()) as index:
        result = build_image(ctx, dockerfile + "\n", TAG, {"INDEX_URL": index.url}, timeout=3600)
    try:
        log = result.log
        assert not result.ok, log[-4000:]
        assert result.failed_step == 7, log[-4000:]  # FROM is STEP 1: the 2.14.1 step
        good, _, bad = log.partition("torch==2.14.1 && ")
        # the torch 2.11.0 step: real patchelf'd libraries, all read, the pin holds
        assert "pinguard guard: step 2: pip install --index-url $INDEX_URL torch==2.11.0" in good
        assert good.count("verdict: PASS") == 2, good[-4000:]
        assert "incomplete" not in good.lower(), good[-4000:]
        assert "added       nvidia-nccl-cu13 2.28.9" in good
        # the upgrade moves NCCL past the pin, with torch's exact requirement as the cause
        assert (
            "upgraded    nvidia-nccl-cu13 2.28.9 -> 2.30.7  <- torch 2.14.1 requires "
            'nvidia-nccl-cu13==2.30.7; platform_system == "Linux"' in bad
        ), bad[-4000:]
        assert "pin-violation: nvidia-nccl-cu13 2.30.7 does not satisfy the pin" in bad
        assert "verdict: FAIL" in bad
        assert "incomplete" not in bad.lower(), bad[-4000:]
    finally:
        remove_image(TAG)
