"""Fail-closed layers: wrong diff_ids, hostile tar headers, bombs and oversized metadata.

Each fault is built for real: OCI layouts written with ``pinguard.testing.images`` whose config
names a diff_id the layer does not have (or whose layer has junk after its end blocks), tar
headers patched by hand to a negative GNU base-256 size or a non-numeric PAX size (checksums
recomputed as the tar format defines them), gzip bombs of zeros, a METADATA above the capture
cap, a bare ``.wh.`` entry. Expected digests come from hashlib over the bytes the test made.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from pinguard.audit.options import AuditOptions
from pinguard.audit.pipeline import audit_image
from pinguard.cli import main
from pinguard.errors import BlobVerificationError, LayerError
from pinguard.layers.analysis import LayerLimits, analyze_stream
from pinguard.layers.tar import CAPTURE, SKIP
from pinguard.testing.images import ImageWriter, layer_tar

SITE = "usr/local/lib/python3.12/site-packages"
METADATA = f"{SITE}/demo-1.0.dist-info/METADATA"


def _metadata(name: str = "demo", version: str = "1.0", extra: bytes = b"") -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n".encode() + extra


def _layout(tmp_path: Path, tars: list[bytes], diff_ids: list[str] | None = None) -> str:
    """An oci: layout with one gzip layer per tar; ``diff_ids`` overrides the config's."""
    writer = ImageWriter(tmp_path / "layout")
    layers = []
    for i, tar in enumerate(tars):
        desc, diff_id = writer.layer(tar)
        layers.append((desc, diff_ids[i] if diff_ids else diff_id))
    image = writer.image(layers, [{"created_by": f"RUN step {i}"} for i in range(len(tars))])
    index, _ = writer.index([image], tag="t")
    writer.write_layout(index)
    return f"oci:{tmp_path / 'layout'}:t"


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# --- diff_ids ------------------------------------------------------------------------------------


def test_wrong_diff_id_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tar = layer_tar({METADATA: _metadata()})
    wrong = _sha256(b"some other layer")
    ref = _layout(tmp_path, [tar], diff_ids=[wrong])
    with pytest.raises(BlobVerificationError, match=f"config's diff_id is {wrong}"):
        audit_image(ref)
    assert main(["audit", ref, "--no-cache"]) == 3
    assert f"uncompressed tar is {_sha256(tar)}" in capsys.readouterr().err


def test_junk_after_the_end_blocks_breaks_the_diff_id(tmp_path: Path) -> None:
    """A layer whose bytes go on after the tar's end blocks is not the layer the config names."""
    tar = layer_tar({METADATA: _metadata()})
    ref = _layout(tmp_path, [tar + b"junk" * 1000], diff_ids=[_sha256(tar)])
    with pytest.raises(
        BlobVerificationError, match=f"uncompressed tar is {_sha256(tar + b'junk' * 1000)}"
    ):
        audit_image(ref)


def test_cached_analysis_is_checked_against_the_diff_id(tmp_path: Path) -> None:
    """A cache entry made from a good image does not let another config's diff_id pass."""
    tar = layer_tar({METADATA: _metadata()})
    cache = tmp_path / "cache"
    good = _layout(tmp_path / "good", [tar])
    assert audit_image(good, options=AuditOptions(cache_dir=cache)).steps
    wrong = _sha256(b"x")
    bad = _layout(tmp_path / "bad", [tar], diff_ids=[wrong])
    with pytest.raises(BlobVerificationError, match=f"config's diff_id is {wrong}"):
        audit_image(bad, options=AuditOptions(cache_dir=cache))


# --- hostile headers -----------------------------------------------------------------------------


def _reseal(header: bytearray) -> bytes:
    """Recompute a ustar header checksum (the sum of its bytes with the field as spaces)."""
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    return bytes(header)


def _walk(blob: bytes, limits: LayerLimits | None = None, select: int = CAPTURE) -> object:
    return analyze_stream(
        io.BytesIO(blob), digest=None, size=None, select=lambda p: select, limits=limits
    )


def _ustar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_negative_base256_size_is_an_error_not_a_hang() -> None:
    tar = bytearray(_ustar({"etc/a": b"x" * 10, "etc/b": b"y"}))
    tar[124:136] = b"\xff" * 12  # GNU base-256 with the sign bit: -1
    tar[:512] = _reseal(bytearray(tar[:512]))
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            _walk(gzip.compress(bytes(tar)))
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert not worker.is_alive(), "the walk hung on a negative size"
    assert isinstance(outcome[0], LayerError)
    assert "negative size -1" in str(outcome[0])


def test_non_numeric_pax_size_is_an_error() -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("etc/a")
        info.size = 3
        info.pax_headers = {"size": "3"}
        tar.addfile(info, io.BytesIO(b"abc"))
    data = buf.getvalue().replace(b"size=3\n", b"size=-\n", 1)
    assert b"size=-" in data
    with pytest.raises(LayerError, match="PAX size '-'"):
        _walk(data)


def test_bare_whiteout_is_an_error() -> None:
    tar = layer_tar({"etc/.wh.": b""})
    with pytest.raises(LayerError, match=r"bare whiteout '/etc/\.wh\.'"):
        _walk(tar, select=SKIP)


# --- bombs and caps ----------------------------------------------------------------------------


def _zeros_layer(size: int) -> bytes:
    buf = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        info = tarfile.TarInfo("var/zeros")
        info.size = size

        class Zeros(io.RawIOBase):
            left = size

            def readable(self) -> bool:
                return True

            def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
                n = min(len(b), self.left)
                b[:n] = bytes(n)
                self.left -= n
                return n

        tar.addfile(info, io.BufferedReader(Zeros()))
    return buf.getvalue()


def test_layer_size_cap() -> None:
    blob = _zeros_layer(40 << 20)
    with pytest.raises(LayerError, match="past the 16777216-byte layer size cap"):
        _walk(blob, LayerLimits(max_size=16 << 20), select=SKIP)


def test_inflation_ratio_cap() -> None:
    blob = _zeros_layer(40 << 20)
    assert len(blob) * 300 < 40 << 20  # zeros deflate far beyond 300:1
    with pytest.raises(LayerError, match=r"more than 300:1 .*decompression bomb"):
        _walk(blob, LayerLimits(max_ratio=300, ratio_floor=1 << 20), select=SKIP)
    _walk(blob, select=SKIP)  # under the default floor and ratio: read normally


def test_metadata_above_the_capture_cap_is_incomplete(tmp_path: Path) -> None:
    big = _metadata(extra=b"x" * 5000)
    ref = _layout(tmp_path, [layer_tar({METADATA: big})])
    result = audit_image(ref, options=AuditOptions(limits=LayerLimits(max_capture=4096)))
    assert [(i.what, i.why) for i in result.incomplete] == [
        (f"/{METADATA}", f"{len(big)} bytes, above the metadata capture cap"),
    ]
    assert result.verdict(None) != "pass"
    # the same cap from the command line: the gate does not pass on what it did not read
    assert main(["audit", ref, "--no-cache", "--max-metadata-size", "4096"]) == 1
    normal = audit_image(ref)
    assert [d.name for e in normal.snapshots[-1].environments for d in e.distributions] == ["demo"]


_RSS_SCRIPT = """
import sys
from pinguard.audit.options import AuditOptions
from pinguard.audit.pipeline import audit_image
from pinguard.layers.analysis import LayerLimits
# zeros deflate 1000:1; lift the ratio cap so that only the capture cap is under test
result = audit_image(sys.argv[1], options=AuditOptions(limits=LayerLimits(max_ratio=10**6)))
# VmHWM (peak RSS of this address space): ru_maxrss would carry the forking parent's peak
status = open("/proc/self/status").read()
peak = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))
print(len(result.incomplete), peak)
"""


def test_oversized_metadata_keeps_memory_bounded(tmp_path: Path) -> None:
    """A 256 MiB METADATA (zeros after its headers) is passed over under the default 16 MiB
    capture cap: the audit's peak RSS stays well below the file's size. The figure is
    printed."""
    size = 256 << 20
    ref = _layout(tmp_path, [_big_metadata_tar(size)])
    proc = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, ref], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    incomplete, peak_kib = (int(x) for x in proc.stdout.split())
    print(f"peak RSS auditing a {size >> 20} MiB METADATA: {peak_kib >> 10} MiB")
    assert incomplete == 1
    assert peak_kib < 200 << 10  # KiB


def _big_metadata_tar(size: int) -> bytes:
    head = _metadata()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(METADATA)
        info.size = size
        tar.addfile(info, io.BytesIO(head + bytes(size - len(head))))
    return buf.getvalue()
