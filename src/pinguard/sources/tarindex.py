"""Random access to the regular files inside an uncompressed tar file, without extracting.

``docker-archive:`` and ``oci-archive:`` images are tar files whose members are the image's
blobs. ``TarIndex`` walks the member headers once, records where each member's data starts
and how long it is (following symlinks and hard links inside the archive), and then opens any
member as a ``BinaryIO`` over a fresh file handle bounded to that byte range
(``pinguard.window.SliceReader``). A fresh handle per
blob means several blobs can be read at once, from threads or forked worker processes, without
sharing a file position.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pinguard.errors import ImageNotFound, SourceError
from pinguard.window import SliceReader


@dataclass(frozen=True, slots=True)
class Member:
    """Where one regular file's bytes sit inside the tar file."""

    name: str
    offset: int
    size: int


def normalize_member_name(name: str) -> str:
    """``./a//b/`` -> ``a/b``: the form member names are indexed and looked up under."""
    name = posixpath.normpath("/" + name.replace("\\", "/")).lstrip("/")
    return "" if name == "." else name


class TarIndex:
    """The regular-file members of one tar file, by normalised name."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        self._members: dict[str, Member] = {}
        self._links: dict[str, str] = {}
        if not path.exists():
            raise ImageNotFound(f"{what}: {str(path)!r} does not exist")
        if not path.is_file():
            raise ImageNotFound(f"{what}: {str(path)!r} is not a file")
        try:
            with tarfile.open(path, mode="r:") as tar:
                for info in tar:
                    name = normalize_member_name(info.name)
                    if info.isreg():
                        self._members[name] = Member(name, info.offset_data, info.size)
                    elif info.issym():
                        target = posixpath.join(posixpath.dirname(name), info.linkname)
                        self._links[name] = normalize_member_name(target)
                    elif info.islnk():
                        self._links[name] = normalize_member_name(info.linkname)
        except (tarfile.TarError, EOFError) as exc:
            raise SourceError(
                f"{what}: {str(path)!r} is not a readable tar archive: {exc}"
            ) from exc
        except OSError as exc:
            raise SourceError(f"{what}: cannot read {str(path)!r}: {exc}") from exc

    def names(self) -> list[str]:
        return sorted(self._members)

    def find(self, name: str) -> Member | None:
        """The member at ``name`` after following links (at most 16 hops)."""
        name = normalize_member_name(name)
        for _ in range(16):
            member = self._members.get(name)
            if member is not None:
                return member
            target = self._links.get(name)
            if target is None:
                return None
            name = target
        return None

    def get(self, name: str) -> Member:
        member = self.find(name)
        if member is None:
            raise ImageNotFound(f"{self.what}: archive has no member {name!r}")
        return member

    def open(self, name: str) -> BinaryIO:
        member = self.get(name)
        return io.BufferedReader(SliceReader(self.path, member.offset, member.size), 1 << 20)

    def read(self, name: str, limit: int = 64 << 20) -> bytes:
        """A small member (JSON), read whole; refuses members above ``limit`` bytes."""
        member = self.get(name)
        if member.size > limit:
            raise SourceError(f"{self.what}: member {name!r} is too large ({member.size} bytes)")
        with self.open(name) as stream:
            return stream.read()
