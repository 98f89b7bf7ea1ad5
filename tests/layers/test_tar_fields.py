"""Tar header numbers and checksums in ``pinguard.layers.tar`` against ``tarfile``'s own.

``tarfile.nti`` parses a numeric field (octal, NUL/space padded, GNU base-256 positive and
negative) and ``tarfile.calc_chksums`` gives the unsigned and signed header sums; the walk's
``_number`` and ``_checksum_ok`` must agree with them on real headers written by tarfile and
on the same headers with their fields rewritten.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable

import pytest

from pinguard.errors import LayerError
from pinguard.layers.tar import _checksum_ok, _number

# tarfile's module-level helpers are not in typeshed's stubs: typed once here
NTI: Callable[[bytes], int] = vars(tarfile)["nti"]
CALC_CHKSUMS: Callable[[bytes], tuple[int, int]] = vars(tarfile)["calc_chksums"]

FIELDS = [
    b"0000644\x00",
    b"0000644 ",
    b" 644\x00\x00\x00\x00",
    b"00000000000",
    b"\x00" * 8,
    b"        ",
    b"17777777777\x00",
    b"7\x00garbage",
    b"\x80\x00\x00\x00\x00\x00\x00\x00\x00\x0a\xae\x60",  # 700000, base-256
    b"\x80" + b"\xff" * 11,  # large positive base-256
    b"\xff" * 8,  # -1 in base-256
    b"\xff\xff\xff\xff\xff\xff\xff\x00",  # -256
    b"0o777\x00\x00\x00",  # int(..., 8) takes the prefix, in both
    b"-12\x00",
]


@pytest.mark.parametrize("field", FIELDS, ids=[f"field{i}" for i in range(len(FIELDS))])
def test_number_matches_tarfile(field: bytes) -> None:
    assert _number(field) == NTI(field)


@pytest.mark.parametrize(
    "field", [b"12x45\x00\x00\x00", b"9\x00", b" 8 \x00"], ids=["letter", "nine", "eight"]
)
def test_bad_number_is_a_layer_error(field: bytes) -> None:
    with pytest.raises(tarfile.HeaderError):
        NTI(field)
    with pytest.raises(LayerError, match="bad number in tar header"):
        _number(field)


def headers() -> list[bytes]:
    """Real headers: plain ASCII, and names with bytes >= 128 (where signed sums differ)."""
    out = []
    for name in ("usr/lib/python3/x.py", "opt/caf\u00e9/\u00fc\u00f1\u00ee.txt", "a" * 99):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            info = tarfile.TarInfo(name)
            info.size = 3
            info.mtime = 1764374400
            tar.addfile(info, io.BytesIO(b"abc"))
        out.append(buf.getvalue()[:512])
    return out


def with_checksum(header: bytes, value: int, style: str) -> bytes:
    if style == "octal6":  # what tarfile writes: six digits, NUL, space
        field = b"%06o\x00 " % value
    elif style == "octal7":  # seven digits and NUL (GNU, some writers)
        field = b"%07o\x00" % value
    else:  # base-256
        field = (value & ((1 << 56) - 1) | (0xFF << 56 if value < 0 else 0)).to_bytes(8, "big")
        field = bytes([field[0] | 0x80]) + field[1:] if value >= 0 else field
    return header[:148] + field + header[156:]


@pytest.mark.parametrize("style", ["octal6", "octal7", "base256"])
@pytest.mark.parametrize("index", [0, 1, 2])
def test_checksum_ok_agrees_with_tarfile(style: str, index: int) -> None:
    """Correct unsigned and signed sums pass; sums off by one or by 256 fail."""
    header = headers()[index]
    unsigned, signed = CALC_CHKSUMS(header)
    for value in sorted({unsigned, signed}):
        assert _checksum_ok(with_checksum(header, value, style)), value
    for delta in (1, -1, 256, -256, 7):
        value = unsigned + delta
        if value in (unsigned, signed) or value < 0:
            continue
        assert not _checksum_ok(with_checksum(header, value, style)), delta
    assert (unsigned != signed) == (index == 1)  # the non-ASCII name makes them differ
