"""Fixtures of the layer tests: the demo image as an OCI archive, and fleet keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from pinguard.testing.demo import build_demo
from tests.infra.keys import ec_key_pair


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("demo") / "demo.tar"
    build_demo(path, tag="t")
    return f"oci-archive:{path}:t"


@pytest.fixture(scope="module")
def fleet_keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two P-256 pairs made by openssl: the fleet's and a stranger's."""
    d = tmp_path_factory.mktemp("fleet-keys")
    out = {}
    for name in ("fleet", "stranger"):
        out[name], out[f"{name}.pub"] = ec_key_pair(d, name)
    return out
