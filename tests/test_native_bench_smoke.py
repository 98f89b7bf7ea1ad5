"""The native benchmark runs end to end on its gcc-built smoke input and prints its figures."""

from __future__ import annotations

from pathlib import Path

from tests.infra.bench import run_benchmark
from tests.infra.tools import require_tool


def test_native_bench_smoke(tmp_path: Path) -> None:
    """--smoke exits 0 and reports the banner of its 64 MB shared object and the peak RSS."""
    require_tool("gcc")
    stdout = run_benchmark("native_bench.py", "--smoke", timeout=300, cwd=tmp_path)
    assert "2.99.1+cuda13.0" in stdout
    assert "peak RSS" in stdout
    assert "soname=libnccl.so.2" in stdout
