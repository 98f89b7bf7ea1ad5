"""Multi-platform images for the tests: one scratch image per platform, joined in an index.

Each platform's image is ``FROM scratch`` plus one ``COPY`` per step of a site-packages tree
(installed from real wheels), built with ``buildah bud --platform`` (COPY needs no emulation,
so arm64 builds on amd64). ``buildah manifest create/add`` joins them into a manifest list,
which :func:`push_index` writes to an OCI layout or pushes to a registry with ``--all``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.infra.build import BuildError, build_image, install_tree

SITE = "/usr/local/lib/python3.11/site-packages"


def _buildah(*args: str, timeout: float = 300) -> str:
    proc = subprocess.run(
        ["buildah", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise BuildError(f"buildah {' '.join(args)} failed:\n{proc.stderr}")
    return proc.stdout


def build_index(workdir: Path, name: str, steps: Mapping[str, Sequence[Sequence[Path]]]) -> str:
    """Build one image per platform (``steps[platform]``: wheels per COPY step) and a
    manifest list ``name`` holding them; returns the list's name in containers-storage."""
    subprocess.run(["buildah", "manifest", "rm", name], capture_output=True, check=False)
    _buildah("manifest", "create", name)
    for platform, per_step in sorted(steps.items()):
        arch = platform.split("/")[1]
        context = workdir / f"context-{arch}"
        lines = ["FROM scratch"]
        for i, wheels in enumerate(per_step, start=1):
            install_tree(wheels, context / f"step{i}")
            lines.append(f"COPY step{i}/ {SITE}/")
        tag = f"{name}-{arch}"
        build_image(
            context, "\n".join(lines) + "\n", tag, extra_args=("--platform", platform)
        ).check()
        _buildah("manifest", "add", name, f"containers-storage:{tag}")
    return name


def push_index(name: str, destination: str) -> None:
    """``buildah manifest push --all NAME DEST`` (``oci:DIR:TAG`` or ``docker://HOST/R:T``)."""
    _buildah("manifest", "push", "--all", "--tls-verify=false", name, destination)


def remove_index(name: str, platforms: Sequence[str]) -> None:
    """Remove the manifest list ``name`` and the per-platform images :func:`build_index` made."""
    subprocess.run(["buildah", "manifest", "rm", name], capture_output=True, check=False)
    tags = [f"{name}-{p.split('/')[1]}" for p in platforms]
    subprocess.run(["buildah", "rmi", *tags], capture_output=True, check=False)
