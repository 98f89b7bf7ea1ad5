"""``benchmarks/fleet_bench.py --smoke`` runs end to end within its stated margin.

Four of the buildah-built fleet images (``tests/infra/fleetimages.py``), two real workers, a
real broker, the three shared caches. The margin is on bytes, counted by the registry: a cold
run on Redis (which keeps in-flight claims) fetches no more than the distinct layers' bytes
(``--max-bytes-ratio 1.0``; without the claims two workers fetch the shared base twice), and
no warm run fetches any layer. Wall times are printed, not gated: the two cores are shared.
"""

from __future__ import annotations

import re

import pytest

from tests.infra.bench import run_benchmark
from tests.infra.tools import require_tool

pytestmark = pytest.mark.integration


def test_fleet_benchmark_smoke() -> None:
    for tool in ("buildah", "docker-registry", "skopeo", "redis-server"):
        require_tool(tool)
    stdout = run_benchmark(
        "fleet_bench.py", "--smoke", "--no-baseline", "--max-bytes-ratio", "1.0", timeout=900
    )
    assert re.search(r"fleet: 4 images, 11 distinct layers \([0-9.]+ MB compressed\)", stdout)
    rows = {
        line.split("  ")[1].strip(): line.split()
        for line in stdout.splitlines()
        if line.startswith("  ") and not line.startswith("  run ")
    }
    assert set(rows) == {
        "no shared cache, 2 workers",
        *(f"{b}, 2 worker(s), {p}" for b in ("dir", "redis", "registry") for p in ("cold", "warm")),
    }, stdout
    # no cache: every image reads its 4 layers (16 GETs); Redis cold: each distinct layer once
    assert rows["no shared cache, 2 workers"][-3] == "16"
    redis_cold = rows["redis, 2 worker(s), cold"]
    assert redis_cold[-3] == "11"
    assert redis_cold[-4] == "1.00"
    assert "FAIL" not in stdout
