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
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from pinguard.cli import main
from pinguard.fleet.records import ResultStore
from pinguard.layers.rediscache import PREFIX
from tests.infra.build import BASE_SITE_PACKAGES
from tests.infra.fleet import start_worker
from tests.infra.fleetimages import (
    FleetImage,
    ensure_fleet_images,
    layer_sizes,
    push_fleet_images,
)
from tests.infra.redis import RedisServer
from tests.infra.registry import RegistryServer, running_registry
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
    installed; a second run on the warm Redis cache fetches no layer blob at all, so over both
    runs no layer blob is read twice."""
    registry, images, refs = built_fleet
    names = sorted({n for image in images for n in image.packages})
    sizes: dict[str, int] = {}
    for image in images:
        sizes.update(layer_sizes(registry, image.name))
    assert len(sizes) == 33  # the base, 2 torch steps, 10 extras steps, 20 apps
    results = tmp_path / "results"
    workers = [
        start_worker(
            tmp_path / f"w{i}",
            broker.url(),
            results,
            *("--cache", cache_redis.url(), "--jobs", "1"),
            name=f"w{i}",
        )
        for i in range(2)
    ]
    by_name = {image.name: image for image in images}
    try:
        mark = registry.log_mark()
        code, doc = _run(tmp_path, sorted(refs.values()), broker.url(), results, names)
        first = [r for r in registry.requests(mark) if r.blob in sizes and r.method == "GET"]
        mark = registry.log_mark()
        code2, doc2 = _run(tmp_path, sorted(refs.values()), broker.url(), results, names)
        second = [r for r in registry.requests(mark) if r.blob in sizes and r.method == "GET"]
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
        got = {p.name: p.version for p in record.packages if p.environment == BASE_SITE_PACKAGES}
        assert got == by_name[ref_to_name[record.reference]].packages, record.reference
    # the second run agrees byte for byte on the matrix and reads no layer from the registry
    assert code2 == code
    assert doc2["images"] == doc["images"]
    assert second == [], [(r.blob, r.status) for r in second]
    fetched = Counter(r.blob for r in first)
    assert set(fetched) == set(sizes)  # the first run did read every distinct layer
    assert all(r.status == 200 for r in first)
    # ... and every layer went to Redis, once per distinct layer
    assert len(redis.Redis.from_url(cache_redis.url()).keys(PREFIX + "*")) == len(sizes)
