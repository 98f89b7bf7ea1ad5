"""Member names a layer tar should not have: unsafe as stored, or one path stored twice.

Owns the path rules the tar walk applies to every member's stored name (the ustar name with
its prefix, a GNU long name or a PAX ``path``/``linkpath`` record) and to a hard link's
target (a path in the layer, so ``..`` or a leading ``/`` there is flagged too), the
per-layer record of the paths seen, and ``NameFlag``, what a layer analysis keeps about each
offender. The walk still places every member where containerd would (``tar.normalize``
clamps ``..`` inside the root and drops a leading ``/``); a flag says the layer is not what
a conforming writer (buildah, docker) makes, so the audit that reads it is incomplete. A
backslash is not a path separator: on Linux ``a\\b`` is one file name, placed literally
(Debian's systemd ships ``system-systemd\\x2dcryptsetup.slice``), so it is flagged only when
reading ``\\`` as a separator would climb out or start at a root (``..\\x``, ``\\x``,
``C:\\x``): the names of an archive made to escape on Windows. Two members with one path are
flagged unless both are directories (runtimes merge those; otherwise the later member
replaces the earlier one).
"""

from __future__ import annotations

import heapq
import os
import struct
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from string import ascii_letters
from typing import IO

# The rules, as ``NameFlag.rule`` names them.
DOTDOT = "dotdot"  # a '..' component
ABSOLUTE = "absolute"  # a leading '/'
BACKSLASH = "backslash"  # a '..' component or a root when '\' is read as a separator
NUL = "nul"  # a NUL byte in the name (only a PAX path record can carry one)
LINK_NUL = "link-nul"  # a NUL byte in the link target (a PAX linkpath record)
HARDLINK = "hardlink"  # a hard link whose target has a '..' component or a leading '/'
DUPLICATE = "duplicate"  # one normalised path stored by several members
MORE = "more"  # flags beyond ``LIMIT`` of one kind, counted but not listed

#: Flags listed per layer for unsafe names, and again for repeated paths; the rest are counted.
LIMIT = 100
#: Paths held in memory before they are spilled as a sorted run (``MemberNames.spill``).
SPILL_AT = 1 << 17
#: How often (in members) the walk offers to spill; a power of two.
SPILL_CHECK = 1 << 14
#: Bytes read at a time from each spilled run when they are merged.
RUN_BUFFER = 1 << 16
_RECORD = struct.Struct("<IB")  # a spilled record: the path's length in bytes, directory or not


@dataclass(frozen=True, slots=True, order=True)
class NameFlag:
    """One unsafe member name, or one path several members of a layer have.

    ``name`` is the name as stored (for ``duplicate``: the normalised path; for ``more``: what
    was left unlisted); ``path`` is where the walk placed the member (for ``hardlink``: the
    link's target as stored); ``count`` is how many
    members have the path (``duplicate``) or how many flags were left unlisted (``more``)."""

    rule: str
    name: str
    path: str
    count: int = 1

    def subject(self) -> str:
        """The member named (with ``!r``, so a NUL or a backslash shows), or the path."""
        if self.rule == DUPLICATE:
            return f"path {self.name!r}"
        if self.rule == MORE:
            return "more names"
        return f"member {self.name!r}"

    def why(self) -> str:
        """What is wrong, for a person: the rule broken and where the member was placed."""
        at = f"read as {self.path!r}"
        if self.rule == DOTDOT:
            return (
                f"name has a '..' component; {at} (containerd clamps it inside the root; "
                "moby refuses a layer whose name climbs out)"
            )
        if self.rule == ABSOLUTE:
            return f"name is absolute; {at} (inside the root, as containerd and moby do)"
        if self.rule == BACKSLASH:
            return (
                "name holds a backslash that climbs out or starts at a root where '\\' "
                f"separates paths; {at}, one literal name, as Linux runtimes do"
            )
        if self.rule == NUL:
            return f"name holds a NUL (a PAX path record, which runtimes refuse); {at}"
        if self.rule == LINK_NUL:
            return f"link target holds a NUL (a PAX linkpath record, which runtimes refuse); {at}"
        if self.rule == HARDLINK:
            return (
                f"hard link to {self.path!r}, a target with a '..' component or a leading '/' "
                "(containerd clamps it inside the root; moby refuses a hard link that climbs out)"
            )
        if self.rule == DUPLICATE:
            return f"{self.count} members of the layer have this path; a runtime keeps the last"
        return f"{self.count} more {self.name} in this layer (the first {LIMIT} are listed)"

    def to_json(self) -> list[object]:
        return [self.rule, self.name, self.path, self.count]

    @classmethod
    def from_json(cls, data: list[object]) -> NameFlag:
        rule, name, path, count = data
        if not isinstance(count, int):
            raise TypeError(f"name flag count {count!r} is not an integer")
        return cls(str(rule), str(name), str(path), count)


def unsafe_rules(name: str) -> list[str]:
    """The rules a stored member name breaks (none for an ordinary name)."""
    rules = []
    if name[:1] == "/":
        rules.append(ABSOLUTE)
    if ".." in name.split("/"):
        rules.append(DOTDOT)
    if "\\" in name:
        windows = name.replace("\\", "/")
        if (
            ".." in windows.split("/")
            or windows[:1] == "/"
            or (name[1:2] == ":" and name[:1] in ascii_letters)
        ):
            rules.append(BACKSLASH)
    if "\0" in name:
        rules.append(NUL)
    return rules


class MemberNames:
    """What one layer's walk has seen: flags for unsafe names, and every member's path.

    Repeats are found once, at the end (``flags``): a C-speed ``set`` over the list of paths
    tells whether any path repeats, and only then are they counted. Memory is bounded
    whatever the number of members: at most ``SPILL_AT`` paths are held (8 MiB of peak RSS
    for a 1 GB layer of 68,140 members, which never spills); the walk calls ``spill`` every
    ``SPILL_CHECK`` members, which past ``SPILL_AT`` writes the held paths as one sorted run
    to an anonymous temporary file and starts again; the end merges the runs with
    ``heapq.merge``, reading each through a ``RUN_BUFFER`` window. At most ``LIMIT`` unsafe
    names are kept.
    """

    __slots__ = ("_dirs", "_omitted", "_runs", "_spill", "_unsafe", "paths")

    def __init__(self) -> None:
        self.paths: list[str] = []  # every member's path (the walk appends itself: ``see``)
        self._dirs: list[str] = []  # the paths of directory members
        self._unsafe: list[NameFlag] = []
        self._omitted = 0
        self._spill: IO[bytes] | None = None  # sorted runs of (path, directory) records
        self._runs: list[tuple[int, int]] = []  # (offset, length) of each run in ``_spill``

    def spill(self, force: bool = False) -> None:
        """Past ``SPILL_AT`` held paths (or with ``force``, any), write them and the held
        directories as one sorted run of records to the temporary file and hold none."""
        if len(self.paths) < (1 if force else SPILL_AT):
            return
        if self._spill is None:
            self._spill = tempfile.TemporaryFile()  # noqa: SIM115 - closed by ``close``
        records = sorted([(p, 0) for p in self.paths] + [(d, 1) for d in self._dirs])
        out = bytearray()
        for path, kind in records:
            raw = path.encode("utf-8", "surrogateescape")
            out += _RECORD.pack(len(raw), kind)
            out += raw
        start = self._spill.seek(0, os.SEEK_END)
        self._spill.write(out)
        self._runs.append((start, len(out)))
        self.paths = []
        self._dirs = []

    def close(self) -> None:
        """Drop the temporary file of spilled runs, if any."""
        if self._spill is not None:
            self._spill.close()
            self._spill = None
            self._runs = []

    def _read_run(self, offset: int, length: int) -> Iterator[tuple[str, int]]:
        assert self._spill is not None
        fd = self._spill.fileno()
        buf = b""
        at = offset
        end = offset + length
        while True:
            if len(buf) < _RECORD.size and at < end:
                chunk = os.pread(fd, min(RUN_BUFFER, end - at), at)
                at += len(chunk)
                buf += chunk
            if len(buf) < _RECORD.size:
                return
            size, kind = _RECORD.unpack_from(buf)
            while len(buf) < _RECORD.size + size:
                more = os.pread(fd, min(RUN_BUFFER, end - at), at)
                if not more:
                    raise ValueError("a spilled run is cut short")
                at += len(more)
                buf += more
            yield buf[_RECORD.size : _RECORD.size + size].decode("utf-8", "surrogateescape"), kind
            buf = buf[_RECORD.size + size :]

    def _counted(self) -> Iterator[tuple[str, int, int]]:
        """(path, members, directory members) for every path, in order, from the runs and
        what is held (spilled first, so the held paths are a run too)."""
        self.spill(force=True)
        runs = [self._read_run(offset, length) for offset, length in self._runs]
        path: str | None = None
        members = dirs = 0
        for p, kind in heapq.merge(*runs):
            if p != path:
                if path is not None:
                    yield path, members, dirs
                path, members, dirs = p, 0, 0
            if kind:
                dirs += 1
            else:
                members += 1
        if path is not None:
            yield path, members, dirs

    def made(self, paths: Iterable[str]) -> set[str]:
        """Which of ``paths`` a directory member of this layer made."""
        wanted = set(paths)
        if not wanted:
            return set()
        if self._spill is None:
            return wanted & set(self._dirs)
        return {p for p, _n, d in self._counted() if d and p in wanted}

    def see(
        self,
        name: str,
        path: str,
        directory: bool,
        link: str | None = None,
        *,
        hardlink: bool = False,
    ) -> None:
        """One member: its name as stored, the path it was placed at, whether it is a
        directory, and its link target when a long-name or PAX record gave one.

        The tar walk inlines the common case instead (a call per member costs about 4% of
        the header walk): it appends ``path`` to ``paths`` and calls ``note`` only for a
        directory, a link target from a record, or a name that is not ``path`` without its
        leading '/' or that holds a backslash or a NUL."""
        self.paths.append(path)
        self.note(name, path, directory, link, hardlink=hardlink)

    def note(
        self, name: str, path: str, directory: bool, link: str | None, *, hardlink: bool = False
    ) -> None:
        """A member whose path is already in ``paths``: check its name (and a hard link's
        target, a path in the layer: a symlink's may climb, as ``../lib/x`` does), keep
        directories."""
        if "\\" in name or ".." in name or "\0" in name or name[:1] == "/":
            for rule in unsafe_rules(name):
                self._flag(NameFlag(rule, name, path))
        if link is not None and "\0" in link:
            self._flag(NameFlag(LINK_NUL, name, path))
        if hardlink and link is not None and (link[:1] == "/" or ".." in link.split("/")):
            self._flag(NameFlag(HARDLINK, name, link))  # ``path``: the target, as stored
        if directory:
            self._dirs.append(path)

    def _flag(self, flag: NameFlag) -> None:
        if len(self._unsafe) < LIMIT:
            self._unsafe.append(flag)
        else:
            self._omitted += 1

    def _repeats(self) -> list[NameFlag]:
        """Paths several members have, unless every one of them is a directory (runtimes
        merge those) or the path is the root (runtimes skip './' and '/' entries)."""
        if self._spill is not None:
            return [
                NameFlag(DUPLICATE, path, path, n)
                for path, n, d in self._counted()
                if n > 1 and d != n and path != "/"
            ]
        paths = self.paths
        if len(set(paths)) == len(paths):
            return []
        counts = Counter(paths)
        dirs = Counter(self._dirs)
        return [
            NameFlag(DUPLICATE, path, path, n)
            for path, n in sorted(counts.items())
            if n > 1 and dirs[path] != n and path != "/"
        ]

    def flags(self) -> list[NameFlag]:
        """Every flag, sorted; beyond ``LIMIT`` of a kind, one ``more`` flag counts the rest."""
        out = list(self._unsafe)
        if self._omitted:
            out.append(NameFlag(MORE, "unsafe names", "", self._omitted))
        repeats = self._repeats()
        out.extend(repeats[:LIMIT])
        if len(repeats) > LIMIT:
            out.append(NameFlag(MORE, "repeated paths", "", len(repeats) - LIMIT))
        return sorted(out)
