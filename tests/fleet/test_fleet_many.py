"""A fleet run over 20 real buildah-built images, counted from the registry's side.

The images (``tests/infra/fleetimages.py``) share the Debian base layer and, by halves, pairs
and singly, three ``RUN pip install`` layers: 80 layers, 33 distinct. They are pushed to a
Debian ``docker-registry`` that logs every request; two real ``pinguard worker`` processes
audit them through a real broker with a real Redis as the shared layer cache. What pip
installed in each image is read from its mounted root with ``importlib.metadata``; the
registry's access log says which blobs were fetched and how many bytes.

Fleet workers keep no per-user replay cache (their ``AuditOptions`` have no cache
directory), so nothing answers before the shared cache: every layer a warm run does not fetch
was read from Redis, which the test checks from the Redis side too.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from pinguard.cache.backends.redis import LOCK_PREFIX, PREFIX
from pinguard.cli import main
from pinguard.fleet.dispatch import wait
from pinguard.fleet.records import ResultStore
from tests.infra.build import BASE_SITE_PACKAGES
from tests.infra.fleet import Worker, enqueue_until_stalled, start_worker, stop_all
from tests.infra.fleetimages import (
    FleetImage,
    ensure_fleet_images,
    layer_sizes,
    push_fleet_images,
)
from tests.infra.redis import RedisServer
from tests.infra.registry import HTTPFront, RegistryServer, running_registry
from tests.infra.tools import require_tool

pytestmark = pytest.mark.integration
COUNT = 20


@pytest.fixture(scope="module")
def built_fleet(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RegistryServer, list[FleetImage], dict[str, str]]]:
    for tool in ("buildah", "skopeo", "docker-registry", "redis-server"):
        require_tool(tool)
    images = ensure_fleet_images(COUNT)
    workdir = tmp_path_factory.mktemp("fleet-many-registry")
    with running_registry(workdir, access_log=True) as registry:
        refs = push_fleet_images(registry, images)
        yield registry, images, refs


def two_workers(
    tmp_path: Path, broker: RedisServer, cache: RedisServer, results: Path
) -> list[Worker]:
    """Two real ``pinguard worker`` processes on the broker, sharing the Redis cache."""
    return [
        start_worker(
            tmp_path / f"w{i}",
            broker.url(),
            results,
            *("--cache", cache.url(), "--cache-unsigned", "--jobs", "1"),
            name=f"w{i}",
        )
        for i in range(2)
    ]


def _run(
    tmp_path: Path, refs: list[str], broker: str, results: Path, names: list[str]
) -> tuple[int, Any]:
    """``pinguard fleet run`` with a column per name; its exit code and JSON report."""
    out = tmp_path / "fleet.json"
    code = main(
        [
            *("fleet", "run", *refs, "--broker", broker, "--results", str(results)),
            *("--timeout", "600", "-f", "json", "-o", str(out)),
            *(a for n in names for a in ("--package", n)),
        ]
    )
    return code, json.loads(out.read_text())


def test_twenty_images_give_the_installed_matrix_and_a_warm_run_fetches_no_layer(
    tmp_path: Path,
    broker: RedisServer,
    cache_redis: RedisServer,
    built_fleet: tuple[RegistryServer, list[FleetImage], dict[str, str]],
) -> None:
    """Two workers audit 20 images; the matrix and each record's packages equal what pip
    installed; the first run fetches each distinct layer once, and a second run on the warm
    Redis cache fetches no layer blob at all: over both runs no layer blob is read twice."""
    registry, images, refs = built_fleet
    names = sorted({n for image in images for n in image.packages})
    sizes: dict[str, int] = {}
    for image in images:
        sizes.update(layer_sizes(registry, image.name))
    assert len(sizes) == 33  # the base, 2 torch steps, 10 extras steps, 20 apps
    results = tmp_path / "results"
    workers = two_workers(tmp_path, broker, cache_redis, results)
    by_name = {image.name: image for image in images}
    try:
        mark = registry.log_mark()
        code, doc = _run(tmp_path, sorted(refs.values()), broker.url(), results, names)
        first = [r for r in registry.requests(mark) if r.blob in sizes and r.method == "GET"]
        mark = registry.log_mark()
        stats = redis.Redis.from_url(cache_redis.url()).info("stats")
        code2, doc2 = _run(tmp_path, sorted(refs.values()), broker.url(), results, names)
        second = [r for r in registry.requests(mark) if r.blob in sizes and r.method == "GET"]
        after = redis.Redis.from_url(cache_redis.url()).info("stats")
    finally:
        for w in workers:
            w.stop()
    logs = "\n".join(w.text()[-2000:] for w in workers)
    assert code in (0, 1), logs
    assert doc["counts"]["images"] == COUNT
    assert doc["counts"]["error"] == 0, doc["images"]
    # the matrix: every package pip installed anywhere, per image exactly what it installed
    ref_to_name = {ref: name for name, ref in refs.items()}
    for row in doc["images"]:
        installed = by_name[ref_to_name[row["reference"]]].packages
        assert row["platform"] == "linux/amd64"
        for package, versions in row["packages"].items():
            want = [installed[package]] if package in installed else []
            assert versions == want, (row["reference"], package)
    assert doc["packages"] == names
    # each record's full package list for pip's site-packages, name and version
    store = ResultStore(results)
    records = store.all()
    assert len(records) == COUNT
    for record in records:
        got = {
            p.name: p.version for p in record.distributions if p.environment == BASE_SITE_PACKAGES
        }
        assert got == by_name[ref_to_name[record.reference]].packages, record.reference
    # the second run agrees byte for byte on the matrix and reads no layer from the registry
    assert code2 == code
    assert doc2["images"] == doc["images"]
    assert second == [], [(r.blob, r.status) for r in second]
    # the first run read every distinct layer once: the in-flight claims kept the two
    # workers from fetching a shared layer together
    assert Counter(r.blob for r in first) == Counter(set(sizes))
    assert all(r.status == 200 for r in first)
    # the warm run's layers came from Redis (no replay cache answers first in a worker): one
    # hit per layer of each image, 4 x 20, and no miss
    assert after["keyspace_hits"] - stats["keyspace_hits"] == 4 * COUNT
    assert after["keyspace_misses"] == stats["keyspace_misses"]
    # ... and every layer went to Redis, once per distinct layer
    assert len(redis.Redis.from_url(cache_redis.url()).keys(PREFIX + "*")) == len(sizes)


def _layer_gets(registry: RegistryServer, mark: int, digests: set[str]) -> Counter[str]:
    return Counter(
        r.blob for r in registry.requests(mark) if r.method == "GET" and r.blob in digests
    )


def test_two_workers_on_images_sharing_uncached_layers_fetch_each_once(
    tmp_path: Path,
    broker: RedisServer,
    cache_redis: RedisServer,
    built_fleet: tuple[RegistryServer, list[FleetImage], dict[str, str]],
) -> None:
    """fleet:00 and fleet:02 share the base and the torch step; two workers start on them
    together with an empty cache: whoever claims a shared layer analyses it, the other
    waits for its entry, so every layer blob is fetched exactly once (without the claims
    both workers read the 200 MB base at the same time)."""
    registry, _, refs = built_fleet
    pair = [refs["fleet:00"], refs["fleet:02"]]
    sizes = {**layer_sizes(registry, "fleet:00"), **layer_sizes(registry, "fleet:02")}
    assert len(sizes) == 6  # base + torch shared; extras and app of each
    results = tmp_path / "results"
    workers = two_workers(tmp_path, broker, cache_redis, results)
    try:
        mark = registry.log_mark()
        code, doc = _run(tmp_path, pair, broker.url(), results, ["torch"])
    finally:
        for w in workers:
            w.stop()
    assert code in (0, 1), "\n".join(w.text()[-2000:] for w in workers)
    assert doc["counts"]["error"] == 0
    assert _layer_gets(registry, mark, set(sizes)) == Counter(set(sizes))
    # both workers took part (one task each), so the two audits did overlap
    assert all(" succeeded in " in w.text() for w in workers)
    client = redis.Redis.from_url(cache_redis.url())
    assert client.keys(LOCK_PREFIX + "*") == []  # every claim dropped


def test_a_claim_whose_holder_died_lapses_and_the_worker_analyses_the_layer(
    tmp_path: Path,
    broker: RedisServer,
    cache_redis: RedisServer,
    built_fleet: tuple[RegistryServer, list[FleetImage], dict[str, str]],
) -> None:
    """A claim on the base layer left by a holder that is gone (nobody extends it): the
    worker analyses the rest of the image, waits for the claim to lapse (``--cache-lock-ttl
    4``), then takes it and analyses the base itself: the audit completes, the base is
    fetched once and cached, and nothing is said about waiting too long."""
    registry, _, refs = built_fleet
    sizes = layer_sizes(registry, "fleet:04")
    base = next(iter(sizes))  # the first layer in the manifest is the base
    client = redis.Redis.from_url(cache_redis.url())
    results = tmp_path / "results"
    worker = start_worker(
        tmp_path / "w",
        broker.url(),
        results,
        *("--cache", cache_redis.url(), "--cache-unsigned", "--jobs", "1"),
        *("--cache-lock-ttl", "4"),
    )
    try:
        # learn the entry name's key part from a first audit of another image
        _run(tmp_path, [refs["fleet:01"]], broker.url(), results, ["torch"])
        names = [k.decode() if isinstance(k, bytes) else k for k in client.keys(PREFIX + "*")]
        entry = next(k for k in names if base.replace(":", "-") in k)
        client.delete(entry)  # the base is uncached again
        client.set(entry.replace(PREFIX, LOCK_PREFIX), "dead-holder", px=4000)
        mark = registry.log_mark()
        started = time.monotonic()
        code, doc = _run(tmp_path, [refs["fleet:04"]], broker.url(), results, ["torch"])
        elapsed = time.monotonic() - started
    finally:
        worker.stop()
    assert code in (0, 1), worker.text()[-3000:]
    [row] = doc["images"]
    assert row["verdict"] in ("pass", "fail")
    assert not [n for n in row["notes"] if "layer cache" in n]
    assert elapsed >= 2.0  # it did wait for the claim to lapse
    assert _layer_gets(registry, mark, {base}) == Counter({base: 1})
    assert client.exists(entry) == 1
    assert client.keys(LOCK_PREFIX + "*") == []


def test_a_worker_killed_while_holding_claims_does_not_stall_the_fleet(
    tmp_path: Path,
    broker: RedisServer,
    cache_redis: RedisServer,
    built_fleet: tuple[RegistryServer, list[FleetImage], dict[str, str]],
) -> None:
    """A real worker claims fleet:06's four uncached layers and is killed with SIGKILL while
    its first layer download is held: the task is delivered again (late acks) to a second
    worker, which finds the dead worker's claims still there, waits for them to lapse
    (``--cache-lock-ttl 15``: nobody extends them any more), takes them and finishes the
    audit: one passing record, every layer cached, no claim left, no wait note."""
    registry, _, _ = built_fleet
    client = redis.Redis.from_url(cache_redis.url())
    layers = set(layer_sizes(registry, "fleet:06"))
    stalled: list[str] = []

    def stall_first_blob(path: str) -> bool:
        if stalled or path.rsplit("/", 1)[-1] not in layers:
            return False
        stalled.append(path)
        return True

    results = tmp_path / "results"
    flags = ["--cache", cache_redis.url(), "--cache-unsigned", "--jobs", "1"]
    flags += ["--cache-lock-ttl", "15"]
    flags += ["--visibility-timeout", "4"]
    with HTTPFront(registry.address, stall=stall_first_blob) as front:
        ref = f"docker://{front.address}/fleet:06"
        first = start_worker(tmp_path / "w1", broker.url(), results, *flags)
        second = None
        try:
            app, tasks = enqueue_until_stalled(broker.url(), ref, front, first)
            held = client.keys(LOCK_PREFIX + "*")
            assert len(held) == 4  # the worker claimed every layer it missed
            first.kill()
            second = start_worker(tmp_path / "w2", broker.url(), results, *flags, name="w2")
            assert all(client.pttl(k) > 0 for k in held)  # still there when w2 starts
            records = wait(app, tasks, ResultStore(results), timeout=180)
        finally:
            stop_all(first, second)
    assert second is not None
    [record] = records
    assert record.verdict in ("pass", "fail"), (record, second.text()[-3000:])
    assert record.error is None
    assert not [n for n in record.notes if "layer cache" in n]
    assert tasks[0].task_id in second.text()
    assert client.keys(LOCK_PREFIX + "*") == []
    assert len(client.keys(PREFIX + "*")) == 4
