"""Reading an ELF shared object's dynamic facts from a stream, in whatever order its parts lie.

This module owns ``ElfScanner``: fed a member's bytes in order, chunk by chunk, it returns
``ElfFacts`` (``DT_SONAME``, ``DT_NEEDED``, ``DT_RPATH``, ``DT_RUNPATH``, a version banner
and the RECORD-style content digest) while keeping only what those facts need. It captures
*by need*: the ELF header says where the program headers are; the program headers say where
``PT_DYNAMIC`` is and how virtual addresses map to file offsets; the dynamic segment says
where the string table (``DT_STRTAB``) is and which offsets in it are wanted. Each piece is
captured when the stream reaches it, whatever the order: GNU ld and lld put ``.dynstr`` in
the first ``PT_LOAD`` before ``.dynamic``; patchelf (auditwheel's repair, torch's CI) appends
a new ``.dynstr`` (and often ``.dynamic``) in a new ``PT_LOAD`` at the end of the file. Since a
string table placed before the dynamic segment has already streamed past when the dynamic
segment names it, the scanner keeps, in case, the start of the segment that starts the file
and of each read-only segment before the dynamic segment (up to ``STRTAB_WINDOW``), and drops
them once the wanted strings are located. Every piece is spooled: memory up to
``SPOOL_MEMORY`` each, a temporary file beyond, so memory stays bounded whatever the file.
A fact that really cannot be read is the object's
``problem``, saying why; nothing is guessed. The same scanner reads parts at random when the
content digest is vouched for elsewhere (a zstd:chunked layer's table of contents): ``gaps``
names the ranges still wanted, ``feed_at`` hands them in, round after round (head, program
headers, dynamic segment, strings), and no window is kept in case; in a file whose name the
banner table knows, the banner is searched from the start in growing steps up to its first
match, as the stream finds it. docs/native.md says why this mechanism
was chosen.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import re
import struct
import tempfile
from dataclasses import dataclass, replace
from typing import Any

VERSION = "2"

#: A kept piece is held in memory up to this size and in a temporary file beyond it.
SPOOL_MEMORY = 4 << 20
#: How much of the start of each read-only segment before the dynamic segment is kept (a
#: ``.dynsym`` + ``.dynstr`` larger than this, in front of the dynamic segment, is reported).
STRTAB_WINDOW = 32 << 20
#: The most bytes kept of a dynamic segment or of one string: far above any real one.
PIECE_CAP = 4 << 20
STRING_CAP = 64 << 10
_HEAD_MIN = 4 << 10  # kept before the program headers are known: ELF header + program headers
_ELF_MAGIC = b"\x7fELF"

_PT_LOAD, _PT_DYNAMIC = 1, 2
_PF_X, _PF_W = 1, 2
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_STRSZ, _DT_SONAME, _DT_RPATH, _DT_RUNPATH = (
    0,
    1,
    5,
    10,
    14,
    15,
    29,
)
_STRING_TAGS = (_DT_NEEDED, _DT_SONAME, _DT_RPATH, _DT_RUNPATH)

#: Library banners: (library, file name glob, literal prefix, pattern whose group 1 is the
#: version). Only files whose name matches the glob are scanned, and only banners checked
#: against real files are listed (docs/native.md says which and why).
BANNERS: tuple[tuple[str, str, bytes, re.Pattern[bytes]], ...] = (
    (
        "nccl",
        "libnccl.so*",
        b"NCCL version ",
        re.compile(rb"NCCL version (\d+\.\d+\.\d+(?:[+.][0-9A-Za-z.]+)?)(?![0-9A-Za-z.+])"),
    ),
)
_BANNER_OVERLAP = 128  # a banner plus its version fits in this many bytes
#: Random access: the banner search reads this much first, then twice as much each round,
#: up to ``BANNER_STEP_MAX`` (NCCL's banner lies 2.9 MB into its 252 MB library).
BANNER_STEP = 1 << 20
BANNER_STEP_MAX = 16 << 20


@dataclass(frozen=True, slots=True)
class ElfFacts:
    """What one shared object says about itself (``problem`` set when it was not all read)."""

    digest: str  # "sha256=<urlsafe b64>", as in RECORD
    size: int
    soname: str | None = None
    needed: tuple[str, ...] = ()
    rpath: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    library: str | None = None  # the banner table's name ("nccl") when a banner was found
    version: str | None = None  # the version the banner states
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "digest": self.digest,
            "size": self.size,
            "soname": self.soname,
            "needed": list(self.needed),
            "rpath": list(self.rpath),
            "runpath": list(self.runpath),
            "library": self.library,
            "version": self.version,
            "problem": self.problem,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ElfFacts:
        return cls(
            digest=str(data["digest"]),
            size=int(data["size"]),
            soname=data.get("soname"),
            needed=tuple(data.get("needed", ())),
            rpath=tuple(data.get("rpath", ())),
            runpath=tuple(data.get("runpath", ())),
            library=data.get("library"),
            version=data.get("version"),
            problem=data.get("problem"),
        )


class _Unreadable(Exception):
    """A fact lies in bytes that were not kept (the message says which and why)."""


class _Piece:
    """A byte range ``[start, end)`` of the file, filled in order as the stream passes it;
    held in memory up to ``SPOOL_MEMORY`` bytes and in a temporary file beyond."""

    __slots__ = ("_buf", "end", "length", "start")

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end
        self.length = 0
        self._buf = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)  # noqa: SIM115

    @property
    def filled(self) -> bool:
        return self.start + self.length >= self.end

    def take(self, at: int, data: memoryview) -> None:
        """Append what ``data`` (at file offset ``at``) holds of the next missing bytes."""
        have = self.start + self.length
        if have >= self.end or not at <= have < at + len(data):
            return
        self._buf.seek(self.length)  # a read may have moved the position
        self.length += self._buf.write(data[have - at : min(self.end, at + len(data)) - at])

    def read(self, off: int, size: int) -> bytes:
        """Up to ``size`` kept bytes from file offset ``off`` (which this piece holds)."""
        self._buf.seek(off - self.start)
        return self._buf.read(min(size, self.start + self.length - off))

    def holds(self, off: int) -> bool:
        return self.start <= off < self.start + self.length

    def usage(self) -> tuple[int, int]:
        """(bytes in memory, bytes in a temporary file)."""
        rolled = bool(getattr(self._buf, "_rolled", False))
        return (0, self.length) if rolled else (self.length, 0)

    def close(self) -> None:
        self._buf.close()


@dataclass(frozen=True, slots=True)
class _Layout:
    """The program headers' facts: byte order, class, PT_LOAD mapping, PT_DYNAMIC."""

    little: bool
    is64: bool
    loads: tuple[tuple[int, int, int], ...]  # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None  # (offset, filesz)

    def offset_of(self, vaddr: int) -> int | None:
        """The file offset holding virtual address ``vaddr`` (as the loader maps it)."""
        for start, offset, size in self.loads:
            if start <= vaddr < start + size:
                return offset + (vaddr - start)
        return None


class ElfScanner:
    """Feed a shared object's bytes in order with ``feed``; ``finish`` gives its facts."""

    def __init__(self, size: int, name: str = "", *, digest: str | None = None) -> None:
        self.size = size
        # ``digest`` given: parts are read at random (``gaps``, ``feed_at``) and the content
        # digest is the one that vouches for them (a zstd:chunked TOC); no window is kept in
        # case, since any part can be asked for
        self._given = digest
        self._pos = size if digest is not None else 0
        self._hash = hashlib.sha256()
        self._elf: bool | None = None
        # what is kept: the first bytes (ELF and program headers), then by need
        self._pieces: list[_Piece] = [_Piece(0, min(size, _HEAD_MIN))]
        self._layout: _Layout | None = None
        self._phdrs: tuple[int, int] | None = None  # (offset, end) of the program headers
        self._entries: list[tuple[int, int]] | None = None  # (tag, value) of PT_DYNAMIC
        self._strtab: int | None = None  # file offset of DT_STRTAB
        self._problem: str | None = None
        self._banners = [b for b in BANNERS if fnmatch.fnmatchcase(name, b[1])]
        self._tail = b""
        self._found: tuple[str, str] | None = None
        self._peak = (0, 0)
        # random access: the banner is searched in order from the start, a growing step at
        # a time, and the search stops at the first match (as the stream's does)
        self._scan_pos = 0
        self._step = BANNER_STEP

    # -- streaming -------------------------------------------------------------------------
    def feed(self, chunk: bytes | bytearray | memoryview) -> None:
        data = memoryview(chunk).cast("B")
        if not data:
            return
        at = self._pos
        self._pos += len(data)
        elf = self._take(at, data, at)  # learns from the first bytes whether it is ELF
        if self._elf is not False:  # a file that is not ELF has no facts, so no digest
            self._hash.update(data)
        if elf and self._found is None and self._banners:
            self._scan(bytes(data))

    def gaps(self) -> list[tuple[int, int]]:
        """Random access: the byte ranges still wanted (empty once the facts are known):
        the pieces the facts lie in, and the next stretch of the banner search."""
        out = [
            (p.start + p.length, min(p.end, self.size))
            for p in self._pieces
            if not p.filled and p.start + p.length < min(p.end, self.size)
        ]
        if self._searching():
            out.append((self._scan_pos, min(self.size, self._scan_pos + self._step)))
        return out

    def _searching(self) -> bool:
        return (
            bool(self._banners)
            and self._elf is not False
            and self._found is None
            and self._scan_pos < self.size
        )

    def feed_at(self, at: int, chunk: bytes) -> None:
        """Random access: the bytes at file offset ``at`` (one of the ``gaps``)."""
        assert self._given is not None, "feed_at is for a scanner given the digest"
        data = memoryview(chunk).cast("B")
        searching = self._searching() and at == self._scan_pos
        if self._take(at, data, 0) and searching:
            self._scan(bytes(data))
            self._scan_pos += len(data)
            self._step = min(2 * self._step, BANNER_STEP_MAX)

    def _take(self, at: int, data: memoryview, floor: int) -> bool:
        """Keep what the pieces want of ``data`` (at offset ``at``) and learn from it;
        bytes before ``floor`` that no piece kept are gone. True when this is an ELF file."""
        if self._elf is False:
            return False
        for piece in self._pieces:
            piece.take(at, data)
        self._note_peak()
        if self._elf is None:
            magic = self._read(0, 4)
            if len(magic) < 4:
                return False
            self._elf = magic == _ELF_MAGIC
            if not self._elf:
                self._close()
                return False
        # each step may name new pieces, which this same chunk may already hold
        while self._problem is None and self._advance(floor):
            for piece in self._pieces:
                piece.take(at, data)
            self._note_peak()
        return True

    def _advance(self, at: int) -> bool:
        """Learn what the kept bytes allow; True when that made progress (a new piece to
        fill, or a step done that the chunk at hand may let the next one finish)."""
        try:
            if self._layout is None:
                return self._read_program_headers(at)
            if self._entries is None:
                return self._read_dynamic(at)
        except _Unreadable as exc:
            self._problem = str(exc)
        return False

    def _want(self, start: int, end: int, at: int, what: str | None) -> bool:
        """Keep ``[start, end)``: True when a new piece was named for it, False when the
        kept pieces already hold or will hold it. ``at`` is the offset of the chunk at hand:
        bytes before it that no piece kept are gone, which is an error naming ``what``, or,
        when ``what`` is None (a window kept in case), a piece from ``at`` on."""
        missing = start
        while missing < end:
            piece = next((p for p in self._pieces if p.start <= missing < p.end), None)
            if piece is None:
                break
            missing = piece.end
        if missing >= end or (what is None and self._given is not None):
            return False  # held, or a window kept in case where any part can be asked for
        if missing < at and what is None:
            missing = at
        elif missing < at:
            raise _Unreadable(
                f"{what} at offset {start} lies before the part of the file that names it, "
                "in bytes the stream had passed without keeping"
            )
        self._pieces.append(_Piece(missing, end))
        return True

    def _read(self, off: int, size: int) -> bytes:
        """Up to ``size`` kept bytes from ``off`` on (fewer where nothing kept goes on)."""
        out = b""
        while len(out) < size:
            piece = next((p for p in self._pieces if p.holds(off)), None)
            if piece is None:
                break
            more = piece.read(off, size - len(out))
            if not more:
                break
            out += more
            off += len(more)
        return out

    def _read_program_headers(self, at: int) -> bool:
        ident = self._read(0, 64)
        if len(ident) < 64:
            if self._pos >= min(64, self.size):
                raise _Unreadable("the file is shorter than an ELF header")
            return False
        if ident[4] not in (1, 2) or ident[5] not in (1, 2):
            raise _Unreadable(f"unknown ELF class {ident[4]} or data encoding {ident[5]}")
        is64, little = ident[4] == 2, ident[5] == 1
        e = "<" if little else ">"
        if is64:
            (phoff,) = struct.unpack_from(e + "Q", ident, 32)
            phentsize, phnum = struct.unpack_from(e + "HH", ident, 54)
        else:
            (phoff,) = struct.unpack_from(e + "I", ident, 28)
            phentsize, phnum = struct.unpack_from(e + "HH", ident, 42)
        want = 56 if is64 else 32
        if phnum and phentsize < want:
            raise _Unreadable(f"program header entries of {phentsize} bytes (expected {want})")
        end = phoff + phentsize * phnum
        if end > self.size:
            raise _Unreadable(f"program headers end at {end}, past the file's {self.size} bytes")
        if self._phdrs is None:
            self._phdrs = (phoff, end)
            if self._want(phoff, end, at, "the program header table"):
                # program headers late in the file (BOLT moves them to its new segment):
                # until they are read nothing says where the rest lies, so keep all before
                # them (spooled) and let go of what turns out not to be needed
                first = self._pieces[0].end
                if first < phoff:
                    self._want(first, phoff, at, None)
                return True
        table = self._read(phoff, end - phoff)
        if len(table) < end - phoff:
            return False
        loads: list[tuple[int, int, int]] = []
        candidates: list[tuple[int, int]] = []  # read-only segments: (offset, end)
        dynamic: tuple[int, int] | None = None
        fmt = e + ("IIQQQQQQ" if is64 else "IIIIIIII")
        for i in range(phnum):
            f = struct.unpack_from(fmt, table, i * phentsize)
            if is64:
                p_type, p_flags, p_offset, p_vaddr, p_filesz = f[0], f[1], f[2], f[3], f[5]
            else:
                p_type, p_offset, p_vaddr, p_filesz, p_flags = f[0], f[1], f[2], f[4], f[6]
            if p_type == _PT_LOAD:
                loads.append((p_vaddr, p_offset, p_filesz))
                if p_offset == 0 or not p_flags & (_PF_X | _PF_W):
                    candidates.append((p_offset, p_offset + p_filesz))
            elif p_type == _PT_DYNAMIC and dynamic is None:
                dynamic = (p_offset, p_filesz)
        self._layout = _Layout(little, is64, tuple(loads), dynamic)
        if dynamic is None:
            self._entries = []  # a static object: nothing to resolve
            return False
        # progress either way: the dynamic segment may already be kept (a small file)
        off, size = dynamic[0], min(dynamic[1], PIECE_CAP)
        self._want(off, off + size, at, "the dynamic segment")
        # A string table placed before the dynamic segment has streamed past when the
        # dynamic segment names it, so keep where every linker puts one: the start of the
        # segment that starts the file and of each read-only segment, up to the dynamic
        # segment (a string table after it is captured by need).
        for lo, seg_end in sorted(candidates):
            hi = min(seg_end, off, lo + STRTAB_WINDOW)
            if max(lo, at) < hi:
                self._want(lo, hi, at, None)
        return True

    def _read_dynamic(self, at: int) -> bool:
        layout = self._layout
        assert layout is not None
        assert layout.dynamic is not None
        off, size = layout.dynamic[0], min(layout.dynamic[1], PIECE_CAP)
        raw = self._read(off, size)
        if len(raw) < size:
            return False
        width = 8 if layout.is64 else 4
        fmt = ("<" if layout.little else ">") + ("qQ" if layout.is64 else "iI")
        entries: list[tuple[int, int]] = []
        for i in range(0, len(raw) - 2 * width + 1, 2 * width):
            tag, value = struct.unpack_from(fmt, raw, i)
            if tag == _DT_NULL:
                break
            entries.append((tag, value))
        self._entries = entries
        wanted = sorted({v for t, v in entries if t in _STRING_TAGS})
        for piece in self._pieces:
            piece.end = piece.start + piece.length  # nothing more is needed in front
        if not wanted:
            self._close()
            return False
        strtab = next((v for t, v in entries if t == _DT_STRTAB), None)
        strsz = next((v for t, v in entries if t == _DT_STRSZ), None)
        offset = layout.offset_of(strtab) if strtab is not None else None
        if offset is None or strsz is None:
            raise _Unreadable("the dynamic string table is in no PT_LOAD segment")
        self._strtab = offset
        limit = offset + strsz
        spans: list[list[int]] = []
        for value in wanted:
            lo, hi = offset + value, min(limit, offset + value + STRING_CAP)
            if lo >= limit:
                raise _Unreadable(f"dynamic string {value} lies past the table's {strsz} bytes")
            if spans and lo <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], hi)
            else:
                spans.append([lo, hi])
        # the pieces kept in case have served their purpose: drop those holding no string
        keep = [p for p in self._pieces if any(p.start < hi and lo < p.end for lo, hi in spans)]
        for piece in self._pieces:
            if piece not in keep:
                piece.close()
        self._pieces = keep
        for lo, hi in spans:
            self._want(lo, hi, at, "the dynamic string table")
        return True  # progress: the next step finds nothing more to do

    def _scan(self, data: bytes) -> None:
        window = self._tail + data
        for library, _glob, prefix, pattern in self._banners:
            at = window.find(prefix)
            while at >= 0:
                m = pattern.match(window, at)
                if m is not None and m.end() < len(window):  # else the version may go on
                    self._found = (library, m.group(1).decode("ascii", "replace"))
                    self._tail = b""
                    return
                if m is not None or len(window) - at < _BANNER_OVERLAP:
                    break  # possibly cut by the chunk border: the tail keeps it
                at = window.find(prefix, at + 1)
        self._tail = window[-_BANNER_OVERLAP:]

    # -- results ---------------------------------------------------------------------------
    def _note_peak(self) -> None:
        memory, spilled = self.kept()
        self._peak = (max(self._peak[0], memory), max(self._peak[1], spilled))

    def peak(self) -> tuple[int, int]:
        """The most (bytes in memory, bytes in temporary files) kept at any one time."""
        return self._peak

    def kept(self) -> tuple[int, int]:
        """(bytes held in memory, bytes in temporary files) right now."""
        usage = [p.usage() for p in self._pieces]
        return (sum(m for m, _ in usage), sum(d for _, d in usage))

    def _close(self) -> None:
        for piece in self._pieces:
            piece.close()
        self._pieces = []

    def finish(self) -> ElfFacts | None:
        """The facts, or None when the member is not an ELF file (a linker script, say)."""
        digest = self._given or (
            "sha256=" + base64.urlsafe_b64encode(self._hash.digest()).rstrip(b"=").decode()
        )
        try:
            return self._finish(digest)
        finally:
            self._close()

    def _finish(self, digest: str) -> ElfFacts | None:
        if self._elf is not True:
            return None
        if self._given is not None and self._searching():
            return ElfFacts(
                digest=digest,
                size=self.size,
                problem=f"the banner search stopped at {self._scan_pos} of {self.size} bytes",
            )
        if self._found is None and self._tail:
            for library, _glob, _prefix, pattern in self._banners:
                m = pattern.search(self._tail)
                if m is not None:
                    self._found = (library, m.group(1).decode("ascii", "replace"))
                    break
        base = ElfFacts(
            digest=digest,
            size=self._pos,
            library=self._found[0] if self._found else None,
            version=self._found[1] if self._found else None,
        )
        if self._pos != self.size:
            return replace(base, problem=f"read {self._pos} of {self.size} bytes")
        if self._problem is not None:
            return replace(base, problem=self._problem)
        if self._layout is None:
            return replace(base, problem="the file ends inside its ELF or program headers")
        if self._entries is None:
            return replace(base, problem="the file ends before its dynamic segment")
        soname: str | None = None
        needed: list[str] = []
        rpath: list[str] = []
        runpath: list[str] = []
        try:
            for tag, value in self._entries:
                if tag == _DT_NEEDED:
                    needed.append(self._string(value))
                elif tag == _DT_SONAME:
                    soname = self._string(value)
                elif tag == _DT_RPATH:
                    rpath.extend(p for p in self._string(value).split(":") if p)
                elif tag == _DT_RUNPATH:
                    runpath.extend(p for p in self._string(value).split(":") if p)
        except _Unreadable as exc:
            return replace(base, problem=str(exc))
        return replace(
            base, soname=soname, needed=tuple(needed), rpath=tuple(rpath), runpath=tuple(runpath)
        )

    def _string(self, value: int) -> str:
        assert self._strtab is not None
        at = self._strtab + value
        raw = self._read(at, STRING_CAP)
        end = raw.find(b"\0")
        if end < 0:
            raise _Unreadable(
                f"the dynamic string at offset {at} has no terminator within the "
                f"{len(raw)} bytes kept"
            )
        return raw[:end].decode("utf-8", "surrogateescape")


def scan_bytes(data: bytes, name: str = "", chunk: int = 1 << 20) -> ElfFacts | None:
    """The facts of an object already in memory, fed ``chunk`` bytes at a time (tests)."""
    scanner = ElfScanner(len(data), name)
    view = memoryview(data)
    for i in range(0, len(data), chunk):
        scanner.feed(view[i : i + chunk])
    return scanner.finish()
