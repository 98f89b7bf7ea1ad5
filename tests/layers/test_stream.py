"""Streaming a member's content to an analyzer while the layer walk passes over it.

A consumer asked for a big member gets its content chunk by chunk (never more than one
inflated chunk at a time, so memory stays flat) and the bytes it sees are the bytes
``tarfile`` extracts; STREAM combines with HASH and CAPTURE; the registry hands each
analyzer only what it asked for and keeps its result by analyzer name, through the layer
analysis, the state (a whiteout removes it) and the directory walk alike.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from pinguard.audit.state import State
from pinguard.catalog import Analyzer, AnalyzerOptions, Analyzers, AnalyzerSession, StateView
from pinguard.catalog.interface import SnapshotParts
from pinguard.catalog.python import PythonAnalyzer
from pinguard.errors import LayerError
from pinguard.layers import blob
from pinguard.layers.analysis import LayerAnalysis, analyze_directory, analyze_stream
from pinguard.layers.tar import CAPTURE, HASH, SKIP, STREAM, MemberStream, walk_tar
from pinguard.testing.images import layer_tar

BIG = "usr/lib/x86_64-linux-gnu/libbig.so.2"
SMALL = "usr/lib/x86_64-linux-gnu/libsmall.so"


def _content(n: int) -> bytes:
    return b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(n // 32 + 1))[:n]


def _tar(members: dict[str, bytes]) -> bytes:
    return layer_tar(members)


def _extracted(tar_bytes: bytes) -> dict[str, bytes]:
    """What tarfile reads: the independent expectation."""
    out = {}
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        for m in tar:
            f = tar.extractfile(m)
            if f is not None:
                out["/" + m.name] = f.read()
    return out


class Recorder:
    """Keeps a digest, a byte count and the largest chunk; holds none of the content."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.total = 0
        self.largest = 0
        self.closed = False

    def update(self, chunk: memoryview, /) -> None:
        self.h.update(chunk)
        self.total += len(chunk)
        self.largest = max(self.largest, len(chunk))

    def close(self) -> object:
        self.closed = True
        return {"sha256": self.h.hexdigest(), "bytes": self.total}


def test_big_member_is_streamed_in_bounded_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 5 MB member reaches its consumer whole, in chunks no larger than one inflated chunk."""
    monkeypatch.setattr(blob, "OUT_CHUNK", 256 * 1024)
    members = {BIG: _content(5 * 1024 * 1024 + 7), SMALL: _content(1000), "etc/x": b"x"}
    tar_bytes = _tar(members)
    opened: dict[str, Recorder] = {}

    def open_stream(path: str, size: int) -> MemberStream:
        assert size == len(members[path[1:]])
        opened[path] = Recorder()
        return opened[path]

    def select(path: str) -> int:
        return STREAM if ".so" in path else SKIP

    blob_bytes = gzip.compress(tar_bytes, mtime=0)
    analysis = analyze_stream(
        io.BytesIO(blob_bytes),
        digest="sha256:" + hashlib.sha256(blob_bytes).hexdigest(),
        size=len(blob_bytes),
        select=select,
        open_stream=open_stream,
    )
    want = _extracted(tar_bytes)
    assert sorted(opened) == ["/" + BIG, "/" + SMALL]
    for path, rec in opened.items():
        assert rec.closed
        assert rec.total == len(want[path])
        assert rec.h.hexdigest() == hashlib.sha256(want[path]).hexdigest()
        assert analysis.streamed[path] == {"sha256": rec.h.hexdigest(), "bytes": rec.total}
    assert opened["/" + BIG].largest <= 256 * 1024
    assert analysis.files == {}
    assert analysis.hashes == {}


@pytest.mark.parametrize("extra", [HASH, CAPTURE, CAPTURE | HASH])
def test_stream_combines_with_hash_and_capture(extra: int) -> None:
    """STREAM|HASH and STREAM|CAPTURE give the consumer the bytes and keep the rest too."""
    data = _content(70_000)
    tar_bytes = _tar({SMALL: data})
    rec = Recorder()
    (member,) = walk_tar(io.BytesIO(tar_bytes), lambda p: STREAM | extra, lambda p, n: rec)
    assert rec.h.digest() == hashlib.sha256(data).digest()
    assert member.streamed == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    assert (member.data == data) is bool(extra & CAPTURE)
    assert (member.digest is not None) is bool(extra & HASH)


def test_stream_without_a_consumer_is_an_error() -> None:
    """Asking to stream with nothing to consume the stream fails loudly, naming the path."""
    with pytest.raises(LayerError, match="libsmall"):
        list(walk_tar(io.BytesIO(_tar({SMALL: b"abc"})), lambda p: STREAM))


@dataclass(frozen=True, slots=True)
class SharedObjects(Analyzer):
    """A minimal streaming analyzer: the size and digest of each shared object."""

    name = "shared-objects"
    version = "test"

    @classmethod
    def create(cls, options: AnalyzerOptions) -> SharedObjects:
        return cls()

    def wants(self, path: str) -> int:
        return STREAM if ".so" in path.rsplit("/", 1)[-1] else SKIP

    def open_stream(self, path: str, size: int) -> MemberStream:
        return Recorder()

    def session(self) -> AnalyzerSession:
        return _Seen()


class _Seen(AnalyzerSession):
    def __init__(self) -> None:
        self.touched: list[str] = []
        self.streamed: dict[str, object] = {}

    def update(self, state: StateView, touched: Sequence[str]) -> None:
        self.touched.extend(touched)
        self.streamed = {p: r["shared-objects"] for p, r in state.streamed.items()}

    def contribute(self, state: StateView, parts: SnapshotParts) -> None:
        pass


def _analyzers() -> Analyzers:
    return Analyzers.for_options(AnalyzerOptions(), classes=(PythonAnalyzer, SharedObjects))


def _stream(tar_bytes: bytes, analyzers: Analyzers) -> LayerAnalysis:
    return analyze_stream(
        io.BytesIO(tar_bytes),
        digest=None,
        size=None,
        select=analyzers.selector(),
        open_stream=analyzers.open_stream,
    )


def test_registry_routes_streams_and_state_keeps_them() -> None:
    """Only the asking analyzer is fed; its result reaches its session, keyed by name, until
    a whiteout removes the file."""
    analyzers = _analyzers()
    data = _content(300_000)
    first = _stream(_tar({BIG: data, "usr/lib/x86_64-linux-gnu/notes.txt": b"n"}), analyzers)
    want = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    assert first.streamed == {"/" + BIG: {"shared-objects": want}}
    state = State(analyzers)
    state.apply(first)
    session = state.catalog._sessions[1]
    assert isinstance(session, _Seen)
    assert session.streamed == {"/" + BIG: want}
    assert "/" + BIG in session.touched
    second = _stream(_tar({"usr/lib/.wh.x86_64-linux-gnu": b""}), analyzers)
    state.apply(second)
    assert state.streamed == {}
    assert session.streamed == {}


def test_directory_walk_streams_the_same(tmp_path: Path) -> None:
    """The directory walk feeds the same consumers the same bytes."""
    analyzers = _analyzers()
    data = _content(123_457)
    lib = tmp_path / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libbig.so.2").write_bytes(data)
    analysis = analyze_directory(
        str(tmp_path), select=analyzers.selector(), open_stream=analyzers.open_stream
    )
    want = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    assert analysis.streamed == {"/" + BIG: {"shared-objects": want}}


def test_analyzer_names_must_be_unique() -> None:
    """Two analyzers under one name would overwrite each other's results: refused."""
    with pytest.raises(ValueError, match="unique"):
        Analyzers.for_options(AnalyzerOptions(), classes=(SharedObjects, SharedObjects))
