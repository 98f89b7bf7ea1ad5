"""The tar walk's edges: chunk cursor, PAX records, the selective walk, streams and error texts.

Tars are written by ``tarfile`` (ustar, GNU and PAX formats) or cut by hand; expected paths,
sizes, links and contents are the ones the test wrote, digests come from ``hashlib``, PAX
records are compared with the dict handed to ``tarfile``. Small chunk sizes put headers and
members across chunk boundaries.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
from collections.abc import Generator, Iterator
from typing import cast

import pytest

from pinguard.errors import LayerError
from pinguard.layers.tar import (
    CAPTURE,
    HASH,
    LINK,
    SKIP,
    STREAM,
    Chunks,
    Member,
    _path,
    _pax,
    normalize,
    walk_members,
    walk_tar,
)

SITE = "usr/lib/python3/site-packages"


def _b64(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _tar(
    entries: list[tuple[str, bytes | None, bytes, str]],
    fmt: int = tarfile.GNU_FORMAT,
    pax: dict[str, dict[str, str]] | None = None,
) -> bytes:
    """(name, type, data, linkname) entries -> tar bytes; ``pax`` adds records per name."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for name, data, type_, link in entries:
            info = tarfile.TarInfo(name)
            info.type = type_
            info.linkname = link
            info.mtime = 1764374400
            info.size = len(data) if data is not None else 0
            if pax and name in pax:
                info.pax_headers = pax[name]
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _split(data: bytes, size: int) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def _walk(
    data: bytes,
    select: dict[str, int],
    *,
    everything: bool = False,
    chunk: int = 700,
    capture_limit: int | None = None,
) -> tuple[list[Member], int]:
    counter = [0]
    members = list(
        walk_members(
            Chunks(_split(data, chunk)),
            lambda p: select.get(p, SKIP),
            everything,
            counter,
            capture_limit=capture_limit,
        )
    )
    return members, counter[0]


# --- Chunks -------------------------------------------------------------------------------


def test_take_joins_across_chunks_and_keeps_the_rest() -> None:
    src = Chunks(iter([b"abc", b"", b"defgh", b"ij"]))
    assert src.take(2) == b"ab"
    assert src.take(4) == b"cdef"  # across the empty chunk too
    assert src.take(1) == b"g"
    assert src.take(10) == b"hij"  # fewer only at the end
    assert src.take(3) == b""
    assert src.total == 10


def test_take_of_exactly_the_rest_of_a_chunk() -> None:
    src = Chunks(iter([b"abcd", b"efgh"]))
    assert src.take(2) == b"ab"
    assert src.take(6) == b"cdefgh"
    assert src.take(1) == b""


def test_skip_feeds_the_sink_exactly_the_skipped_bytes() -> None:
    got: list[bytes] = []
    src = Chunks(iter([b"0123", b"45", b"6789", b"ab"]))
    assert src.take(1) == b"0"
    assert src.skip(2, lambda v: got.append(bytes(v)))
    assert got == [b"12"]
    got.clear()
    assert src.skip(6, lambda v: got.append(bytes(v)))
    assert got == [b"3", b"45", b"678"]
    assert src.take(3) == b"9ab"


def test_skip_to_the_exact_end_of_the_stream_is_true_past_it_false() -> None:
    assert Chunks(iter([b"abc", b"de"])).skip(5)
    got: list[bytes] = []
    src = Chunks(iter([b"abc", b"de"]))
    assert not src.skip(6, lambda v: got.append(bytes(v)))
    assert got == [b"abc", b"de"]
    assert src.take(1) == b""


def test_skip_with_nothing_left_of_the_chunk() -> None:
    src = Chunks(iter([b"ab", b"cd"]))
    assert src.take(2) == b"ab"
    got: list[bytes] = []
    assert src.skip(1, lambda v: got.append(bytes(v)))
    assert got == [b"c"]
    assert src.take(5) == b"d"


def test_drain_reads_the_rest_and_counts_it() -> None:
    src = Chunks(iter([b"abc", b"defg", b"hi"]))
    assert src.take(1) == b"a"
    src.drain()
    assert src.total == 9
    assert src.take(1) == b""


# --- PAX records --------------------------------------------------------------------------


def _pax_block(records: dict[str, str]) -> bytes:
    """The data of the PAX header tarfile writes for ``records``."""
    info = tarfile.TarInfo("x")
    info.pax_headers = records
    raw = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    assert raw[156:157] == b"x"
    size = int(raw[124:136].split(b"\0")[0].strip() or b"0", 8)
    return raw[512 : 512 + size]


def test_pax_records_read_back_what_tarfile_wrote() -> None:
    records = {
        "path": "usr/lib/naïve/a b=c.txt",
        "linkpath": "../x" * 40,
        "size": "123456789012",
        "comment": "",
    }
    assert _pax(_pax_block(records)) == records


def test_pax_records_by_hand() -> None:
    assert _pax(b"12 path=a/b\n9 size=7\n") == {"path": "a/b", "size": "7"}
    assert _pax(b"") == {}
    assert _pax(b"11 path=xy\nno-space-here") == {"path": "xy"}


def test_pax_bytes_that_are_not_utf8_survive_as_surrogates() -> None:
    # a key and a value with a stray 0xff byte, as a non-UTF-8 tar writer may leave them
    assert _pax(b"16 path=a\xffb.txt\n10 k\xfey=v\xfd\n") == {
        "path": "a\udcffb.txt",
        "k\udcfey": "v\udcfd",
    }


@pytest.mark.parametrize("data", [b"0 path=a\n", b"-5 path=a\n"])
def test_pax_record_length_must_be_positive(data: bytes) -> None:
    with pytest.raises(LayerError, match=r"^bad PAX record length b'(0|-5)'$"):
        _pax(data)


# --- paths --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("usr/lib/x", "/usr/lib/x"),
        ("./usr/lib/x", "/usr/lib/x"),
        ("/usr/lib/x", "/usr/lib/x"),
        ("usr//lib/x", "/usr/lib/x"),
        ("usr/./lib/x", "/usr/lib/x"),
        ("usr/lib/../x", "/usr/x"),
        ("usr/lib/", "/usr/lib"),
        (".hidden/x", "/.hidden/x"),
        ("", "/"),
        ("./Xray/y", "/Xray/y"),
        ("//XX/y/", "/XX/y"),
    ],
)
def test_path_is_normalised_and_absolute(name: str, path: str) -> None:
    assert _path(name) == path
    assert normalize(name) == path


# --- the selective walk -------------------------------------------------------------------

ENTRIES: list[tuple[str, bytes | None, bytes, str]] = [
    ("usr/", None, tarfile.DIRTYPE, ""),
    (f"{SITE}/a.txt", b"alpha\n", tarfile.REGTYPE, ""),
    (f"{SITE}/skipped.bin", b"s" * 1500, tarfile.REGTYPE, ""),
    (f"{SITE}/b.bin", b"b" * 1300, tarfile.REGTYPE, ""),
    (f"{SITE}/link.txt", None, tarfile.SYMTYPE, "a.txt"),
    (f"{SITE}/other-link", None, tarfile.SYMTYPE, "nowhere"),
    (f"{SITE}/hard.bin", None, tarfile.LNKTYPE, f"{SITE}/b.bin"),
    ("dev/fifo", None, tarfile.FIFOTYPE, ""),
    (f"{SITE}/.wh.gone", b"", tarfile.REGTYPE, ""),
    (f"{SITE}/old/.wh..wh..opq", None, tarfile.DIRTYPE, ""),
    (f"{SITE}/c.txt", b"gamma", tarfile.REGTYPE, ""),
]
SELECT = {
    f"/{SITE}/a.txt": CAPTURE,
    f"/{SITE}/b.bin": HASH,
    f"/{SITE}/link.txt": LINK,
    f"/{SITE}/hard.bin": LINK,
    f"/{SITE}/c.txt": CAPTURE | HASH,
}


def _seen(members: list[Member]) -> list[tuple[str, bytes, int, str, bytes | None, str | None]]:
    return [(m.path, m.type, m.size, m.linkname, m.data, m.digest) for m in members]


WANTED = [
    (f"/{SITE}/a.txt", b"0", 6, "", b"alpha\n", None),
    (f"/{SITE}/b.bin", b"0", 1300, "", None, _b64(b"b" * 1300)),
    (f"/{SITE}/link.txt", b"2", 0, "a.txt", None, None),
    (f"/{SITE}/hard.bin", b"1", 0, f"{SITE}/b.bin", None, None),
    (f"/{SITE}/.wh.gone", b"0", 0, "", None, None),
    (f"/{SITE}/old/.wh..wh..opq", b"5", 0, "", None, None),
    (f"/{SITE}/c.txt", b"0", 5, "", b"gamma", _b64(b"gamma")),
]


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("chunk", [100, 513, 700, 1 << 20])
def test_selective_walk_yields_selected_members_and_whiteouts_only(fmt: int, chunk: int) -> None:
    members, counted = _walk(_tar(ENTRIES, fmt), SELECT, chunk=chunk)
    assert _seen(members) == WANTED
    assert counted == 11  # every member, none of the extended headers


@pytest.mark.parametrize("chunk", [100, 700])
def test_walk_of_everything_yields_every_member(chunk: int) -> None:
    members, counted = _walk(_tar(ENTRIES), SELECT, everything=True, chunk=chunk)
    assert [m.path for m in members] == _all_paths()
    assert counted == 11
    by_path = {m.path: m for m in members}
    assert by_path[f"/{SITE}/other-link"].linkname == "nowhere"
    assert by_path[f"/{SITE}/other-link"].type == b"2"
    assert by_path[f"/{SITE}/skipped.bin"].size == 1500
    assert by_path[f"/{SITE}/skipped.bin"].data is None
    assert by_path["/dev/fifo"].type == b"6"


def _all_paths() -> list[str]:
    return ["/" + name.rstrip("/") for name, _, _, _ in ENTRIES]


def test_counter_is_added_to_even_when_the_walk_stops_early() -> None:
    counter = [5]
    walk = walk_members(Chunks(iter([_tar(ENTRIES)])), lambda p: CAPTURE, True, counter)
    next(walk)
    next(walk)
    cast(Generator[Member], walk).close()  # a generator, as the walk is
    assert counter == [7]


def test_long_gnu_names_and_links_in_the_selective_walk() -> None:
    long_dir = "/".join(["directory_name_that_is_long"] * 6)  # 167 chars
    entries: list[tuple[str, bytes | None, bytes, str]] = [
        (f"{long_dir}/file.txt", b"long", tarfile.REGTYPE, ""),
        (f"{SITE}/far", None, tarfile.SYMTYPE, f"/{long_dir}/file.txt"),
        (f"{long_dir}/skipped", b"zz", tarfile.REGTYPE, ""),
        (f"{long_dir}/dir/", None, tarfile.DIRTYPE, ""),
        ("short.txt", b"s", tarfile.REGTYPE, ""),
    ]
    select = {f"/{long_dir}/file.txt": CAPTURE, f"/{SITE}/far": LINK, "/short.txt": CAPTURE}
    members, counted = _walk(_tar(entries, tarfile.GNU_FORMAT), select, chunk=300)
    assert _seen(members) == [
        (f"/{long_dir}/file.txt", b"0", 4, "", b"long", None),
        (f"/{SITE}/far", b"2", 0, f"/{long_dir}/file.txt", None, None),
        ("/short.txt", b"0", 1, "", b"s", None),  # the long link did not leak into it
    ]
    assert counted == 5


def test_pax_path_linkpath_and_size_records_win_over_the_header() -> None:
    long_name = f"{SITE}/" + "n" * 120 + ".txt"
    entries: list[tuple[str, bytes | None, bytes, str]] = [
        (long_name, b"pax data", tarfile.REGTYPE, ""),
        (f"{SITE}/plink", None, tarfile.SYMTYPE, "t" * 150),
        (f"{SITE}/after.txt", b"after", tarfile.REGTYPE, ""),
    ]
    select = {f"/{long_name}": CAPTURE, f"/{SITE}/plink": LINK, f"/{SITE}/after.txt": CAPTURE}
    members, _ = _walk(_tar(entries, tarfile.PAX_FORMAT), select, chunk=256)
    assert _seen(members) == [
        (f"/{long_name}", b"0", 8, "", b"pax data", None),
        (f"/{SITE}/plink", b"2", 0, "t" * 150, None, None),
        (f"/{SITE}/after.txt", b"0", 5, "", b"after", None),
    ]


def test_pax_size_record_sets_the_size_and_the_padding() -> None:
    data = bytes(range(256)) * 3  # 768 bytes
    entries: list[tuple[str, bytes | None, bytes, str]] = [
        (f"{SITE}/sized.bin", data, tarfile.REGTYPE, ""),
        (f"{SITE}/next.txt", b"next", tarfile.REGTYPE, ""),
    ]
    tar = _tar(entries, tarfile.PAX_FORMAT, {f"{SITE}/sized.bin": {"size": "768"}})
    select = {f"/{SITE}/sized.bin": CAPTURE, f"/{SITE}/next.txt": CAPTURE}
    members, _ = _walk(tar, select, chunk=333)
    assert _seen(members) == [
        (f"/{SITE}/sized.bin", b"0", 768, "", data, None),
        (f"/{SITE}/next.txt", b"0", 4, "", b"next", None),
    ]


def test_ustar_prefix_is_joined_to_the_name() -> None:
    prefix = "/".join(["p" * 40] * 3)  # 122 chars: goes to the prefix field
    entries: list[tuple[str, bytes | None, bytes, str]] = [
        (f"{prefix}/name.txt", b"ustar", tarfile.REGTYPE, ""),
    ]
    tar = _tar(entries, tarfile.USTAR_FORMAT)
    assert tar[345:350] == b"ppppp"  # tarfile did split it
    members, _ = _walk(tar, {f"/{prefix}/name.txt": CAPTURE})
    assert _seen(members) == [(f"/{prefix}/name.txt", b"0", 5, "", b"ustar", None)]


def test_name_filling_all_100_bytes_has_no_nul() -> None:
    name = "d/" + "f" * 98  # exactly 100 bytes
    tar = _tar([(name, b"full", tarfile.REGTYPE, "")], tarfile.GNU_FORMAT)
    assert tar[99:100] == b"f"
    members, _ = _walk(tar, {"/" + name: CAPTURE})
    assert _seen(members) == [("/" + name, b"0", 4, "", b"full", None)]


def test_capture_above_the_limit_is_yielded_as_oversized() -> None:
    entries: list[tuple[str, bytes | None, bytes, str]] = [
        (f"{SITE}/big.txt", b"x" * 11, tarfile.REGTYPE, ""),
        (f"{SITE}/fits.txt", b"y" * 10, tarfile.REGTYPE, ""),
        (f"{SITE}/both.txt", b"z" * 11, tarfile.REGTYPE, ""),
    ]
    select = {
        f"/{SITE}/big.txt": CAPTURE,
        f"/{SITE}/fits.txt": CAPTURE,
        f"/{SITE}/both.txt": CAPTURE | HASH,
    }
    members, _ = _walk(_tar(entries), select, capture_limit=10)
    assert [(m.path, m.data, m.digest, m.oversized) for m in members] == [
        (f"/{SITE}/big.txt", None, None, True),
        (f"/{SITE}/fits.txt", b"y" * 10, None, False),
        (f"/{SITE}/both.txt", None, _b64(b"z" * 11), True),  # still hashed, not held
    ]


class Recorder:
    """A MemberStream that keeps what it was fed."""

    def __init__(self, path: str, size: int, log: list[tuple[str, int, bytes]]) -> None:
        self.path = path
        self.size = size
        self.parts: list[bytes] = []
        self.log = log

    def update(self, chunk: memoryview, /) -> None:
        self.parts.append(bytes(chunk))

    def close(self) -> object:
        data = b"".join(self.parts)
        self.log.append((self.path, self.size, data))
        return {"bytes": len(data)}


@pytest.mark.parametrize("chunk", [100, 4096])
def test_streams_get_the_content_alone_or_with_hash_and_capture(chunk: int) -> None:
    one, two, three = b"1" * 2000, b"2" * 700, b"3" * 30
    entries: list[tuple[str, bytes | None, bytes, str]] = [
        (f"{SITE}/s.so", one, tarfile.REGTYPE, ""),
        (f"{SITE}/sh.so", two, tarfile.REGTYPE, ""),
        (f"{SITE}/sc.so", three, tarfile.REGTYPE, ""),
    ]
    select = {
        f"/{SITE}/s.so": STREAM,
        f"/{SITE}/sh.so": STREAM | HASH,
        f"/{SITE}/sc.so": STREAM | CAPTURE | HASH,
    }
    log: list[tuple[str, int, bytes]] = []
    members = list(
        walk_members(
            Chunks(_split(_tar(entries), chunk)),
            lambda p: select.get(p, SKIP),
            False,
            [0],
            lambda path, size: Recorder(path, size, log),
        )
    )
    assert log == [
        (f"/{SITE}/s.so", 2000, one),
        (f"/{SITE}/sh.so", 700, two),
        (f"/{SITE}/sc.so", 30, three),
    ]
    assert [(m.data, m.digest, m.streamed) for m in members] == [
        (None, None, {"bytes": 2000}),
        (None, _b64(two), {"bytes": 700}),
        (three, _b64(three), {"bytes": 30}),
    ]


def test_stream_without_an_opener_is_a_layer_error() -> None:
    tar = _tar([(f"{SITE}/s.so", b"x", tarfile.REGTYPE, "")])
    with pytest.raises(LayerError) as err:
        list(walk_tar(io.BytesIO(tar), lambda p: STREAM))
    assert str(err.value) == f"'/{SITE}/s.so' selected for streaming but nothing consumes it"


# --- truncation and bad headers -------------------------------------------------------------


def test_stream_without_end_blocks_is_tolerated() -> None:
    tar = _tar([(f"{SITE}/a.txt", b"abc", tarfile.REGTYPE, "")])
    members, _ = _walk(tar[:1024], {f"/{SITE}/a.txt": CAPTURE})
    assert _seen(members) == [(f"/{SITE}/a.txt", b"0", 3, "", b"abc", None)]


def test_end_inside_a_header_is_truncation() -> None:
    tar = _tar([(f"{SITE}/a.txt", b"abc", tarfile.REGTYPE, "")] * 2)
    with pytest.raises(LayerError, match=r"^layer tar ends inside a header \(truncated\)$"):
        _walk(tar[: 1024 + 200], {})


def test_end_inside_an_extended_header_is_truncation() -> None:
    name = "l" * 300
    tar = _tar([(name, b"abc", tarfile.REGTYPE, "")], tarfile.GNU_FORMAT)
    assert tar[156:157] == b"L"
    with pytest.raises(
        LayerError, match=r"^layer tar ends inside an extended header \(truncated\)$"
    ):
        _walk(tar[: 512 + 100], {})


@pytest.mark.parametrize(
    ("entry", "select", "everything"),
    [
        ((f"{SITE}/a.bin", b"a" * 3000, tarfile.REGTYPE, ""), SKIP, True),
        ((f"{SITE}/a.bin", b"a" * 3000, tarfile.REGTYPE, ""), SKIP, False),
        ((f"{SITE}/a.bin", b"a" * 3000, tarfile.REGTYPE, ""), HASH, False),
    ],
)
def test_end_inside_a_member_is_truncation(
    entry: tuple[str, bytes | None, bytes, str], select: int, everything: bool
) -> None:
    tar = _tar([entry])
    with pytest.raises(LayerError, match=r"^layer tar ends inside a member \(truncated\)$"):
        _walk(tar[:2000], {f"/{SITE}/a.bin": select}, everything=everything)


def test_end_inside_a_captured_member_names_it() -> None:
    tar = _tar([(f"{SITE}/a.txt", b"a" * 3000, tarfile.REGTYPE, "")])
    with pytest.raises(LayerError) as err:
        _walk(tar[:2000], {f"/{SITE}/a.txt": CAPTURE})
    assert str(err.value) == f"layer tar ends inside '/{SITE}/a.txt' (truncated)"


def test_end_inside_the_padding_of_a_hashed_member_is_truncation() -> None:
    tar = _tar([(f"{SITE}/a.bin", b"a" * 600, tarfile.REGTYPE, "")])
    with pytest.raises(LayerError, match=r"ends inside a member \(truncated\)"):
        _walk(tar[: 512 + 700], {f"/{SITE}/a.bin": HASH})


def _with_header(tar: bytes, field: slice, value: bytes) -> bytes:
    header = bytearray(tar[:512])
    header[field] = value
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    return bytes(header) + tar[512:]


def test_bad_checksum_names_the_header() -> None:
    tar = bytearray(_tar([("usr/x.txt", b"abc", tarfile.REGTYPE, "")]))
    tar[0:1] = b"v"
    with pytest.raises(LayerError) as err:
        _walk(bytes(tar), {})
    assert str(err.value) == "bad tar header checksum (header names b'vsr/x.txt')"


def test_negative_size_names_the_header() -> None:
    tar = _tar([("usr/x.txt", b"abc", tarfile.REGTYPE, "")])
    bad = _with_header(tar, slice(124, 136), b"\xff" * 12)  # base-256 -1
    with pytest.raises(LayerError) as err:
        _walk(bad, {})
    assert str(err.value) == "tar header for b'usr/x.txt' has a negative size -1"


def test_octal_size_without_terminator_is_read() -> None:
    tar = _tar([("usr/x.txt", b"abc", tarfile.REGTYPE, ""), ("usr/y", b"y", tarfile.REGTYPE, "")])
    full = _with_header(tar, slice(124, 136), b"000000000003")  # all 12 digits, no NUL
    with tarfile.open(fileobj=io.BytesIO(full)) as reference:
        assert reference.getmember("usr/x.txt").size == 3
    members, _ = _walk(full, {"/usr/x.txt": CAPTURE, "/usr/y": CAPTURE})
    assert _seen(members) == [
        ("/usr/x.txt", b"0", 3, "", b"abc", None),
        ("/usr/y", b"0", 1, "", b"y", None),
    ]


def test_non_numeric_pax_size_names_the_value_and_member() -> None:
    tar = _tar(
        [(f"{SITE}/a.txt", b"abc", tarfile.REGTYPE, "")],
        tarfile.PAX_FORMAT,
        {f"{SITE}/a.txt": {"size": "3x"}},
    )
    with pytest.raises(LayerError) as err:
        _walk(tar, {})
    assert str(err.value) == f"PAX size '3x' for '{SITE}/a.txt' is not a size"


def test_global_pax_header_is_passed_over() -> None:
    buf = io.BytesIO()
    with tarfile.open(
        fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "global"}
    ) as tar:
        info = tarfile.TarInfo("usr/g.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"gg"))
    data = buf.getvalue()
    assert data[156:157] == b"g"
    members, counted = _walk(data, {"/usr/g.txt": CAPTURE})
    assert _seen(members) == [("/usr/g.txt", b"0", 2, "", b"gg", None)]
    assert counted == 1


# --- size fields and names as other tar writers leave them -----------------------------------


def _reference_size(tar: bytes, name: str) -> int:
    with tarfile.open(fileobj=io.BytesIO(tar)) as reference:
        return reference.getmember(name).size


def test_base256_size_whose_last_byte_is_zero() -> None:
    data = bytes(range(256)) * 4  # 1024 bytes: base-256 ends in a NUL byte
    tar = _tar([("usr/b.bin", data, tarfile.REGTYPE, ""), ("usr/n", b"n", tarfile.REGTYPE, "")])
    bad = _with_header(tar, slice(124, 136), b"\x80" + (1024).to_bytes(11, "big"))
    assert bad[135] == 0
    assert _reference_size(bad, "usr/b.bin") == 1024
    members, _ = _walk(bad, {"/usr/b.bin": CAPTURE, "/usr/n": CAPTURE})
    assert _seen(members) == [
        ("/usr/b.bin", b"0", 1024, "", data, None),
        ("/usr/n", b"0", 1, "", b"n", None),
    ]


def test_size_field_of_nul_bytes_is_zero() -> None:
    tar = _tar([("usr/e", b"", tarfile.REGTYPE, ""), ("usr/n", b"n", tarfile.REGTYPE, "")])
    bad = _with_header(tar, slice(124, 136), b"\0" * 12)
    assert _reference_size(bad, "usr/e") == 0
    members, _ = _walk(bad, {"/usr/e": CAPTURE, "/usr/n": CAPTURE})
    assert _seen(members) == [
        ("/usr/e", b"0", 0, "", b"", None),
        ("/usr/n", b"0", 1, "", b"n", None),
    ]


def test_twelve_digit_size_beside_a_space_led_mtime() -> None:
    tar = _tar([("usr/x.txt", b"abc", tarfile.REGTYPE, ""), ("usr/y", b"y", tarfile.REGTYPE, "")])
    odd = _with_header(tar, slice(124, 148), b"000000000003" + b" 1234567012\0")
    assert _reference_size(odd, "usr/x.txt") == 3
    members, _ = _walk(odd, {"/usr/x.txt": CAPTURE, "/usr/y": CAPTURE})
    assert _seen(members) == [
        ("/usr/x.txt", b"0", 3, "", b"abc", None),
        ("/usr/y", b"0", 1, "", b"y", None),
    ]


def test_a_gigabyte_octal_size_is_read_whole() -> None:
    tar = _tar([("usr/big", b"", tarfile.REGTYPE, "")])
    big = _with_header(tar, slice(124, 136), b"10000000000\0")  # 8**10 bytes
    assert tarfile.TarInfo.frombuf(big[:512], "utf-8", "surrogateescape").size == 1 << 30
    # the stream holds none of it: the walk must try to pass over a whole GiB
    with pytest.raises(LayerError, match=r"^layer tar ends inside a member \(truncated\)$"):
        _walk(big, {"/usr/big": SKIP}, everything=True)


def test_first_member_symlink_keeps_its_target() -> None:
    tar = _tar([("usr/first", None, tarfile.SYMTYPE, "target/x")])
    members, _ = _walk(tar, {"/usr/first": LINK})
    assert _seen(members) == [("/usr/first", b"2", 0, "target/x", None, None)]


def test_bad_checksum_of_a_100_byte_name_quotes_only_the_name() -> None:
    name = "d/" + "f" * 98
    tar = bytearray(_tar([(name, b"abc", tarfile.REGTYPE, "")]))
    tar[0:1] = b"e"
    with pytest.raises(LayerError) as err:
        _walk(bytes(tar), {})
    assert (
        str(err.value) == f"bad tar header checksum (header names {('e/' + 'f' * 98).encode()!r})"
    )


def test_negative_size_of_a_100_byte_name_quotes_only_the_name() -> None:
    name = "d/" + "f" * 98
    tar = _tar([(name, b"abc", tarfile.REGTYPE, "")])
    bad = _with_header(tar, slice(124, 136), b"\xff" * 12)
    with pytest.raises(LayerError) as err:
        _walk(bad, {})
    assert str(err.value) == f"tar header for {name.encode()!r} has a negative size -1"


def test_gnu_long_name_that_is_not_utf8_survives_as_surrogates() -> None:
    long_name = "usr/" + "n" * 120 + "\udcff.txt"
    buf = io.BytesIO()
    with tarfile.open(
        fileobj=buf, mode="w", format=tarfile.GNU_FORMAT, encoding="utf-8", errors="surrogateescape"
    ) as tar:
        info = tarfile.TarInfo(long_name)
        info.size = 2
        tar.addfile(info, io.BytesIO(b"ok"))
    data = buf.getvalue()
    assert data[156:157] == b"L"
    assert b"n\xff.txt" in data
    members, _ = _walk(data, {"/" + long_name: CAPTURE})
    assert _seen(members) == [("/" + long_name, b"0", 2, "", b"ok", None)]


def _gnu_long(kind: bytes, payload: bytes) -> bytes:
    """A GNU long name (L) or long link (K) member carrying ``payload`` as its data."""
    info = tarfile.TarInfo("././@LongLink")
    info.type = kind
    info.size = len(payload)
    pad = -len(payload) % 512
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape") + payload + bytes(pad)


def _member(name: str, type_: bytes = tarfile.REGTYPE, data: bytes = b"", link: str = "") -> bytes:
    info = tarfile.TarInfo(name)
    info.type = type_
    info.size = len(data)
    info.linkname = link
    pad = -len(data) % 512
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape") + data + bytes(pad)


def test_gnu_long_name_and_link_end_at_their_first_nul() -> None:
    tar = (
        _gnu_long(tarfile.GNUTYPE_LONGNAME, b"usr/real-name.txt\0junk\0")
        + _gnu_long(tarfile.GNUTYPE_LONGLINK, b"real-target\0more junk\0")
        + _member("usr/short", tarfile.SYMTYPE, link="short-target")
        + bytes(1024)
    )
    with tarfile.open(fileobj=io.BytesIO(tar)) as reference:
        assert [(m.name, m.linkname) for m in reference] == [("usr/real-name.txt", "real-target")]
    members, _ = _walk(tar, {"/usr/real-name.txt": LINK})
    assert _seen(members) == [("/usr/real-name.txt", b"2", 0, "real-target", None, None)]


def test_gnu_long_link_that_is_not_utf8_survives_as_surrogates() -> None:
    tar = (
        _gnu_long(tarfile.GNUTYPE_LONGLINK, b"t\xffrget\0")
        + _member("usr/l", tarfile.SYMTYPE, link="x")
        + bytes(1024)
    )
    members, _ = _walk(tar, {"/usr/l": LINK})
    assert _seen(members) == [("/usr/l", b"2", 0, "t\udcffrget", None, None)]


def test_one_character_ustar_prefix() -> None:
    name = "p/" + "n" * 100
    tar = _tar([(name, b"one", tarfile.REGTYPE, "")], tarfile.USTAR_FORMAT)
    assert tar[345:347] == b"p\0"  # tarfile put "p" in the prefix field
    members, _ = _walk(tar, {"/" + name: CAPTURE})
    assert _seen(members) == [("/" + name, b"0", 3, "", b"one", None)]


def test_pax_records_of_a_directory_do_not_leak_into_the_next_member() -> None:
    long_dir = "usr/" + "d" * 120 + "/"
    tar = _tar(
        [(long_dir, None, tarfile.DIRTYPE, ""), ("usr/a.txt", b"a", tarfile.REGTYPE, "")],
        tarfile.PAX_FORMAT,
    )
    assert tar[156:157] == b"x"  # the directory's name went into a PAX record
    members, _ = _walk(tar, {"/usr/a.txt": CAPTURE})
    assert _seen(members) == [("/usr/a.txt", b"0", 1, "", b"a", None)]


@pytest.mark.parametrize("chunk", [100, 1 << 20])
def test_member_of_an_unknown_type_has_its_data_passed_over(chunk: int) -> None:
    tar = _member("usr/odd", b"Z", b"z" * 700) + _member("usr/a.txt", data=b"a") + bytes(1024)
    with tarfile.open(fileobj=io.BytesIO(tar)) as reference:
        assert [(m.name, m.size) for m in reference] == [("usr/odd", 700), ("usr/a.txt", 1)]
    members, counted = _walk(tar, {"/usr/a.txt": CAPTURE}, chunk=chunk)
    assert _seen(members) == [("/usr/a.txt", b"0", 1, "", b"a", None)]
    assert counted == 2
    everything, _ = _walk(tar, {"/usr/a.txt": CAPTURE}, everything=True, chunk=chunk)
    assert _seen(everything) == [
        ("/usr/odd", b"Z", 700, "", None, None),
        ("/usr/a.txt", b"0", 1, "", b"a", None),
    ]


def test_member_of_an_unknown_type_cut_short_is_truncation() -> None:
    tar = _member("usr/odd", b"Z", b"z" * 3000)[:1500]
    with pytest.raises(LayerError) as err:
        _walk(tar, {}, chunk=600)
    assert str(err.value) == "layer tar ends inside a member (truncated)"


def test_header_name_that_is_not_utf8_survives_as_surrogates() -> None:
    tar = _member("usr/caf\udce9.txt", data=b"latin-1 name") + bytes(1024)
    assert tar[:12] == b"usr/caf\xe9.txt"
    members, _ = _walk(tar, {"/usr/caf\udce9.txt": CAPTURE})
    assert _seen(members) == [("/usr/caf\udce9.txt", b"0", 12, "", b"latin-1 name", None)]


def test_pax_size_of_a_block_multiple_and_of_a_link() -> None:
    data = bytes(range(256)) * 4  # 1024 bytes, exactly two blocks
    entries: list[tuple[str, bytes | None, bytes, str]] = [
        ("usr/two-blocks", data, tarfile.REGTYPE, ""),
        ("usr/link", None, tarfile.SYMTYPE, "two-blocks"),
        ("usr/after", b"after", tarfile.REGTYPE, ""),
    ]
    tar = _tar(
        entries,
        tarfile.PAX_FORMAT,
        {"usr/two-blocks": {"size": "1024"}, "usr/link": {"size": "700"}},
    )
    with tarfile.open(fileobj=io.BytesIO(tar)) as reference:
        assert [(m.name, m.size) for m in reference] == [
            ("usr/two-blocks", 1024),
            ("usr/link", 700),  # a link's size carries no data
            ("usr/after", 5),
        ]
    select = {"/usr/two-blocks": CAPTURE, "/usr/link": LINK, "/usr/after": CAPTURE}
    members, _ = _walk(tar, select)
    assert _seen(members) == [
        ("/usr/two-blocks", b"0", 1024, "", data, None),
        ("/usr/link", b"2", 700, "two-blocks", None, None),
        ("/usr/after", b"0", 5, "", b"after", None),
    ]


def test_the_capture_cap_does_not_touch_members_only_hashed() -> None:
    tar = _tar([("usr/h.bin", b"h" * 50, tarfile.REGTYPE, "")])
    members, _ = _walk(tar, {"/usr/h.bin": HASH}, capture_limit=10)
    assert [(m.path, m.data, m.digest, m.oversized) for m in members] == [
        ("/usr/h.bin", None, _b64(b"h" * 50), False)
    ]


@pytest.mark.parametrize("record", [b"x2 path=a\n", b" 12 path=a\n", b"+9 path=a\n"])
def test_a_pax_record_with_a_non_decimal_length_is_a_layer_error(record: bytes) -> None:
    """A PAX length that is not a decimal number is refused as a LayerError, never a bare
    ValueError escaping the walk."""
    with pytest.raises(LayerError, match="bad PAX record length"):
        _pax(record)
