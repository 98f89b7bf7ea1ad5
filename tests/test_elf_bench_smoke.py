"""The ELF reader benchmark runs, beside its floor and the last release, within its margin."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_elf_bench_smoke_within_margin() -> None:
    """--smoke on this machine's libc and libstdc++: facts equal readelf's, the scanner
    within 2.5x the hashing floor, memory under the bound, last release measured beside."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "elf_bench.py"),
            "--smoke",
            "--baseline",
            "HEAD~1",
            "--max-ratio",
            "2.5",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DIFFERS" not in done.stdout
    assert "x the floor" in done.stdout
    assert "last release (HEAD~1)" in done.stdout
