"""Benchmark a fleet: N buildah-built images on one base, real workers, three shared caches.

The images are ``tests/infra/fleetimages.py``'s (``--images``, default 20, at most 40): the
Debian + Python base, then three ``RUN pip install`` steps shared by halves, pairs and single
images (20 images: 80 layers, 33 distinct), built once and kept in containers-storage by
tag. They are pushed to Debian's ``docker-registry`` on 127.0.0.1 with its access log on,
so every figure of bytes is the registry's own count of layer blob bytes it sent (GETs of
the images' layer digests; the cache repository's requests and answer bytes are counted
apart). Then, for each backend (``file:///DIR`` shared directory, Redis, the registry's
``fleetcache-N`` repository) and each worker count (1 and 2 ``pinguard worker``
processes, real Celery on a real Redis broker, ``--jobs 1``, started before the clock),
``pinguard fleet run`` over every image:

* cold: the shared cache empty;
* warm: the same cache again (every layer should come from it: 0 bytes).

A run without any shared cache (each image reads all its layers) is the reference for what
the cache saves. Every figure is printed beside the floor: fetching and inflating every
*distinct* layer once with two processes (both cores), for wall time, and the distinct
layers' compressed bytes, for bytes (``x floor``). With ``--baseline REV`` (default
``HEAD~1``; ``--no-baseline`` skips it) REV's ``src/`` (``git archive``) runs the Redis
rows with 2 workers, printed beside as ``x last``. ``--max-bytes-ratio X`` exits 1 when a
cold run with a cache that keeps in-flight claims (Redis), or with one worker, fetched more
than X times the floor's bytes, or when a warm run fetched any layer;
``tests/fleet/test_fleet_bench_smoke.py`` runs ``--smoke --no-baseline --max-bytes-ratio
1.0`` (4 images, 2 workers).
Timings include ``fleet run``'s start-up and Celery's round trips.
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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from audit_bench import _floor_one, baseline_src  # noqa: E402

CACHE_REPO = "fleetcache"
GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


@dataclass
class Row:
    """One measured run."""

    label: str
    backend: str
    workers: int
    phase: str  # cold | warm | none
    seconds: float
    layer_bytes: int
    layer_gets: int
    cache_bytes: int  # registry backend: bytes the cache repository's answers carried
    cache_requests: int  # registry backend: requests to the cache repository (all methods)
    code: str = "this"  # this | baseline


def floor_seconds(urls: Sequence[str], jobs: int) -> float:
    """Wall time to fetch and inflate every URL once with ``jobs`` processes."""
    work = [(url, GZIP, True, False) for url in urls]  # inflate, no tar hash
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        pool.map(_floor_one, work[:1])  # imports, connections
        started = time.perf_counter()
        pool.map(_floor_one, work, chunksize=1)
        return time.perf_counter() - started


@contextlib.contextmanager
def running_workers(
    workdir: Path,
    broker: str,
    results: Path,
    count: int,
    cache: str | None,
    env: Mapping[str, str],
    *,
    unsigned: bool = True,
) -> Iterator[list[Any]]:
    """``count`` workers; ``unsigned``: give ``--cache-unsigned`` (the cache is measured
    unsigned, as before workers required the fleet's keys; a baseline from before that rule
    does not know the flag)."""
    from tests.infra.fleet import start_worker

    extra = ["--jobs", "1"]
    extra += ["--cache", cache] if cache else []
    extra += ["--cache-unsigned"] if cache and unsigned else []
    started = []
    try:
        for i in range(count):
            started.append(start_worker(workdir, broker, results, *extra, name=f"w{i}", env=env))
        yield started
    finally:
        for w in started:
            w.stop()


def fleet_run(
    refs: Sequence[str], broker: str, results: Path, out: Path, env: Mapping[str, str]
) -> float:
    cmd = [sys.executable, "-m", "pinguard", "fleet", "run", *refs, "--broker", broker]
    cmd += ["--results", str(results), "--timeout", "3600", "-f", "json", "-o", str(out)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=dict(env))
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"fleet run exited {proc.returncode}: {proc.stderr[-2000:]}")
    doc = json.loads(out.read_text())
    if doc["counts"]["error"] or doc["counts"]["images"] != len(refs):
        raise RuntimeError(f"fleet run did not audit every image: {doc['counts']}")
    return elapsed


def _env(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src)}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=20)
    p.add_argument("--workers", default="1,2", help="worker counts to measure (default 1,2)")
    p.add_argument("--backends", default="dir,redis,registry")
    p.add_argument(
        "--smoke", action="store_true", help="4 images, 2 workers (the test suite runs this)"
    )
    p.add_argument("--baseline", default="HEAD~1", metavar="REV")
    p.add_argument("--no-baseline", action="store_true")
    p.add_argument("--max-bytes-ratio", type=float, metavar="X")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the figures here")
    p.add_argument("--workdir", type=Path, help="default: a temporary directory")
    args = p.parse_args(argv)
    if args.smoke:
        args.images, args.workers = 4, "2"
    from tests.infra.fleetimages import ensure_fleet_images, layer_sizes, push_fleet_images
    from tests.infra.redis import start_redis
    from tests.infra.registry import start_registry

    images = ensure_fleet_images(max(20, args.images))[: args.images]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="pinguard-fleet-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    registry = start_registry(workdir / "registry", access_log=True)
    broker = start_redis(workdir / "broker")
    cache = start_redis(workdir / "cache")
    rows: list[Row] = []
    try:
        refs = list(push_fleet_images(registry, images).values())
        sizes: dict[str, int] = {}
        urls: dict[str, str] = {}
        total = 0
        for image in images:
            layers = layer_sizes(registry, image.name)
            total += sum(layers.values())
            sizes.update(layers)
            repo = image.name.split(":")[0]
            urls.update({d: f"{registry.url}/v2/{repo}/blobs/{d}" for d in layers})
        floor_bytes = sum(sizes.values())
        floor_seconds(list(urls.values()), 2)  # the page cache
        floor_s = floor_seconds(list(urls.values()), 2)

        def measure(
            label: str, backend: str, count: int, url: str | None, env: Mapping[str, str], code: str
        ) -> None:
            results = workdir / f"results-{len(rows)}"
            phases = ("none",) if url is None else ("cold", "warm")
            with running_workers(
                workdir / f"w-{len(rows)}", broker.url(), results, count, url, env,
                unsigned=code == "this",
            ):  # fmt: skip
                for phase in phases:
                    mark = registry.log_mark()
                    seconds = fleet_run(refs, broker.url(), results, workdir / "f.json", env)
                    lines = [r for r in registry.requests(mark) if r.method == "GET"]
                    layer = [r for r in lines if r.blob in sizes]
                    cached = [r for r in registry.requests(mark) if f"/v2/{CACHE_REPO}-" in r.path]
                    rows.append(
                        Row(
                            f"{label}, {phase}" if url else label,
                            backend,
                            count,
                            phase,
                            seconds,
                            sum(r.size for r in layer),
                            len(layer),
                            sum(r.size for r in cached),
                            len(cached),
                            code,
                        )
                    )

        this = _env(ROOT / "src")
        counts = [int(c) for c in args.workers.split(",")]
        measure("no shared cache, 2 workers", "none", 2, None, this, "this")
        for backend in args.backends.split(","):
            for count in counts:
                cache.stop()  # an empty cache for each pair of runs
                cache.start()
                url = {
                    "dir": f"file://{workdir / f'dircache-{len(rows)}'}",
                    "redis": cache.url(),
                    "registry": f"registry://{registry.address}/{CACHE_REPO}-{len(rows)}",
                }[backend]
                measure(f"{backend}, {count} worker(s)", backend, count, url, this, "this")
        base_commit = None
        if not args.no_baseline and "redis" in args.backends:
            base_commit, base_src = baseline_src(workdir, args.baseline)
            cache.stop()
            cache.start()
            label = f"redis, 2 worker(s) @{base_commit}"
            measure(label, "redis", 2, cache.url(), _env(base_src), "baseline")
    finally:
        registry.stop()
        broker.stop()
        cache.stop()
    distinct = len(sizes)
    print(
        f"fleet: {len(images)} images, {distinct} distinct layers "
        f"({floor_bytes / 1e6:.1f} MB compressed) of {total / 1e6:.1f} MB in all; "
        f"floor (fetch + inflate each distinct layer once, 2 processes) {floor_s:.2f} s"
    )
    header = (
        f"  {'run':<34} {'seconds':>8} {'x floor':>8} {'layer MB':>9} {'x floor':>8} "
        f"{'GETs':>5} {'cache MB':>9} {'cache reqs':>10} {'x last':>7} {'bytes x last':>12}"
    )
    print(header)
    last = {(r.backend, r.workers, r.phase): r for r in rows if r.code == "baseline"}
    failed = []
    for r in rows:
        base = last.get((r.backend, r.workers, r.phase)) if r.code == "this" else None
        x_last = f"{r.seconds / base.seconds:7.2f}" if base else f"{'':>7}"
        b_last = (
            f"{r.layer_bytes / base.layer_bytes:12.2f}"
            if base and base.layer_bytes
            else f"{'':>12}"
        )
        print(
            f"  {r.label:<34} {r.seconds:8.2f} {r.seconds / floor_s:8.1f} "
            f"{r.layer_bytes / 1e6:9.1f} {r.layer_bytes / floor_bytes:8.2f} {r.layer_gets:5d} "
            f"{r.cache_bytes / 1e6:9.2f} {r.cache_requests:10d} {x_last} {b_last}"
        )
        if args.max_bytes_ratio is not None and r.code == "this":
            gated = r.phase == "cold" and (r.backend == "redis" or r.workers == 1)
            if gated and r.layer_bytes > args.max_bytes_ratio * floor_bytes:
                failed.append(f"{r.label}: {r.layer_bytes / floor_bytes:.2f}x the floor's bytes")
            if r.phase == "warm" and r.layer_bytes:
                failed.append(f"{r.label}: fetched {r.layer_gets} layer blob(s) on a warm cache")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "images": len(images),
                    "distinct_layers": distinct,
                    "floor_seconds": floor_s,
                    "floor_bytes": floor_bytes,
                    "all_layer_bytes": total,
                    "baseline": base_commit,
                    "rows": [asdict(r) for r in rows],
                },
                indent=1,
            )
        )
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    for line in failed:
        print(f"FAIL {line} (--max-bytes-ratio {args.max_bytes_ratio:g})")
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(ROOT / "src"))
    sys.exit(main())
