"""The attestation benchmark runs end to end on a tiny case and prints every figure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.tools import require_tool

ROOT = Path(__file__).resolve().parents[2]
FIGURES = (
    "statement of 50 distributions",
    "envelope",
    "build statement",
    "sign (PAE + ECDSA P-256)",
    "check one envelope",
    "push, first attestation (tag schema)",
    "push, attestation 3",
    "find 3 attestations",
    "verify 3 attestations",
)


@pytest.mark.integration
def test_attest_benchmark_smoke() -> None:
    """--smoke exits 0 and prints each row of the table (timings are not judged here)."""
    require_tool("docker-registry")
    require_tool("skopeo")
    require_tool("openssl")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "attest_bench.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    for figure in FIGURES:
        assert any(line.startswith(figure) for line in lines), (figure, proc.stdout)
