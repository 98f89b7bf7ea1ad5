"""The attestation benchmark runs end to end on a tiny case and prints every figure."""

from __future__ import annotations

import pytest

from tests.infra.bench import run_benchmark
from tests.infra.tools import require_tool

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
    stdout = run_benchmark("attest_bench.py", "--smoke", timeout=180)
    lines = stdout.splitlines()
    for figure in FIGURES:
        assert any(line.startswith(figure) for line in lines), (figure, stdout)
