"""Running a benchmark script under benchmarks/ the way a user does, for the smoke tests.

One home for how a smoke test starts a benchmark (this interpreter, ``src`` on PYTHONPATH,
output captured as text) and checks that it finished; each test then asserts its own figures.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.infra.paths import REPO


def run_benchmark(
    script: str, *args: str, timeout: float, cwd: Path = REPO, returncode: int = 0
) -> str:
    """Run ``benchmarks/<script> args`` in ``cwd``; assert it exits ``returncode`` (0 unless
    told) and return its stdout."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )
    assert proc.returncode == returncode, (proc.stdout[-3000:], proc.stderr[-3000:])
    return proc.stdout
