"""The one entry format: ``seal``/``unseal``, and ``EntryDir`` writing the same bytes in pieces.

``EntryDir.put`` writes an entry without holding its text (``write_sealed``): the bytes must be
exactly ``seal``'s, for values of every shape a replay entry holds (nested objects and arrays,
empty ones, non-ASCII text, numbers, booleans, null), so an entry written either way reads
back the same; an entry altered on disk, or stored under another key, is a miss.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pinguard.cache.entry import EntryDir, seal, unseal, write_sealed
from pinguard.errors import OutputError

SHAPES: list[dict[str, object]] = [
    {},
    {"a": 1},
    {"format": "1", "table": [], "replay": {}},
    {
        "z": [[1, 2.5, None, True], {"b": 'é\u2603\n"q"', "a": []}],
        "table": [{"record": [["/x,y", "sha256=abc"]], "name": "torch"}, {}],
        "replay": {"steps": [{"changes": [{"kind": "added"}]}], "notes": ["ünïcode"]},
        "n": -0.0,
    },
]


@pytest.mark.parametrize("data", SHAPES)
def test_write_sealed_writes_seals_bytes(tmp_path: Path, data: dict[str, object]) -> None:
    path = tmp_path / "e.json"
    write_sealed(path, data)
    assert path.read_bytes() == seal(data).encode("utf-8")
    assert unseal(path.read_bytes()) == data


def test_entries_read_back_by_key_and_refuse_alteration(tmp_path: Path) -> None:
    entries = EntryDir(tmp_path, "result")
    entries.put("k1", {"report": "x"})
    assert entries.get("k1") == {"report": "x"}
    assert entries.get("k2") is None
    (tmp_path / "result-k1.json").rename(tmp_path / "result-k2.json")
    assert entries.get("k2") is None  # another key's entry under this name
    entries.put("k1", {"report": "x"})
    path = entries.path("k1")
    path.write_bytes(path.read_bytes().replace(b'"x"', b'"y"'))
    assert entries.get("k1") is None
    assert list(tmp_path.glob(".*tmp")) == []  # no temporary file left behind


def test_an_unwritable_directory_is_an_output_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OutputError, match="cannot write"):
        EntryDir(blocker, "replay").put("k", {"a": 1})
