"""Benchmark a fleet: N images sharing base layers, audited by 2 workers, shared cache vs cold.

The script writes ``--images`` OCI images that share ``--base-layers`` base layers (Python,
pip and ``--base-dists`` distributions, plus ``--base-mb`` MB of incompressible payload per
layer, as a CUDA base carries) and differ in one small top layer (torch and NCCL at versions
that vary by image), pushes them to Debian's ``docker-registry`` on 127.0.0.1, starts
``redis-server`` (broker, and a second one as the cache) and ``--workers`` ``pinguard worker``
processes, and measures with ``pinguard fleet run``:

* the floor: fetching and inflating every *distinct* layer once, ``--workers`` processes
  (what a fleet with a perfect shared cache must still read);
* the naive floor: fetching and inflating every layer of every image (what each image alone
  reads);
* cold: the fleet with no shared cache (every worker analyses every layer of its images);
* shared, first run: an empty Redis cache (a base layer is analysed by whichever worker gets
  there first; two workers that start on it together both analyse it: no in-flight lock);
* shared, warm: the same cache again (only the records are rewritten).

It prints a table and is not a test; ``--smoke`` runs it on a few small images
(``tests/fleet/test_fleet_bench_smoke.py`` runs that once). Timings include Celery's task
round trips and each worker's process start-up is excluded (workers start before the clock).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pinguard.testing.demo import Dist, Layer, write_oci_archive  # noqa: E402


def image_layers(index: int, base_layers: int, base_dists: int, base_mb: int) -> list[Layer]:
    """The shared base (same bytes in every image), then one top layer of its own."""
    layers = []
    for b in range(base_layers):
        payload = {
            f"usr/local/lib/libbase{b}.so": _payload(b, base_mb << 20),
        }
        dists = [Dist(f"base-lib-{b}-{d}", f"1.{d}.0") for d in range(base_dists)]
        if b == 0:
            dists.append(Dist("pip", "25.0.1", installer=""))
        layers.append(Layer(f"RUN /bin/sh -c install base part {b}", add=dists, files=payload))
    torch = ("2.11.0+cu130", "2.12.1+cu130")[index % 2]
    nccl = ("2.30.3", "2.29.7", "2.28.9")[index % 3]
    layers.append(
        Layer(
            f"RUN /bin/sh -c pip install torch=={torch} nvidia-nccl-cu13=={nccl} app{index}",
            add=[
                Dist("nvidia-nccl-cu13", nccl),
                Dist("torch", torch, requires=[f"nvidia-nccl-cu13=={nccl}"], requested=True),
                Dist(f"app-{index}", "1.0", requested=True),
            ],
        )
    )
    return layers


def _payload(seed: int, size: int) -> bytes:
    """``size`` pseudo-random bytes (incompressible, deterministic)."""
    import hashlib

    out = bytearray()
    block = hashlib.sha256(f"base-{seed}".encode()).digest()
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block * 64  # 2 KiB per hash: fast, and still not compressible much
    return bytes(out[:size])


def _floor_one(args: tuple[str, str]) -> int:
    import requests
    from isal import isal_zlib

    url, _ = args
    out = 0
    with requests.get(url, stream=True, timeout=60) as resp:
        resp.raise_for_status()
        decomp = isal_zlib.decompressobj(31)
        while True:
            chunk = resp.raw.read(1 << 20, decode_content=False)
            if not chunk:
                break
            out += len(decomp.decompress(chunk))
    return out


def layer_urls(address: str, repo_tags: Sequence[str]) -> list[tuple[str, str]]:
    """(blob URL, digest) of every layer of every image, in order."""
    import requests

    out = []
    for repo_tag in repo_tags:
        repo, tag = repo_tag.split(":")
        manifest = requests.get(
            f"http://{address}/v2/{repo}/manifests/{tag}",
            headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
            timeout=30,
        ).json()
        for layer in manifest["layers"]:
            out.append((f"http://{address}/v2/{repo}/blobs/{layer['digest']}", layer["digest"]))
    return out


def floor(work: Sequence[tuple[str, str]], jobs: int) -> float:
    start = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        pool.map(_floor_one, work)
    return time.perf_counter() - start


@contextlib.contextmanager
def workers(
    workdir: Path, broker: str, results: Path, count: int, cache: str | None
) -> Iterator[None]:
    from tests.infra.fleet import start_worker

    extra = ["--cache", cache] if cache else []
    started = []
    try:
        for i in range(count):
            started.append(
                start_worker(workdir, broker, results, "--jobs", "1", *extra, name=f"w{i}")
            )
        yield
    finally:
        for w in started:
            w.stop()


def fleet_run(refs: Sequence[str], broker: str, results: Path, out: Path) -> tuple[float, Any]:
    cmd = [sys.executable, "-m", "pinguard", "fleet", "run", *refs, "--broker", broker]
    cmd += ["--results", str(results), "--timeout", "3600", "-f", "json", "-o", str(out)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"fleet run exited {proc.returncode}: {proc.stderr[-2000:]}")
    return elapsed, json.loads(out.read_text())


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=12)
    p.add_argument("--base-layers", type=int, default=3)
    p.add_argument("--base-dists", type=int, default=60, help="distributions per base layer")
    p.add_argument("--base-mb", type=int, default=40, help="payload MB per base layer")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--smoke", action="store_true", help="3 tiny images, for the test suite")
    p.add_argument("--workdir", type=Path, help="default: a temporary directory")
    args = p.parse_args(argv)
    if args.smoke:
        args.images, args.base_layers, args.base_dists, args.base_mb = 3, 2, 5, 1
    from tests.infra.redis import start_redis
    from tests.infra.registry import start_registry

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="pinguard-fleet-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    registry = start_registry(workdir / "registry")
    broker = start_redis(workdir / "broker")
    cache = start_redis(workdir / "cache")
    try:
        repo_tags = [f"fleet/app{i}:v1" for i in range(args.images)]
        for i, repo_tag in enumerate(repo_tags):
            archive = workdir / f"app{i}.tar"
            write_oci_archive(
                image_layers(i, args.base_layers, args.base_dists, args.base_mb), archive, tag="t"
            )
            registry.push(f"oci-archive:{archive}:t", repo_tag)
        refs = [f"docker://{registry.ref(t)}" for t in repo_tags]
        work = layer_urls(registry.address, repo_tags)
        distinct = list({d: (u, d) for u, d in work}.values())
        floor(work, args.workers)  # warm the page cache
        figures: dict[str, float] = {
            "floor (distinct layers once)": floor(distinct, args.workers),
            "naive floor (every layer of every image)": floor(work, args.workers),
        }
        runs = [("cold (no shared cache)", None), ("shared cache, first run", cache.url())]
        for label, cache_url in runs:
            results = workdir / f"results-{len(figures)}"
            with workers(
                workdir / label.split()[0], broker.url(), results, args.workers, cache_url
            ):
                figures[label], doc = fleet_run(refs, broker.url(), results, workdir / "f.json")
                if cache_url:
                    figures["shared cache, warm"], doc = fleet_run(
                        refs, broker.url(), results, workdir / "f.json"
                    )
        counts = doc["counts"]
        print(
            f"fleet: {args.images} images x {args.base_layers + 1} layers "
            f"({len(distinct)} distinct, {len(work)} in all), {args.workers} workers; "
            f"{counts['pass']} pass, {counts['fail']} fail, {counts['error']} error"
        )
        width = max(len(k) for k in figures)
        for label, seconds in figures.items():
            print(f"  {label.ljust(width)}  {seconds:8.2f} s")
        base = figures["floor (distinct layers once)"]
        print(
            f"  cold/floor: {figures['cold (no shared cache)'] / base:.1f}x   "
            f"shared first/floor: {figures['shared cache, first run'] / base:.1f}x   "
            f"warm/floor: {figures['shared cache, warm'] / base:.1f}x"
        )
    finally:
        registry.stop()
        broker.stop()
        cache.stop()
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(ROOT / "src"))
    sys.exit(main())
