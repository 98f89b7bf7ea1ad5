"""The hand-written tar walk in ``pinguard.layers.tar`` against ``tarfile`` on the same inputs.

Each archive is written by ``tarfile`` (ustar with prefixes, GNU long names and links, PAX long
paths, link paths and sizes, hand-patched base-256 sizes, hard and symbolic links, directories,
fifos, empty files, whiteouts and opaque directories), walked by ``walk_tar`` and by ``tarfile``
in stream mode, and the members compared; ``analyze_stream`` must give identical analyses for
plain, gzip (single and multi-member) and zstd blobs, with tiny and odd chunk sizes forcing every
header and member across chunk boundaries. Truncated streams, flipped bytes, corrupt headers and
size mismatches must raise ``LayerError`` or ``BlobVerificationError``, never pass.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import posixpath
import tarfile
from collections.abc import Callable, Iterator

import pytest
import zstandard

from pinguard.errors import BlobVerificationError, LayerError
from pinguard.layers import blob
from pinguard.layers.analysis import LayerAnalysis, analyze_stream
from pinguard.layers.tar import CAPTURE, HASH, SKIP, normalize, walk_tar

MTIME = 1764374400


def _info(
    name: str, *, type_: bytes = tarfile.REGTYPE, size: int = 0, link: str = ""
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = type_
    info.size = size
    info.linkname = link
    info.mtime = MTIME
    info.mode = 0o755 if type_ == tarfile.DIRTYPE else 0o644
    return info


def _payload(n: int, seed: int) -> bytes:
    blocks = [hashlib.sha256(f"{seed}-{i}".encode()).digest() for i in range(n // 32 + 1)]
    return b"".join(blocks)[:n]


def _entries(fmt: int) -> Iterator[tuple[tarfile.TarInfo, bytes | None]]:
    """A bit of everything a layer may hold; long names only where the format allows them."""
    site = "usr/local/lib/python3.12/site-packages"
    yield _info("./usr/", type_=tarfile.DIRTYPE), None
    yield _info(f"{site}/", type_=tarfile.DIRTYPE), None
    for i, (name, size) in enumerate(
        [
            (f"{site}/demo-1.0.dist-info/METADATA", 120),
            (f"{site}/demo-1.0.dist-info/RECORD", 700),
            (f"{site}/demo/__init__.py", 0),  # empty file
            (f"{site}/demo/big.so", 700_000),  # spans many chunks
            (f"{site}/demo/exact.bin", 1024),  # a multiple of the block size
            ("usr//share/./doc/readme.txt", 33),
            ("var/lib/dpkg/status", 2_000),
        ]
    ):
        yield _info(name, size=size), _payload(size, i)
    yield _info(f"{site}/demo/link.py", type_=tarfile.SYMTYPE, link="__init__.py"), None
    yield _info(f"{site}/demo/hard.so", type_=tarfile.LNKTYPE, link=f"{site}/demo/big.so"), None
    yield _info("run/fifo", type_=tarfile.FIFOTYPE), None
    yield _info(f"{site}/.wh.old-0.9.dist-info", size=0), b""
    yield _info(f"{site}/old/.wh..wh..opq", size=0), b""
    yield _info("root/.cache/.wh..wh..opq", type_=tarfile.DIRTYPE), None  # odd, but a whiteout
    deep = "/".join(["a_rather_long_directory_name"] * 5)  # 144 chars
    if fmt == tarfile.USTAR_FORMAT:  # fits name + prefix
        yield _info(f"{deep}/x.txt", size=10), _payload(10, 90)
    else:
        longer = "/".join(["a_rather_long_directory_name"] * 12)  # over 255 chars
        yield _info(f"{longer}/x.txt", size=10), _payload(10, 91)
        yield _info(f"{site}/demo/far.py", type_=tarfile.SYMTYPE, link=f"/{longer}/x.txt"), None
        yield _info(f"{site}/unicodé/naïve.txt", size=5), b"hello"


def make_tar(fmt: int, extra: Callable[[tarfile.TarFile], None] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for info, data in _entries(fmt):
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
        if extra is not None:
            extra(tar)
    return buf.getvalue()


def _pax_size(tar: tarfile.TarFile) -> None:
    """A PAX 'size' record (the ustar size field is then written as 0)."""
    data = _payload(3000, 7)
    info = _info("usr/local/lib/python3.12/site-packages/demo/pax-size.txt", size=len(data))
    info.pax_headers = {"size": str(len(data))}
    tar.addfile(info, io.BytesIO(data))


def _base256(tar_bytes: bytes, name: bytes) -> bytes:
    """Rewrite one member's size field in GNU base-256 and fix its header checksum."""
    pos = 0
    while True:
        header = bytearray(tar_bytes[pos : pos + 512])
        if header[: len(name)] == name and header[len(name)] == 0:
            break
        size = int(header[124:136].split(b"\0")[0].strip() or b"0", 8)
        pos += 512 + (size + 511) // 512 * 512
    size = int(header[124:136].split(b"\0")[0].strip() or b"0", 8)
    header[124:136] = b"\x80" + size.to_bytes(11, "big")
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    return tar_bytes[:pos] + bytes(header) + tar_bytes[pos + 512 :]


def _select(path: str) -> int:
    if path.endswith((".txt", "METADATA", "RECORD", "status")):
        return CAPTURE
    if "/site-packages/" in path:
        return HASH
    return SKIP


def _b64(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def reference(tar_bytes: bytes) -> list[tuple[str, bytes, int, str, bytes | None, str | None]]:
    """What tarfile (stream mode) sees, in walk_tar's terms."""
    out = []
    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r|") as tar:
        for m in tar:
            path = normalize(m.name)
            data = tar.extractfile(m).read() if m.isreg() else None  # type: ignore[union-attr]
            want = _select(path) if m.isreg() else SKIP
            out.append(
                (
                    path,
                    m.type,
                    m.size,
                    m.linkname,
                    data if want == CAPTURE else None,
                    _b64(data) if want == HASH and data is not None else None,
                )
            )
    return out


def reference_analysis(tar_bytes: bytes, digest: str) -> LayerAnalysis:
    result = LayerAnalysis(
        digest=digest,
        size=len(tar_bytes),
        diff_id="sha256:" + hashlib.sha256(tar_bytes).hexdigest(),
    )
    for path, _type, _size, _link, data, hashed in reference(tar_bytes):
        result.members += 1
        base = posixpath.basename(path)
        if base.startswith(".wh."):
            parent = posixpath.dirname(path)
            if base == ".wh..wh..opq":
                result.opaque.append(parent)
            else:
                result.whiteouts.append(posixpath.join(parent, base[4:]))
        elif data is not None:
            result.files[path] = data
        elif hashed is not None:
            result.hashes[path] = hashed
    return result


FORMATS = {
    "ustar": lambda: make_tar(tarfile.USTAR_FORMAT),
    "gnu": lambda: make_tar(tarfile.GNU_FORMAT),
    "pax": lambda: make_tar(tarfile.PAX_FORMAT, _pax_size),
    "gnu-base256": lambda: _base256(
        make_tar(tarfile.GNU_FORMAT), b"usr/local/lib/python3.12/site-packages/demo/big.so"
    ),
}


@pytest.fixture(
    params=[None, 1000, 4093], ids=["default-chunks", "1000-byte-chunks", "4093-byte-chunks"]
)
def chunking(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small and odd chunk sizes put headers and members across every kind of boundary."""
    if request.param is not None:
        monkeypatch.setattr(blob, "CHUNK", request.param)
        monkeypatch.setattr(blob, "IN_CHUNK", request.param)
        monkeypatch.setattr(blob, "OUT_CHUNK", request.param * 3 + 1)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_walk_matches_tarfile(fmt: str, chunking: None) -> None:
    """walk_tar yields the same members, types, sizes, links, bytes and hashes as tarfile."""
    data = FORMATS[fmt]()
    got = [
        (m.path, m.type, m.size, m.linkname, m.data, m.digest)
        for m in walk_tar(io.BytesIO(data), _select)
    ]
    assert got == reference(data)


def test_base256_size_is_really_used() -> None:
    """The patched archive holds a base-256 size field that tarfile and the walk both read."""
    data = FORMATS["gnu-base256"]()
    assert b"\x80" + bytes(8) + b"\x0a\xae\x60" in data  # 700000 in base-256
    sizes = {m.path: m.size for m in walk_tar(io.BytesIO(data), _select)}
    assert sizes["/usr/local/lib/python3.12/site-packages/demo/big.so"] == 700_000


def _gzip_multi(data: bytes) -> bytes:
    cut = len(data) // 3
    return gzip.compress(data[:cut], mtime=0) + b"\0" * 7 + gzip.compress(data[cut:], mtime=0)


COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "plain": lambda d: d,
    "gzip": lambda d: gzip.compress(d, mtime=0),
    "gzip-multi-member": _gzip_multi,
    "zstd": lambda d: zstandard.ZstdCompressor().compress(d),
    "zstd-multi-frame": lambda d: (
        zstandard.ZstdCompressor().compress(d[:5000])
        + zstandard.ZstdCompressor().compress(d[5000:])
    ),
}


def _analyze(blob: bytes, *, digest: str | None = "auto", size: int | None = -1) -> LayerAnalysis:
    return analyze_stream(
        io.BytesIO(blob),
        digest=("sha256:" + hashlib.sha256(blob).hexdigest()) if digest == "auto" else digest,
        size=len(blob) if size == -1 else size,
        select=_select,
    )


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("codec", sorted(COMPRESSORS))
def test_analysis_is_identical_for_every_compression(fmt: str, codec: str, chunking: None) -> None:
    """plain, gzip and zstd blobs of one tar give one analysis, equal to tarfile's reading."""
    tar_bytes = FORMATS[fmt]()
    blob = COMPRESSORS[codec](tar_bytes)
    got = _analyze(blob)
    want = reference_analysis(tar_bytes, "sha256:" + hashlib.sha256(blob).hexdigest())
    assert got.to_json() == want.to_json()
    assert got.whiteouts
    assert got.opaque
    assert got.files
    assert got.hashes


@pytest.mark.parametrize("codec", ["plain", "gzip", "zstd"])
def test_truncated_blob_fails(codec: str, chunking: None) -> None:
    """A blob cut short fails, whether or not its digest and size are known."""
    blob = COMPRESSORS[codec](FORMATS["pax"]())
    with pytest.raises((LayerError, BlobVerificationError)):
        _analyze(
            blob[: len(blob) // 2],
            digest="sha256:" + hashlib.sha256(blob).hexdigest(),
            size=len(blob),
        )
    if codec != "zstd":  # a zstd stream cut at a frame boundary is only caught by the digest
        with pytest.raises(LayerError):
            _analyze(blob[: len(blob) // 2], digest=None, size=None)


@pytest.mark.parametrize("codec", ["plain", "gzip", "zstd"])
@pytest.mark.parametrize("where", [0.1, 0.5, 0.9])
def test_flipped_byte_fails(codec: str, where: float) -> None:
    """One flipped byte anywhere in the blob is an error, never a partial pass."""
    blob = bytearray(COMPRESSORS[codec](FORMATS["gnu"]()))
    good_digest = "sha256:" + hashlib.sha256(bytes(blob)).hexdigest()
    blob[int(len(blob) * where)] ^= 0x40
    with pytest.raises((LayerError, BlobVerificationError)):
        _analyze(bytes(blob), digest=good_digest, size=len(blob))


@pytest.mark.parametrize("delta", [-1, 1])
def test_size_mismatch_fails(delta: int) -> None:
    """A declared size that differs from the bytes streamed fails verification."""
    blob = gzip.compress(FORMATS["ustar"](), mtime=0)
    with pytest.raises(BlobVerificationError):
        _analyze(blob, size=len(blob) + delta)


def test_digest_mismatch_fails() -> None:
    """A wrong digest fails after the whole stream has been read."""
    blob = gzip.compress(FORMATS["ustar"](), mtime=0)
    with pytest.raises(BlobVerificationError):
        _analyze(blob, digest="sha256:" + "0" * 64)


def test_corrupt_header_checksum_fails() -> None:
    """A header whose checksum does not match is a LayerError naming the member."""
    data = bytearray(FORMATS["ustar"]())
    data[512 * 1 + 5] ^= 0x01  # inside the second header's name field
    with pytest.raises(LayerError, match="checksum"):
        list(walk_tar(io.BytesIO(bytes(data)), _select))


def test_garbage_after_gzip_member_fails() -> None:
    """Bytes after a gzip member that are not another member are an error (as gzip says)."""
    blob = gzip.compress(FORMATS["ustar"](), mtime=0) + b"not gzip at all"
    with pytest.raises(LayerError):
        _analyze(blob)


def test_not_a_tar_fails() -> None:
    """A blob that is not a tar archive fails on its first header."""
    with pytest.raises(LayerError):
        _analyze(gzip.compress(b"x" * 5000, mtime=0))


def test_layer_size_and_members_are_counted() -> None:
    """LayerAnalysis records the uncompressed tar size and every member once."""
    tar_bytes = FORMATS["pax"]()
    got = _analyze(gzip.compress(tar_bytes, mtime=0))
    assert got.size == len(tar_bytes)
    assert got.members == len(reference(tar_bytes))
