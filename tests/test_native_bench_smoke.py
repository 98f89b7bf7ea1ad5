"""The native benchmark runs end to end on its gcc-built smoke input and prints its figures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.infra.tools import require_tool

ROOT = Path(__file__).resolve().parent.parent


def test_native_bench_smoke(tmp_path: Path) -> None:
    """--smoke exits 0 and reports the banner of its 64 MB shared object and the peak RSS."""
    require_tool("gcc")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "native_bench.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2.99.1+cuda13.0" in proc.stdout
    assert "peak RSS" in proc.stdout
    assert "soname=libnccl.so.2" in proc.stdout
