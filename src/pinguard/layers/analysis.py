"""One layer's analysis: what a selector kept, the whiteouts, and how it is produced.

Owns ``LayerAnalysis`` (the unit the per-layer cache stores) and the two ways to make one:
``analyze_stream`` joins a raw blob stream to the verifier, the inflater and the tar walk, and
records whiteouts and opaque whiteouts as the OCI image spec defines them, and which opaque
directories the layer also made (a directory entry of their own; applying all this to a state
is ``pinguard.audit.state``'s job), and the member names the walk flagged
(``pinguard.layers.names``); ``analyze_directory`` gives the same analysis for a tree already
on disk, never following a symlink. Nothing here knows about Python packaging:
the selector says which paths matter.
"""

from __future__ import annotations

import base64
import hashlib
import os
import posixpath
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from pinguard.digest import Digest
from pinguard.errors import BlobVerificationError, LayerError
from pinguard.layers import blob
from pinguard.layers.blob import (
    DECOMPRESS_ERRORS,
    Ahead,
    Inflated,
    VerifyingReader,
    inflated_chunks,
)
from pinguard.layers.limits import LayerLimits  # re-exported: the analysis enforces them
from pinguard.layers.names import MemberNames, NameFlag
from pinguard.layers.tar import (
    CAPTURE,
    HASH,
    LINK,
    LINK_TYPES,
    SKIP,
    STREAM,
    Chunks,
    Member,
    Selector,
    StreamOpener,
    normalize,
    walk_members,
)

__all__ = [
    "HASH_AHEAD",
    "INFLATE_AHEAD",
    "OPAQUE",
    "WHITEOUT",
    "ZERO_PAD_BLOCKS",
    "LayerAnalysis",
    "LayerLimits",
    "analyze_directory",
    "analyze_stream",
    "record_member",
]


@dataclass(slots=True)
class LayerAnalysis:
    """What one layer contributes: selected files, hashes, whiteouts and opaque dirs.

    Paths are absolute and normalised ("/usr/lib/python3/dist-packages/x.dist-info/RECORD").
    """

    digest: str
    files: dict[str, bytes] = field(default_factory=dict)
    hashes: dict[str, str] = field(default_factory=dict)  # path -> "sha256=<urlsafe b64>"
    whiteouts: list[str] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)
    # the opaque directories the layer also has a directory entry for: it made a directory
    # at that path (``rm L && mkdir L``), which replaces a lower layer's link there; a marker
    # without one is applied where its directory resolves, through such a link
    opaque_made: list[str] = field(default_factory=list)
    members: int = 0
    size: int = 0  # uncompressed tar bytes
    # (path, reason) of selected files that could not be read (directories on disk only;
    # a layer stream that cannot be read is an error, not a partial analysis)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    # path -> what the member's stream consumer returned (JSON-compatible), for STREAM members
    streamed: dict[str, object] = field(default_factory=dict)
    # path -> link target as stored (symlinks) or as an absolute path (hard links), for
    # links the selector flagged LINK
    links: dict[str, str] = field(default_factory=dict)
    diff_id: str = ""  # sha256 of the uncompressed tar as read ("" for a directory)
    # member names the walk flagged: unsafe as stored, or one path stored twice (``names``)
    name_flags: list[NameFlag] = field(default_factory=list)
    # None for a full read; for a lazy read of a zstd:chunked layer (``layers/chunked.py``),
    # what was verified and fetched: the TOC checksum, bytes and requests, chunks and files
    # checked, digests taken from the TOC unread. ``diff_id`` is then "" (not proven).
    lazy: dict[str, object] | None = None
    # {analyzer name: {path: what it parsed from that captured file}}, made in the worker
    # process that read the layer (``Analyzer.prepare``), so the parent replaying the states
    # need not parse it again; it travels with the analysis to the parent but is never
    # cached (``to_json`` leaves it out: an entry read back is parsed where it is replayed)
    prepared: dict[str, dict[str, object]] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        files: dict[str, dict[str, str]] = {}
        for path, data in sorted(self.files.items()):
            try:
                files[path] = {"t": data.decode("utf-8")}
            except UnicodeDecodeError:
                files[path] = {"b": base64.b64encode(data).decode("ascii")}
        return {
            "digest": self.digest,
            "files": files,
            "hashes": dict(sorted(self.hashes.items())),
            "whiteouts": sorted(self.whiteouts),
            "opaque": sorted(self.opaque),
            "opaque_made": sorted(self.opaque_made),
            "members": self.members,
            "size": self.size,
            "unreadable": [list(u) for u in sorted(self.unreadable)],
            "streamed": dict(sorted(self.streamed.items())),
            "links": dict(sorted(self.links.items())),
            "diff_id": self.diff_id,
            "name_flags": [f.to_json() for f in sorted(self.name_flags)],
            **({"lazy": self.lazy} if self.lazy is not None else {}),  # a lazy read only
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> LayerAnalysis:
        files_in = data["files"]
        assert isinstance(files_in, dict)
        files = {
            path: (v["t"].encode("utf-8") if "t" in v else base64.b64decode(v["b"]))
            for path, v in files_in.items()
        }
        return cls(
            digest=str(data["digest"]),
            files=files,
            hashes=dict(data["hashes"]),  # type: ignore[call-overload]
            whiteouts=list(data["whiteouts"]),  # type: ignore[call-overload]
            opaque=list(data["opaque"]),  # type: ignore[call-overload]
            opaque_made=list(data.get("opaque_made", [])),  # type: ignore[call-overload]
            members=int(data["members"]),  # type: ignore[call-overload]
            size=int(data["size"]),  # type: ignore[call-overload]
            unreadable=[(str(p), str(w)) for p, w in data.get("unreadable", [])],  # type: ignore[attr-defined]
            streamed=dict(data["streamed"]),  # type: ignore[call-overload]
            links=dict(data.get("links", {})),  # type: ignore[call-overload]
            diff_id=str(data.get("diff_id", "")),
            name_flags=[NameFlag.from_json(f) for f in data["name_flags"]],  # type: ignore[attr-defined]
            lazy=data.get("lazy"),  # type: ignore[arg-type]
        )


WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"


def _guarded(
    chunks: Iterator[bytes],
    limits: LayerLimits,
    stored: Callable[[], int],
) -> Iterator[bytes]:
    """Inflated chunks, held to ``limits``."""
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > limits.max_size:
            raise LayerError(f"inflates past the {limits.max_size}-byte layer size cap")
        if total > limits.ratio_floor and total > limits.max_ratio * max(stored(), 1):
            raise LayerError(
                f"inflates more than {limits.max_ratio}:1 "
                f"({total} bytes from {stored()}): refusing a decompression bomb"
            )
        yield chunk


def _hashed(chunks: Iterator[bytes], h: hashlib._Hash) -> Iterator[bytes]:
    """The chunks, each added to ``h`` (the diff_id) on the way."""
    for chunk in chunks:
        h.update(chunk)
        yield chunk


def record_member(result: LayerAnalysis, member: Member) -> None:
    """Add one walked member to the analysis: a whiteout, or what the selector kept."""
    path = member.path
    if member.oversized:
        result.unreadable.append((path, f"{member.size} bytes, above the metadata capture cap"))
    if ".wh." in path:
        cut = path.rfind("/")
        base = path[cut + 1 :]
        if base.startswith(WHITEOUT):
            parent = path[:cut] or "/"
            if base == WHITEOUT:
                raise LayerError(f"bare whiteout {path!r} names nothing to remove")
            if base == OPAQUE:
                result.opaque.append(parent)
            else:
                result.whiteouts.append(posixpath.join(parent, base[len(WHITEOUT) :]))
            return
    if member.type in LINK_TYPES:
        target = member.linkname
        result.links[path] = normalize(target) if member.type == b"1" else target
        return
    if member.data is not None:
        result.files[path] = member.data
    if member.digest is not None:
        result.hashes[path] = member.digest
    if member.streamed is not None:
        result.streamed[path] = member.streamed


#: Inflated chunks (``blob.OUT_CHUNK`` bytes each) the inflate thread may be ahead of the tar
#: hash, and the tar hash ahead of the walk.
INFLATE_AHEAD = 3
HASH_AHEAD = 2

ZERO_PAD_BLOCKS = 20  # a tar record (the default blocking factor of tar and tarfile)


def _zero_padded(tar_hash: hashlib._Hash, expected: str) -> bool:
    """Whether the stream hashed so far plus 1 to ``ZERO_PAD_BLOCKS`` zero blocks hashes to it."""
    h = tar_hash.copy()
    block = bytes(512)
    for _ in range(ZERO_PAD_BLOCKS):
        h.update(block)
        if f"{h.name}:{h.hexdigest()}" == expected:
            return True
    return False


def analyze_stream(
    raw: BinaryIO,
    *,
    digest: str | None,
    size: int | None,
    select: Selector,
    open_stream: StreamOpener | None = None,
    progress: Callable[[int], None] | None = None,
    prefetch: bool = True,
    diff_id: str | None = None,
    limits: LayerLimits | None = None,
    label: str = "",
) -> LayerAnalysis:
    """Stream one blob: verify it, walk its tar, keep what ``select`` asks for.

    Two proofs, as containerd and go-containerregistry make them: the blob's bytes must hash
    to ``digest`` and number ``size`` (the descriptor), and the uncompressed tar (everything,
    including bytes after its end blocks) must hash to ``diff_id`` when one is given (the
    config). Neither stands for the other: the diff_id proves the tar the walk reads, not the
    blob (a gzip header byte changes the blob, not the tar), and the digest is what the blob
    is named, cached and served by. A plain tar blob is its own tar: its one hash is both
    proofs when both use one algorithm. Every check ends before the analysis is returned, so
    nothing unproven can be cached. ``limits`` bound the work (``LayerLimits``); ``label``
    names the layer in a blob error (``"layer 2"``). With ``prefetch`` four threads share the
    work: one fetches and hashes the blob, one inflates it, one hashes the tar (all in C,
    without the GIL), and this one walks (a plain tar: the fetch thread and this one)."""
    limits = limits or LayerLimits()
    expected_diff = Digest.parse(diff_id, f"layer {digest} diff_id") if diff_id else None
    verifier = VerifyingReader(raw, digest, size, progress, prefetch=prefetch, label=label)
    names = MemberNames()
    stages: list[Ahead] = []
    self_proven = False
    try:
        result = LayerAnalysis(digest=digest or "")
        counter = [0]
        tar_hash = hashlib.new(expected_diff.algorithm if expected_diff else "sha256")
        inflated = Inflated()
        try:
            raw_chunks = inflated_chunks(verifier, inflated)  # sniffs: sets inflated.format
            # the blob is the tar: the blob's hash (in the fetch thread) is the diff_id too
            self_proven = inflated.format == "tar" and tar_hash.name == verifier.algorithm
            chunks = _guarded(raw_chunks, limits, lambda: verifier.count)
            if self_proven:
                src = Chunks(chunks)  # the fetch thread reads ahead; nothing to inflate
            elif prefetch:
                stages.append(Ahead(chunks, INFLATE_AHEAD, "layer-inflate"))
                stages.append(Ahead(_hashed(stages[0], tar_hash), HASH_AHEAD, "layer-hash"))
                src = Chunks(stages[1])
            else:
                src = Chunks(_hashed(chunks, tar_hash))
            for member in walk_members(
                src,
                select,
                False,
                counter,
                open_stream,
                capture_limit=limits.max_capture,
                names=names,
            ):
                record_member(result, member)
            src.drain()
            result.name_flags = names.flags()
            if result.opaque:
                result.opaque_made = sorted(names.made(result.opaque))
            result.members = counter[0]
            result.size = src.total
        except DECOMPRESS_ERRORS as exc:
            raise LayerError(f"layer {digest}: cannot decompress: {exc}") from exc
        except LayerError as exc:
            raise LayerError(f"layer {digest}: {exc}") from exc
        except Exception as exc:
            if type(exc).__module__.startswith("zstandard"):
                raise LayerError(f"layer {digest}: cannot decompress zstd: {exc}") from exc
            raise
        computed = verifier.finish()  # the blob's size and digest
        if not result.digest:
            result.digest = computed
        result.diff_id = computed if self_proven else f"{tar_hash.name}:{tar_hash.hexdigest()}"
        if (
            expected_diff is not None
            and result.diff_id != str(expected_diff)
            and inflated.zstd_chunked
            and _zero_padded(tar_hash, str(expected_diff))
        ):
            # containers/storage drops the tar's trailing zero blocks from a zstd:chunked
            # stream (docs/reliability.md): the diff_id proves the tar is this stream plus
            # zero blocks, and zero blocks after a clean walk add no member.
            result.diff_id = str(expected_diff)
        if expected_diff is not None and result.diff_id != str(expected_diff):
            raise BlobVerificationError(
                f"layer {digest}: its uncompressed tar is {result.diff_id}, but the image "
                f"config's diff_id is {expected_diff}"
            )
    finally:
        for stage in stages:  # upstream first: a stage waiting on it is then woken at once
            stage.close()
        verifier.close()
        names.close()
    return result


def _read_file(
    full: str, path: str, want: int, open_stream: StreamOpener | None, result: LayerAnalysis
) -> None:
    """One regular file on disk, as the tar walk would read it; symlinks are never opened."""
    fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return
        stream = None
        if want & STREAM:
            if open_stream is None:
                raise LayerError(f"{path!r} selected for streaming but nothing consumes it")
            stream = open_stream(path, os.fstat(fh.fileno()).st_size)
        h = hashlib.sha256() if want & HASH else None
        kept: list[bytes] | None = [] if want & CAPTURE else None
        for chunk in iter(lambda: fh.read(blob.CHUNK), b""):
            if kept is not None:
                kept.append(chunk)
            if h is not None:
                h.update(chunk)
            if stream is not None:
                stream.update(memoryview(chunk))
        if kept is not None:
            result.files[path] = b"".join(kept)
        if h is not None:
            b64 = base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode("ascii")
            result.hashes[path] = f"sha256={b64}"
        if stream is not None:
            result.streamed[path] = stream.close()


def analyze_directory(
    root: str,
    *,
    select: Selector,
    open_stream: StreamOpener | None = None,
    exclude: tuple[str, ...] = (),
) -> LayerAnalysis:
    """The same analysis for a root filesystem or environment already on disk.

    ``exclude`` holds absolute in-image paths (such as pinguard's own install) whose trees
    are not read. Pseudo filesystems are never entered, and symbolic links are neither
    followed into directories nor read as files: nothing outside ``root`` is read.
    """
    skip = {"/proc", "/sys", "/dev", *exclude}
    result = LayerAnalysis(digest="")
    root = os.path.abspath(root)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = "/" + os.path.relpath(dirpath, root).replace(os.sep, "/")
        rel_dir = "/" if rel_dir == "/." else rel_dir
        dirnames[:] = sorted(d for d in dirnames if posixpath.join(rel_dir, d) not in skip)
        for name in dirnames:  # a symlink to a directory is listed here, never entered
            full = os.path.join(dirpath, name)
            path = posixpath.join(rel_dir, name)
            if os.path.islink(full) and select(path) & LINK:
                result.links[path] = os.readlink(full)
        for name in sorted(filenames):
            path = posixpath.join(rel_dir, name)
            if path in skip:
                continue
            want = select(path)
            result.members += 1
            if want == SKIP:
                continue
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                if want & LINK:
                    result.links[path] = os.readlink(full)
                continue
            want &= ~LINK
            if want == SKIP:
                continue
            try:
                _read_file(full, path, want, open_stream, result)
            except OSError as exc:
                result.unreadable.append((path, f"cannot read: {exc.strerror or exc}"))
    return result
