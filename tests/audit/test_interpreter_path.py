"""Debian's python3 imports from /usr/local and from apt's directory: unmet requirements as
``pip check`` says them in the real image.

pip as root writes ``/usr/local/lib/python3.11/dist-packages`` and leaves alone a requirement
that apt's ``/usr/lib/python3/dist-packages`` meets (the real torch 2.11.0 wheel requires
``setuptools<82``; Debian 12 ships setuptools 66.1.1 there, so pip installs none). Judging
each directory alone called that requirement unmet and failed the in-build guard on the real
torch step. Here a real buildah build does the same with small wheels, and the image's own
``pip check`` is the oracle.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator

import pytest

from pinguard.audit.pipeline import audit_image
from pinguard.models import AuditResult
from tests.conftest import skopeo_copy
from tests.infra.build import build_image, remove_image
from tests.infra.index import serve_index
from tests.infra.tools import require_tool
from tests.infra.wheels import WheelSpec, build_wheels

pytestmark = pytest.mark.integration

TAG = "localhost/pinguard-test/interpreter-path:latest"
LOCAL = "/usr/local/lib/python3.11/dist-packages"


@pytest.fixture(scope="module")
def image(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("interp")
    build_wheels(
        [
            # met by apt's setuptools 66.1.1 and wheel 0.38.4: pip installs nothing more
            WheelSpec("needs-apt", "1.0", requires_dist=("setuptools<82", "wheel")),
            # unmet whatever directory: installed with --no-deps
            WheelSpec("needs-new", "1.0", requires_dist=("setuptools>=200",)),
        ],
        work / "wheels",
    )
    dockerfile = (
        f"FROM {base_image}\nARG INDEX_URL\n"
        "RUN pip install --index-url $INDEX_URL needs-apt\n"
        "RUN pip install --no-deps --index-url $INDEX_URL needs-new\n"
    )
    with serve_index(work / "wheels") as index:
        build_image(work / "ctx", dockerfile, TAG, {"INDEX_URL": index.url}).check()
    yield TAG
    remove_image(TAG)


@pytest.fixture(scope="module")
def audited(image: str, tmp_path_factory: pytest.TempPathFactory) -> AuditResult:
    layout = tmp_path_factory.mktemp("interp-oci") / "oci"
    skopeo_copy(f"containers-storage:{image}", f"oci:{layout}:t")
    return audit_image(f"oci:{layout}:t")


def _pip_check(image: str) -> set[tuple[str, str]]:
    """``pip check`` in a container of the image: {(requirer, required name)}."""
    buildah = require_tool("buildah")
    container = subprocess.run(
        [buildah, "from", "--pull=never", image], check=True, capture_output=True, text=True
    ).stdout.split()[-1]
    try:
        done = subprocess.run(
            [buildah, "run", "--isolation", "chroot", container, "--", "pip", "check"],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        subprocess.run([buildah, "rm", container], capture_output=True, check=False)
    found = re.findall(r"^(\S+) \S+ has requirement (\w[\w.-]*)", done.stdout, re.MULTILINE)
    return {(a.lower(), b.lower()) for a, b in found}


def test_unmet_requirements_are_what_pip_check_says(image: str, audited: AuditResult) -> None:
    assert _pip_check(image) == {("needs-new", "setuptools")}
    unmet = [
        (s.index, u.package, u.requirement, u.installed) for s in audited.steps for u in s.unmet
    ]
    assert unmet == [(len(audited.steps), "needs-new", "setuptools>=200", "66.1.1")]
    assert audited.final.environment(LOCAL) is not None
