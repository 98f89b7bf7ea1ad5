"""Small builders of audit results from models.py types, for the policy and report tests, and
of the files a layer installs (``installed_dist``), for the CLI tests' real images."""

from __future__ import annotations

from collections.abc import Iterable

from packaging.utils import canonicalize_name

from pinguard.catalog.python import with_environments
from pinguard.models import (
    AuditResult,
    Cause,
    Change,
    ChangeKind,
    Distribution,
    Environment,
    ImageInfo,
    Incomplete,
    Platform,
    Snapshot,
    Step,
    Unmet,
)

ENV = "/opt/venv/lib/python3.12/site-packages"
SYSTEM = "/usr/lib/python3/dist-packages"
ARM64 = Platform("linux", "arm64")


def dist(
    name: str,
    version: str,
    *,
    env: str = ENV,
    record: Iterable[tuple[str, str]] = (),
    suffix: str = "",
) -> Distribution:
    """A distribution whose RECORD paths are given relative to ``env``."""
    canon = canonicalize_name(name)
    meta = f"{env}/{canon.replace('-', '_')}-{version}{suffix}.dist-info"
    return Distribution(
        name=canon,
        raw_version=version,
        metadata_path=meta,
        record=tuple((f"{env}/{p}", h) for p, h in record),
    )


def environment(*dists: Distribution, path: str = ENV, python: str = "3.12.7") -> Environment:
    return Environment(path=path, python=python, distributions=tuple(dists))


def change(
    name: str,
    kind: ChangeKind,
    before: str | None,
    after: str | None,
    *,
    env: str = ENV,
    causes: Iterable[Cause] = (),
) -> Change:
    return Change(env, canonicalize_name(name), kind, before, after, tuple(causes))


def cause(package: str, version: str, requirement: str) -> Cause:
    return Cause(canonicalize_name(package), version, requirement)


def unmet(
    package: str, version: str, requirement: str, installed: str | None, *, env: str = ENV
) -> Unmet:
    return Unmet(env, canonicalize_name(package), version, requirement, installed)


def step(index: int, created_by: str = "", *changes: Change, unmet: Iterable[Unmet] = ()) -> Step:
    return Step(
        index=index,
        created_by=created_by or f"/bin/sh -c step {index}",
        layer_digest=f"sha256:{index:064x}",
        changes=tuple(changes),
        unmet=tuple(unmet),
    )


def result(
    *envs: Environment,
    steps: Iterable[Step] = (),
    platform: Platform | None = ARM64,
    incomplete: Iterable[Incomplete] = (),
    reference: str = "example/glm:latest",
) -> AuditResult:
    final = with_environments(Snapshot(), envs)  # with their generic records, as an audit
    steps = tuple(steps)
    return AuditResult(
        image=ImageInfo(reference, "sha256:" + "ab" * 32, platform, "oci-archive"),
        steps=steps,
        final=final,
        snapshots=tuple(final for _ in steps),
        incomplete=tuple(incomplete),
    )


LAYER_SITE = "usr/local/lib/python3.12/site-packages"


def installed_dist(version: str, name: str = "foo") -> dict[str, bytes]:
    """The files an install of ``name`` ``version`` leaves in a layer's site-packages (its
    METADATA, RECORD and module), as ``{path: bytes}`` for ``build_oci_layout``."""
    info = f"{LAYER_SITE}/{name}-{version}.dist-info"
    return {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/RECORD": f"{name}/__init__.py,,\n{info}/METADATA,,\n".encode(),
        f"{LAYER_SITE}/{name}/__init__.py": f"VERSION = {version!r}\n".encode(),
    }
