"""Unsafe member names and paths stored twice in one layer: flagged, so the audit is incomplete.

Each layer is written for real with ``tarfile`` (which writes ``..``, absolute and backslash
names as given, a NUL through a PAX ``path`` or ``linkpath`` record, and a member twice) into
an OCI layout (``pinguard.testing.images``) and audited through the real pipeline and CLI.
The expected messages are written out by hand from the names the test stored.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from pinguard.audit.options import AuditOptions
from pinguard.audit.pipeline import audit_image
from pinguard.cache.store import LocalCache
from pinguard.layers.analysis import LayerAnalysis, analyze_stream
from pinguard.layers.names import (
    ABSOLUTE,
    BACKSLASH,
    DOTDOT,
    DUPLICATE,
    LIMIT,
    LINK_NUL,
    MORE,
    NUL,
    MemberNames,
    NameFlag,
    unsafe_rules,
)
from pinguard.layers.tar import CAPTURE, SKIP, normalize
from pinguard.report.formats import FORMATS
from pinguard.testing.images import ImageWriter, layer_tar
from tests.infra.cli import cli

SITE = "usr/lib/python3/dist-packages"
LAYER_NOTE = "containerd clamps it inside the root; moby refuses a layer whose name climbs out"


def _metadata(name: str, version: str = "1.0") -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n".encode()


Entry = tuple[str, bytes | None, dict[str, str]]  # (name, file bytes or None: a dir, PAX)


def _tar(entries: Sequence[Entry]) -> bytes:
    """A PAX layer tar with the members exactly as given (names, order, repeats)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, pax in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 1764374400
            info.pax_headers = pax
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _layout(tmp_path: Path, tars: Sequence[bytes]) -> tuple[str, list[str]]:
    """``oci:`` reference of a layout with one gzip layer per tar, and the layer digests."""
    writer = ImageWriter(tmp_path / "layout")
    layers = [writer.layer(tar) for tar in tars]
    image = writer.image(layers, [{"created_by": f"RUN step {i}"} for i in range(len(tars))])
    index, _ = writer.index([image], tag="t")
    writer.write_layout(index)
    return f"oci:{tmp_path / 'layout'}:t", [desc.digest for desc, _ in layers]


def _names(result: object) -> list[str]:
    final = result.snapshots[-1]  # type: ignore[attr-defined]
    return sorted(d.name for e in final.environments for d in e.distributions)


# --- the rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rules"),
    [
        ("usr/lib/x", []),
        ("./usr/lib/x", []),
        ("usr/lib/", []),
        ("a..b/c..d/..e", []),  # dots inside a component are not '..'
        ("lib/systemd/system/system-systemd\\x2dcryptsetup.slice", []),  # Debian's systemd
        ("a\\b", []),  # one literal name on Linux
        ("../usr/x", [DOTDOT]),
        ("usr/../../x", [DOTDOT]),
        ("usr/..", [DOTDOT]),
        ("/usr/x", [ABSOLUTE]),
        ("/../x", [ABSOLUTE, DOTDOT]),
        ("..\\..\\etc\\passwd", [BACKSLASH]),
        ("usr\\..\\x", [BACKSLASH]),
        ("\\windows\\x", [BACKSLASH]),
        ("C:\\x", [BACKSLASH]),
        ("etc/a\0b", [NUL]),
        ("/../a\\..\\b\0", [ABSOLUTE, DOTDOT, BACKSLASH, NUL]),
    ],
)
def test_unsafe_rules(name: str, rules: list[str]) -> None:
    """Each stored name breaks exactly the rules listed (ordinary names break none)."""
    assert unsafe_rules(name) == rules


# --- through the CLI ---------------------------------------------------------------------------

DOTDOT_NAME = f"../{SITE}/x-1.0.dist-info/METADATA"
ABSOLUTE_NAME = f"/{SITE}/y-1.0.dist-info/METADATA"


@pytest.mark.parametrize(
    ("entries", "member", "why"),
    [
        (
            [(DOTDOT_NAME, _metadata("x"), {})],
            f"member {DOTDOT_NAME!r}",
            f"name has a '..' component; read as '/{SITE}/x-1.0.dist-info/METADATA' ({LAYER_NOTE})",
        ),
        (
            [(ABSOLUTE_NAME, _metadata("y"), {})],
            f"member {ABSOLUTE_NAME!r}",
            f"name is absolute; read as '/{SITE}/y-1.0.dist-info/METADATA' "
            "(inside the root, as containerd and moby do)",
        ),
        (
            [("..\\..\\etc\\cron.d\\x", b"* * * * * root sh\n", {})],
            "member '..\\\\..\\\\etc\\\\cron.d\\\\x'",
            "name holds a backslash that climbs out or starts at a root where '\\' separates "
            "paths; read as '/..\\\\..\\\\etc\\\\cron.d\\\\x', one literal name, as Linux "
            "runtimes do",
        ),
        (
            [("etc/plain", b"", {"path": "etc/hidden\0.pth"})],
            "member 'etc/hidden\\x00.pth'",
            "name holds a NUL (a PAX path record, which runtimes refuse); "
            "read as '/etc/hidden\\x00.pth'",
        ),
    ],
    ids=["dotdot", "absolute", "backslash", "nul"],
)
def test_unsafe_name_makes_the_audit_incomplete(
    tmp_path: Path, entries: list[Entry], member: str, why: str
) -> None:
    """The table and the JSON name the layer, the step and the member (NUL and backslash
    visible through !r); exit 1, and 0 with --allow-incomplete."""
    ref, (digest,) = _layout(tmp_path, [_tar(entries)])
    what = f"layer {digest} (step 1): {member}"
    code, out = cli("audit", ref, "--no-cache")
    assert code == 1
    assert f"incomplete: {what}: {why}" in " ".join(out.split())
    code, out = cli("audit", ref, "--no-cache", "--format", "json")
    assert code == 1
    report = json.loads(out)
    assert report["incomplete"] == [{"what": what, "why": why}]
    assert report["verdict"] == "fail"
    # the backslash and NUL layers hold no Python at all: that status is allowed separately
    assert cli("audit", ref, "--no-cache", "--allow-incomplete", "--allow-no-python")[0] == 0


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_output_format_fails_on_a_flagged_name(tmp_path: Path, fmt: str) -> None:
    """Exit 1 in every format (0 with --allow-incomplete); every format but the table (which
    wraps it) names the layer and step in one piece, the SBOMs too."""
    ref, (digest,) = _layout(tmp_path, [_tar([(DOTDOT_NAME, _metadata("x"), {})])])
    code, out = cli("audit", ref, "--no-cache", "--format", fmt)
    assert code == 1
    if fmt != "table":
        assert f"layer {digest} (step 1): member" in out
    assert cli("audit", ref, "--no-cache", "--format", fmt, "--allow-incomplete")[0] == 0


def test_dotdot_and_absolute_metadata_is_placed_inside_the_root(tmp_path: Path) -> None:
    """A METADATA stored under '../' or '/' is still listed where containerd puts it."""
    ref, _ = _layout(
        tmp_path,
        [_tar([(DOTDOT_NAME, _metadata("x"), {}), (ABSOLUTE_NAME, _metadata("y"), {})])],
    )
    result = audit_image(ref)
    assert _names(result) == ["x", "y"]
    assert [e.path for e in result.snapshots[-1].environments] == [f"/{SITE}"]
    assert result.verdict(None) == "fail"
    assert result.verdict(None, allow_incomplete=True) == "pass"


def test_nul_in_a_pax_linkpath_is_flagged(tmp_path: Path) -> None:
    """A symlink whose PAX linkpath holds a NUL is named by its member name."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("usr/lib/libx.so")
        info.type = tarfile.SYMTYPE
        info.linkname = "libx.so.1"
        info.pax_headers = {"linkpath": "libx.so.1\0/../../etc/shadow"}
        tar.addfile(info)
    ref, (digest,) = _layout(tmp_path, [buf.getvalue()])
    code, out = cli("audit", ref, "--no-cache", "--format", "json")
    assert code == 1
    assert json.loads(out)["incomplete"] == [
        {
            "what": f"layer {digest} (step 1): member 'usr/lib/libx.so'",
            "why": "link target holds a NUL (a PAX linkpath record, which runtimes refuse); "
            "read as '/usr/lib/libx.so'",
        }
    ]


def test_the_same_path_twice_is_flagged_with_its_count(tmp_path: Path) -> None:
    """METADATA stored twice ('./' spelling the second time) and RECORD three times: both
    named with their counts; the later METADATA is the one listed, as extraction keeps it."""
    meta = f"{SITE}/z-1.0.dist-info/METADATA"
    record = f"{SITE}/z-1.0.dist-info/RECORD"
    entries: list[Entry] = [
        (meta, _metadata("z", "1.0"), {}),
        (record, b"", {}),
        (f"./{meta}", _metadata("z", "2.0"), {}),
        (record, b"", {}),
        (record, b"", {}),
    ]
    ref, (digest,) = _layout(tmp_path, [_tar(entries)])
    code, out = cli("audit", ref, "--no-cache", "--format", "json")
    assert code == 1
    report = json.loads(out)
    assert report["incomplete"] == [
        {
            "what": f"layer {digest} (step 1): path '/{meta}'",
            "why": "2 members of the layer have this path; a runtime keeps the last",
        },
        {
            "what": f"layer {digest} (step 1): path '/{record}'",
            "why": "3 members of the layer have this path; a runtime keeps the last",
        },
    ]
    (env,) = audit_image(ref).snapshots[-1].environments
    assert [(d.name, d.raw_version) for d in env.distributions] == [("z", "2.0")]
    code, out = cli("audit", ref, "--no-cache")
    assert code == 1
    assert f"incomplete: layer {digest} (step 1): path '/{record}': 3 members" in " ".join(
        out.split()
    )


def test_a_directory_twice_is_merged_but_a_directory_and_a_file_clash(tmp_path: Path) -> None:
    """Runtimes merge two directory entries ('usr/' and './usr'), so they are not flagged;
    a file and a directory at one path replace each other, so they are."""
    entries: list[Entry] = [
        ("usr", None, {}),
        ("./usr/", None, {}),
        (f"{SITE}/w-1.0.dist-info", None, {}),
        (f"{SITE}/w-1.0.dist-info/METADATA", _metadata("w"), {}),
        (f"{SITE}/w-1.0.dist-info", b"now a file", {}),
        ("./", None, {}),
        (".", None, {}),  # the root itself, twice: runtimes skip it
    ]
    ref, (digest,) = _layout(tmp_path, [_tar(entries)])
    result = audit_image(ref)
    assert [(i.what, i.why) for i in result.incomplete] == [
        (
            f"layer {digest} (step 1): path '/{SITE}/w-1.0.dist-info'",
            "2 members of the layer have this path; a runtime keeps the last",
        )
    ]


def test_flags_of_layers_analysed_in_worker_processes_name_their_steps(tmp_path: Path) -> None:
    """Two flagged layers read by two worker processes: each flag comes back (pickled) and
    is named with its own layer and step."""
    ref, digests = _layout(
        tmp_path,
        [_tar([("/etc/one", b"1", {})]), _tar([("etc/../etc/two", b"2", {})])],
    )
    result = audit_image(ref, options=AuditOptions(jobs=2))
    assert [i.what for i in result.incomplete] == sorted(  # sorted by what, as reported
        [
            f"layer {digests[0]} (step 1): member '/etc/one'",
            f"layer {digests[1]} (step 2): member 'etc/../etc/two'",
        ]
    )


def test_the_same_path_in_two_layers_is_not_a_duplicate(tmp_path: Path) -> None:
    """A later layer replacing a file is how images work: only repeats within one layer count."""
    meta = f"{SITE}/v-1.0.dist-info/METADATA"
    ref, _ = _layout(
        tmp_path, [layer_tar({meta: _metadata("v")}), layer_tar({meta: _metadata("v", "1.1")})]
    )
    code, out = cli("audit", ref, "--no-cache", "--format", "json")
    assert code == 0, out
    assert json.loads(out)["incomplete"] == []


def test_an_ordinary_layer_has_no_flags(tmp_path: Path) -> None:
    """Directories for every parent, './' names, a backslash file name like Debian's systemd
    ships, whiteouts and links: nothing flagged, the audit passes."""
    files = {
        f"{SITE}/u-1.0.dist-info/METADATA": _metadata("u"),
        f"{SITE}/u-1.0.dist-info/RECORD": b"",
        "lib/systemd/system/system-systemd\\x2dcryptsetup.slice": b"[Unit]\n",
        "etc/a..b": b"",
    }
    tar = layer_tar(files, whiteouts=[f"{SITE}/.wh.old-1.0.dist-info"], parents=True)
    blob = io.BytesIO(tar)
    analysis = analyze_stream(blob, digest=None, size=None, select=lambda p: CAPTURE)
    assert analysis.name_flags == []
    ref, _ = _layout(tmp_path, [tar])
    code, out = cli("audit", ref, "--no-cache", "--format", "json")
    assert code == 0, out
    assert json.loads(out)["incomplete"] == []


def test_the_walk_flags_exactly_what_see_flags() -> None:
    """The walk's inlined check (``MemberNames.see`` for the usual member) flags the same
    names as ``see`` itself, for canonical, re-spelled, unsafe and repeated names."""
    stored: list[tuple[str, bool]] = [
        ("usr/x", False),
        ("./usr/x", False),  # the same path again
        ("usr//y", False),
        ("usr/y/", True),  # a directory after a file: a clash
        ("usr/d/", True),
        ("usr/./d/", True),  # two directories: merged
        ("usr/../usr/z", False),
        ("/usr/w", False),
        ("usr/a\\b", False),
        ("usr\\..\\c", False),
        ("usr/e..f", False),
    ]
    expected = MemberNames()
    for name, directory in stored:
        expected.see(name, normalize(name), directory)
    entries: list[Entry] = [(n, None if d else b"x", {}) for n, d in stored]
    tar = _tar(entries)
    analysis = analyze_stream(io.BytesIO(tar), digest=None, size=None, select=lambda p: SKIP)
    assert analysis.name_flags == expected.flags()
    assert {f.rule for f in analysis.name_flags} == {DOTDOT, ABSOLUTE, BACKSLASH, DUPLICATE}


def test_flags_are_capped_and_the_rest_counted() -> None:
    """More '..' names, or repeated paths, than ``LIMIT``: that many listed, the rest counted."""
    extra = 7
    tar = _tar([(f"../x{i:05}", b"", {}) for i in range(LIMIT + extra)])
    analysis = analyze_stream(io.BytesIO(tar), digest=None, size=None, select=lambda p: SKIP)
    flags = analysis.name_flags
    assert len(flags) == LIMIT + 1
    assert flags[0] == NameFlag(DOTDOT, "../x00000", "/x00000")
    assert flags[-1] == NameFlag(MORE, "unsafe names", "", extra)
    assert flags[-1].why() == f"{extra} more unsafe names in this layer (the first 100 are listed)"
    once: list[Entry] = [(f"etc/f{i:05}", b"", {}) for i in range(LIMIT + extra)]
    twice = once * 2
    analysis = analyze_stream(
        io.BytesIO(_tar(twice)), digest=None, size=None, select=lambda p: SKIP
    )
    flags = analysis.name_flags
    assert len(flags) == LIMIT + 1
    assert flags[0] == NameFlag(DUPLICATE, "/etc/f00000", "/etc/f00000", 2)
    assert flags[-1] == NameFlag(MORE, "repeated paths", "", extra)


# --- the cache -------------------------------------------------------------------------------


def test_flags_round_trip_through_the_cache(tmp_path: Path) -> None:
    """Flags with NUL, backslash and undecodable bytes come back from a cache entry equal,
    and a second audit served from the cache reports the same incomplete entries."""
    flags = [
        NameFlag(NUL, "etc/a\0b", "/etc/a\0b"),
        NameFlag(BACKSLASH, "..\\x", "/..\\x"),
        NameFlag(DOTDOT, "../caf\udce9", "/caf\udce9"),
        NameFlag(LINK_NUL, "l", "/l"),
        NameFlag(DUPLICATE, "/d", "/d", 4),
        NameFlag(MORE, "", "", 12),
    ]
    digest = "sha256:" + hashlib.sha256(b"layer").hexdigest()
    cache = LocalCache(tmp_path / "unit", "k", ())
    cache.put(LayerAnalysis(digest=digest, name_flags=flags))
    back = cache.get(digest)
    assert back is not None
    assert back.name_flags == sorted(flags)

    ref, (layer,) = _layout(tmp_path, [_tar([(DOTDOT_NAME, _metadata("x"), {})])])
    options = AuditOptions(cache_dir=tmp_path / "cache")
    cold = audit_image(ref, options=options)
    (entry,) = (tmp_path / "cache").glob("sha256-*.entry")
    entry_flags = json.loads(entry.read_text())["analysis"]["name_flags"]
    assert entry_flags == [[DOTDOT, DOTDOT_NAME, f"/{SITE}/x-1.0.dist-info/METADATA", 1]]
    blob = tmp_path / "layout" / "blobs" / "sha256" / layer.removeprefix("sha256:")
    blob.unlink()  # the warm audit can only have the layer from the cache
    warm = audit_image(ref, options=options)
    assert warm.incomplete == cold.incomplete
    assert len(warm.incomplete) == 1


def _links_tar(links: Sequence[tuple[str, bytes, str]]) -> bytes:
    """A layer of a site-packages METADATA plus (name, tar type, target) link members."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        data = _metadata("x")
        info = tarfile.TarInfo(f"{SITE}/x-1.0.dist-info/METADATA")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for name, kind, target in links:
            link = tarfile.TarInfo(name)
            link.type, link.linkname = kind, target
            tar.addfile(link)
    return buf.getvalue()


@pytest.mark.parametrize("target", ["../../../etc/shadow", "/etc/shadow", "etc/../../x"])
def test_hard_link_whose_target_climbs_out_is_flagged(tmp_path: Path, target: str) -> None:
    """A hard link names a path in the layer: one with '..' or a leading '/' is flagged
    (moby refuses it), naming the member and the target as stored."""
    ref, (digest,) = _layout(tmp_path, [_links_tar([("etc/passwd-", tarfile.LNKTYPE, target)])])
    code, out = cli("audit", ref, "--no-cache", "--format", "json")
    assert code == 1
    assert json.loads(out)["incomplete"] == [
        {
            "what": f"layer {digest} (step 1): member 'etc/passwd-'",
            "why": f"hard link to {target!r}, a target with a '..' component or a leading '/' "
            "(containerd clamps it inside the root; moby refuses a hard link that climbs out)",
        }
    ]


def test_relative_symlinks_and_plain_hard_links_are_not_flagged(tmp_path: Path) -> None:
    """'..' is how relative symlinks are written; a hard link to a plain path is ordinary."""
    ref, _ = _layout(
        tmp_path,
        [
            _links_tar(
                [
                    ("usr/lib/libx.so", tarfile.SYMTYPE, "../../opt/lib/libx.so.1"),
                    ("usr/bin/py", tarfile.SYMTYPE, "/usr/bin/python3.11"),
                    ("usr/bin/perl5", tarfile.LNKTYPE, "usr/bin/perl"),
                ]
            )
        ],
    )
    code, out = cli("audit", ref, "--no-cache", "--format", "json")
    assert json.loads(out)["incomplete"] == []
    assert code == 0


def test_spilled_runs_give_the_same_flags_and_opaque_directories(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With spilling every 8 members past 32 held paths, a 600-member layer (files repeated,
    directories repeated, a directory that is also a file, a 201st repeat, an opaque marker
    in a directory the layer makes) gives the flags and ``opaque_made`` it gives held in
    memory, and it did spill into several runs."""
    entries: list[Entry] = []
    for i in range(120):
        entries.append((f"usr/lib/d{i:03d}/", None, {}))
        entries.append((f"usr/lib/d{i:03d}/f", b"x", {}))
    for i in range(110):  # 110 files stored twice: past LIMIT, so a ``more`` flag too
        entries.append((f"usr/lib/d{i:03d}/f", b"y", {}))
    entries += [("usr/lib/d000/", None, {})] * 3  # directories merged: not flagged
    entries += [("usr/lib/d001/f/", None, {})]  # a directory where a file was: flagged
    entries += [("usr/lib/d002/.wh..wh..opq", b"", {}), ("opt/made/", None, {})]
    entries += [("opt/made/.wh..wh..opq", b"", {})]
    entries += [(f"var/x{i:03d}", b"z", {}) for i in range(600 - len(entries))]
    tar = _tar(entries)

    held = analyze_stream(io.BytesIO(tar), digest=None, size=None, select=lambda p: SKIP)
    runs: list[int] = []
    close = MemberNames.close

    def counting_close(self: MemberNames) -> None:
        runs.append(len(self._runs))
        close(self)

    monkeypatch.setattr(MemberNames, "close", counting_close)
    monkeypatch.setattr("pinguard.layers.names.SPILL_AT", 32)
    monkeypatch.setattr("pinguard.layers.tar._SPILL_MASK", 7)
    spilled = analyze_stream(io.BytesIO(tar), digest=None, size=None, select=lambda p: SKIP)
    assert runs[0] > 10
    assert spilled.name_flags == held.name_flags
    assert spilled.opaque_made == held.opaque_made == ["/opt/made", "/usr/lib/d002"]
    rules = [f.rule for f in spilled.name_flags]
    assert rules.count(DUPLICATE) == LIMIT
    assert MORE in rules
    assert "/usr/lib/d000" not in {f.name for f in spilled.name_flags}
    assert "/usr/lib/d001/f" in {f.name for f in spilled.name_flags}
