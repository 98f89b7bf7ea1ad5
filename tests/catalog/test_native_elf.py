"""The streamed ELF reader against real gcc-built shared objects, checked with readelf -d."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pinguard.catalog.native import analyzer as native
from pinguard.catalog.native import elf
from pinguard.catalog.native.loader import parse_ld_so_conf
from tests.infra.native import build_so, readelf_dynamic


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("so")
    base = build_so(d / "libbase.so.1", soname="libbase.so.1")
    nccl = build_so(
        d / "libnccl.so.2",
        soname="libnccl.so.2",
        banner="NCCL version 2.28.9+cuda13.0",
        needed=[base],
    )
    rpath = build_so(
        d / "librp.so",
        soname="librp.so",
        needed=[base, nccl],
        rpath=["$ORIGIN/../../nvidia/nccl/lib", "/opt/x/lib"],
    )
    runpath = build_so(
        d / "librun.so", soname="librun.so", needed=[nccl], rpath=["$ORIGIN"], runpath=True
    )
    # 40 MB of read-only data between the string table and the dynamic segment, as in
    # libtorch_cuda.so (PT_DYNAMIC far into the file, .dynstr near the start)
    big = build_so(
        d / "libbig.so", soname="libbig.so", needed=[nccl], rpath=["$ORIGIN"], rodata_bytes=40 << 20
    )
    # a .dynstr of ~300 KB (Debian's libc and libstdc++ have such): beyond the first read
    symbols = build_so(
        d / "libsyms.so.3", soname="libsyms.so.3", needed=[base], rpath=["/opt/s"], exports=6000
    )
    return {
        "base": base,
        "nccl": nccl,
        "rpath": rpath,
        "runpath": runpath,
        "big": big,
        "symbols": symbols,
    }


@pytest.mark.parametrize("name", ["base", "nccl", "rpath", "runpath", "big", "symbols"])
@pytest.mark.parametrize("chunk", [1 << 20, 4093, 7])
def test_dynamic_facts_match_readelf(libs: dict[str, Path], name: str, chunk: int) -> None:
    """SONAME, NEEDED, RPATH and RUNPATH read from chunks equal readelf -d's, at any chunking."""
    path = libs[name]
    if name in {"big", "symbols"} and chunk == 7:
        chunk = 4097  # 40 MB in 7-byte chunks is minutes of Python; 4097 still splits pieces
    facts = native.scan_bytes(path.read_bytes(), path.name, chunk)
    want = readelf_dynamic(path)
    assert facts is not None
    assert facts.problem is None
    assert (facts.soname, facts.needed, facts.rpath, facts.runpath) == (
        want.soname,
        want.needed,
        want.rpath,
        want.runpath,
    )


def test_expected_values_by_hand(libs: dict[str, Path]) -> None:
    """The gcc flags give what they should: RPATH with old dtags, RUNPATH with new ones."""
    rp = native.scan_bytes(libs["rpath"].read_bytes(), "librp.so")
    run = native.scan_bytes(libs["runpath"].read_bytes(), "librun.so")
    assert rp is not None
    assert run is not None
    assert rp.needed == ("libbase.so.1", "libnccl.so.2", "libc.so.6")
    assert rp.rpath == ("$ORIGIN/../../nvidia/nccl/lib", "/opt/x/lib")
    assert rp.runpath == ()
    assert run.rpath == ()
    assert run.runpath == ("$ORIGIN",)


def test_big_object_dynamic_is_late(libs: dict[str, Path]) -> None:
    """The fixture really puts PT_DYNAMIC far beyond the kept head (else the test is moot)."""
    from elftools.elf.elffile import ELFFile

    with libs["big"].open("rb") as fh:
        elf = ELFFile(fh)
        dyn = next(s for s in elf.iter_segments() if s["p_type"] == "PT_DYNAMIC")
        dynstr = elf.get_section_by_name(".dynstr")
        assert dynstr is not None
        assert dyn["p_offset"] > 40 << 20
        assert dynstr["sh_offset"] < 1 << 20


@pytest.mark.parametrize("chunk", [1 << 20, 4096, 5, 13])
def test_banner_found_across_chunk_borders(libs: dict[str, Path], chunk: int) -> None:
    """NCCL's banner is found whichever chunk borders cut it."""
    data = libs["nccl"].read_bytes()
    at = data.index(b"NCCL version")
    for shift in (0, 3, 9):  # cut the banner at several places
        first = max(1, at + shift)
        scanner = native.ElfScanner(len(data), "libnccl.so.2")
        scanner.feed(data[:first])
        view = memoryview(data)
        for i in range(first, len(data), chunk):
            scanner.feed(view[i : i + chunk])
        facts = scanner.finish()
        assert facts is not None
        assert (facts.library, facts.version) == ("nccl", "2.28.9+cuda13.0")


def test_digest_matches_record_format(libs: dict[str, Path]) -> None:
    """The digest is RECORD's sha256 form, computed over every byte."""
    import base64
    import hashlib

    data = libs["nccl"].read_bytes()
    facts = native.scan_bytes(data, "libnccl.so.2", 1000)
    assert facts is not None
    want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert facts.digest == f"sha256={want}"
    assert facts.size == len(data)


def test_not_elf_and_truncated(tmp_path: Path, libs: dict[str, Path]) -> None:
    """A linker script named .so is no shared object; a short stream is reported, not parsed."""
    assert native.scan_bytes(b"/* GNU ld script */\nGROUP ( libc.so.6 )\n", "libc.so") is None
    data = libs["base"].read_bytes()
    scanner = native.ElfScanner(len(data) + 10, "libbase.so.1")
    scanner.feed(data)
    facts = scanner.finish()
    assert facts is not None
    assert facts.problem is not None
    assert "read" in facts.problem


def test_host_libraries_match_readelf() -> None:
    """This machine's own libc and libstdc++ (Debian's toolchain output) read like readelf."""
    for path in (
        Path("/usr/lib/x86_64-linux-gnu/libc.so.6"),
        Path("/usr/lib/x86_64-linux-gnu/libstdc++.so.6"),
    ):
        assert path.exists(), path
        facts = native.scan_bytes(path.read_bytes(), path.name)
        want = readelf_dynamic(path)
        assert facts is not None
        assert facts.problem is None
        assert (facts.soname, facts.needed) == (want.soname, want.needed)


def test_memory_bounded_by_caps(libs: dict[str, Path]) -> None:
    """Of the 40 MB object, memory holds at most the spool bound; the rest waits on disk."""
    data = libs["big"].read_bytes()
    scanner = native.ElfScanner(len(data), "libbig.so")
    view = memoryview(data)
    for i in range(0, len(data), 1 << 20):
        scanner.feed(view[i : i + (1 << 20)])
    memory, spilled = scanner.peak()
    assert memory <= elf.SPOOL_MEMORY * 2, memory
    assert spilled <= elf.STRTAB_WINDOW, spilled  # the in-case window, not the 40 MB between
    assert scanner.kept() < (1 << 20, 1)  # only the strings are left
    facts = scanner.finish()
    assert facts is not None
    assert facts.problem is None


@pytest.mark.parametrize(
    ("path", "want"),
    [
        ("/usr/lib/x86_64-linux-gnu/libnccl.so.2", True),
        ("/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9", True),
        ("/usr/local/lib/python3.11/dist-packages/nvidia/nccl/lib/libnccl.so.2", True),
        ("/usr/local/lib/python3.11/site-packages/torch/_C.cpython-311-x86_64-linux-gnu.so", True),
        ("/opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so", True),
        ("/usr/share/doc/libfoo.so.1", False),
        ("/usr/lib/x86_64-linux-gnu/libfoo.so.txt", False),
        ("/usr/lib/x86_64-linux-gnu/libfoo.sox", False),
        ("/srv/app/libfoo.so", True),
        ("/srv/app/_ext.so", False),
        ("/opt/pkgs/torch/_C.cpython-311-x86_64-linux-gnu.so", True),  # behind a symlink
        ("/opt/pkgs/cryptography/hazmat/bindings/_rust.abi3.so", True),
        ("/usr/share/x/_C.cpython-311-x86_64-linux-gnu.so", False),
        ("/proc/1/root/libfoo.so", False),
    ],
)
def test_wants(path: str, want: bool) -> None:
    """Library names and ABI-tagged extension modules anywhere, other shared objects under
    lib* directories and Python environments; nothing else."""
    assert native.wants(path) is want


def test_ld_so_conf_order() -> None:
    """include globs expand sorted, in place; comments and duplicates drop out."""
    files = {
        "/etc/ld.so.conf": b"# top\n/opt/first\ninclude /etc/ld.so.conf.d/*.conf\n/opt/last\n",
        "/etc/ld.so.conf.d/b.conf": b"/opt/b # trailing comment\n/opt/first\n",
        "/etc/ld.so.conf.d/a.conf": b"/opt/a:/opt/a2\n",
        "/etc/ld.so.conf.d/c.txt": b"/opt/ignored\n",
    }
    assert parse_ld_so_conf(files) == (
        "/opt/first",
        "/opt/a",
        "/opt/a2",
        "/opt/b",
        "/opt/last",
    )
    assert os.sep == "/"


def _read_in_parts(path: Path) -> tuple[elf.ElfFacts | None, int]:
    """The facts read at random (as from a zstd:chunked layer): (facts, bytes asked for)."""
    data = path.read_bytes()
    digest = elf.scan_bytes(data, path.name)
    assert digest is not None
    reader = native.ElfParts(str(path), len(data), digest.digest)
    asked = 0
    for _ in range(8):
        gaps = reader.gaps()
        if not gaps:
            break
        for lo, hi in gaps:
            asked += hi - lo
            reader.feed_at(lo, data[lo:hi])
    facts = reader.close()
    assert facts is None or isinstance(facts, dict)
    return (None if facts is None else elf.ElfFacts.from_json(facts)), asked


@pytest.mark.parametrize("name", ["base", "nccl", "rpath", "runpath", "big", "symbols"])
def test_parts_read_at_random_give_the_streamed_facts(libs: dict[str, Path], name: str) -> None:
    """The scanner given the content digest asks only for the parts the facts lie in (no
    window kept in case: a few KB of the 40 MB object) and finds what readelf -d finds."""
    path = libs[name]
    facts, asked = _read_in_parts(path)
    want = readelf_dynamic(path)
    assert facts is not None
    assert facts.problem is None
    assert (facts.soname, facts.needed, facts.rpath, facts.runpath) == (
        want.soname,
        want.needed,
        want.rpath,
        want.runpath,
    )
    assert facts == native.scan_bytes(path.read_bytes(), path.name)
    assert asked < 512 << 10, asked  # the 300 KB string table of "symbols" is the most


def test_a_banner_is_searched_in_order_and_host_libraries_read_in_parts(
    libs: dict[str, Path], tmp_path: Path
) -> None:
    """libnccl.so*'s banner is searched from the start, in growing steps, up to its first
    match: with 20 MB of zeros after the banner, a few MB are asked for, not the file;
    a dpkg file list has no part reader; libc and libstdc++ read in parts give the
    streamed facts."""
    analyzer = native.NativeAnalyzer()
    assert analyzer.open_parts("/var/lib/dpkg/info/libc6:amd64.list", 10, "sha256=x") is None
    padded = tmp_path / "libnccl.so.2"
    padded.write_bytes(libs["nccl"].read_bytes() + bytes(20 << 20))
    facts, asked = _read_in_parts(padded)
    assert facts is not None
    assert facts == native.scan_bytes(padded.read_bytes(), padded.name)
    assert facts.version == "2.28.9+cuda13.0"
    assert asked < 4 << 20, asked
    for path in (
        Path("/usr/lib/x86_64-linux-gnu/libc.so.6"),
        Path("/usr/lib/x86_64-linux-gnu/libstdc++.so.6"),
    ):
        facts, _asked = _read_in_parts(path)
        assert facts == native.scan_bytes(path.read_bytes(), path.name)
