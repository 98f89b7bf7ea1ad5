"""Fixtures for the source tests: an isolated docker config and real registries with images.

``docker_config`` points ``$DOCKER_CONFIG`` at an empty temp directory for every test here
(so a developer's own ``~/.docker`` never leaks in) and returns a writer for config.json.
The registry fixtures are session-scoped ``docker-registry`` processes from
``tests.infra.registry``, each holding the same small images pushed with skopeo.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.infra.registry import Layout, RegistryServer, build_oci_layout, start_registry

MULTI_PLATFORMS = ("linux/amd64", "linux/arm64/v8")


@dataclass(frozen=True)
class Images:
    """The layouts pushed into every registry fixture, by repository."""

    single: Layout  # pushed as app/single:v1 (OCI manifest) and app/v2s2:v1 (Docker v2)
    multi: Layout  # pushed as app/multi:v1 (OCI index) and app/multi-v2s2:v1 (manifest list)


@pytest.fixture(scope="session")
def images(tmp_path_factory: pytest.TempPathFactory) -> Images:
    root = tmp_path_factory.mktemp("layouts")
    single = build_oci_layout(
        root / "single",
        layers=[{"etc/one": b"first layer\n"}, {"etc/two": b"second layer\n" * 1000}],
    )
    multi = build_oci_layout(
        root / "multi",
        platforms=MULTI_PLATFORMS,
        layers=lambda plat: [{"etc/platform": plat.encode()}],
    )
    return Images(single=single, multi=multi)


def _push_all(registry: RegistryServer, images: Images) -> None:
    registry.push(images.single.source, "app/single:v1")
    registry.push(images.single.source, "app/v2s2:v1", format="v2s2")
    registry.push(images.multi.source, "app/multi:v1", all_platforms=True)
    registry.push(images.multi.source, "app/multi-v2s2:v1", all_platforms=True, format="v2s2")


def _registry(
    factory: pytest.TempPathFactory, images: Images, **kwargs: Any
) -> Iterator[RegistryServer]:
    server = start_registry(factory.mktemp("registry"), **kwargs)
    try:
        _push_all(server, images)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory, images: Images) -> Iterator[RegistryServer]:
    yield from _registry(tmp_path_factory, images)


@pytest.fixture(scope="session")
def basic_registry(
    tmp_path_factory: pytest.TempPathFactory, images: Images
) -> Iterator[RegistryServer]:
    yield from _registry(tmp_path_factory, images, auth="htpasswd")


@pytest.fixture(scope="session")
def token_registry(
    tmp_path_factory: pytest.TempPathFactory, images: Images
) -> Iterator[RegistryServer]:
    yield from _registry(tmp_path_factory, images, auth="token", refresh_token="refresh-me-42")


ConfigWriter = Callable[[dict[str, Any]], Path]


@pytest.fixture(autouse=True)
def docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ConfigWriter:
    """Point $DOCKER_CONFIG at an empty temp dir; the returned function writes config.json."""
    directory = tmp_path / "docker-config"
    directory.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(directory))

    def write(config: dict[str, Any]) -> Path:
        path = directory / "config.json"
        path.write_text(json.dumps(config))
        return path

    return write
