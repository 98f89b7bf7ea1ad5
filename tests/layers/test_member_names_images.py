"""Member-name flags against real components: a registry, buildah, the scenario image.

A crafted layer pushed with ``skopeo`` to Debian's ``docker-registry`` is flagged the same
way when pulled over HTTP; an image buildah builds with a file name holding a backslash (as
Debian's systemd ships ``system-systemd\\x2dcryptsetup.slice``) is not flagged, and neither
is any layer of the scenario image (real ``RUN pip install`` steps on Debian).
"""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest

from pinguard.audit.loading import load_layers
from pinguard.audit.options import AuditOptions
from pinguard.sources import open_source
from pinguard.testing.images import ImageWriter
from tests.infra.build import build_image, remove_image
from tests.infra.cli import cli
from tests.infra.registry import RegistryServer
from tests.infra.tools import require_root, require_tool

pytestmark = pytest.mark.integration

SITE = "usr/local/lib/python3.11/site-packages"
SLICE = "usr/lib/systemd/system/system-systemd\\x2dcryptsetup.slice"


def _metadata(name: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n\n".encode()


def test_a_crafted_layer_pulled_from_a_registry_is_flagged(
    tmp_path: Path, scenario_registry: RegistryServer
) -> None:
    """'..' and a repeated path, pushed by skopeo and read back over the registry API: exit 1
    with both named; the same with --allow-incomplete passes."""
    name = f"../{SITE}/x-1.0.dist-info/METADATA"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member, data in [(name, _metadata("x")), ("etc/motd", b"a"), ("etc/motd", b"b")]:
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    writer = ImageWriter(tmp_path / "layout")
    desc, diff_id = writer.layer(buf.getvalue())
    image = writer.image([(desc, diff_id)], [{"created_by": "COPY crafted /"}])
    index, _ = writer.index([image], tag="t")
    writer.write_layout(index)
    repo = f"pinguard-test/names-{uuid.uuid4().hex[:8]}:t"
    scenario_registry.push(f"oci:{tmp_path / 'layout'}:t", repo)
    ref = f"docker://{scenario_registry.ref(repo)}"
    code, out = cli("audit", ref, "--no-cache", "--format", "json")
    assert code == 1, out
    layer = f"layer {desc.digest} (step 1)"
    assert json.loads(out)["incomplete"] == [
        {
            "what": f"{layer}: member {name!r}",
            "why": f"name has a '..' component; read as '/{SITE}/x-1.0.dist-info/METADATA' "
            "(containerd clamps it inside the root; moby refuses a layer whose name climbs out)",
        },
        {
            "what": f"{layer}: path '/etc/motd'",
            "why": "2 members of the layer have this path; a runtime keeps the last",
        },
    ]
    assert cli("audit", ref, "--no-cache", "--allow-incomplete")[0] == 0


def test_buildah_backslash_file_name_is_not_flagged(tmp_path: Path) -> None:
    """buildah stores a backslash file name as one literal name; pinguard reads it so too."""
    require_root()
    for tool in ("buildah", "skopeo"):
        require_tool(tool)
    context = tmp_path / "context"
    for rel, data in [
        (SLICE, b"[Unit]\nDescription=Cryptsetup Units Slice\n"),
        (f"{SITE}/s-1.0.dist-info/METADATA", _metadata("s")),
    ]:
        (context / rel).parent.mkdir(parents=True, exist_ok=True)
        (context / rel).write_bytes(data)
    tag = f"localhost/pinguard-test/names:{uuid.uuid4().hex[:12]}"
    try:
        build_image(context, "FROM scratch\nCOPY . /\n", tag).check()
        layout = tmp_path / "layout"
        subprocess.run(
            ["skopeo", "copy", "-q", f"containers-storage:{tag}", f"oci:{layout}:t"],
            check=True,
            capture_output=True,
        )
    finally:
        remove_image(tag)
    # the layer holds the backslash name (read with tarfile, not pinguard)
    manifest_digest = json.loads((layout / "index.json").read_text())["manifests"][0]["digest"]
    blobs = layout / "blobs" / "sha256"
    manifest = json.loads((blobs / manifest_digest.removeprefix("sha256:")).read_bytes())
    (layer,) = manifest["layers"]
    data = (blobs / layer["digest"].removeprefix("sha256:")).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert SLICE in [m.name.lstrip("./") for m in tar]
    code, out = cli("audit", f"oci:{layout}:t", "--no-cache", "--format", "json")
    assert code == 0, out
    report = json.loads(out)
    assert report["incomplete"] == []
    assert [p["name"] for e in report["environments"] for p in e["packages"]] == ["s"]


def test_scenario_image_layers_have_no_flags(bad_image_oci: str) -> None:
    """Every layer of the scenario image (Debian base, pip installs) walks without a flag."""
    options = AuditOptions()
    source = open_source(bad_image_oci, options.source)
    with source:
        layers = source.resolve().layers
        analyses = load_layers(source, layers, options)
    assert len(analyses) >= 5
    assert sum(a.members for a in analyses.values()) > 5000
    assert {d: a.name_flags for d, a in analyses.items() if a.name_flags} == {}
