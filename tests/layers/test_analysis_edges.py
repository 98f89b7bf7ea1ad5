"""Layer analysis edges: the ``dir:`` walk's choices per entry, and ``analyze_stream``'s errors.

Directories are real trees in tmp_path (files, symlinks, a FIFO, a Unix socket that cannot be
opened); layers are tars written by ``tarfile`` and compressed by ``gzip`` or ``zstandard``,
corrupted by hand. Expected contents are the bytes written, digests come from ``hashlib``,
and error texts are the documented wording around the digest the test chose.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import os
import socket
import tarfile
import threading
import time
from pathlib import Path

import pytest
import zstandard

from pinguard.errors import BlobVerificationError, LayerError
from pinguard.layers import blob
from pinguard.layers.analysis import LayerAnalysis, LayerLimits, analyze_directory, analyze_stream
from pinguard.layers.tar import CAPTURE, HASH, LINK, SKIP, STREAM


def _b64(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


class Recorder:
    """A MemberStream that returns the length and sha256 of what it was fed."""

    def __init__(self, path: str, size: int) -> None:
        self.path = path
        self.size = size
        self.h = hashlib.sha256()
        self.n = 0

    def update(self, chunk: memoryview, /) -> None:
        self.h.update(chunk)
        self.n += len(chunk)

    def close(self) -> object:
        return {"declared": self.size, "read": self.n, "sha256": self.h.hexdigest()}


# --- analyze_directory ------------------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "app" / "sub").mkdir(parents=True)
    (r / "app" / "a.txt").write_bytes(b"alpha")
    (r / "app" / "b.bin").write_bytes(b"b" * 3000)
    (r / "app" / "c.so").write_bytes(b"c" * 2500)
    (r / "app" / "d.txt").write_bytes(b"delta")
    (r / "app" / "skip.txt").write_bytes(b"skip")
    (r / "app" / "sub" / "e.txt").write_bytes(b"echo")
    (r / "top.txt").write_bytes(b"top")
    os.symlink("a.txt", r / "app" / "link.txt")
    os.symlink("/nowhere/at/all", r / "app" / "dangling")
    os.symlink("sub", r / "app" / "dirlink")
    os.symlink("sub", r / "app" / "dirlink-unwanted")
    os.mkfifo(r / "app" / "fifo")
    for pseudo in ("proc", "sys", "dev"):
        (r / pseudo).mkdir()
        (r / pseudo / "x.txt").write_bytes(b"pseudo")
    (r / "excluded").mkdir()
    (r / "excluded" / "x.txt").write_bytes(b"excluded")
    (r / "app" / "gone.txt").write_bytes(b"excluded file")
    return r


SELECT = {
    "/app/a.txt": CAPTURE,
    "/app/b.bin": HASH,
    "/app/c.so": STREAM | HASH,
    "/app/d.txt": CAPTURE | LINK,  # LINK on a regular file is dropped, the capture stays
    "/app/sub/e.txt": CAPTURE,
    "/top.txt": CAPTURE,
    "/app/link.txt": LINK | CAPTURE,
    "/app/dangling": LINK,
    "/app/dirlink": LINK,
    "/app/fifo": CAPTURE,
    "/proc/x.txt": CAPTURE,
    "/sys/x.txt": CAPTURE,
    "/dev/x.txt": CAPTURE,
    "/excluded/x.txt": CAPTURE,
    "/app/gone.txt": CAPTURE,
}


def _select(path: str) -> int:
    return SELECT.get(path, SKIP)


def test_directory_walk_keeps_what_the_selector_asks_for(root: Path) -> None:
    got = analyze_directory(
        str(root) + "/",
        select=_select,
        open_stream=Recorder,
        exclude=("/excluded", "/app/gone.txt"),
    )
    assert got.files == {
        "/app/a.txt": b"alpha",
        "/app/d.txt": b"delta",
        "/app/sub/e.txt": b"echo",
        "/top.txt": b"top",
    }
    assert got.hashes == {"/app/b.bin": _b64(b"b" * 3000), "/app/c.so": _b64(b"c" * 2500)}
    assert got.streamed == {
        "/app/c.so": {
            "declared": 2500,
            "read": 2500,
            "sha256": hashlib.sha256(b"c" * 2500).hexdigest(),
        }
    }
    # symlinks: read with readlink, never opened; the unwanted directory link is not kept
    assert got.links == {
        "/app/link.txt": "a.txt",
        "/app/dangling": "/nowhere/at/all",
        "/app/dirlink": "sub",
    }
    # files counted: a, b, c, d, skip, link, dangling, fifo under /app; e; top
    assert got.members == 10
    assert got.unreadable == []
    assert (got.digest, got.diff_id, got.size) == ("", "", 0)


def test_directory_walk_reads_files_in_small_chunks(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(blob, "CHUNK", 7)
    got = analyze_directory(str(root), select=_select, open_stream=Recorder)
    assert got.files["/app/a.txt"] == b"alpha"
    assert got.hashes["/app/b.bin"] == _b64(b"b" * 3000)
    assert got.streamed["/app/c.so"] == {
        "declared": 2500,
        "read": 2500,
        "sha256": hashlib.sha256(b"c" * 2500).hexdigest(),
    }


def test_excluded_paths_are_not_read_without_exclude_they_are(root: Path) -> None:
    got = analyze_directory(str(root), select=_select, open_stream=Recorder)
    assert got.files["/excluded/x.txt"] == b"excluded"
    assert got.files["/app/gone.txt"] == b"excluded file"
    assert "/proc/x.txt" not in got.files
    assert got.members == 12


def test_streaming_from_a_directory_without_an_opener_is_a_layer_error(root: Path) -> None:
    with pytest.raises(LayerError) as err:
        analyze_directory(str(root), select=lambda p: STREAM if p == "/app/c.so" else SKIP)
    assert str(err.value) == "'/app/c.so' selected for streaming but nothing consumes it"


def test_a_file_that_cannot_be_opened_is_unreadable_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = tmp_path / "r"
    r.mkdir()
    (r / "ok.txt").write_bytes(b"ok")
    monkeypatch.chdir(r)  # a short relative name for the socket (sun_path is 108 bytes)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind("sock.txt")
        got = analyze_directory(str(r), select=lambda p: CAPTURE)
    finally:
        sock.close()
    assert got.files == {"/ok.txt": b"ok"}
    # opening a socket fails with ENXIO, whatever the user's privileges
    assert got.unreadable == [("/sock.txt", "cannot read: No such device or address")]
    assert got.members == 2


def test_root_level_files_have_root_level_paths(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"f")
    seen: list[str] = []

    def select(path: str) -> int:
        seen.append(path)
        return SKIP

    got = analyze_directory(str(tmp_path), select=select)
    assert seen == ["/f"]
    assert got.members == 1
    assert got.files == {}


# --- analyze_stream -------------------------------------------------------------------------


def _tar(entries: list[tuple[str, bytes]], links: tuple[tuple[str, bytes, str], ...] = ()) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, type_, target in links:
            info = tarfile.TarInfo(name)
            info.type = type_
            info.linkname = target
            tar.addfile(info)
    return buf.getvalue()


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_stream_analysis_records_links_whiteouts_and_the_computed_digest() -> None:
    tar = _tar(
        [
            ("app/a.txt", b"alpha"),
            ("app/.wh.old", b""),
            ("app/x/.wh..wh..opq", b""),
            (".wh.r", b""),
        ],
        (
            ("app/sym", tarfile.SYMTYPE, "../lib//x"),
            ("app/hard", tarfile.LNKTYPE, "./app//a.txt"),
            ("app/other", tarfile.SYMTYPE, "y"),
        ),
    )
    layer = gzip.compress(tar, mtime=0)
    select = {"/app/a.txt": CAPTURE | HASH, "/app/sym": LINK, "/app/hard": LINK}
    got = analyze_stream(
        io.BytesIO(layer), digest=None, size=None, select=lambda p: select.get(p, SKIP)
    )
    assert got.digest == _sha(layer)  # no digest given: the computed one
    assert got.diff_id == _sha(tar)
    assert got.size == len(tar)
    assert got.members == 7
    assert got.files == {"/app/a.txt": b"alpha"}
    assert got.hashes == {"/app/a.txt": _b64(b"alpha")}
    assert got.whiteouts == ["/app/old", "/r"]
    assert got.opaque == ["/app/x"]
    # a symlink's target as stored, a hard link's as an absolute normalised path
    assert got.links == {"/app/sym": "../lib//x", "/app/hard": "/app/a.txt"}


def test_stream_analysis_keeps_the_digest_it_was_given() -> None:
    layer = gzip.compress(_tar([("a", b"a")]), mtime=0)
    got = analyze_stream(
        io.BytesIO(layer), digest=_sha(layer), size=len(layer), select=lambda p: SKIP
    )
    assert got.digest == _sha(layer)


def test_stream_results_are_streamed_members_summaries() -> None:
    data = bytes(range(256)) * 20
    layer = _tar([("lib/x.so", data)])
    got = analyze_stream(
        io.BytesIO(layer),
        digest=None,
        size=None,
        select=lambda p: STREAM if p == "/lib/x.so" else SKIP,
        open_stream=Recorder,
        prefetch=False,
    )
    assert got.streamed == {
        "/lib/x.so": {"declared": 5120, "read": 5120, "sha256": hashlib.sha256(data).hexdigest()}
    }


def test_oversized_capture_is_reported_unreadable() -> None:
    layer = _tar([("m/METADATA", b"m" * 50), ("m/RECORD", b"r" * 10)])
    got = analyze_stream(
        io.BytesIO(layer),
        digest=None,
        size=None,
        select=lambda p: CAPTURE,
        limits=LayerLimits(max_capture=20),
    )
    assert got.files == {"/m/RECORD": b"r" * 10}
    assert got.unreadable == [("/m/METADATA", "50 bytes, above the metadata capture cap")]


def test_bare_whiteout_is_an_error_naming_the_layer_and_path() -> None:
    layer = _tar([("app/.wh.", b"")])
    digest = _sha(layer)
    with pytest.raises(LayerError) as err:
        analyze_stream(io.BytesIO(layer), digest=digest, size=None, select=lambda p: SKIP)
    assert str(err.value) == f"layer {digest}: bare whiteout '/app/.wh.' names nothing to remove"


def test_walk_errors_are_prefixed_with_the_layer_digest() -> None:
    layer = _tar([("app/a.txt", b"a" * 2000)])[:1500]
    digest = "sha256:" + "ab" * 32
    with pytest.raises(LayerError) as err:
        analyze_stream(io.BytesIO(layer), digest=digest, size=None, select=lambda p: CAPTURE)
    assert str(err.value) == f"layer {digest}: layer tar ends inside '/app/a.txt' (truncated)"
    assert isinstance(err.value.__cause__, LayerError)


def test_corrupt_gzip_is_a_layer_error_saying_cannot_decompress() -> None:
    good = bytearray(gzip.compress(_tar([("a", bytes(range(256)) * 40)]), mtime=0))
    good[20:40] = b"\xff" * 20
    digest = "sha256:" + "cd" * 32
    with pytest.raises(LayerError) as err:
        analyze_stream(io.BytesIO(bytes(good)), digest=None, size=None, select=lambda p: SKIP)
    assert str(err.value).startswith("layer None: cannot decompress: ")
    with pytest.raises(LayerError, match=f"^layer {digest}: cannot decompress: "):
        analyze_stream(io.BytesIO(bytes(good)), digest=digest, size=None, select=lambda p: SKIP)


def test_truncated_gzip_is_a_layer_error_quoting_the_inflater() -> None:
    layer = gzip.compress(_tar([("a", bytes(range(256)) * 40)]), mtime=0)[:-20]
    with pytest.raises(LayerError) as err:
        analyze_stream(io.BytesIO(layer), digest=None, size=None, select=lambda p: SKIP)
    assert str(err.value) == (
        "layer None: cannot decompress: compressed stream ended before the end-of-stream marker"
    )
    assert isinstance(err.value.__cause__, EOFError)


def test_corrupt_zstd_is_a_layer_error_saying_zstd() -> None:
    good = bytearray(zstandard.ZstdCompressor().compress(_tar([("a", bytes(range(256)) * 40)])))
    good[10:30] = b"\xff" * 20
    with pytest.raises(LayerError) as err:
        analyze_stream(io.BytesIO(bytes(good)), digest=None, size=None, select=lambda p: SKIP)
    assert str(err.value).startswith("layer None: cannot decompress zstd: ")
    assert type(err.value.__cause__).__module__.startswith("zstandard")


def test_other_errors_pass_through_unwrapped() -> None:
    def select(path: str) -> int:
        raise KeyError(path)

    with pytest.raises(KeyError):
        analyze_stream(io.BytesIO(_tar([("a", b"a")])), digest=None, size=None, select=select)


def test_diff_id_mismatch_names_both() -> None:
    tar = _tar([("a", b"a")])
    layer = gzip.compress(tar, mtime=0)
    wrong = _sha(b"another tar")
    with pytest.raises(BlobVerificationError) as err:
        analyze_stream(
            io.BytesIO(layer), digest=_sha(layer), size=None, select=lambda p: SKIP, diff_id=wrong
        )
    assert str(err.value) == (
        f"layer {_sha(layer)}: its uncompressed tar is {_sha(tar)}, "
        f"but the image config's diff_id is {wrong}"
    )


def _stage_threads() -> list[str]:
    names = {"blob-prefetch", "layer-inflate", "layer-hash"}
    return [t.name for t in threading.enumerate() if t.name in names and t.is_alive()]


def test_the_threaded_stages_hash_every_chunk_and_stop_when_the_walk_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Inflate, tar hash and walk run in threads of their own: the diff_id covers every
    inflated chunk in order (many small chunks here), and a walk that fails half-way leaves
    no stage thread running."""
    monkeypatch.setattr(blob, "OUT_CHUNK", 4096)
    entries = [(f"app/f{i}.bin", os.urandom(3000 + i)) for i in range(40)]
    tar = _tar(entries)
    layer = gzip.compress(tar, mtime=0)
    got = analyze_stream(
        io.BytesIO(layer),
        digest=_sha(layer),
        size=len(layer),
        select=lambda p: HASH,
        diff_id=_sha(tar),
    )
    assert got.diff_id == _sha(tar)
    assert got.hashes == {"/" + name: _b64(data) for name, data in entries}

    def select(path: str) -> int:
        if path.endswith("f20.bin"):
            raise KeyError(path)
        return SKIP

    with pytest.raises(KeyError):
        analyze_stream(
            io.BytesIO(layer),
            digest=_sha(layer),
            size=len(layer),
            select=select,
            diff_id=_sha(tar),
        )
    deadline = time.monotonic() + 2
    while _stage_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _stage_threads() == []


def test_matching_sha512_diff_id_is_computed_with_sha512() -> None:
    tar = _tar([("a", b"a")])
    want = "sha512:" + hashlib.sha512(tar).hexdigest()
    got = analyze_stream(
        io.BytesIO(tar), digest=None, size=None, select=lambda p: SKIP, diff_id=want
    )
    assert got.diff_id == want


def test_size_cap_and_bomb_ratio_fail_closed() -> None:
    tar = _tar([("z", bytes(50_000))])
    layer = gzip.compress(tar, mtime=0)
    with pytest.raises(LayerError) as err:
        analyze_stream(
            io.BytesIO(layer),
            digest="sha256:" + "0" * 64,
            size=None,
            select=lambda p: SKIP,
            limits=LayerLimits(max_size=len(tar) - 1),
        )
    assert str(err.value) == (
        f"layer sha256:{'0' * 64}: inflates past the {len(tar) - 1}-byte layer size cap"
    )
    exact = analyze_stream(
        io.BytesIO(layer),
        digest=None,
        size=None,
        select=lambda p: SKIP,
        limits=LayerLimits(max_size=len(tar)),
    )
    assert exact.size == len(tar)
    with pytest.raises(LayerError, match=r"inflates more than 10:1 \(\d+ bytes from \d+\)"):
        analyze_stream(
            io.BytesIO(layer),
            digest=None,
            size=None,
            select=lambda p: SKIP,
            prefetch=False,
            limits=LayerLimits(max_ratio=10, ratio_floor=1000),
        )
    # below the floor a high ratio is fine
    floor = analyze_stream(
        io.BytesIO(layer),
        digest=None,
        size=None,
        select=lambda p: SKIP,
        limits=LayerLimits(max_ratio=10, ratio_floor=len(tar)),
    )
    assert floor.size == len(tar)


def test_an_empty_analysis_is_empty() -> None:
    got = LayerAnalysis(digest="d")
    assert (got.files, got.members, got.size, got.diff_id) == ({}, 0, 0, "")
