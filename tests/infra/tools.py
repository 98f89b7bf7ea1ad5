"""Finding the external tools the tests need; under CI=true a missing tool fails the run."""

from __future__ import annotations

import os
import shutil

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require_tool(name: str) -> str:
    """Return the path of ``name``; fail under CI=true, skip elsewhere, when it is missing."""
    path = shutil.which(name)
    if path is None:
        message = f"required tool {name!r} is not on PATH (install it: see scripts/test-setup.sh)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)  # local runs only; CI=true never skips
    return path


def require_root() -> None:
    if os.geteuid() != 0:
        message = "these tests run buildah/podman as root"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
