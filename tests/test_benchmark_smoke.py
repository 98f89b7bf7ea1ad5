"""The benchmark script runs end to end on a tiny image and prints its figures.

``benchmarks/audit_bench.py --smoke`` builds a few-MB synthetic image, pushes it to a real
``docker-registry`` with ``skopeo``, and measures the floor, the cold and warm audits and
``--verify-records``; this only checks that it works (exit 0, a full table), not its timings.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.infra.paths import REPO
from tests.infra.tools import require_tool

ROOT = REPO


def test_benchmark_smoke(tmp_path: Path) -> None:
    """--smoke exits 0 within a minute and prints every figure of the table."""
    require_tool("docker-registry")
    require_tool("skopeo")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "audit_bench.py"),
            "--smoke",
            "--workdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for row in (
        "fetch only",
        "floor (fetch + inflate)",
        "layers (load_layers)",
        "cold audit",
        "warm audit (cached)",
        "cold --verify-records",
        "cold/floor:",
    ):
        assert row in proc.stdout, proc.stdout
    assert "peak RSS" in proc.stdout
