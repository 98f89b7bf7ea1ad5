"""Fleet fixtures: a broker redis-server (``aof_broker``: one persisting every write, to kill),
a cache redis-server, a registry of images sharing a base layer, and a result store; workers
are started by each test (``tests/infra/fleet.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pinguard.testing.demo import demo_layers
from tests.infra.fleet import fleet_layers, push_fleet
from tests.infra.redis import AOFRedis, RedisServer, running_redis
from tests.infra.registry import RegistryServer, free_port, running_registry

IMAGES = {
    "team/serve:a": fleet_layers("2.11.0+cu130", "2.30.3"),
    "team/serve:b": fleet_layers("2.12.1+cu130", "2.29.7"),
    "team/train:1": fleet_layers("2.11.0+cu130", "2.30.3"),
    "team/story:bad": demo_layers(),  # the silent NCCL downgrade: fails the default policy
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path / "broker") as r:
        yield r


@pytest.fixture
def aof_broker(tmp_path: Path) -> Iterator[AOFRedis]:
    """A broker that persists every write to its append-only file and can be SIGKILLed."""
    server = AOFRedis(port=free_port(), workdir=tmp_path / "broker", password=None)
    server.workdir.mkdir()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def cache_redis(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path / "cache") as r:
        yield r


@pytest.fixture(scope="module")
def fleet_registry(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RegistryServer, dict[str, str]]]:
    with running_registry(tmp_path_factory.mktemp("fleet-registry")) as registry:
        refs = push_fleet(registry, tmp_path_factory.mktemp("fleet-images"), IMAGES)
        yield registry, refs
