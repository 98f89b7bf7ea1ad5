"""``pinguard.window``: a slice of a real file reads exactly its bytes, seeks like a file."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from pinguard.errors import LayerError
from pinguard.window import SliceReader


def test_a_slice_reads_only_its_window(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(bytes(range(256)))
    with io.BufferedReader(SliceReader(path, 10, 20)) as reader:
        assert reader.read() == bytes(range(10, 30))
        assert reader.seek(-5, io.SEEK_END) == 15
        assert reader.read(100) == bytes(range(25, 30))
        assert reader.seek(-100, io.SEEK_CUR) == 0  # never before the start
        assert reader.read(3) == bytes(range(10, 13))


def test_a_slice_past_the_file_end_is_a_truncated_archive(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(b"0123456789")
    reader = SliceReader(path, 5, 10)
    try:
        assert reader.read(5) == b"56789"
        with pytest.raises(LayerError, match="truncated"):
            reader.read(1)
    finally:
        reader.close()
    assert reader.closed
