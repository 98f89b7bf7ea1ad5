"""Raw layer blobs: verifying them while they stream, and inflating them.

Owns the byte level below the tar walk. ``Ahead`` runs a chunk iterator in a daemon thread,
a bounded few chunks ahead of its consumer. ``VerifyingReader`` hashes and counts a blob as it
is read (optionally a few chunks ahead in such a thread), never reading more than one byte
past the declared size (that byte is refused at once), and ``finish`` raises
``BlobVerificationError`` on a digest or size mismatch at the end of the stream, never a
partial pass. ``inflated_chunks`` sniffs the magic bytes and yields the decompressed tar in
large chunks: gzip (concatenated members allowed) through isal when present, else zlib; zstd
(several frames allowed) through zstandard; anything else as plain tar. Memory stays flat:
at most a few chunks are held at once whatever the blob size. ``Inflated`` records what was
seen on the way: the format, and whether a zstd blob ended in the zstd:chunked footer (a
skippable frame whose payload ends in ``GnUlInUx``, as containers/storage writes it).
``keep_chunk_memory`` tells glibc's allocator to reuse the freed chunk buffers instead of
handing each back to the kernel (which then faults in and zeroes fresh pages for the next).
"""

from __future__ import annotations

import hashlib
import queue
import struct
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol, cast

from pinguard.errors import BlobVerificationError

try:  # isal inflates about twice as fast as zlib; optional on non-CPython
    from isal import isal_zlib as _isal_zlib
except ImportError:  # pragma: no cover - exercised only without isal
    _isal_zlib = None  # type: ignore[assignment]

_ISAL_ERRORS: tuple[type[BaseException], ...] = (
    (cast(type[BaseException], _isal_zlib.error),) if _isal_zlib is not None else ()
)
#: What a corrupt compressed stream raises from the inflaters (zstandard's errors aside).
DECOMPRESS_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error, *_ISAL_ERRORS)

CHUNK = 1 << 20
PREFETCH_CHUNKS = 8  # raw chunks fetched and hashed ahead of the inflater
CLOSE_WAIT = 0.25  # seconds close() waits for a prefetch thread (see VerifyingReader.close)
IN_CHUNK = 1 << 20  # compressed bytes per read from the blob stream
OUT_CHUNK = 4 << 20  # decompressed bytes per chunk at most (memory stays flat)
ZSTD_CHUNKED_MAGIC = b"GnUlInUx"
# The zstd:chunked footer's payload: 40 bytes (containers/storage before 1.45, skopeo 1.9)
# or 64 (with the tar-split's position); a skippable frame adds 8 bytes of header.
_FOOTER_SIZES = (40, 64)
_SKIPPABLE = range(0x184D2A50, 0x184D2A60)


# glibc's mallopt parameters (malloc.h) and the values used: chunk buffers (a few MiB) come
# from the heap rather than from mmap, and up to KEEP_FREED bytes freed at the top of the heap
# are kept for the next chunk instead of being trimmed.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_ABOVE = 32 << 20
KEEP_FREED = 64 << 20


def keep_chunk_memory() -> bool:
    """Make glibc reuse freed chunk buffers (True when it took the settings).

    A chunk of ``OUT_CHUNK`` bytes is above glibc's initial mmap threshold, so every inflated
    chunk was a fresh mapping: a page fault and a zeroed page per 4 KiB, about a fifth of
    the inflate time (measured: 106,000 minor faults and 5.15 CPU s for the 1 GB benchmark
    image's four layers in one process; 12,800 and 4.67 s with these settings, peak RSS the
    same). The settings are process-wide and inherited by forked workers; elsewhere
    (another C library, no ``mallopt``) nothing changes."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # here: an audit that reads no layer (a warm one) never loads it

    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_ABOVE)) and bool(
        mallopt(_M_TRIM_THRESHOLD, KEEP_FREED)
    )


@dataclass
class Inflated:
    """What ``inflated_chunks`` saw of a blob: its format and, for zstd, its last bytes."""

    format: str = ""  # "gzip", "zstd" or "tar"
    tail: bytes = b""  # a zstd blob's last raw bytes (up to 72), to recognise the footer

    @property
    def zstd_chunked(self) -> bool:
        """Whether the blob ended in a zstd:chunked footer frame."""
        if self.format != "zstd" or not self.tail.endswith(ZSTD_CHUNKED_MAGIC):
            return False
        for size in _FOOTER_SIZES:
            start = len(self.tail) - size - 8
            if start >= 0:
                magic, length = struct.unpack_from("<II", self.tail, start)
                if magic in _SKIPPABLE and length == size:
                    return True
        return False


class _TailReader:
    """Passes reads through and keeps the last ``keep`` bytes read."""

    def __init__(self, raw: Readable, info: Inflated, keep: int = 72) -> None:
        self._raw = raw
        self._info = info
        self._keep = keep

    def read(self, n: int = -1, /) -> bytes:
        data = self._raw.read(n)
        if data:
            self._info.tail = (self._info.tail + data)[-self._keep :]
        return data


class Readable(Protocol):
    """The one method the inflaters and the tar walk need from a stream."""

    def read(self, n: int = -1, /) -> bytes: ...


class Ahead:
    """Runs an iterator of byte chunks in a daemon thread, at most ``depth`` chunks ahead of
    its consumer (the queue is bounded, so memory stays flat).

    What the thread does in C (socket reads, ``hashlib``, isal, zstandard) releases the GIL,
    so it overlaps with the consumer's Python. An exception the iterator raises is handed to
    the consumer, at this and every later ``next``; so is the end. ``close`` stops the thread
    without draining the iterator, and wakes a consumer blocked on this queue (it gets
    ``AheadClosed``): a chain of them stops from any end."""

    def __init__(self, items: Iterator[bytes], depth: int, name: str) -> None:
        self._items = items
        self._queue: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._pump, name=name, daemon=True)
        self.thread.start()

    def _put(self, item: bytes | BaseException | None) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _pump(self) -> None:
        try:
            for item in self._items:
                if self._stop.is_set() or not self._put(item):
                    return
            self._put(None)
        except BaseException as exc:  # handed to the consumer
            self._put(exc)

    def __iter__(self) -> Ahead:
        return self

    def __next__(self) -> bytes:
        while True:
            try:
                item = self._queue.get(timeout=0.1)
                break
            except queue.Empty:
                if self._stop.is_set():
                    raise AheadClosed(self.thread.name) from None
        if item is None:
            self._queue.put(None)  # stay at the end for later calls
            raise StopIteration
        if isinstance(item, BaseException):
            self._queue.put(item)
            raise item
        return item

    def close(self) -> None:
        """Stop the thread; wait for it at most ``CLOSE_WAIT`` (see ``VerifyingReader.close``)."""
        self._stop.set()
        self.thread.join(CLOSE_WAIT)


class AheadClosed(Exception):
    """Raised to a consumer still waiting on an ``Ahead`` that was closed."""


class VerifyingReader:
    """Reads a raw blob while hashing it; ``finish`` drains the rest and checks it.

    Every blob is hashed against its declared digest, whatever else proves its content (a
    layer's diff_id proves the tar, not the bytes that were fetched: a blob with another
    gzip header that inflates to the same tar is another blob, and containerd and
    go-containerregistry refuse it). With ``prefetch`` a background thread (``Ahead``)
    fetches and hashes the blob a few chunks ahead (socket reads and ``hashlib`` release the
    GIL), so fetching and hashing overlap with inflating, hashing the tar and walking in the
    other threads. The queue is bounded, so memory stays flat whatever the blob size.
    ``label`` (``"layer 2"``) says in each error which of the image's blobs it is.
    """

    def __init__(
        self,
        raw: BinaryIO,
        digest: str | None,
        size: int | None,
        progress: Callable[[int], None] | None = None,
        *,
        prefetch: bool = False,
        label: str = "",
    ) -> None:
        self._raw = raw
        self._digest = digest
        self._size = size
        self._progress = progress
        self._what = f"blob {digest} of {label}" if label else f"blob {digest}"
        algo = digest.split(":", 1)[0] if digest else "sha256"
        if algo not in {"sha256", "sha512"}:
            raise BlobVerificationError(f"unsupported digest algorithm in {digest!r}")
        self.algorithm = algo  # what the blob is hashed with (the declared digest's)
        self._hash = hashlib.new(algo)
        self.count = 0
        self._pending = b""
        self._ahead: Ahead | None = None
        self._thread: threading.Thread | None = None
        if prefetch:
            chunks = iter(lambda: self._take(CHUNK), b"")
            self._ahead = Ahead(chunks, PREFETCH_CHUNKS, "blob-prefetch")
            self._thread = self._ahead.thread

    def _take(self, n: int) -> bytes:
        """Read, hash and count up to ``n`` raw bytes (in whichever thread fetches).

        With a declared size, never more than one byte past it is asked for: that byte is
        enough to refuse the blob, and a source that sends it and then stalls is not
        waited on for the rest of a larger read."""
        if self._size is not None:
            left = self._size + 1 - self.count
            n = left if n < 0 else min(n, left)
        data = self._raw.read(n)
        if data:
            self._hash.update(data)
            self.count += len(data)
            if self._size is not None and self.count > self._size:
                raise BlobVerificationError(
                    f"{self._what} is larger than its declared size {self._size}"
                )
            if self._progress is not None:
                self._progress(len(data))
        return data

    def read(self, n: int = -1, /) -> bytes:
        if self._ahead is None:
            return self._take(n)
        if not self._pending:
            self._pending = next(self._ahead, b"")
            if not self._pending:
                return b""
        if n < 0 or n >= len(self._pending):
            data, self._pending = self._pending, b""
        else:
            data, self._pending = self._pending[:n], self._pending[n:]
        return data

    def close(self) -> None:
        """Stop the prefetch thread (if any) without waiting for the rest of the blob.

        A thread waiting to hand over a chunk stops within 0.1 s. One blocked inside a read
        of a stalled connection cannot be woken, so it is left after ``CLOSE_WAIT``: it is a
        daemon thread, and whatever its read returns is dropped (it never hands anything
        over once stopped). Waiting for it would tie Ctrl-C, or the end of an audit that
        already failed, to the registry's read timeout."""
        if self._ahead is not None:
            self._ahead.close()

    def finish(self) -> str:
        """Drain what is left, then verify size and digest; return the computed digest."""
        while self.read(CHUNK):
            pass
        if self._thread is not None:
            self._thread.join()
        if self._size is not None and self.count != self._size:
            raise BlobVerificationError(
                f"{self._what}: read {self.count} bytes, expected {self._size}"
            )
        got = f"{self._hash.name}:{self._hash.hexdigest()}"
        if self._digest is not None and got != self._digest:
            raise BlobVerificationError(f"{self._what}: expected {self._digest}, got {got}")
        return got


class _PeekReader:
    """Lets the decompressor be chosen from the first bytes without losing them."""

    def __init__(self, raw: Readable, head: bytes) -> None:
        self._raw = raw
        self._head = head

    def read(self, n: int = -1, /) -> bytes:
        if self._head:
            if n < 0:
                data = self._head + self._raw.read()
                self._head = b""
                return data
            data, self._head = self._head[:n], self._head[n:]
            return data
        return self._raw.read(n)


def read_chunks(reader: Readable, size: int | None = None) -> Iterator[bytes]:
    """``reader``'s bytes in chunks of ``size`` (default ``CHUNK``, looked up at call time)."""
    size = CHUNK if size is None else size
    while True:
        chunk = reader.read(size)
        if not chunk:
            return
        yield chunk


def _gunzip_chunks(raw: Readable, data: bytes) -> Iterator[bytes]:
    """Inflate concatenated gzip members (zero padding between them allowed, as in gzip)."""
    lib: Any = _isal_zlib if _isal_zlib is not None else zlib
    d = lib.decompressobj(31)
    fed = False
    while True:
        if not data:
            data = raw.read(IN_CHUNK)
            if not data:
                if fed:
                    raise EOFError("compressed stream ended before the end-of-stream marker")
                return
        fed = True
        out = d.decompress(data, OUT_CHUNK)
        if out:
            yield out
        while len(out) == OUT_CHUNK and not d.eof:  # more output may be pending
            out = d.decompress(d.unconsumed_tail, OUT_CHUNK)
            if out:
                yield out
        if d.eof:
            data = d.unused_data.lstrip(b"\0")
            d = lib.decompressobj(31)
            fed = False
            while not data:
                more = raw.read(IN_CHUNK)
                if not more:
                    return
                data = more.lstrip(b"\0")
        else:
            data = d.unconsumed_tail


def _unzstd_chunks(raw: Readable, data: bytes, info: Inflated) -> Iterator[bytes]:
    import zstandard

    source = _TailReader(_PeekReader(raw, data), info)
    reader = zstandard.ZstdDecompressor().stream_reader(
        cast(Any, source), read_size=IN_CHUNK, read_across_frames=True
    )
    while True:
        out = reader.read(OUT_CHUNK)
        if not out:
            return
        yield out


def inflated_chunks(raw: Readable, info: Inflated | None = None) -> Iterator[bytes]:
    """The decompressed bytes of ``raw`` (gzip, zstd or plain, sniffed) in large chunks.

    ``info``, when given, is filled in as the stream is read (see ``Inflated``)."""
    info = info if info is not None else Inflated()
    head = raw.read(IN_CHUNK)
    while 0 < len(head) < 4:  # short reads from a socket-like source
        more = raw.read(IN_CHUNK)
        if not more:
            break
        head += more
    if head[:2] == b"\x1f\x8b":
        info.format = "gzip"
        return _gunzip_chunks(raw, head)
    if head[:4] == b"\x28\xb5\x2f\xfd":
        info.format = "zstd"
        return _unzstd_chunks(raw, head, info)
    info.format = "tar"

    def plain() -> Iterator[bytes]:
        if head:
            yield head
        yield from read_chunks(raw, IN_CHUNK)

    return plain()
