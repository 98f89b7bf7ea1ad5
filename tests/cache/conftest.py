"""Fixtures of the layer tests: the demo image as an OCI archive, and fleet keys."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pinguard.testing.demo import build_demo
from tests.infra.tools import require_tool


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("demo") / "demo.tar"
    build_demo(path, tag="t")
    return f"oci-archive:{path}:t"


@pytest.fixture(scope="module")
def fleet_keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two P-256 pairs made by openssl: the fleet's and a stranger's."""
    d = tmp_path_factory.mktemp("fleet-keys")
    openssl = require_tool("openssl")
    out = {}
    for name in ("fleet", "stranger"):
        private, public = d / f"{name}.pem", d / f"{name}.pub"
        genpkey = ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
        subprocess.run(
            [openssl, *genpkey, "-out", str(private)],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [openssl, "pkey", "-in", str(private), "-pubout", "-out", str(public)],
            check=True,
            capture_output=True,
        )
        out[name], out[f"{name}.pub"] = private, public
    return out
