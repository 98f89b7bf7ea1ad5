"""The benchmark script runs end to end on a tiny image and holds its margin to the last release.

``benchmarks/audit_bench.py --smoke`` builds a few-MB synthetic image (with a 60-distribution
requirement graph in its last two layers), pushes it to a real ``docker-registry`` with
``skopeo``, and measures the floor, the cold and warm audits and ``--verify-records``, each
with this checkout's code and with the previous commit's (``--baseline HEAD~1``, the last
release as far as this branch knows). With ``--max-ratio 1.5`` it exits 1 when the layers,
cold or warm audit takes more than 1.5x the CPU seconds the previous commit took on the same
image in the same run: the quadratic cause search this margin would have caught took 5.8x.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.infra.bench import run_benchmark
from tests.infra.tools import require_tool

MARGIN = 1.5  # CPU seconds against the previous commit; a smoke image is small and noisy


def test_benchmark_smoke(tmp_path: Path) -> None:
    """--smoke exits 0 within two minutes, prints every figure beside floor and last release."""
    require_tool("docker-registry")
    require_tool("skopeo")
    require_tool("git")
    stdout = run_benchmark(
        "audit_bench.py",
        "--smoke",
        "--workdir",
        str(tmp_path),
        "--baseline",
        "HEAD~1",
        "--max-ratio",
        str(MARGIN),
        timeout=180,
    )
    for row in (
        "fetch only",
        "floor (fetch + inflate)",
        "layers (load_layers)",
        "cold audit",
        "warm audit (cached)",
        "cold --verify-records",
        "cold/floor:",
        "x floor",
        "cpu x last",
    ):
        assert row in stdout, stdout
    assert "peak RSS" in stdout
    assert re.search(r"last release: [0-9a-f]{10}", stdout), stdout
    found = re.search(r"warm/last: [0-9.]+ \(cpu ([0-9.]+)\)", stdout)
    assert found is not None, stdout
    assert float(found.group(1)) <= MARGIN, stdout
    assert "FAIL" not in stdout
