"""zstd:chunked layers written by the real ``skopeo``, and what pinguard accepts of them.

skopeo 1.9 (containers/storage's chunked compressor) drops the zero blocks after the tar's
end-of-archive marker from the zstd stream: a tarfile-made layer loses its record padding
(the stream stops after the two end blocks), a Go-style tar (members, then exactly 1024 zero
bytes) loses nothing. The tests
check that loss first, against the real blobs, so they fail if skopeo stops doing it; then
that the audit reads the image (from the OCI layout and from a real registry), and that the
zero-block allowance does not reach a plain zstd blob, a diff_id that needs a non-zero byte,
or padding beyond one tar record.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest
import zstandard

from pinguard.audit.options import AuditOptions
from pinguard.audit.pipeline import audit_image
from pinguard.errors import BlobVerificationError
from pinguard.layers.blob import Inflated
from pinguard.sources.interface import SourceOptions
from pinguard.testing.images import ImageWriter, layer_tar
from tests.infra.registry import RegistryServer
from tests.infra.tools import require_root, require_tool

pytestmark = pytest.mark.integration

SITE = "/usr/lib/python3.11/site-packages"
ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"


def _files() -> dict[str, bytes]:
    return {
        f"{SITE}/foo-1.0.dist-info/METADATA": (
            b"Metadata-Version: 2.1\nName: foo\nVersion: 1.0\nRequires-Dist: bar>=1\n\n"
        ),
        f"{SITE}/bar-2.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: bar\nVersion: 2.0\n\n",
        f"{SITE}/foo.py": b"x = 1\n" * 700,
    }


def _go_style(tar: bytes) -> bytes:
    """``tar`` cut after its two end blocks, as Go's archive/tar writes it (no record padding)."""
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.getmembers()
        end = t.offset  # after the last member's data
    assert tar[end : end + 1024] == bytes(1024)
    return tar[: end + 1024]


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _gzip_layout(path: Path, tar: bytes) -> None:
    w = ImageWriter(path)
    img = w.image([w.layer(tar, "gzip")], [{"created_by": "RUN pip install foo"}])
    w.write_layout(w.index([img], tag="v1")[0])


def _skopeo_chunked(src: Path, dst: Path) -> None:
    """``skopeo copy --dest-compress-format zstd:chunked`` with a private, empty blob cache."""
    require_root()
    require_tool("skopeo")
    require_tool("unshare")
    Path("/var/lib/containers/cache").mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            "mount -t tmpfs none /var/lib/containers/cache && exec skopeo copy -q "
            f"--dest-compress-format zstd:chunked oci:{src}:v1 oci:{dst}:v1",
        ],
        check=True,
        timeout=120,
    )


def _layer_of(layout: Path) -> tuple[dict[str, object], bytes, str]:
    """The single layer's descriptor, blob bytes and config diff_id."""
    index = json.loads((layout / "index.json").read_text())
    blobs = layout / "blobs" / "sha256"
    manifest = json.loads((blobs / index["manifests"][0]["digest"].split(":")[1]).read_bytes())
    config = json.loads((blobs / manifest["config"]["digest"].split(":")[1]).read_bytes())
    desc = manifest["layers"][0]
    return (
        desc,
        (blobs / desc["digest"].split(":")[1]).read_bytes(),
        config["rootfs"]["diff_ids"][0],
    )


def _inflate(blob: bytes) -> bytes:
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob), read_across_frames=True)
    return reader.read()


def _relayout(path: Path, blob: bytes, diff_id: str) -> str:
    """A layout holding ``blob`` as its one zstd layer with the config naming ``diff_id``."""
    w = ImageWriter(path)
    img = w.image([(w.blob(blob, ZSTD), diff_id)], [{"created_by": "RUN pip install foo"}])
    w.write_layout(w.index([img], tag="v1")[0])
    return f"oci:{path}:v1"


@pytest.mark.parametrize(("shape", "dropped"), [("tarfile", True), ("go", False)])
def test_a_skopeo_zstd_chunked_image_is_audited(
    tmp_path: Path, shape: str, dropped: int | None
) -> None:
    """skopeo's stream hashes to the diff_id only with the dropped zero blocks; pinguard
    reads the image and finds both distributions."""
    tar = layer_tar(_files(), parents=True)
    if shape == "go":
        tar = _go_style(tar)
    _gzip_layout(tmp_path / "src", tar)
    _skopeo_chunked(tmp_path / "src", tmp_path / "dst")
    desc, blob, diff_id = _layer_of(tmp_path / "dst")
    assert desc["mediaType"] == ZSTD
    annotations = desc.get("annotations")
    assert isinstance(annotations, dict)
    assert "io.containers.zstd-chunked.manifest-position" in annotations
    stream = _inflate(blob)
    assert diff_id == _sha256(tar)
    lost = len(tar) - len(stream)
    assert lost % 512 == 0
    assert stream + bytes(lost) == tar
    # what made `pinguard audit` exit 3: the stream stops after the end blocks, and the
    # record padding tarfile (and GNU tar) writes after them is gone; a Go-style tar, which
    # ends at its end blocks, loses nothing
    assert (_sha256(stream) != diff_id) is dropped
    assert (lost > 0) is dropped
    info = Inflated(format="zstd", tail=blob[-72:])
    assert info.zstd_chunked

    result = audit_image(f"oci:{tmp_path / 'dst'}:v1")
    names = sorted(
        (d.name, d.raw_version) for e in result.final.environments for d in e.distributions
    )
    assert names == [("bar", "2.0"), ("foo", "1.0")]


def test_a_zstd_chunked_image_from_a_registry(
    tmp_path: Path, scenario_registry: RegistryServer
) -> None:
    """The same Go-style layer pushed to a real docker-registry and audited over HTTP."""
    tar = _go_style(layer_tar(_files(), parents=True))
    _gzip_layout(tmp_path / "src", tar)
    _skopeo_chunked(tmp_path / "src", tmp_path / "dst")
    ref = f"{scenario_registry.address}/pinguard/zstd-chunked-{uuid.uuid4().hex[:8]}:v1"
    subprocess.run(
        [
            "skopeo",
            "copy",
            "-q",
            "--preserve-digests",
            "--dest-tls-verify=false",
            f"oci:{tmp_path / 'dst'}:v1",
            f"docker://{ref}",
        ],
        check=True,
        timeout=120,
    )
    result = audit_image(f"docker://{ref}", options=_insecure(scenario_registry.address))
    assert result.steps[-1].layer_digest == _layer_of(tmp_path / "dst")[0]["digest"]
    assert {d.name for e in result.final.environments for d in e.distributions} == {"foo", "bar"}


def _insecure(address: str) -> AuditOptions:
    return AuditOptions(source=SourceOptions(insecure_registries=(address,)))


def test_the_allowance_is_only_zero_blocks_of_a_zstd_chunked_blob(tmp_path: Path) -> None:
    """Refused: a plain zstd blob of the same stream; skopeo's blob with a diff_id that needs
    one non-zero byte, or more zero padding than one tar record (20 blocks). Accepted: one
    full record of zero blocks."""
    tar = layer_tar(_files(), parents=True)
    _gzip_layout(tmp_path / "src", tar)
    _skopeo_chunked(tmp_path / "src", tmp_path / "dst")
    _desc, blob, diff_id = _layer_of(tmp_path / "dst")
    stream = _inflate(blob)
    assert _sha256(stream) != diff_id

    plain = zstandard.ZstdCompressor().compress(stream)
    with pytest.raises(BlobVerificationError, match="diff_id"):
        audit_image(_relayout(tmp_path / "plain", plain, diff_id))
    for name, wrong in [
        ("nonzero", _sha256(stream + bytes(1023) + b"\1")),
        ("too-long", _sha256(stream + bytes(512 * 21))),
    ]:
        with pytest.raises(BlobVerificationError, match="diff_id"):
            audit_image(_relayout(tmp_path / name, blob, wrong))
    ok = audit_image(_relayout(tmp_path / "record", blob, _sha256(stream + bytes(512 * 20))))
    assert {d.name for e in ok.final.environments for d in e.distributions} == {"foo", "bar"}


def test_the_footer_is_recognised_only_in_its_frame() -> None:
    """The magic alone, or in a frame of the wrong length, or after gzip, is not a footer."""
    frame = (0x184D2A50).to_bytes(4, "little") + (40).to_bytes(4, "little")
    footer = frame + bytes(32) + b"GnUlInUx"
    assert Inflated("zstd", footer).zstd_chunked
    assert Inflated("zstd", b"x" * 20 + footer).zstd_chunked
    assert not Inflated("gzip", footer).zstd_chunked
    assert not Inflated("zstd", bytes(40) + b"GnUlInUx").zstd_chunked
    wrong = (0x184D2A50).to_bytes(4, "little") + (41).to_bytes(4, "little")
    assert not Inflated("zstd", wrong + bytes(33) + b"GnUlInUx").zstd_chunked
