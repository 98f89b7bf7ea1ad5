"""The streamed ELF reader on the real world's binaries, with readelf and pyelftools as oracles.

Real manylinux wheels (auditwheel/patchelf-repaired: ``.dynstr`` in a late ``PT_LOAD``), the
project's own virtual environment (mypyc-compiled mypy, pydantic-core, cryptography, ...),
torch's CUDA libraries with ``--large-corpus``, and hypothesis-generated layouts that put the
program headers, the dynamic segment and the string table in every order.
"""

from __future__ import annotations

import io
import os
import struct
import sys
from pathlib import Path

import pytest
from elftools.elf.dynamic import DynamicSegment
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pinguard.catalog.native import elf
from tests.infra.corpus import LARGE, SMALL, real_wheels, shared_objects
from tests.infra.native import Dynamic, readelf_dynamic


def _facts(data: bytes, name: str, chunk: int) -> Dynamic:
    facts = elf.scan_bytes(data, name, chunk)
    assert facts is not None, name
    assert facts.problem is None, (name, facts.problem)
    return Dynamic(facts.soname, facts.needed, facts.rpath, facts.runpath)


def _strtab_after_dynamic(data: bytes) -> bool:
    """patchelf's layout: the string table DT_STRTAB names lies after PT_DYNAMIC."""
    f = ELFFile(io.BytesIO(data))
    for seg in f.iter_segments():
        if isinstance(seg, DynamicSegment):
            strtab = next(t.entry.d_val for t in seg.iter_tags() if t.entry.d_tag == "DT_STRTAB")
            return next(iter(f.address_offsets(strtab))) > seg["p_offset"]
    return False


def _check_wheels(wheels: list[Path], tmp_path: Path, chunks: tuple[int, ...]) -> tuple[int, int]:
    checked = late = 0
    for wheel in wheels:
        for name, zf in shared_objects(wheel):
            data = zf.read(name)
            path = tmp_path / "so" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            want = readelf_dynamic(path)
            for chunk in chunks:
                assert _facts(data, path.name, chunk) == want, (wheel.name, name, chunk)
            checked += 1
            late += _strtab_after_dynamic(data)
    return checked, late


@pytest.mark.integration
def test_real_wheels_read_like_readelf(tmp_path: Path) -> None:
    """Every shared object of five popular manylinux wheels reads like ``readelf -d``, at any
    chunking, none incomplete; most have patchelf's late string table."""
    checked, late = _check_wheels(real_wheels(SMALL), tmp_path, (1 << 20, 65521, 4096))
    assert checked >= 50, checked
    assert late >= 20, late  # the layout the last release read wrong


def test_own_environment_reads_like_readelf() -> None:
    """Every ELF object in the test environment (real compiled wheels installed by pip)
    reads like ``readelf -d``."""
    checked = 0
    for root, _dirs, files in os.walk(sys.prefix):
        for base in files:
            path = Path(root) / base
            if ".so" not in base or path.is_symlink():
                continue
            data = path.read_bytes()
            if data[:4] != b"\x7fELF":
                continue
            assert _facts(data, base, 1 << 20) == readelf_dynamic(path), path
            checked += 1
    assert checked >= 20, checked


@pytest.mark.integration
@pytest.mark.large_corpus
def test_torch_cuda_wheel_reads_like_readelf_in_bounded_memory(tmp_path: Path) -> None:
    """torch's patchelf'd libraries (libtorch_cuda.so: ~480 MB, PT_DYNAMIC at ~400 MB, .dynstr
    at the end) read like readelf, keeping at most the spool bound in memory."""
    wheels = real_wheels(LARGE)
    checked, late = _check_wheels(wheels, tmp_path, (1 << 20,))
    assert checked >= 12, checked  # torch/lib, torch/_C and NCCL: 14 objects in 2.14.1
    assert late >= 5
    data = (tmp_path / "so" / "torch" / "lib" / "libtorch_cuda.so").read_bytes()
    scanner = elf.ElfScanner(len(data), "libtorch_cuda.so")
    view = memoryview(data)
    for i in range(0, len(data), 1 << 20):
        scanner.feed(view[i : i + (1 << 20)])
    memory, _spilled = scanner.peak()
    assert memory <= 3 * elf.SPOOL_MEMORY, memory
    facts = scanner.finish()
    assert facts is not None
    assert "$ORIGIN/../../nvidia/nccl/lib" in facts.rpath


# -- generated layouts -------------------------------------------------------------------

_PF_R, _PF_W, _PF_X = 4, 2, 1


def _build_elf(order: list[str], flags: dict[str, int], sizes: dict[str, int], strs: list[str]):  # type: ignore[no-untyped-def]
    """A 64-bit little-endian ET_DYN object whose regions lie in ``order``, one PT_LOAD each
    (vaddr = offset + 0x10000), PT_DYNAMIC over the dynamic region; no section headers."""
    table = b"\0"
    offsets: list[int] = []
    for s in strs:
        offsets.append(len(table))
        table += s.encode() + b"\0"
    tags = [(1, offsets[0]), (1, offsets[1]), (14, offsets[2]), (15, offsets[3])]
    dyn_size = (len(tags) + 3) * 16
    blobs = {"strtab": table, "dynamic": b"", "fill1": b"", "fill2": b""}
    phnum = len(order) + 1
    at = 64 + phnum * 56
    place: dict[str, int] = {}
    for region in order:
        at = (at + 15) & ~15
        place[region] = at
        at += {"strtab": len(table), "dynamic": dyn_size}.get(region, sizes.get(region, 0))
    base = 0x10000
    dyn = b"".join(struct.pack("<qQ", t, v) for t, v in tags)
    dyn += struct.pack("<qQ", 5, place["strtab"] + base)  # DT_STRTAB
    dyn += struct.pack("<qQ", 10, len(table))  # DT_STRSZ
    dyn += struct.pack("<qQ", 0, 0)
    blobs["dynamic"] = dyn
    blobs["fill1"] = bytes((i * 7) & 0xFF for i in range(sizes["fill1"]))
    blobs["fill2"] = b"\xaa" * sizes["fill2"]
    out = bytearray(at)
    header = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, 0, 0, 64, 56, phnum, 64, 0, 0)
    out[:64] = header
    phdrs = b""
    for region in order:
        size = len(blobs[region])
        phdrs += struct.pack(
            "<IIQQQQQQ", 1, flags[region], place[region], place[region] + base, 0, size, size, 16
        )
    phdrs += struct.pack(
        "<IIQQQQQQ", 2, 6, place["dynamic"], place["dynamic"] + base, 0, dyn_size, dyn_size, 8
    )
    out[64 : 64 + len(phdrs)] = phdrs
    for region in order:
        out[place[region] : place[region] + len(blobs[region])] = blobs[region]
    return bytes(out), place


def _pyelftools(data: bytes) -> Dynamic:
    f = ELFFile(io.BytesIO(data))
    seg = next(s for s in f.iter_segments() if isinstance(s, DynamicSegment))
    soname = None
    needed: list[str] = []
    rpath: list[str] = []
    runpath: list[str] = []
    for tag in seg.iter_tags():
        kind = tag.entry.d_tag
        # pyelftools sets the decoded string as an attribute named after the tag
        if kind == "DT_NEEDED":
            needed.append(str(getattr(tag, "needed")))  # noqa: B009
        elif kind == "DT_SONAME":
            soname = str(getattr(tag, "soname"))  # noqa: B009
        elif kind == "DT_RPATH":
            rpath += [p for p in str(getattr(tag, "rpath")).split(":") if p]  # noqa: B009
        elif kind == "DT_RUNPATH":
            runpath += [p for p in str(getattr(tag, "runpath")).split(":") if p]  # noqa: B009
    return Dynamic(soname, tuple(needed), tuple(rpath), tuple(runpath))


_name = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-$/", min_size=1, max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    order=st.permutations(["strtab", "dynamic", "fill1", "fill2"]),
    flags=st.fixed_dictionaries(
        {
            "strtab": st.sampled_from([_PF_R, _PF_R | _PF_X, _PF_R | _PF_W]),
            "dynamic": st.just(_PF_R | _PF_W),
            "fill1": st.sampled_from([_PF_R, _PF_R | _PF_X]),
            "fill2": st.sampled_from([_PF_R, _PF_R | _PF_W]),
        }
    ),
    sizes=st.fixed_dictionaries(
        {"fill1": st.integers(0, 300_000), "fill2": st.integers(0, 70_000)}
    ),
    strs=st.lists(_name, min_size=4, max_size=4),
    chunk=st.sampled_from([1, 7, 512, 4093, 65536, 1 << 20]),
)
@example(  # a whole object smaller than the first read, in one chunk (jaxlib's utils.so)
    order=["strtab", "fill1", "dynamic", "fill2"],
    flags={"strtab": _PF_R, "dynamic": _PF_R | _PF_W, "fill1": _PF_R | _PF_X, "fill2": _PF_R},
    sizes={"fill1": 80, "fill2": 32},
    strs=["libc.so.6", "libm.so.6", "utils.so", "$ORIGIN"],
    chunk=1 << 20,
)
def test_any_segment_order_reads_like_pyelftools(
    order: list[str],
    flags: dict[str, int],
    sizes: dict[str, int],
    strs: list[str],
    chunk: int,
) -> None:
    """Whatever the order of program headers, string table and dynamic segment, the streamed
    facts equal pyelftools' on the whole file; the one layout a stream cannot serve (a string
    table before the dynamic segment, in a writable or executable segment that does not start
    the file) says so instead of guessing."""
    if chunk < 512 and sizes["fill1"] + sizes["fill2"] > 20_000:
        chunk = 512  # keeps tiny chunks to small files: the property is the same
    data, place = _build_elf(order, flags, sizes, strs)
    facts = elf.scan_bytes(data, "libgen.so", chunk)
    assert facts is not None
    first = min(place, key=lambda r: place[r])
    unservable = (
        place["strtab"] < place["dynamic"]
        and flags["strtab"] & (_PF_W | _PF_X)
        and first != "strtab"
    )
    if unservable and facts.problem is not None:
        assert "streamed past" in facts.problem or "string" in facts.problem
        return
    assert facts.problem is None, facts.problem
    got = Dynamic(facts.soname, facts.needed, facts.rpath, facts.runpath)
    assert got == _pyelftools(data)
