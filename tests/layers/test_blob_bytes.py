"""Blob bytes: digest and size checks while streaming, and inflating gzip, zstd and plain tar.

Each case feeds ``pinguard.layers.blob`` hand-made bytes and compares with an independent
source: digests from ``hashlib`` over the same bytes, compressed streams made by ``gzip``,
``zlib`` and ``zstandard``, and the original payload they were made from. Readers that hand
out a few bytes at a time stand in for sockets with short reads.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import time
import zlib

import pytest
import zstandard

from pinguard.errors import BlobVerificationError
from pinguard.layers import blob
from pinguard.layers.blob import (
    DECOMPRESS_ERRORS,
    VerifyingReader,
    inflated_chunks,
    read_chunks,
)

PAYLOAD = bytes(range(256)) * 64 + b"tail of the payload\n"  # 16404 bytes


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Trickle:
    """A socket-like stream: at most ``step`` bytes per read whatever was asked."""

    def __init__(self, data: bytes, step: int = 1) -> None:
        self._data = data
        self._step = step
        self.asked: list[int] = []

    def read(self, n: int = -1, /) -> bytes:
        self.asked.append(n)
        take = self._step if n < 0 else min(n, self._step)
        out, self._data = self._data[:take], self._data[take:]
        return out


# --- VerifyingReader -------------------------------------------------------------------


@pytest.mark.parametrize("prefetch", [False, True])
def test_matching_digest_and_size_return_hashlibs_digest(prefetch: bool) -> None:
    reader = VerifyingReader(io.BytesIO(PAYLOAD), _sha256(PAYLOAD), len(PAYLOAD), prefetch=prefetch)
    assert reader.read(10) == PAYLOAD[:10]
    assert reader.finish() == _sha256(PAYLOAD)
    assert reader.count == 16404


def test_sha512_digests_are_checked_with_sha512() -> None:
    want = "sha512:" + hashlib.sha512(PAYLOAD).hexdigest()
    assert VerifyingReader(io.BytesIO(PAYLOAD), want, None).finish() == want


def test_without_a_digest_sha256_is_computed_and_nothing_is_compared() -> None:
    reader = VerifyingReader(io.BytesIO(b"abc"), None, None)
    assert reader.finish() == (
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


@pytest.mark.parametrize("digest", ["md5:0123", "SHA256:00", "blake2b:00"])
def test_unsupported_digest_algorithm_is_refused_by_name(digest: str) -> None:
    with pytest.raises(BlobVerificationError) as err:
        VerifyingReader(io.BytesIO(b""), digest, None)
    assert str(err.value) == f"unsupported digest algorithm in {digest!r}"


@pytest.mark.parametrize("prefetch", [False, True])
def test_wrong_digest_names_both_digests(prefetch: bool) -> None:
    wrong = _sha256(b"other bytes")
    reader = VerifyingReader(io.BytesIO(PAYLOAD), wrong, len(PAYLOAD), prefetch=prefetch)
    with pytest.raises(BlobVerificationError) as err:
        reader.finish()
    assert str(err.value) == f"blob {wrong}: expected {wrong}, got {_sha256(PAYLOAD)}"


@pytest.mark.parametrize("prefetch", [False, True])
def test_short_blob_names_the_count_and_the_declared_size(prefetch: bool) -> None:
    digest = _sha256(PAYLOAD)
    reader = VerifyingReader(io.BytesIO(PAYLOAD), digest, len(PAYLOAD) + 1, prefetch=prefetch)
    with pytest.raises(BlobVerificationError) as err:
        reader.finish()
    assert str(err.value) == f"blob {digest}: read 16404 bytes, expected 16405"


def test_longer_blob_fails_on_the_read_that_passes_the_declared_size() -> None:
    digest = _sha256(b"abcdef")
    reader = VerifyingReader(io.BytesIO(b"abcdef"), digest, 5)
    assert reader.read(5) == b"abcde"  # exactly the declared size is fine
    with pytest.raises(BlobVerificationError) as err:
        reader.read(1)
    assert str(err.value) == f"blob {digest} is larger than its declared size 5"


def test_prefetch_hands_the_size_error_to_every_later_read() -> None:
    reader = VerifyingReader(io.BytesIO(b"abcdef"), None, 5, prefetch=True)
    for _ in range(2):
        with pytest.raises(BlobVerificationError, match="larger than its declared size 5"):
            reader.read()
    reader.close()


def test_progress_is_told_each_read_length() -> None:
    seen: list[int] = []
    reader = VerifyingReader(io.BytesIO(b"x" * 10), None, 10, seen.append)
    assert reader.read(4) == b"xxxx"
    assert reader.read(4) == b"xxxx"
    assert reader.read(4) == b"xx"
    assert reader.read(4) == b""
    assert seen == [4, 4, 2]
    assert reader.count == 10


def test_prefetch_reads_in_chunks_and_slices_them_for_small_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(blob, "CHUNK", 7)
    seen: list[int] = []
    reader = VerifyingReader(io.BytesIO(b"0123456789abcdef"), None, 16, seen.append, prefetch=True)
    assert reader.read(3) == b"012"
    assert reader.read(3) == b"345"
    assert reader.read(3) == b"6"  # the rest of the first 7-byte chunk, never across it
    assert reader.read(-1) == b"789abcd"
    assert reader.read(7) == b"ef"
    assert reader.read(7) == b""
    assert reader.read(7) == b""  # stays at EOF
    assert reader.finish() == _sha256(b"0123456789abcdef")
    assert seen == [7, 7, 2]


def test_close_stops_prefetch_without_reading_the_whole_blob(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(blob, "CHUNK", 1000)
    reader = VerifyingReader(io.BytesIO(b"z" * 1_000_000), None, None, prefetch=True)
    assert reader.read(1000) == b"z" * 1000
    # wait until the pump is blocked: one chunk handed out, PREFETCH_CHUNKS queued, one more
    # taken and waiting for room in the queue
    deadline = time.monotonic() + 10
    while reader.count < 10_000 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reader.count == (1 + blob.PREFETCH_CHUNKS + 1) * 1000
    thread = reader._thread
    assert thread is not None
    # named for thread dumps; a daemon, so a reader dropped without close never holds the
    # interpreter open at exit
    assert (thread.name, thread.daemon) == ("blob-prefetch", True)
    reader.close()  # must not wait for room that never comes
    assert reader._thread is not None
    assert not reader._thread.is_alive()
    assert reader.count == 10_000


def test_a_consumer_slower_than_the_pump_still_gets_the_whole_blob(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(blob, "CHUNK", 1000)
    data = bytes(range(250)) * 100  # 25 chunks
    reader = VerifyingReader(io.BytesIO(data), _sha256(data), len(data), prefetch=True)
    deadline = time.monotonic() + 10
    while reader.count < 9_000 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reader.count == (blob.PREFETCH_CHUNKS + 1) * 1000  # 8 queued, 1 waiting
    time.sleep(0.3)  # the pump has found the queue full for a while
    got = b"".join(read_chunks(reader, 1000))
    assert got == data
    assert reader.finish() == _sha256(data)


@pytest.mark.parametrize("prefetch", [False, True])
def test_read_of_zero_bytes_returns_nothing_and_loses_nothing(prefetch: bool) -> None:
    reader = VerifyingReader(io.BytesIO(b"abcdef"), None, 6, prefetch=prefetch)
    assert reader.read(2) == b"ab"
    assert reader.read(0) == b""
    assert reader.read(10) == b"cdef"
    assert reader.finish() == _sha256(b"abcdef")


def test_only_the_part_before_the_first_colon_names_the_algorithm() -> None:
    odd = "sha256:ab:cd"
    reader = VerifyingReader(io.BytesIO(b"x"), odd, None)  # sha256, and a digest that fails
    with pytest.raises(BlobVerificationError, match="blob sha256:ab:cd: expected sha256:ab:cd"):
        reader.finish()


# --- read_chunks ------------------------------------------------------------------------


def test_read_chunks_splits_at_the_given_size() -> None:
    assert list(read_chunks(io.BytesIO(b"abcdefgh"), 3)) == [b"abc", b"def", b"gh"]
    assert list(read_chunks(io.BytesIO(b""), 3)) == []


def test_read_chunks_default_size_is_chunk_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blob, "CHUNK", 4)
    assert list(read_chunks(io.BytesIO(b"abcdefghij"))) == [b"abcd", b"efgh", b"ij"]


# --- inflated_chunks --------------------------------------------------------------------


def _inflate(raw: blob.Readable) -> bytes:
    return b"".join(inflated_chunks(raw))


def test_plain_bytes_pass_through_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blob, "IN_CHUNK", 5)
    chunks = list(inflated_chunks(io.BytesIO(b"0123456789abc")))
    assert chunks == [b"01234", b"56789", b"abc"]


def test_empty_blob_inflates_to_nothing() -> None:
    assert list(inflated_chunks(io.BytesIO(b""))) == []


def test_magic_is_gathered_across_short_reads() -> None:
    assert _inflate(Trickle(zstandard.ZstdCompressor().compress(PAYLOAD))) == PAYLOAD
    assert _inflate(Trickle(gzip.compress(PAYLOAD), step=3)) == PAYLOAD


def test_short_plain_blob_ending_before_four_bytes_is_kept() -> None:
    assert _inflate(Trickle(b"ab")) == b"ab"
    assert _inflate(Trickle(b"\x1f")) == b"\x1f"


def test_near_magic_is_plain() -> None:
    assert _inflate(io.BytesIO(b"\x1f\x8a" + PAYLOAD)) == b"\x1f\x8a" + PAYLOAD
    assert _inflate(io.BytesIO(b"\x28\xb5\x2f\xfe" + PAYLOAD)) == b"\x28\xb5\x2f\xfe" + PAYLOAD


def test_gzip_member_inflates_to_the_original() -> None:
    assert _inflate(io.BytesIO(gzip.compress(PAYLOAD))) == PAYLOAD


def test_concatenated_gzip_members_with_zero_padding_inflate_in_order() -> None:
    stream = (
        gzip.compress(b"first ")
        + b"\0" * 3
        + gzip.compress(b"second ")
        + gzip.compress(b"third")
        + b"\0" * 10
    )
    assert _inflate(io.BytesIO(stream)) == b"first second third"
    assert gzip.decompress(stream) == b"first second third"  # gzip agrees


def test_gzip_members_arriving_in_small_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blob, "IN_CHUNK", 4)
    stream = gzip.compress(PAYLOAD) + b"\0\0" + gzip.compress(b"second") + b"\0" * 9
    assert _inflate(io.BytesIO(stream)) == PAYLOAD + b"second"


def test_gzip_output_comes_in_chunks_of_at_most_out_chunk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(blob, "OUT_CHUNK", 1000)
    data = b"a" * 10_500 + PAYLOAD
    chunks = list(inflated_chunks(io.BytesIO(gzip.compress(data) + gzip.compress(b"end"))))
    assert b"".join(chunks) == data + b"end"
    assert max(len(c) for c in chunks) == 1000
    # the compressible run comes out in full chunks, not only as much as one read allows
    assert [len(c) for c in chunks[:10]] == [1000] * 10


def test_truncated_gzip_is_an_eof_error() -> None:
    stream = gzip.compress(PAYLOAD)[:-12]
    with pytest.raises(EOFError) as err:
        _inflate(io.BytesIO(stream))
    assert str(err.value) == "compressed stream ended before the end-of-stream marker"


def test_truncated_second_gzip_member_is_an_eof_error() -> None:
    stream = gzip.compress(b"one") + gzip.compress(PAYLOAD)[:30]
    with pytest.raises(EOFError):
        _inflate(io.BytesIO(stream))


@pytest.mark.parametrize("in_chunk", [4, 1 << 20])
def test_garbage_after_a_gzip_member_is_not_padding(
    in_chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only NUL bytes may pad between members; anything else must start a valid member."""
    monkeypatch.setattr(blob, "IN_CHUNK", in_chunk)
    member = gzip.compress(b"first")
    with pytest.raises(DECOMPRESS_ERRORS):
        _inflate(io.BytesIO(member + b"\0\0XXXX"))
    with pytest.raises(DECOMPRESS_ERRORS):
        _inflate(io.BytesIO(member + b"X"))
    with pytest.raises(gzip.BadGzipFile):  # gzip agrees
        gzip.decompress(member + b"\0\0XXXX")


def test_corrupt_gzip_raises_a_listed_decompress_error() -> None:
    good = bytearray(gzip.compress(PAYLOAD))
    good[12:20] = b"\xff" * 8  # garbage in the deflate data
    with pytest.raises(DECOMPRESS_ERRORS):
        _inflate(io.BytesIO(bytes(good)))


def test_decompress_errors_cover_the_stdlib_inflaters() -> None:
    assert {OSError, EOFError, zlib.error} <= set(DECOMPRESS_ERRORS)


def test_zstd_frames_inflate_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blob, "OUT_CHUNK", 1000)
    c = zstandard.ZstdCompressor()
    chunks = list(inflated_chunks(io.BytesIO(c.compress(PAYLOAD) + c.compress(b"second"))))
    assert b"".join(chunks) == PAYLOAD + b"second"
    # full chunks across the frame boundary: 16410 bytes in 17 reads
    assert [len(c) for c in chunks] == [1000] * 16 + [410]


def test_zstd_reads_the_blob_in_in_chunk_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blob, "IN_CHUNK", 1000)
    data = hashlib.sha512(b"seed").digest() * 2000  # 128000 bytes, barely compressible
    raw = Trickle(zstandard.ZstdCompressor(level=1).compress(data), step=1 << 20)
    assert _inflate(raw) == data
    assert set(raw.asked) == {1000}


def test_peek_reader_returns_the_head_first_then_the_stream() -> None:
    peek = blob._PeekReader(io.BytesIO(b"rest"), b"head")
    assert peek.read(3) == b"hea"
    assert peek.read(3) == b"d"
    assert peek.read(3) == b"res"
    assert peek.read(-1) == b"t"
    zero = blob._PeekReader(io.BytesIO(b"rest"), b"head")
    assert zero.read(0) == b""
    assert zero.read(5) == b"head"
    whole = blob._PeekReader(io.BytesIO(b"rest"), b"head")
    assert whole.read() == b"headrest"
    assert whole.read() == b""


def test_keep_chunk_memory_takes_glibcs_settings_on_linux() -> None:
    """On Linux with glibc the allocator settings are accepted (False would mean no effect)."""
    import sys

    from pinguard.layers.blob import keep_chunk_memory

    if not sys.platform.startswith("linux"):
        assert keep_chunk_memory() is False
        return
    assert keep_chunk_memory() is True
