"""The per-user layer cache (``LocalCache``: the directory backend, unsigned): exact round
trips, misses instead of errors, atomicity.

A damaged, truncated or foreign entry is a quiet miss (the layer is read again), never an
error, a note or a wrong analysis; an entry is written through a temporary file, so nothing
half-written is ever visible, and the same analysis always gives the same bytes; a directory
that cannot be written is the user's error, as for any file pinguard writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pinguard.cache.store import LocalCache
from pinguard.errors import OutputError
from pinguard.layers.analysis import LayerAnalysis

DIGEST = "sha256:" + "0123456789abcdef" * 4


def _analysis(digest: str = DIGEST) -> LayerAnalysis:
    return LayerAnalysis(
        digest=digest,
        files={"/b/METADATA": b"Name: b\n", "/a/bin": b"\x00\xff"},
        hashes={"/z.py": "sha256=zz", "/a.py": "sha256=aa"},
        whiteouts=["/y", "/x"],
        opaque=["/o"],
        members=3,
        size=2048,
    )


def _entry(directory: Path) -> Path:
    (entry,) = directory.iterdir()
    return entry


def _in_analysis(text: str, edit: Callable[[dict[str, Any]], dict[str, Any]]) -> str:
    """The entry ``text`` with its analysis edited (and its content digest kept)."""
    doc = json.loads(text)
    return json.dumps({**doc, "analysis": edit(doc["analysis"])})


@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text[: len(text) // 2],  # truncated
        lambda text: "",  # empty
        lambda text: "[]",  # valid JSON, wrong shape
        lambda text: text.replace('"files":{', '"files":{"/c":{"b":"not base64!"},'),
        lambda text: text.replace('"streamed":{}', '"streamed":"oops"'),
        lambda text: _in_analysis(text, lambda a: {**a, "members": "many"}),
        lambda text: _in_analysis(text, lambda a: {k: v for k, v in a.items() if k != "hashes"}),
        # altered but still a valid analysis: another version in METADATA, a whiteout gone
        lambda text: text.replace("Name: b", "Name: c"),
        lambda text: text.replace('"/x",', ""),
        lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "content"}),
    ],
    ids=[
        "truncated",
        "empty",
        "list",
        "bad-base64",
        "streamed-string",
        "bad-int",
        "no-hashes",
        "edited-metadata",
        "whiteout-removed",
        "no-content-digest",
    ],
)
def test_damaged_entry_is_a_miss(tmp_path: Path, damage: object) -> None:
    """Whatever is wrong with an entry, ``get`` returns None rather than raising."""
    cache = LocalCache(tmp_path, "k", ())
    cache.put(_analysis())
    entry = _entry(tmp_path)
    entry.write_text(damage(entry.read_text()))  # type: ignore[operator]
    assert cache.get(DIGEST) is None
    assert cache.report() == ()  # the user's own directory: no note in the report


def test_entry_under_another_digest_is_a_miss(tmp_path: Path) -> None:
    """An entry whose recorded digest is not the one its name says is not trusted."""
    cache = LocalCache(tmp_path, "k", ())
    cache.put(_analysis())
    other = "sha256:" + "f" * 64
    _entry(tmp_path).rename(tmp_path / f"sha256-{'f' * 64}.k.entry")
    assert cache.get(other) is None


def test_entry_of_other_analyzers_is_a_miss(tmp_path: Path) -> None:
    """An entry names the analyzers that made it, checked on read as a shared one is."""
    LocalCache(tmp_path, "k", ("python=1",)).put(_analysis())
    assert LocalCache(tmp_path, "k", ("python=1",)).get(DIGEST) is not None
    assert LocalCache(tmp_path, "k", ("python=2",)).get(DIGEST) is None


def test_an_unwritable_directory_is_an_output_error(tmp_path: Path) -> None:
    """As for a report: the audit stops with the path and the reason (exit 2)."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OutputError, match="cannot write"):
        LocalCache(blocker / "cache", "k", ()).put(_analysis())


@pytest.mark.parametrize("bad", ["", "sha256", "sha256:", "sha256:../../etc", "../x:abc"])
def test_a_digest_that_is_not_one_is_refused(tmp_path: Path, bad: str) -> None:
    """Names that could escape the cache directory are never written (the error quotes the
    value) and never read."""
    cache = LocalCache(tmp_path / "c", "k", ())
    with pytest.raises(ValueError, match=f"not a digest: {bad!r}"):
        cache.put(_analysis(bad))
    assert cache.get(bad) is None
    assert not (tmp_path / "c").exists()


def test_put_is_atomic_and_deterministic(tmp_path: Path) -> None:
    """No temporary file is left; equal analyses built in another order give equal bytes."""
    first, second = tmp_path / "one", tmp_path / "two"
    LocalCache(first, "k", ()).put(_analysis())
    reordered = _analysis()
    reordered.files = dict(reversed(list(reordered.files.items())))
    reordered.hashes = dict(reversed(list(reordered.hashes.items())))
    reordered.whiteouts.reverse()
    LocalCache(second, "k", ()).put(reordered)
    assert [p.name for p in first.iterdir()] == [f"sha256-{'0123456789abcdef' * 4}.k.entry"]
    assert _entry(first).read_bytes() == _entry(second).read_bytes()
    assert LocalCache(first, "k", ()).get(DIGEST) == LayerAnalysis.from_json(
        json.loads(_entry(second).read_text())["analysis"]
    )
    assert json.loads(_entry(first).read_text())["content"].startswith("sha256:")
