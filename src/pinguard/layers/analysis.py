"""One layer's analysis: what a selector kept, the whiteouts, and how it is produced.

Owns ``LayerAnalysis`` (the unit the per-layer cache stores) and the two ways to make one:
``analyze_stream`` joins a raw blob stream to the verifier, the inflater and the tar walk, and
records whiteouts and opaque whiteouts as the OCI image spec defines them (applying them to a
state is ``pinguard.audit.state``'s job); ``analyze_directory`` gives the same analysis for a
tree already on disk, never following a symlink. Nothing here knows about Python packaging:
the selector says which paths matter.
"""

from __future__ import annotations

import base64
import hashlib
import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

from pinguard.errors import LayerError
from pinguard.layers import blob
from pinguard.layers.blob import DECOMPRESS_ERRORS, VerifyingReader, inflated_chunks
from pinguard.layers.tar import CAPTURE, SKIP, Chunks, Selector, walk_members


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
    members: int = 0
    size: int = 0  # uncompressed tar bytes
    # (path, reason) of selected files that could not be read (directories on disk only;
    # a layer stream that cannot be read is an error, not a partial analysis)
    unreadable: list[tuple[str, str]] = field(default_factory=list)

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
            "members": self.members,
            "size": self.size,
            "unreadable": [list(u) for u in sorted(self.unreadable)],
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
            members=int(data["members"]),  # type: ignore[call-overload]
            size=int(data["size"]),  # type: ignore[call-overload]
            unreadable=[(str(p), str(w)) for p, w in data.get("unreadable", [])],  # type: ignore[attr-defined]
        )


WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"


def analyze_stream(
    raw: BinaryIO,
    *,
    digest: str | None,
    size: int | None,
    select: Selector,
    progress: Callable[[int], None] | None = None,
    prefetch: bool = True,
) -> LayerAnalysis:
    """Stream one blob: verify it, walk its tar, keep what ``select`` asks for."""
    verifier = VerifyingReader(raw, digest, size, progress, prefetch=prefetch)
    try:
        result = LayerAnalysis(digest=digest or "")
        counter = [0]
        try:
            src = Chunks(inflated_chunks(verifier))
            for member in walk_members(src, select, False, counter):
                path = member.path
                if ".wh." in path:
                    cut = path.rfind("/")
                    base = path[cut + 1 :]
                    if base.startswith(WHITEOUT):
                        parent = path[:cut] or "/"
                        if base == OPAQUE:
                            result.opaque.append(parent)
                        else:
                            result.whiteouts.append(posixpath.join(parent, base[len(WHITEOUT) :]))
                        continue
                if member.data is not None:
                    result.files[member.path] = member.data
                elif member.digest is not None:
                    result.hashes[member.path] = member.digest
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
        computed = verifier.finish()
        if not result.digest:
            result.digest = computed
    finally:
        verifier.close()
    return result


def analyze_directory(
    root: str, *, select: Selector, exclude: tuple[str, ...] = ()
) -> LayerAnalysis:
    """The same analysis for a root filesystem or environment already on disk.

    ``exclude`` holds absolute in-image paths (such as pinguard's own install) whose trees
    are not read. Pseudo filesystems are never entered.
    """
    skip = {"/proc", "/sys", "/dev", *exclude}
    result = LayerAnalysis(digest="")
    root = os.path.abspath(root)
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = "/" + os.path.relpath(dirpath, root).replace(os.sep, "/")
        rel_dir = "/" if rel_dir == "/." else rel_dir
        dirnames[:] = sorted(d for d in dirnames if posixpath.join(rel_dir, d) not in skip)
        for name in filenames:
            path = posixpath.join(rel_dir, name)
            if path in skip:
                continue
            want = select(path)
            result.members += 1
            if want == SKIP:
                continue
            full = os.path.join(dirpath, name)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            try:
                with open(full, "rb") as fh:
                    if want == CAPTURE:
                        result.files[path] = fh.read()
                    else:
                        h = hashlib.sha256()
                        for chunk in iter(lambda: fh.read(blob.CHUNK), b""):
                            h.update(chunk)
                        digest = base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()
                        result.hashes[path] = f"sha256={digest}"
            except OSError as exc:
                result.unreadable.append((path, f"cannot read: {exc.strerror or exc}"))
    return result
