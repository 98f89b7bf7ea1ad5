"""The benchmark script runs end to end on a tiny image and prints its figures.

``benchmarks/audit_bench.py --smoke`` builds a few-MB synthetic image, pushes it to a real
``docker-registry`` with ``skopeo``, and measures the floor, the cold and warm audits and
``--verify-records``; this only checks that it works (exit 0, a full table), not its timings.
"""

from __future__ import annotations

from pathlib import Path

from tests.infra.bench import run_benchmark
from tests.infra.tools import require_tool


def test_benchmark_smoke(tmp_path: Path) -> None:
    """--smoke exits 0 within a minute and prints every figure of the table."""
    require_tool("docker-registry")
    require_tool("skopeo")
    stdout = run_benchmark("audit_bench.py", "--smoke", "--workdir", str(tmp_path), timeout=120)
    for row in (
        "fetch only",
        "floor (fetch + inflate)",
        "layers (load_layers)",
        "cold audit",
        "warm audit (cached)",
        "cold --verify-records",
        "cold/floor:",
    ):
        assert row in stdout, stdout
    assert "peak RSS" in stdout
