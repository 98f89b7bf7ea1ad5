"""``benchmarks/fleet_bench.py --smoke`` runs end to end and prints every figure.

Three tiny images on a shared base, two real workers, a real broker and cache; this checks
that the script works (exit 0, every row of its table, every image audited), not timings.
"""

from __future__ import annotations

from tests.infra.bench import run_benchmark
from tests.infra.tools import require_tool


def test_fleet_benchmark_smoke() -> None:
    for tool in ("docker-registry", "skopeo", "redis-server"):
        require_tool(tool)
    stdout = run_benchmark("fleet_bench.py", "--smoke", timeout=300)
    assert "fleet: 3 images x 3 layers (5 distinct, 9 in all), 2 workers; 3 pass" in stdout
    for row in (
        "floor (distinct layers once)",
        "naive floor (every layer of every image)",
        "cold (no shared cache)",
        "shared cache, first run",
        "shared cache, warm",
        "cold/floor:",
    ):
        assert row in stdout, stdout
