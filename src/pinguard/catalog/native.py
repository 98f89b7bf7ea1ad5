"""Native shared objects: ELF facts read from a stream, their links, owners and analyzer.

This module owns what pinguard learns about ELF shared objects without holding a file:
``ElfScanner`` is fed a member's bytes chunk by chunk (as the layer walk streams them) and
keeps only bounded pieces: the ELF and program headers and the start of the file up to the
end of the first ``PT_LOAD`` segment (at most ``HEAD_CAP``; where GNU ld and lld put the
dynamic string table), the ``PT_DYNAMIC`` segment captured when the stream reaches its
offset, and the string table itself if it comes after the dynamic segment. pyelftools
parses those pieces afterwards (through a sparse stream that serves only them), giving
``DT_SONAME``, ``DT_NEEDED``, ``DT_RPATH`` and ``DT_RUNPATH``. Version banners ("NCCL version
2.28.9+cuda13.0") are searched chunk by chunk with an overlap, so a banner split across two
chunks is still found. The content digest is RECORD's format (``sha256=<urlsafe b64>``).
``NativeAnalyzer`` plugs this into the catalog: it streams shared objects and dpkg's
``.list`` files, captures ``/etc/ld.so.conf(.d)``, keeps links, and per state joins each
library to its owner (``libraries``). ``FileView`` is a state's files and links as the
loader resolver (``pinguard.audit.loader``) walks them.
"""

from __future__ import annotations

import base64
import bisect
import fnmatch
import functools
import hashlib
import io
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Literal, cast

from elftools.common.exceptions import ELFError
from elftools.common.utils import parse_cstring_from_stream, struct_parse
from elftools.elf.structs import ELFStructs

from pinguard.catalog.interface import (
    Analyzer,
    AnalyzerOptions,
    AnalyzerSession,
    SnapshotParts,
    StateView,
)
from pinguard.layers.links import resolve
from pinguard.layers.tar import CAPTURE, LINK, SKIP, STREAM, MemberStream
from pinguard.models import DebPackage, Environment, Incomplete, NativeLibrary

VERSION = "1"

#: The bytes kept verbatim from the start of each shared object: the headers and the
#: read-only region with .dynsym/.dynstr. A string beyond it that the dynamic segment names
#: is reported as unreadable (the object is listed with a problem), never guessed.
HEAD_CAP = 32 << 20
#: The most bytes kept of a dynamic segment or a late string table.
PIECE_CAP = 4 << 20
_ELF_MAGIC = b"\x7fELF"
_HEAD_MIN = 64 << 10  # kept before the program headers are known
_BLOCK = 1 << 20  # the kept head grows in blocks of about this size

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

_SO_NAME = re.compile(r"^[^/]+\.so(\.[0-9][0-9A-Za-z_.]*)?$")
_EXT_TAG = re.compile(r"\.(cpython-\d+[^./]*|abi3)\.so$")  # PEP 3149 / PEP 384 suffixes


def wants(path: str) -> bool:
    """Shared objects worth reading: ``lib*.so[.N]`` anywhere, other ``*.so[.N]`` in a
    Python environment or a ``lib*`` directory tree.

    Library names (``lib*``) and extension modules with an ABI tag (``*.cpython-311-…so``,
    ``*.abi3.so``: a symlinked site-packages may put them in any directory) count wherever
    they are, since ``ld.so.conf`` and RPATHs may name any directory (not below
    ``/usr/share``, ``/proc``, ``/sys``, ``/dev``); other shared objects (extension modules such as
    ``_C.cpython-311-x86_64-linux-gnu.so``) count when a directory on their path is a
    ``site-packages``/``dist-packages`` or starts with ``lib`` (``/usr/lib``, ``/lib64``,
    ``/opt/x/lib``).
    """
    base = path[path.rfind("/") + 1 :]
    if ".so" not in base or not _SO_NAME.match(base):
        return False
    if base.startswith("lib") or _EXT_TAG.search(base):
        return not path.startswith(("/proc/", "/sys/", "/dev/", "/usr/share/"))
    for part in path.split("/")[1:-1]:
        if part.startswith("lib") or part in {"site-packages", "dist-packages"}:
            return True
    return False


DPKG_INFO = "/var/lib/dpkg/info/"


def is_dpkg_list(path: str) -> bool:
    """``/var/lib/dpkg/info/<package>[:<arch>].list``: the files a package installed."""
    return path.startswith(DPKG_INFO) and path.endswith(".list") and path.count("/") == 5


def wants_link(path: str) -> bool:
    """Symlinks the resolver follows: library names, and directories that may be on a path.

    Kept: what ``wants`` keeps, and links with at most three components (``/lib``,
    ``/usr/local/cuda``, ``/etc/alternatives/cuda``) or whose name starts with ``lib``
    (``/usr/local/cuda/lib64`` -> ``targets/x86_64-linux/lib``).
    """
    if wants(path):
        return True
    base = path[path.rfind("/") + 1 :]
    return path.count("/") <= 3 or base.startswith("lib")


def list_libraries(data: bytes) -> tuple[str, ...]:
    """The shared-object paths a dpkg ``.list`` file names (the rest is not kept)."""
    out = []
    for raw in data.decode("utf-8", "surrogateescape").splitlines():
        path = raw.strip()
        if path.startswith("/") and wants(path):
            out.append(posixpath.normpath(path))
    return tuple(sorted(set(out)))


class ListStream:
    """A member consumer for a dpkg ``.list`` file: keeps only its shared-object lines."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def update(self, chunk: memoryview, /) -> None:
        self._parts.append(bytes(chunk))

    def close(self) -> object:
        return list(list_libraries(b"".join(self._parts)))


def is_ld_so_conf(path: str) -> bool:
    """``/etc/ld.so.conf`` and the ``*.conf`` files of ``/etc/ld.so.conf.d``."""
    return path == "/etc/ld.so.conf" or (
        path.startswith("/etc/ld.so.conf.d/") and path.endswith(".conf") and path.count("/") == 3
    )


def parse_ld_so_conf(files: Mapping[str, bytes], path: str = "/etc/ld.so.conf") -> tuple[str, ...]:
    """The directories ``ldconfig`` reads from ``path`` and its ``include`` globs, in order.

    Comments (``#``) and blank lines are ignored; ``include`` patterns are expanded over the
    captured files in sorted order, as glob(3) sorts them. A file is read at most once.
    """
    out: list[str] = []
    seen: set[str] = set()

    def read(p: str) -> None:
        if p in seen or p not in files:
            return
        seen.add(p)
        for raw in files[p].decode("utf-8", "replace").splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("include") and line[7:8] in {" ", "\t"}:
                for raw_pattern in line[8:].split():
                    pattern = raw_pattern
                    if not pattern.startswith("/"):
                        pattern = posixpath.join(posixpath.dirname(p), pattern)
                    for match in sorted(f for f in files if fnmatch.fnmatchcase(f, pattern)):
                        read(match)
                continue
            if line.startswith("hwcap"):
                continue
            for d in re.split(r"[:\s,]+", line):
                if d.startswith("/"):
                    out.append(posixpath.normpath(d))

    read(path)
    return tuple(dict.fromkeys(out))


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


class _MissingBytes(Exception):
    """A read outside the pieces the scanner kept."""


class _SparseStream(io.RawIOBase):
    """A read-only file of ``size`` bytes of which only some pieces are known."""

    def __init__(self, pieces: list[tuple[int, bytes | bytearray]], size: int) -> None:
        self._pieces = sorted(pieces, key=lambda p: p[0])
        self._starts = [start for start, _ in self._pieces]
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        if self._pos >= self._size:
            return b""
        want = self._size - self._pos if n < 0 else min(n, self._size - self._pos)
        i = bisect.bisect_right(self._starts, self._pos) - 1
        # pieces may overlap (a capture inside the head): take any that holds the position
        for start, data in reversed(self._pieces[: i + 1]):
            if start <= self._pos < start + len(data):
                lo = self._pos - start
                out = bytes(data[lo : lo + want])
                self._pos += len(out)
                return out
        raise _MissingBytes(self._pos)


class ElfScanner:
    """Feed a shared object's bytes in order with ``feed``; ``finish`` gives its facts."""

    def __init__(self, size: int, name: str = "") -> None:
        self.size = size
        self._pos = 0
        self._hash = hashlib.sha256()
        self._elf: bool | None = None
        self._head = bytearray()  # the first block: the ELF and program headers
        self._blocks: list[bytearray] = []  # what follows it, contiguous, in ~1 MiB blocks
        self._kept = 0  # bytes kept from offset 0 (head and blocks)
        self._head_limit = _HEAD_MIN
        self._phdrs_done = False
        self._wanted: list[tuple[int, int]] = []  # (offset, end) still to capture
        self._captured: list[tuple[int, bytearray]] = []
        self._load: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz) of PT_LOAD
        self._dynamic: tuple[int, int] | None = None
        self._little = True
        self._is64 = True
        self._banners = [b for b in BANNERS if fnmatch.fnmatchcase(name, b[1])]
        self._strtab_planned = False
        self._tail = b""
        self._found: tuple[str, str] | None = None
        self._problem: str | None = None

    # -- streaming -------------------------------------------------------------------------
    def feed(self, chunk: bytes | memoryview) -> None:
        data = bytes(chunk)
        if not data:
            return
        self._hash.update(data)
        start = self._pos
        self._pos += len(data)
        if self._elf is False:
            return
        self._keep_head(start, data)
        if self._elf is None and len(self._head) >= 4:
            self._elf = bytes(self._head[:4]) == _ELF_MAGIC
            if not self._elf:
                self._head = bytearray()
                self._blocks = []
                return
        if not self._phdrs_done:
            self._try_headers()
            self._keep_head(start, data)  # the limit may have grown past this chunk's start
        for lo, hi in self._wanted:
            if lo < self._pos and hi > start:
                self._keep(lo, hi, start, data)
        if not self._strtab_planned and self._dynamic_bytes() is not None:
            self._plan_strtab()
        if self._found is None and self._banners:
            self._scan(data)

    def _keep_head(self, start: int, data: bytes) -> None:
        """Keep the part of ``data`` (at file offset ``start``) that extends the head."""
        end = min(self._pos, self._head_limit)
        if self._kept >= end or self._kept < start:
            return
        piece = data[self._kept - start : end - start]
        if not self._phdrs_done:
            self._head += piece  # headers are parsed from one contiguous block
        elif self._blocks and len(self._blocks[-1]) < _BLOCK:
            self._blocks[-1] += piece
        else:
            self._blocks.append(bytearray(piece))
        self._kept += len(piece)

    def _kept_slice(self, off: int, size: int) -> bytes | None:
        """Bytes ``[off, off+size)`` from the head and its blocks, if all kept."""
        if off + size > self._kept:
            return None
        out = bytearray()
        at = 0
        for block in (self._head, *self._blocks):
            lo, hi = max(off, at), min(off + size, at + len(block))
            if lo < hi:
                out += block[lo - at : hi - at]
            at += len(block)
        return bytes(out)

    def _keep(self, lo: int, hi: int, start: int, data: bytes) -> None:
        buf = next((b for off, b in self._captured if off == lo), None)
        if buf is None:
            buf = bytearray()
            self._captured.append((lo, buf))
        a = max(lo, start) - start
        b = min(hi, self._pos) - start
        if lo + len(buf) == start + a:  # contiguous
            buf += data[a:b]

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

    def _dynamic_bytes(self) -> bytes | None:
        """The whole dynamic segment once the stream has passed it."""
        if self._dynamic is None:
            return None
        off, size = self._dynamic
        size = min(size, PIECE_CAP)
        kept = self._kept_slice(off, size)
        if kept is not None:
            return kept
        for lo, buf in self._captured:
            if lo == off and len(buf) >= size:
                return bytes(buf[:size])
        return None

    def _plan_strtab(self) -> None:
        """Capture the string table too when it comes after the dynamic segment."""
        self._strtab_planned = True
        dyn = self._dynamic_bytes()
        assert dyn is not None
        width = 8 if self._is64 else 4
        order: Literal["little", "big"] = "little" if self._little else "big"
        strtab = strsz = None
        for i in range(0, len(dyn) - 2 * width + 1, 2 * width):
            tag = int.from_bytes(dyn[i : i + width], order)
            val = int.from_bytes(dyn[i + width : i + 2 * width], order)
            if tag == 0:
                break
            if tag == 5:  # DT_STRTAB (an address)
                strtab = val
            elif tag == 10:  # DT_STRSZ
                strsz = val
        if strtab is None or strsz is None:
            return
        for vaddr, off, filesz in self._load:
            if vaddr <= strtab < vaddr + filesz:
                start = off + (strtab - vaddr)
                end = start + min(strsz, PIECE_CAP)
                if end > self._head_limit and start >= self._pos:
                    self._wanted.append((start, end))
                return

    def _u(self, off: int, n: int) -> int:
        return int.from_bytes(self._head[off : off + n], "little" if self._little else "big")

    def _try_headers(self) -> None:
        head = self._head
        if len(head) < 64:
            return
        self._is64 = head[4] == 2
        self._little = head[5] == 1
        if self._is64:
            phoff, phentsize, phnum = self._u(32, 8), self._u(54, 2), self._u(56, 2)
        else:
            phoff, phentsize, phnum = self._u(28, 4), self._u(42, 2), self._u(44, 2)
        end = phoff + phentsize * phnum
        if end > HEAD_CAP:
            self._phdrs_done = True
            self._problem = f"program headers at offset {phoff} lie beyond the kept region"
            return
        if len(head) < end:
            self._head_limit = max(self._head_limit, end)
            return
        self._phdrs_done = True
        first_load_end = 0
        for i in range(phnum):
            o = phoff + i * phentsize
            p_type = self._u(o, 4)
            if self._is64:
                p_off, p_vaddr, p_filesz = self._u(o + 8, 8), self._u(o + 16, 8), self._u(o + 32, 8)
            else:
                p_off, p_vaddr, p_filesz = self._u(o + 4, 4), self._u(o + 8, 4), self._u(o + 16, 4)
            if p_type == 1:  # PT_LOAD
                self._load.append((p_vaddr, p_off, p_filesz))
                if p_off == 0:
                    first_load_end = max(first_load_end, p_filesz)
            elif p_type == 2:  # PT_DYNAMIC
                self._dynamic = (p_off, p_filesz)
        self._head_limit = min(HEAD_CAP, max(self._head_limit, first_load_end))
        if self._dynamic is not None:
            off, size = self._dynamic
            if off + size > self._head_limit:
                self._wanted.append((off, off + min(size, PIECE_CAP)))

    # -- parsing ---------------------------------------------------------------------------
    def finish(self) -> ElfFacts | None:
        """The facts, or None when the member is not an ELF file (a linker script, say)."""
        digest = "sha256=" + base64.urlsafe_b64encode(self._hash.digest()).rstrip(b"=").decode()
        if self._elf is not True:
            return None
        if self._found is None and self._tail:
            for library, _glob, _prefix, pattern in self._banners:
                m = pattern.search(self._tail)
                if m is not None:
                    self._found = (library, m.group(1).decode("ascii", "replace"))
                    break
        version = self._found
        base = ElfFacts(
            digest=digest,
            size=self._pos,
            library=version[0] if version else None,
            version=version[1] if version else None,
        )
        if self._pos != self.size:
            return _replace(base, problem=f"read {self._pos} of {self.size} bytes")
        if self._problem is not None:
            return _replace(base, problem=self._problem)
        return self._parse(base)

    def pieces(self) -> list[tuple[int, bytes]]:
        """What was kept: (file offset, bytes)."""
        return (
            [(0, bytes(self._head))]
            + [(o, bytes(b)) for o, b in self._blocks_at()]
            + [(o, bytes(b)) for o, b in self._captured]
        )

    def _blocks_at(self) -> list[tuple[int, bytearray]]:
        out = []
        at = len(self._head)
        for block in self._blocks:
            out.append((at, block))
            at += len(block)
        return out

    def _parse_view(self) -> list[tuple[int, bytes | bytearray]]:
        """The kept pieces, uncopied, for the sparse stream the parser reads. The section
        headers (at the end of the file) are not among them: the string table is found
        through ``DT_STRTAB`` and the ``PT_LOAD`` segments, as the loader finds it."""
        pieces: list[tuple[int, bytes | bytearray]] = [(0, self._head)]
        pieces += self._blocks_at()
        pieces += [(o, b) for o, b in self._captured]
        return pieces

    def _parse(self, base: ElfFacts) -> ElfFacts:
        """The dynamic tags of the kept pieces, decoded with pyelftools' ELF structures."""
        stream = cast(IO[bytes], _SparseStream(self._parse_view(), self.size))
        elfclass = 64 if self._is64 else 32
        try:
            header = struct_parse(_structs(self._little, elfclass).Elf_Ehdr, stream, 0)
            structs = _structs(
                self._little,
                elfclass,
                header["e_type"],
                header["e_machine"],
                header["e_ident"]["EI_OSABI"],
            )
            loads: list[tuple[int, int, int]] = []
            dynamic: tuple[int, int] | None = None
            for i in range(header["e_phnum"]):
                ph = struct_parse(
                    structs.Elf_Phdr, stream, header["e_phoff"] + i * header["e_phentsize"]
                )
                if ph["p_type"] == "PT_LOAD":
                    loads.append((ph["p_vaddr"], ph["p_offset"], ph["p_filesz"]))
                elif ph["p_type"] == "PT_DYNAMIC" and dynamic is None:
                    dynamic = (ph["p_offset"], ph["p_filesz"])
            if dynamic is None:
                return base  # no dynamic segment: nothing to resolve (a static object)
            entries: list[tuple[str, int]] = []
            width = structs.Elf_Dyn.sizeof()
            for i in range(min(dynamic[1], PIECE_CAP) // width):
                entry = struct_parse(structs.Elf_Dyn, stream, dynamic[0] + i * width)
                if entry["d_tag"] == "DT_NULL":
                    break
                entries.append((str(entry["d_tag"]), int(entry["d_val"])))
            strtab = next((v for t, v in entries if t == "DT_STRTAB"), None)
            offset = _file_offset(strtab, loads) if strtab is not None else None
            if offset is None:
                return _replace(base, problem="the dynamic string table is in no PT_LOAD")

            def string(at: int) -> str:
                raw = parse_cstring_from_stream(stream, offset + at)
                if raw is None:
                    raise ELFError(f"unterminated string at {offset + at}")
                return raw.decode("utf-8", "surrogateescape")

            soname: str | None = None
            needed: list[str] = []
            rpath: list[str] = []
            runpath: list[str] = []
            for tag, value in entries:
                if tag == "DT_NEEDED":
                    needed.append(string(value))
                elif tag == "DT_SONAME":
                    soname = string(value)
                elif tag == "DT_RPATH":
                    rpath.extend(p for p in string(value).split(":") if p)
                elif tag == "DT_RUNPATH":
                    runpath.extend(p for p in string(value).split(":") if p)
            return _replace(
                base,
                soname=soname,
                needed=tuple(needed),
                rpath=tuple(rpath),
                runpath=tuple(runpath),
            )
        except _MissingBytes as exc:
            return _replace(
                base,
                problem=f"the dynamic string table at offset {exc.args[0]} lies beyond the "
                f"{HEAD_CAP >> 20} MiB kept from the start of the file",
            )
        except (ELFError, ValueError, KeyError, AttributeError) as exc:
            return _replace(base, problem=f"cannot parse the ELF dynamic section: {exc}")


def _file_offset(vaddr: int, loads: Sequence[tuple[int, int, int]]) -> int | None:
    for start, offset, size in loads:
        if start <= vaddr < start + size:
            return offset + (vaddr - start)
    return None


@functools.lru_cache(maxsize=32)
def _structs(
    little: bool,
    elfclass: int,
    e_type: str | None = None,
    e_machine: str | None = None,
    osabi: str | None = None,
) -> ELFStructs:
    """pyelftools' structures for one ELF flavour, built once (building them per file is
    most of the cost of reading a small library)."""
    structs = ELFStructs(little_endian=little, elfclass=elfclass)
    structs.create_basic_structs()
    if e_type is not None:
        structs.create_advanced_structs(e_type, e_machine, osabi)
    return structs


@dataclass(frozen=True, slots=True)
class FileView:
    """The regular files and symlinks of a state (absolute, normalised paths)."""

    files: frozenset[str]
    links: Mapping[str, str]  # path -> link target as stored (relative or absolute)

    def resolve(self, path: str) -> str | None:
        """``path`` with every symlink in it resolved inside the root (None on a loop)."""
        return resolve(path, self.links)

    def real_file(self, path: str) -> str | None:
        """The regular file ``path`` names after symlinks, or None if there is none."""
        real = self.resolve(path)
        return real if real is not None and real in self.files else None


def _package_of_list(path: str) -> str:
    """``/var/lib/dpkg/info/libnccl2:amd64.list`` -> ``libnccl2``."""
    base = path[len(DPKG_INFO) : -len(".list")]
    return base.split(":", 1)[0]


def libraries(
    elf: Mapping[str, ElfFacts],
    view: FileView,
    environments: Sequence[Environment],
    debs: Sequence[DebPackage],
    dpkg_lists: Mapping[str, Iterable[str]],
    layers: Mapping[str, str] | None = None,
) -> tuple[NativeLibrary, ...]:
    """The native libraries of a state, each with its owner, sorted by path.

    ``elf`` holds the facts of every streamed shared object (by path), ``dpkg_lists`` the
    library paths of each ``.list`` file (by the list's path), ``layers`` the digest of the
    layer that last wrote each path (filled by the audit). A wheel owns a file its RECORD
    lists; else a package whose ``.list`` names it (through symlinked directories such as
    ``/lib`` -> ``usr/lib``); else it has no owner.
    """
    wheel: dict[str, tuple[Environment, str, str, str]] = {}
    for env in environments:
        for dist in env.distributions:
            for path, digest in dist.record:
                if wants(path):
                    real = view.resolve(path) or path
                    wheel.setdefault(real, (env, dist.name, dist.raw_version, digest))
    versions = {d.name: d.version for d in debs}
    deb: dict[str, tuple[str, str]] = {}
    for list_path, paths in sorted(dpkg_lists.items()):
        package = _package_of_list(list_path)
        if package not in versions:
            continue  # a .list left by a removed package
        for listed in paths:
            real = view.resolve(listed) or listed
            deb.setdefault(real, (package, versions[package]))
    out: list[NativeLibrary] = []
    for path, facts in sorted(elf.items()):
        kind = owner = version = environment = record = None
        if path in wheel:
            env, name, version, digest = wheel[path]
            kind, owner, environment, record = "wheel", str(name), env.path, digest or None
        elif path in deb:
            kind = "deb"
            owner, version = deb[path]
        out.append(
            NativeLibrary(
                path=path,
                digest=facts.digest,
                size=facts.size,
                layer=(layers or {}).get(path, ""),
                soname=facts.soname,
                needed=facts.needed,
                rpath=facts.rpath,
                runpath=facts.runpath,
                library=facts.library,
                version=facts.version,
                owner_kind=kind,
                owner=owner,
                owner_version=version,
                owner_environment=environment,
                record_digest=record,
                problem=facts.problem,
            )
        )
    return tuple(out)


def _replace(facts: ElfFacts, **changes: Any) -> ElfFacts:
    import dataclasses

    return dataclasses.replace(facts, **changes)


def scan_bytes(data: bytes, name: str = "", chunk: int = 1 << 20) -> ElfFacts | None:
    """The facts of an object already in memory, fed ``chunk`` bytes at a time (tests)."""
    scanner = ElfScanner(len(data), name)
    view = memoryview(data)
    for i in range(0, len(data), chunk):
        scanner.feed(view[i : i + chunk])
    return scanner.finish()


class ElfStream:
    """The layer walk's consumer for one shared object: an ``ElfScanner`` behind
    ``MemberStream``; its summary is the ``ElfFacts`` as JSON (None: not an ELF file)."""

    __slots__ = ("_scanner",)

    def __init__(self, path: str, size: int) -> None:
        self._scanner = ElfScanner(size, posixpath.basename(path))

    def update(self, chunk: memoryview, /) -> None:
        self._scanner.feed(chunk)

    def close(self) -> object:
        facts = self._scanner.finish()
        return None if facts is None else facts.to_json()


@dataclass(frozen=True, slots=True)
class NativeAnalyzer(Analyzer):
    """ELF shared objects, the links to them, ld.so.conf and dpkg's file lists."""

    name = "native"
    version = VERSION

    @classmethod
    def create(cls, options: AnalyzerOptions) -> NativeAnalyzer:
        return cls()

    def wants(self, path: str) -> int:
        if ".so" in path:
            if wants(path):
                return STREAM | LINK
            if path.endswith(".conf") and is_ld_so_conf(path):
                return CAPTURE
        if path.endswith(".list") and is_dpkg_list(path):
            return STREAM
        if path.count("/") <= 3 or path[path.rfind("/") + 1 :].startswith("lib"):
            return LINK  # a directory link the resolver may need (only links honour it)
        return SKIP

    def open_stream(self, path: str, size: int) -> MemberStream:
        if is_dpkg_list(path):
            return ListStream()
        return ElfStream(path, size)

    def session(self) -> NativeSession:
        return NativeSession()


class NativeSession(AnalyzerSession):
    """Recomputes the libraries of a state from what the layers streamed (cheap: facts
    are already parsed; owners are joined here because RECORDs and dpkg lists change)."""

    def update(self, state: StateView, touched: Sequence[str]) -> None:
        return None

    def contribute(self, state: StateView, parts: SnapshotParts) -> None:
        elf: dict[str, ElfFacts] = {}
        lists: dict[str, list[str]] = {}
        for path, results in state.streamed.items():
            value = results.get(NativeAnalyzer.name)
            if value is None:
                continue
            if is_dpkg_list(path):
                assert isinstance(value, list)
                lists[path] = [str(v) for v in value]
            else:
                assert isinstance(value, dict)
                facts = ElfFacts.from_json(value)
                elf[path] = facts
                if facts.problem is not None:
                    parts.incomplete.append(Incomplete(path, facts.problem))
        view = state_view(state)
        parts.native.extend(libraries(elf, view, parts.environments, parts.debs, lists))


def state_view(state: StateView) -> FileView:
    """The shared objects and links of a state, as the resolver walks them."""
    files = frozenset(
        p for p, r in state.streamed.items() if isinstance(r.get(NativeAnalyzer.name), dict)
    )
    return FileView(files, dict(state.links))
