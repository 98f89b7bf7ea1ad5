"""Lazy reads of zstd:chunked layers: the table of contents, and only the bytes analyzers need.

A zstd:chunked layer (containers/storage's chunked compressor: skopeo
``--dest-compress-format zstd:chunked``, podman, buildah) compresses every file's content in
its own zstd frames, cut into chunks at rolling-checksum boundaries, and appends a table of
contents (TOC: every tar entry's type, name, link, size, sha256, and the compressed offsets
of each file and chunk, with each chunk's sha256) in a zstd skippable frame. The layer
descriptor's annotation ``io.github.containers.zstd-chunked.manifest-position`` (the older
``io.containers.`` prefix in skopeo 1.9) says where (``offset:length:uncompressed:type``) and
``...manifest-checksum`` gives the sha256 of the compressed TOC, so the manifest, verified by
digest, authenticates the TOC.

``analyze_chunked`` fetches the TOC with one range read, checks it against the checksum,
builds the member list the layer analysis needs from it in one walk over the parsed entries
(types, links, whiteouts, opaque directories, repeated paths; a file no analyzer selects
costs a name check and leaves no object behind, its chunk entries skipped), and reads only
the chunks of the files the selector wants: whole files to CAPTURE or to STREAM to a
consumer that cannot read parts, and, for a consumer that can (``PartReader``: ELF heads,
program headers, dynamic sections and strings), only the chunks holding the parts it asks
for, round after round for every such file at once.
Close ranges are merged (``MERGE_GAP``) and fetched in batches of at most ``BATCH`` bytes.
Every chunk read is inflated and checked against the TOC's sha256 of that chunk (a file
stored without chunks: against the file's sha256), and every file read whole against the
file's sha256. HASH is answered with the TOC's sha256 of the file, unread: a RECORD entry
stating that digest is then proven by the TOC alone.

Before any chunk is fetched, the TOC is checked against itself and, where it names one, its
tar-split (``_check_places``, ``_check_tar_split``). The places it gives file content in the
blob must be what containers/storage's compressor writes: every stored piece (a file stored
whole, or each chunk of a file in chunks) in bytes of its own, before the TOC, no two pieces
in one range and none overlapping another. A TOC with a tar-split (containers/storage 1.47
and later; skopeo 1.9 writes none) must list exactly the tar-split's entries, with the same
names, types and sizes, as containers/storage requires before a partial pull. A TOC that
fails these, although the manifest's checksum vouches for it, is a lie the manifest signs:
``TocLie`` (exit 3) refuses the image, as containers/storage fails the pull, rather than
reading the layer in full, since the full read ignores the TOC and could pass an image whose
TOC shows other readers other files.

What this does not prove: the layer's DiffID. Only the whole tar hashes to it, and nothing
here reads the whole tar (a tar-split gives every header, not the files' bytes). The
analysis says so (``LayerAnalysis.lazy``, with what was verified and the bytes read);
whether a lazy read is acceptable is the caller's choice. A layer without a TOC, a TOC or
tar-split that does not match its checksum or does not parse, or any chunk that does not
verify raises ``LazyUnavailable``: the caller then streams the layer whole.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import io
import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pinguard.errors import LayerError
from pinguard.layers.analysis import WHITEOUT, LayerAnalysis, LayerLimits, record_member
from pinguard.layers.names import SPILL_CHECK, MemberNames
from pinguard.layers.tar import (
    CAPTURE,
    HASH,
    LINK,
    STREAM,
    Member,
    MemberStream,
    PartOpener,
    PartReader,
    Selector,
    StreamOpener,
    _path,
    normalize,
)

POSITION_KEYS = (
    "io.github.containers.zstd-chunked.manifest-position",
    "io.containers.zstd-chunked.manifest-position",
)
CHECKSUM_KEYS = (
    "io.github.containers.zstd-chunked.manifest-checksum",
    "io.containers.zstd-chunked.manifest-checksum",
)
#: Where containers/storage 1.47+ puts the tar-split (``offset:length:uncompressed``); skopeo
#: 1.9 writes none, so there is no older prefix.
TAR_SPLIT_KEY = "io.github.containers.zstd-chunked.tarsplit-position"
#: The largest TOC read (compressed or not): far above a real layer's (a 2,000,000-entry
#: layer's TOC is about 600 MB uncompressed; beyond this the layer is streamed instead).
MAX_TOC = 256 << 20
#: Ranges closer than this are fetched as one (fewer requests for a few bytes more).
MERGE_GAP = 64 << 10
#: At most this many compressed bytes are held per fetch (memory stays bounded).
BATCH = 16 << 20
#: A file to stream no larger than this is fetched with the files to capture, and held.
SMALL = 1 << 20
#: The largest tar-split inflated (it is read as a stream, line by line: this bounds the work,
#: not the memory; about 1 KB per tar entry).
MAX_TAR_SPLIT = 8 * MAX_TOC

_TYPES = {
    "reg": b"0",
    "hardlink": b"1",
    "symlink": b"2",
    "char": b"3",
    "block": b"4",
    "dir": b"5",
    "fifo": b"6",
}

#: (half-open compressed ranges) -> their bytes, in order; from the image source
Fetch = Callable[[Sequence[tuple[int, int]]], list[bytes]]


class LazyUnavailable(Exception):
    """This layer cannot be read lazily (the message says why): stream it whole."""


class TocLie(LayerError):
    """A TOC the manifest vouches for contradicts itself or its tar-split (the message says
    how): the image is refused (exit 3), not read in full, as containers/storage fails such a
    pull. Only bytes that do not match their digest, or a TOC that does not parse, send a
    layer back to the full read (``LazyUnavailable``)."""

    def __init__(self, layer: str, what: str) -> None:
        super().__init__(f"the zstd:chunked TOC of layer {layer} lies: {what}")
        self.layer, self.what = layer, what

    def __reduce__(self) -> tuple[type[TocLie], tuple[str, str]]:
        # raised in a worker process: pickled back to the parent with both arguments
        return TocLie, (self.layer, self.what)


@dataclass(frozen=True, slots=True)
class TocPosition:
    """Where the TOC lies in the blob and what authenticates it."""

    offset: int
    length: int
    uncompressed: int
    checksum: str  # "sha256:<hex>" of the compressed TOC
    # (offset, length, uncompressed) of the tar-split, where the manifest places one
    tar_split: tuple[int, int, int] | None = None

    @classmethod
    def of(cls, annotation: Callable[[str], str | None]) -> TocPosition | None:
        """From a layer descriptor's annotations; None when it names no TOC."""
        position = next((v for k in POSITION_KEYS if (v := annotation(k)) is not None), None)
        if position is None:
            return None
        checksum = next((v for k in CHECKSUM_KEYS if (v := annotation(k)) is not None), None)
        if checksum is None:
            raise LazyUnavailable("its TOC position is annotated but not its checksum")
        parts = position.split(":")
        if len(parts) != 4 or not all(p.isdigit() for p in parts):
            raise LazyUnavailable(f"its TOC position {position!r} is not offset:length:size:type")
        offset, length, uncompressed, kind = (int(p) for p in parts)
        if kind != 1:
            raise LazyUnavailable(f"its TOC is of type {kind}, not 1 (the CRFS-style TOC)")
        algo, _, hexd = checksum.partition(":")
        if algo != "sha256" or len(hexd) != 64 or not all(c in "0123456789abcdef" for c in hexd):
            raise LazyUnavailable(f"its TOC checksum {checksum!r} is not a sha256 digest")
        if length > MAX_TOC or uncompressed > MAX_TOC:
            raise LazyUnavailable(f"its TOC is larger than {MAX_TOC} bytes")
        return cls(offset, length, uncompressed, checksum, _tar_split_position(annotation))


def _tar_split_position(annotation: Callable[[str], str | None]) -> tuple[int, int, int] | None:
    """The tar-split's (offset, length, uncompressed) from ``TAR_SPLIT_KEY``, if annotated."""
    value = annotation(TAR_SPLIT_KEY)
    if value is None:
        return None
    parts = value.split(":")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise LazyUnavailable(f"its tar-split position {value!r} is not offset:length:size")
    offset, length, uncompressed = (int(p) for p in parts)
    if length > MAX_TOC or uncompressed > MAX_TAR_SPLIT:
        raise LazyUnavailable("its tar-split is too large to read lazily")
    return offset, length, uncompressed


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk of a file's content: ``size`` bytes at ``at`` in the file, stored in the
    compressed range ``[start, end)`` of the blob, with its sha256 (hex)."""

    at: int
    size: int
    start: int
    end: int
    digest: str


@dataclass(slots=True)
class TocEntry:
    """One regular file an analyzer wants, as the TOC states it (``_walk`` makes no object
    for the others: most files of a layer). Its chunks are checked only when the file is
    read (``chunks``)."""

    type: str
    name: str
    size: int = 0
    linkname: str = ""
    digest: str = ""  # hex sha256 of the content ("" for an empty file)
    raw: list[dict[str, Any]] = field(default_factory=list)  # the file's TOC entry, its chunks
    limit: int = 0  # the TOC's offset: every chunk lies before it

    def chunks(self, lo: int = 0, hi: int | None = None) -> list[Chunk]:
        """The file's chunks holding bytes ``[lo, hi)`` (default: all), in order, each with
        its compressed range, found by bisection (a big library has thousands) and checked:
        each ends where the next begins, in the content and in the blob, the last at the
        file's end and before the TOC, and together they cover ``[lo, hi)``."""
        if not self.size:
            return []
        raw = self.raw
        head = raw[0]
        end = head.get("endOffset")
        single = len(raw) == 1 or not head.get("chunkDigest")
        hi = self.size if hi is None else min(hi, self.size)
        if single:  # stored in one piece: the file's own digest vouches for it
            first, last = 0, 1
        else:
            first = max(bisect.bisect_right(raw, lo, key=_chunk_at) - 1, 0)
            last = bisect.bisect_left(raw, hi, key=_chunk_at)
        out: list[Chunk] = []
        for k in range(first, last):
            r = raw[k]
            at = 0 if single else _chunk_at(r)
            size: Any = self.size if single else r.get("chunkSize")
            start: Any = r.get("offset")
            stop: Any = raw[k + 1].get("offset") if k + 1 < len(raw) and not single else end
            after = self.size if k + 1 >= len(raw) or single else _chunk_at(raw[k + 1])
            numbers = (at, size, start, stop, after)
            if not all(type(v) is int and v >= 0 for v in numbers):
                raise LazyUnavailable(f"the TOC's chunks of {self.name!r} have a bad offset")
            if not size or at + size != after or not start < stop <= self.limit:
                raise LazyUnavailable(f"the TOC's chunks of {self.name!r} do not tile its content")
            digest = self.digest if single else _hex(r.get("chunkDigest"), self.name)
            if not digest:
                raise LazyUnavailable(f"the TOC gives a chunk of {self.name!r} no digest")
            out.append(Chunk(at, size, start, stop, digest))
        if not out or out[0].at > lo or out[-1].at + out[-1].size < hi:
            raise LazyUnavailable(f"the TOC's chunks of {self.name!r} do not cover {lo}-{hi}")
        return out


def _chunk_at(raw: dict[str, Any]) -> Any:
    """Where a chunk starts in its file's content (0 for the file's own entry)."""
    return raw.get("chunkOffset", 0) if raw.get("type") == "chunk" else 0


def _hex(value: object, what: str) -> str:
    text = str(value or "")
    if not text:
        return ""
    algo, _, hexd = text.partition(":")
    if algo != "sha256" or len(hexd) != 64:
        raise LazyUnavailable(f"the TOC gives {what} the digest {text!r}, not a sha256")
    return hexd


def _int(raw: dict[str, Any], key: str) -> int:
    value = raw.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise LazyUnavailable(f"the TOC's {key!r} for {raw.get('name')!r} is not a size")
    return value


def toc_entries(data: bytes) -> list[dict[str, Any]]:
    """The raw entries of an uncompressed TOC (JSON), in order; each is checked as the walk
    reaches it (``analyze_chunked``)."""
    return _toc(data)[0]


def _toc(data: bytes) -> tuple[list[dict[str, Any]], str]:
    """The raw entries of an uncompressed TOC and the hex sha256 of the tar-split it names
    (``tarSplitDigest``; "" when none)."""
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise LazyUnavailable(f"its TOC is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != 1:
        raise LazyUnavailable("its TOC is not a version 1 table of contents")
    raws = doc.get("entries")
    if not isinstance(raws, list):
        raise LazyUnavailable("its TOC has no entries list")
    return raws, _hex(doc.get("tarSplitDigest"), "its tar-split")


def _b64(hexd: str) -> str:
    """A hex sha256 as RECORD writes it: ``sha256=<urlsafe b64, unpadded>``."""
    raw = bytes.fromhex(hexd) if hexd else hashlib.sha256().digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _inflate(data: bytes, size: int, what: str, dctx: Any = None) -> bytes:
    """The zstd frames ``data`` holds, which must inflate to exactly ``size`` bytes
    (``dctx``: a ``ZstdDecompressor`` to reuse; a new one costs more than a small chunk)."""
    import zstandard  # here: the guard's zipapp ships without it and never reads lazily

    try:
        reader = (dctx or zstandard.ZstdDecompressor()).stream_reader(
            io.BytesIO(data), read_across_frames=True
        )
        out = reader.read(size + 1)
    except zstandard.ZstdError as exc:
        raise LazyUnavailable(f"{what} does not inflate: {exc}") from None
    if len(out) != size:
        raise LazyUnavailable(f"{what} inflates to {len(out)} bytes, not {size}")
    return out


@dataclass(slots=True)
class _Counts:
    """What a lazy read fetched and verified."""

    fetched: int = 0
    requests: int = 0
    chunks: int = 0
    whole: int = 0  # files read whole, each checked against its digest
    parts: int = 0  # files read in parts, each part checked against its chunk's digest
    unread: int = 0  # files answered from the TOC's digest alone (HASH)


class _Reader:
    """Fetches and verifies chunks: merged ranges, bounded batches."""

    def __init__(self, fetch: Fetch, counts: _Counts, layer: str) -> None:
        import zstandard  # as in ``_inflate``

        self._fetch = fetch
        self._counts = counts
        self._layer = layer
        self._dctx = zstandard.ZstdDecompressor()

    def chunks(self, wanted: Sequence[tuple[str, Chunk]]) -> Iterator[tuple[str, Chunk, bytes]]:
        """Each (name, chunk) inflated and verified, in the order of the blob."""
        order = sorted(set(wanted), key=lambda w: w[1].start)
        i = 0
        while i < len(order):
            # a batch: chunks up to BATCH compressed bytes (at least one), ranges merged
            batch = [order[i]]
            total = order[i][1].end - order[i][1].start
            i += 1
            while i < len(order) and total + order[i][1].end - order[i][1].start <= BATCH:
                total += order[i][1].end - order[i][1].start
                batch.append(order[i])
                i += 1
            ranges: list[list[int]] = []
            for _name, c in batch:
                if ranges and c.start - ranges[-1][1] <= MERGE_GAP:
                    ranges[-1][1] = max(ranges[-1][1], c.end)
                else:
                    ranges.append([c.start, c.end])
            spans = [(a, b) for a, b in ranges]
            starts = [a for a, _b in spans]
            try:
                got = self._fetch(spans)
            except LazyUnavailable:
                raise
            except Exception as exc:  # a transport that cannot serve ranges after all
                raise LazyUnavailable(f"reading ranges failed: {exc}") from exc
            self._counts.requests += 1
            for (a, b), data in zip(spans, got, strict=True):
                if len(data) != b - a:
                    raise LazyUnavailable(f"bytes {a}-{b - 1} came back short")
                self._counts.fetched += len(data)
            for name, c in batch:
                k = bisect.bisect_right(starts, c.start) - 1  # the span holding the chunk
                raw = got[k][c.start - spans[k][0] : c.end - spans[k][0]]
                what = f"the chunk of {name!r} at {c.at}"
                data = _inflate(raw, c.size, what, self._dctx)
                if hashlib.sha256(data).hexdigest() != c.digest:
                    raise LazyUnavailable(f"{what} does not match its TOC digest")
                self._counts.chunks += 1
                yield name, c, data

    def joined(
        self, entries: dict[str, TocEntry], pieces: dict[str, list[tuple[int, bytes]]]
    ) -> dict[str, bytes]:
        """Files read whole, by name, from their verified chunks (offset, bytes), each
        checked against its digest."""
        out: dict[str, bytes] = {}
        for name, entry in entries.items():
            data = b"".join(d for _at, d in sorted(pieces[name]))
            if len(data) != entry.size or hashlib.sha256(data).hexdigest() != (
                entry.digest or hashlib.sha256().hexdigest()
            ):
                raise LazyUnavailable(f"{name!r} does not match its TOC digest")
            self._counts.whole += 1
            out[name] = data
        return out

    def whole(self, entry: TocEntry, sink: Callable[[bytes], object]) -> None:
        """A file's content, chunk by chunk in order, checked against the file's digest."""
        h = hashlib.sha256()
        at = 0
        for _name, c, data in self.chunks([(entry.name, c) for c in entry.chunks()]):
            if c.at != at:
                raise LazyUnavailable(f"the chunks of {entry.name!r} came out of order")
            at += c.size
            h.update(data)
            sink(data)
        if h.hexdigest() != entry.digest:
            raise LazyUnavailable(f"{entry.name!r} does not match its TOC digest")
        self._counts.whole += 1


def _read_parts(
    reader: _Reader,
    parts: dict[str, tuple[TocEntry, PartReader]],
    whole: Sequence[TocEntry] = (),
) -> dict[str, bytes]:
    """Every part reader's rounds, all files at once per round: the chunks holding what
    each asks for are fetched (each verified) and handed in. A file's verified chunks are
    kept until it is done, so what it asks for next inside them is handed in at once,
    without fetching them again or waiting for a round: a small library is one chunk, and
    its program headers, dynamic section and strings come with its ELF header. The files
    in ``whole`` are fetched with the first round (one wait fewer) and returned by name,
    each checked against its digest."""
    entries = {e.name: e for e in whole}
    pieces: dict[str, list[tuple[int, bytes]]] = {name: [] for name in entries}
    first = [(e.name, c) for e in entries.values() for c in e.chunks()]
    held: dict[str, dict[int, bytes]] = {name: {} for name in parts}  # chunk offset -> bytes
    last: dict[str, list[tuple[int, int]]] = {}
    active = list(parts)
    while True:
        wanted, first = first, []
        asks: dict[str, list[list[Chunk]]] = {}
        for name in active:
            entry, part = parts[name]
            have = held[name]
            while True:
                gaps = part.gaps()
                if not gaps or gaps == last.get(name):
                    have.clear()  # done, or asking again for what it was given: its close() says
                    break
                last[name] = gaps
                need = [entry.chunks(lo, hi) for lo, hi in gaps]
                missing = {c.at: c for cs in need for c in cs if c.at not in have}
                if missing:
                    wanted.extend((name, c) for c in missing.values())
                    asks[name] = need
                    break
                _feed(part, have, gaps, need)
        if not wanted:
            return reader.joined(entries, pieces)
        for name, c, data in reader.chunks(wanted):
            if name in pieces:
                pieces[name].append((c.at, data))
            else:
                held[name][c.at] = data
        for name, need in asks.items():
            _feed(parts[name][1], held[name], last[name], need)
        active = list(asks)


def _feed(
    part: PartReader,
    have: dict[int, bytes],
    gaps: list[tuple[int, int]],
    need: list[list[Chunk]],
) -> None:
    """Hand ``part`` the bytes of each of its ``gaps`` from the verified chunks that tile it."""
    for (lo, hi), chunks in zip(gaps, need, strict=True):
        first = chunks[0].at
        buf = b"".join(have[c.at] for c in chunks)
        part.feed_at(lo, buf[lo - first : hi - first])


@dataclass(slots=True)
class _Order:
    """Whether the TOC places every stored piece in the writer's order (``_walk`` finds out
    as it goes, ``_check_places`` reads it): each starts where or after the one before it
    ends, the last ends by the TOC's offset. A few numbers kept per entry, no second pass
    over the entries and nothing sorted (sorting a synthetic TOC of 2.8 million entries
    took 10 s). False says nothing more: ``_check_places`` finds out what is wrong, if
    anything."""

    ordered: bool = True


def _walk(
    raws: list[dict[str, Any]],
    toc_offset: int,
    select: Selector,
    limits: LayerLimits,
    result: LayerAnalysis,
    names: MemberNames,
    order: _Order | None = None,
) -> Iterator[tuple[TocEntry, str, int]]:
    """Every TOC entry, checked, as the tar walk would see its member: its name noted,
    whiteouts, links and the selected files recorded in ``result``; yields (entry, path,
    flags) for each regular file an analyzer wants. A file nobody wants costs a name check
    and a ``select``: no object is made for it, and its chunk entries are only counted
    past (a big layer's TOC is mostly chunks of files nobody reads). ``order``, once the
    walk is done, says whether every stored piece lies in the writer's order (``_Order``):
    a TOC in that order needs no other check of its places (``_check_places``)."""
    entry: TocEntry | None = None  # the last wanted regular file: its chunks follow it
    last_name: object = None  # the last regular file's name, wanted or not
    paths = names.paths
    members = result.members
    # the writer's order (``_Order``), kept while it holds: where the last file's content
    # ends, the current file's end (-1: no file with content under way), where its last
    # piece starts, and whether its chunk entries are pieces (``TocEntry.chunks``)
    ordered, floor, end, last, chunked = True, 0, -1, 0, False
    try:
        for raw in raws:
            kind = raw["type"]
            if kind == "chunk":  # the common entry of a big layer: as little work as can be
                if raw["name"] != last_name:
                    raise LazyUnavailable(f"a TOC chunk of {raw['name']!r} follows no file of it")
                if entry is not None:
                    entry.raw.append(raw)
                if chunked:
                    offset = raw.get("offset")
                    if type(offset) is int and offset > last:
                        last = offset
                    else:
                        ordered = chunked = False
                continue
            entry = None
            name = raw["name"]
            if kind not in _TYPES or not isinstance(name, str):
                raise LazyUnavailable(f"its TOC has an entry of type {kind!r} named {name!r}")
            size = raw.get("size", 0)
            if type(size) is not int or size < 0:
                raise LazyUnavailable(f"the TOC's size for {name!r} is not a size")
            digest = raw.get("digest")
            if digest and not (
                type(digest) is str and len(digest) == 71 and digest.startswith("sha256:")
            ):
                _hex(digest, name)  # raises: not a sha256
            if ordered:
                if end >= 0:
                    if end <= last:
                        ordered = False
                    floor, end, chunked = end, -1, False
                if ordered and size and kind == "reg":
                    start, stop = raw.get("offset"), raw.get("endOffset")
                    if (
                        type(start) is int
                        and type(stop) is int
                        and floor <= start < stop <= toc_offset
                    ):
                        last, end, chunked = start, stop, bool(raw.get("chunkDigest"))
                    else:
                        ordered = False
            members += 1
            if not members % SPILL_CHECK:
                names.spill()
            # the TOC states each name as the tar header stores it: ``MemberNames.see``,
            # inlined as the tar walk does for the usual member
            path = _path(name[:-1] if kind == "dir" and name[-1:] == "/" else name)
            paths.append(path)
            if kind != "reg":
                last_name = None
                link = raw.get("linkName") or ""
                if not isinstance(link, str):
                    link = str(link)
                hardlink = kind == "hardlink"
                names.note(name, path, kind == "dir", link if hardlink else None, hardlink=hardlink)
                if ".wh." in path or ((kind == "symlink" or hardlink) and select(path) & LINK):
                    record_member(result, Member(path, _TYPES[kind], size, link))
                continue
            last_name = name
            if len(path) != len(name) + 1 or "\\" in name or "\0" in name:
                names.note(name, path, False, None)
            if ".wh." in path and path[path.rfind("/") + 1 :].startswith(WHITEOUT):
                record_member(result, Member(path, b"0", size, ""))
                continue
            want = select(path) & ~LINK
            if not want:
                continue
            oversized = bool(want & CAPTURE) and size > limits.max_capture
            if oversized:
                want &= ~CAPTURE
            hexd = digest[7:] if digest else ""
            hashed = _b64(hexd) if want & HASH else None
            record_member(result, Member(path, b"0", size, "", digest=hashed, oversized=oversized))
            entry = TocEntry(kind, name, size, "", hexd, [raw], toc_offset)
            yield entry, path, want
        if order is not None:
            order.ordered = ordered and (end < 0 or end > last)
    except (KeyError, TypeError) as exc:
        raise LazyUnavailable(f"its TOC has an entry without {exc}") from None
    finally:
        result.members = members


#: (start, end, name, at, digest): one stored piece of a file's content, in blob bytes
#: ``[start, end)``; ``at`` is its place in the file (-1: the file stored whole), ``digest`` the
#: sha256 the TOC gives it (the chunk's, or the file's)
_Piece = tuple[int, int, str, int, str]


def _pieces(raws: list[dict[str, Any]]) -> Iterator[_Piece]:
    """Every stored piece of file content the TOC places, as ``TocEntry.chunks`` reads them:
    a file stored whole is ``[offset, endOffset)``; a file in chunks has one piece per chunk,
    from its offset to the next chunk's, the last to the file's ``endOffset``. Run after
    ``_walk``, which has checked the entries' types, names and sizes."""
    group: list[dict[str, Any]] = []
    for raw in raws:
        if raw["type"] == "chunk":
            if group:
                group.append(raw)
            continue
        if group:
            yield from _file_pieces(group)
        group = [raw] if raw["type"] == "reg" and raw.get("size") else []
    if group:
        yield from _file_pieces(group)


def _file_pieces(group: list[dict[str, Any]]) -> Iterator[_Piece]:
    head = group[0]
    name = head["name"]
    end = head.get("endOffset")
    if len(group) == 1 or not head.get("chunkDigest"):  # stored whole: as ``chunks`` reads it
        spans = [(head.get("offset"), end, -1, head.get("digest"))]
    else:
        spans = [
            (
                r.get("offset"),
                group[k + 1].get("offset") if k + 1 < len(group) else end,
                _chunk_at(r),
                r.get("chunkDigest"),
            )
            for k, r in enumerate(group)
        ]
    for start, stop, at, digest in spans:
        if not (type(start) is int and type(stop) is int and start >= 0):
            raise LazyUnavailable(f"the TOC's chunks of {name!r} have a bad offset")
        yield start, stop, name, at if type(at) is int else 0, str(digest or "")


def _what(piece: _Piece) -> str:
    _start, _stop, name, at, _digest = piece
    return repr(name) if at < 0 else f"the chunk of {name!r} at {at}"


def _bytes(piece: _Piece) -> str:
    return f"bytes {piece[0]}-{piece[1] - 1}"


def _check_piece(piece: _Piece, limit: int, size: int | None, layer: str) -> None:
    """``TocLie`` for a piece in no bytes, or past the file data: beyond the blob's end, or in
    the TOC, the tar-split or the footer that follow the data (``limit``: where they start)."""
    start, stop = piece[0], piece[1]
    if stop <= start:
        raise TocLie(layer, f"{_what(piece)} is placed in bytes {start} to {stop}: no bytes")
    if size is not None and stop > size:
        raise TocLie(
            layer, f"{_what(piece)} is placed past the end of the blob: {_bytes(piece)}, of {size}"
        )
    if stop > limit:
        raise TocLie(
            layer,
            f"{_what(piece)} is placed in {_bytes(piece)}, past the file data, which ends where "
            f"the TOC begins (byte {limit})",
        )


def _check_places(
    raws: list[dict[str, Any]], limit: int, size: int | None, layer: str, ordered: bool
) -> None:
    """``TocLie`` unless every stored piece of file content lies in bytes of its own before
    ``limit``, as containers/storage's compressor writes them (each file's content in fresh
    zstd frames, in the tar's order, each chunk in frames of its own): two pieces in one range
    (one file pointed at another's chunk, whatever digests they claim), pieces that overlap,
    a piece beyond the blob or in the TOC. A TOC in the writer's order (``ordered``, which
    ``_walk`` found out in its one pass: ``_Order``) passes; any other is checked piece by
    piece, sorted (a TOC in another order but without a contradiction is allowed, though no
    writer makes one)."""
    if ordered:
        return
    pieces = list(_pieces(raws))
    for piece in pieces:
        _check_piece(piece, limit, size, layer)
    pieces.sort(key=lambda p: (p[0], p[1]))
    for a, b in itertools.pairwise(pieces):
        if (a[0], a[1]) == (b[0], b[1]):
            differ = (
                " with different digests"
                if a[4] != b[4]
                else "; a writer stores each file's content in bytes of its own"
            )
            raise TocLie(layer, f"{_what(a)} and {_what(b)} claim one chunk ({_bytes(a)}){differ}")
        if b[0] < a[1]:
            raise TocLie(layer, f"{_what(a)} ({_bytes(a)}) and {_what(b)} ({_bytes(b)}) overlap")


#: tar type flags -> TOC types (containers/storage's ``minimal.TarTypes``; Go's tar reader
#: reads the old NUL flag as a regular file, or a directory when the name ends in "/")
_TAR_TYPES = {
    b"0": "reg",
    b"\0": "reg",
    b"1": "hardlink",
    b"2": "symlink",
    b"3": "char",
    b"4": "block",
    b"5": "dir",
    b"6": "fifo",
}


def _tar_split_entries(data: bytes, limit: int) -> Iterator[tuple[str, int, str]]:
    """(name, size, type) of every tar entry a zstd-compressed tar-split (vbatts/tar-split's
    JSON lines: segments of raw tar bytes, type 2, and one file entry per tar header, type 1,
    after the segment ending in that header) records, read as a stream of at most ``limit``
    bytes. ``LazyUnavailable`` for what is not such a tar-split."""
    import zstandard  # as in ``_inflate``

    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    total = 0
    header: str | None = None  # the base64 of the last segment, ending in the next header
    try:
        for line in io.BufferedReader(reader, 1 << 16):
            total += len(line)
            if total > limit:
                raise LazyUnavailable(f"its tar-split inflates past its stated {limit} bytes")
            entry = json.loads(line)
            kind = entry.get("type") if isinstance(entry, dict) else None
            if kind == 2:
                header = entry.get("payload")
                continue
            if kind != 1:
                raise LazyUnavailable(f"its tar-split has an entry of type {kind!r}")
            name = entry.get("name")
            if name is None:  # a name that is not UTF-8: its bytes (Go's JSON would replace them)
                name = base64.b64decode(entry.get("name_raw") or "").decode("utf-8", "replace")
            size = entry.get("size", 0)
            if not isinstance(name, str) or type(size) is not int or not isinstance(header, str):
                raise LazyUnavailable(f"its tar-split's entry {name!r} is not a tar entry")
            # the header is the segment's last 512 bytes: decode only its base64 tail
            block = base64.b64decode(header[-688:] if len(header) % 4 == 0 else header)[-512:]
            header = None
            if len(block) < 512:
                raise LazyUnavailable(f"its tar-split has no tar header for {name!r}")
            flag = block[156:157]
            kind_of = _TAR_TYPES.get(flag, f"tar type {flag!r}")
            if flag == b"\0" and name.endswith("/"):
                kind_of = "dir"
            yield name, size, kind_of
    except (ValueError, zstandard.ZstdError) as exc:
        raise LazyUnavailable(f"its tar-split does not parse: {exc}") from None
    if total == 0:
        raise LazyUnavailable("its tar-split is empty")


def _check_tar_split(
    raws: list[dict[str, Any]], split: Iterator[tuple[str, int, str]], layer: str
) -> None:
    """``TocLie`` unless the TOC lists exactly the tar-split's entries, each with the same
    type and size (containers/storage's ``ensureTOCMatchesTarSplit`` also compares modes,
    owners, times, links and xattrs, which no analyzer reads). Matched in order, as the writer
    makes both; entries met out of order are held until their match comes."""
    toc = ((r["name"], r.get("size", 0), r["type"]) for r in raws if r["type"] != "chunk")
    held: dict[str, list[tuple[int, str]]] = {}
    recorded = 0
    for name, size, kind in split:
        recorded += 1
        got = held[name].pop(0) if held.get(name) else None
        if got is None:
            for other, other_size, other_kind in toc:
                if other == name:
                    got = (other_size, other_kind)
                    break
                held.setdefault(other, []).append((other_size, other_kind))
        if got is None:
            raise TocLie(layer, f"its tar-split has {name!r}, which it does not list")
        if got[1] != kind:
            raise TocLie(layer, f"it gives {name!r} the type {got[1]}, its tar-split {kind}")
        if got[0] != size:
            raise TocLie(layer, f"it gives {name!r} {got[0]} bytes, its tar-split {size} bytes")
    left = [n for n, sizes in held.items() for _ in sizes] + [n for n, _s, _k in toc]
    if left:
        listed = sum(1 for r in raws if r["type"] != "chunk")
        raise TocLie(
            layer,
            f"it lists {listed} entries, its tar-split {recorded}: "
            f"{', '.join(map(repr, left[:5]))}{' and more' if len(left) > 5 else ''} "
            "not in the tar-split",
        )


def analyze_chunked(
    fetch: Fetch,
    position: TocPosition,
    *,
    digest: str,
    size: int | None,
    select: Selector,
    open_stream: StreamOpener | None = None,
    open_parts: PartOpener | None = None,
    limits: LayerLimits | None = None,
) -> LayerAnalysis:
    """The layer analysis of a zstd:chunked blob from its TOC and the chunks the selector's
    files need (module docstring); ``LazyUnavailable`` when any of it does not verify."""
    limits = limits or LayerLimits()
    toc_at = (position.offset, position.offset + position.length)
    wanted = [toc_at]
    if position.tar_split is not None:  # fetched with the TOC, as containers/storage does
        at, length, _ = position.tar_split
        wanted = sorted([toc_at, (at, at + length)])
        if wanted[0][1] > wanted[1][0]:
            raise LazyUnavailable("its TOC and tar-split positions overlap")
    if size is not None and wanted[-1][1] > size:
        what = "TOC" if wanted[-1] == toc_at else "tar-split"
        raise LazyUnavailable(f"its {what} position lies past the blob's {size} bytes")
    counts = _Counts()
    reader = _Reader(fetch, counts, digest)
    try:
        got = dict(zip(wanted, fetch(wanted), strict=True))
    except LazyUnavailable:
        raise
    except Exception as exc:
        raise LazyUnavailable(f"reading its TOC failed: {exc}") from exc
    counts.fetched += sum(len(b) for b in got.values())
    counts.requests += 1
    compressed = got[toc_at]
    if "sha256:" + hashlib.sha256(compressed).hexdigest() != position.checksum:
        raise LazyUnavailable("its TOC does not match the manifest's TOC checksum")
    raws, tar_split_digest = _toc(_inflate(compressed, position.uncompressed, "its TOC"))
    limit = position.offset  # file data ends before the TOC (and before a tar-split it names)
    if tar_split_digest:
        if position.tar_split is None:
            raise LazyUnavailable("its TOC names a tar-split that the manifest does not place")
        at, length, _ = position.tar_split
        limit = min(limit, at)

    result = LayerAnalysis(digest=digest)
    captures: list[tuple[TocEntry, str, int]] = []  # (entry, path, flags)
    streams: list[TocEntry] = []
    parts: dict[str, tuple[TocEntry, PartReader]] = {}
    names = MemberNames()
    order = _Order()
    try:
        for entry, path, want in _walk(raws, limit, select, limits, result, names, order):
            if want & HASH:
                counts.unread += 1
            if want & CAPTURE:
                captures.append((entry, path, want))
            elif want & STREAM:
                part = open_parts(path, entry.size, _b64(entry.digest)) if open_parts else None
                if part is not None and entry.size:
                    parts[path] = (entry, part)
                else:
                    streams.append(entry)
        result.name_flags = names.flags()
        if result.opaque:
            result.opaque_made = sorted(names.made(result.opaque))
    finally:
        names.close()
    # the cheap lies, refused before any chunk is fetched
    _check_places(raws, limit, size, digest, order.ordered)
    if tar_split_digest and position.tar_split is not None:
        at, length, uncompressed = position.tar_split
        split = got[(at, at + length)]
        if hashlib.sha256(split).hexdigest() != tar_split_digest:
            raise LazyUnavailable("its tar-split does not match the TOC's tarSplitDigest")
        _check_tar_split(raws, _tar_split_entries(split, uncompressed), digest)
    small = [e for e in streams if e.size <= SMALL]
    streams = [e for e in streams if e.size > SMALL]
    held = _read_parts(
        reader,
        {e.name: (e, p) for e, p in parts.values()},
        [e for e, _p, _w in captures] + small,
    )
    for entry, path, want in captures:
        data = held[entry.name]
        result.files[path] = data
        if want & STREAM:  # captured and streamed: the consumer gets the same bytes
            _consume(open_stream, path, data, result)
    for entry in small:
        _consume(open_stream, normalize(entry.name), held[entry.name], result)
    for entry in streams:
        _stream_whole(reader, entry, open_stream, result)
    for path, (_entry, part) in parts.items():
        result.streamed[path] = part.close()
        counts.parts += 1
    result.size = 0  # the tar's size is not known without the tar
    result.diff_id = ""  # not proven: only the whole tar hashes to it
    result.lazy = {
        "toc": position.checksum,
        "blob_size": size,
        "fetched": counts.fetched,
        "requests": counts.requests,
        "chunks_verified": counts.chunks,
        "files_whole": counts.whole,
        "files_in_parts": counts.parts,
        "digests_from_toc": counts.unread,
    }
    return result


def _consume(
    open_stream: StreamOpener | None, path: str, data: bytes, result: LayerAnalysis
) -> None:
    """A STREAM member whose verified content is held: its consumer's summary."""
    if open_stream is None:
        raise LazyUnavailable(f"{path!r} selected for streaming but nothing consumes it")
    stream = open_stream(path, len(data))
    stream.update(memoryview(data))
    result.streamed[path] = stream.close()


def _stream_whole(
    reader: _Reader,
    entry: TocEntry,
    open_stream: StreamOpener | None,
    result: LayerAnalysis,
) -> None:
    """A STREAM member read whole (a consumer that cannot read parts), verified."""
    path = normalize(entry.name)
    if open_stream is None:
        raise LazyUnavailable(f"{path!r} selected for streaming but nothing consumes it")
    stream: MemberStream = open_stream(path, entry.size)
    if entry.size:
        reader.whole(entry, lambda data: stream.update(memoryview(data)))
    result.streamed[path] = stream.close()
