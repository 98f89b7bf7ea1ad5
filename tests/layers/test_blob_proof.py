"""Both proofs of a layer, as containerd and go-containerregistry make them (issues 29, 30).

A layer blob must hash to the digest its descriptor names, and its uncompressed tar to the
config's diff_id. The diff_id alone proves the tar the walk reads, not the blob: a blob whose
gzip header differs (its MTIME or OS byte) inflates to the same tar, yet it is another blob,
and the one a cache entry or a registry would be trusted for under the declared digest. Here
such blobs are made from a real image (the demo's layers, written as an OCI layout in
``tmp_path``), altered in place under their original names, and audited through every
transport that reads layers whole: ``oci:``, ``oci-archive:``, ``docker-archive:`` (docker
25's content-addressed ``blobs/sha256/<hex>`` names) and a real registry, whose storage is
written directly since it verifies digests on upload. Each audit exits 3 naming the declared
and the actual digest; nothing is cached for the altered blob; the honest image's report is
the same with and without a cache that saw the altered one.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import threading
from pathlib import Path

import pytest

from pinguard.errors import BlobVerificationError, SourceError
from pinguard.layers.analysis import analyze_stream
from pinguard.layers.tar import CAPTURE, SKIP
from pinguard.testing.demo import demo_layers, layer_files
from pinguard.testing.images import CREATED, Image, ImageWriter, layer_tar
from tests.infra.cli import cli_streams
from tests.infra.registry import running_registry
from tests.infra.tools import require_tool

TAG = "t"
POISONED = 1  # the second layer (the torch install step): "layer 2" in the messages
MTIME_BYTE = 4  # the gzip header's MTIME is bytes 4-7, XFL byte 8, OS byte 9


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# --- analyze_stream: the two proofs --------------------------------------------------------


def _metadata_tar() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("usr/lib/python3/dist-packages/x-1.0.dist-info/METADATA")
        data = b"Metadata-Version: 2.1\nName: x\nVersion: 1.0\n"
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _analyze(
    blob: bytes, digest: str, diff_id: str, *, prefetch: bool = True, label: str = ""
) -> str:
    result = analyze_stream(
        io.BytesIO(blob),
        digest=digest,
        size=len(blob),
        select=lambda path: CAPTURE if path.endswith("/METADATA") else SKIP,
        prefetch=prefetch,
        diff_id=diff_id,
        label=label,
    )
    assert list(result.files) == ["/usr/lib/python3/dist-packages/x-1.0.dist-info/METADATA"]
    return result.diff_id


@pytest.mark.parametrize("prefetch", [False, True])
def test_a_blob_that_inflates_to_the_proven_tar_is_refused_by_its_digest(prefetch: bool) -> None:
    """The same tar compressed twice: the diff_id matches both, the blob digest only one."""
    tar = _metadata_tar()
    one, other = gzip.compress(tar, mtime=0), gzip.compress(tar, compresslevel=1, mtime=1)
    assert one != other
    assert gzip.decompress(other) == tar
    assert _analyze(one, _sha256(one), _sha256(tar), prefetch=prefetch) == _sha256(tar)
    with pytest.raises(BlobVerificationError) as err:
        _analyze(other, _sha256(one), _sha256(tar), prefetch=prefetch, label="layer 3")
    assert str(err.value) == (
        f"blob {_sha256(one)} of layer 3: expected {_sha256(one)}, got {_sha256(other)}"
    )


@pytest.mark.parametrize("byte", range(4, 10))
def test_a_changed_gzip_header_byte_is_refused_naming_both_digests(byte: int) -> None:
    """MTIME, XFL and OS: bytes no inflater checks, so the tar and the diff_id are unchanged."""
    tar = _metadata_tar()
    blob = gzip.compress(tar, mtime=0)
    bad = bytearray(blob)
    bad[byte] ^= 0x01
    assert gzip.decompress(bytes(bad)) == tar
    assert len(bad) == len(blob)
    with pytest.raises(BlobVerificationError) as err:
        _analyze(bytes(bad), _sha256(blob), _sha256(tar), label="layer 1")
    assert str(err.value) == (
        f"blob {_sha256(blob)} of layer 1: expected {_sha256(blob)}, got {_sha256(bytes(bad))}"
    )


def test_every_changed_byte_of_a_layer_with_a_diff_id_fails_closed() -> None:
    """Each byte of a gzip blob changed in turn (same size): nothing but the blob is accepted,
    header bytes included (the diff_id used to let bytes 4 to 9 through)."""
    tar = _metadata_tar()
    blob = gzip.compress(tar, mtime=0)
    for i in range(len(blob)):
        bad = bytearray(blob)
        bad[i] ^= 0x01
        with pytest.raises(SourceError):
            _analyze(bytes(bad), _sha256(blob), _sha256(tar), prefetch=i < 16)


def _stage_threads_during(blob: bytes, digest: str, diff_id: str) -> set[str]:
    """The names of the threads this analysis started, as seen from its walk."""
    before = set(threading.enumerate())
    seen: set[str] = set()

    def select(path: str) -> int:
        seen.update(t.name for t in threading.enumerate() if t not in before)
        return SKIP

    got = analyze_stream(
        io.BytesIO(blob), digest=digest, size=len(blob), select=select, diff_id=diff_id
    )
    assert got.diff_id == diff_id
    return seen


def test_a_plain_tar_is_hashed_once_and_that_hash_is_both_proofs() -> None:
    """An uncompressed blob is its tar: the fetch thread's hash is checked against the digest
    and the diff_id, and no tar hash thread runs; a compressed blob gets one. (A member of
    24 MiB keeps the stages busy past the first member the walk selects.)"""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar_file:
        for name, size in (("a/first", 10), ("a/big", 24 << 20)):
            info = tarfile.TarInfo(name)
            info.size = size
            tar_file.addfile(info, io.BytesIO(bytes(size)))
    big = out.getvalue()
    plain = _stage_threads_during(big, _sha256(big), _sha256(big))
    assert "blob-prefetch" in plain, plain
    assert "layer-hash" not in plain, plain
    blob = gzip.compress(big, mtime=0)
    assert "layer-hash" in _stage_threads_during(blob, _sha256(blob), _sha256(big))
    tar = _metadata_tar()
    # one hash, two claims: a plain blob named for other bytes fails on its digest ...
    wrong = _sha256(tar + b"\0" * 512)
    with pytest.raises(BlobVerificationError, match=f"expected {wrong}, got {_sha256(tar)}"):
        _analyze(tar, wrong, _sha256(tar))
    # ... and one whose config names another tar on its diff_id
    with pytest.raises(BlobVerificationError, match=f"config's diff_id is {wrong}"):
        _analyze(tar, _sha256(tar), wrong)


# --- a real image, altered in place --------------------------------------------------------


def _write_demo(layout: Path) -> tuple[ImageWriter, Image, dict[str, object]]:
    """The demo image's layers as an OCI layout (gzip layers, tagged ``TAG``)."""
    writer = ImageWriter(layout)
    descs = []
    history: list[dict[str, object]] = []
    for layer in demo_layers():
        files, whiteouts = layer_files(layer)
        descs.append(writer.layer(layer_tar(files, whiteouts=whiteouts, parents=True)))
        history.append({"created": CREATED, "created_by": layer.created_by})
    image = writer.image(descs, history, platform="linux/amd64")
    index, _ = writer.index([image], tag=TAG)
    writer.write_layout(index)
    return writer, image, index


def _alter_header(path: Path) -> str:
    """Change the gzip MTIME byte of the blob at ``path`` in place; return its new digest.
    The blob keeps its size and inflates to the same tar."""
    blob = path.read_bytes()
    bad = bytearray(blob)
    bad[MTIME_BYTE] ^= 0x01
    assert len(bad) == len(blob)
    assert gzip.decompress(bytes(bad)) == gzip.decompress(blob)
    path.write_bytes(bytes(bad))
    return _sha256(bytes(bad))


def _refused(ref: str, declared: str, actual: str, *extra: str) -> None:
    code, out, err = cli_streams("audit", ref, "--format", "json", *extra)
    assert code == 3, (code, out, err)
    assert out == ""
    assert f"blob {declared} of layer {POISONED + 1}: expected {declared}, got {actual}" in err


@pytest.mark.parametrize("jobs", ["1", "2"])  # the sequential and the worker-process paths
def test_an_oci_layout_blob_with_a_changed_gzip_header_exits_3(tmp_path: Path, jobs: str) -> None:
    _, image, _ = _write_demo(tmp_path / "layout")
    declared = image.layers[POISONED].digest
    actual = _alter_header(tmp_path / "layout" / "blobs" / "sha256" / declared.split(":")[1])
    _refused(f"oci:{tmp_path / 'layout'}:{TAG}", declared, actual, "--no-cache", "--jobs", jobs)


def test_an_oci_archive_blob_with_a_changed_gzip_header_exits_3(tmp_path: Path) -> None:
    writer, image, index = _write_demo(tmp_path / "layout")
    declared = image.layers[POISONED].digest
    actual = _alter_header(tmp_path / "layout" / "blobs" / "sha256" / declared.split(":")[1])
    writer.write_oci_archive(index, tmp_path / "image.tar")
    _refused(f"oci-archive:{tmp_path / 'image.tar'}:{TAG}", declared, actual, "--no-cache")


def test_a_docker_archive_blob_named_by_its_digest_must_hash_to_it(tmp_path: Path) -> None:
    """docker 25+ saves ``blobs/sha256/<hex>``: the name is the blob's digest. A compressed
    layer stored there is checked against it (it used to be hashed at resolve time to give
    whatever digest its bytes had, so nothing was checked)."""
    _, image, _ = _write_demo(tmp_path / "layout")
    declared = image.layers[POISONED].digest
    blobs = tmp_path / "layout" / "blobs" / "sha256"
    actual = _alter_header(blobs / declared.split(":")[1])
    entry = {
        "Config": f"blobs/sha256/{image.config.digest.split(':')[1]}",
        "RepoTags": ["demo:t"],
        "Layers": [f"blobs/sha256/{d.digest.split(':')[1]}" for d in image.layers],
    }
    archive = tmp_path / "docker.tar"
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        data = json.dumps([entry]).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for blob in sorted(blobs.iterdir()):
            tar.add(blob, arcname=f"blobs/sha256/{blob.name}")
    _refused(f"docker-archive:{archive}", declared, actual, "--no-cache")


def test_a_registry_blob_with_a_changed_gzip_header_exits_3(tmp_path: Path) -> None:
    """Pushed honestly with skopeo, then altered in the registry's own storage (the registry
    checks digests on upload, not when it serves a blob)."""
    require_tool("skopeo")
    _, image, _ = _write_demo(tmp_path / "layout")
    declared = image.layers[POISONED].digest
    with running_registry(tmp_path / "registry") as registry:
        registry.push(f"oci:{tmp_path / 'layout'}:{TAG}", "proof/demo:t")
        hexpart = declared.split(":")[1]
        stored = registry.root / "storage/docker/registry/v2/blobs/sha256" / hexpart[:2] / hexpart
        assert (stored / "data").is_file(), "skopeo stored the layer under another digest"
        actual = _alter_header(stored / "data")
        ref = f"docker://{registry.ref('proof/demo:t')}"
        _refused(ref, declared, actual, "--no-cache")
        _refused(ref, declared, actual, "--no-cache", "--layer-read", "lazy")  # no TOC: full


def test_an_altered_blob_is_never_cached_and_the_honest_report_is_unchanged(
    tmp_path: Path,
) -> None:
    """The cache is keyed by the blob digest: the altered blob leaves no entry under it, so
    the honest image audited with that cache gives the report it gives without one."""
    _, image, _ = _write_demo(tmp_path / "layout")
    ref = f"oci:{tmp_path / 'layout'}:{TAG}"
    declared = image.layers[POISONED].digest
    path = tmp_path / "layout" / "blobs" / "sha256" / declared.split(":")[1]
    honest = path.read_bytes()
    want = cli_streams("audit", ref, "--format", "json", "--no-cache")
    assert want[0] in (0, 1), want
    assert want[1].startswith("{"), want

    cache = tmp_path / "cache"
    actual = _alter_header(path)
    _refused(ref, declared, actual, "--cache-dir", str(cache))
    entries = [p.name for p in cache.iterdir()] if cache.exists() else []
    assert not [name for name in entries if declared.split(":")[1] in name], entries

    path.write_bytes(honest)
    assert cli_streams("audit", ref, "--format", "json", "--cache-dir", str(cache)) == want
    assert cli_streams("audit", ref, "--format", "json", "--cache-dir", str(cache)) == want
