"""The TOC walk's one-pass check of the places a zstd:chunked TOC gives file content.

``_walk`` finds out, as it walks the entries, whether every stored piece (a file stored
whole, or each chunk of a file in chunks) starts where or after the one before it ends and
the last ends before the TOC: the order containers/storage's compressor writes. Such a TOC
needs no other check of its places; any other goes to ``_check_places``'s sorted check,
which allows an honest TOC in another order and refuses one whose pieces overlap or lie
past the file data. The real writer's TOCs are covered by ``test_toc_lies.py``; these are
the orders no writer makes, built entry by entry.
"""

from __future__ import annotations

from typing import Any

import pytest

from pinguard.layers.analysis import LayerAnalysis, LayerLimits
from pinguard.layers.chunked import TocLie, _check_places, _Order, _walk
from pinguard.layers.names import MemberNames

TOC_AT = 1000  # where the TOC starts: file data ends before it
FILE = "sha256:" + "a" * 64
CHUNK = "sha256:" + "b" * 64


def _whole(name: str, start: int, stop: int, size: int = 10) -> dict[str, Any]:
    return {
        "type": "reg",
        "name": name,
        "size": size,
        "offset": start,
        "endOffset": stop,
        "digest": FILE,
    }


def _chunked(name: str, stop: int, *starts: int) -> list[dict[str, Any]]:
    """A file of 10 bytes per chunk, its chunks stored from each of ``starts``."""
    head = {
        **_whole(name, starts[0], stop, 10 * len(starts)),
        "chunkSize": 10,
        "chunkDigest": CHUNK,
    }
    rest = [
        {
            "type": "chunk",
            "name": name,
            "offset": at,
            "chunkOffset": 10 * k,
            "chunkSize": 10,
            "chunkDigest": CHUNK,
        }
        for k, at in enumerate(starts[1:], start=1)
    ]
    return [head, *rest]


def _ordered(raws: list[dict[str, Any]]) -> bool:
    order = _Order()
    names = MemberNames()
    try:
        walked = _walk(
            raws, TOC_AT, lambda path: 0, LayerLimits(), LayerAnalysis(digest="x"), names, order
        )
        assert list(walked) == []  # nothing selected
    finally:
        names.close()
    return order.ordered


DIR = {"type": "dir", "name": "usr/"}


@pytest.mark.parametrize(
    ("raws", "ordered"),
    [
        ([DIR, _whole("usr/a", 0, 40), _whole("usr/b", 40, 90)], True),
        ([_whole("usr/a", 0, 40), DIR, *_chunked("usr/b", 200, 40, 90, 150)], True),
        ([*_chunked("usr/b", 150, 0, 60, 100), _whole("usr/a", 200, 230)], True),
        ([_whole("usr/a", 0, 40), {"type": "reg", "name": "usr/empty", "size": 0}], True),
        # honest, but not as a writer orders them: the sorted check allows these
        ([_whole("usr/a", 50, 90), _whole("usr/b", 0, 50)], False),
        ([_whole("usr/a", 200, 230), DIR, *_chunked("usr/b", 150, 0, 60, 100)], False),
    ],
    ids=["whole", "chunks", "chunks-first", "empty-file", "files-swapped", "chunked-first"],
)
def test_an_honest_toc_passes_in_one_pass_or_sorted(
    raws: list[dict[str, Any]], ordered: bool
) -> None:
    assert _ordered(raws) is ordered
    _check_places(raws, TOC_AT, None, "sha256:layer", ordered)


@pytest.mark.parametrize(
    ("raws", "lie"),
    [
        ([_whole("usr/a", 0, 60), _whole("usr/b", 40, 90)], "overlap"),
        ([*_chunked("usr/b", 150, 0, 60, 60)], "no bytes"),
        ([*_chunked("usr/b", 100, 0, 60, 100)], "no bytes"),
        ([_whole("usr/a", 0, 40), _whole("usr/b", 990, 1010)], "past the file data"),
        ([_whole("usr/a", 0, 40), _whole("usr/b", 0, 40)], "claim one chunk"),
        # -1 was the one-pass check's own mark for "no file under way": a file said to end
        # there passed it, in bytes that are none (found by comparing it with the sorted
        # check on random TOCs)
        ([_whole("usr/a", 0, 40), _whole("usr/b", 40, -1)], "no bytes"),
        ([*_chunked("usr/b", -1, 0, 10)], "no bytes"),
    ],
    ids=[
        "overlap",
        "chunk-twice",
        "last-chunk-at-end",
        "into-the-toc",
        "one-range-twice",
        "ends-at-minus-one",
        "chunks-end-at-minus-one",
    ],
)
def test_a_toc_out_of_order_that_lies_is_refused(raws: list[dict[str, Any]], lie: str) -> None:
    assert _ordered(raws) is False
    with pytest.raises(TocLie, match=lie):
        _check_places(raws, TOC_AT, None, "sha256:layer", False)
