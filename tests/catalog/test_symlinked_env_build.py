"""A real build whose site-packages is a symlink: buildah, Debian's pip, a local index.

The Containerfile replaces pip's ``/usr/local/lib/python3.11/dist-packages`` with a relative
symlink to ``/opt/pkgs`` and then ``pip install``s a wheel, so the layer holds only
``/opt/pkgs/...``; it also makes a venv (``python3 -m venv`` creates ``lib64 -> lib``) and
installs another wheel into it. A second build turns the link back into a directory
(``rm`` the link, ``mkdir``, pip install): the layer holds an opaque marker there, the link
goes and the new directory is the environment. Expected names, versions and paths are
written by hand.
"""

from __future__ import annotations

import json
import tarfile
import uuid
from pathlib import Path

import pytest

from pinguard.cli import main
from pinguard.testing.images import ImageWriter, layer_tar
from tests.conftest import skopeo_copy
from tests.infra.build import build_image, mounted_image, remove_image
from tests.infra.index import serve_index
from tests.infra.tools import require_root
from tests.infra.wheels import WheelSpec, build_wheel

pytestmark = pytest.mark.integration

TAG = "localhost/pinguard-test/symlinked-site:latest"
PIP_DIR = "/usr/local/lib/python3.11/dist-packages"
VENV_SITE = "/opt/venv/lib/python3.11/site-packages"


def _dockerfile(base: str) -> str:
    return (
        f"FROM {base}\n"
        "ARG INDEX_URL\n"
        f"RUN mkdir -p /opt/pkgs && rm -rf {PIP_DIR} && ln -s ../../../../opt/pkgs {PIP_DIR}\n"
        "RUN pip install --index-url $INDEX_URL symdemo==1.2.3\n"
        "RUN python3 -m venv /opt/venv && test -L /opt/venv/lib64 && "
        "/opt/venv/bin/pip install --index-url $INDEX_URL venvdemo==0.4.0\n"
    )


def _build_layout(work: Path, dockerfile: str, tag: str, wheels: tuple[WheelSpec, ...]) -> Path:
    """Build ``dockerfile`` with buildah against a local index of ``wheels``; the image
    exported as an uncompressed OCI layout (tag ``latest``)."""
    for spec in wheels:
        build_wheel(spec, work / "wheels")
    with serve_index(work / "wheels") as index:
        build_image(work / "context", dockerfile, tag, {"INDEX_URL": index.url}).check()
    layout = work / "oci"
    try:
        skopeo_copy(
            f"containers-storage:{tag}",
            f"oci:{layout}:latest",
            "--dest-oci-accept-uncompressed-layers",
        )
    finally:
        remove_image(tag)
    return layout


@pytest.fixture(scope="module")
def image_ref(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The built image, exported as an OCI layout; ``oci:DIR:latest``."""
    layout = _build_layout(
        tmp_path_factory.mktemp("symlinked-site"),
        _dockerfile(base_image),
        TAG,
        (WheelSpec("symdemo", "1.2.3"), WheelSpec("venvdemo", "0.4.0")),
    )
    return f"oci:{layout}:latest"


def _layer_members(ref: str) -> list[set[str]]:
    """Member names of each layer of the (uncompressed) OCI layout, read with tarfile."""
    layout = Path(ref.removeprefix("oci:").rsplit(":", 1)[0])
    blobs = layout / "blobs" / "sha256"
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((blobs / index["manifests"][0]["digest"][7:]).read_text())
    out = []
    for layer in manifest["layers"]:
        with tarfile.open(blobs / layer["digest"][7:]) as tar:
            out.append({m.name.removeprefix("./") for m in tar.getmembers()})
    return out


def test_the_build_writes_through_the_link(image_ref: str) -> None:
    """The premise, checked with tarfile: pip's layer names only /opt/pkgs/..., not the
    dist-packages path; an earlier layer holds the link."""
    layers = _layer_members(image_ref)
    meta = "opt/pkgs/symdemo-1.2.3.dist-info/METADATA"
    (pip_layer,) = [names for names in layers if meta in names]
    assert not any("dist-packages/symdemo" in name for name in pip_layer)
    assert any(PIP_DIR.lstrip("/") in names for names in layers[: layers.index(pip_layer)])


def test_pip_install_through_a_symlinked_site_packages(image_ref: str, tmp_path: Path) -> None:
    """symdemo is found in the environment the link names, at the version pip installed;
    the venv is one environment despite lib64; nothing is incomplete and RECORDs verify."""
    out = tmp_path / "audit.json"
    code = main(
        ["audit", image_ref, "--no-cache", "--verify-records", "--format", "json", "-o", str(out)]
    )
    doc = json.loads(out.read_text())
    envs = {e["path"]: e for e in doc["environments"]}
    assert envs[PIP_DIR]["real_path"] == "/opt/pkgs"
    assert envs[PIP_DIR]["python"] == "3.11"
    assert [(p["name"], p["version"]) for p in envs[PIP_DIR]["packages"]] == [("symdemo", "1.2.3")]
    assert "real_path" not in envs[VENV_SITE]
    assert ("venvdemo", "0.4.0") in [(p["name"], p["version"]) for p in envs[VENV_SITE]["packages"]]
    assert [p for p in envs if p.startswith("/opt/")] == [VENV_SITE]
    assert doc["incomplete"] == []
    assert [f for f in doc["findings"] if f["rule"] == "record-mismatch"] == []
    added = [
        (c["name"], c["environment"])
        for step in doc["steps"]
        for c in step["changes"]
        if c["kind"] == "added" and c["name"] in {"symdemo", "venvdemo"}
    ]
    assert added == [("symdemo", PIP_DIR), ("venvdemo", VENV_SITE)]
    assert code == 0


# --- the link turned back into a directory -----------------------------------------------

RELINK_TAG = "localhost/pinguard-test/relinked-site:latest"


def _relink_dockerfile(base: str) -> str:
    return (
        f"FROM {base}\n"
        "ARG INDEX_URL\n"
        f"RUN mkdir -p /opt/pkgs && rm -rf {PIP_DIR} && ln -s /opt/pkgs {PIP_DIR} && "
        "pip install --index-url $INDEX_URL symdemo==1.2.3\n"
        f"RUN rm {PIP_DIR} && mkdir {PIP_DIR} && "
        "pip install --index-url $INDEX_URL dirdemo==2.0.0\n"
    )


@pytest.fixture(scope="module")
def relinked(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Step 1 links dist-packages to /opt/pkgs and pip installs symdemo through it; step 2
    runs ``rm`` on the link, ``mkdir`` in its place and pip installs dirdemo."""
    return _build_layout(
        tmp_path_factory.mktemp("relinked-site"),
        _relink_dockerfile(base_image),
        RELINK_TAG,
        (WheelSpec("symdemo", "1.2.3"), WheelSpec("dirdemo", "2.0.0")),
    )


def _last_layer_members(layout: Path) -> dict[str, str]:
    blobs = layout / "blobs" / "sha256"
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((blobs / index["manifests"][0]["digest"][7:]).read_text())
    with tarfile.open(blobs / manifest["layers"][-1]["digest"][7:]) as tar:
        return {m.name.removeprefix("./").rstrip("/"): m.type.decode() for m in tar.getmembers()}


def test_the_step_layer_replaces_the_link_with_a_directory(relinked: Path) -> None:
    """The premise, read with tarfile: the step's layer holds the directory, its opaque
    marker and dirdemo's metadata under the old link's path."""
    members = _last_layer_members(relinked)
    assert members[PIP_DIR.lstrip("/") + "/.wh..wh..opq"] == tarfile.REGTYPE.decode()
    assert members[PIP_DIR.lstrip("/")] == tarfile.DIRTYPE.decode()
    assert PIP_DIR.lstrip("/") + "/dirdemo-2.0.0.dist-info/METADATA" in members


def test_a_directory_that_replaced_the_link_is_the_environment(
    relinked: Path, tmp_path: Path
) -> None:
    """dirdemo is in the new directory (no real_path: no link leads there); symdemo, left in
    /opt/pkgs, is removed from the environment and reported as reached by nothing."""
    out = tmp_path / "audit.json"
    code = main(
        ["audit", f"oci:{relinked}:latest", "--no-cache", "--format", "json", "-o", str(out)]
    )
    doc = json.loads(out.read_text())
    envs = {e["path"]: e for e in doc["environments"]}
    assert "real_path" not in envs[PIP_DIR]
    assert [(p["name"], p["version"]) for p in envs[PIP_DIR]["packages"]] == [("dirdemo", "2.0.0")]
    assert [i["what"] for i in doc["incomplete"]] == ["/opt/pkgs/symdemo-1.2.3.dist-info"]
    last = doc["steps"][-1]["changes"]
    assert sorted((c["kind"], c["name"]) for c in last if c["environment"] == PIP_DIR) == [
        ("added", "dirdemo"),
        ("removed", "symdemo"),
    ]
    assert code == 1  # symdemo's metadata is left where nothing reaches it


# --- an opaque marker inside a linked directory, on a real overlay mount -----------------------

OPQ_VENV = "opt/venv/lib/python3.11/site-packages"


def _meta(name: str, version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n".encode()


def test_overlayfs_keeps_the_target_of_a_link_an_opaque_marker_sits_in(tmp_path: Path) -> None:
    """Issue 22's layer, ``opt/link -> /opt/venv/...site-packages`` below and then only
    ``opt/link/.wh..wh..opq`` and a new dist-info, stored in containers-storage (its overlay
    driver applies each layer into an empty directory) and mounted with overlayfs: the
    link is now a directory holding the new files and the venv keeps its distribution,
    where containerd's applier empties the venv instead. pinguard follows containerd and
    reports the audit incomplete, so neither reading passes the gate unnoticed."""
    require_root()
    writer = ImageWriter(tmp_path / "layout")
    layers = [
        ({f"{OPQ_VENV}/old-1.0.dist-info/METADATA": _meta("old", "1.0")}, {}),
        ({}, {"opt/link": f"/{OPQ_VENV}"}),
        (
            {
                "opt/link/.wh..wh..opq": b"",
                "opt/link/new-2.0.dist-info/METADATA": _meta("new", "2.0"),
            },
            {},
        ),
    ]
    descs = [writer.layer(layer_tar(files, symlinks=links)) for files, links in layers]
    image = writer.image(descs, [{"created_by": f"RUN step {i}"} for i in range(len(descs))])
    index, _ = writer.index([image], tag="t")
    writer.write_layout(index)
    layout = f"oci:{tmp_path / 'layout'}:t"
    tag = f"localhost/pinguard-test/opaque-link:{uuid.uuid4().hex[:12]}"
    skopeo_copy(layout, f"containers-storage:{tag}")
    try:
        with mounted_image(tag) as root:
            link = root / "opt/link"
            assert not link.is_symlink()
            assert link.is_dir()
            assert sorted(p.name for p in link.iterdir()) == ["new-2.0.dist-info"]
            assert (root / OPQ_VENV / "old-1.0.dist-info" / "METADATA").read_bytes() == _meta(
                "old", "1.0"
            )
    finally:
        remove_image(tag)
    code = main(["audit", layout, "--no-cache", "--format", "json"])
    assert code == 1
