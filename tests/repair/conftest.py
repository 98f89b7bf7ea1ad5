"""The story's two wheel indexes, built in tmp_path and served on 127.0.0.1, plus model helpers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from pinguard.models import (
    AuditResult,
    Change,
    ChangeKind,
    Distribution,
    Environment,
    ImageInfo,
    Platform,
    Snapshot,
    Step,
)
from tests.infra.index import IndexServer, serve_index
from tests.infra.wheels import WheelSpec, build_wheels

MAIN = (
    WheelSpec("nvidia-nccl-cu13", "2.30.3"),
    WheelSpec("nvidia-nccl-cu13", "2.29.7"),
    WheelSpec("nvidia-cutlass-dsl", "4.3.0"),
    WheelSpec("nvidia-cutlass-dsl", "4.2.1"),
    WheelSpec("torch", "2.11.0+cu130", ("nvidia-nccl-cu13>=2.30,<2.31", "nvidia-cutlass-dsl>=4.2")),
    WheelSpec("torch", "2.12.1", ("nvidia-nccl-cu13==2.29.7", "nvidia-cutlass-dsl>=4.2,<4.3")),
)
NIGHTLY = (
    WheelSpec("flashinfer-python", "0.6.18.dev20261120", ("torch>=2.12",)),
    WheelSpec(
        "flashinfer-python", "0.6.18.dev20261125", ("torch>=2.11", "nvidia-cutlass-dsl>=4.2")
    ),
)
ENV = "/usr/local/lib/python3.12/dist-packages"
PLATFORM = Platform("linux", "amd64")
BAD_STEP = "/bin/sh -c pip install --pre flashinfer-python==0.6.18.dev20261120"


@dataclass(frozen=True)
class Indexes:
    main: IndexServer
    nightly: IndexServer


@pytest.fixture
def indexes(tmp_path: Path) -> Iterator[Indexes]:
    """A main index (nccl, cutlass-dsl, torch) and a nightly index (flashinfer dev builds)."""
    build_wheels(MAIN, tmp_path / "main")
    build_wheels(NIGHTLY, tmp_path / "nightly")
    with serve_index(tmp_path / "main") as main, serve_index(tmp_path / "nightly") as nightly:
        yield Indexes(main, nightly)


def dist(name: str, version: str, *requires: str) -> Distribution:
    stem = canonicalize_name(name).replace("-", "_")
    return Distribution(
        name=canonicalize_name(name),
        raw_version=version,
        metadata_path=f"{ENV}/{stem}-{version}.dist-info",
        requires_dist=requires,
        installer="pip",
        fingerprint=f"{name}=={version}",
    )


GOOD = Environment(
    ENV,
    "3.12",
    (
        dist("nvidia-cutlass-dsl", "4.3.0"),
        dist("nvidia-nccl-cu13", "2.30.3"),
        dist("torch", "2.11.0+cu130", "nvidia-nccl-cu13>=2.30,<2.31", "nvidia-cutlass-dsl>=4.2"),
    ),
)
BAD = Environment(
    ENV,
    "3.12",
    (
        dist("flashinfer-python", "0.6.18.dev20261120", "torch>=2.12"),
        dist("nvidia-cutlass-dsl", "4.2.1"),
        dist("nvidia-nccl-cu13", "2.29.7"),
        dist("torch", "2.12.1", "nvidia-nccl-cu13==2.29.7", "nvidia-cutlass-dsl>=4.2,<4.3"),
    ),
)


def bad_result() -> AuditResult:
    """A three-step image: base, the good torch step, the nightly step that downgrades NCCL."""
    changes = (
        Change(
            ENV, canonicalize_name("nvidia-nccl-cu13"), ChangeKind.DOWNGRADED, "2.30.3", "2.29.7"
        ),
        Change(
            ENV, canonicalize_name("nvidia-cutlass-dsl"), ChangeKind.DOWNGRADED, "4.3.0", "4.2.1"
        ),
    )
    steps = (
        Step(1, "/bin/sh -c #(nop) ADD file:abc in /", "sha256:1"),
        Step(2, "/bin/sh -c pip install torch==2.11.0+cu130", "sha256:2"),
        Step(3, BAD_STEP, "sha256:3", changes=changes),
    )
    snaps = (Snapshot((Environment(ENV, "3.12"),)), Snapshot((GOOD,)), Snapshot((BAD,)))
    return AuditResult(
        image=ImageInfo("oci-archive:bad.tar", "sha256:" + "ab" * 32, PLATFORM, "oci-archive"),
        steps=steps,
        final=snaps[-1],
        snapshots=snaps,
    )
