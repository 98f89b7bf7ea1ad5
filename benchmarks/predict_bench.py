"""Benchmark ``pinguard predict``: a 6-step Dockerfile over a cached base, warm, beside its floor.

The base is a small synthetic OCI layout (python.org's layout under ``/usr/local``: the
interpreter's ``os.py``, pip and setuptools in ``site-packages``; ``--base`` names it for the
Dockerfile's ``FROM python:3.11-bench``), audited once so the layer
and replay caches are warm; the packages are the glm scenario's wheels (torch, NCCL, cutlass,
vllm, flashinfer nightlies: tests/infra/scenario.py) on two loopback indexes
(tests/infra/index.py). The Dockerfile has six steps after ``FROM``: two ``ARG``s and four
``RUN pip ...`` (the pinned torch stack, vllm, the nightly that downgrades NCCL, an
uninstall). One prediction warms the uv cache; then each figure is the median of
``--repeat`` runs of the whole command (``python -m pinguard predict``, a new process, as a
user runs it): with pip's own resolver asked beside uv (the default) and without
(``--no-pip-check``). The floor is what any prediction built on this resolver pays: a new
pinguard process reading the base's warm audit (``pinguard audit``, replay cache) plus the
bare ``uv pip install --dry-run`` of each of the four installs, run back to back in
pre-seeded environments. The target is 5 s for the warm prediction; the script exits 1 when
the default prediction misses it (``--no-target`` only prints). ``--smoke``: one repeat.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.infra (the index server, the scenario's wheels)

TARGET = 5.0  # seconds, warm
STEPS = """\
FROM python:3.11-bench
ARG INDEX_URL
ARG NIGHTLY_URL
RUN pip install --index-url $INDEX_URL nvidia-nccl-cu13==2.30.3 nvidia-cutlass-dsl==4.3.0 \\
    torch==2.11.0+cu130
RUN pip install --index-url $INDEX_URL vllm==0.11.0 ninja==1.11.1.4
RUN pip install --pre --index-url $NIGHTLY_URL --extra-index-url $INDEX_URL \\
    flashinfer-python==0.6.18.dev20261120
RUN pip uninstall -y ninja
"""
SITE = "usr/local/lib/python3.11/site-packages"


def _dist(name: str, version: str) -> dict[str, bytes]:
    info = f"{SITE}/{name}-{version}.dist-info"
    return {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n".encode(),
        f"{info}/INSTALLER": b"pip\n",
        f"{info}/RECORD": f"{name}-{version}.dist-info/METADATA,,\n".encode(),
    }


def make_base(directory: Path) -> str:
    """A python.org-style base image as an OCI layout; its reference."""
    from pinguard.testing.images import ImageWriter, layer_tar

    files = {"usr/local/lib/python3.11/os.py": b"# os\n", **_dist("pip", "24.0")}
    files.update(_dist("setuptools", "69.5.1"))
    writer = ImageWriter(directory)
    layer = writer.layer(layer_tar(files, parents=True))
    history = [{"created_by": "/bin/sh -c #(nop) ADD python in /"}]
    env = ("PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",)
    image = writer.image([layer], history, env=env)
    index, _ = writer.index([image], tag="base")
    writer.write_layout(index)
    return f"oci:{directory}:base"


def pinguard(*args: str, cache: Path) -> tuple[float, int]:
    """Seconds one ``python -m pinguard ARGS`` takes (a new process) and its exit code."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pinguard", *args, "--cache-dir", str(cache)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"pinguard {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return elapsed, proc.returncode


def uv_floor(main: str, nightly: str, cache: Path) -> float:
    """The four installs as bare uv dry runs, back to back, each in an environment seeded
    with what the steps before it leave (the resolver's own share of a prediction)."""
    from pinguard.repair.resolve.uv import uv_bin

    uv = uv_bin()
    torch = ["nvidia-nccl-cu13==2.30.3", "nvidia-cutlass-dsl==4.3.0", "torch==2.11.0+cu130"]
    nightly_args = ["--prerelease", "allow", "--index-strategy", "unsafe-best-match"]
    nightly_args += ["--index-url", nightly, "--extra-index-url", main]
    installs = [
        ["--index-url", main, *torch],
        ["--index-url", main, "vllm==0.11.0", "ninja==1.11.1.4"],
        [*nightly_args, "flashinfer-python==0.6.18.dev20261120"],
    ]
    with tempfile.TemporaryDirectory(prefix="predict-floor-") as tmp:
        venv = Path(tmp, "venv")
        subprocess.run([uv, "venv", "-q", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        common = ["--python", python, "--cache-dir", str(cache / "uv")]
        common += ["--python-version", "3.11", "--python-platform", "x86_64-unknown-linux-gnu"]
        total = 0.0
        for args in installs:
            start = time.perf_counter()
            subprocess.run(
                [uv, "pip", "install", "--dry-run", "-q", *common, *args],
                check=True,
                capture_output=True,
            )
            total += time.perf_counter() - start
            # seed the next step's state (not timed)
            subprocess.run(
                [uv, "pip", "install", "-q", *common[:4], *args], check=True, capture_output=True
            )
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=5, help="warm runs per figure (median)")
    parser.add_argument("--smoke", action="store_true", help="one repeat, for a quick check")
    parser.add_argument("--no-target", action="store_true", help="print only, never exit 1")
    args = parser.parse_args(argv)
    repeat = 1 if args.smoke else max(1, args.repeat)

    from tests.infra.index import serve_index
    from tests.infra.scenario import build_scenario_wheels

    with tempfile.TemporaryDirectory(prefix="predict-bench-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        cache = root / "cache"
        build_scenario_wheels(root / "main", root / "nightly")
        main_index = stack.enter_context(serve_index(root / "main"))
        nightly_index = stack.enter_context(serve_index(root / "nightly"))
        base = make_base(root / "base")
        dockerfile = root / "Dockerfile"
        dockerfile.write_text(STEPS)
        predict = [
            "predict",
            str(dockerfile),
            "--base",
            base,
            "--build-arg",
            f"INDEX_URL={main_index.url}",
            "--build-arg",
            f"NIGHTLY_URL={nightly_index.url}",
            "-f",
            "json",
        ]
        cold, code = pinguard(*predict, cache=cache)  # audits the base, fills uv's cache
        assert code == 1, "the nightly step's downgrade must fail the prediction"
        pinguard("audit", base, "-f", "json", cache=cache)
        warm = statistics.median(pinguard(*predict, cache=cache)[0] for _ in range(repeat))
        fast = statistics.median(
            pinguard(*predict, "--no-pip-check", cache=cache)[0] for _ in range(repeat)
        )
        base_audit = statistics.median(
            pinguard("audit", base, "-f", "json", cache=cache)[0] for _ in range(repeat)
        )
        resolver = statistics.median(
            uv_floor(main_index.url, nightly_index.url, cache) for _ in range(repeat)
        )
    floor = base_audit + resolver
    rows = [
        ("prediction, cold (base audited, uv cache empty)", cold),
        ("prediction, warm (pip's resolver asked too)", warm),
        ("prediction, warm, --no-pip-check", fast),
        ("floor: warm base audit + 3 bare uv dry runs", floor),
        ("  warm base audit (new process, replay cache)", base_audit),
        ("  uv pip install --dry-run x3", resolver),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"predict: 6-step Dockerfile over a cached base, median of {repeat} (seconds)")
    for label, seconds in rows:
        ratio = f"{seconds / floor:5.2f}x floor" if floor else ""
        print(f"  {label:<{width}}  {seconds:6.2f}  {ratio}")
    verdict = "met" if warm < TARGET else "MISSED"
    print(f"target: warm prediction under {TARGET:.1f} s: {verdict} ({warm:.2f} s)")
    return 0 if warm < TARGET or args.no_target else 1


if __name__ == "__main__":
    sys.exit(main())
