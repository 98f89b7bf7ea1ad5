"""``LayerAnalysis`` as the cache stores it: the JSON written by hand, and back again."""

from __future__ import annotations

import json

from pinguard.layers.analysis import LayerAnalysis
from pinguard.layers.names import NameFlag


def sample() -> LayerAnalysis:
    return LayerAnalysis(
        digest="sha256:" + "ab" * 32,
        files={"/b/METADATA": "Name: b\u00e9\n".encode(), "/a/bin.so": b"\xff\x00\x01"},
        hashes={"/z/x.py": "sha256=Zz", "/a/y.py": "sha256=Aa"},
        whiteouts=["/opt/venv", "/etc/old"],
        opaque=["/usr/lib/x", "/srv"],
        opaque_made=["/usr/lib/x"],
        members=12,
        size=10240,
        unreadable=[("/p/q", "cannot read: Permission denied"), ("/a/b", "cannot read: gone")],
        streamed={"/z/lib.so": {"soname": "lib.so"}, "/a/x.so": {"soname": "x.so"}},
        links={"/usr/lib/libz.so.1": "libz.so.1.3", "/lib": "usr/lib"},
        diff_id="sha256:" + "cd" * 32,
        name_flags=[
            NameFlag("duplicate", "/etc/x", "/etc/x", 2),
            NameFlag("absolute", "/a\0b", "/a\0b"),
        ],
    )


def test_json_shape_is_sorted_and_encodes_text_and_bytes() -> None:
    """UTF-8 files as text, others base64; every list and mapping sorted."""
    assert sample().to_json() == {
        "digest": "sha256:" + "ab" * 32,
        "files": {"/a/bin.so": {"b": "/wAB"}, "/b/METADATA": {"t": "Name: b\u00e9\n"}},
        "hashes": {"/a/y.py": "sha256=Aa", "/z/x.py": "sha256=Zz"},
        "whiteouts": ["/etc/old", "/opt/venv"],
        "opaque": ["/srv", "/usr/lib/x"],
        "opaque_made": ["/usr/lib/x"],
        "members": 12,
        "size": 10240,
        "unreadable": [["/a/b", "cannot read: gone"], ["/p/q", "cannot read: Permission denied"]],
        "streamed": {"/a/x.so": {"soname": "x.so"}, "/z/lib.so": {"soname": "lib.so"}},
        "links": {"/lib": "usr/lib", "/usr/lib/libz.so.1": "libz.so.1.3"},
        "diff_id": "sha256:" + "cd" * 32,
        "name_flags": [["absolute", "/a\0b", "/a\0b", 1], ["duplicate", "/etc/x", "/etc/x", 2]],
    }
    assert list(sample().to_json()["files"]) == ["/a/bin.so", "/b/METADATA"]  # type: ignore[call-overload]


def test_round_trip_through_json_text() -> None:
    """What the cache writes reads back to an equal analysis (lists in sorted order)."""
    original = sample()
    back = LayerAnalysis.from_json(json.loads(json.dumps(original.to_json())))
    assert back.digest == original.digest
    assert back.files == original.files
    assert back.hashes == original.hashes
    assert back.whiteouts == ["/etc/old", "/opt/venv"]
    assert back.opaque == ["/srv", "/usr/lib/x"]
    assert back.opaque_made == ["/usr/lib/x"]
    assert (back.members, back.size) == (12, 10240)
    assert back.streamed == original.streamed
    assert back.links == original.links
    assert back.diff_id == original.diff_id
    assert back.name_flags == sorted(original.name_flags)
    assert back.unreadable == [
        ("/a/b", "cannot read: gone"),
        ("/p/q", "cannot read: Permission denied"),
    ]
    old = original.to_json()
    del old["unreadable"]  # entries written before the field existed
    assert LayerAnalysis.from_json(old).unreadable == []


def test_a_lazy_read_keeps_what_it_verified_and_a_full_read_has_no_such_field() -> None:
    """``lazy`` (what a zstd:chunked TOC read verified) is written only for such a read and
    read back as written."""
    assert "lazy" not in sample().to_json()
    lazy = sample()
    lazy.lazy = {"toc": "sha256:" + "ee" * 32, "fetched": 1234, "chunks_verified": 7}
    back = LayerAnalysis.from_json(json.loads(json.dumps(lazy.to_json())))
    assert back.lazy == lazy.lazy
